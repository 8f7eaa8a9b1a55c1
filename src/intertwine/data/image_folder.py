"""Images from a folder per class (torchvision's ImageFolder layout; Imagenette's ``val`` is one:
``val/n01440764/*.JPEG`` ...), read as the excitation-pullback paper's released code reads them:
resized so that the shorter side is ``resize``, centre-cropped to ``size`` x ``size``. Local files
only; nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".webp")


def class_folders(root: str | Path) -> list[str]:
    """The sub-folders of ``root`` that hold at least one image, sorted by name."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(
            f"{root}: no such image folder; point pullback.external.<name>.images at a folder with one "
            "sub-folder of images per class (e.g. Imagenette's imagenette2-320/val)"
        )
    folders = sorted(d.name for d in root.iterdir() if d.is_dir() and any(_images(d)))
    if not folders:
        raise ValueError(
            f"{root} has no sub-folder with images ({', '.join(IMAGE_SUFFIXES)}): one folder per class"
        )
    return folders


def _images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())


def load_folder_images(
    root: str | Path,
    folders: list[str],
    per_class: int,
    size: int = 224,
    resize: int = 256,
    draw_seed: int | None = None,
) -> tuple[Tensor, list[str], list[str]]:
    """``per_class`` images of each of ``folders`` under ``root``, RGB, resized (shorter side
    ``resize``, bilinear, antialiased) and centre-cropped to ``size``: the first by file name, or
    with ``draw_seed`` the first of their class in a shuffled order of every image of every class
    folder under ``root`` (sorted as torchvision's ``ImageFolder`` sorts them), the permutation
    ``torch.randperm(N, generator=torch.Generator().manual_seed(draw_seed))`` that a shuffling
    ``DataLoader`` seeded so draws (the excitation-pullback paper seeds its loader with 314).

    Returns (uint8 tensor (N, 3, size, size), each image's folder, each image's file name)."""
    from PIL import Image
    from torchvision.transforms import functional as TF

    if resize < size:
        raise ValueError(
            f"resize {resize} is below the crop size {size}: set resize >= size (the released code: 256, 224)"
        )
    root = Path(root).expanduser()
    images, owners, names = [], [], []
    drawn = _drawn(root, draw_seed) if draw_seed is not None else None
    for folder in folders:
        files = _images(root / folder) if drawn is None else [p for p in drawn if p.parent.name == folder]
        files = files[:per_class]
        if len(files) < per_class:
            raise ValueError(f"{root / folder} has {len(files)} images, {per_class} asked for per class")
        for path in files:
            with Image.open(path) as image:
                image = TF.center_crop(TF.resize(image.convert("RGB"), resize, antialias=True), size)
                images.append(torch.from_numpy(np.asarray(image, dtype=np.uint8).copy()).permute(2, 0, 1))
            owners.append(folder)
            names.append(path.name)
    return torch.stack(images), owners, names


def _drawn(root: Path, seed: int) -> list[Path]:
    """Every image of every class folder under ``root`` in ``ImageFolder``'s order, shuffled by
    ``torch.randperm`` with a generator seeded ``seed``."""
    every = [path for folder in class_folders(root) for path in _images(root / folder)]
    order = torch.randperm(len(every), generator=torch.Generator().manual_seed(seed))
    return [every[k] for k in order.tolist()]


def split_folders_problem(root: str | Path) -> str | None:
    """What keeps ``root`` from being an image-folder data set (``data.image_folder.root``): it must
    hold ``train/<class>/*`` and ``test/<class>/*`` with the same classes, each with images. None
    when it does (the files are listed, not decoded)."""
    root = Path(root).expanduser()
    key = "config key data.image_folder.root"
    if not root.is_dir():
        return (
            f"{key}: {root} is not a folder; point it at a folder holding train/<class>/* and test/<class>/*"
        )
    found = {}
    for split in ("train", "test"):
        if not (root / split).is_dir():
            return (
                f"{key}: {root / split} does not exist; the folder needs train/<class>/* and test/<class>/*"
            )
        found[split] = {d.name for d in (root / split).iterdir() if d.is_dir() and _images(d)}
        if not found[split]:
            return (
                f"{key}: {root / split} has no class folder with images ({', '.join(IMAGE_SUFFIXES)}); put "
                "each class's images in a folder named after the class"
            )
    if found["train"] != found["test"]:
        differ = sorted(found["train"] ^ found["test"])
        return (
            f"{key}: {root}/train and {root}/test hold different classes (only in one: {differ}); both "
            "splits need every class folder"
        )
    if len(found["train"]) < 2:
        return f"{key}: {root} has one class ({sorted(found['train'])}); a classifier needs at least 2"
    return None


def first_image_side(root: str | Path) -> int | None:
    """The longer side of the first training image of an image-folder data set (its header only),
    or None when there is none."""
    from PIL import Image

    root = Path(root).expanduser()
    if split_folders_problem(root):
        return None
    folder = sorted(count_split_images(root)["train"])[0]
    with Image.open(_images(root / "train" / folder)[0]) as image:
        return max(image.size)


def count_split_images(root: str | Path) -> dict[str, dict[str, int]]:
    """{split: {class: image files}} of an image-folder data set (files listed, not decoded)."""
    root = Path(root).expanduser()
    return {
        split: {
            d.name: len(_images(d)) for d in sorted((root / split).iterdir()) if d.is_dir() and _images(d)
        }
        for split in ("train", "test")
    }


def load_split_folders(root: str | Path, image_size: int | None) -> dict:
    """An image-folder data set: ``root/train/<class>/*`` and ``root/test/<class>/*``, any classes (the
    class folders, sorted by name) and any image sizes. With ``image_size`` every image is resized so
    that its shorter side is ``image_size`` (bilinear, antialiased) and centre-cropped to a square;
    without (None) the images are kept as they are and must share one size. Grey and RGBA images
    become RGB.

    Returns ``{"train": (images uint8 (N, 3, H, W), labels int64 (N,)), "test": ..., "classes": [...]}``.
    """
    from PIL import Image
    from torchvision.transforms import functional as TF

    from intertwine.data.cifar10 import DataCorruptError

    problem = split_folders_problem(root)
    if problem:
        raise FileNotFoundError(problem)
    root = Path(root).expanduser()
    classes = sorted(count_split_images(root)["train"])
    out: dict = {"classes": classes}
    for split in ("train", "test"):
        images, labels, first = [], [], None
        for label, name in enumerate(classes):
            for path in _images(root / split / name):
                try:
                    with Image.open(path) as image:
                        image = image.convert("RGB")
                        if image_size is not None:
                            image = TF.center_crop(TF.resize(image, image_size, antialias=True), image_size)
                        array = np.asarray(image, dtype=np.uint8)
                except (OSError, SyntaxError, ValueError) as err:
                    raise DataCorruptError(
                        f"{path} cannot be read as an image ({err}); replace or remove it, then rerun the data stage"
                    ) from None
                if first is None:
                    first = (path, array.shape)
                elif array.shape != first[1]:
                    raise ValueError(
                        f"{path} is {array.shape[1]}x{array.shape[0]} but {first[0]} is "
                        f"{first[1][1]}x{first[1][0]}: images of several sizes need one size to train on; "
                        "set config key data.image_folder.image_size (e.g. 32: shorter side resized, "
                        "centre crop)"
                    )
                images.append(array)
                labels.append(label)
        out[split] = (
            np.ascontiguousarray(np.stack(images).transpose(0, 3, 1, 2)),
            np.asarray(labels, dtype=np.int64),
        )
    return out
