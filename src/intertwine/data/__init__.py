"""Data sets, decoded once into uint8 arrays and cached on disk.

The data stage writes ``DIR/{train,val,test}.npz`` and ``DIR/meta.json``; training and every later
stage read that cache (``load_split``), never the raw files. ``val`` is a held-out part of the
training set, drawn from the config's seed.
"""

from __future__ import annotations

from dataclasses import dataclass
import json
from pathlib import Path
import zipfile

import numpy as np
import torch

from intertwine.utils import atomic_path, config_hash, derive_seed, write_json

SPLITS = ("train", "val", "test")
DATASETS = ("shapes", "cifar10", "cifar100", "mnist", "image_folder")


@dataclass
class Split:
    images: torch.Tensor  # uint8 (N, 3, H, W)
    labels: torch.Tensor  # int64 (N,)
    concepts: torch.Tensor | None = None  # uint8 (N, categories, H, W) label maps (shapes only)

    def __len__(self) -> int:
        return len(self.labels)

    def to(self, device: torch.device | str) -> "Split":
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return Split(move(self.images), move(self.labels), move(self.concepts))


def build_dataset(block: dict, seed: int) -> tuple[dict[str, dict[str, np.ndarray]], dict]:
    """Generate or read the configured data set; return its splits as arrays and its metadata.
    ``block`` is the config's whole ``data`` block, every key given (the workflow fills and checks
    it against its schema: ``intertwine.workflow.settings.checked_block(block, "data")``).

    Parameters
    ----------
    block : dict
        The config's ``data`` block: ``dataset``, ``val_size`` and the data set's options.
    seed : int
        The global seed: the shapes images, an image-folder data set's stored order and the
        validation hold-out are drawn from seeds derived from it.

    Returns
    -------
    splits : dict[str, dict[str, numpy.ndarray]]
        ``train``, ``val`` and ``test``, each ``{"images": uint8 (N, 3, H, W), "labels": (N,)}``
        (shapes adds ``concepts``); ``val`` is ``val_size`` images held out of the training set.
    meta : dict
        ``dataset``, ``classes``, the training split's per-channel ``mean`` and ``std`` (0..1 units),
        ``image_size`` [H, W], the split ``sizes`` and the block's ``config_hash`` (shapes adds
        ``concepts``).
    """
    name = block["dataset"]
    meta = {"dataset": name}
    if name == "shapes":
        from intertwine.data.shapes import CLASSES, CONCEPTS, generate_shapes

        options = dict(block["shapes"])
        sizes = {"train": options.pop("train_size"), "test": options.pop("test_size")}
        raw = {
            split: generate_shapes(n, derive_seed(seed, "shapes", split), **options)
            for split, n in sizes.items()
        }
        meta |= {"classes": list(CLASSES), "concepts": {k: list(v) for k, v in CONCEPTS.items()}}
    elif name in ("cifar10", "cifar100", "mnist", "image_folder"):
        if name == "image_folder":  # the user's own: any classes, any sizes
            from intertwine.data.image_folder import load_split_folders

            loaded = load_split_folders(block[name]["root"], block[name]["image_size"])
        else:
            from intertwine.data.cifar10 import load_cifar

            options = block[name]
            loaded = load_cifar(name, options["root"], options["layout"], options["download"])
        # Image folders list the images class by class. The cache holds each split in a fixed
        # random order, so that any prefix a stage takes (stitching.train_images,
        # similarity.samples, ...) is a uniform sample of it.
        raw = {}
        for split in ("train", "test"):
            order = np.random.default_rng(derive_seed(seed, name, split)).permutation(len(loaded[split][1]))
            raw[split] = {"images": loaded[split][0][order], "labels": loaded[split][1][order]}
        meta["classes"] = loaded["classes"]
    else:
        raise ValueError(f"data.dataset: {name!r} is not one of {DATASETS}")

    splits = {"test": raw["test"]}
    splits["train"], splits["val"] = _hold_out(raw["train"], block["val_size"], seed)
    train = splits["train"]["images"]
    pixels = train.transpose(1, 0, 2, 3).reshape(3, -1).astype(np.float64) / 255.0
    meta |= {
        "mean": pixels.mean(axis=1).tolist(),
        "std": pixels.std(axis=1).tolist(),
        "image_size": list(train.shape[2:]),
        "sizes": {split: int(len(arrays["labels"])) for split, arrays in splits.items()},
        "config_hash": config_hash(block),
    }
    return splits, meta


def _hold_out(arrays: dict[str, np.ndarray], val_size: int, seed: int):
    n = len(arrays["labels"])
    if not 0 < val_size < n:
        raise ValueError(
            f"data.val_size: {val_size} must be between 1 and the training set size minus one ({n - 1})"
        )
    order = np.random.default_rng(derive_seed(seed, "data", "val")).permutation(n)
    train_idx, val_idx = np.sort(order[val_size:]), np.sort(order[:val_size])
    return ({k: v[train_idx] for k, v in arrays.items()}, {k: v[val_idx] for k, v in arrays.items()})


def write_dataset(out_dir: str | Path, splits: dict, meta: dict) -> None:
    """Write ``build_dataset``'s output as the data stage's cache: ``DIR/{split}.npz`` for each split
    and ``DIR/meta.json``, each file written atomically.

    Parameters
    ----------
    out_dir : str or Path
        The cache directory DIR (created if missing).
    splits : dict
        Split name -> {array name -> numpy array}, as ``build_dataset`` returns them.
    meta : dict
        The metadata, written as JSON.

    Returns
    -------
    None
    """
    out_dir = Path(out_dir)
    for split, arrays in splits.items():
        with atomic_path(out_dir / f"{split}.npz") as tmp:
            with open(tmp, "wb") as f:
                np.savez(f, **arrays)
    write_json(meta, out_dir / "meta.json")


def _damaged(path: Path, what: str) -> ValueError:
    return ValueError(
        f"{path} is {what}: the data cache is damaged (e.g. a full disk or an interrupted "
        f"copy). Regenerate the cache alone, with this run's options (--configfile, --profile): "
        f"snakemake --cores 1 --force {path.parent}/meta.json (the data come out the same from the "
        "config and seed, so what read the cache does not rerun; do not delete the trained members)"
    )


def load_meta(data_dir: str | Path) -> dict:
    """The data stage's metadata, ``DIR/meta.json``: a missing file is a FileNotFoundError saying to
    run the data stage, a damaged one a ValueError saying to delete the cache and run it again.

    Parameters
    ----------
    data_dir : str or Path
        The data cache directory DIR.

    Returns
    -------
    dict
        The metadata ``build_dataset`` wrote: ``dataset``, ``classes``, ``mean``, ``std`` and
        ``image_size`` at least.
    """
    path = Path(data_dir) / "meta.json"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: run the data stage first "
            f"(`intertwine prepare-data ... --out {data_dir}`, or snakemake)"
        )
    try:
        meta = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise _damaged(path, f"not valid JSON ({err})") from None
    missing = [key for key in ("dataset", "classes", "mean", "std", "image_size") if key not in meta]
    if not isinstance(meta, dict) or missing:
        raise _damaged(path, f"not the data stage's metadata (it lacks {missing or 'a mapping'})")
    return meta


def channel_stats(data_dir: str | Path, device: torch.device | str = "cpu"):
    """The training set's per-channel mean and std (0..1 units), as tensors on ``device``.

    Parameters
    ----------
    data_dir : str or Path
        The data cache directory (its ``meta.json``).
    device : torch.device or str, default "cpu"
        Where the tensors go.

    Returns
    -------
    mean : Tensor
        (3,) per-channel mean, float32.
    std : Tensor
        (3,) per-channel standard deviation, float32.
    """
    meta = load_meta(data_dir)
    return (torch.tensor(meta["mean"], device=device), torch.tensor(meta["std"], device=device))


def load_split(data_dir: str | Path, split: str) -> Split:
    """Read one cached split as tensors (on the CPU; move with ``.to(device)``).

    Parameters
    ----------
    data_dir : str or Path
        The data cache directory.
    split : str
        "train", "val" or "test".

    Returns
    -------
    Split
        ``images`` uint8 (N, 3, H, W), ``labels`` (N,) and ``concepts``: the uint8 label maps
        (N, categories, H, W) of a shapes cache, None for other data sets.
    """
    if split not in SPLITS:
        raise ValueError(f"split {split!r} is not one of {SPLITS}")
    path = Path(data_dir) / f"{split}.npz"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run the data stage first")
    try:
        with np.load(path) as arrays:
            missing = [key for key in ("images", "labels") if key not in arrays]
            if missing:
                raise _damaged(path, f"not a cached split (it lacks {missing})")
            concepts = arrays["concepts"] if "concepts" in arrays else None
            split_ = Split(
                torch.from_numpy(arrays["images"]),
                torch.from_numpy(arrays["labels"]),
                None if concepts is None else torch.from_numpy(concepts),
            )
    except (OSError, EOFError, zipfile.BadZipFile, ValueError) as err:  # numpy's errors on a damaged file
        if str(err).startswith(str(path)):
            raise
        raise _damaged(path, f"unreadable ({type(err).__name__}: {err})") from None
    if (
        split_.images.dtype != torch.uint8
        or split_.images.ndim != 4
        or len(split_.images) != len(split_.labels)
    ):
        raise _damaged(
            path,
            f"not a cached split (images {split_.images.dtype} {tuple(split_.images.shape)}, "
            f"{len(split_.labels)} labels)",
        )
    return split_
