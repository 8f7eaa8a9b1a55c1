"""The DEQ-NTK of a weight-tied 3x3 convolutional layer map (``conv_deq_ntk``, re-exported by
:mod:`intertwine.kernels.deq`): the per-position fan-in normaliser, the 3x3 window operator on
pairs of positions, and the per-pair fixed-point iterations of the correlations and of the NTK.

The readout ``"trace"`` is Feng & Kolter's (their section 4: a dense readout ``W^(L+1)`` of the
last layer; appendix B: "The final kernel value is Tr(Θ (L) (x, y))"): ``Tr Theta_post`` with
``Theta_post = Kdot* . Theta + K*`` the tensor of their eq. (21), ``Theta = T(Theta_post)``,
``K* = sigma_w2 kappa1(Sigma*) + sigma_u2 x_p.y_p' + sigma_b2`` and ``Kdot*`` the gate
``sigma_w2 kappa0(Sigma*)``: the NTK of ``sum_p [sqrt(sigma_w2 / C) v_p . relu~(f*_p) +
sqrt(sigma_u2) u_p . x_p + sqrt(sigma_b2) c_p]``, the readout weights v, u, c trained too (a sum
over positions, not a mean). tests/test_kernels_deq_conv_width.py checks it, and Theta, against
sampled networks of finite width.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from intertwine.kernels.deq_fc import (
    ArrayLike,
    ConvPooling,
    KernelResult,
    arccos_one_minus,
    as_tensor,
    check_count,
    check_iteration,
    check_variances,
    effective_tol,
    one_minus_inner,
    one_minus_kappa1,
    refine_close_,
    same_dtype_device,
    unit_rows,
    warn_unconverged,
)

__all__ = ["conv_deq_ntk"]

#: Memory budget of one block of image pairs in ``conv_deq_ntk`` when ``block_pairs`` is None.
DEFAULT_CONV_BLOCK_BYTES = 256 * 2**20


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
    X = as_tensor(X, "X")
    Y = None if Y is None else as_tensor(Y, "Y")
    for name, Z in (("X", X), ("Y", Y)):
        if Z is not None and (Z.ndim != 4 or 0 in Z.shape):
            raise ValueError(
                f"{name} must be a non-empty (images, channels, H, W) array, got {tuple(Z.shape)}"
            )
    if Y is not None:
        X, Y = same_dtype_device(X, Y)
        if X.shape[1:] != Y.shape[1:]:
            raise ValueError(
                f"X and Y images must have the same shape, got {tuple(X.shape[1:])} and {tuple(Y.shape[1:])}"
            )
        Y = unit_rows(Y, "Y", normalize, what="pixel")
    return unit_rows(X, "X", normalize, what="pixel"), Y


def _pair_iterate(step_fn, start: Tensor, tol: float, max_iter: int):
    """Iterate ``start -> step_fn(current)`` on (B, ...) pairs, each pair frozen at its own first
    step of sup-norm size <= tol (so a pair's result does not depend on its block).
    Returns (result, iterations, residual)."""
    tol = effective_tol(tol, start.dtype)
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
    """The DEQ-NTK of a weight-tied, zero-padded 3x3 convolutional layer map between images X and Y.

    The layer map, its per-position normaliser and the two fixed points iterated per image pair
    (Sigma, then Theta) are in :mod:`intertwine.kernels.deq`. Each pair holds (H W)^2 entries (a
    million at 32x32: GPU work, for small subsets only). ``pooling`` gives the NTK of a fixed linear
    readout of f*: ``"gap"`` (global average pooling) ``mean_{p,p'} Theta(p, p')``; ``"flatten"``
    (a dense readout) ``mean_p Theta(p, p)``, diagonal ``1/(1 - sigma_w2)``; ``"none"`` all of Theta.
    ``"trace"`` is Feng & Kolter's dense readout (the module's docstring), diagonal ``H W / (1 - sigma_w2)``.

    Parameters
    ----------
    X : Tensor or ndarray, shape (n, C, H, W)
        The images; each pixel's channel vector a unit vector (else ValueError) unless ``normalize``.
    Y : Tensor or ndarray, shape (m, C, H, W), optional
        A second set of images; None (the default): ``X`` with itself.
    sigma_w2, sigma_u2, sigma_b2 : float
        The layer map's variances: each >= 0, summing to 1, with sigma_w2 < 1.
    pooling : {"gap", "flatten", "trace", "none"}
        The readout whose NTK is returned (above).
    normalize : bool
        Divide each pixel's channel vector by its norm instead of requiring unit pixels.
    tol : float
        Each image pair's iterations stop at their first step of at most ``tol``.
    max_iter : int
        The most steps per iteration; a RuntimeWarning if a pair still moves then.
    block_pairs : int, optional
        Image pairs per block; None (the default): as many as a 256 MiB budget holds.

    Returns
    -------
    gram : Tensor, shape (n, m), or (n, m, H, W, H, W) for ``pooling="none"``
        The kernel, in the images' floating dtype (float64 for integer input), on their device. The
        three are a ``KernelResult`` named tuple.
    iterations : int
        The two iterations' steps added, the most of any block of pairs.
    residual : float
        The largest last step.
    """
    check_variances(sigma_w2, sigma_u2, sigma_b2, equilibrium=True)
    check_iteration(tol, max_iter)
    if pooling not in ("gap", "flatten", "trace", "none"):
        raise ValueError(f"pooling must be 'gap', 'flatten', 'trace' or 'none', got {pooling!r}")
    X, Y = _check_images(X, Y, normalize)
    symmetric = Y is None
    Y = X if symmetric else Y
    n, m = X.shape[0], Y.shape[0]
    height, width = X.shape[2], X.shape[3]
    window = _Window(height, width, X.dtype, X.device)
    pairs = _image_pairs(n, m, symmetric)
    block_pairs = _pairs_per_block(block_pairs, height, width, X.element_size())
    shape = (n, m) if pooling != "none" else (n, m, height, width, height, width)
    gram = torch.empty(shape, dtype=X.dtype, device=X.device)
    iterations, residual = 0, 0.0
    for start in range(0, pairs.shape[1], block_pairs):
        rows, cols = pairs[:, start : start + block_pairs].to(X.device)
        theta, its, res = _conv_pairs(X[rows], Y[cols], window, sigma_w2, sigma_u2, tol, max_iter, pooling)
        iterations, residual = max(iterations, its), max(residual, res)
        gram[rows, cols] = theta
        if symmetric:
            # Theta(p, p'; x, y) = Theta(p', p; y, x).
            gram[cols, rows] = theta if pooling != "none" else theta.permute(0, 3, 4, 1, 2)
    warn_unconverged(residual, tol, max_iter, X.dtype)
    return KernelResult(gram, iterations, residual)


def _image_pairs(n: int, m: int, symmetric: bool) -> Tensor:
    """(2, pairs) indices (i, j) of the image pairs to compute: all n x m of them, or with
    ``symmetric`` (m = n) those with i <= j, whose mirror images are the rest."""
    return torch.triu_indices(n, n) if symmetric else torch.cartesian_prod(torch.arange(n), torch.arange(m)).T


def _pairs_per_block(block_pairs: int | None, height: int, width: int, element_size: int) -> int:
    """``block_pairs`` checked, or by default as many pairs as fit ``DEFAULT_CONV_BLOCK_BYTES``."""
    if block_pairs is not None:
        return check_count(block_pairs, "block_pairs")
    pair_bytes = 16 * ((height + 2) * (width + 2)) ** 2 * element_size
    return max(1, DEFAULT_CONV_BLOCK_BYTES // pair_bytes)


def _diagonal(Z: Tensor) -> Tensor:
    """The entries Z(p, p) of Z (B, H, W, H, W): (B, H W)."""
    positions = Z.shape[1] * Z.shape[2]
    return Z.reshape(Z.shape[0], positions, positions).diagonal(dim1=1, dim2=2)


def _read_out(theta: Tensor, pooling: ConvPooling, post=None) -> Tensor:
    """The NTK of ``pooling``'s readout from Theta (B, H, W, H, W) of B image pairs: (B,) for
    ``"gap"`` (the mean over all pairs of positions), ``"flatten"`` (the mean over equal
    positions) and ``"trace"`` (the sum over equal positions of ``post(theta)``, the tensor of
    Feng & Kolter's eq. (21)), Theta itself for ``"none"``."""
    if pooling == "gap":
        return theta.flatten(1).mean(1)
    if pooling == "flatten":
        return _diagonal(theta).mean(1)
    if pooling == "trace":
        return _diagonal(post(theta)).sum(1)
    return theta


def _conv_pairs(x, y, window, sigma_w2, sigma_u2, tol, max_iter, pooling="none"):
    """The readout ``pooling`` (``_read_out``) of Theta (B, H, W, H, W) of B image pairs (x[i], y[i])."""
    batch, _, height, width = x.shape
    left, right = x.flatten(2).transpose(1, 2), y.flatten(2).transpose(1, 2)
    delta_pixels = refine_close_(one_minus_inner(left @ right.transpose(1, 2)), left, right)
    delta_pixels = delta_pixels.view(batch, height, width, height, width)
    delta_input = window.one_minus(delta_pixels).clamp_(0.0, 2.0)

    def sigma_step(delta):
        return (
            sigma_w2 * window.one_minus(one_minus_kappa1(delta, arccos_one_minus(delta)))
            + sigma_u2 * delta_input
        ).clamp_(0.0, 2.0)

    delta_star, its_sigma, res_sigma = _pair_iterate(sigma_step, delta_pixels, tol, max_iter)
    gate = sigma_w2 * (1.0 - arccos_one_minus(delta_star) / math.pi)
    sigma_star = 1.0 - delta_star

    def theta_step(theta):
        return window(gate * theta) + sigma_star

    theta, its_theta, res_theta = _pair_iterate(theta_step, sigma_star, tol, max_iter)

    def post(theta):
        # Kdot* . Theta + K*: K* = 1 - (sigma_w2 (1 - kappa1) + sigma_u2 (1 - x_p.y_p')), as the
        # variances sum to 1 (sigma_b2's part of 1 - K* is 0).
        one_minus_k = (
            sigma_w2 * one_minus_kappa1(delta_star, arccos_one_minus(delta_star)) + sigma_u2 * delta_pixels
        )
        return gate * theta + (1.0 - one_minus_k)

    return _read_out(theta, pooling, post), its_sigma + its_theta, max(res_sigma, res_theta)
