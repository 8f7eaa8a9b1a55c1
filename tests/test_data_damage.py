"""A damaged or touched data cache, in a workflow that trained on it: named before anything is
scheduled, repaired by its own advice without retraining, and a touch reruns nothing."""

import os
import re
import shlex
import time

import pytest
from test_workflow import TINY, planned_jobs, snakemake

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


@pytest.mark.parametrize("as_non_root", [False, True], ids=["root", "user"])
def test_a_truncated_data_file_is_named_and_repaired_without_retraining(trained, as_non_root):
    """Before: as root Snakemake scheduled train_pack and deleted the pack before the job failed on
    the bad file; as a user it stopped at a bare ProtectedOutputException."""
    test_file = trained / DATA / "test.npz"
    pack = pack_files(trained)
    test_file.write_bytes(test_file.read_bytes()[:1000])  # a truncated copy
    result = snakemake(trained, PACK, check=False, as_non_root=as_non_root)
    assert result.returncode != 0
    assert f"{DATA}/test.npz cannot be read" in result.stderr
    assert "No job has run and nothing was deleted" in result.stderr
    assert "ProtectedOutputException" not in result.stderr
    assert pack_files(trained) == pack  # the pack survives, as root too
    # the advice, followed as printed, repairs the cache and retrains nothing
    repair = re.search(r"^\s+(snakemake --cores 1 --force \S+)$", result.stderr, re.MULTILINE)[1]
    snakemake(trained, *shlex.split(repair)[1:], as_non_root=as_non_root)
    assert check_contents(trained / DATA) == []
    assert planned_jobs(trained, TINY, PACK) == {}
    assert pack_files(trained) == pack


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
