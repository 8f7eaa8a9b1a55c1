"""Checks of a CIFAR-10, CIFAR-100 or MNIST copy in image folders (``ROOT/train/<class>/*``,
``ROOT/test/<class>/*``) against what the config asks of it, made before any job runs.

Torchvision's layout holds the whole data set; an image-folder copy holds what was copied, and a
short one fails late or not at all: a job takes the first n images of a split and quietly takes
fewer, and a class missing from both splits makes a data set with a class fewer. The files are
counted, not decoded, so the check costs a directory listing.
"""

from __future__ import annotations

from pathlib import Path

from intertwine.data.cifar10 import CIFARS, CLASSES, detect_layout

#: The classes of each data set read from image folders.
CLASS_COUNTS = {"cifar10": 10, "cifar100": 100, "mnist": 10}

#: The file endings ImageFolder reads (torchvision.datasets.folder.IMG_EXTENSIONS); importing
#: torchvision for them would slow every plan.
IMAGE_ENDINGS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


def image_folder_root(data: dict) -> Path | None:
    """The root of the configured data set when it is read from image folders (``layout:
    imagefolder``, or ``auto`` and the root holds ``train/`` and ``test/``), else None (shapes,
    torchvision's layout, or a root not there yet: the data job says what is missing)."""
    dataset = data["dataset"]
    if dataset not in CIFARS:
        return None
    block = data.get(dataset) or {}
    root = Path(block.get("root", f"data/{dataset}")).expanduser()
    layout = block.get("layout", "auto")
    if layout == "auto":
        layout = detect_layout(root, CIFARS[dataset])
    if layout != "imagefolder" or not (root / "train").is_dir() or not (root / "test").is_dir():
        return None
    return root


def count_folder_images(root: Path) -> dict[str, dict[str, int]]:
    """{split: {class folder: image files}} of ``root/train`` and ``root/test``; class folders
    without images are left out, as ImageFolder leaves them out."""
    counts = {}
    for split in ("train", "test"):
        classes = {}
        for folder in sorted(p for p in (root / split).iterdir() if p.is_dir()):
            files = sum(1 for p in folder.iterdir() if p.suffix.lower() in IMAGE_ENDINGS)
            if files:
                classes[folder.name] = files
        counts[split] = classes
    return counts


def split_word(split: str) -> str:
    """The word a message uses for a split an image count is taken from: ``"stored training"`` (the
    training images with their validation ones) is the training split to the user."""
    return split.removeprefix("stored ")


def image_folder_errors(data: dict, asked: list[tuple[str, int | None, str]]) -> list[str]:
    """What the configured image-folder copy lacks for this config, each naming the folder, the
    count or class, the config key and the fix; [] when it is not an image-folder copy.

    Parameters
    ----------
    data : dict
        The config's ``data`` block (``dataset``, ``val_size`` and the data set's ``root``, ``layout``).
    asked : list of (config key, images or None, split)
        The images each setting takes from the front of a split, ``"test"``, ``"training"`` (the
        training images left after ``data.val_size`` are held out) or ``"stored training"`` (the
        training images with the validation ones); None: the whole split.
    """
    root = image_folder_root(data)
    if root is None:
        return []
    dataset = data["dataset"]
    title, key = CIFARS[dataset].title, f"data.{dataset}.root"
    counts = count_folder_images(root)
    errors = []
    train, test = set(counts["train"]), set(counts["test"])
    for split, missing in (("test", train - test), ("train", test - train)):
        if missing:
            errors.append(
                f"config key {key}: {root / split} has no images of class {', '.join(sorted(missing))}, "
                f"which {root}/{'train' if split == 'test' else 'test'} has; copy that class folder "
                "there (both splits need every class)"
            )
    expected = CLASS_COUNTS[dataset]
    if len(train | test) < expected:
        names = CLASSES if dataset == "cifar10" else []
        lacking = sorted(set(names) - (train | test))
        which = f" (missing: {', '.join(lacking)})" if lacking else ""
        errors.append(
            f"config key {key}: {root} has {len(train | test)} class folders with images in train/ and "
            f"test/, but {title} has {expected}{which}; copy the missing classes into both splits, or "
            f"point {key} at a complete copy (a data set with a class fewer would train without a word)"
        )
    val_size = data.get("val_size", 0)
    stored = sum(counts["train"].values())
    sizes = {"test": sum(counts["test"].values()), "training": stored - val_size, "stored training": stored}
    if stored == 0:
        errors.append(f"config key {key}: {root / 'train'} holds no images; copy the training images there")
        return errors
    if sizes["training"] < 1:
        errors.append(
            f"config key data.val_size: {val_size} validation images are held out of the "
            f"{stored} training images in {root / 'train'}, leaving none to train "
            f"on; set data.val_size to at most {stored - 1}, or copy more images there"
        )
        return errors
    for setting, n, split in asked:
        if n is not None and n > sizes[split]:
            held = " (data.val_size of them are held out)" if split == "training" else ""
            folder, kind = root / ("test" if split == "test" else "train"), split_word(split)
            errors.append(
                f"config key {setting}: {n} {kind} images asked for, but {folder} holds {sizes[split]}"
                f"{held}; ask for at most {sizes[split]}, or copy the whole {title} {kind} split there"
            )
    return errors
