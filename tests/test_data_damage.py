"""A damaged or touched data cache, in a workflow that trained on it: named before anything is
scheduled, repaired by its own advice without retraining, and a touch reruns nothing."""

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from test_workflow import REPO, TINY, planned_jobs, snakemake

from intertwine.data.contents import CONTENTS, check_contents, content_identity, record_contents

pytestmark = pytest.mark.workflow

PACK = "results/zoo/c4gap_dgn/packs/seeds0-1"  # the smallest trained result: a pack of two members
DATA = "results/data/shapes"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("damage")
    snakemake(workdir, PACK)
    return workdir


def pack_files(workdir):
    return {path.name: path.read_bytes() for path in sorted((workdir / PACK).iterdir())}


NOBODY = 65534
SETPRIV = shutil.which("setpriv")


def as_nobody(workdir, *args):
    """Snakemake run by a real user without privileges (uid 65534), so that file permissions, and so
    protected(), bind: through setpriv, on a copy of the run the user owns."""
    env = os.environ | {"HOME": str(workdir), "PYTHONPATH": str(REPO / "src")}
    command = [SETPRIV, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable]
    command += ["-m", "snakemake", "-s", str(REPO / "workflow" / "Snakefile"), "-d", str(workdir)]
    command += ["--configfile", str(TINY), "--cores", "2", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, check=False)


@pytest.fixture(params=["root", "user", "real user"])
def run_as(request, trained):
    """How Snakemake runs on the trained run: as root (who ignores protected()), as a user (os.access
    answering as for any other user: test_workflow.AS_NON_ROOT), or really as an unprivileged user."""
    if request.param != "real user":
        as_non_root = request.param == "user"
        run = lambda *args: snakemake(trained, *args, check=False, as_non_root=as_non_root)
        yield trained, run, run
        return
    if os.geteuid() != 0 or SETPRIV is None:
        pytest.skip("needs root and setpriv to run Snakemake as another user")
    workdir = Path(tempfile.mkdtemp(prefix="intertwine-nobody-"))
    os.chmod(workdir, 0o755)
    shutil.copytree(trained, workdir, dirs_exist_ok=True, symlinks=True)  # copy2: times kept
    for path in [workdir, *workdir.rglob("*")]:
        os.lchown(path, NOBODY, NOBODY)

    # The repair runs a job, whose `intertwine` command this user cannot start here (the
    # environment's Python lies in root's home): root repairs the copy, the user checks it.
    def repair_as_root(*args):
        result = snakemake(workdir, *args)
        for path in [workdir, *workdir.rglob("*")]:  # the cache is the user's again
            os.lchown(path, NOBODY, NOBODY)
        return result

    yield workdir, lambda *args: as_nobody(workdir, *args), repair_as_root
    shutil.rmtree(workdir)


def test_a_truncated_data_file_is_named_and_repaired_without_retraining(run_as):
    """Before: as root Snakemake scheduled train_pack and deleted the pack before the job failed on
    the bad file; as a user it stopped at a bare ProtectedOutputException."""
    workdir, run, repair_run = run_as
    test_file = workdir / DATA / "test.npz"
    pack = pack_files(workdir)
    test_file.write_bytes(test_file.read_bytes()[:1000])  # a truncated copy
    result = run(PACK)
    assert result.returncode != 0
    assert f"{DATA}/test.npz cannot be read" in result.stderr
    assert "No job has run and nothing was deleted" in result.stderr
    assert "ProtectedOutputException" not in result.stderr
    assert pack_files(workdir) == pack  # the pack survives, as root too
    # the advice, followed as printed, repairs the cache and retrains nothing
    repair = re.search(r"^\s+(snakemake --cores 1 --force \S+)$", result.stderr, re.MULTILINE)[1]
    repaired = repair_run(*shlex.split(repair)[1:])
    assert repaired.returncode == 0, repaired.stderr
    checked = run(PACK, "-n")
    assert checked.returncode == 0, checked.stdout + checked.stderr  # whole again for the user too
    assert check_contents(workdir / DATA) == []
    assert planned_jobs(workdir, TINY, PACK) == {}
    assert pack_files(workdir) == pack


def test_a_touched_data_cache_reruns_nothing(trained):
    """Before: a data file newer than the pack (above Snakemake's 1 MB checksum limit, or any size
    without a recorded checksum) planned train_pack again."""
    later = time.time() + 60
    for name in ("train.npz", "test.npz", "meta.json"):
        os.utime(trained / DATA / name, (later, later))
    assert planned_jobs(trained, TINY, PACK) == {}


def test_a_data_file_with_other_content_is_damaged(trained, tmp_path):
    """A file that reads but holds other arrays than were recorded (a copy from another run) is
    named; a regenerated file with the same arrays keeps its recorded time."""
    cache = tmp_path / "cache"
    cache.mkdir()
    for name in ("train.npz", "val.npz", "test.npz", "meta.json"):
        (cache / name).write_bytes((trained / DATA / name).read_bytes())
    record = record_contents(cache)
    (cache / "val.npz").write_bytes((cache / "test.npz").read_bytes())
    [problem] = check_contents(cache)
    assert str(cache / "val.npz") in problem and "holds other data" in problem
    (cache / "val.npz").write_bytes((trained / DATA / "val.npz").read_bytes())
    assert check_contents(cache) == []
    assert (cache / "val.npz").stat().st_mtime_ns == record["val.npz"]["mtime_ns"]
    assert content_identity(cache / "val.npz") == record["val.npz"]["identity"]
    assert (cache / CONTENTS).exists()


def test_a_touched_file_of_another_user_is_whole_with_a_warning(trained, tmp_path, monkeypatch):
    """A touched cache file this user may not set the time of (another user's) is not damaged: the
    check warns that what reads it may rerun, instead of failing the parse."""
    cache = tmp_path / "cache"
    cache.mkdir()
    for name in ("train.npz", "val.npz", "test.npz", "meta.json"):
        (cache / name).write_bytes((trained / DATA / name).read_bytes())
    record_contents(cache)
    later = time.time() + 60
    os.utime(cache / "train.npz", (later, later))

    def refused(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "utime", refused)
    with pytest.warns(UserWarning, match=r"train.npz holds the data the data stage wrote.*may rerun"):
        assert check_contents(cache) == []
