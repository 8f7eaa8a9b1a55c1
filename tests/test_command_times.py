"""benchmarks/command_times.py: the README's wall times come from its measurements, never typed. The
script is run here on a tiny target of a throwaway repository; the real commands are not re-timed."""

import csv
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "command_times.py"
_spec = importlib.util.spec_from_file_location("command_times", SCRIPT)
command_times = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(command_times)

MAKEFILE = """\
nap:
\tsleep 0.3
\ttest -f Makefile
broken:
\texit 3
"""
BLOCK = "<!-- command-times: times.csv -->\nnot measured\n<!-- /command-times -->\n"


def test_readme_block_is_the_times_file():
    """The README's block is what the script writes from benchmarks/command_times.csv, whose rows
    have the script's columns, dates, full commit hashes and numbers."""
    text = (REPO / "README.md").read_text()
    assert command_times.BLOCK.search(text), "the README lost its generated command-times block"
    command_times.read_times(command_times.TIMES)
    assert command_times.refresh_readme(text, REPO) == text, (
        "the README's wall times differ from benchmarks/command_times.csv; regenerate the block with "
        "python benchmarks/command_times.py --readme-only (or measure: python benchmarks/command_times.py)"
    )


def test_a_typed_time_is_seen(tmp_path):
    row = {"date": "2026-11-28T16:00:00+00:00", "commit": "a" * 40, "target": "run"}
    row |= {"wall_s": "754.31", "user_s": "1200.0", "sys_s": "90.5", "exit_code": "0"}
    command_times.append_times(tmp_path / "times.csv", [row])
    written = command_times.refresh_readme(BLOCK, tmp_path)
    assert "`make run` 12 min 34 s (aaaaaaa, 2026-11-28)" in written
    typed = written.replace("12 min 34 s", "11 min 00 s")
    assert command_times.refresh_readme(typed, tmp_path) != typed
    assert command_times.refresh_readme(written, tmp_path) == written


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda row: row.update(commit="9e4f401"), "not a full git hash"),
        (lambda row: row.update(wall_s="about 15 minutes"), "could not convert"),
        (lambda row: row.update(date="yesterday"), "Invalid isoformat"),
    ],
)
def test_the_times_file_is_checked(tmp_path, change, message):
    row = {"date": "2026-11-28T16:00:00+00:00", "commit": "b" * 40, "target": "test"}
    row |= {"wall_s": "1.0", "user_s": "1.0", "sys_s": "0.1", "exit_code": "0"}
    change(row)
    path = tmp_path / "times.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, command_times.COLUMNS)
        writer.writeheader()
        writer.writerow(row)
    with pytest.raises(ValueError, match=message):
        command_times.read_times(path)


def git(repo: Path, *args: str) -> str:
    env = os.environ | {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env |= {"GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout


@pytest.fixture
def project(tmp_path):
    """A throwaway repository: a Makefile with a target that takes 0.3 s and one that fails, and a
    README with the block; the Makefile of the first commit has no targets."""
    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "--quiet")
    (repo / "Makefile").write_text("")
    git(repo, "add", "Makefile")
    git(repo, "commit", "--quiet", "-m", "no targets")
    (repo / "Makefile").write_text(MAKEFILE)
    (repo / "README.md").write_text(f"# project\n\n{BLOCK}\nmore\n")
    git(repo, "add", "Makefile", "README.md")
    git(repo, "commit", "--quiet", "-m", "targets")
    return repo


def measure(project, tmp_path, *args):
    command = [sys.executable, str(SCRIPT), "--repo", str(project), "--readme", str(project / "README.md")]
    command += ["--times", str(project / "times.csv"), "--workdir", str(tmp_path), *args]
    return subprocess.run(command, check=False, capture_output=True, text=True)


def test_the_script_times_a_target_in_a_fresh_clone_and_writes_the_block(project, tmp_path):
    result = measure(project, tmp_path, "nap", "nap")
    assert result.returncode == 0, result.stderr
    rows = command_times.read_times(project / "times.csv")
    head = git(project, "rev-parse", "HEAD").strip()
    assert [row["target"] for row in rows] == ["nap", "nap"]
    assert {row["commit"] for row in rows} == {head} and {row["exit_code"] for row in rows} == {"0"}
    assert all(0.3 <= float(row["wall_s"]) < 30 for row in rows)
    readme = (project / "README.md").read_text()
    assert f"`make nap` 0 min 00 s ({head[:7]}, {rows[0]['date'][:10]})." in readme
    assert readme.startswith(
        "# project\n\n<!-- command-times: times.csv -->\nWall times"
    ) and readme.endswith("more\n")
    assert command_times.refresh_readme(readme, project) == readme
    assert not list(tmp_path.glob("command-times-*")), "a clone whose targets all passed is removed"


def test_a_failed_target_is_recorded_and_stops_the_rest(project, tmp_path):
    first = git(project, "rev-list", "--max-parents=0", "HEAD").strip()
    # the first commit has no `nap`: timing it there fails, as in a clone of that commit it must
    assert measure(project, tmp_path, "--commit", first, "nap").returncode == 0
    assert measure(project, tmp_path, "broken", "nap").returncode == 0
    rows = command_times.read_times(project / "times.csv")
    assert [(row["target"], row["exit_code"]) for row in rows] == [("nap", "2"), ("broken", "2")]
    assert rows[0]["commit"] == first
    readme = (project / "README.md").read_text()
    assert f"`make nap` 0 min 00 s ({first[:7]}" in readme and "failed with exit 2" in readme
    logs = sorted(path.name for path in tmp_path.glob("command-times-*/*.log"))
    assert logs == ["make-broken.log", "make-nap.log"], "a failed target's log is kept"
    assert "exit 3" in next(tmp_path.glob("command-times-*/make-broken.log")).read_text()
