import numpy as np
import pytest


@pytest.fixture
def tiny_shapes_dir(tmp_path):
    """A cached `shapes` data set of a few hundred 16x16 images, written by the real data stage."""
    from intertwine.data import build_dataset, write_dataset

    block = {
        "dataset": "shapes",
        "val_size": 32,
        "shapes": {"train_size": 160, "test_size": 64, "image_size": 16},
    }
    splits, meta = build_dataset(block, seed=0)
    write_dataset(tmp_path / "shapes", splits, meta)
    return tmp_path / "shapes"


@pytest.fixture
def rng():
    return np.random.default_rng(0)
