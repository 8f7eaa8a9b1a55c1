"""Kernel regression on the one-hot targets ``-0.1 + e_y`` (``kernel_regression``, ridgeless by
default, with its targets, result, singular-kernel error and symmetry check; re-exported by
:mod:`intertwine.kernels.deq`). Any Gram will do; :mod:`intertwine.kernels.deq_regression` runs it
on the DEQ-NTK of images.

``kernel_regression`` solves ``(K_train + ridge I) w = T`` by Cholesky, with an LU solve as fallback
for a kernel that is not numerically positive definite; the factor, and with a ridge the shifted
matrix, are n x n copies beside K_train. ``ridge`` is absolute: compare it with the kernel's
diagonal (``1/(1 - sigma_w2)`` for the DEQ-NTK); with ``ridge = 0`` (the default) the training
points are interpolated. Only one triangle of K_train would be read by the Cholesky solve, so a
K_train that is not symmetric (``symmetry_error`` above sqrt(eps): 1.5e-8 in float64, 3.5e-4 in
float32, e.g. a square test-train Gram passed by mistake) is a ValueError; a singular one
(duplicate training points at ridge 0) a ``SingularKernelError`` (a ``torch.linalg.LinAlgError``)
that suggests a ridge or removing the duplicates.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from intertwine.kernels.deq_fc import (
    DEFAULT_BLOCK_ENTRIES,
    ArrayLike,
    as_tensor,
    check_count,
    same_dtype_device,
)

__all__ = [
    "RegressionResult",
    "SingularKernelError",
    "kernel_regression",
    "regression_targets",
    "symmetry_error",
]

#: Target value of the true class and of the others in ``regression_targets``.
TARGET_ON, TARGET_OFF = 0.9, -0.1


class SingularKernelError(torch.linalg.LinAlgError):
    """``kernel_regression``'s system cannot be solved: K_train (plus the ridge) is singular."""


class RegressionResult(NamedTuple):
    """``predictions`` (m,) int64 class indices, the argmax of ``scores`` (m, num_classes);
    ``solver``: ``"cholesky"``, or ``"lu"`` where K_train (plus the ridge) was not numerically
    positive definite; ``residual``: the solve's relative residual ``||(K + ridge I) w - T||_F /
    ||T||_F`` for the weights ``w`` it found (how far from interpolating the targets the rounding
    left it; about ``eps`` times the condition number)."""

    predictions: Tensor
    scores: Tensor
    solver: str = "cholesky"
    residual: float = math.nan


def regression_targets(labels: ArrayLike, num_classes: int, *, dtype=torch.float64) -> Tensor:
    """(n, num_classes) targets ``-0.1 + e_y``: 0.9 for the label's class, -0.1 elsewhere.

    Parameters
    ----------
    labels : Tensor or ndarray, shape (n,)
        Integer class labels in [0, num_classes).
    num_classes : int
        The number of classes, >= 1.
    dtype : torch.dtype
        The targets' dtype.

    Returns
    -------
    Tensor, shape (n, num_classes)
        The targets, on the device of ``labels``.
    """
    labels = _labels(labels, num_classes)
    targets = torch.full((labels.shape[0], num_classes), TARGET_OFF, dtype=dtype, device=labels.device)
    targets[torch.arange(labels.shape[0], device=labels.device), labels] = TARGET_ON
    return targets


def _labels(labels: ArrayLike, num_classes: int) -> Tensor:
    labels = (labels if isinstance(labels, Tensor) else torch.as_tensor(np.asarray(labels))).detach()
    if labels.ndim != 1 or labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
        raise ValueError(
            f"labels must be a 1-D integer array, got {labels.dtype} of shape {tuple(labels.shape)}"
        )
    check_count(num_classes, "num_classes")
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        raise ValueError(
            f"labels must lie in [0, {num_classes}), got values in [{int(labels.min())}, {int(labels.max())}]"
        )
    return labels.long()


def symmetry_error(K: Tensor) -> float:
    """How far a square matrix is from symmetric, relative to its size.

    Parameters
    ----------
    K : (n, n) tensor.

    Returns
    -------
    float
        ``max |K - K^T| / max |K|`` (0 for a zero matrix), computed in blocks of rows so that only
        about ``DEFAULT_BLOCK_ENTRIES`` entries are held beside K.
    """
    n = K.shape[0]
    rows = max(1, DEFAULT_BLOCK_ENTRIES // max(n, 1))
    scale, gap = 0.0, 0.0
    for start in range(0, n, rows):
        block = K[start : start + rows]
        scale = max(scale, float(block.abs().max()))
        gap = max(gap, float((block - K[:, start : start + rows].T).abs().max()))
    return gap / scale if scale > 0 else 0.0


def _suggested_ridge(K_train: Tensor) -> str:
    """A ridge that makes a singular K_train solvable while changing its fit little, and why: 1e-6
    of the kernel's scale (its mean diagonal, else its largest entry). A Gram that is zero
    everywhere has no scale: any ridge > 0 gives the same predictions there, so 1."""
    for scale, what in (
        (float(K_train.diagonal().mean()), "the mean diagonal"),
        (float(K_train.abs().max()), "the largest entry (the diagonal is 0)"),
    ):
        if scale > 0:
            return f"e.g. 1e-6 times {what}, {1e-6 * scale:.3g}"
    return (
        "e.g. 1: K_train is zero everywhere, so it has no scale to set a ridge by, and any ridge > 0 "
        "gives the same predictions; a zero Gram means the kernel sees nothing of the training "
        "inputs (all zero?): check them"
    )


def kernel_regression(
    K_train: ArrayLike,
    y_train: ArrayLike,
    K_test_train: ArrayLike,
    *,
    num_classes: int,
    ridge: float = 0.0,
) -> RegressionResult:
    """Kernel regression on ``T = regression_targets(y_train)``: ``K_test_train (K_train + ridge I)^-1 T``.

    Parameters
    ----------
    K_train : Tensor or ndarray, shape (n, n)
        The training Gram, symmetric to sqrt(eps) (else ValueError); singular: ``SingularKernelError``.
    y_train : Tensor or ndarray, shape (n,)
        The training labels, integers in [0, num_classes).
    K_test_train : Tensor or ndarray, shape (m, n)
        The kernel between the test and the training points.
    num_classes : int
        The number of classes, >= 1.
    ridge : float
        Added to K_train's diagonal, >= 0, absolute; 0 (the default) interpolates the training points.

    Returns
    -------
    RegressionResult
        predictions (m,) int64, argmax of scores (m, num_classes; the kernels' float dtype); solver; residual.
    """
    K_train, K_test_train = as_tensor(K_train, "K_train"), as_tensor(K_test_train, "K_test_train")
    K_train, K_test_train = same_dtype_device(K_train, K_test_train)
    n = K_train.shape[0] if K_train.ndim else 0
    if K_train.ndim != 2 or K_train.shape != (n, n) or n == 0:
        raise ValueError(f"K_train must be a non-empty square matrix, got shape {tuple(K_train.shape)}")
    if K_test_train.ndim != 2 or K_test_train.shape[1] != n:
        raise ValueError(f"K_test_train must have shape (m, {n}), got {tuple(K_test_train.shape)}")
    labels = _labels(y_train, num_classes).to(K_train.device)
    if labels.shape[0] != n:
        raise ValueError(f"y_train must have one label per training point ({n}), got {labels.shape[0]}")
    if (
        isinstance(ridge, bool)
        or not isinstance(ridge, (int, float))
        or not math.isfinite(ridge)
        or ridge < 0
    ):
        raise ValueError(f"ridge must be a finite number >= 0, got {ridge!r}")
    asymmetry = symmetry_error(K_train)
    tolerance = math.sqrt(torch.finfo(K_train.dtype).eps)
    if asymmetry > tolerance:
        raise ValueError(
            f"K_train must be symmetric (a Gram of the training points with themselves), but "
            f"max |K - K^T| / max |K| is {asymmetry:.3g} > {tolerance:.2g}: was a test-train Gram passed "
            "as K_train? Pass the training Gram, or symmetrise a nearly symmetric one ((K + K.T) / 2)"
        )
    targets = regression_targets(labels, num_classes, dtype=K_train.dtype)
    system = K_train
    if ridge:
        system = K_train.clone()
        system.diagonal().add_(ridge)
    factor, info = torch.linalg.cholesky_ex(system)
    solver = "cholesky" if int(info) == 0 else "lu"
    if solver == "cholesky":
        weights = torch.cholesky_solve(targets, factor)
    else:
        try:
            weights = torch.linalg.solve(system, targets)
        except torch.linalg.LinAlgError:
            repeated = ""
            if n <= 10_000:  # counting them sorts the rows: for moderate Grams only
                duplicates = n - int(torch.unique(K_train, dim=0).shape[0])
                repeated = f"; {duplicates} of its rows repeat another exactly"
            raise SingularKernelError(
                f"K_train ({n} x {n}{f', ridge {ridge:g}' if ridge else ''}) is singular, so the regression "
                f"has no unique solution{repeated} (duplicate training images give equal rows). Remove "
                f"duplicate training images, or pass ridge > 0 ({_suggested_ridge(K_train)})"
            ) from None
    del factor  # an n x n copy: free it before the residual's product
    residual = float(torch.linalg.matrix_norm(system @ weights - targets) / torch.linalg.matrix_norm(targets))
    scores = K_test_train @ weights
    return RegressionResult(scores.argmax(1), scores, solver, residual)
