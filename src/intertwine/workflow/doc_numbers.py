"""The numbers the documentation states about the shipped configs, computed from the configs.

A page writes such a number between markers naming it, ``<!-- number: paper.members -->2,076<!--
/number -->`` (invisible once rendered), and never types it: ``python -m
intertwine.workflow.doc_numbers README.md docs/*.md`` rewrites every marked number from the config it
names, and tests/test_docs.py fails when a page differs. A name is ``<config>.<quantity>``: the
config is a file of ``config/`` without its suffix (``config`` for the default, ``paper``,
``cifar10_cpu``); the quantities are ``variants``, ``members`` (the zoo's trained networks),
``seeds`` (the range of members per variant), ``epochs`` (the zoo's) and ``jobs`` (what a dry run of
the config plans, ``snakemake -n``: the one quantity that needs Snakemake, seconds to a minute).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

#: ``<!-- number: NAME -->VALUE<!-- /number -->``
NUMBER = re.compile(r"(<!-- number: (?P<name>[\w.]+) -->)(?P<value>.*?)(<!-- /number -->)")
QUANTITIES = ("variants", "members", "seeds", "epochs", "jobs")
REPO = Path(__file__).resolve().parents[3]


def config_path(name: str, root: Path = REPO) -> Path:
    """The shipped config a number names (``paper`` -> ``config/paper.yaml``)."""
    path = root / "config" / f"{name}.yaml"
    if not path.is_file():
        raise ValueError(f"a documented number names config {name!r}, but {path} does not exist")
    return path


def zoo_numbers(path: Path) -> dict[str, str]:
    """``variants``, ``members``, ``seeds`` and ``epochs`` of a config's zoo, as the docs write them."""
    from intertwine.workflow.config import check_config, load_config
    from intertwine.workflow.plan import Plan

    config = load_config([path])
    errors = check_config(config)
    if errors:
        raise ValueError(f"{path}: " + "; ".join(errors))
    plan = Plan(config)
    members = [len(plan.zoo_seeds(variant)) for variant in plan.variants]
    low, high = min(members), max(members)
    return {
        "variants": f"{len(members):,}",
        "members": f"{sum(members):,}",
        "seeds": f"{low:,}" if low == high else f"{low:,}-{high:,}",
        "epochs": f"{config['zoo']['training']['epochs']:,}",
    }


def planned_jobs(path: Path) -> int:
    """The jobs a dry run of the config plans from nothing (``snakemake -n``, in an empty folder)."""
    with tempfile.TemporaryDirectory() as workdir:
        result = subprocess.run(
            [sys.executable, "-m", "snakemake", "-s", str(REPO / "workflow" / "Snakefile"), "-d", workdir]
            + ["--configfile", str(path), "-n", "--quiet", "rules"],
            capture_output=True,
            text=True,
            check=True,
        )
    total = re.search(r"^total\s+(\d+)$", result.stdout + result.stderr, re.M)
    if total is None:
        raise RuntimeError(f"no job count in the dry run of {path}:\n{result.stdout[-2000:]}")
    return int(total[1])


def value(name: str, root: Path = REPO, jobs=planned_jobs) -> str:
    """The text of documented number ``name`` (``paper.members``)."""
    config, _, quantity = name.rpartition(".")
    if quantity not in QUANTITIES or not config:
        raise ValueError(
            f"documented number {name!r}: write <config>.<quantity>, one of {', '.join(QUANTITIES)}"
        )
    path = config_path(config, root)
    if quantity == "jobs":
        return f"{jobs(path):,}"
    return zoo_numbers(path)[quantity]


def names(page: str) -> list[str]:
    """The numbers a page states, by name, in order."""
    return [match["name"] for match in NUMBER.finditer(page)]


def stated(pages: list[Path]) -> dict[str, set[str]]:
    """{name: the texts the pages give it} of every marked number of ``pages``."""
    found: dict[str, set[str]] = {}
    for page in pages:
        for match in NUMBER.finditer(page.read_text()):
            found.setdefault(match["name"], set()).add(match["value"])
    return found


def refresh(page: str, values: dict[str, str]) -> str:
    """``page`` with each marked number rewritten from ``values`` (name -> text)."""
    return NUMBER.sub(lambda m: f"{m[1]}{values[m['name']]}{m[4]}", page)


if __name__ == "__main__":
    # python -m intertwine.workflow.doc_numbers README.md docs/*.md
    pages = {Path(name): Path(name).read_text() for name in sys.argv[1:]}
    wanted = sorted({name for text in pages.values() for name in names(text)})
    values = {name: value(name) for name in wanted}
    for path, text in pages.items():
        path.write_text(refresh(text, values))
