"""Every code block of the README and the docs runs (Python) or names what exists (shell): an
example cannot go stale. A page's Python blocks run in order in one namespace, in a directory
holding what `make run` leaves there (a data cache and two ResNet20 members, here tiny ones) and
the project's configs."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import torch

from intertwine.workflow import cli
from intertwine.workflow.job import Job
from intertwine.workflow.stages.zoo.job import train_member
from intertwine.workflow.zoo import save_checkpoint

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)


def blocks(page: Path, languages: tuple[str, ...]) -> list[str]:
    return [code for language, code in FENCE.findall(page.read_text()) if language in languages]


#: Pages whose Python blocks are excerpts of the project's own files, not programs: the stage guide
#: shows parts of the connectivity stage, which tests/test_adding_a_stage.py finds word for word in
#: that stage's files.
EXCERPTS = {"adding-a-stage.md"}
PYTHON_PAGES = [page for page in PAGES if blocks(page, ("python",)) and page.name not in EXCERPTS]
SHELL_PAGES = [page for page in PAGES if blocks(page, ("", "bash", "sh"))]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, write_shapes):
    """What `make run` leaves for the examples: results/data/shapes (32x32 images, as the examples
    read them) and two ResNet20 members."""
    root = tmp_path_factory.mktemp("examples")
    write_shapes(root / "results/data/shapes", train_size=320, test_size=128, val_size=64, image_size=32)
    torch.set_num_threads(1)
    job = Job("cpu", root / "results/data/shapes")
    spec = {"arch": "resnet20", "width_multiplier": 0.25}
    for seed in (0, 1):
        checkpoint, _ = train_member(job, "resnet20", seed, spec, {"epochs": 1, "batch_size": 64})
        save_checkpoint(checkpoint, root / f"results/zoo/resnet20/seed{seed}.pt")
    (root / "config").symlink_to(REPO / "config")
    return root


def test_the_pages_have_examples():
    assert REPO / "docs" / "library.md" in PYTHON_PAGES and REPO / "README.md" in SHELL_PAGES


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=[p.name for p in PYTHON_PAGES])
def test_python_examples_run(page, workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    namespace: dict = {"__name__": "__docs__"}
    for number, code in enumerate(blocks(page, ("python",)), start=1):
        exec(compile(code, f"{page.name}, Python block {number}", "exec"), namespace)


def commands(page: Path) -> list[list[str]]:
    """Each command line of the page's shell blocks, split as the shell would (comments dropped)."""
    out = []
    for code in blocks(page, ("", "bash", "sh")):
        for line in code.replace("\\\n", " ").splitlines():
            try:
                words = shlex.split(line, comments=True)
            except ValueError:  # not a command: prose or a config excerpt in a plain fence
                continue
            if words:
                out.append(words)
    return out


def check_commands(page: Path) -> int:
    """Assert that the `intertwine` commands of the page's shell blocks parse and the `make`
    targets, scripts, configs and profiles they name exist; the number of things checked."""
    parser = cli.build_parser()
    targets = set(re.findall(r"^([\w.-]+):", (REPO / "Makefile").read_text(), re.M))
    checked = 0
    for words in commands(page):
        program = {".venv/bin/intertwine": "intertwine"}.get(words[0], words[0])
        if program == "intertwine" and len(words) > 1:
            try:  # an unknown subcommand or option, or a missing argument, exits 2
                parser.parse_args(words[1:])
            except SystemExit as exit_:
                assert exit_.code == 0, (page.name, words)
            checked += 1
        if program == "make" and len(words) > 1:
            assert words[1] in targets, (page.name, words)
            checked += 1
        for word in (
            words[1:] if program in ("intertwine", "make", "snakemake", "python", ".venv/bin/python") else []
        ):
            if re.fullmatch(r"(benchmarks|config|profiles|tests|workflow)/[\w./-]+", word):
                assert (REPO / word).exists(), (page.name, word)
                checked += 1
    return checked


@pytest.mark.parametrize("page", SHELL_PAGES, ids=[p.name for p in SHELL_PAGES])
def test_shell_examples_name_what_exists(page):
    check_commands(page)


def test_the_command_check_reads_the_readme_and_sees_a_stale_command(tmp_path):
    assert check_commands(REPO / "README.md") >= 4  # make run, make test, check-config, the configs
    stale = tmp_path / "stale.md"
    for line in ("intertwine stich-pair --help", "make rn", "snakemake --configfile config/missing.yaml"):
        stale.write_text(f"```\n{line}\n```\n")
        with pytest.raises(AssertionError):
            check_commands(stale)
