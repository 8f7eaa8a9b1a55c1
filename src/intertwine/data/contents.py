"""The data cache's content identity: what the data stage wrote, checked before a run builds on it.

Snakemake decides what to rerun from modification times: a data cache file newer than a trained
checkpoint reruns the training, and a damaged file (a truncated copy, a full disk) is newer too, so
Snakemake would schedule the zoo over finished work (as root, deleting the protected packs before
the job reads the bad file and fails). The data stage therefore records, beside its files,
``DIR/contents.json``: each file's content identity (the arrays of an ``.npz``, the bytes of
``meta.json``), size and modification time. Before any job is scheduled the workflow compares the
cache with that record (``check_contents``):

* a file whose size and time are those recorded is taken as written (no hashing);
* a file whose content differs from the record, or that cannot be read, or is missing, is damaged:
  the run stops naming it and the command that regenerates the cache alone;
* a file whose content is the recorded one but whose time is not (a ``touch``, a copy that kept
  the content) gets its recorded time back, so nothing that reads it reruns: content, not time.

Regenerating the cache (``record_contents``, at the end of the data job) keeps the recorded time of
every file whose content comes out the same, so a repaired cache reruns no trained member.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
import zipfile
from pathlib import Path

import numpy as np

from intertwine.utils import write_json

CONTENTS = "contents.json"
FILES = ("train.npz", "val.npz", "test.npz", "meta.json")


def content_identity(path: str | os.PathLike) -> str:
    """The SHA-256 of what a data cache file holds: for an ``.npz`` its arrays (names, dtypes,
    shapes and values, not the zip container, whose entries carry the time they were written), for
    any other file its bytes.

    Parameters
    ----------
    path : str or os.PathLike
        A file of the data cache.

    Returns
    -------
    str
        The hex digest.

    Raises
    ------
    OSError, ValueError, EOFError, zipfile.BadZipFile
        When the file cannot be read (e.g. a truncated ``.npz``).
    """
    path = Path(path)
    digest = hashlib.sha256()
    if path.suffix != ".npz":
        digest.update(path.read_bytes())
        return digest.hexdigest()
    with np.load(path, allow_pickle=False) as arrays:
        for name in sorted(arrays.files):
            array = np.ascontiguousarray(arrays[name])
            digest.update(f"{name}\0{array.dtype.str}\0{array.shape}\0".encode())
            digest.update(array.tobytes())
    return digest.hexdigest()


def read_contents(data_dir: str | os.PathLike) -> dict | None:
    """The data stage's record of the cache in ``data_dir`` (None when it wrote none: a cache made
    before the record existed, or a damaged record, which the next data job writes again)."""
    path = Path(data_dir) / CONTENTS
    try:
        record = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None


def record_contents(data_dir: str | os.PathLike, names=FILES) -> dict:
    """Record the content identity, size and time of each of ``names`` in ``DIR/contents.json``.
    A file whose content is the one the previous record holds gets that record's time back, so a
    cache regenerated with the same content reruns nothing downstream.

    Parameters
    ----------
    data_dir : str or os.PathLike
        The data cache directory DIR, its files just written.
    names : sequence of str, default FILES
        The files to record.

    Returns
    -------
    dict
        The record written: name -> {"identity", "bytes", "mtime_ns"}.
    """
    data_dir = Path(data_dir)
    previous = read_contents(data_dir) or {}
    record = {}
    for name in names:
        path = data_dir / name
        identity = content_identity(path)
        before = previous.get(name)
        if isinstance(before, dict) and before.get("identity") == identity:
            os.utime(path, ns=(path.stat().st_atime_ns, int(before["mtime_ns"])))
        stat = path.stat()
        record[name] = {"identity": identity, "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    write_json(record, data_dir / CONTENTS)
    return record


def check_contents(data_dir: str | os.PathLike) -> list[str]:
    """Compare the data cache in ``data_dir`` with its record: the damaged files, each with what is
    wrong (empty when the cache is whole). A file whose content is the recorded one but whose time is
    not gets its recorded time back. Without a record, a cache whose files all read gets one (its
    files as they are now); one that does not is damaged.

    Parameters
    ----------
    data_dir : str or os.PathLike
        The data cache directory; a directory that holds none of the files is no cache yet (empty).

    Returns
    -------
    list of str
        One line per damaged file, naming it.
    """
    data_dir = Path(data_dir)
    if not any((data_dir / name).exists() for name in FILES):
        return []
    record = read_contents(data_dir)
    if record is None:
        return _first_record(data_dir)
    problems = []
    for name, entry in sorted(record.items()):
        path = data_dir / name
        if not path.exists():
            problems.append(f"{path} is missing")
            continue
        stat = path.stat()
        if (stat.st_size, stat.st_mtime_ns) == (entry.get("bytes"), entry.get("mtime_ns")):
            continue
        try:
            identity = content_identity(path)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
            problems.append(f"{path} cannot be read ({type(err).__name__}: {err}; {stat.st_size} bytes)")
            continue
        if identity != entry.get("identity"):
            problems.append(
                f"{path} holds other data than the data stage wrote ({stat.st_size} bytes, recorded "
                f"{entry.get('bytes')}; content identity {identity[:12]}, recorded "
                f"{str(entry.get('identity'))[:12]}, in {data_dir / CONTENTS})"
            )
        else:  # the content written, only its time changed: a touch reruns nothing
            _restore_time(path, stat, int(entry["mtime_ns"]))
    return problems


def _restore_time(path: Path, stat: os.stat_result, mtime_ns: int) -> None:
    try:
        os.utime(path, ns=(stat.st_atime_ns, mtime_ns))
    except PermissionError:  # another user's file: its time stays, what reads it may rerun
        warnings.warn(
            f"{path} holds the data the data stage wrote, but its modification time changed and this "
            f"user may not set it back (the file belongs to uid {stat.st_uid}), so the jobs that read it "
            "may rerun; run as the file's owner once, or regenerate the cache as this user",
            stacklevel=3,
        )


def _first_record(data_dir: Path) -> list[str]:
    problems = []
    for name in FILES:
        path = data_dir / name
        try:
            content_identity(path)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
            problems.append(f"{path} cannot be read ({type(err).__name__}: {err})")
    if not problems:
        record_contents(data_dir)
    return problems


def damaged_cache_message(data_dir: str | os.PathLike, problems: list[str]) -> str:
    """What the workflow says when ``check_contents`` finds damaged files: which, that nothing ran
    or was deleted, and the command that regenerates the cache alone."""
    return (
        f"the data cache {data_dir} is damaged (e.g. a truncated copy or a full disk):\n"
        + "".join(f"  {problem}\n" for problem in problems)
        + "No job has run and nothing was deleted; the trained members and tables that read the "
        "cache are intact (do not delete them). Regenerate the cache alone, with this run's "
        f"options (--configfile, --profile):\n  snakemake --cores 1 --force {data_dir}/meta.json\n"
        "Only the data job runs; the data come out the same from the config and seed, and every "
        f"file whose content matches {data_dir}/{CONTENTS} keeps its recorded time, so nothing that "
        "read the cache reruns. (If the config's data block changed since, everything after it "
        "reruns, as for any change to it.)"
    )
