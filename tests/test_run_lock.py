"""`snakemake --unlock` refuses while another run is still active on the directory (following
Snakemake's lock advice then ran a job twice)."""

import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_workflow import snakemake

from intertwine.workflow.run_lock import active_runs, unlock_refusal

pytestmark = pytest.mark.workflow


@pytest.fixture
def other_run(tmp_path):
    """A process that looks to the check as a Snakemake run would: its command line names snakemake
    and it works in the directory."""
    workdir = tmp_path / "run"
    workdir.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", "snakemake", "--cores", "1"], cwd=workdir
    )
    # Popen returns once the child is forked, maybe before it has executed its command line: wait
    # until /proc shows it (a loaded machine took longer than the first assertion).
    cmdline = Path(f"/proc/{process.pid}/cmdline")
    deadline = time.monotonic() + 30
    while b"snakemake" not in cmdline.read_bytes() and time.monotonic() < deadline:
        time.sleep(0.05)
    yield workdir, process
    process.kill()
    process.wait()


def test_active_runs_finds_the_run_in_its_directory_only(other_run, tmp_path):
    workdir, process = other_run
    assert [pid for pid, _ in active_runs(workdir)] == [process.pid]
    assert active_runs(tmp_path) == []  # the parent directory: no run there
    assert f"pid {process.pid}: " in unlock_refusal(workdir)


def test_unlock_is_refused_while_another_run_is_active(other_run):
    workdir, process = other_run
    result = snakemake(workdir, "--unlock", check=False)
    assert result.returncode != 0
    assert f"--unlock: another Snakemake run is still active in {workdir.resolve()}" in result.stderr
    assert f"pid {process.pid}: " in result.stderr and "pgrep -af snakemake" in result.stderr
    process.kill()
    process.wait()
    snakemake(workdir, "--unlock")  # a stale lock: unlocked
