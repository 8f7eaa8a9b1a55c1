"""CIFAR-10 from a user's directory, in torchvision's layout or as image folders.

Two layouts are read:
- torchvision's: ``ROOT/cifar-10-batches-py/`` (``data_batch_1`` ... ``test_batch``), read through
  ``torchvision.datasets.CIFAR10``, which may also download it there (``download: true``);
- image folders: ``ROOT/train/<class>/*`` and ``ROOT/test/<class>/*`` (any format PIL reads), read
  through ``torchvision.datasets.ImageFolder``; classes are the folder names in sorted order, which
  for CIFAR-10's names is the canonical class order.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
LAYOUTS = ("auto", "torchvision", "imagefolder")


class DataNotFoundError(FileNotFoundError):
    """The configured data directory is missing or incomplete."""


def _expected(root: Path) -> str:
    return (
        f"expected CIFAR-10 under {root} in one of two layouts:\n"
        f"  - torchvision's: {root}/cifar-10-batches-py/ with data_batch_1..5 and test_batch "
        "(set data.cifar10.download: true to let torchvision download it there), or\n"
        f"  - image folders: {root}/train/<class>/*.png|jpg and {root}/test/<class>/*.png|jpg.\n"
        "Point data.cifar10.root in the config at such a directory."
    )


class DataCorruptError(ValueError):
    """A file of the data set cannot be read; the message names it and how to recover."""


def read_image(path: str | Path, root: str | Path) -> np.ndarray:
    """An image file as an RGB uint8 array (H, W, 3), decoded completely now (PIL decodes lazily);
    a truncated or unreadable file is a ``DataCorruptError`` naming it."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            return np.asarray(image.convert("RGB"), dtype=np.uint8)
    except (OSError, SyntaxError, ValueError) as err:  # PIL: "image file is truncated", "cannot identify ..."
        if isinstance(err, FileNotFoundError):
            raise
        raise DataCorruptError(
            f"{path} cannot be read as an image ({err}): the copy of the data set under "
            f"{root} is damaged (e.g. an interrupted copy). Copy the data set again (or "
            "this file from the original), then rerun the data stage (snakemake: "
            "prepare_data)"
        ) from None


def detect_layout(root: Path) -> str | None:
    if (root / "cifar-10-batches-py").is_dir():
        return "torchvision"
    if (root / "train").is_dir() and (root / "test").is_dir():
        return "imagefolder"
    return None


def load_cifar10(root: str | Path, layout: str = "auto", download: bool = False) -> dict:
    """Return ``{"train": (images, labels), "test": (images, labels), "classes": [...]}``.

    Images are uint8 arrays of shape (N, 3, H, W), labels int64 arrays.
    """
    root = Path(root).expanduser()
    if layout not in LAYOUTS:
        raise ValueError(f"data.cifar10.layout: {layout!r} is not one of {LAYOUTS}")
    if layout == "auto":
        layout = detect_layout(root) or ("torchvision" if download else None)
        if layout is None:
            raise DataNotFoundError(f"no CIFAR-10 found: {_expected(root)}")
    if layout == "torchvision":
        return _load_torchvision(root, download)
    return _load_imagefolder(root)


def _load_torchvision(root: Path, download: bool) -> dict:
    from torchvision.datasets import CIFAR10

    out = {"classes": list(CLASSES)}
    for split, train in (("train", True), ("test", False)):
        try:
            dataset = CIFAR10(str(root), train=train, download=download)
        except RuntimeError as err:  # torchvision: "Dataset not found or corrupted"
            raise DataNotFoundError(
                f"CIFAR-10 {split} split is missing or corrupted ({err}); {_expected(root)}"
            ) from err
        images = np.ascontiguousarray(dataset.data.transpose(0, 3, 1, 2))
        out[split] = (images, np.asarray(dataset.targets, dtype=np.int64))
    return out


def _load_imagefolder(root: Path) -> dict:
    from torchvision.datasets import ImageFolder

    out = {}
    for split in ("train", "test"):
        if not (root / split).is_dir():
            raise DataNotFoundError(f"{root / split} does not exist; {_expected(root)}")
        try:
            dataset = ImageFolder(str(root / split))
        except FileNotFoundError as err:  # no class folders, or folders without images
            raise DataNotFoundError(f"{root / split}: {err}; {_expected(root)}") from err
        images = []
        for path, _ in dataset.samples:
            array = read_image(path, root)
            if images and array.shape != images[0].shape:
                raise ValueError(
                    f"{path} is {array.shape[1]}x{array.shape[0]} but the first image "
                    f"of {root / split} is {images[0].shape[1]}x{images[0].shape[0]}; "
                    "all images of a data set must have one size"
                )
            images.append(array)
        stacked = np.ascontiguousarray(np.stack(images).transpose(0, 3, 1, 2))
        out[split] = (stacked, np.asarray(dataset.targets, dtype=np.int64))
        out.setdefault("classes", dataset.classes)
        if dataset.classes != out["classes"]:
            raise ValueError(
                f"{root}/train and {root}/test hold different class folders: "
                f"{out['classes']} vs {dataset.classes}"
            )
    return out
