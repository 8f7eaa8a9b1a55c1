"""Small shared helpers: seeds derived from keys, config hashes, atomic writes, devices."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    import torch


class DivergedError(RuntimeError):
    """The training loss became NaN or infinite."""


def derive_seed(*keys: Any) -> int:
    """A 63-bit seed determined by `keys` (global seed, stage name, variant, ...).

    Every random choice in the library draws from a generator seeded this way, so the same
    inputs give the same outputs whatever ran before.

    Parameters
    ----------
    *keys : Any
        The keys, JSON-encoded (what JSON cannot encode, as ``str``): e.g. the global seed, a stage
        name, a variant.

    Returns
    -------
    int
        A seed in ``[0, 2**63)``: the first 8 bytes (little-endian) of the keys' SHA-256.
    """
    digest = hashlib.sha256(json.dumps(keys, sort_keys=True, default=str).encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def config_hash(block: Any) -> str:
    """Short stable hash of a JSON-able config block (recorded as provenance in every table).

    Parameters
    ----------
    block : Any
        A JSON-able value, such as a config block (what JSON cannot encode is written as ``str``).

    Returns
    -------
    str
        The first 12 hex digits of the SHA-256 of its JSON with sorted keys.
    """
    text = json.dumps(block, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds.

    A killed job leaves at most a hidden `.tmp` file, never a half-written output.

    Parameters
    ----------
    path : str or os.PathLike
        The file to write; its parent directories are created.

    Returns
    -------
    contextlib.AbstractContextManager[Path]
        A context manager whose ``with`` target is the temporary path (a hidden ``.tmp`` file beside
        ``path``, with the usual umask permissions): renamed onto ``path`` when the block succeeds,
        removed when it raises.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes 0600 files; outputs get the usual permissions
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


# torch.save's C++ writer reports a failed write, a full disk among them, without an errno.
_TORCH_WRITE_FAILURES = ("iostream error", "PytorchStreamWriter failed", "unexpected pos")


@contextlib.contextmanager
def named_write_failures(path: str | os.PathLike) -> Iterator[None]:
    """Errors of writing ``path`` in the block that say what happened: a full disk or quota
    (``ENOSPC``, ``EDQUOT``, or torch.save's bare "basic_ios::clear: iostream error") becomes an
    OSError naming the file, the space left on its file system and the fix. Other errors pass.

    Parameters
    ----------
    path : str or os.PathLike
        The file the block writes (its final name, not a temporary one).

    Returns
    -------
    contextlib.AbstractContextManager[None]
        A context manager that translates the block's write failures.
    """
    try:
        yield
    except OSError as err:
        # pyarrow's errors carry the system's message but not always its errno
        full = [os.strerror(code) for code in (errno.ENOSPC, errno.EDQUOT)]
        if err.errno not in (errno.ENOSPC, errno.EDQUOT) and not any(text in str(err) for text in full):
            raise
        code = err.errno or errno.ENOSPC
        raise OSError(code, _disk_full_message(path, "the disk is full (or over quota)", err)) from None
    except RuntimeError as err:
        if not any(text in str(err) for text in _TORCH_WRITE_FAILURES):
            raise
        cause = "the write failed as it does on a full disk (torch.save's message for a failed write)"
        raise OSError(errno.ENOSPC, _disk_full_message(path, cause, err)) from None


def _disk_full_message(path: str | os.PathLike, cause: str, err: Exception) -> str:
    folder = Path(path).absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    said = (str(err).splitlines() or [""])[0][:160]
    return (
        f"could not write {path}: {cause}; {free / 2**30:.2f} GiB free on the file system of "
        f"{folder} ({type(err).__name__}: {said}). No partial file is left: free space there (or "
        "run where there is room) and rerun the job"
    )


def current_umask() -> int:
    """The process's umask (reading it means setting it; it is set back at once)."""
    umask = os.umask(0)
    os.umask(umask)
    return umask


def write_json(obj: Any, path: str | os.PathLike) -> None:
    """Write ``obj`` to ``path`` as indented JSON with sorted keys, atomically (``atomic_path``).

    Parameters
    ----------
    obj : Any
        A JSON-able value (what JSON cannot encode is written as ``str``).
    path : str or os.PathLike
        The file to write; its parent directories are created.

    Returns
    -------
    None
    """
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def cuda_problem(name: str) -> str | None:
    """Why torch device ``name`` (``cuda`` or ``cuda:<n>``) cannot be used here, or None."""
    import torch

    if not torch.cuda.is_available():
        build = (
            "a CPU-only torch build" if torch.version.cuda is None else f"torch for CUDA {torch.version.cuda}"
        )
        return f"no CUDA GPU is visible here ({build})"
    index = int(name.partition(":")[2] or 0)
    if index >= torch.cuda.device_count():
        return f"only {torch.cuda.device_count()} CUDA GPU(s) are visible here (cuda:0 ...)"
    return None


def resolve_device(name: str = "auto") -> "torch.device":
    """`auto` picks CUDA when present, else CPU; a CUDA device that is not there (no GPU, or not
    that many) is a ValueError that says so and what to set instead."""
    import re

    import torch  # here, so that table and figure jobs start without loading torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if not re.fullmatch(r"cpu|cuda(:\d+)?", name):
        raise ValueError(f"device {name!r}: expected auto, cpu, cuda or cuda:<n>")
    problem = name.startswith("cuda") and cuda_problem(name)
    if problem:
        raise ValueError(
            f"device: {name!r} was requested but {problem}; set device: auto (CUDA when "
            "present, else the CPU) or cpu in the config"
        )
    return torch.device(name)
