"""docs/adding-a-stage.md, followed to the letter: its files added to a copy of the project (the
package, workflow/ with its Snakefile, rules and captions), its stage named in the registry, and the copy
plans the stage into `rule all`, runs it, reruns it on an edit of its job, and reports it."""

import re
import shutil
import subprocess
import sys

from pathlib import Path

import pandas as pd
import pytest
import yaml

pytestmark = pytest.mark.workflow

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "configs" / "tiny.yaml"

GUIDE = REPO / "docs" / "adding-a-stage.md"
FILE_BLOCK = re.compile(r"^`([\w/.-]+)`:\n\n```\w*\n(.*?)^```$", re.M | re.S)


def guide_files() -> dict[str, str]:
    """{path: text} of each file the guide shows whole (a path in backticks, a colon, its block),
    and the rule file and caption of its sections 3 and 4."""
    text = GUIDE.read_text()
    files = dict(FILE_BLOCK.findall(text))
    files["workflow/rules/params.smk"] = re.search(r"^```snakemake\n(.*?)^```$", text, re.M | re.S)[1]
    files["workflow/report/params.rst"] = re.search(r"^```rst\n(.*?)^```$", text, re.M | re.S)[1]
    return files


def test_the_guide_shows_every_part_of_a_stage():
    parts = {path.rsplit("/", 1)[-1] for path in guide_files() if "/stages/params/" in path}
    assert parts == {"__init__.py", "plan.py", "job.py", "figures.py", "commands.py"}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A copy of the project with the guide's stage added: (root, environment to run it in)."""
    root = tmp_path_factory.mktemp("project")
    shutil.copy(REPO / "environment.yml", root)
    for folder in ("workflow", "profiles", "config"):
        shutil.copytree(REPO / folder, root / folder)
    shutil.copytree(REPO / "src", root / "src", ignore=shutil.ignore_patterns("__pycache__"))
    for path, text in guide_files().items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    registry = root / "src/intertwine/workflow/stages/__init__.py"
    text = registry.read_text()
    assert '    "pullback",\n)' in text  # the end of STAGES, where the guide says to add the name
    registry.write_text(text.replace('    "pullback",\n)', '    "pullback",\n    "params",\n)'))
    # the environment's `intertwine` script and Snakemake, running the copy's package
    env = {"PYTHONPATH": str(root / "src"), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    return root, env


def run(project, *args, config=None, check=True):
    root, env = project
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(root / "workflow" / "Snakefile"),
        "-d",
        str(root / "run"),
    ]
    command += ["--configfile", str(config or TINY), "--cores", "2", *args]
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def planned(project, *args, config=None) -> dict[str, int]:
    text = run(project, *args, "-n", "--quiet", "rules", config=config).stdout
    if "Nothing to be done" in text:
        return {}
    return {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", text, re.M) if m[1] != "total"}


@pytest.fixture(scope="module")
def small(project, tmp_path_factory):
    """A config of two Myrtle members and no other stage, run to the end with the new stage."""
    config = yaml.safe_load(TINY.read_text())
    config["zoo"].update(
        seeds=2,
        seeds_per_variant={},
        pack_size_per_variant={},
        variants={"myrtle": config["zoo"]["variants"]["myrtle"]},
    )
    config["zoo"]["training"]["epochs"] = 1
    for stage in ("stitching", "similarity", "connectivity", "dissection", "gated", "pullback"):
        config[stage]["variants"] = []
    config["stitching"].update(sites={}, methods_per_variant={})
    config["rotation"]["variants"] = {}
    config["symmetry"]["seeds"] = 0
    config["deqntk"] = {}  # its defaults run nothing
    path = tmp_path_factory.mktemp("config") / "small.yaml"
    path.write_text(yaml.safe_dump(config))
    run(project, config=path)
    return path


def test_the_stage_runs_in_rule_all_and_writes_its_table_and_figure(project, small):
    """`rule all` (the run of ``small``) made the stage's outputs: it was planned in, through the
    registry, with a job per zoo member."""
    root, _ = project
    table = pd.read_parquet(root / "run/results/tables/params.parquet")
    assert sorted(table["seed"]) == [0, 1] and set(table["variant"]) == {"myrtle"}
    assert table["parameters"].nunique() == 1 and table["parameters"].iloc[0] > 1000
    assert (root / "run/results/figures/params.png").stat().st_size > 0
    log = (root / "run/results/logs/params/myrtle/seed0.log").read_text().splitlines()[0]
    assert log.startswith("intertwine params-member --checkpoint results/zoo/myrtle/seed0.pt")


def test_editing_the_stages_job_reruns_it_and_its_figure_only(project, small):
    root, _ = project
    job = root / "src/intertwine/workflow/stages/params/job.py"
    original = job.read_text()
    try:
        job.write_text(original.replace('"parameters": count}', '"parameters": count + 0}'))
        assert planned(project, config=small) == {"params_member": 2, "params_figure": 1, "all": 1}
    finally:
        job.write_text(original)


def test_the_report_shows_the_stages_figure_with_its_caption(project, small):
    root, _ = project
    run(project, "--report", str(root / "run/report.html"), config=small)
    report = (root / "run/report.html").read_text()
    assert "params.png" in report and "toy stage of docs/adding-a-stage.md" in report
