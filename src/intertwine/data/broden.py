"""The Broden probe set (Bau et al. 2017) from its on-disk layout, as a ``ConceptData``.

Reads the directory that NetDissect distributes (``broden1_224`` or ``broden1_227``; fetch it
yourself with NetDissect's ``script/dlbroden.sh``, nothing is downloaded here)::

    ROOT/index.csv      image,split,ih,iw,sh,sw,<one column per category>
    ROOT/label.csv      number,name,category,frequency,coverage,syns
    ROOT/category.csv   name,first,last,count,frequency
    ROOT/c_<cat>.csv    code,number,name,frequency,coverage   (one per category)
    ROOT/images/...     the images and segmentation PNGs that index.csv names

Layout facts (from NetDissect's ``loadseg.py``/``joinseg.py``, whose ``unify`` writes the set):

- ``index.csv``: ``image`` is the image's path under ``images/``; ``split`` is ``train`` or
  ``val``; ``ih, iw`` the image size and ``sh, sw`` the segmentation size (broden1_224: 224 and
  112). The other columns are categories (broden1: color, object, part, material, scene,
  texture). A cell is empty or a ``;``-separated list, dominant entry first; an entry is either a
  decimal label number (a whole-image label, as for scene and texture) or a PNG path under
  ``images/`` whose pixels encode the label number as ``R + 256 * G``.
- ``label.csv``: one row per global label number (0 is unused, "-"); ``category`` lists the
  categories the label occurs in with their frequencies, most frequent first, e.g.
  ``material(36);object(3)``.
- ``c_<cat>.csv``: the labels of one category with their frequency and coverage within it.

Mapping onto ``ConceptData``: concept ``k - 1`` is Broden label number ``k`` (names from
``label.csv`` in number order, so the label maps hold Broden's numbers unchanged). A concept's
category is NetDissect's *primary category* (``primary_categories_per_index``): the loaded
category in which the label has the largest coverage according to ``c_<cat>.csv``, ties going to
the later category in ``category.csv``; a label listed in no loaded category's ``c_`` file falls
back to the first category in its ``label.csv`` entry. Label layers: one per (category column,
position in the cell), as many per column as the longest cell among the loaded rows has
entries, in ``index.csv``'s column order, so overlapping annotations (several part masks,
several textures) stay separate; whole-image labels fill their layer. Label maps are at the
segmentation size ``(sh, sw)``.

Memory: the whole selection is decoded into memory at once (preallocated, no second copy):
``3 ih iw`` bytes per image plus ``2 L sh sw`` bytes for its L label layers. All of broden1_224
(63,305 images at 224x224, masks at 112x112) is about 9.5 GB of images plus 1.6 GB per label
layer (L is the sum over the loaded columns of the longest cell, several parts and textures
included); use ``split``, ``categories`` and ``max_images`` to take a part of it.
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from intertwine.data.concepts import ConceptData

META_COLUMNS = ("image", "split", "ih", "iw", "sh", "sw")
_NUMBER = re.compile(r"\d+")
_CATEGORY_ENTRY = re.compile(r"^(.*?)\((\d*)\)$")

# A selected row of index.csv and its parsed cells, by category column.
_Row = tuple[dict[str, str], dict[str, list[int | str]]]


class BrodenNotFoundError(FileNotFoundError):
    """The Broden directory is missing or incomplete."""


def _expected(root: Path) -> str:
    return (
        f"expected the Broden layout as NetDissect distributes it (broden1_224 or broden1_227, "
        f"fetched with NetDissect's script/dlbroden.sh) under {root}: index.csv, label.csv, "
        f"category.csv, one c_<category>.csv per category, and the images/ directory with the "
        f"images and segmentation PNGs that index.csv names"
    )


def _read_csv(path: Path, root: Path) -> tuple[list[str], list[dict[str, str]]]:
    if not path.is_file():
        raise BrodenNotFoundError(f"{path} is missing; {_expected(root)}")
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


def _require(path: Path, columns: tuple[str, ...], fields: list[str]) -> None:
    missing = [c for c in columns if c not in fields]
    if missing:
        raise ValueError(
            f"{path} lacks the column(s) {missing} (it has {fields}); is this a Broden directory?"
        )


def _entries(cell: str | None) -> list[int | str]:
    """A cell's ``;``-separated entries: label numbers as ints, PNG paths as strings."""
    return [int(e) if _NUMBER.fullmatch(e) else e for e in (s.strip() for s in (cell or "").split(";")) if e]


def _read_labels(root: Path) -> tuple[list[str], list[list[str]]]:
    """Names by label number (index 0 unused) and each label's categories from label.csv."""
    path = root / "label.csv"
    fields, rows = _read_csv(path, root)
    _require(path, ("number", "name", "category"), fields)
    by_number: dict[int, tuple[str, list[str]]] = {}
    for line, row in enumerate(rows, start=2):
        try:
            number = int(row["number"])
        except ValueError:
            raise ValueError(f"{path} line {line}: number {row['number']!r} is not an integer") from None
        if number <= 0:
            continue  # 0 is Broden's "-", never a concept
        cats = []
        for entry in filter(None, (row["category"] or "").split(";")):
            match = _CATEGORY_ENTRY.match(entry.strip())
            cats.append(match.group(1) if match else entry.strip())
        by_number[number] = (row["name"], cats)
    if not by_number:
        raise ValueError(f"{path} lists no labels")
    size = max(by_number) + 1
    names = [f"unused-{k}" for k in range(size)]
    categories: list[list[str]] = [[] for _ in range(size)]
    for number, (name, cats) in by_number.items():
        names[number], categories[number] = name, cats
    duplicates = sorted(n for n, count in Counter(names[1:]).items() if count > 1)
    if duplicates:
        raise ValueError(f"{path}: label names must be unique, but {duplicates[:5]} repeat")
    return names, categories


def _primary_categories(root: Path, loaded: list[str], size: int, listed: list[list[str]]) -> list[str]:
    """NetDissect's primary category of each label number 0..size-1 among ``loaded``."""
    coverage = np.zeros((len(loaded), size))
    present = np.zeros((len(loaded), size), dtype=bool)
    for i, cat in enumerate(loaded):
        path = root / f"c_{cat}.csv"
        fields, rows = _read_csv(path, root)
        _require(path, ("number", "coverage"), fields)
        for row in rows:
            number = int(row["number"])
            if 0 < number < size:
                present[i, number] = True
                coverage[i, number] = float(row["coverage"] or 0.0)
    out = []
    for k in range(size):
        if present[:, k].any():
            # max over (coverage, category index): ties go to the later category, as in NetDissect
            best = max((coverage[i, k], i) for i in range(len(loaded)) if present[i, k])[1]
            out.append(loaded[best])
        else:
            out.append(listed[k][0] if listed[k] else "unknown")
    return out


def _decode_image(path: Path, root: Path) -> np.ndarray:
    from intertwine.data.cifar10 import read_image

    if not path.is_file():
        raise BrodenNotFoundError(f"{path} (named in index.csv) is missing; {_expected(root)}")
    return read_image(path, root)


def _columns_to_load(
    index_path: Path, fields: list[str], categories: list[str] | tuple[str, ...] | None
) -> list[str]:
    """The category columns of index.csv to load, in its order (all of them by default)."""
    columns = [f for f in fields if f not in META_COLUMNS]
    if categories is not None:
        unknown = [c for c in categories if c not in columns]
        if unknown:
            raise ValueError(
                f"categories {unknown} are not columns of {index_path} (its categories: {columns})"
            )
        columns = [c for c in columns if c in set(categories)]
    if not columns:
        raise ValueError(f"no category columns to load from {index_path}")
    return columns


def _concepts(root: Path, index_path: Path, columns: list[str]) -> tuple[list[str], list[str]]:
    """Names and primary categories by label number (index 0 unused).

    The primary category is chosen among the loaded columns only, taken in category.csv's
    order, since that order settles ties.
    """
    cat_path = root / "category.csv"
    cat_fields, cat_rows = _read_csv(cat_path, root)
    _require(cat_path, ("name",), cat_fields)
    order = [row["name"] for row in cat_rows]
    unlisted = [c for c in columns if c not in order]
    if unlisted:
        raise ValueError(
            f"{index_path} has category columns {unlisted} that {cat_path} does not list (it lists {order})"
        )
    names, listed = _read_labels(root)
    primary = _primary_categories(root, [c for c in order if c in columns], len(names), listed)
    return names, primary


def _select_rows(
    index_path: Path,
    rows: list[dict[str, str]],
    columns: list[str],
    split: str | None,
    max_images: int | None,
) -> list[_Row]:
    """The selected rows of index.csv with their parsed cells, in the file's order."""
    if split is not None:
        splits = sorted({row["split"] for row in rows})
        if split not in splits:
            raise ValueError(f"split {split!r} does not occur in {index_path} (it has {splits})")
        rows = [row for row in rows if row["split"] == split]
    parsed = []
    for row in rows:
        cells = {c: _entries(row[c]) for c in columns}
        if any(cells.values()):  # as NetDissect's SegmentationData, skip rows with nothing to show
            parsed.append((row, cells))
    if max_images is not None:
        if max_images < 1:
            raise ValueError(f"max_images must be positive (or None for all), got {max_images}")
        parsed = parsed[:max_images]
    if not parsed:
        raise ValueError(
            f"no rows of {index_path} are selected (split={split!r}, "
            f"categories={columns}, max_images={max_images}); rows without any "
            f"annotation in the loaded categories are skipped"
        )
    return parsed


def _common_size(index_path: Path, parsed: list[_Row]) -> tuple[int, int, int, int]:
    """The ``ih, iw, sh, sw`` that every selected row must share (they fill one tensor)."""
    sizes = [(int(r["ih"]), int(r["iw"]), int(r["sh"]), int(r["sw"])) for r, _ in parsed]
    for (row, _), size in zip(parsed, sizes):
        if size != sizes[0]:
            raise ValueError(
                f"{index_path}: image {row['image']!r} is {size[0]}x{size[1]} with a "
                f"{size[2]}x{size[3]} segmentation, but the first selected image "
                f"{parsed[0][0]['image']!r} is {sizes[0][0]}x{sizes[0][1]} with "
                f"{sizes[0][2]}x{sizes[0][3]}; all images must share one size: use a Broden "
                f"release resized to one size (broden1_224, broden1_227), or resize the images "
                f"and their segmentations to one size and update ih, iw, sh, sw in index.csv"
            )
    return sizes[0]


def _layer_offsets(parsed: list[_Row], columns: list[str]) -> tuple[dict[str, int], int]:
    """Each column's first label layer, and the number of layers: a column gets as many layers
    as its longest selected cell has entries, so overlapping annotations stay apart."""
    depth = {c: max((len(cells[c]) for _, cells in parsed), default=0) for c in columns}
    offsets, layers = {}, 0
    for c in columns:
        offsets[c], layers = layers, layers + depth[c]
    return offsets, layers


def _read_row_image(root: Path, path: Path, ih: int, iw: int) -> torch.Tensor:
    """A row's image as a (3, ih, iw) uint8 tensor, checked against index.csv's size."""
    pixels = _decode_image(path, root)
    if pixels.shape[:2] != (ih, iw):
        raise ValueError(
            f"{path} is {pixels.shape[0]}x{pixels.shape[1]} but index.csv says "
            f"{ih}x{iw}; all images must share one size (see index.csv's ih, iw)"
        )
    return torch.from_numpy(pixels.transpose(2, 0, 1).copy())


def _read_segmentation(root: Path, seg_path: Path, sh: int, sw: int, top: int) -> torch.Tensor:
    """A segmentation PNG as an (sh, sw) int16 map of Broden label numbers (``R + 256 G``)."""
    rgb = _decode_image(seg_path, root).astype(np.int32)
    if rgb.shape[:2] != (sh, sw):
        raise ValueError(
            f"{seg_path} is {rgb.shape[0]}x{rgb.shape[1]} but index.csv says segmentations are {sh}x{sw}"
        )
    code = rgb[..., 0] + 256 * rgb[..., 1]
    if int(code.max()) > top:
        raise ValueError(
            f"{seg_path} holds label {int(code.max())} (R + 256 G), but label.csv stops at {top}"
        )
    return torch.from_numpy(code.astype(np.int16))


def _fill_layers(
    out: torch.Tensor,
    root: Path,
    row: dict[str, str],
    cells: dict[str, list[int | str]],
    offsets: dict[str, int],
    top: int,
) -> None:
    """Write one row's label layers into `out` (L, sh, sw), which holds zeros where the row
    has no entry; a whole-image label fills its layer."""
    sh, sw = out.shape[1:]
    for c, entries in cells.items():
        for j, entry in enumerate(entries):
            layer = offsets[c] + j
            if isinstance(entry, int):
                if entry > top:
                    raise ValueError(
                        f"{root / 'index.csv'}: image {row['image']!r} has {c} label "
                        f"{entry}, but label.csv stops at {top}"
                    )
                out[layer] = entry
                continue
            out[layer] = _read_segmentation(root, root / "images" / entry, sh, sw, top)


def load_broden(
    root: str | Path,
    *,
    max_images: int | None = None,
    categories: list[str] | tuple[str, ...] | None = None,
    split: str | None = None,
) -> ConceptData:
    """Load (part of) a Broden directory into memory as a ``ConceptData``.

    See the module docstring for the layout, the category rule and the memory needed.

    Parameters
    ----------
    root:
        The Broden directory (``broden1_224`` or ``broden1_227``).
    max_images:
        Keep the first that many selected rows (default: all of them).
    categories:
        Load only these annotation columns of ``index.csv`` (default: all of them, in
        ``index.csv``'s order).  Rows without any annotation in the loaded columns are dropped
        (as NetDissect's ``SegmentationData`` does) before ``max_images`` applies.
    split:
        Keep only the rows of ``index.csv`` whose split column is this (``"train"`` or
        ``"val"``; default: all rows).

    Returns
    -------
    ConceptData
        Images ``(N, 3, ih, iw)`` uint8, label maps ``(N, L, sh, sw)`` int16 holding Broden's
        label numbers, concept ``k - 1`` being label number ``k``; every selected row must
        share one image size and one segmentation size.
    """
    root = Path(root).expanduser()
    if not root.is_dir():
        raise BrodenNotFoundError(f"{root} is not a directory; {_expected(root)}")
    index_path = root / "index.csv"
    fields, rows = _read_csv(index_path, root)
    _require(index_path, META_COLUMNS, fields)
    columns = _columns_to_load(index_path, fields, categories)
    names, primary = _concepts(root, index_path, columns)
    parsed = _select_rows(index_path, rows, columns, split, max_images)
    ih, iw, sh, sw = _common_size(index_path, parsed)
    offsets, layers = _layer_offsets(parsed, columns)

    # preallocated, so that the decoded set is never held twice
    images = torch.empty((len(parsed), 3, ih, iw), dtype=torch.uint8)
    labels = torch.zeros((len(parsed), layers, sh, sw), dtype=torch.int16)
    top = len(names) - 1  # the largest label number label.csv names
    for n, (row, cells) in enumerate(parsed):
        images[n] = _read_row_image(root, root / "images" / row["image"], ih, iw)
        _fill_layers(labels[n], root, row, cells, offsets, top)
    return ConceptData(images, labels, names[1:], primary[1:])
