"""CIFAR-10, CIFAR-100 and MNIST from a user's directory, in torchvision's layout or as image folders.

One loader reads all three (``load_cifar``; ``load_cifar10`` and ``load_cifar100`` name the data
set); what tells them apart is in ``CIFARS``. MNIST's grey images are stored as three equal
channels, so that every stage reads (N, 3, H, W) (28 x 28); for the DEQ-NTK, whose inputs are unit
vectors, three equal channels give the same kernel as one. Two layouts are read:
- torchvision's: ``ROOT/cifar-10-batches-py/`` (``data_batch_1`` ... ``test_batch``),
  ``ROOT/cifar-100-python/`` (``train``, ``test``, ``meta``; the 100 fine labels) or
  ``ROOT/MNIST/raw/`` (the four idx files), read through ``torchvision.datasets.CIFAR10`` /
  ``CIFAR100`` / ``MNIST``, which may also download it there
  (``download: true``); the classes are the names in the data set's meta file;
- image folders: ``ROOT/train/<class>/*`` and ``ROOT/test/<class>/*`` (any format PIL reads), read
  through ``torchvision.datasets.ImageFolder``; classes are the folder names in sorted order, which
  for CIFAR-10's names, and for CIFAR-100's fine label names, is the canonical class order.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
LAYOUTS = ("auto", "torchvision", "imagefolder")


@dataclass(frozen=True)
class Cifar:
    """What tells one CIFAR data set from the other."""

    key: str  # its `data.dataset` value, and the name of its config block
    title: str  # its name in messages
    folder: str  # torchvision's directory under the root
    files: str  # the files in that directory, for messages
    reader: str  # the torchvision.datasets class that reads (and downloads) it


CIFARS = {
    "cifar10": Cifar(
        "cifar10", "CIFAR-10", "cifar-10-batches-py", "data_batch_1..5 and test_batch", "CIFAR10"
    ),
    "cifar100": Cifar("cifar100", "CIFAR-100", "cifar-100-python", "train, test and meta", "CIFAR100"),
    "mnist": Cifar(
        "mnist",
        "MNIST",
        "MNIST",
        "raw/train-images-idx3-ubyte, raw/train-labels-idx1-ubyte and the two t10k files",
        "MNIST",
    ),
}


class DataNotFoundError(FileNotFoundError):
    """The configured data directory is missing or incomplete."""


def _expected(root: Path, cifar: Cifar) -> str:
    return (
        f"expected {cifar.title} under {root} in one of two layouts:\n"
        f"  - torchvision's: {root}/{cifar.folder}/ with {cifar.files} "
        f"(set data.{cifar.key}.download: true to let torchvision download it there), or\n"
        f"  - image folders: {root}/train/<class>/*.png|jpg and {root}/test/<class>/*.png|jpg.\n"
        f"Point data.{cifar.key}.root in the config at such a directory." + _other_cifar(root, cifar)
    )


def _other_cifar(root: Path, cifar: Cifar) -> str:
    """A hint when ``root`` holds the other CIFAR in torchvision's layout (a wrong root or data set)."""
    for other in CIFARS.values():
        if other != cifar and (root / other.folder).is_dir():
            return (
                f"\n{root} holds {other.folder}/, which is {other.title}, not {cifar.title}: set "
                f"data.dataset: {other.key} to use it, or point data.{cifar.key}.root at {cifar.title}."
            )
    return ""


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


def detect_layout(root: Path, cifar: Cifar) -> str | None:
    if (root / cifar.folder).is_dir():
        return "torchvision"
    if (root / "train").is_dir() and (root / "test").is_dir():
        return "imagefolder"
    return None


def folder_problem(
    dataset: str, root: str | Path, layout: str = "auto", download: bool = False
) -> str | None:
    """What is wrong with ``root`` as the folder of ``dataset`` (a key of ``CIFARS``), from its
    directories alone (no image is read): None when ``load_cifar`` would find the data set there in
    ``layout``, or torchvision may download it there. For a check before anything runs."""
    cifar = CIFARS[dataset]
    root = Path(root).expanduser()
    may_download = download and layout in ("auto", "torchvision")
    if may_download and not root.is_file():
        return None
    if not root.is_dir():
        return f"{root} is not a directory; {_expected(root, cifar)}"
    found = detect_layout(root, cifar)
    if layout == "auto" and found is None:
        return f"no {cifar.title} found in {root}; {_expected(root, cifar)}"
    if layout == "torchvision" and not (root / cifar.folder).is_dir():
        return f"{root / cifar.folder} does not exist (layout: torchvision); {_expected(root, cifar)}"
    if layout == "imagefolder":
        for split in ("train", "test"):
            if not (root / split).is_dir():
                return f"{root / split} does not exist (layout: imagefolder); {_expected(root, cifar)}"
    return None


def load_cifar(dataset: str, root: str | Path, layout: str = "auto", download: bool = False) -> dict:
    """Read ``dataset`` (a key of ``CIFARS``: ``cifar10``, ``cifar100`` or ``mnist``) from ``root``; return
    ``{"train": (images, labels), "test": (images, labels), "classes": [...]}``.

    Images are uint8 arrays of shape (N, 3, H, W), labels int64 arrays (CIFAR-100: fine labels;
    MNIST: the grey value in all three channels, also when its image folders hold grey files).
    """
    if dataset not in CIFARS:
        raise ValueError(f"data.dataset: {dataset!r} is not one of {tuple(CIFARS)}")
    cifar = CIFARS[dataset]
    root = Path(root).expanduser()
    if layout not in LAYOUTS:
        raise ValueError(f"data.{cifar.key}.layout: {layout!r} is not one of {LAYOUTS}")
    if layout == "auto":
        layout = detect_layout(root, cifar) or ("torchvision" if download else None)
        if layout is None:
            raise DataNotFoundError(f"no {cifar.title} found: {_expected(root, cifar)}")
    if layout == "torchvision":
        return _load_torchvision(root, download, cifar)
    return _load_imagefolder(root, cifar)


def load_cifar10(root: str | Path, layout: str = "auto", download: bool = False) -> dict:
    """CIFAR-10 (``load_cifar``)."""
    return load_cifar("cifar10", root, layout, download)


def load_cifar100(root: str | Path, layout: str = "auto", download: bool = False) -> dict:
    """CIFAR-100 with its 100 fine labels (``load_cifar``)."""
    return load_cifar("cifar100", root, layout, download)


def _load_torchvision(root: Path, download: bool, cifar: Cifar) -> dict:
    import torchvision.datasets

    reader = getattr(torchvision.datasets, cifar.reader)
    out = {}
    for split, train in (("train", True), ("test", False)):
        try:
            dataset = reader(str(root), train=train, download=download)
        except RuntimeError as err:  # torchvision: "Dataset not found or corrupted"
            raise DataNotFoundError(
                f"{cifar.title} {split} split is missing or corrupted ({err}); {_expected(root, cifar)}"
            ) from err
        data = np.asarray(dataset.data, dtype=np.uint8)
        if data.ndim == 3:  # MNIST: (N, H, W) grey, stored as three equal channels
            data = np.repeat(data[..., None], 3, axis=3)
        images = np.ascontiguousarray(data.transpose(0, 3, 1, 2))
        out[split] = (images, np.asarray(dataset.targets, dtype=np.int64))
        out["classes"] = list(dataset.classes)  # the names in the data set's meta file
    return out


def _load_imagefolder(root: Path, cifar: Cifar) -> dict:
    from torchvision.datasets import ImageFolder

    out = {}
    for split in ("train", "test"):
        if not (root / split).is_dir():
            raise DataNotFoundError(f"{root / split} does not exist; {_expected(root, cifar)}")
        try:
            dataset = ImageFolder(str(root / split))
        except FileNotFoundError as err:  # no class folders, or folders without images
            raise DataNotFoundError(f"{root / split}: {err}; {_expected(root, cifar)}") from err
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
