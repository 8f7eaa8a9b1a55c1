"""The wall times of the README's commands, measured, never typed: each `make` target run in a fresh
clone of a commit under /usr/bin/time, one row per target appended to benchmarks/command_times.csv,
and the README's generated block rewritten from that file.

    python benchmarks/command_times.py                    # make .venv, run and test at HEAD
    python benchmarks/command_times.py --commit 9e4f401 test
    python benchmarks/command_times.py --readme-only      # the README's block from the file

The targets run in the order given, in one clone, so `.venv` (the install) is timed apart from the
`run` and `test` that follow it. Run it on a machine doing nothing else: the wall clock is what a
user waits, and a busy host inflates it. Each target's output goes to a log beside the clone,
kept for a failed target.
"""

import argparse
import csv
import re
import shutil
import subprocess
import tempfile
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIMES = REPO / "benchmarks" / "command_times.csv"
README = REPO / "README.md"
COLUMNS = ["date", "commit", "target", "wall_s", "user_s", "sys_s", "exit_code"]
# The README's generated block: its opening marker names the file it is read from.
BLOCK = re.compile(
    r"<!-- command-times: (?P<file>\S+) -->\n(?P<body>.*?)<!-- /command-times -->\n", re.DOTALL
)
# What /usr/bin/time writes to its -o file with TIME_FORMAT: wall, user and system seconds.
TIME_FORMAT = "%e %U %S"


def time_target(clone: Path, target: str, log: Path) -> dict[str, str]:
    """Run `make <target>` in ``clone`` under /usr/bin/time; its row of the times file (no date or
    commit). The target's own output goes to ``log``."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as measured, log.open("w") as output:
        status = subprocess.run(
            ["/usr/bin/time", "-o", measured.name, "-f", TIME_FORMAT, "make", "-C", str(clone), target],
            check=False,
            stdout=output,
            stderr=subprocess.STDOUT,
        ).returncode
        # /usr/bin/time prefixes "Command exited with non-zero status N" on a failure: the last line holds the times
        wall, user, system = measured.read().strip().splitlines()[-1].split()
    return {"target": target, "wall_s": wall, "user_s": user, "sys_s": system, "exit_code": str(status)}


def fresh_clone(source: Path, commit: str, into: Path) -> str:
    """Clone ``source`` into ``into`` and check out ``commit``; its full hash."""
    subprocess.run(["git", "clone", "--quiet", str(source), str(into)], check=True)
    subprocess.run(["git", "-C", str(into), "checkout", "--quiet", "--detach", commit], check=True)
    return subprocess.run(
        ["git", "-C", str(into), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()


def read_times(path: Path) -> list[dict[str, str]]:
    """The rows of the times file, checked: its columns, each number, each commit a hash."""
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        if reader.fieldnames != COLUMNS:
            raise ValueError(f"{path}: columns {reader.fieldnames}, expected {COLUMNS}")
        rows = list(reader)
    for number, row in enumerate(rows, start=2):
        datetime.fromisoformat(row["date"])
        if not re.fullmatch(r"[0-9a-f]{40}", row["commit"]):
            raise ValueError(f"{path}, line {number}: commit {row['commit']!r} is not a full git hash")
        for column in ("wall_s", "user_s", "sys_s"):
            float(row[column])
        int(row["exit_code"])
    return rows


def append_times(path: Path, rows: list[dict[str, str]]) -> None:
    """Add ``rows`` to the times file (written whole to a temporary file, then moved over it)."""
    every = read_times(path) + rows
    partial = path.with_suffix(".csv.partial")
    with partial.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(every)
    partial.replace(path)


def minutes(seconds: str) -> str:
    whole = round(float(seconds))
    return f"{whole // 60} min {whole % 60:02d} s"


def block_body(rows: list[dict[str, str]]) -> str:
    """The README's block, one line: the latest measurement of each target, with its commit and date."""
    if not rows:
        return "Wall times not measured yet: `python benchmarks/command_times.py` times the commands.\n"
    latest = {row["target"]: row for row in rows}  # the file is in the order measured
    times = []
    for target, row in latest.items():
        failed = f", failed with exit {row['exit_code']}" if row["exit_code"] != "0" else ""
        times.append(
            f"`make {target}` {minutes(row['wall_s'])} ({row['commit'][:7]}, {row['date'][:10]}{failed})"
        )
    return f"Wall times in a fresh clone on 2 CPU cores, measured by `benchmarks/command_times.py`: {', '.join(times)}.\n"


def refresh_readme(text: str, root: Path) -> str:
    """``text`` with each command-times block rewritten from the file its marker names."""

    def fill(match: re.Match) -> str:
        body = block_body(read_times(root / match["file"]))
        return f"<!-- command-times: {match['file']} -->\n{body}<!-- /command-times -->\n"

    return BLOCK.sub(fill, text)


def write_readme(readme: Path, root: Path) -> None:
    text = readme.read_text()
    if not BLOCK.search(text):
        raise SystemExit(f"{readme} has no <!-- command-times: FILE --> ... <!-- /command-times --> block")
    partial = readme.with_suffix(".md.partial")
    partial.write_text(refresh_readme(text, root))
    partial.replace(readme)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*", default=[".venv", "run", "test"], help="make targets, in order")
    parser.add_argument("--commit", default="HEAD", help="the commit to clone (default HEAD)")
    parser.add_argument("--repo", type=Path, default=REPO, help="the repository to clone (default this one)")
    parser.add_argument("--times", type=Path, default=TIMES, help="the times file rows are added to")
    parser.add_argument("--readme", type=Path, default=README, help="the page whose block is rewritten")
    parser.add_argument("--workdir", type=Path, help="where the clone goes (default a temporary folder)")
    parser.add_argument("--readme-only", action="store_true", help="rewrite the block only, time nothing")
    args = parser.parse_args()
    root = args.readme.resolve().parent
    if not args.readme_only:
        workdir = Path(tempfile.mkdtemp(prefix="command-times-", dir=args.workdir))
        # mkdtemp makes it private (0700); the suite's tests that run as another user (the
        # "real user" cases of tests/test_data_damage.py) must reach the clone's .venv, as in a
        # clone anywhere else.
        workdir.chmod(0o755)
        clone = workdir / "clone"
        commit = fresh_clone(args.repo, args.commit, clone)
        date = datetime.now(UTC).isoformat(timespec="seconds")
        rows = []
        for target in args.targets:
            log = workdir / f"make-{target.strip('.')}.log"
            row = {"date": date, "commit": commit} | time_target(clone, target, log)
            print(f"make {target}: {row['wall_s']} s wall, exit {row['exit_code']} (log {log})", flush=True)
            rows.append(row)
            if row["exit_code"] != "0":
                break  # the targets after a failed one would time a broken clone
        append_times(args.times, rows)
        if all(row["exit_code"] == "0" for row in rows):
            shutil.rmtree(workdir)
    write_readme(args.readme, root)


if __name__ == "__main__":
    main()
