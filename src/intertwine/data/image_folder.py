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
