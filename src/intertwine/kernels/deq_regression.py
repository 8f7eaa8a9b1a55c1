"""Kernel regression with the DEQ neural tangent kernel (Feng & Kolter, "On the Neural Tangent
Kernel of Equilibrium Models"), on top of :mod:`intertwine.kernels.deq`: tensors in, numbers out.

* Inputs: images as the fully connected kernel's unit rows (:func:`unit_rows`) or the
  convolutional kernel's unit pixels (:func:`unit_pixels`), after an optional per-channel
  centring or standardisation (``PREPROCESSING``).
* The Gram in blocks of rows (:func:`gram_block`, a :class:`Block` each) and the training and
  test-train Grams put back together from them (:func:`assemble`).
* Accuracies: kernel regression's test accuracy (:func:`regression_accuracy`), the finite-depth
  NTK against the DEQ-NTK over depth (:func:`depth_sweep`, the paper's Figure 1, with its
  regulariser :func:`frozen_ridge` and panels :func:`panel_curves`), the convolutional DEQ-NTK
  (:func:`conv_accuracy`); and each site's CKA with the kernel (:func:`reference_rows`).

Inputs
------
Every image is flattened (C x H x W values, pixels scaled to [0, 1]), preprocessed, and divided by
its norm: the kernels are defined for unit vectors, and the paper says only that its inputs have
unit length. The preprocessing chooses what comes before the division (:func:`unit_rows`):
``raw`` (nothing: uncentred images correlate at 0.7-0.93), ``centred`` (the training set's
per-channel mean subtracted) or ``standardised`` (centred, then divided by the per-channel std).
On uncentred images our iteration reaches 1e-10 in 15 / 29 / 54 steps at sigma_w2 = 0.25 / 0.6 /
0.8 (our counts: the paper solves the fixed point with the modified Powell hybrid method and
reports no count for this kernel).

The Gram
--------
A Gram with rows [train; test] (N + m) and the N training images as columns is cut into blocks of
rows: a training block of rows [a, b) holds only the columns [a, N) (the training Gram is
symmetric: the part left of the block is the mirror of blocks above it), a test block every
column. :func:`assemble` puts the training Gram and the test-train Gram of any n_train <= N back
together from them. (The workflow's blocks are files, one job each:
:mod:`intertwine.workflow.stages.deqntk.job`.)
"""

from __future__ import annotations

import math
import time
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from intertwine.kernels import deq

__all__ = [
    "DEQ",
    "PREPROCESSING",
    "Block",
    "assemble",
    "conv_accuracy",
    "depth_sweep",
    "draw",
    "frozen_ridge",
    "gram_block",
    "panel_curves",
    "reference_rows",
    "regression_accuracy",
    "unit_pixels",
    "unit_rows",
]


#: The depth column's value for the equilibrium (the DEQ-NTK); finite depths are "1", "2", ...
DEQ = "deq"


#: The choices of ``deqntk.preprocessing`` (what :func:`unit_rows` does before the unit norm).
PREPROCESSING = ("raw", "centred", "standardised")


def _preprocess(images: Tensor, preprocessing: str, mean, std, key: str) -> Tensor:
    """uint8 images (n, C, H, W) as float64 in [0, 1], then shifted (and scaled) per channel as
    ``preprocessing`` says (see :func:`unit_rows`); ``key`` names the setting in errors."""
    if preprocessing not in PREPROCESSING:
        raise ValueError(f"{key}: unknown choice {preprocessing!r}; use one of {', '.join(PREPROCESSING)}")
    x = images.to(torch.float64) / 255.0
    if preprocessing != "raw":
        if mean is None or (preprocessing == "standardised" and std is None):
            raise ValueError(
                f"{key} {preprocessing!r} needs the training set's per-channel "
                "mean" + (" and std" if preprocessing == "standardised" else "") + "; pass them"
            )
        channels = x.shape[1]
        x = x - torch.as_tensor(mean, dtype=torch.float64, device=x.device).reshape(1, channels, 1, 1)
        if preprocessing == "standardised":
            scale = torch.as_tensor(std, dtype=torch.float64, device=x.device).reshape(1, channels, 1, 1)
            if bool((scale <= 0).any()):
                raise ValueError(
                    f"{key} 'standardised': a channel has std 0 in the training set; use 'centred'"
                )
            x = x / scale
    return x


def unit_rows(
    images: Tensor, preprocessing: str = "raw", mean: Tensor | None = None, std: Tensor | None = None
) -> Tensor:
    """Images as float64 rows of unit norm, the inputs of the DEQ-NTK.

    Parameters
    ----------
    images : uint8 (n, C, H, W).
    preprocessing : ``"raw"`` (pixels in [0, 1] as they are), ``"centred"`` (minus ``mean``, per
        channel) or ``"standardised"`` (minus ``mean``, divided by ``std``, per channel).
    mean, std : (C,) per-channel statistics of the training set in [0, 1] units
        (``data.channel_stats``); needed by ``centred`` (mean) and ``standardised`` (both).

    Returns
    -------
    (n, C H W) float64 rows, each divided by its norm after the preprocessing. An image that is
    zero after it (all black for ``raw``, equal to the mean for the others) is a ValueError.
    """
    x = _preprocess(images, preprocessing, mean, std, "deqntk.preprocessing")
    x = x.flatten(1)
    norms = torch.linalg.vector_norm(x, dim=1, keepdim=True)
    if bool((norms == 0).any()):
        raise ValueError(
            f"an image is zero after deqntk.preprocessing {preprocessing!r} (all black, or equal to the "
            "mean) and cannot be normalised to unit norm; drop it or choose another preprocessing"
        )
    return x / norms


def unit_pixels(
    images: Tensor, preprocessing: str = "centred", mean: Tensor | None = None, std: Tensor | None = None
) -> Tensor:
    """Images as the convolutional DEQ-NTK's inputs: every pixel's channel vector of unit norm.

    Parameters
    ----------
    images : uint8 (n, C, H, W).
    preprocessing, mean, std : as in :func:`unit_rows` (config key ``deqntk.conv.preprocessing``).

    Returns
    -------
    (n, C, H, W) float64, each pixel divided by its norm after the preprocessing. A pixel that is
    zero after it (a black pixel of ``raw`` images) has no direction: a ValueError.
    """
    x = _preprocess(images, preprocessing, mean, std, "deqntk.conv.preprocessing")
    norms = torch.linalg.vector_norm(x, dim=1, keepdim=True)
    zero = int((norms == 0).sum())
    if zero:
        raise ValueError(
            f"{zero} pixels are zero after deqntk.conv.preprocessing {preprocessing!r} (black pixels of raw "
            "images) and cannot be normalised to unit norm; use 'centred' or 'standardised'"
        )
    return x / norms


def frozen_ridge(K_train: Tensor, scale: float) -> float:
    """The regulariser the paper adds to the finite-depth NTK in its Figure 1, ``scale`` times
    Theta(x, x) / n.

    Parameters
    ----------
    K_train : (n, n) training Gram of a finite-depth NTK.
    scale : the factor (``deqntk.depth.frozen_ridge``; 0 gives no regulariser).

    Returns
    -------
    ``scale * mean(diag K_train) / n`` (for unit inputs every diagonal entry is the same
    Theta(x, x), so the mean is that value).
    """
    n = K_train.shape[0]
    if scale == 0 or n == 0:
        return 0.0
    return float(scale * K_train.diagonal().mean() / n)


def panel_curves(
    panels: list, deq_sigma_b2: float
) -> list[tuple[str, tuple[float, float, float], tuple[float, float, float]]]:
    """The paper's Figure 1 panels as kernel pairs.

    Parameters
    ----------
    panels : [sigma_w2, sigma_b2] pairs, each a panel's title.
    deq_sigma_b2 : the DEQ's bias variance (the paper: 0.1).

    Returns
    -------
    (panel name, finite-depth variances (sigma_w2, 0, sigma_b2), DEQ variances (sigma_w2,
    sigma_b2 - deq_sigma_b2, deq_sigma_b2)) per panel; a panel with sigma_b2 < deq_sigma_b2 is a
    ValueError (the DEQ's sigma_u2 would be negative).
    """
    curves = []
    for panel in panels:
        w, b = (float(v) for v in panel)
        if b < deq_sigma_b2:
            raise ValueError(
                f"deqntk.depth.panels: panel (sigma_w2, sigma_b2) = ({w:g}, {b:g}) has sigma_b2 below "
                f"deqntk.depth.deq_sigma_b2 = {deq_sigma_b2:g}, so its DEQ's sigma_u2 = sigma_b2 - "
                f"{deq_sigma_b2:g} is negative; raise the panel's sigma_b2 or lower deq_sigma_b2"
            )
        curves.append((f"w{w:g}_b{b:g}", (w, 0.0, b), (w, b - deq_sigma_b2, deq_sigma_b2)))
    return curves


def draw(n: int, size: int, generator: torch.Generator, what: str = "images") -> Tensor:
    """The first ``n`` of a random permutation of ``range(size)`` (a ValueError if n > size)."""
    if n > size:
        raise ValueError(f"{n} {what} asked for, but there are only {size}")
    return torch.randperm(size, generator=generator)[:n]


# --- the Gram in blocks of rows -------------------------------------------------------------------


class Block(NamedTuple):
    """Rows [start, stop) of the Gram's ``part`` ("train" or "test"), columns [column, N), of
    the Gram of ``n_train`` = N training and ``n_test`` test images at ``variances``
    (sigma_w2, sigma_u2, sigma_b2), of inputs made by ``preprocessing`` (``unit_rows``): a block
    records the setting, the inputs and the sizes of its Gram, so that blocks of another Gram are
    refused (``intertwine.workflow.stages.deqntk.job.check_blocks``)."""

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
    preprocessing: str


def gram_block(
    x_train: Tensor,
    x_test: Tensor,
    part: str,
    start: int,
    stop: int,
    variances: tuple[float, float, float],
    tol: float = 1e-10,
    preprocessing: str = "raw",
) -> Block:
    """One block of the DEQ-NTK Gram: training rows [start, stop) against the training columns
    [start, N), or test rows [start, stop) against every training column (unit rows, see
    :func:`unit_rows`; ``preprocessing``: the one they were made with, recorded in the block)."""
    if preprocessing not in PREPROCESSING:
        raise ValueError(f"preprocessing must be one of {', '.join(PREPROCESSING)}, got {preprocessing!r}")
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
        preprocessing,
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
    variances: tuple[float, float, float] | None,
    ridge: float = 0.0,
    tol: float = 1e-10,
    panels: list | None = None,
    frozen_scale: float = 0.0,
) -> list[dict]:
    """Test accuracy of the depth-L NTK for each of ``depths`` and each finite network's
    ``finite`` variances, and of the DEQ-NTK at ``variances`` (depth "deq"; None: none), on one
    draw of training and test images; then, per ``panels`` entry (``panel_curves``' output: name,
    finite-depth variances, DEQ variances), the same for that panel's pair of kernels, and the
    DEQ-NTK's finite-depth iteration (Feng & Kolter's Theorem 1: ``Theta^(L)`` at the DEQ's
    variances, input injection in every layer) at each depth. One row each, with its panel (""
    outside the panels), the ridge it used (``ridge``, plus for a finite-depth NTK outside the
    DEQ's iteration ``frozen_ridge(K_train, frozen_scale)``: the text adds its regulariser for the
    NTK, whose kernel freezes), the fixed-point iterations (DEQ only) and the seconds of the Grams
    and of the regression."""
    rows = []
    pairs = ((x_train, None), (x_test, x_train))  # the training Gram (symmetric), test x train

    def row(panel, depth, kernel_variances, grams, started, iterations=None, residual=None, frozen=True):
        gram_seconds = time.perf_counter() - started
        started = time.perf_counter()
        used = ridge + (frozen_ridge(grams[0], frozen_scale) if depth != DEQ and frozen else 0.0)
        acc = regression_accuracy(grams[0], y_train, grams[1], y_test, num_classes, used)
        w, u, b = kernel_variances
        rows.append(
            {
                "panel": panel,
                "depth": depth,
                "sigma_w2": w,
                "sigma_u2": u,
                "sigma_b2": b,
                "test_acc": acc,
                "ridge": used,
                "iterations": iterations,
                "residual": residual,
                "gram_seconds": gram_seconds,
                "regression_seconds": time.perf_counter() - started,
            }
        )

    def finite_rows(panel, w, u, b, frozen=True):
        for depth in depths:
            started = time.perf_counter()
            grams = [deq.ntk(x, y, depth=depth, sigma_w2=w, sigma_u2=u, sigma_b2=b) for x, y in pairs]
            row(panel, str(depth), (w, u, b), grams, started, frozen=frozen)

    def deq_row(panel, kernel_variances):
        w, u, b = kernel_variances
        started = time.perf_counter()
        train, test = (deq.deq_ntk(x, y, sigma_w2=w, sigma_u2=u, sigma_b2=b, tol=tol) for x, y in pairs)
        row(
            panel,
            DEQ,
            kernel_variances,
            (train.gram, test.gram),
            started,
            max(train.iterations, test.iterations),
            max(train.residual, test.residual),
        )

    for w, u, b in finite:
        finite_rows("", w, u, b)
    if variances is not None:
        deq_row("", variances)
    for name, finite_variances, deq_variances in panels or []:
        finite_rows(name, *finite_variances)
        finite_rows(name, *deq_variances, frozen=False)
        deq_row(name, deq_variances)
    return rows


# --- the convolutional DEQ-NTK on a small subset ---------------------------------------------------


def conv_accuracy(
    x_train: Tensor,
    y_train: Tensor,
    x_test: Tensor,
    y_test: Tensor,
    num_classes: int,
    variances: tuple[float, float, float],
    readout: str = "gap",
    ridge: float = 0.0,
    tol: float = 1e-10,
    block_pairs: int | None = None,
) -> dict:
    """Kernel regression with the convolutional DEQ-NTK (``kernels.deq.conv_deq_ntk``).

    Parameters
    ----------
    x_train, x_test : (n, C, H, W) and (m, C, H, W) images with unit pixels (:func:`unit_pixels`).
    y_train, y_test : their labels; num_classes : the number of classes.
    variances : (sigma_w2, sigma_u2, sigma_b2).
    readout : ``"gap"`` (global average pooling of f*), ``"flatten"`` (a dense readout of f*) or
        ``"trace"`` (Feng & Kolter's dense readout, Tr of their eq. (21)'s tensor): ``conv_deq_ntk``'s
        ``pooling``.
    ridge, tol, block_pairs : the regression's ridge, the fixed point's tolerance, pairs per block.

    Returns
    -------
    {"test_acc", "iterations", "residual", "gram_seconds", "regression_seconds", "pairs",
    "seconds_per_pair"}: the accuracy (a fraction, NaN where the system is singular), the most
    steps any pair took (both iterations together), and the cost per image pair of the Grams
    (the training Gram's upper triangle and the test x train Gram).
    """
    w, u, b = variances
    options = dict(sigma_w2=w, sigma_u2=u, sigma_b2=b, pooling=readout, tol=tol, block_pairs=block_pairs)
    started = time.perf_counter()
    train = deq.conv_deq_ntk(x_train, **options)
    test = deq.conv_deq_ntk(x_test, x_train, **options)
    gram_seconds = time.perf_counter() - started
    n, m = len(x_train), len(x_test)
    pairs = n * (n + 1) // 2 + m * n
    started = time.perf_counter()
    acc = regression_accuracy(train.gram, y_train, test.gram, y_test, num_classes, ridge)
    return {
        "test_acc": acc,
        "iterations": max(train.iterations, test.iterations),
        "residual": max(train.residual, test.residual),
        "gram_seconds": gram_seconds,
        "regression_seconds": time.perf_counter() - started,
        "pairs": pairs,
        "seconds_per_pair": gram_seconds / pairs,
    }


# --- the reference for the similarity stage -------------------------------------------------------


def reference_rows(activations, kernel: Tensor, measures: list[str]) -> list[dict]:
    """CKA of each site's representation (its kernel for each similarity ``measures``: the linear
    Gram for linear_cka, the max kernel for grelu_cka, ...) with ``kernel``, the DEQ-NTK Gram of the
    same images: one row per (site, kernel). ``activations``: {site: (N, C, ...)} or an iterable
    of (site, activations) pairs (one site held at a time). A site whose representation is
    constant on the images has no CKA (NaN)."""
    from intertwine.measures import ConstantRepresentationError, cka_kernel, kernel_cka

    rows = []
    for site, x in activations.items() if isinstance(activations, dict) else activations:
        for measure in measures:
            try:
                value = kernel_cka(cka_kernel(measure, x), kernel)
            except ConstantRepresentationError:
                value = math.nan
            rows.append({"site": site, "kernel": measure, "cka": value})
    return rows
