"""Whether another Snakemake run is still active on a directory, before its lock is removed.

Snakemake locks the directory it runs in (``.snakemake/locks/``) and, finding a lock, advises
``--unlock`` "if you are sure that no other instances of snakemake are running on this directory".
Following that advice while the first run is still active lets a second run start the same jobs
(a job ran twice). So ``snakemake --unlock`` on this workflow first looks for the other run: a
process whose command line names Snakemake and whose working directory is this one (Snakemake
changes into its ``--directory``); finding one, it refuses, naming the process.
"""

from __future__ import annotations

import os
from pathlib import Path

PROC = Path("/proc")

# How to tell by hand, printed with the refusal and in docs/reruns.md.
HOW_TO_TELL = (
    "A run is active on a directory while a Snakemake process works in it: `pgrep -af snakemake` lists "
    "them, and `ls -l /proc/<pid>/cwd` (Linux) or `lsof -p <pid> | grep cwd` shows the directory each "
    "works in. Its lock files are .snakemake/locks/*. Only when no Snakemake process works in the "
    "directory is the lock left over from a killed run, for `snakemake --unlock` to remove"
)


def _ancestors() -> set[int]:
    """This process and the processes that started it (a shell or make running this Snakemake)."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            stat = (PROC / str(pid) / "stat").read_text()
            pid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the command's name: ppid
        except (OSError, ValueError, IndexError):
            break
    return pids


def active_runs(directory: str | os.PathLike) -> list[tuple[int, str]]:
    """Other Snakemake processes working in ``directory``: (pid, command line), ordered by pid.
    Empty where processes cannot be listed (no ``/proc``: not Linux)."""
    directory = Path(directory).resolve()
    own = _ancestors()
    found = []
    for entry in PROC.glob("[0-9]*") if PROC.is_dir() else []:
        pid = int(entry.name)
        if pid in own:
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            if "snakemake" not in command or Path(os.readlink(entry / "cwd")).resolve() != directory:
                continue
        except OSError:  # gone, or another user's process
            continue
        found.append((pid, command))
    return sorted(found)


def unlock_refusal(directory: str | os.PathLike) -> str | None:
    """The message refusing ``--unlock`` on ``directory`` while another run is active in it (None
    when none is)."""
    runs = active_runs(directory)
    if not runs:
        return None
    listed = "".join(f"\n  pid {pid}: {command[:200]}" for pid, command in runs)
    return (
        f"--unlock: another Snakemake run is still active in {Path(directory).resolve()}:{listed}\n"
        "Its lock is not stale: removing it would let this run start the jobs that one is running "
        "(each would run twice). Wait for it to finish, or stop it (`kill <pid>`, then rerun: "
        f"--rerun-incomplete completes its jobs), and only then unlock. {HOW_TO_TELL}."
    )
