import os
from pathlib import Path

import numpy as np
import pytest
import torch

import code_identities


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """The tests' tensors are small: intra-op threads only wait on each other, on a shared machine
    and beside a second worker (a test module took 70 s with two threads, 8 s with one). The
    workflow's jobs set their own threads (`--threads`)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True, scope="session")
def _shared_code_identities(tmp_path_factory):
    """One folder of the workflow's code identities for the session's Snakemake runs, shared by
    its pytest-xdist workers (the parent of a worker's base folder is the session's): see
    tests/code_identities.py."""
    session = tmp_path_factory.getbasetemp()
    folder = (session.parent if os.environ.get("PYTEST_XDIST_WORKER") else session) / "code-identities"
    before = os.environ.get(code_identities.FOLDER_VARIABLE)
    os.environ[code_identities.FOLDER_VARIABLE] = str(folder)
    yield folder
    if before is None:
        os.environ.pop(code_identities.FOLDER_VARIABLE, None)
    else:
        os.environ[code_identities.FOLDER_VARIABLE] = before


def _write_shapes(
    directory: Path, train_size: int = 160, test_size: int = 64, val_size: int = 32, image_size: int = 16
) -> Path:
    """A `shapes` data set written to ``directory`` by the real data stage (seed 0)."""
    from intertwine.data import build_dataset, write_dataset
    from intertwine.workflow.settings import checked_block

    block = {
        "dataset": "shapes",
        "val_size": val_size,
        "shapes": {"train_size": train_size, "test_size": test_size, "image_size": image_size},
    }
    splits, meta = build_dataset(checked_block(block, "data"), seed=0)
    write_dataset(directory, splits, meta)
    return directory


@pytest.fixture(scope="session")
def write_shapes():
    """The writer behind ``tiny_shapes_dir``, ``write_shapes(directory, **sizes)``, for a fixture
    of another scope or of other sizes."""
    return _write_shapes


@pytest.fixture
def tiny_shapes_dir(tmp_path):
    """A cached `shapes` data set of a few hundred 16x16 images, written by the real data stage."""
    return _write_shapes(tmp_path / "shapes")


@pytest.fixture
def rng():
    return np.random.default_rng(0)
