"""The library installs and imports without the workflow engine (issue 55): `pip install intertwine`
is torch, torchvision, numpy and scipy; `intertwine[workflow]` adds Snakemake, its SLURM plugin,
pandas, pyarrow, matplotlib, PyYAML and jsonschema. Every third-party package the source imports is
declared where its module is installed, the package says it is typed, and its version is written
once."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from intertwine.workflow.cli import WORKFLOW_PACKAGES
from test_layout import ALLOWED, ENTRY_POINTS, PACKAGE, WORKFLOW, every_import

REPO = PACKAGE.parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
#: The import name of each declared distribution whose name differs from it.
IMPORT_NAMES = {"pillow": "PIL", "pyyaml": "yaml", "snakemake-executor-plugin-slurm": None}


def declared(requirements: list[str]) -> set[str]:
    """The import names of the distributions a list of requirements names."""
    names = set()
    for requirement in requirements:
        distribution = requirement.split(";")[0].split("[")[0]
        for mark in "<>=!~ ":
            distribution = distribution.split(mark)[0]
        name = IMPORT_NAMES.get(distribution.lower(), distribution.replace("-", "_"))
        if name is not None:
            names.add(name)
    return names


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_workflow(name: str) -> bool:
    return name == WORKFLOW or name.startswith(WORKFLOW + ".")


def third_party(path: Path) -> set[str]:
    """The top-level names of the packages outside the standard library ``path`` imports."""
    tops = {name.split(".")[0] for name in every_import(path) if name}
    return {top for top in tops if top != "intertwine" and top not in sys.stdlib_module_names}


def library_modules() -> list[str]:
    """Every module of the library, less the adapters whose own packages are an extra's:
    ``intertwine.attribution`` ([attribution]: Captum imports matplotlib), the entry point that runs
    and the workflow's command line."""
    names = sorted(module_name(path) for path in PACKAGE.rglob("*.py"))
    excluded = {*ALLOWED, *ENTRY_POINTS}
    return [name for name in names if not is_workflow(name) and name not in excluded]


BLOCKER = """
import importlib.abc, sys
BLOCKED = {blocked!r}
class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (blocked: not installed)", name=name)
        return None
sys.meta_path.insert(0, Blocker())
import importlib
for name in {modules!r}:
    importlib.import_module(name)
leaked = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
assert not leaked, leaked
try:
    importlib.import_module({workflow_module!r})
except ModuleNotFoundError as err:
    print("workflow refused:", err.name)
print("imported", len({modules!r}))
from intertwine.workflow.cli import main
main(["check-config", "config/config.yaml"])
"""


def test_every_library_module_imports_without_the_workflow_packages():
    """A subprocess in which importing Snakemake, pandas, pyarrow, matplotlib, PyYAML or jsonschema
    fails, as in an environment with `pip install intertwine` alone, imports every library module;
    the workflow's table module, which needs pandas, does not import there (the blocker bites),
    and the `intertwine` command says what to install."""
    modules = library_modules()
    assert len(modules) > 50 and "intertwine.measures" in modules and "intertwine.data.cifar10" in modules
    script = BLOCKER.format(blocked=WORKFLOW_PACKAGES, modules=modules, workflow_module=f"{WORKFLOW}.tables")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO)
    assert f"imported {len(modules)}" in result.stdout, result.stderr[-3000:]
    assert "workflow refused: " in result.stdout
    # the command line says what to install instead of a traceback
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert (
        "the workflow's commands need its packages; install them with pip install 'intertwine[workflow]'"
        in result.stderr
    )


def test_every_imported_package_is_declared_where_its_module_is_installed():
    """The library's third-party imports are its dependencies (an adapter's: its extra's, a
    module awaiting its move: the workflow's), and the workflow's are those or the workflow
    extra's: jsonschema was imported by the workflow and declared nowhere."""
    project = PYPROJECT["project"]
    base = declared(project["dependencies"])
    extras = {name: declared(requirements) for name, requirements in project["optional-dependencies"].items()}
    assert not base & set(WORKFLOW_PACKAGES), "the library's dependencies hold a workflow package"
    undeclared = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        name = module_name(path)
        if is_workflow(name) or name in ENTRY_POINTS:
            allowed = base | extras["workflow"]
        elif name in ALLOWED:
            allowed = base | extras["attribution"]
        else:
            allowed = base
        missing = third_party(path) - allowed
        if missing:
            undeclared[name] = sorted(missing)
    assert undeclared == {}
    assert "jsonschema" in extras["workflow"] and "snakemake" in extras["workflow"]
    assert extras["workflow"] <= declared(project["optional-dependencies"]["workflow"])
    assert any(
        r.startswith("intertwine[") and "workflow" in r for r in project["optional-dependencies"]["dev"]
    )


def test_the_environments_install_the_workflow():
    """`make .venv`, conda's environment.yml and CI (which runs `make test`) install the workflow
    extra, so nothing the workflow imports is missing there."""
    assert "-e '.[workflow,dev]'" in (REPO / "Makefile").read_text()
    assert "-e .[workflow,dev]" in (REPO / "environment.yml").read_text()
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_the_package_is_typed_and_its_version_written_once():
    from intertwine import __version__

    assert (PACKAGE / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["intertwine"]
    assert "version" not in PYPROJECT["project"] and "version" in PYPROJECT["project"]["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "intertwine.__version__"}
    assert not re.search(r"^version:", (REPO / "CITATION.cff").read_text(), re.M)
    assert __version__.count(".") == 2
