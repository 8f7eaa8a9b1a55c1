"""The fully connected infinite-width kernels of :mod:`intertwine.kernels.deq` (whose docstring
gives the model, the conventions and the numerics), and what the other kernels of that module share.

* The input checks (arrays to tensors, unit rows, the variances, the iteration's settings, its
  tolerance floor and its warning), defined in :mod:`intertwine.kernels.deq_checks` and imported
  back here; the result type ``KernelResult``.
* The arc-cosine kernels ``kappa0``, ``kappa1`` on ``delta = 1 - rho``, and the Gram of any
  entrywise kernel of ``1 - x.y`` in blocks of rows (near-duplicate rows refined).
* The equilibrium: the fixed point ``rho*`` of each entry (Newton's method) and ``Theta*`` from it
  (``deq_ntk_from_inner``, ``deq_ntk``, ``deq_nngp``); the finite-depth ``ntk`` and ``nngp``.

The Grams of the accuracy study's jobs are this module's code and its input checks' alone. A job's
code identity follows definitions by name, not the modules they live in
(:mod:`intertwine.workflow.code_identity`), so moving definitions between these modules reruns nothing.
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

import torch
from torch import Tensor

from intertwine.kernels.deq_checks import (  # noqa: F401
    VARIANCE_SUM_TOL,
    ArrayLike,
    as_tensor,
    check_count,
    check_iteration,
    check_matrices,
    check_variances,
    effective_tol,
    same_dtype_device,
    unit_rows,
    unit_tol,
    warn_unconverged,
)

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

ConvPooling = Literal["gap", "flatten", "trace", "none"]

#: Entries of one block of the elementwise fixed-point iteration when ``block_rows`` is None; the
#: iteration holds about ten temporaries per entry (about 170 MB in float64 at this size).
DEFAULT_BLOCK_ENTRIES = 2**21


class KernelResult(NamedTuple):
    """A kernel matrix and how its equilibrium's iteration ended (a tuple: ``K, it, res = ...``).

    ``iterations`` is the largest number of steps any entry (image pair for ``conv_deq_ntk``)
    needed; ``residual`` the largest size of its last step, below ``tol`` once converged: for the
    fully connected kernels a Newton step relative to the entry's ``1 - rho*`` (which is then exact
    to rounding: the steps converge quadratically), for ``conv_deq_ntk`` a fixed-point step
    ``max |rho_k+1 - rho_k|`` (the distance to the fixed point is then at most ``residual *
    sigma_w2 / (1 - sigma_w2)``).
    """

    gram: Tensor
    iterations: int
    residual: float


# ---------------------------------------------------------------------------
# Arc-cosine kernels on delta = 1 - rho
# ---------------------------------------------------------------------------


def arccos_one_minus(delta: Tensor) -> Tensor:
    """arccos(1 - delta) for delta in [0, 2], accurate near delta = 0 where arccos is not."""
    return 2.0 * torch.asin(torch.sqrt(0.5 * delta))


def one_minus_kappa1(delta: Tensor, angle: Tensor) -> Tensor:
    """1 - kappa1(1 - delta), given angle = arccos(1 - delta); exactly 0 at delta = 0."""
    return delta + ((1.0 - delta) * angle - torch.sqrt(delta * (2.0 - delta))) / math.pi


def one_minus_inner(inner: Tensor) -> Tensor:
    """1 - x.y clipped into [0, 2] (see the module docstring)."""
    return (1.0 - inner).clamp_(0.0, 2.0)


def _close_threshold(dtype: torch.dtype) -> float:
    # Below sqrt(eps), 1 - x.y from a dot product has lost about half its digits, and kappa0's
    # square-root singularity (d arccos = d delta / sqrt(2 delta)) would pass that error on.
    return math.sqrt(torch.finfo(dtype).eps)


def refine_close_(delta: Tensor, left: Tensor, right: Tensor) -> Tensor:
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
    delta = one_minus_inner(as_tensor(rho, "rho"))
    return 1.0 - one_minus_kappa1(delta, arccos_one_minus(delta))


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
    return 1.0 - arccos_one_minus(one_minus_inner(as_tensor(rho, "rho"))) / math.pi


# ---------------------------------------------------------------------------
# Elementwise kernels of inner products
# ---------------------------------------------------------------------------


def _equilibrium_delta(delta_x: Tensor, sigma_w2: float, sigma_u2: float, tol: float, max_iter: int):
    """delta* = 1 - rho* for each entry of delta_x = 1 - x.y: the root of h(delta) = g(delta) -
    delta, g(delta) = sigma_w2 (1 - kappa1(1 - delta)) + sigma_u2 delta_x the layer map, by
    Newton's method.

    Why Newton: where delta* is small, Theta* depends on sqrt(delta*) (kappa0's square-root
    singularity), so delta* must be exact relative to itself; the fixed-point iteration, stopped
    at a step of tol, left it off by about tol and Theta* by about sqrt(tol) (3e-5 relative at
    (0.8, 0, 0.2), whose delta* is 0). h is concave and decreasing (h' = sigma_w2 kappa0(1 - delta)
    - 1 <= sigma_w2 - 1 < 0), so from a point at or right of its root Newton's steps decrease
    monotonically to the root, quadratically, relative to delta* too. The start, sigma_u2 delta_x
    / (1 - sigma_w2), is such a point (g(delta) <= sigma_w2 delta + sigma_u2 delta_x, as kappa1(rho)
    >= rho) and is the root itself where sigma_u2 delta_x = 0.

    Each entry stops at its own first step of at most ``tol`` relative to its delta, so a value
    never depends on which other entries share its block (blocked and unblocked Grams agree).
    Converged entries are dropped from the working set. Returns (delta*, iterations, residual:
    the largest last step relative to its delta).
    """
    tol = effective_tol(tol, delta_x.dtype)
    out = torch.empty_like(delta_x)
    flat_out, flat_x = out.view(-1), delta_x.reshape(-1)
    index = torch.arange(flat_x.numel(), device=delta_x.device)
    fixed = sigma_u2 * flat_x
    current = (fixed / (1.0 - sigma_w2)).clamp_(0.0, 2.0)
    iterations, residual = 0, 0.0
    while index.numel() and iterations < max_iter:
        iterations += 1
        new = _newton_step(current, fixed, sigma_w2)
        relative = (new - current).abs_().div_(new.clamp(min=torch.finfo(new.dtype).tiny))
        done = relative <= tol
        if iterations == max_iter:
            done = torch.ones_like(done)
        if bool(done.any()):
            flat_out[index[done]] = new[done]
            residual = max(residual, float(relative[done].max()))
            keep = ~done
            index, current, fixed = index[keep], new[keep], fixed[keep]
        else:
            current = new
    return out, iterations, residual


def _newton_step(delta: Tensor, fixed: Tensor, sigma_w2: float) -> Tensor:
    """delta - h(delta) / h'(delta) for h(delta) = sigma_w2 (1 - kappa1(1 - delta)) + fixed - delta,
    clipped into [0, 2]. With 1 - kappa1 = delta + c(delta) (``one_minus_kappa1``), h = fixed -
    (1 - sigma_w2) delta + sigma_w2 c(delta), and -h' = 1 - sigma_w2 kappa0 = (1 - sigma_w2) +
    sigma_w2 angle / pi, a sum of nonnegative terms (no cancellation near delta = 0)."""
    angle = arccos_one_minus(delta)
    correction = ((1.0 - delta) * angle - torch.sqrt(delta * (2.0 - delta))) / math.pi
    h = fixed - (1.0 - sigma_w2) * delta + sigma_w2 * correction
    slope = (1.0 - sigma_w2) + sigma_w2 * angle / math.pi
    return (delta + h / slope).clamp_(0.0, 2.0)


def _equilibrium_ntk(delta_star: Tensor, sigma_w2: float) -> Tensor:
    """Theta* = rho* / (1 - sigma_w2 kappa0(rho*)) from delta* = 1 - rho*."""
    # 1 - sigma_w2 kappa0 written as (1 - sigma_w2) + sigma_w2 angle / pi: no cancellation near
    # rho* = 1, where it is smallest.
    return (1.0 - delta_star) / ((1.0 - sigma_w2) + sigma_w2 * arccos_one_minus(delta_star) / math.pi)


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
        Each entry's Newton iteration stops at its first step of at most ``tol`` relative to its
        ``1 - rho`` (floored at 16 machine epsilons of the dtype).
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
        The largest last step of any entry, relative to its ``1 - rho``.
    """
    check_variances(sigma_w2, sigma_u2, sigma_b2, equilibrium=True)
    check_iteration(tol, max_iter)
    delta_x = one_minus_inner(as_tensor(inner, "inner"))
    delta_star, iterations, residual = _equilibrium_delta(delta_x, sigma_w2, sigma_u2, tol, max_iter)
    warn_unconverged(residual, tol, max_iter, delta_x.dtype)
    return KernelResult(_equilibrium_ntk(delta_star, sigma_w2), iterations, residual)


def _depth_kernels(delta_x: Tensor, depth: int, sigma_w2: float, sigma_u2: float) -> tuple[Tensor, Tensor]:
    """(Sigma^(L), Theta^(L)) of each entry of delta_x = 1 - x.y."""
    delta, theta = delta_x, 1.0 - delta_x
    for _ in range(depth):
        angle = arccos_one_minus(delta)
        # dSigma^(h) uses Sigma^(h-1): update Theta before delta moves on.
        theta = sigma_w2 * (1.0 - angle / math.pi) * theta
        delta = (sigma_w2 * one_minus_kappa1(delta, angle) + sigma_u2 * delta_x).clamp_(0.0, 2.0)
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
    Near-duplicate pairs get 1 - x.y from |x - y|^2 / 2 (``refine_close_``), so equal rows give
    exactly rho = 1 wherever they meet, in one Gram or across X and Y.
    """
    symmetric = Y is None
    Y = X if symmetric else Y
    n, m = X.shape[0], Y.shape[0]
    if block_rows is None:
        block_rows = max(1, DEFAULT_BLOCK_ENTRIES // m)
    else:
        block_rows = check_count(block_rows, "block_rows")
    gram = torch.empty((n, m), dtype=X.dtype, device=X.device)
    iterations, residual = 0, 0.0
    for start in range(0, n, block_rows):
        stop = min(n, start + block_rows)
        first = start if symmetric else 0
        delta_x = one_minus_inner(X[start:stop] @ Y[first:].T)
        refine_close_(delta_x[None], X[None, start:stop], Y[None, first:])
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
    check_iteration(tol, max_iter)
    X, Y = check_matrices(X, Y, normalize)

    def entrywise(delta_x):
        delta_star, its, res = _equilibrium_delta(delta_x, sigma_w2, sigma_u2, tol, max_iter)
        kernel = _equilibrium_ntk(delta_star, sigma_w2) if ntk else 1.0 - delta_star
        return kernel, its, res

    gram, iterations, residual = _blocked_gram(X, Y, block_rows, entrywise)
    warn_unconverged(residual, tol, max_iter, X.dtype)
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

    Each entry's correlation ``rho*`` is solved from ``x.y`` (Newton's method on ``1 - rho*``), then
    ``Theta* = rho* / (1 - sigma_w2 kappa0(rho*))``; the diagonal is ``1 / (1 - sigma_w2)``.
    ``1 - rho*`` ends exact to rounding relative to itself; step counts and the accuracy of
    ``Theta*`` are in :mod:`intertwine.kernels.deq`. ``block_rows`` changes the result only by rounding in ``X @ Y.T``.

    Parameters
    ----------
    X : Tensor or ndarray, shape (n, d)
        The inputs, unit rows (else ValueError) unless ``normalize``.
    Y : Tensor or ndarray, shape (m, d), optional
        A second set of inputs; None (the default): ``X`` with itself, exactly symmetric.
    sigma_w2, sigma_u2, sigma_b2 : float
        The layer map's variances: each >= 0, summing to 1 (to 1e-9), with sigma_w2 < 1.
    normalize : bool
        Divide each row by its norm instead of requiring unit rows.
    tol : float
        Each entry's Newton iteration stops at its first step of at most ``tol`` relative to its
        ``1 - rho`` (floored at 16 machine epsilons of the dtype: 1.9e-6 in float32).
    max_iter : int
        The most steps per entry; a RuntimeWarning if some entry still moves then.
    block_rows : int, optional
        Rows per block; None (the default): about 2 million entries per block.

    Returns
    -------
    gram : Tensor, shape (n, m)
        ``Theta*``, in the inputs' floating dtype (float64 for integer input), on their device. The
        three are a ``KernelResult`` named tuple.
    iterations : int
        The most steps any entry needed (the last, the first of size <= tol, counted).
    residual : float
        The largest last step of any entry, relative to its ``1 - rho``.
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
        Each entry's Newton iteration stops at its first step of at most ``tol`` relative to its
        ``1 - rho``.
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
        The largest last step of any entry, relative to its ``1 - rho``.
    """
    return _equilibrium_gram(X, Y, sigma_w2, sigma_u2, sigma_b2, normalize, tol, max_iter, block_rows, False)


def _depth_gram(X, Y, depth, sigma_w2, sigma_u2, sigma_b2, normalize, block_rows, which: int) -> Tensor:
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValueError(f"depth must be an integer >= 1 (the number of hidden layers), got {depth!r}")
    check_variances(sigma_w2, sigma_u2, sigma_b2, equilibrium=False)
    X, Y = check_matrices(X, Y, normalize)

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

    Weights are not tied; every layer gets the input through ``U`` (see :mod:`intertwine.kernels.deq`).
    ``sigma_w2 = 1`` is the plain deep ReLU NTK (diagonal ``L + 1``); for ``sigma_w2 < 1`` it tends
    to ``deq_ntk`` as L grows.

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
