"""The input checks of the DEQ kernels: arrays to tensors (``ArrayLike``), unit rows, the
variances (``check_variances``), the iteration's settings, its tolerance floor and its warning.

:mod:`intertwine.kernels.deq_fc` imports them back, so every name stays importable from there (and
from :mod:`intertwine.kernels.deq`, which gathers the public ones).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import torch
from torch import Tensor

__all__ = ["VARIANCE_SUM_TOL", "ArrayLike", "check_variances"]

ArrayLike = Tensor | np.ndarray

#: Tolerance on ``sigma_w2 + sigma_u2 + sigma_b2 = 1``.
VARIANCE_SUM_TOL = 1e-9


def as_tensor(X: ArrayLike, name: str) -> Tensor:
    """Detached real floating tensor in ``X``'s floating dtype; integer input becomes float64, half
    precision float32."""
    X = (X if isinstance(X, Tensor) else torch.as_tensor(np.asarray(X))).detach()
    if X.is_meta:
        raise ValueError(f"{name} is a meta tensor (a shape without data); pass the actual values")
    if X.is_complex():
        raise ValueError(f"{name} must be real, got {X.dtype}")
    if not X.is_floating_point():
        X = X.to(torch.float64)
    elif X.dtype in (torch.float16, torch.bfloat16):
        # A half-precision x.y is off by 1e-3, far more than any kernel tolerance here.
        X = X.to(torch.float32)
    if X.numel() and not bool(torch.isfinite(X).all()):
        raise ValueError(f"{name} contains NaN or infinite values")
    return X


def unit_tol(dtype: torch.dtype) -> float:
    # Normalising in float32 leaves |x| off 1 by up to ~sqrt(d) * 6e-8 (1e-5 at d = 3072).
    return 1e-6 if dtype == torch.float64 else 1e-4


def unit_rows(X: Tensor, name: str, normalize: bool, what: str = "row") -> Tensor:
    """X whose vectors along dim 1 (rows of a matrix, pixels of images) have unit norm: checked,
    or made so with ``normalize``."""
    norms = torch.linalg.vector_norm(X, dim=1, keepdim=True)
    if normalize:
        if bool((norms == 0).any()):
            raise ValueError(f"{name} has a {what} of zero norm, which cannot be normalised")
        return X / norms
    worst = float((norms - 1).abs().max())
    if worst > unit_tol(X.dtype):
        raise ValueError(
            f"the {what}s of {name} must have unit norm (the kernels are defined for ||x|| = 1), "
            f"but one is off by {worst:.3g}: pass normalize=True, or normalise them yourself"
        )
    return X


def check_matrices(X: ArrayLike, Y: ArrayLike | None, normalize: bool) -> tuple[Tensor, Tensor | None]:
    """(n, d) and (m, d) tensors with unit rows, one dtype and device (Y None stays None)."""
    X = as_tensor(X, "X")
    Y = None if Y is None else as_tensor(Y, "Y")
    for name, Z in (("X", X), ("Y", Y)):
        if Z is None:
            continue
        if Z.ndim != 2:
            raise ValueError(f"{name} must be 2-D (samples x features), got shape {tuple(Z.shape)}")
        if Z.shape[0] == 0 or Z.shape[1] == 0:
            raise ValueError(f"{name} must be non-empty, got shape {tuple(Z.shape)}")
    if Y is not None:
        X, Y = same_dtype_device(X, Y)
        if X.shape[1] != Y.shape[1]:
            raise ValueError(
                f"X and Y must have the same number of features, got {X.shape[1]} and {Y.shape[1]}"
            )
        Y = unit_rows(Y, "Y", normalize)
    return unit_rows(X, "X", normalize), Y


def same_dtype_device(X: Tensor, Y: Tensor) -> tuple[Tensor, Tensor]:
    if X.device != Y.device:
        raise ValueError(f"X and Y must be on the same device, got {X.device} and {Y.device}")
    dtype = torch.promote_types(X.dtype, Y.dtype)
    return X.to(dtype), Y.to(dtype)


def check_variances(sigma_w2: float, sigma_u2: float, sigma_b2: float, *, equilibrium: bool) -> None:
    """ValueError unless the variances are finite numbers >= 0 that sum to 1 and (``equilibrium``,
    the DEQ kernels) sigma_w2 < 1 (sigma_w2 <= 1 for the finite-depth kernels).

    Parameters
    ----------
    sigma_w2, sigma_u2, sigma_b2 : float
        The variances of ``W``, ``U`` and ``b`` in the layer map (see :mod:`intertwine.kernels.deq`).
    equilibrium : bool
        Whether the kernel is an equilibrium one (sigma_w2 < 1) or a finite-depth one (sigma_w2 <= 1).

    Returns
    -------
    None
        A failed check raises ValueError, saying which variance and why.
    """
    values = {"sigma_w2": sigma_w2, "sigma_u2": sigma_u2, "sigma_b2": sigma_b2}
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
            raise ValueError(f"{name} must be a number (a variance >= 0), got {value!r}")
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite variance >= 0, got {value}")
    total = sigma_w2 + sigma_u2 + sigma_b2
    if abs(total - 1) > VARIANCE_SUM_TOL:
        raise ValueError(
            f"sigma_w2 + sigma_u2 + sigma_b2 must be 1 (to {VARIANCE_SUM_TOL:g}) so that unit inputs give "
            f"unit-variance pre-activations, got {sigma_w2} + {sigma_u2} + {sigma_b2} = {total!r}"
        )
    if sigma_w2 > 1:
        raise ValueError(f"sigma_w2 must be <= 1, got {sigma_w2}")
    if equilibrium and sigma_w2 >= 1:
        raise ValueError(
            f"the equilibrium kernels need sigma_w2 < 1 (the fixed-point map is then a contraction; at 1 "
            f"the depth-L NTK grows without bound), got sigma_w2 = {sigma_w2}"
        )


def check_iteration(tol: float, max_iter: int) -> None:
    if isinstance(tol, bool) or not isinstance(tol, (int, float, np.floating)) or not tol > 0:
        raise ValueError(f"tol must be a number > 0, got {tol!r}")
    check_count(max_iter, "max_iter")


def check_count(value, name: str) -> int:
    """An integer >= 1 (numpy integers too); a float, bool or None is a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def effective_tol(tol: float, dtype: torch.dtype) -> float:
    # Steps cannot shrink below the rounding of values in [0, 2]: in float32 a requested 1e-10
    # would never be met, so the tolerance is floored at 16 eps (1.9e-6 in float32, 3.6e-15 in float64).
    return max(tol, 16 * torch.finfo(dtype).eps)


def warn_unconverged(residual: float, tol: float, max_iter: int, dtype: torch.dtype) -> None:
    if residual > effective_tol(tol, dtype):
        warnings.warn(
            f"fixed-point iteration stopped at max_iter = {max_iter} with a last step of {residual:.3g} > "
            f"tol = {tol:g}; raise max_iter",
            RuntimeWarning,
            stacklevel=3,
        )
