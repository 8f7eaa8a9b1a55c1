"""The fully connected infinite-width kernels of :mod:`intertwine.kernels.deq` (whose docstring
gives the model, the conventions and the numerics), and what the other kernels of that module share.

* The input checks: arrays to tensors, unit rows, the variances, the iteration's settings, its
  tolerance floor and its warning; the result type ``KernelResult``.
* The arc-cosine kernels ``kappa0``, ``kappa1`` on ``delta = 1 - rho``, and the Gram of any
  entrywise kernel of ``1 - x.y`` in blocks of rows (near-duplicate rows refined).
* The equilibrium: the fixed point ``rho*`` of each entry and ``Theta*`` from it
  (``deq_ntk_from_inner``, ``deq_ntk``, ``deq_nngp``); the finite-depth ``ntk`` and ``nngp``.

The Grams of the accuracy study's jobs are this module's code alone: its imports are those that
:mod:`intertwine.kernels.deq` had, so that those jobs' code identities stayed the same when the
convolutional kernel, the finite-width sample and kernel regression moved to modules of their own.
"""

from __future__ import annotations

import math
import warnings
from typing import Literal, NamedTuple

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "ArrayLike",
    "ConvPooling",
    "KernelResult",
    "check_variances",
    "deq_nngp",
    "deq_ntk",
    "deq_ntk_from_inner",
    "kappa0",
    "kappa1",
    "nngp",
    "ntk",
]

ArrayLike = Tensor | np.ndarray
ConvPooling = Literal["gap", "flatten", "none"]

#: Tolerance on ``sigma_w2 + sigma_u2 + sigma_b2 = 1``.
VARIANCE_SUM_TOL = 1e-9
#: Entries of one block of the elementwise fixed-point iteration when ``block_rows`` is None; the
#: iteration holds about ten temporaries per entry (about 170 MB in float64 at this size).
DEFAULT_BLOCK_ENTRIES = 2**21


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


# ---------------------------------------------------------------------------
# Input checks
# ---------------------------------------------------------------------------


def _as_tensor(X: ArrayLike, name: str) -> Tensor:
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

    Parameters
    ----------
    rho : Tensor or ndarray, any shape
        The correlations; integer input becomes float64, half precision float32.

    Returns
    -------
    Tensor
        ``kappa1(rho)`` elementwise, of the shape of ``rho``; values in [0, 1].
    """
    delta = _delta(_as_tensor(rho, "rho"))
    return 1.0 - _one_minus_kappa1(delta, _angle(delta))


def kappa0(rho: ArrayLike) -> Tensor:
    """``kappa0(rho) = (pi - arccos rho) / pi``, with rho clipped into [-1, 1].

    ``E[sigma'(u) sigma'(v)]`` for the same sigma, u, v as ``kappa1``: with sigma(u) =
    sqrt(2) max(0, u), sigma'(u) sigma'(v) is 2 where both are positive, which happens with
    probability (pi - arccos rho) / (2 pi). Its derivative is infinite at rho = 1.

    Parameters
    ----------
    rho : Tensor or ndarray, any shape
        The correlations; integer input becomes float64, half precision float32.

    Returns
    -------
    Tensor
        ``kappa0(rho)`` elementwise, of the shape of ``rho``; values in [0, 1].
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

    Parameters
    ----------
    inner : Tensor, ndarray or float, any shape
        The inner products ``x.y`` of unit vectors.
    sigma_w2, sigma_u2, sigma_b2 : float
        The layer map's variances: each >= 0, summing to 1, with sigma_w2 < 1.
    tol : float
        Each entry's fixed-point iteration stops at its first step of at most ``tol`` (floored at 16
        machine epsilons of the dtype).
    max_iter : int
        The most steps; an entry still moving then gives a RuntimeWarning.

    Returns
    -------
    gram : Tensor
        ``Theta*`` of each entry, of the shape of ``inner``, in its floating dtype (float64 for integer
        input). The three are a ``KernelResult`` named tuple.
    iterations : int
        The most steps any entry needed.
    residual : float
        The largest last step of any entry.
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

    Parameters
    ----------
    X : Tensor or ndarray, shape (n, d)
        The inputs, unit rows (unless ``normalize``).
    Y : Tensor or ndarray, shape (m, d), optional
        A second set of inputs; None (the default): ``X`` with itself, exactly symmetric.
    sigma_w2, sigma_u2, sigma_b2 : float
        The layer map's variances: each >= 0, summing to 1, with sigma_w2 < 1.
    normalize : bool
        Divide each row by its norm instead of requiring unit rows.
    tol : float
        Each entry's fixed-point iteration stops at its first step of at most ``tol``.
    max_iter : int
        The most steps per entry.
    block_rows : int, optional
        Rows per block; None (the default): about 2 million entries per block.

    Returns
    -------
    gram : Tensor, shape (n, m)
        ``Theta*``, in the inputs' floating dtype (float64 for integer input), on their device. The
        three are a ``KernelResult`` named tuple.
    iterations : int
        The most steps any entry needed.
    residual : float
        The largest last step of any entry.
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
    """The NNGP ``Sigma* = rho*`` of the equilibrium, as ``deq_ntk`` (unit diagonal).

    Parameters
    ----------
    X : Tensor or ndarray, shape (n, d)
        The inputs, unit rows (unless ``normalize``).
    Y : Tensor or ndarray, shape (m, d), optional
        A second set of inputs; None (the default): ``X`` with itself, exactly symmetric.
    sigma_w2, sigma_u2, sigma_b2 : float
        The layer map's variances: each >= 0, summing to 1, with sigma_w2 < 1.
    normalize : bool
        Divide each row by its norm instead of requiring unit rows.
    tol : float
        Each entry's fixed-point iteration stops at its first step of at most ``tol``.
    max_iter : int
        The most steps per entry.
    block_rows : int, optional
        Rows per block; None (the default): about 2 million entries per block.

    Returns
    -------
    gram : Tensor, shape (n, m)
        ``Sigma* = rho*``, in the inputs' floating dtype (float64 for integer input), on their device.
        The three are a ``KernelResult`` named tuple.
    iterations : int
        The most steps any entry needed.
    residual : float
        The largest last step of any entry.
    """
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

    Parameters
    ----------
    X : Tensor or ndarray, shape (n, d)
        The inputs, unit rows (unless ``normalize``).
    Y : Tensor or ndarray, shape (m, d), optional
        A second set of inputs; None (the default): ``X`` with itself, exactly symmetric.
    depth : int
        L, the number of hidden layers, >= 1.
    sigma_w2, sigma_u2, sigma_b2 : float
        The layer map's variances: each >= 0, summing to 1, with sigma_w2 <= 1.
    normalize : bool
        Divide each row by its norm instead of requiring unit rows.
    block_rows : int, optional
        Rows per block; None (the default): about 2 million entries per block.

    Returns
    -------
    Tensor, shape (n, m)
        ``Theta^(L)``, in the inputs' floating dtype (float64 for integer input), on their device.
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
    """The NNGP ``Sigma^(L)`` (n, m) of the network of ``ntk``; unit diagonal.

    Parameters
    ----------
    X : Tensor or ndarray, shape (n, d)
        The inputs, unit rows (unless ``normalize``).
    Y : Tensor or ndarray, shape (m, d), optional
        A second set of inputs; None (the default): ``X`` with itself, exactly symmetric.
    depth : int
        L, the number of hidden layers, >= 1.
    sigma_w2, sigma_u2, sigma_b2 : float
        The layer map's variances: each >= 0, summing to 1, with sigma_w2 <= 1.
    normalize : bool
        Divide each row by its norm instead of requiring unit rows.
    block_rows : int, optional
        Rows per block; None (the default): about 2 million entries per block.

    Returns
    -------
    Tensor, shape (n, m)
        ``Sigma^(L)``, in the inputs' floating dtype (float64 for integer input), on their device.
    """
    return _depth_gram(X, Y, depth, sigma_w2, sigma_u2, sigma_b2, normalize, block_rows, 0)
