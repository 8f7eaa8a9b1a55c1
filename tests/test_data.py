"""The data cache, CIFAR-10 loading in both layouts (tiny fake data), and the augmentation."""

import pickle
import re

import numpy as np
import pytest
import torch
from PIL import Image

from intertwine.data import _hold_out, build_dataset, load_meta, load_split
from intertwine.workflow.settings import checked_block
from intertwine.data.augment import augment, mix, normalize
from intertwine.data.cifar10 import CLASSES, DataNotFoundError, load_cifar10


def fake_images(n, rng, size=8):
    return rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def write_torchvision_layout(root, rng, n_train=10, n_test=6):
    base = root / "cifar-10-batches-py"
    base.mkdir(parents=True)
    batches = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    truth = {}
    for name in batches:
        n = n_test if name == "test_batch" else n_train
        data, labels = fake_images(n, rng, 32), rng.integers(0, 10, n).tolist()
        truth[name] = (data, labels)
        with open(base / name, "wb") as f:
            pickle.dump({"data": data.transpose(0, 3, 1, 2).reshape(n, -1), "labels": labels}, f)
    with open(base / "batches.meta", "wb") as f:
        pickle.dump({"label_names": CLASSES}, f)
    return truth


def test_torchvision_layout_reads_every_batch(tmp_path, rng, monkeypatch):
    import torchvision.datasets.cifar as cifar

    truth = write_torchvision_layout(tmp_path, rng)
    # torchvision checks the files' md5 sums, which fake data cannot match; the reading is real.
    monkeypatch.setattr(cifar, "check_integrity", lambda *a, **k: True)
    monkeypatch.setattr(cifar.CIFAR10, "_check_integrity", lambda self: True)
    data = load_cifar10(tmp_path)
    images, labels = data["train"]
    assert images.shape == (50, 3, 32, 32) and images.dtype == np.uint8
    expected = np.concatenate([truth[f"data_batch_{i}"][0] for i in range(1, 6)])
    np.testing.assert_array_equal(images, expected.transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(data["test"][1], truth["test_batch"][1])
    assert data["classes"] == CLASSES


def test_imagefolder_layout(tmp_path, rng):
    written = {}
    for split, n in (("train", 3), ("test", 2)):
        for c, name in enumerate(CLASSES[:3]):
            (tmp_path / split / name).mkdir(parents=True)
            for i, img in enumerate(fake_images(n, rng)):
                Image.fromarray(img).save(tmp_path / split / name / f"{i}.png")
                written[(split, c, i)] = img
    data = load_cifar10(tmp_path)
    images, labels = data["train"]
    assert images.shape == (9, 3, 8, 8)
    assert data["classes"] == CLASSES[:3]
    np.testing.assert_array_equal(labels, [0, 0, 0, 1, 1, 1, 2, 2, 2])
    np.testing.assert_array_equal(images[4].transpose(1, 2, 0), written[("train", 1, 1)])
    assert data["test"][0].shape == (6, 3, 8, 8)


def test_cifar10_cache_is_in_random_order(tmp_path, rng):
    """Image folders come class by class; the cache must not, or a prefix is one class."""
    from intertwine.data import build_dataset
    from intertwine.workflow.settings import checked_block

    for split, n in (("train", 6), ("test", 4)):
        for name in CLASSES[:4]:
            (tmp_path / split / name).mkdir(parents=True)
            for i, img in enumerate(fake_images(n, rng)):
                Image.fromarray(img).save(tmp_path / split / name / f"{i}.png")
    block = {
        "dataset": "cifar10",
        "val_size": 4,
        "cifar10": {"root": str(tmp_path), "layout": "auto", "download": False},
    }
    splits, _ = build_dataset(checked_block(block, "data"), seed=0)
    for split, n in (("train", 20), ("test", 16)):
        labels = splits[split]["labels"]
        assert len(labels) == n and sorted(np.bincount(labels)) != [0, 0, 0, n]
        assert len(set(labels[: n // 2])) > 1 and list(labels) != sorted(labels)
    again, _ = build_dataset(checked_block(block, "data"), seed=0)
    np.testing.assert_array_equal(again["train"]["images"], splits["train"]["images"])


def test_missing_directory_says_what_to_do(tmp_path):
    with pytest.raises(DataNotFoundError, match="cifar-10-batches-py.*download: true"):
        load_cifar10(tmp_path / "nowhere")


def test_incomplete_torchvision_layout(tmp_path):
    (tmp_path / "cifar-10-batches-py").mkdir()
    with pytest.raises(DataNotFoundError, match="missing or corrupted"):
        load_cifar10(tmp_path)


def test_imagefolder_without_test_split(tmp_path, rng):
    (tmp_path / "train" / "cat").mkdir(parents=True)
    Image.fromarray(fake_images(1, rng)[0]).save(tmp_path / "train" / "cat" / "0.png")
    (tmp_path / "test").mkdir()
    with pytest.raises(DataNotFoundError, match="test"):
        load_cifar10(tmp_path, layout="imagefolder")


def test_hold_out_is_a_disjoint_partition():
    arrays = {"labels": np.arange(100), "images": np.arange(100)[:, None]}
    train, val = _hold_out(arrays, 20, seed=3)
    assert len(val["labels"]) == 20 and len(train["labels"]) == 80
    assert set(train["labels"]).isdisjoint(val["labels"])
    assert set(train["labels"]) | set(val["labels"]) == set(range(100))
    with pytest.raises(ValueError, match="val_size"):
        _hold_out(arrays, 100, seed=3)


def test_cache_round_trip(tiny_shapes_dir):
    meta = load_meta(tiny_shapes_dir)
    assert meta["sizes"] == {"train": 128, "val": 32, "test": 64}
    train = load_split(tiny_shapes_dir, "train")
    assert train.images.dtype == torch.uint8 and train.images.shape == (128, 3, 16, 16)
    assert train.concepts.shape[0] == 128 and train.concepts.shape[2:] == (16, 16)
    mean = train.images.double().div(255).mean(dim=(0, 2, 3))
    np.testing.assert_allclose(meta["mean"], mean.numpy(), atol=1e-6)


def test_dataset_is_deterministic():
    block = {
        "dataset": "shapes",
        "val_size": 8,
        "shapes": {"train_size": 40, "test_size": 8, "image_size": 16},
    }
    a, _ = build_dataset(checked_block(block, "data"), seed=1)
    b, _ = build_dataset(checked_block(block, "data"), seed=1)
    c, _ = build_dataset(checked_block(block, "data"), seed=2)
    np.testing.assert_array_equal(a["val"]["images"], b["val"]["images"])
    assert not np.array_equal(a["train"]["images"], c["train"]["images"])


def test_augment_translates_with_mean_padding_and_flips():
    x = torch.arange(2 * 1 * 6 * 6, dtype=torch.float32).reshape(2, 1, 6, 6) + 1
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        out = augment(x, g, translate=2, flip=True)
        assert out.shape == x.shape
        for i in range(2):
            # Every output is a window of the zero-padded (= mean-padded) input, possibly flipped.
            padded = torch.nn.functional.pad(x[i, 0], (2, 2, 2, 2))
            windows = [padded[r : r + 6, c : c + 6] for r in range(5) for c in range(5)]
            windows += [w.flip(-1) for w in windows]
            assert any(torch.equal(out[i, 0], w) for w in windows)


def test_augment_is_reproducible_and_varies():
    x = torch.randn(64, 3, 8, 8)
    a = augment(x, torch.Generator().manual_seed(5))
    b = augment(x, torch.Generator().manual_seed(5))
    c = augment(x, torch.Generator().manual_seed(6))
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert not torch.equal(a, x)  # something moved
    assert torch.equal(augment(x, torch.Generator(), translate=0, flip=False), x)


def test_normalize():
    images = torch.full((1, 3, 2, 2), 51, dtype=torch.uint8)
    out = normalize(images, torch.tensor([0.2, 0.1, 0.0]), torch.tensor([1.0, 0.5, 0.2]))
    torch.testing.assert_close(out[0, :, 0, 0], torch.tensor([0.0, 0.2, 1.0]))


# --- unreadable files name themselves, what is wrong and how to recover -------------------------


@pytest.mark.parametrize("suffix, keep", [("png", 0.5), ("png", 20), ("jpg", 0.5), ("png", 0)])
def test_truncated_image_in_image_folders_names_the_file(tmp_path, rng, suffix, keep):
    """PIL said "image file is truncated" (or "Truncated File Read") without the file."""
    from intertwine.data.cifar10 import DataCorruptError

    for split in ("train", "test"):
        for name in CLASSES[:2]:
            (tmp_path / split / name).mkdir(parents=True)
            for i, img in enumerate(fake_images(2, rng, 16)):
                Image.fromarray(img).save(tmp_path / split / name / f"{i}.{suffix}")
    broken = tmp_path / "test" / CLASSES[1] / f"1.{suffix}"
    data = broken.read_bytes()
    broken.write_bytes(data[: int(keep * len(data)) if isinstance(keep, float) else keep])
    with pytest.raises(
        DataCorruptError,
        match=rf"^{re.escape(str(broken))} cannot be read as an image \(.+\): the "
        rf"copy of the data set under {re.escape(str(tmp_path))} is damaged.*"
        r"Copy the data set again.*rerun the data stage",
    ):
        load_cifar10(tmp_path)


def test_damaged_cache_names_the_file_and_the_fix(tiny_shapes_dir):
    path = tiny_shapes_dir / "train.npz"
    data = path.read_bytes()
    for keep in (0, 100, len(data) // 2):
        path.write_bytes(data[:keep])
        with pytest.raises(
            ValueError,
            match=rf"^{re.escape(str(path))} is unreadable \(.+\): the data cache is "
            rf"damaged.*Regenerate the cache alone.*snakemake --cores 1 --force "
            rf"{re.escape(str(tiny_shapes_dir))}/meta\.json .*do not delete the trained members",
        ):
            load_split(tiny_shapes_dir, "train")
    np.savez(path, pixels=np.zeros(3))
    with pytest.raises(
        ValueError, match=r"train\.npz is not a cached split \(it lacks \['images', 'labels'\]\)"
    ):
        load_split(tiny_shapes_dir, "train")
    meta = tiny_shapes_dir / "meta.json"
    meta.write_text(meta.read_text()[:40])
    with pytest.raises(ValueError, match=r"meta\.json is not valid JSON .*--force .*meta\.json"):
        load_meta(tiny_shapes_dir)


def test_normalize_refuses_float_images():
    """Float images in [0, 1] were divided by 255 once more, silently."""
    with pytest.raises(ValueError, match="normalize takes uint8 images"):
        normalize(torch.rand(2, 3, 4, 4), torch.zeros(3), torch.ones(3))


def test_data_block_takes_defaults_and_names_a_bad_key():
    """prepare-data indexed the block: a block without val_size ended in a KeyError traceback."""
    block = {"dataset": "shapes", "shapes": {"train_size": 40, "test_size": 16, "image_size": 16}}
    splits, meta = build_dataset(checked_block(block | {"val_size": 8}, "data"), seed=0)
    assert meta["sizes"] == {"test": 16, "train": 32, "val": 8}
    with pytest.raises(
        ValueError, match=r"data\.val_size: 1000 must be between 1 and the training set size minus one"
    ):
        build_dataset(
            checked_block(block, "data"), seed=0
        )  # the default val_size, 1000, is more than 40 images hold
    with pytest.raises(
        ValueError,
        match=r"config key data\.shapes: Additional properties are not allowed "
        r"\('train_sise' was unexpected\)",
    ):
        build_dataset(checked_block({"dataset": "shapes", "shapes": {"train_sise": 40}}, "data"), seed=0)
    with pytest.raises(ValueError, match=r"config key data\.dataset: 'emnist' is not one of"):
        build_dataset(checked_block({"dataset": "emnist"}, "data"), seed=0)


# --- MNIST: grey images as three equal channels, in both layouts ------------------------------------


def write_idx(path, array: np.ndarray) -> None:
    """An idx file (MNIST's format): magic 0 0 type ndim, big-endian sizes, the uint8 data."""
    import struct

    code = 0x08  # unsigned byte
    header = struct.pack(">BBBB", 0, 0, code, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def test_mnist_torchvision_layout_is_three_equal_channels(tmp_path, rng):
    from intertwine.data.cifar10 import load_cifar

    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    truth = {}
    for split, prefix, n in (("train", "train", 12), ("test", "t10k", 5)):
        images, labels = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), rng.integers(0, 10, n)
        write_idx(raw / f"{prefix}-images-idx3-ubyte", images)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels)
        truth[split] = (images, labels)
    data = load_cifar("mnist", tmp_path)
    for split, (images, labels) in truth.items():
        read, read_labels = data[split]
        assert read.shape == (len(labels), 3, 28, 28) and read.dtype == np.uint8
        for channel in range(3):
            np.testing.assert_array_equal(read[:, channel], images)
        np.testing.assert_array_equal(read_labels, labels)
    assert len(data["classes"]) == 10


def test_mnist_image_folders_build_a_cache(tmp_path, rng):
    for split, n in (("train", 5), ("test", 2)):
        for digit in "0123":
            (tmp_path / split / digit).mkdir(parents=True)
            for i in range(n):
                grey = rng.integers(0, 256, (28, 28), dtype=np.uint8)
                Image.fromarray(grey, mode="L").save(tmp_path / split / digit / f"{i}.png")
    block = {"dataset": "mnist", "val_size": 4, "mnist": {"root": str(tmp_path)}}
    splits, meta = build_dataset(checked_block(block, "data"), seed=0)
    assert meta["classes"] == ["0", "1", "2", "3"] and meta["image_size"] == [28, 28]
    assert splits["train"]["images"].shape == (16, 3, 28, 28) and len(splits["val"]["labels"]) == 4
    images = splits["test"]["images"]
    assert (images[:, 0] == images[:, 1]).all() and (images[:, 0] == images[:, 2]).all()
    assert meta["mean"][0] == meta["mean"][1] == meta["mean"][2]
    with pytest.raises(DataNotFoundError, match="MNIST/ with raw/train-images-idx3-ubyte"):
        build_dataset(
            checked_block({"dataset": "mnist", "mnist": {"root": str(tmp_path / "nowhere")}}, "data"), seed=0
        )


def test_mixing_off_draws_nothing_and_returns_the_batch():
    x, g = torch.randn(8, 3, 6, 6), torch.Generator().manual_seed(0)
    state = g.get_state()
    out, lam = mix(x, g)
    assert out is x and lam == 1.0 and torch.equal(g.get_state(), state)


def test_mixup_is_the_convex_combination_with_the_reversed_batch_and_lambda_is_beta():
    x, g = torch.randn(8, 3, 6, 6), torch.Generator().manual_seed(1)
    out, lam = mix(x, g, mixup_alpha=0.8)
    assert 0 < lam < 1 and torch.allclose(out, lam * x + (1 - lam) * x.flip(0))
    # Beta(0.8, 0.8): mean 1/2, variance 1 / (4 (2 alpha + 1)) = 0.0962; 4,000 draws, 4 standard errors
    lams = torch.tensor([mix(x[:2], g, mixup_alpha=0.8)[1] for _ in range(4000)])
    variance = 1 / (4 * (2 * 0.8 + 1))
    assert abs(lams.mean() - 0.5) < 4 * (variance / 4000) ** 0.5
    assert abs(lams.var() - variance) < 0.01


def test_cutmix_pastes_a_box_of_the_reversed_batch_and_lambda_is_the_area_kept():
    g = torch.Generator().manual_seed(2)
    x = torch.arange(4.0).view(4, 1, 1, 1).expand(4, 3, 16, 16).contiguous()  # image i is all i
    for _ in range(50):
        out, lam = mix(x, g, cutmix_alpha=1.0)
        for i in range(4):
            pasted = (out[i, 0] == 3 - i).float().mean() if i != 3 - i else None
            assert pasted is None or pasted == pytest.approx(1 - lam)
        assert torch.equal(out[:, 1:], out[:, :1].expand(-1, 2, -1, -1))  # the same box in every channel


def test_with_both_alphas_mixup_and_cutmix_alternate_at_even_odds():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4, 1, 8, 8)
    # a CutMix output takes each pixel from one image or the other; a mixup output blends them
    kinds = [
        bool(((out := mix(x, g, 0.8, 1.0)[0]) == x).logical_or(out == x.flip(0)).all()) for _ in range(400)
    ]
    assert abs(sum(kinds) / 400 - 0.5) < 4 * (0.25 / 400) ** 0.5
