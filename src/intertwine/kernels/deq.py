"""Infinite-width kernels of deep and of equilibrium ReLU networks (Feng & Kolter, "On the Neural
Tangent Kernel of Equilibrium Models"), and kernel regression with them.

Model and conventions
---------------------
The layer map, with standard-normal entries in ``W`` (N x N), ``U`` (N x d) and ``b`` (N), is::

    f = sqrt(sigma_w2 / N) W sigma(f_prev) + sqrt(sigma_u2) U x + sqrt(sigma_b2) b,
    sigma(u) = sqrt(2) max(0, u).

Inputs are unit vectors (``||x|| = 1``) and the variances sum to one, ``sigma_w2 + sigma_u2 +
sigma_b2 = 1``, so every pre-activation has unit variance and every kernel entry below is a
correlation to which the arc-cosine kernels apply directly::

    kappa1(rho) = (sqrt(1 - rho^2) + (pi - arccos rho) rho) / pi     (E[sigma(u) sigma(v)])
    kappa0(rho) = (pi - arccos rho) / pi                              (E[sigma'(u) sigma'(v)])

* ``nngp`` / ``ntk``: a network of ``depth`` L hidden layers (L applications of the layer map,
  weights *not* tied), from ``Sigma^(0) = Theta^(0) = x.y``::

      Sigma^(h)  = sigma_w2 kappa1(Sigma^(h-1)) + sigma_u2 x.y + sigma_b2
      dSigma^(h) = sigma_w2 kappa0(Sigma^(h-1))
      Theta^(h)  = dSigma^(h) Theta^(h-1) + Sigma^(h)

  ``Theta^(L)`` is the NTK of one coordinate of the L-th pre-activation with respect to all
  weights and biases; ``Sigma^(L)`` its NNGP.
* ``deq_nngp`` / ``deq_ntk``: the weight-tied equilibrium ``f* = layer(f*)``. The correlation
  ``rho*`` solves ``rho = sigma_w2 kappa1(rho) + sigma_u2 x.y + sigma_b2`` (a contraction with
  rate at most ``sigma_w2``, so ``0 <= sigma_w2 < 1`` is required) and::

      Theta* = rho* / (1 - sigma_w2 kappa0(rho*)),    diagonal: 1 / (1 - sigma_w2).

  For unit inputs and ``sigma_w2 < 1`` the depth-L NTK tends to ``Theta*`` (geometrically, rate
  at most ``sigma_w2``); at ``sigma_w2 = 1`` it grows without bound (diagonal ``L + 1``) and the
  equilibrium kernel does not exist. ``finite_deq_ntk`` samples the same model at finite width.
* ``conv_deq_ntk``: the equilibrium of a 3x3, zero-padded convolutional layer map, for small
  images (see its docstring for the per-position normaliser).
* ``kernel_regression``: ridgeless (by default) kernel regression on the targets ``-0.1 + e_y``.

Numerics
--------
Every iteration runs on ``delta = 1 - rho`` rather than on ``rho``: the constant ``sigma_b2``
drops out (it is ``1 - sigma_w2 - sigma_u2``), equal unit inputs give ``delta = 0`` exactly, and
``arccos(1 - delta) = 2 asin(sqrt(delta / 2))`` keeps full accuracy near ``rho = 1``. That
matters: ``kappa0`` has a square-root singularity at ``rho = 1``, so a ``rho`` one rounding below
1 (1.1e-16) would move ``kappa0`` by 5e-9 and the diagonal of ``Theta*`` by 2e-8 at
``sigma_w2 = 0.6``. ``delta`` is clipped into [0, 2] (``rho`` into [-1, 1]) before the arc
functions: by Cauchy-Schwarz and because the map sends [-1, 1] into itself the exact values lie
there, and the clip only removes rounding (``x.y`` of unit vectors can come out as
``1 + 2e-16``, or ``1 + 1e-7`` in float32) that would otherwise give NaN.

Arrays in, tensors out: numpy arrays become float64 tensors; torch tensors keep their floating
dtype (float32 is allowed, e.g. on a GPU; half precision is promoted to float32) and device, and
all arithmetic stays on that device. Gram matrices are computed in blocks of rows (entries do not
interact), so beyond the (n, m) result only a few (block_rows, m) blocks are ever held; with
``Y=None`` only the upper triangle is computed and mirrored, so the result is exactly symmetric.
"""

from __future__ import annotations

import math
import warnings
from typing import Literal, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "ConvPooling",
    "check_variances",
    "KernelResult",
    "RegressionResult",
    "SingularKernelError",
    "conv_deq_ntk",
    "deq_nngp",
    "deq_ntk",
    "deq_ntk_from_inner",
    "finite_deq_ntk",
    "kappa0",
    "kappa1",
    "kernel_regression",
    "nngp",
    "ntk",
    "regression_targets",
]

ArrayLike = Tensor | np.ndarray
ConvPooling = Literal["gap", "flatten", "none"]

#: Tolerance on ``sigma_w2 + sigma_u2 + sigma_b2 = 1``.
VARIANCE_SUM_TOL = 1e-9
#: Entries of one block of the elementwise fixed-point iteration when ``block_rows`` is None; the
#: iteration holds about ten temporaries per entry (about 170 MB in float64 at this size).
DEFAULT_BLOCK_ENTRIES = 2**21
#: Memory budget of one block of image pairs in ``conv_deq_ntk`` when ``block_pairs`` is None.
DEFAULT_CONV_BLOCK_BYTES = 256 * 2**20
#: Target value of the true class and of the others in ``regression_targets``.
TARGET_ON, TARGET_OFF = 0.9, -0.1


class KernelResult(NamedTuple):
    """A kernel matrix and how its fixed-point iteration ended (a tuple: ``K, it, res = ...``).

    ``iterations`` is the largest number of steps any entry (image pair for ``conv_deq_ntk``)
    needed; ``residual`` the largest size of its last step, ``max |rho_k+1 - rho_k|`` (below
    ``tol`` once converged; the distance to the fixed point is then at most
    ``residual * sigma_w2 / (1 - sigma_w2)``).
    """

    gram: Tensor
    iterations: int
    residual: float


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


# ---------------------------------------------------------------------------
# Input checks
# ---------------------------------------------------------------------------


def _as_tensor(X: ArrayLike, name: str) -> Tensor:
    """Detached real floating tensor; numpy and integer input become float64."""
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


def _unit_tol(dtype: torch.dtype) -> float:
    # Normalising in float32 leaves |x| off 1 by up to ~sqrt(d) * 6e-8 (1e-5 at d = 3072).
    return 1e-6 if dtype == torch.float64 else 1e-4


def _unit_rows(X: Tensor, name: str, normalize: bool, what: str = "row") -> Tensor:
    """X whose vectors along dim 1 (rows of a matrix, pixels of images) have unit norm: checked,
    or made so with ``normalize``."""
    norms = torch.linalg.vector_norm(X, dim=1, keepdim=True)
    if normalize:
        if bool((norms == 0).any()):
            raise ValueError(f"{name} has a {what} of zero norm, which cannot be normalised")
        return X / norms
    worst = float((norms - 1).abs().max())
    if worst > _unit_tol(X.dtype):
        raise ValueError(
            f"the {what}s of {name} must have unit norm (the kernels are defined for ||x|| = 1), "
            f"but one is off by {worst:.3g}: pass normalize=True, or normalise them yourself"
        )
    return X


def _check_matrices(X: ArrayLike, Y: ArrayLike | None, normalize: bool) -> tuple[Tensor, Tensor | None]:
    """(n, d) and (m, d) tensors with unit rows, one dtype and device (Y None stays None)."""
    X = _as_tensor(X, "X")
    Y = None if Y is None else _as_tensor(Y, "Y")
    for name, Z in (("X", X), ("Y", Y)):
        if Z is None:
            continue
        if Z.ndim != 2:
            raise ValueError(f"{name} must be 2-D (samples x features), got shape {tuple(Z.shape)}")
        if Z.shape[0] == 0 or Z.shape[1] == 0:
            raise ValueError(f"{name} must be non-empty, got shape {tuple(Z.shape)}")
    if Y is not None:
        X, Y = _same_dtype_device(X, Y)
        if X.shape[1] != Y.shape[1]:
            raise ValueError(
                f"X and Y must have the same number of features, got {X.shape[1]} and {Y.shape[1]}"
            )
        Y = _unit_rows(Y, "Y", normalize)
    return _unit_rows(X, "X", normalize), Y


def _same_dtype_device(X: Tensor, Y: Tensor) -> tuple[Tensor, Tensor]:
    if X.device != Y.device:
        raise ValueError(f"X and Y must be on the same device, got {X.device} and {Y.device}")
    dtype = torch.promote_types(X.dtype, Y.dtype)
    return X.to(dtype), Y.to(dtype)


def check_variances(sigma_w2: float, sigma_u2: float, sigma_b2: float, *, equilibrium: bool) -> None:
    """ValueError unless the variances are finite numbers >= 0 that sum to 1 and (``equilibrium``,
    the DEQ kernels) sigma_w2 < 1 (sigma_w2 <= 1 for the finite-depth kernels)."""
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


def _check_iteration(tol: float, max_iter: int) -> None:
    if isinstance(tol, bool) or not isinstance(tol, (int, float, np.floating)) or not tol > 0:
        raise ValueError(f"tol must be a number > 0, got {tol!r}")
    _check_count(max_iter, "max_iter")


def _check_count(value, name: str) -> int:
    """An integer >= 1 (numpy integers too); a float, bool or None is a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _effective_tol(tol: float, dtype: torch.dtype) -> float:
    # Steps cannot shrink below the rounding of values in [0, 2]: in float32 a requested 1e-10
    # would never be met, so the tolerance is floored at 16 eps (1.9e-6 in float32, 3.6e-15 in float64).
    return max(tol, 16 * torch.finfo(dtype).eps)


def _warn_unconverged(residual: float, tol: float, max_iter: int, dtype: torch.dtype) -> None:
    if residual > _effective_tol(tol, dtype):
        warnings.warn(
            f"fixed-point iteration stopped at max_iter = {max_iter} with a last step of {residual:.3g} > "
            f"tol = {tol:g}; raise max_iter",
            RuntimeWarning,
            stacklevel=3,
        )


# ---------------------------------------------------------------------------
# Arc-cosine kernels on delta = 1 - rho
# ---------------------------------------------------------------------------


def _angle(delta: Tensor) -> Tensor:
    """arccos(1 - delta) for delta in [0, 2], accurate near delta = 0 where arccos is not."""
    return 2.0 * torch.asin(torch.sqrt(0.5 * delta))


def _one_minus_kappa1(delta: Tensor, angle: Tensor) -> Tensor:
    """1 - kappa1(1 - delta), given angle = arccos(1 - delta); exactly 0 at delta = 0."""
    return delta + ((1.0 - delta) * angle - torch.sqrt(delta * (2.0 - delta))) / math.pi


def _delta(inner: Tensor) -> Tensor:
    """1 - x.y clipped into [0, 2] (see the module docstring)."""
    return (1.0 - inner).clamp_(0.0, 2.0)


def _close_threshold(dtype: torch.dtype) -> float:
    # Below sqrt(eps), 1 - x.y from a dot product has lost about half its digits, and kappa0's
    # square-root singularity (d arccos = d delta / sqrt(2 delta)) would pass that error on.
    return math.sqrt(torch.finfo(dtype).eps)


def _refine_close_(delta: Tensor, left: Tensor, right: Tensor) -> Tensor:
    """In place: entries of delta (B, a, b) = 1 - left[k, i].right[k, j] that are nearly 0 are
    recomputed as |left[k, i] - right[k, j]|^2 / 2 (equal for unit vectors), which is exact for
    equal vectors and accurate for near-duplicates. left (B, a, d), right (B, b, d).

    Only the few near-duplicate pairs (and a Gram's diagonal) are touched, in chunks of bounded size.
    """
    k, i, j = (delta < _close_threshold(delta.dtype)).nonzero(as_tuple=True)
    chunk = max(1, DEFAULT_BLOCK_ENTRIES // left.shape[2])
    for start in range(0, k.numel(), chunk):
        kk, ii, jj = k[start : start + chunk], i[start : start + chunk], j[start : start + chunk]
        delta[kk, ii, jj] = 0.5 * (left[kk, ii] - right[kk, jj]).square().sum(1)
    return delta


def kappa1(rho: ArrayLike) -> Tensor:
    """``kappa1(rho) = (sqrt(1 - rho^2) + (pi - arccos rho) rho) / pi``, with rho clipped into [-1, 1].

    ``E[sigma(u) sigma(v)]`` for ``sigma(u) = sqrt(2) max(0, u)`` and standard normal u, v of
    correlation rho; ``kappa1(1) = 1``, ``kappa1(0) = 1/pi``, ``kappa1(-1) = 0``.
    """
    delta = _delta(_as_tensor(rho, "rho"))
    return 1.0 - _one_minus_kappa1(delta, _angle(delta))


def kappa0(rho: ArrayLike) -> Tensor:
    """``kappa0(rho) = (pi - arccos rho) / pi``, with rho clipped into [-1, 1].

    ``E[sigma'(u) sigma'(v)]`` for the same sigma, u, v as ``kappa1``: with sigma(u) =
    sqrt(2) max(0, u), sigma'(u) sigma'(v) is 2 where both are positive, which happens with
    probability (pi - arccos rho) / (2 pi). Its derivative is infinite at rho = 1.
    """
    return 1.0 - _angle(_delta(_as_tensor(rho, "rho"))) / math.pi


# ---------------------------------------------------------------------------
# Elementwise kernels of inner products
# ---------------------------------------------------------------------------


def _equilibrium_delta(delta_x: Tensor, sigma_w2: float, sigma_u2: float, tol: float, max_iter: int):
    """delta* = 1 - rho* for each entry of delta_x = 1 - x.y, by iterating from delta_x.

    Each entry stops at its own first step of size <= tol, so a value never depends on which
    other entries share its block (blocked and unblocked Grams agree). Converged entries are
    dropped from the working set, which shrinks the later, slower steps.
    Returns (delta*, iterations, residual).
    """
    tol = _effective_tol(tol, delta_x.dtype)
    out = torch.empty_like(delta_x)
    flat_out, flat_x = out.view(-1), delta_x.reshape(-1)
    index = torch.arange(flat_x.numel(), device=delta_x.device)
    current, fixed = flat_x, sigma_u2 * flat_x
    iterations, residual = 0, 0.0
    while index.numel() and iterations < max_iter:
        iterations += 1
        new = _equilibrium_step(current, fixed, sigma_w2)
        step = (new - current).abs_()
        done = step <= tol
        if iterations == max_iter:
            done = torch.ones_like(done)
        if bool(done.any()):
            flat_out[index[done]] = new[done]
            residual = max(residual, float(step[done].max()))
            keep = ~done
            index, current, fixed = index[keep], new[keep], fixed[keep]
        else:
            current = new
    return out, iterations, residual


def _equilibrium_step(delta: Tensor, fixed: Tensor, sigma_w2: float) -> Tensor:
    """sigma_w2 (1 - kappa1(1 - delta)) + fixed, clipped into [0, 2]: ``_one_minus_kappa1`` with
    its passes done in place (the iteration is bound by memory traffic, not arithmetic)."""
    half_angle = torch.mul(delta, 0.5).sqrt_().asin_()
    sine = torch.sub(2.0, delta).mul_(delta).sqrt_()
    new = torch.sub(1.0, delta).mul_(half_angle).mul_(2.0).sub_(sine).mul_(sigma_w2 / math.pi)
    return new.add_(delta, alpha=sigma_w2).add_(fixed).clamp_(0.0, 2.0)


def _equilibrium_ntk(delta_star: Tensor, sigma_w2: float) -> Tensor:
    """Theta* = rho* / (1 - sigma_w2 kappa0(rho*)) from delta* = 1 - rho*."""
    # 1 - sigma_w2 kappa0 written as (1 - sigma_w2) + sigma_w2 angle / pi: no cancellation near
    # rho* = 1, where it is smallest.
    return (1.0 - delta_star) / ((1.0 - sigma_w2) + sigma_w2 * _angle(delta_star) / math.pi)


def deq_ntk_from_inner(
    inner: ArrayLike,
    *,
    sigma_w2: float,
    sigma_u2: float,
    sigma_b2: float,
    tol: float = 1e-10,
    max_iter: int = 10_000,
) -> KernelResult:
    """The DEQ-NTK ``Theta*`` of each entry of ``inner``, the inner products ``x.y`` of unit vectors.

    Elementwise: for any shape; e.g. ``deq_ntk_from_inner(0.5, sigma_w2=0.6, sigma_u2=0.4,
    sigma_b2=0)`` is 1.064349. Values outside [-1, 1] are clipped (see the module docstring).
    """
    check_variances(sigma_w2, sigma_u2, sigma_b2, equilibrium=True)
    _check_iteration(tol, max_iter)
    delta_x = _delta(_as_tensor(inner, "inner"))
    delta_star, iterations, residual = _equilibrium_delta(delta_x, sigma_w2, sigma_u2, tol, max_iter)
    _warn_unconverged(residual, tol, max_iter, delta_x.dtype)
    return KernelResult(_equilibrium_ntk(delta_star, sigma_w2), iterations, residual)


def _depth_kernels(delta_x: Tensor, depth: int, sigma_w2: float, sigma_u2: float) -> tuple[Tensor, Tensor]:
    """(Sigma^(L), Theta^(L)) of each entry of delta_x = 1 - x.y."""
    delta, theta = delta_x, 1.0 - delta_x
    for _ in range(depth):
        angle = _angle(delta)
        # dSigma^(h) uses Sigma^(h-1): update Theta before delta moves on.
        theta = sigma_w2 * (1.0 - angle / math.pi) * theta
        delta = (sigma_w2 * _one_minus_kappa1(delta, angle) + sigma_u2 * delta_x).clamp_(0.0, 2.0)
        theta = theta + (1.0 - delta)
    return 1.0 - delta, theta


# ---------------------------------------------------------------------------
# Gram matrices, blocked over rows
# ---------------------------------------------------------------------------


def _blocked_gram(
    X: Tensor, Y: Tensor | None, block_rows: int | None, entrywise
) -> tuple[Tensor, int, float]:
    """Gram matrix whose (i, j) entry is ``entrywise(1 - x_i.y_j)``, computed per block of rows.

    ``entrywise`` maps a block of delta_x to (block of the kernel, iterations, residual). With Y
    None only the blocks on and right of the diagonal are computed; the rest is their mirror image.
    Near-duplicate pairs get 1 - x.y from |x - y|^2 / 2 (``_refine_close_``), so equal rows give
    exactly rho = 1 wherever they meet, in one Gram or across X and Y.
    """
    symmetric = Y is None
    Y = X if symmetric else Y
    n, m = X.shape[0], Y.shape[0]
    if block_rows is None:
        block_rows = max(1, DEFAULT_BLOCK_ENTRIES // m)
    else:
        block_rows = _check_count(block_rows, "block_rows")
    gram = torch.empty((n, m), dtype=X.dtype, device=X.device)
    iterations, residual = 0, 0.0
    for start in range(0, n, block_rows):
        stop = min(n, start + block_rows)
        first = start if symmetric else 0
        delta_x = _delta(X[start:stop] @ Y[first:].T)
        _refine_close_(delta_x[None], X[None, start:stop], Y[None, first:])
        block, its, res = entrywise(delta_x)
        iterations, residual = max(iterations, its), max(residual, res)
        if symmetric:
            size = stop - start
            square = block[:, :size]
            # The diagonal square holds both triangles; keep one so that the result is exactly
            # symmetric even where rounding differed between x_i.x_j and x_j.x_i.
            square.copy_(square.triu() + square.triu(1).T)
            gram[start:stop, start:] = block
            gram[stop:, start:stop] = block[:, size:].T
        else:
            gram[start:stop] = block
    return gram, iterations, residual


def _equilibrium_gram(X, Y, sigma_w2, sigma_u2, sigma_b2, normalize, tol, max_iter, block_rows, ntk: bool):
    check_variances(sigma_w2, sigma_u2, sigma_b2, equilibrium=True)
    _check_iteration(tol, max_iter)
    X, Y = _check_matrices(X, Y, normalize)

    def entrywise(delta_x):
        delta_star, its, res = _equilibrium_delta(delta_x, sigma_w2, sigma_u2, tol, max_iter)
        kernel = _equilibrium_ntk(delta_star, sigma_w2) if ntk else 1.0 - delta_star
        return kernel, its, res

    gram, iterations, residual = _blocked_gram(X, Y, block_rows, entrywise)
    _warn_unconverged(residual, tol, max_iter, X.dtype)
    return KernelResult(gram, iterations, residual)


def deq_ntk(
    X: ArrayLike,
    Y: ArrayLike | None = None,
    *,
    sigma_w2: float,
    sigma_u2: float,
    sigma_b2: float,
    normalize: bool = False,
    tol: float = 1e-10,
    max_iter: int = 10_000,
    block_rows: int | None = None,
) -> KernelResult:
    """The DEQ-NTK ``Theta*`` between the rows of X (n, d) and of Y (m, d; default X).

    Returns ``KernelResult(gram (n, m), iterations, residual)``. The rows must be unit vectors
    (ValueError otherwise) unless ``normalize=True``, which divides each by its norm. Requires
    variances >= 0 summing to 1 (to 1e-9) and ``sigma_w2 < 1``.

    The correlation ``rho*`` of each entry is iterated from ``x.y`` until its step is at most
    ``tol`` (at most ``max_iter`` steps; a RuntimeWarning if some entry did not get there); then
    ``Theta* = rho* / (1 - sigma_w2 kappa0(rho*))``. For unit inputs the diagonal is
    ``1 / (1 - sigma_w2)``. ``block_rows`` rows are done at a time (default: about 2 million
    entries per block); the result does not depend on it beyond rounding in ``X @ Y.T``.

    ``iterations`` counts every step, the last (the first of size <= tol) included: to 1e-10, data
    with correlations 0.73-0.93 like raw images need 15 / 29 / 54 at sigma_w2 = 0.25 / 0.6 / 0.8
    (our counts, on uncentred images; the paper solves the fixed point with the modified Powell
    hybrid method and reports no count for this kernel, only "within 15 iterations" for the
    convolutional one). float32 input iterates to at least 1.9e-6.
    Accuracy: rho* is within ``tol sigma_w2 / (1 - sigma_w2)`` of the fixed point, and the closed
    form multiplies that by its slope, up to about 40 near rho = 1 at sigma_w2 = 0.8 (Theta* off
    by 1e-8 at the default tol); tol=1e-13 costs about 25 more steps there.
    """
    return _equilibrium_gram(X, Y, sigma_w2, sigma_u2, sigma_b2, normalize, tol, max_iter, block_rows, True)


def deq_nngp(
    X: ArrayLike,
    Y: ArrayLike | None = None,
    *,
    sigma_w2: float,
    sigma_u2: float,
    sigma_b2: float,
    normalize: bool = False,
    tol: float = 1e-10,
    max_iter: int = 10_000,
    block_rows: int | None = None,
) -> KernelResult:
    """The NNGP ``Sigma* = rho*`` of the equilibrium, as ``deq_ntk`` (unit diagonal)."""
    return _equilibrium_gram(X, Y, sigma_w2, sigma_u2, sigma_b2, normalize, tol, max_iter, block_rows, False)


def _depth_gram(X, Y, depth, sigma_w2, sigma_u2, sigma_b2, normalize, block_rows, which: int) -> Tensor:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be an integer >= 1 (the number of hidden layers), got {depth!r}")
    check_variances(sigma_w2, sigma_u2, sigma_b2, equilibrium=False)
    X, Y = _check_matrices(X, Y, normalize)

    def entrywise(delta_x):
        return _depth_kernels(delta_x, depth, sigma_w2, sigma_u2)[which], depth, 0.0

    return _blocked_gram(X, Y, block_rows, entrywise)[0]


def ntk(
    X: ArrayLike,
    Y: ArrayLike | None = None,
    *,
    depth: int,
    sigma_w2: float,
    sigma_u2: float,
    sigma_b2: float,
    normalize: bool = False,
    block_rows: int | None = None,
) -> Tensor:
    """The NTK ``Theta^(L)`` (n, m) of a ReLU network with ``depth`` = L >= 1 hidden layers.

    Weights are not tied; every layer gets the input through ``U`` (see the module docstring).
    Rows must be unit vectors unless ``normalize=True``; variances >= 0 summing to 1, with
    ``sigma_w2 <= 1`` (``sigma_w2 = 1`` is the plain deep ReLU NTK, diagonal ``L + 1``). For
    ``sigma_w2 < 1`` it tends to ``deq_ntk`` as L grows.
    """
    return _depth_gram(X, Y, depth, sigma_w2, sigma_u2, sigma_b2, normalize, block_rows, 1)


def nngp(
    X: ArrayLike,
    Y: ArrayLike | None = None,
    *,
    depth: int,
    sigma_w2: float,
    sigma_u2: float,
    sigma_b2: float,
    normalize: bool = False,
    block_rows: int | None = None,
) -> Tensor:
    """The NNGP ``Sigma^(L)`` (n, m) of the network of ``ntk``; unit diagonal."""
    return _depth_gram(X, Y, depth, sigma_w2, sigma_u2, sigma_b2, normalize, block_rows, 0)


# ---------------------------------------------------------------------------
# Finite width
# ---------------------------------------------------------------------------


def finite_deq_ntk(
    X: ArrayLike,
    *,
    width: int,
    sigma_w2: float,
    sigma_u2: float,
    sigma_b2: float,
    generator: torch.Generator | None = None,
    normalize: bool = False,
    tol: float = 1e-12,
    max_iter: int = 10_000,
) -> KernelResult:
    """The empirical NTK (n, n) of one randomly initialised weight-tied DEQ of the given width.

    Draws ``W``, ``U``, ``b`` (standard normal, from ``generator``, in that order and on the CPU, so
    a seed gives the same network on any device), finds the equilibrium
    ``f* = sqrt(sigma_w2/N) W sigma(f*) + sqrt(sigma_u2) U x + sqrt(sigma_b2) b`` of each row x of X
    by iteration from 0, and returns the NTK of f* with respect to (W, U, b), averaged over its N
    coordinates, ``(1/N) sum_i <d f*_i(x)/d theta, d f*_i(y)/d theta>``. By implicit
    differentiation ``d f* = M_x d(layer)`` with ``M_x = (I - sqrt(sigma_w2/N) W D_x)^-1``,
    ``D_x = diag(sigma'(f*(x)))``, so the entry is::

        (sigma_w2/N sigma(f*(x)).sigma(f*(y)) + sigma_u2 x.y + sigma_b2) * <M_x, M_y>_F / N.

    Cost: n inverses of N x N matrices (n N^2 memory): meant for a few inputs. ``iterations`` and
    ``residual`` describe the equilibrium iteration (its rate is about ``sqrt(sigma_w2)``).
    As N grows its mean over seeds tends to ``deq_ntk``; it fluctuates from seed to seed by about
    15-20 % at N = 1000 and (0.6, 0.4, 0), 3.5 % at (0.25, 0.25, 0.5) (ours).
    """
    check_variances(sigma_w2, sigma_u2, sigma_b2, equilibrium=True)
    _check_iteration(tol, max_iter)
    width = _check_count(width, "width")
    X, _ = _check_matrices(X, None, normalize)
    dtype, device, n = X.dtype, X.device, X.shape[0]

    def normal(*shape):
        return torch.randn(*shape, generator=generator, dtype=dtype, device="cpu").to(device)

    W, U, b = normal(width, width), normal(width, X.shape[1]), normal(width)
    scale = math.sqrt(sigma_w2 / width)
    injected = math.sqrt(sigma_u2) * X @ U.T + math.sqrt(sigma_b2) * b
    f = torch.zeros_like(injected)
    iterations, residual = 0, math.inf
    while iterations < max_iter and residual > _effective_tol(tol, dtype):
        new = scale * (math.sqrt(2.0) * torch.relu(f)) @ W.T + injected
        residual = float((new - f).abs().max())
        f, iterations = new, iterations + 1
    _warn_unconverged(residual, tol, max_iter, dtype)
    activity = math.sqrt(2.0) * torch.relu(f)
    slopes = math.sqrt(2.0) * (f > 0).to(dtype)
    eye = torch.eye(width, dtype=dtype, device=device)
    M = torch.stack([torch.linalg.inv(eye - scale * W * slopes[i]) for i in range(n)])
    explicit = sigma_w2 / width * activity @ activity.T + sigma_u2 * X @ X.T + sigma_b2
    overlap = torch.einsum("aij,bij->ab", M, M) / width
    return KernelResult(explicit * overlap, iterations, residual)


# ---------------------------------------------------------------------------
# Convolutional DEQ-NTK
# ---------------------------------------------------------------------------


def _tap_counts(height: int, width: int) -> Tensor:
    """Number of in-bounds taps of the 3x3 window at each position (9 inside, 6 on edges, 4 at corners)."""
    rows = torch.tensor(
        [min(i + 1, height - 1) - max(i - 1, 0) + 1 for i in range(height)], dtype=torch.float64
    )
    cols = torch.tensor(
        [min(j + 1, width - 1) - max(j - 1, 0) + 1 for j in range(width)], dtype=torch.float64
    )
    return rows[:, None] * cols[None, :]


def _tap_sum(Z: Tensor) -> Tensor:
    """sum over the 3x3 taps t of Z[..., p + t, p' + t] for Z of shape (B, H, W, H, W), zero outside."""
    H, W = Z.shape[1], Z.shape[2]
    padded = F.pad(Z, (1, 1, 1, 1, 1, 1, 1, 1))
    out = torch.zeros_like(Z)
    for a in range(3):
        for c in range(3):
            out += padded[:, a : a + H, c : c + W, a : a + H, c : c + W]
    return out


class _Window:
    """The per-layer spatial operator ``T(Z)(p, p') = sum_t Z(p+t, p'+t) / sqrt(n_p n_p')`` and
    ``1 - T(1)``, for images of one size."""

    def __init__(self, height: int, width: int, dtype: torch.dtype, device: torch.device):
        counts = _tap_counts(height, width).reshape(-1)
        weight = 1.0 / torch.sqrt(counts[:, None] * counts[None, :])
        self.weight = weight.reshape(height, width, height, width).to(dtype=dtype, device=device)
        ones = torch.ones((1, height, width, height, width), dtype=dtype, device=device)
        # 1 - T(1): the part of a unit correlation that the missing (padded) taps take away; 0 on
        # the diagonal p = p' and wherever both windows are complete.
        self.missing = (1.0 - self(ones)[0]).clamp_(min=0.0)

    def __call__(self, Z: Tensor) -> Tensor:
        return _tap_sum(Z) * self.weight

    def one_minus(self, delta: Tensor) -> Tensor:
        """1 - T(1 - delta) for delta = 1 - K: the operator on the delta scale."""
        return self(delta) + self.missing


def _check_images(X: ArrayLike, Y: ArrayLike | None, normalize: bool) -> tuple[Tensor, Tensor | None]:
    """(n, C, H, W) and (m, C, H, W) tensors whose pixels (channel vectors) are unit vectors."""
    X = _as_tensor(X, "X")
    Y = None if Y is None else _as_tensor(Y, "Y")
    for name, Z in (("X", X), ("Y", Y)):
        if Z is not None and (Z.ndim != 4 or 0 in Z.shape):
            raise ValueError(
                f"{name} must be a non-empty (images, channels, H, W) array, got {tuple(Z.shape)}"
            )
    if Y is not None:
        X, Y = _same_dtype_device(X, Y)
        if X.shape[1:] != Y.shape[1:]:
            raise ValueError(
                f"X and Y images must have the same shape, got {tuple(X.shape[1:])} and {tuple(Y.shape[1:])}"
            )
        Y = _unit_rows(Y, "Y", normalize, what="pixel")
    return _unit_rows(X, "X", normalize, what="pixel"), Y


def _pair_iterate(step_fn, start: Tensor, tol: float, max_iter: int):
    """Iterate ``start -> step_fn(current)`` on (B, ...) pairs, each pair frozen at its own first
    step of sup-norm size <= tol (so a pair's result does not depend on its block).
    Returns (result, iterations, residual)."""
    tol = _effective_tol(tol, start.dtype)
    current = start
    active = torch.ones(start.shape[0], dtype=torch.bool, device=start.device)
    last = torch.zeros(start.shape[0], dtype=start.dtype, device=start.device)
    iterations = 0
    while bool(active.any()) and iterations < max_iter:
        iterations += 1
        new = step_fn(current)
        step = (new - current).abs().flatten(1).amax(1)
        mask = active.view(-1, *([1] * (start.ndim - 1)))
        current = torch.where(mask, new, current)
        last = torch.where(active, step, last)
        active &= step > tol
    return current, iterations, float(last.max())


def conv_deq_ntk(
    X: ArrayLike,
    Y: ArrayLike | None = None,
    *,
    sigma_w2: float,
    sigma_u2: float,
    sigma_b2: float,
    pooling: ConvPooling = "gap",
    normalize: bool = False,
    tol: float = 1e-10,
    max_iter: int = 10_000,
    block_pairs: int | None = None,
) -> KernelResult:
    """The DEQ-NTK of a weight-tied 3x3 convolutional layer map, between images X and Y.

    X: (n, C, H, W), Y: (m, C, H, W) (default X). Every pixel's channel vector must be a unit
    vector (ValueError otherwise) unless ``normalize=True``, which normalises each pixel.

    The layer map, zero-padded 3x3 convolutions with standard-normal weights::

        f_p = sqrt(sigma_w2 / (C' n_p)) sum_t W_t sigma(f_{p+t}) + sqrt(sigma_u2 / n_p) sum_t U_t x_{p+t}
              + sqrt(sigma_b2) b

    where ``n_p`` (9, 6 or 4) counts the taps of p's window that fall inside the image. The paper's
    placement of the normaliser is garbled; this choice -- a fan-in normaliser per output position,
    on the weight and input terms, not on the bias -- keeps every pixel's pre-activation at unit
    variance, so the arc-cosine kernels apply without renormalising, and a 1x1 image reduces to
    the fully connected ``deq_ntk`` of its pixel. (A fixed 1/9 would shrink the border variances.)
    For one image pair, with ``T(K)(p, p') = sum_t K(p+t, p'+t) / sqrt(n_p n_p')`` (terms outside
    the image are zero), the correlations and the NTK of the equilibrium solve::

        Sigma = sigma_w2 T(kappa1(Sigma)) + sigma_u2 T(x_p . y_p') + sigma_b2
        Theta = sigma_w2 T(kappa0(Sigma) * Theta) + Sigma

    Both are sup-norm contractions with rate at most ``sigma_w2`` (T's weights sum to at most 1),
    iterated per image pair until a step is at most ``tol``; the second is the linear system the
    paper solves directly, here solved by the same iteration on the device. Each pair holds
    (H W)^2 entries -- a million at 32x32, so that size is GPU work and for small subsets only;
    ``block_pairs`` pairs are done at once (default: a 256 MiB budget).

    ``pooling`` gives the NTK of a fixed linear readout of f*: ``"gap"`` (global average pooling)
    ``mean_{p,p'} Theta(p, p')`` (n, m); ``"flatten"`` (a dense readout) ``mean_p Theta(p, p)``
    (n, m), diagonal ``1/(1 - sigma_w2)``; ``"none"`` all of Theta, (n, m, H, W, H, W).
    ``iterations`` adds the two iterations' steps, ``residual`` is the larger last step.
    """
    check_variances(sigma_w2, sigma_u2, sigma_b2, equilibrium=True)
    _check_iteration(tol, max_iter)
    if pooling not in ("gap", "flatten", "none"):
        raise ValueError(f"pooling must be 'gap', 'flatten' or 'none', got {pooling!r}")
    X, Y = _check_images(X, Y, normalize)
    symmetric = Y is None
    Y = X if symmetric else Y
    n, m = X.shape[0], Y.shape[0]
    height, width = X.shape[2], X.shape[3]
    window = _Window(height, width, X.dtype, X.device)
    pairs = (
        torch.triu_indices(n, n) if symmetric else torch.cartesian_prod(torch.arange(n), torch.arange(m)).T
    )
    pair_bytes = 16 * ((height + 2) * (width + 2)) ** 2 * X.element_size()
    if block_pairs is None:
        block_pairs = max(1, DEFAULT_CONV_BLOCK_BYTES // pair_bytes)
    else:
        block_pairs = _check_count(block_pairs, "block_pairs")
    shape = (n, m) if pooling != "none" else (n, m, height, width, height, width)
    gram = torch.empty(shape, dtype=X.dtype, device=X.device)
    iterations, residual = 0, 0.0
    for start in range(0, pairs.shape[1], block_pairs):
        rows, cols = pairs[:, start : start + block_pairs].to(X.device)
        theta, its, res = _conv_pairs(X[rows], Y[cols], window, sigma_w2, sigma_u2, tol, max_iter)
        iterations, residual = max(iterations, its), max(residual, res)
        if pooling == "gap":
            theta = theta.flatten(1).mean(1)
        elif pooling == "flatten":
            theta = (
                theta.reshape(theta.shape[0], height * width, height * width).diagonal(dim1=1, dim2=2).mean(1)
            )
        gram[rows, cols] = theta
        if symmetric:
            # Theta(p, p'; x, y) = Theta(p', p; y, x).
            gram[cols, rows] = theta if pooling != "none" else theta.permute(0, 3, 4, 1, 2)
    _warn_unconverged(residual, tol, max_iter, X.dtype)
    return KernelResult(gram, iterations, residual)


def _conv_pairs(x, y, window, sigma_w2, sigma_u2, tol, max_iter):
    """Theta (B, H, W, H, W) of B image pairs (x[i], y[i])."""
    batch, _, height, width = x.shape
    left, right = x.flatten(2).transpose(1, 2), y.flatten(2).transpose(1, 2)
    delta_pixels = _refine_close_(_delta(left @ right.transpose(1, 2)), left, right)
    delta_pixels = delta_pixels.view(batch, height, width, height, width)
    delta_input = window.one_minus(delta_pixels).clamp_(0.0, 2.0)

    def sigma_step(delta):
        return (
            sigma_w2 * window.one_minus(_one_minus_kappa1(delta, _angle(delta))) + sigma_u2 * delta_input
        ).clamp_(0.0, 2.0)

    delta_star, its_sigma, res_sigma = _pair_iterate(sigma_step, delta_pixels, tol, max_iter)
    gate = sigma_w2 * (1.0 - _angle(delta_star) / math.pi)
    sigma_star = 1.0 - delta_star

    def theta_step(theta):
        return window(gate * theta) + sigma_star

    theta, its_theta, res_theta = _pair_iterate(theta_step, sigma_star, tol, max_iter)
    return theta, its_sigma + its_theta, max(res_sigma, res_theta)


# ---------------------------------------------------------------------------
# Kernel regression
# ---------------------------------------------------------------------------


def regression_targets(labels: ArrayLike, num_classes: int, *, dtype=torch.float64) -> Tensor:
    """(n, num_classes) targets ``-0.1 + e_y``: 0.9 for the label's class, -0.1 elsewhere."""
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
    _check_count(num_classes, "num_classes")
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


def kernel_regression(
    K_train: ArrayLike,
    y_train: ArrayLike,
    K_test_train: ArrayLike,
    *,
    num_classes: int,
    ridge: float = 0.0,
) -> RegressionResult:
    """Kernel regression on the one-hot targets ``-0.1 + e_y``; predicted class = argmax.

    ``scores = K_test_train (K_train + ridge I)^-1 T`` with T = ``regression_targets(y_train)``;
    K_train (n, n), y_train (n,) integer labels in [0, num_classes), K_test_train (m, n). With
    ``ridge = 0`` (the default) training points are interpolated. ``ridge`` is absolute: compare
    it with the kernel's diagonal (``1/(1 - sigma_w2)`` for the DEQ-NTK). A Cholesky solve, with an
    LU solve as fallback for a kernel that is not numerically positive definite. Memory: the
    factor, and with a ridge the shifted matrix, are n x n copies beside K_train.

    Only one triangle of K_train would be read by the Cholesky solve, so a K_train that is not
    symmetric (``symmetry_error`` above sqrt(eps): 1.5e-8 in float64, 3.5e-4 in float32, e.g. a
    square test-train Gram passed by mistake) is a ValueError; a singular one (duplicate training
    points at ridge 0) a ``SingularKernelError`` (a ``torch.linalg.LinAlgError``) that suggests a
    ridge or removing the duplicates.
    """
    K_train, K_test_train = _as_tensor(K_train, "K_train"), _as_tensor(K_test_train, "K_test_train")
    K_train, K_test_train = _same_dtype_device(K_train, K_test_train)
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
                "duplicate training images, or pass ridge > 0 "
                f"(e.g. 1e-6 times the mean diagonal, {1e-6 * float(K_train.diagonal().mean()):.3g})"
            ) from None
    del factor  # an n x n copy: free it before the residual's product
    residual = float(torch.linalg.matrix_norm(system @ weights - targets) / torch.linalg.matrix_norm(targets))
    scores = K_test_train @ weights
    return RegressionResult(scores.argmax(1), scores, solver, residual)
