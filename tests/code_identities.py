"""The workflow's code identities shared by the test session's Snakemake runs.

Snakemake parses workflow/rules/common.smk for every run and dry run, and it follows the package's
source to each stage's code identity (``code_identity.code_identities``): about 2.5 CPU-seconds,
kept in the run folder's ``.snakemake/intertwine/`` in a file named by the hash of the package's
sources and of what was asked. The tests run Snakemake in a hundred fresh folders, so each would
compute it again: ``seed`` copies the session's files into a folder before a run and ``keep``
copies back what the run wrote. A file is read back only under its own name, that is for the same
sources and the same question (an edited copy of the package has other sources, so another name):
sharing them changes no identity, only when it is computed.
"""

import os
import shutil
from pathlib import Path

#: The environment variable naming the session's folder (set by conftest.py's session fixture).
FOLDER_VARIABLE = "INTERTWINE_TESTS_CODE_IDENTITIES"
IN_RUN_FOLDER = Path(".snakemake") / "intertwine"
PATTERN = "code-identity-*.json"


def _shared() -> Path | None:
    folder = os.environ.get(FOLDER_VARIABLE)
    return Path(folder) if folder else None


def seed(workdir: Path) -> None:
    """Copy the session's code identities into ``workdir`` before a Snakemake run there."""
    shared = _shared()
    if shared is None or not shared.is_dir():
        return
    target = Path(workdir) / IN_RUN_FOLDER
    for file in shared.glob(PATTERN):
        if not (target / file.name).exists():
            target.mkdir(parents=True, exist_ok=True)
            _copy(file, target / file.name)


def keep(workdir: Path) -> None:
    """Copy the code identities a Snakemake run computed in ``workdir`` into the session's folder."""
    shared = _shared()
    if shared is None:
        return
    shared.mkdir(parents=True, exist_ok=True)
    for file in (Path(workdir) / IN_RUN_FOLDER).glob(PATTERN):
        if not (shared / file.name).exists():
            _copy(file, shared / file.name)


def _copy(source: Path, target: Path) -> None:
    """Copy under a temporary name, then rename: a run beside it never reads half a file (the
    workflow recomputes an unreadable one anyway)."""
    partial = target.with_name(f".{target.name}.{os.getpid()}")
    shutil.copyfile(source, partial)
    os.replace(partial, target)
