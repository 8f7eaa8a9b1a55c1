"""The DEQ neural tangent kernel stage (Feng & Kolter, "On the Neural Tangent Kernel of Equilibrium
Models"): kernel regression on a data set's images with the fully connected DEQ-NTK
(:mod:`intertwine.kernels.deq`), its Gram computed in blocks of rows; the finite-depth NTK against
the DEQ-NTK over depth (the paper's Figure 1); and the kernel as a reference for the similarity
stage (CKA of each site's representation with the DEQ-NTK on the same images).

Inputs
------
Every image is flattened (C x H x W values, pixels scaled to [0, 1] and not centred) and divided
by its norm: the kernels are defined for unit vectors. Uncentred images correlate at 0.7-0.9, which
gives the paper's fixed-point iteration counts (14 / 28 / 54 on CIFAR-10).

The training pool is the data set's whole training set, the validation split included (kernel
regression selects nothing on it): 50,000 images of CIFAR-10. One permutation of the pool, drawn
from the global seed, gives every training subset of the accuracy study: the first n_train of it,
so that the subsets are nested and one Gram of the largest serves every smaller one. Its test
images are the first n_test of the test split (the data cache holds each split in a random order).
Each draw of the depth sweep permutes the pool and the test split anew.

The Gram
--------
The accuracy study's Gram has rows [train; test] (N + m) and the N training images as columns.
``intertwine.plan.gram_layout`` cuts it into blocks of rows, one job each; a training block of rows [a, b) holds
only the columns [a, N) (the training Gram is symmetric: the part left of the block is the mirror
of blocks above it), a test block every column. ``assemble`` puts the training Gram and the
test-train Gram of any n_train <= N back together from them.
"""

from __future__ import annotations

import io
import math
import time
import zipfile
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from intertwine.kernels import deq
from intertwine.settings import parse_variances, variances_name
from intertwine.utils import atomic_path

__all__ = [
    "Block",
    "assemble",
    "check_blocks",
    "depth_sweep",
    "draw",
    "gram_block",
    "load_block",
    "parse_variances",
    "reference_rows",
    "regression_accuracy",
    "save_block",
    "unit_rows",
    "variances_name",
]

#: The depth column's value for the equilibrium (the DEQ-NTK); finite depths are "1", "2", ...
DEQ = "deq"


def unit_rows(images: Tensor) -> Tensor:
    """uint8 images (n, C, H, W) as float64 rows (n, C H W) of unit norm: pixels in [0, 1], not
    centred, each image divided by its norm (an all-black image is an error)."""
    x = images.to(torch.float64).flatten(1) / 255.0
    norms = torch.linalg.vector_norm(x, dim=1, keepdim=True)
    if bool((norms == 0).any()):
        raise ValueError("an all-zero image cannot be normalised to unit norm")
    return x / norms


def draw(n: int, size: int, generator: torch.Generator, what: str = "images") -> Tensor:
    """The first ``n`` of a random permutation of ``range(size)`` (a ValueError if n > size)."""
    if n > size:
        raise ValueError(f"{n} {what} asked for, but there are only {size}")
    return torch.randperm(size, generator=generator)[:n]


# --- the Gram in blocks of rows -------------------------------------------------------------------


class Block(NamedTuple):
    """Rows [start, stop) of the Gram's ``part`` ("train" or "test"), columns [column, N), of
    the Gram of ``n_train`` = N training and ``n_test`` test images at ``variances``
    (sigma_w2, sigma_u2, sigma_b2): a block records the setting and sizes of its Gram, so that
    blocks of another Gram are refused (``check_blocks``)."""

    part: str
    start: int
    stop: int
    column: int
    gram: Tensor
    iterations: int
    residual: float
    seconds: float
    variances: tuple[float, float, float]
    n_train: int
    n_test: int


def gram_block(
    x_train: Tensor,
    x_test: Tensor,
    part: str,
    start: int,
    stop: int,
    variances: tuple[float, float, float],
    tol: float = 1e-10,
) -> Block:
    """One block of the DEQ-NTK Gram: training rows [start, stop) against the training columns
    [start, N), or test rows [start, stop) against every training column (unit rows, see
    :func:`unit_rows`)."""
    if part not in ("train", "test"):
        raise ValueError(f"part must be 'train' or 'test', got {part!r}")
    rows = x_train if part == "train" else x_test
    if not 0 <= start < stop <= len(rows):
        raise ValueError(f"rows [{start}, {stop}) are not within the {len(rows)} {part} rows")
    column = start if part == "train" else 0
    w, u, b = variances
    started = time.perf_counter()
    gram, iterations, residual = deq.deq_ntk(
        rows[start:stop], x_train[column:], sigma_w2=w, sigma_u2=u, sigma_b2=b, tol=tol
    )
    return Block(
        part,
        start,
        stop,
        column,
        gram,
        iterations,
        residual,
        time.perf_counter() - started,
        tuple(float(v) for v in variances),
        len(x_train),
        len(x_test),
    )


def save_block(block: Block, path: str | Path) -> None:
    """Write a block as .npz (the Gram in float64 and where it sits), atomically."""
    buffer = io.BytesIO()
    np.savez(
        buffer,
        gram=block.gram.detach().cpu().numpy(),
        part=np.array(block.part),
        rows=np.array([block.start, block.stop, block.column]),
        iterations=np.array(block.iterations),
        residual=np.array(block.residual),
        seconds=np.array(block.seconds),
        variances=np.array(block.variances, dtype=np.float64),
        sizes=np.array([block.n_train, block.n_test]),
    )
    with atomic_path(path) as tmp:
        Path(tmp).write_bytes(buffer.getvalue())


def load_block(path: str | Path) -> Block:
    """A block written by :func:`save_block`; a damaged or foreign file, or one written before
    blocks recorded their variances and sizes, is an error naming it."""
    try:
        with np.load(path) as f:
            if "variances" not in f.files or "sizes" not in f.files:
                raise ValueError(
                    f"{path}: a Gram block that records no variance setting or sizes (written by an "
                    "older version, or not a block of this stage); delete it and rerun its deqntk_gram job"
                )
            start, stop, column = (int(v) for v in f["rows"])
            n_train, n_test = (int(v) for v in f["sizes"])
            block = Block(
                str(f["part"]),
                start,
                stop,
                column,
                torch.from_numpy(f["gram"]),
                int(f["iterations"]),
                float(f["residual"]),
                float(f["seconds"]),
                tuple(float(v) for v in f["variances"]),
                n_train,
                n_test,
            )
    except FileNotFoundError:
        raise
    except ValueError as err:
        if str(err).startswith(f"{path}: "):
            raise
        raise ValueError(
            f"{path}: not a readable Gram block ({err}); delete it and rerun its deqntk_gram job"
        ) from None
    except (OSError, KeyError, EOFError, TypeError, zipfile.BadZipFile) as err:
        raise ValueError(
            f"{path}: not a readable Gram block ({type(err).__name__}: {err}); delete it and rerun its "
            "deqntk_gram job"
        ) from None
    if (
        block.part not in ("train", "test")
        or block.gram.ndim != 2
        or block.gram.shape[0] != stop - start
        or len(block.variances) != 3
    ):
        raise ValueError(f"{path}: not a Gram block of this stage; delete it and rerun its deqntk_gram job")
    return block


def check_blocks(
    blocks: list[Block], names: list[str], variances: tuple[float, float, float], n_train: int, n_test: int
) -> None:
    """ValueError naming the first block (``names``: its file) that belongs to another Gram than
    the one of ``variances`` with at least ``n_train`` training columns and ``n_test`` test rows,
    or that disagrees with the first block on the Gram's sizes."""
    if not blocks:
        raise ValueError("no Gram blocks given; give every block of one Gram (deqntk-gram's outputs)")
    first = blocks[0]
    for block, name in zip(blocks, names):
        if not all(
            math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15) for a, b in zip(block.variances, variances)
        ):
            raise ValueError(
                f"{name} is a block of the Gram at {variances_name(block.variances)}, not at "
                f"{variances_name(variances)}: give only the blocks of one variance setting (rerun its "
                "deqntk_gram jobs if it is in the wrong place)"
            )
        if (block.n_train, block.n_test) != (first.n_train, first.n_test):
            raise ValueError(
                f"{name} is a block of a Gram of {block.n_train} training and {block.n_test} test images, "
                f"but {names[0]} of one of {first.n_train} and {first.n_test}: the blocks come from two "
                "configs; delete the stale ones and rerun their deqntk_gram jobs"
            )
    if first.n_train < n_train:
        raise ValueError(
            f"the blocks ({names[0]}, ...) hold a Gram of {first.n_train} training images, fewer than the "
            f"{n_train} asked for; rerun the deqntk_gram jobs with --n-train {n_train} or more"
        )
    if first.n_test != n_test:
        raise ValueError(
            f"the blocks ({names[0]}, ...) hold {first.n_test} test rows, but n_test is {n_test}: they belong "
            "to another config; rerun their deqntk_gram jobs"
        )


def _tiles(blocks: list[Block], n: int, what: str) -> None:
    """ValueError unless the blocks' rows cover [0, n) exactly once."""
    covered = np.zeros(n, dtype=int)
    for block in blocks:
        covered[block.start : min(block.stop, n)] += 1
    if (covered != 1).any():
        first = int(np.argmax(covered != 1))
        raise ValueError(
            f"the {what} blocks do not cover the rows [0, {n}) once each (row {first} is in "
            f"{covered[first]}); give every block of one Gram once"
        )


def assemble(blocks: list[Block], n_train: int) -> tuple[Tensor, Tensor]:
    """The training Gram (n_train, n_train) and the test-train Gram (m, n_train) of the first
    ``n_train`` training images, from a Gram's blocks (every test block, and the training blocks
    that start below ``n_train``; others are ignored)."""
    train = [b for b in blocks if b.part == "train" and b.start < n_train]
    test = [b for b in blocks if b.part == "test"]
    _tiles(train, n_train, "training")
    n_test = max((b.stop for b in test), default=0)
    _tiles(test, n_test, "test")
    if any(b.gram.shape[1] + b.column < n_train for b in train + test):
        raise ValueError(f"a block has fewer than the {n_train} training columns asked for")
    dtype = blocks[0].gram.dtype
    K = torch.empty((n_train, n_train), dtype=dtype)
    for block in train:
        stop = min(block.stop, n_train)
        size = stop - block.start
        part = block.gram[:size, : n_train - block.start]
        square = part[:, :size]
        # One triangle of the diagonal square, so that the Gram is exactly symmetric.
        K[block.start : stop, block.start : stop] = square.triu() + square.triu(1).T
        K[block.start : stop, stop:n_train] = part[:, size:]
        K[stop:n_train, block.start : stop] = part[:, size:].T
    K_test = torch.empty((n_test, n_train), dtype=dtype)
    for block in test:
        K_test[block.start : block.stop] = block.gram[:, :n_train]
    return K, K_test


# --- regression -----------------------------------------------------------------------------------


def regression_accuracy(
    K_train: Tensor, y_train: Tensor, K_test: Tensor, y_test: Tensor, num_classes: int, ridge: float = 0.0
) -> float:
    """Test accuracy (a fraction) of kernel regression on the targets -0.1 + e_y; NaN where the
    system cannot be solved (a kernel that has degenerated to a singular matrix)."""
    try:
        result = deq.kernel_regression(K_train, y_train, K_test, num_classes=num_classes, ridge=ridge)
    except torch.linalg.LinAlgError:
        return float("nan")
    return float((result.predictions.cpu() == y_test.cpu()).double().mean())


def depth_sweep(
    x_train: Tensor,
    y_train: Tensor,
    x_test: Tensor,
    y_test: Tensor,
    num_classes: int,
    depths: list[int],
    finite: list[tuple[float, float, float]],
    variances: tuple[float, float, float],
    ridge: float = 0.0,
    tol: float = 1e-10,
) -> list[dict]:
    """Test accuracy of the depth-L NTK for each of ``depths`` and each finite network's
    ``finite`` variances, and of the DEQ-NTK at ``variances`` (depth "deq"), on one draw of
    training and test images: one row each, with the fixed-point iterations (DEQ only) and the
    seconds of the Grams and of the regression."""
    rows = []
    pairs = ((x_train, None), (x_test, x_train))  # the training Gram (symmetric), test x train

    def row(depth, kernel_variances, grams, started, iterations=None, residual=None):
        gram_seconds = time.perf_counter() - started
        started = time.perf_counter()
        acc = regression_accuracy(grams[0], y_train, grams[1], y_test, num_classes, ridge)
        w, u, b = kernel_variances
        rows.append(
            {
                "depth": depth,
                "sigma_w2": w,
                "sigma_u2": u,
                "sigma_b2": b,
                "test_acc": acc,
                "iterations": iterations,
                "residual": residual,
                "gram_seconds": gram_seconds,
                "regression_seconds": time.perf_counter() - started,
            }
        )

    for w, u, b in finite:
        for depth in depths:
            started = time.perf_counter()
            grams = [deq.ntk(x, y, depth=depth, sigma_w2=w, sigma_u2=u, sigma_b2=b) for x, y in pairs]
            row(str(depth), (w, u, b), grams, started)
    w, u, b = variances
    started = time.perf_counter()
    train, test = (deq.deq_ntk(x, y, sigma_w2=w, sigma_u2=u, sigma_b2=b, tol=tol) for x, y in pairs)
    row(
        DEQ,
        variances,
        (train.gram, test.gram),
        started,
        max(train.iterations, test.iterations),
        max(train.residual, test.residual),
    )
    return rows


# --- the reference for the similarity stage -------------------------------------------------------


def reference_rows(activations, kernel: Tensor, measures: list[str]) -> list[dict]:
    """CKA of each site's representation (its kernel for each similarity ``measures``: the linear
    Gram for linear_cka, the max kernel for grelu_cka, ...) with ``kernel``, the DEQ-NTK Gram of the
    same images: one row per (site, kernel). ``activations``: {site: (N, C, ...)} or an iterable
    of (site, activations) pairs (one site held at a time). A site whose representation is
    constant on the images has no CKA (NaN)."""
    from intertwine import similarity

    rows = []
    for site, x in activations.items() if isinstance(activations, dict) else activations:
        for measure in measures:
            try:
                value = similarity.kernel_cka(similarity.cka_kernel(measure, x), kernel)
            except similarity.ConstantRepresentationError:
                value = math.nan
            rows.append({"site": site, "kernel": measure, "cka": value})
    return rows
