"""docs/adding-a-stage.md, followed on a real stage: a copy of the project gets a copy of the
connectivity stage under a new name, `lmc` (its folder with its plan, jobs, commands, tables,
figures, claims, settings, schema and cluster resources, every name rewritten; its rule file; its
name in the registry), and nothing else. The copy plans the stage into `rule all`, runs it, asks a
cluster for what its resources say, scores its claims, and reruns it on an edit of its job."""

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

STAGES = Path("src/intertwine/workflow/stages")
REGISTRY = STAGES / "__init__.py"
ORIGINAL, NEW = "connectivity", "lmc"
NEW_FOLDER, NEW_RULES = STAGES / NEW, Path("workflow/rules") / f"{NEW}.smk"
COPIED = (
    "src",
    "workflow",
    "config",
    "profiles",
)  # what the copy of the project holds besides environment.yml


def renamed(text: str) -> str:
    """``text`` of the connectivity stage with the new stage's names: its module paths, plan
    methods, config keys, commands, rules, tables, files and figures (every spelling of the
    stage's name), and its claims' ids (L1, L2, L3 become M1, M2, M3: ids are the scorecard's).
    The library's module the stage calls, ``intertwine.mode_connectivity``, keeps its name."""
    for old, new in (
        (ORIGINAL, NEW),
        (ORIGINAL.capitalize(), NEW.capitalize()),
        (ORIGINAL.upper(), NEW.upper()),
    ):
        text = re.sub(rf"(?<!mode_){old}", new, text)
    return re.sub(r'(Claim\(\s*)"L(\d)"', r'\1"M\2"', text)


def files(root: Path) -> dict[str, bytes]:
    """{path relative to root: contents} of the project's files (no caches, no runs)."""
    found = {}
    for folder in COPIED:
        for path in (root / folder).rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and ".snakemake" not in path.parts:
                found[str(path.relative_to(root))] = path.read_bytes()
    return found


def add_stage(root: Path) -> None:
    """What the guide says to do, done by a program: the folder copied with its names rewritten,
    the rule file likewise, the name added at the end of the registry's ``STAGES``."""
    shutil.copytree(root / STAGES / ORIGINAL, root / NEW_FOLDER, ignore=shutil.ignore_patterns("__pycache__"))
    for path in (root / NEW_FOLDER).iterdir():
        path.write_text(renamed(path.read_text()))
    (root / NEW_RULES).write_text(renamed((root / "workflow/rules" / f"{ORIGINAL}.smk").read_text()))
    text = (root / REGISTRY).read_text()
    assert '    "pullback",\n)' in text  # the end of STAGES, where the guide says to add the name
    (root / REGISTRY).write_text(text.replace('    "pullback",\n)', f'    "pullback",\n    "{NEW}",\n)'))


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A copy of the project with the copied stage added: (root, environment to run it in)."""
    root = tmp_path_factory.mktemp("project")
    shutil.copy(REPO / "environment.yml", root)
    for folder in COPIED:
        shutil.copytree(
            REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__", ".snakemake")
        )
    add_stage(root)
    # the environment's `intertwine` script and Snakemake, running the copy's package
    env = {"PYTHONPATH": str(root / "src"), "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
    return root, env


def test_a_stage_touches_its_rule_file_and_one_registry_line_outside_its_folder(project):
    """The plan, the scorecard (its order, settings, tables), the cluster's needs and the code
    identities find the stage in its folder: no other file of the project is edited."""
    root, _ = project
    before, after = files(REPO), files(root)
    touched = {path for path in set(before) | set(after) if before.get(path) != after.get(path)}
    outside = {path for path in touched if not path.startswith(f"{NEW_FOLDER}/")}
    assert outside == {str(NEW_RULES), str(REGISTRY)}
    registry = [
        line
        for line in after[str(REGISTRY)].decode().splitlines()
        if line not in before[str(REGISTRY)].decode().splitlines()
    ]
    assert registry == [f'    "{NEW}",']
    # the folder holds every part of the real stage, its claims and cluster resources among them
    parts = {path.rsplit("/", 1)[-1] for path in touched if path.startswith(f"{NEW_FOLDER}/")}
    assert parts == {path.name for path in (REPO / STAGES / ORIGINAL).iterdir() if path.is_file()}
    assert {"claims.py", "resources.py", "plan.py", "job.py", "schema.yaml"} <= parts


def test_the_guide_names_every_part_of_the_copied_stage_and_shows_its_code():
    """The guide's table of a stage's parts names each file of the connectivity folder, and each
    block of code it shows is in that stage's files (its folder or its rule file), word for word."""
    text = GUIDE.read_text()
    folder = REPO / STAGES / ORIGINAL
    for path in folder.iterdir():
        if path.is_file():
            assert f"`{path.name}`" in text, f"docs/adding-a-stage.md does not name {path.name}"
    sources = [path.read_text() for path in folder.iterdir() if path.is_file()]
    sources.append((REPO / "workflow/rules" / f"{ORIGINAL}.smk").read_text())
    blocks = re.findall(r"^```(?:python|snakemake)\n(.*?)^```$", text, re.M | re.S)
    assert len(blocks) == 3
    for block in blocks:
        assert any(block in source for source in sources), f"not in the connectivity stage's files:\n{block}"


def python(project, code: str) -> str:
    root, env = project
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


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
    """A config of two Myrtle members, no other stage, and the copied stage on their one pair
    (the tiny config's connectivity settings), run to the end."""
    config = yaml.safe_load(TINY.read_text())
    config["zoo"].update(
        seeds=2,
        seeds_per_variant={},
        pack_size_per_variant={},
        variants={"myrtle": config["zoo"]["variants"]["myrtle"]},
    )
    config["zoo"]["training"]["epochs"] = 1
    config[NEW] = config["connectivity"] | {"variants": ["myrtle"], "pairs": 1}
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


def test_the_stage_runs_in_rule_all_and_its_claims_are_scored(project, small):
    """`rule all` (the run of ``small``) made the stage's table and figures, planned in through
    the registry; the scorecard read its table and scored its claims under their own ids, after
    the stages before it in the registry."""
    root, _ = project
    table = pd.read_parquet(root / f"run/results/tables/{NEW}.parquet")
    assert set(table["variant"]) == {"myrtle"} and set(table["split"]) == {"train", "test"}
    assert table["loss"].notna().all()
    for figure in ("curves", "barriers"):
        assert (root / f"run/results/figures/{NEW}_{figure}.png").stat().st_size > 0
    log = (root / f"run/results/logs/{NEW}/myrtle/pair0.log").read_text().splitlines()[0]
    assert log.startswith(f"intertwine {NEW}-pair ")
    card = pd.read_csv(root / "run/results/tables/claims.csv").set_index("claim")
    assert {"M1", "M2", "M3", "L1", "L2", "L3"} <= set(card.index)
    # its claims read its table (M2 needs two widths of one architecture, and says so)
    assert all(card.loc[claim, "verdict"] != "not run" for claim in ("M1", "M3"))
    assert "needs lmc variants of one architecture at two or more widths" in card.loc["M2", "evidence"]
    for claim in ("L1", "L2", "L3"):  # the original's: not configured
        assert card.loc[claim, "evidence"] == "its stage is not in the config (needs connectivity)"
    ids = list(card.index)
    assert ids.index("L1") < ids.index("M1")  # the registry's order: the new stage is last


def test_the_cluster_asks_for_what_the_stages_resources_say(project, small):
    """The stage's rule asks for its own need (``resources.py``), the same as the original's for
    the same settings, found through the registry."""
    need = python(
        project,
        "import yaml\n"
        "from intertwine.workflow.cluster import JobNeeds, request\n"
        "from intertwine.workflow.config import check_config\n"
        "from intertwine.workflow.plan import Plan\n"
        f"config = yaml.safe_load(open({str(small)!r}))\n"
        f"config['connectivity'] = config[{NEW!r}]\n"
        "assert not check_config(config)\n"
        "needs = JobNeeds(Plan(config))\n"
        f"new, original = needs.{NEW}_pair(variant='myrtle'), needs.connectivity_pair(variant='myrtle')\n"
        "assert new == original and new.minutes > needs.light().minutes, (new, original)\n"
        "print(*request(new, config['cluster'], 1))\n",
    )
    mem_mb, runtime = map(int, need.split())
    dry = run(project, "-n", "--force", f"results/{NEW}/myrtle/pair0.parquet", config=small).stdout
    assert f"mem_mb={mem_mb}" in dry and f"runtime={runtime}" in dry


def test_editing_the_stages_job_reruns_it_and_what_reads_it_only(project, small):
    root, _ = project
    job = root / NEW_FOLDER / "job.py"
    original = job.read_text()
    assert planned(project, config=small) == {}
    try:
        job.write_text(original + "\n\nEDITED = 1  # reached by the job's code identity (the whole module)\n")
        assert planned(project, config=small) == {
            f"{NEW}_pair": 1,
            f"{NEW}_table": 1,
            f"{NEW}_figure": 1,
            "claims": 1,
            "all": 1,
        }
    finally:
        job.write_text(original)
