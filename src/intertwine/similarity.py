"""Representation similarity measures with the symmetries of ReLU networks (Godfrey et al.,
NeurIPS 2022, section 5 and appendix D.7).

Every measure takes two activation tensors of shape (N, C, H, W) or (N, C) -- more generally
(N, C, *spatial) -- computed on the same N inputs, and returns a float. Channels are the features
the network's intertwiner groups act on; spatial positions are never permuted. Numpy arrays are
converted; tensors stay on their device.

* ``grelu_procrustes``: Procrustes distance minimised over G_ReLU (channel permutations times
  positive channel scalings), turned into a similarity in [0, 1].
* ``orthogonal_procrustes``: the classical orthogonal Procrustes similarity, in [0, 1].
* ``grelu_cka``: CKA with the G_ReLU-invariant "max kernel" K_mn = max_c <x_mc, x_nc>.
* ``linear_cka``: linear CKA (Kornblith et al. 2019) on the flattened features.
* ``laplace_cka``: CKA with the Laplace kernel exp(-||x - y||_1 / bandwidth) on channel-normalised
  features, a positive-definite kernel that shares the G_ReLU symmetry.
* ``channel_normalized_linear_cka``: linear CKA after per-channel normalisation, as the paper's
  released code computed its "linear CKA"; kept to compare with published figures.
* ``gate_cka``: linear CKA of the gate patterns 1{x > 0} over channels and positions (the gate
  kernel of gated networks, Lakshminarayanan & Singh): which units an input switches on. Invariant
  to G_ReLU (a positive scaling keeps every sign, a permutation permutes the units), not to
  rotations, which mix the signs.
* ``rbf_cka``: CKA with the Gaussian kernel, bandwidth a fraction of the median distance
  (Kornblith et al. 2019).
* ``svcca``, ``pwcca``, ``shape_angular``, ``shape_euclidean`` (``intertwine.alignment``, also in
  ``MEASURES``): SVCCA, PWCCA and netrep's shape metrics; the shape metrics are distances.

Beyond one pair: ``pairwise`` computes the matrix of a measure between two lists of layers, each
layer's work done once; ``compare_models`` reads sites of two models by forward hooks over a data
set, streaming the Procrustes measures and linear CKA through exact accumulators
(``ProcrustesAccumulator``, ``LinearCKAAccumulator``).

Gradients: ``linear_cka``, ``rbf_cka``, ``kernel_cka`` and both Procrustes similarities, given a
tensor that requires grad, return a float64 0-d tensor carrying the graph (a training loss);
otherwise every measure returns a float.

All CKAs use the unbiased HSIC_1 estimator (Song et al. 2012; Nguyen, Raghu & Kornblith 2021,
eq. 3), so they need N >= 4 and can be slightly negative for unrelated representations. Every
measure's minimum N, and why, is ``MIN_SAMPLES``.

Scale: every measure divides a representation whose entries would overflow or underflow once
squared (beyond about 1e+-77 in float64, 1e+-9 in float32) by a power of two before it squares
anything (exact; the measures are invariant to the scale, and the euclidean shape distance is
scaled back), so values at 1e-200 and 1e+200 are those at 1.

Constant representations: a representation that is the same for every one of its N samples (zero
variance over the inputs, e.g. a layer whose units are all dead on them; with one sample, an
all-zero one) carries no information about the inputs, and no measure is defined on it (the CKAs
would be 0/0, G_ReLU Procrustes of all zeros 0.5). Every measure, ``kernel_cka`` on a kernel that
is constant up to centring, and ``ProcrustesAccumulator``'s results raise
``ConstantRepresentationError`` (a ``ValueError``) saying which argument it is; ``site_procrustes``
and ``site_cka`` add the model and the site. No measure returns NaN.

Precision: features are processed in their own floating dtype (float32 activations stay float32,
float64 and numpy arrays in float64; integer and half inputs are promoted). Sums that cancel or run
over many samples -- the HSIC reductions, per-channel statistics and the Procrustes cross-products --
are accumulated in float64. With float32 inputs every measure agreed with its float64 value to
1e-7 (N = 1000, 32 channels 8x8); the tests allow 1e-6.

Memory: no N x N x C tensor is ever formed. Kernel matrices (N x N) are held; every other
intermediate is blocked so that it stays within ``max_bytes`` (64 MiB by default).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Callable, Iterable, Literal, Sequence, Union

import numpy as np
import pandas as pd
import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor

from intertwine import alignment

__all__ = [
    "CKA_MEASURES",
    "ConstantRepresentationError",
    "DISTANCES",
    "LinearCKAAccumulator",
    "MEASURES",
    "MIN_SAMPLES",
    "PROCRUSTES_MEASURES",
    "cka_kernel",
    "kernel_cka",
    "ProcrustesAccumulator",
    "channel_normalized_linear_cka",
    "compare_models",
    "gate_cka",
    "grelu_cka",
    "grelu_procrustes",
    "laplace_cka",
    "linear_cka",
    "max_kernel",
    "orthogonal_procrustes",
    "pairwise",
    "rbf_cka",
    "site_cka",
    "site_procrustes",
    "unbiased_hsic",
]

ArrayLike = Union[Tensor, np.ndarray]
DEFAULT_MAX_BYTES = 64 * 2**20
_F64 = torch.float64


# ---------------------------------------------------------------------------
# Input handling
# ---------------------------------------------------------------------------


def _tracks_graph(*arrays: ArrayLike) -> bool:
    """Whether a differentiable measure should return a tensor carrying the autograd graph."""
    return torch.is_grad_enabled() and any(isinstance(a, Tensor) and a.requires_grad for a in arrays)


def _result(value: Tensor, graph: bool) -> Tensor | float:
    """A 0-d tensor on the graph for a differentiable call, a float otherwise."""
    return value if graph else float(value)


def _as_features(X: ArrayLike, name: str, graph: bool = False) -> Tensor:
    """Floating tensor of shape (N, C, P), P the number of spatial positions (1 if none); detached
    unless ``graph``."""
    X = X if isinstance(X, Tensor) else torch.as_tensor(np.asarray(X))
    if X.is_meta:
        raise ValueError(f"{name} is a meta tensor (a shape without data); pass the actual activations")
    X = X if graph else X.detach()
    if X.ndim < 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(
            f"{name} must have shape (N, C) or (N, C, H, W) with N, C >= 1, got {tuple(X.shape)}"
        )
    if X.is_complex():
        raise ValueError(f"{name} must be real, got {X.dtype}")
    if not X.is_floating_point():
        X = X.to(_F64)
    elif X.dtype in (torch.float16, torch.bfloat16):
        # Half precision cannot hold kernel sums over thousands of terms.
        X = X.to(torch.float32)
    # A finite sum proves every entry finite without an N*C*H*W mask; check entries only if not.
    if not bool(torch.isfinite(X.sum())) and not bool(torch.isfinite(X).all()):
        raise ValueError(f"{name} contains NaN or infinite values")
    return X.reshape(X.shape[0], X.shape[1], -1)


class ConstantRepresentationError(ValueError):
    """A representation is the same for every sample (or all zero): no similarity is defined.
    ``which`` names the argument or model ("X"/"Y", "a"/"b", or "xs"/"ys" with ``index``, the
    position in that list, from ``pairwise``), ``site`` the site when known."""

    def __init__(
        self, message: str, which: str | None = None, site: str | None = None, index: int | None = None
    ):
        super().__init__(message)
        self.which, self.site, self.index = which, site, index


def _constant_message(which: str, n: int, measure: str) -> str:
    return (
        f"{which} is the same for each of its {n} samples (zero variance over the inputs, e.g. "
        f"a layer whose units are all dead on them), so {measure} is undefined: a similarity "
        "compares how two representations vary across inputs"
    )


def _is_constant(lowest: Tensor, highest: Tensor, n: int) -> bool:
    """Whether features whose per-entry minimum and maximum over the samples are ``lowest`` and
    ``highest`` are constant: the same for every sample, or (one sample) all zero."""
    if n > 1:
        return bool(torch.equal(lowest, highest))
    return not bool(highest.any())


def _require_variation(X: Tensor, which: str, measure: str) -> None:
    """``ConstantRepresentationError`` if (N, C, P) features ``X`` are constant (see the module)."""
    if _is_constant(X.amin(0), X.amax(0), X.shape[0]):
        raise ConstantRepresentationError(_constant_message(which, X.shape[0], measure), which)


#: The fewest samples (inputs, the first axis) each measure is defined on, from its estimator:
#: the CKAs' unbiased HSIC_1 divides by N (N - 3), so N >= 4; CCA and the shape metrics centre the
#: features, and N centred samples span at most N - 1 directions: at N = 2 both representations
#: are the same line and SVCCA and PWCCA are 1 and the shape distances 0 for any data, so N >= 3;
#: Procrustes does not centre and compares the rows of the (N x positions, C) matrices, so it
#: counts rows: one row of each is two vectors one rotation (or, per channel, one normalisation)
#: apart, 1 for any data, so N x positions >= 2 (N >= 2 for features without positions; one
#: image with its spatial positions is allowed). Every entry point (one-shot, ``pairwise``, the
#: accumulators, ``compare_models``) enforces it with the same message.
MIN_SAMPLES = {
    "grelu_procrustes": 2,
    "orthogonal_procrustes": 2,
    "grelu_cka": 4,
    "linear_cka": 4,
    "laplace_cka": 4,
    "rbf_cka": 4,
    "channel_normalized_linear_cka": 4,
    "gate_cka": 4,
    "svcca": 3,
    "pwcca": 3,
    "shape_angular": 3,
    "shape_euclidean": 3,
}


def too_few_samples(measure: str, n: int, positions: int = 1) -> str | None:
    """Why ``measure`` is undefined on ``n`` samples (``MIN_SAMPLES``; of ``positions`` spatial
    positions each, which count for Procrustes), or None when it is defined."""
    need = MIN_SAMPLES[measure]
    procrustes = measure in ("grelu_procrustes", "orthogonal_procrustes")
    if (n * positions if procrustes else n) >= need:
        return None
    what = "rows (samples x spatial positions)" if procrustes else "samples (inputs)"
    return (
        f"{measure} needs at least {need} {what}, got N = {n}"
        + (f" x {positions}" if procrustes and positions > 1 else "")
        + f": below that it is {'undefined' if need == 4 else 'the same for any data'} (see "
        "similarity.MIN_SAMPLES); compare the representations of more inputs"
    )


def _pow2_scale(top: float) -> float:
    """A power of two near ``top`` (> 0): dividing by it is exact."""
    return 2.0 ** math.floor(math.log2(top)) if top >= 2.0**-1000 else 2.0**-1000


def _safe_bound(dtype: torch.dtype, degree: int) -> float:
    """Entries within [1 / bound, bound] keep sums of products of ``degree`` of them finite and
    nonzero in ``dtype`` (a margin for sums over many terms)."""
    return 2.0 ** (math.ceil(math.log2(torch.finfo(dtype).max)) // (2 * degree))


def _rescaled(X: Tensor, degree: int = 2) -> Tensor:
    """X divided by a power of two near its largest |entry| when that lies outside the range
    where products of ``degree`` entries neither overflow nor underflow (beyond about 1e+-77 for
    squares in float64, 1e+-9 in float32); X itself otherwise. Exact (a power of two), so a
    measure invariant to the scale of a representation is unchanged; used by every measure before
    it squares anything ("rescale before squaring")."""
    top = float(X.detach().abs().max()) if X.numel() else 0.0
    bound = _safe_bound(X.dtype, degree)
    if top == 0 or not math.isfinite(top) or 1 / bound <= top <= bound:
        return X
    scale = _pow2_scale(top)
    return X * (1 / math.sqrt(scale)) * (1 / math.sqrt(scale)) if scale < 2.0**-1000 else X / scale


def _check_pair(
    X: ArrayLike, Y: ArrayLike, min_samples: int, measure: str, graph: bool = False, rescale: bool = True
) -> tuple[Tensor, Tensor]:
    """X and Y as (N, C, P) features of one dtype and device, checked: the same N, at least
    ``MIN_SAMPLES[measure]`` of them (unchecked with ``min_samples`` 1: an accumulator's batch); each rescaled by a power of two when its entries
    would overflow or underflow once squared (``_rescaled``; not with ``rescale=False``, for
    accumulators, which keep one scale over their batches)."""
    X, Y = _as_features(X, "X", graph), _as_features(Y, "Y", graph)
    if X.shape[0] != Y.shape[0]:
        raise ValueError(
            f"X and Y must hold the same samples (first axis), got N = {X.shape[0]} and N = {Y.shape[0]}"
        )
    if min_samples > 1 and too_few_samples(measure, X.shape[0], X.shape[2]):
        raise ValueError(too_few_samples(measure, X.shape[0], X.shape[2]))
    if X.device != Y.device:
        raise ValueError(f"X and Y must be on the same device, got {X.device} and {Y.device}")
    dtype = torch.promote_types(X.dtype, Y.dtype)
    X, Y = X.to(dtype), Y.to(dtype)
    if rescale:
        X, Y = _rescaled(X), _rescaled(Y)
    return X, Y


def _normalize_channels_(X: Tensor, center: bool, channel_axis: int = 1) -> Tensor:
    """In place on X, (N, C, P) or, with channel_axis=0, (C, N, P): each channel optionally
    centred, then scaled to unit norm over samples and positions.

    All-zero channels (dead ReLUs) stay zero instead of becoming NaN.
    """
    sample_axis = 1 - channel_axis
    count = X.shape[sample_axis] * X.shape[2]
    shape = [1, 1, 1]
    shape[channel_axis] = -1
    # Reduce over the contiguous positions in X's dtype, then over samples in float64: a float32
    # reduction along the strided sample axis accumulates naively and loses ~N*eps (1e-4 relative
    # at N = 1000, enough to move CKA by 1e-5). No float64 copy of X is made.
    if center:
        mean = X.sum(2).to(_F64).sum(sample_axis) / count
        X.sub_(mean.to(X.dtype).view(shape))
    norms = torch.linalg.vector_norm(X, dim=2).to(_F64).square().sum(sample_axis).sqrt()
    norms = torch.where(norms > 0, norms, torch.ones_like(norms))
    return X.div_(norms.to(X.dtype).view(shape))


def _channel_normalize(X: Tensor, center: bool) -> Tensor:
    """(N, C, P) -> a normalised copy (see ``_normalize_channels_``)."""
    return _normalize_channels_(X.clone(), center)


def _channel_major(X: Tensor) -> Tensor:
    """(N, C, P) -> a new contiguous (C, N, P) tensor (never a view of X, so safe to modify)."""
    out = torch.empty((X.shape[1], X.shape[0], X.shape[2]), dtype=X.dtype, device=X.device)
    return out.copy_(X.transpose(0, 1))


def _flatten_centered(X: Tensor) -> Tensor:
    """(N, C, P) -> (N, C*P) with every feature centred over the samples.

    Only for smaller sums: the unbiased HSIC ignores translations, so the float32 mean's rounding
    (unlike in ``_channel_normalize``) does not reach the result.
    """
    X = X.reshape(X.shape[0], -1)
    return X - X.mean(dim=0, keepdim=True)


# ---------------------------------------------------------------------------
# Unbiased HSIC and CKA
# ---------------------------------------------------------------------------


def _check_max_bytes(max_bytes) -> int:
    """``max_bytes``, a memory budget: an integer >= 1 (a ValueError otherwise)."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, (int, np.integer)) or max_bytes < 1:
        raise ValueError(f"max_bytes must be an integer number of bytes >= 1, got {max_bytes!r}")
    return int(max_bytes)


def _rows_per_block(n_cols: int, bytes_per_entry: int, max_bytes: int) -> int:
    return max(1, _check_max_bytes(max_bytes) // max(1, n_cols * bytes_per_entry))


def _offdiagonal_row_sums(K: Tensor, rows: int) -> Tensor:
    sums = torch.cat([K[start : start + rows].to(_F64).sum(1) for start in range(0, K.shape[0], rows)])
    return sums - torch.diagonal(K).to(_F64)


def _u_centered_rows(K: Tensor, start: int, stop: int, row_sums: Tensor, total: Tensor) -> Tensor:
    """Rows start:stop of the U-centred K (Szekely & Rizzo 2014), in float64.

    U_ij = K_ij - r_i/(n-2) - r_j/(n-2) + s/((n-1)(n-2)) off the diagonal, 0 on it, with r and s
    the row and total sums of K with its diagonal zeroed. Then sum_ij U^K_ij U^L_ij / (n(n-3)) is
    exactly Song et al.'s unbiased HSIC_1, but sums centred numbers: no cancellation between the
    three large terms of the textbook formula.
    """
    n = K.shape[0]
    block = K[start:stop].to(_F64, copy=True)
    block -= (row_sums[start:stop, None] + row_sums[None, :]) / (n - 2)
    block += total / ((n - 1) * (n - 2))
    idx = torch.arange(start, stop, device=K.device)
    block[idx - start, idx] = 0.0
    return block


def _hsic_triple(K: Tensor, L: Tensor, max_bytes: int) -> tuple[Tensor, Tensor, Tensor]:
    """(HSIC1(K, L), HSIC1(K, K), HSIC1(L, L)) as float64 0-d tensors, in one blocked pass over
    both kernels (differentiable: the graph of K and L is kept)."""
    n = K.shape[0]
    # Two float64 row blocks plus temporaries of the same size.
    rows = _rows_per_block(n, 4 * 8, max_bytes)
    rk, rl = _offdiagonal_row_sums(K, rows), _offdiagonal_row_sums(L, rows)
    sk, sl = rk.sum(), rl.sum()
    kl = kk = ll = torch.zeros((), dtype=_F64, device=K.device)
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        uk = _u_centered_rows(K, start, stop, rk, sk).view(-1)
        ul = _u_centered_rows(L, start, stop, rl, sl).view(-1)
        kl, kk, ll = kl + torch.dot(uk, ul), kk + torch.dot(uk, uk), ll + torch.dot(ul, ul)
    scale = n * (n - 3)
    return kl / scale, kk / scale, ll / scale


def _as_kernel(K: ArrayLike, name: str, graph: bool = False) -> Tensor:
    K = K if isinstance(K, Tensor) else torch.as_tensor(np.asarray(K))
    if K.is_meta:
        raise ValueError(f"{name} is a meta tensor (a shape without data); pass the actual kernel")
    K = K if graph else K.detach()
    if not K.is_floating_point():
        K = K.to(_F64)
    if not bool(torch.isfinite(K).all()):
        raise ValueError(f"{name} contains NaN or infinite values")
    return K


def _check_kernels(K: Tensor, L: Tensor) -> None:
    if K.ndim != 2 or K.shape[0] != K.shape[1] or K.shape != L.shape:
        raise ValueError(
            f"K and L must be square and of the same shape, got {tuple(K.shape)} and {tuple(L.shape)}"
        )
    if K.shape[0] < 4:
        raise ValueError(
            f"the unbiased HSIC needs at least 4 samples (it divides by n(n-3)), got n = {K.shape[0]}"
        )


def unbiased_hsic(K: ArrayLike, L: ArrayLike, *, max_bytes: int = DEFAULT_MAX_BYTES) -> float:
    """Unbiased HSIC_1 of two n x n kernel matrices (Song et al. 2012; Nguyen et al. 2021, eq. 3).

    With K~, L~ the kernels with zeroed diagonals and 1 the all-ones vector,

        HSIC_1 = [tr(K~ L~) + (1'K~1)(1'L~1) / ((n-1)(n-2)) - 2/(n-2) 1'K~L~1] / (n(n-3)).

    Computed by U-centring both kernels in float64 row blocks of about ``max_bytes``. Needs n >= 4.
    """
    K, L = _as_kernel(K, "K"), _as_kernel(L, "L")
    _check_kernels(K, L)
    return float(_hsic_triple(K, L.to(K.device), max_bytes)[0])


def _cka(K: Tensor, L: Tensor, max_bytes: int) -> Tensor:
    """HSIC1(K, L) / sqrt(HSIC1(K, K) HSIC1(L, L)); an error when a kernel is constant up to
    U-centring (``_cka_from_hsic``)."""
    _check_kernels(K, L)
    kl, kk, ll = _hsic_triple(K, L, max_bytes)
    return _cka_from_hsic(kl, kk, ll, float(K.detach().abs().max()), float(L.detach().abs().max()))


# HSIC1(K, K) below (this * max |K_ij|)^2 is rounding: U-centring a constant kernel in float64
# leaves entries of about n * 1e-16 of its size, not the 0 it is.
_CONSTANT_KERNEL = 1e-10


def _cka_from_hsic(kl: Tensor, kk: Tensor, ll: Tensor, scale_k: float, scale_l: float) -> Tensor:
    """CKA from the three HSICs; ``scale_k``, ``scale_l`` bound the kernels' entries (max |K_ij|),
    against which a zero HSIC1(K, K), i.e. a kernel constant up to centring, is recognised."""
    # HSIC1(K, K) is a sum of squares of the U-centred K, so never negative.
    for which, own, scale in (("K", kk, scale_k), ("L", ll, scale_l)):
        if not float(own.detach()) > (_CONSTANT_KERNEL * scale) ** 2:
            raise ConstantRepresentationError(
                f"kernel {which} is constant up to centring (HSIC1({which}, {which}) = {own:.3g}), so CKA "
                "is 0/0: its representation is the same for every sample",
                which,
            )
    return kl / torch.sqrt(kk * ll)


# ---------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------


def _max_kernel_blocks(n: int, c: int, itemsize: int, max_bytes: int) -> tuple[int, int]:
    """(rows, channels) per block so that a (channels, rows, n) block fits in max_bytes."""
    max_bytes = _check_max_bytes(max_bytes)
    per_row = c * n * itemsize
    if per_row <= max_bytes:
        return min(n, max_bytes // per_row), c
    # Even one row of all channels is too big: fall back to a running max over channel chunks.
    return 1, max(1, max_bytes // (n * itemsize))


def _max_kernel(Xc: Tensor, rows: int, channels: int) -> Tensor:
    """Max kernel of channel-major features Xc (C, N, P): each channel's Gram block is a bmm slice."""
    c, n, _ = Xc.shape
    K = torch.empty(n, n, dtype=Xc.dtype, device=Xc.device)
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        block = None
        for c0 in range(0, c, channels):
            part = Xc[c0 : c0 + channels]
            # K is symmetric: only columns >= start are computed, the rest mirrors earlier blocks.
            gram = torch.bmm(part[:, start:stop], part[:, start:].transpose(1, 2))
            chunk_max = gram.amax(dim=0)
            block = chunk_max if block is None else torch.maximum(block, chunk_max, out=block)
        _mirror_rows(K, block, start, stop)
    return K


# Rows of K per block of the per-channel path: large enough for efficient matrix products, small
# enough that the triangle it skips is most of the work it saves.
_PER_CHANNEL_ROWS = 512


def _max_kernel_per_channel(Xc: Tensor, max_bytes: int) -> Tensor:
    """Max kernel of channel-major features Xc (C, N, P) as a running maximum, one channel at a time,
    of per-channel Gram blocks written into K's rows: no (channels, rows, N) intermediate. With one
    position per channel (2-D features) a Gram block is an outer product, computed elementwise on
    whole rows; otherwise a matrix product on the upper triangle, mirrored."""
    _, n, p = Xc.shape
    K = torch.empty(n, n, dtype=Xc.dtype, device=Xc.device)
    # Two (rows, N) buffers: K's block and one channel's product.
    rows = max(1, min(_PER_CHANNEL_ROWS, _rows_per_block(n, 2 * Xc.element_size(), max_bytes)))
    if p == 1:
        x = Xc[:, :, 0]
        product = torch.empty(min(rows, n), n, dtype=Xc.dtype, device=Xc.device)
        for start in range(0, n, rows):
            stop = min(n, start + rows)
            block, buffer = K[start:stop], product[: stop - start]
            torch.mul(x[0, start:stop, None], x[0, None, :], out=block)
            for channel in x[1:]:
                torch.maximum(block, torch.mul(channel[start:stop, None], channel, out=buffer), out=block)
        return K
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        block = torch.mm(Xc[0, start:stop], Xc[0, start:].T)
        buffer = torch.empty_like(block)
        for channel in Xc[1:]:
            torch.maximum(block, torch.mm(channel[start:stop], channel[start:].T, out=buffer), out=block)
        _mirror_rows(K, block, start, stop)
    return K


def _mirror_rows(K: Tensor, block: Tensor, start: int, stop: int) -> None:
    """Write rows start:stop of symmetric K from ``block`` = K[start:stop, start:] and mirror them
    below the diagonal; the diagonal square is made exactly symmetric from its upper triangle."""
    b = stop - start
    square = torch.triu(block[:, :b])
    K[start:stop, start:stop] = square + torch.triu(square, 1).T
    K[start:stop, stop:] = block[:, b:]
    K[stop:, start:stop] = block[:, b:].T


def _max_kernel_of(
    Xc: Tensor, method: str, max_bytes: int, block_rows: int | None = None, block_channels: int | None = None
) -> Tensor:
    """The max kernel of channel-major features by ``method`` (see ``max_kernel``)."""
    if method not in ("auto", "per_channel", "blocked"):
        raise ValueError(f"method must be 'auto', 'per_channel' or 'blocked', got {method!r}")
    if method == "blocked":
        rows, channels = _max_kernel_blocks(Xc.shape[1], Xc.shape[0], Xc.element_size(), max_bytes)
        return _max_kernel(Xc, block_rows or rows, block_channels or channels)
    return _max_kernel_per_channel(Xc, max_bytes)


def max_kernel(
    X: ArrayLike,
    *,
    method: Literal["auto", "per_channel", "blocked"] = "auto",
    max_bytes: int = DEFAULT_MAX_BYTES,
    block_rows: int | None = None,
    block_channels: int | None = None,
) -> Tensor:
    """The max kernel K_mn = max_c sum_{h,w} X_mchw X_nchw of features (N, C, H, W), as (N, N).

    No normalisation is applied here (``grelu_cka`` centres and normalises channels first). Two
    computations, both in row blocks so that beside the (C, N, H*W) transposed copy of X and the
    N x N result nothing exceeds ``max_bytes``:

    * ``"per_channel"``: a running maximum over channels of each channel's Gram block, written
      into K in place; for 2-D features (N, C) the Gram blocks are outer products, computed
      elementwise. Holds two (rows, N) blocks.
    * ``"blocked"``: batched matrix products of (channels, rows, N) blocks reduced by ``amax``,
      upper triangle only; ``block_rows`` / ``block_channels`` override its block shape (and
      select it).

    ``"auto"`` is ``"per_channel"``: measured on 2 CPU threads (N 500-5000, C 64-256,
    ``benchmarks/similarity.py``) it was 6.7-12.6x faster than ``"blocked"`` on 2-D features,
    2.7-5.1x at 4x4 positions, and 1.1-3.9x up to 16x16 (C 32-256, one thread).
    """
    if block_rows or block_channels:
        method = "blocked"
    return _max_kernel_of(_channel_major(_as_features(X, "X")), method, max_bytes, block_rows, block_channels)


def _linear_gram(X: Tensor) -> Tensor:
    return X @ X.T


def _l1_distances(X: Tensor, max_bytes: int) -> Tensor:
    """(N, D) -> (N, N) pairwise L1 distances, computed by row blocks on the upper triangle."""
    n = X.shape[0]
    rows = _rows_per_block(n, X.element_size(), max_bytes)
    D = torch.empty(n, n, dtype=X.dtype, device=X.device)
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        block = torch.cdist(X[start:stop], X[start:], p=1)
        b = stop - start
        square = torch.triu(block[:, :b], 1)
        D[start:stop, start:stop] = square + square.T
        D[start:stop, stop:] = block[:, b:]
        D[stop:, start:stop] = block[:, b:].T
    return D


def _median_offdiagonal(D: Tensor) -> Tensor:
    """Median of the distances d(x_i, x_j), i < j (mean of the two middle values if even), as a
    0-d tensor (differentiable: it is one or two of the distances)."""
    n = D.shape[0]
    upper = D[torch.triu(torch.ones(n, n, dtype=torch.bool, device=D.device), 1)]
    m = upper.numel()
    lower_middle = upper.kthvalue((m + 1) // 2).values
    if m % 2:
        return lower_middle
    return 0.5 * (lower_middle + upper.kthvalue(m // 2 + 1).values)


def _squared_distances(X: Tensor) -> Tensor:
    """(N, D) -> (N, N) squared Euclidean distances from the Gram matrix of the centred features
    (centring keeps the norms, and so the cancellation, small); differentiable."""
    X = X - X.mean(0, keepdim=True)
    gram = X @ X.T
    norms = torch.diagonal(gram)
    return (norms[:, None] + norms[None, :] - 2.0 * gram).clamp_min(0.0)


def _rbf_kernel(X: Tensor, bandwidth_fraction: float) -> Tensor:
    """exp(-||x_i - x_j||^2 / (2 sigma^2)), sigma^2 = bandwidth_fraction^2 * the median squared
    distance over i < j."""
    if not bandwidth_fraction > 0:
        raise ValueError(f"bandwidth_fraction must be positive, got {bandwidth_fraction}")
    squared = _squared_distances(X)
    median = _median_offdiagonal(squared)
    if not float(median.detach()) > 0:
        raise ValueError(
            "the median distance between samples is 0 (most samples are identical), so the RBF "
            "kernel's bandwidth bandwidth_fraction * median is 0; compare on more varied samples"
        )
    return torch.exp(-squared / (2.0 * bandwidth_fraction**2 * median))


def _laplace_kernel(X: Tensor, bandwidth: float | None, max_bytes: int) -> Tensor:
    D = _l1_distances(X, max_bytes)
    if bandwidth is None:
        bandwidth = float(_median_offdiagonal(D))
        if bandwidth <= 0:
            raise ValueError(
                "the median heuristic gave bandwidth 0 (most samples are identical); "
                "pass bandwidth= explicitly"
            )
    elif not bandwidth > 0:
        raise ValueError(f"bandwidth must be positive, got {bandwidth}")
    return D.div_(-bandwidth).exp_()


# ---------------------------------------------------------------------------
# Procrustes
# ---------------------------------------------------------------------------


def _merged_ranges(ranges: list[Tensor] | None, x: Tensor, y: Tensor) -> list[Tensor]:
    """Per-entry (min x, max x, min y, max y) over the samples so far, ``ranges``, and this batch."""
    new = [r.detach() for r in (x.amin(0), x.amax(0), y.amin(0), y.amax(0))]
    if not ranges:
        return new
    return [
        (torch.minimum if i % 2 == 0 else torch.maximum)(old, batch.to(old.device, old.dtype))
        for i, (old, batch) in enumerate(zip(ranges, new))
    ]


def _constant_side(ranges: list[Tensor], n: int) -> str | None:
    """Which representation, "X" or "Y" (X first), is constant over its n samples, or None."""
    low_x, high_x, low_y, high_y = ranges
    if _is_constant(low_x, high_x, n):
        return "X"
    return "Y" if _is_constant(low_y, high_y, n) else None


class ProcrustesAccumulator:
    """Sufficient statistics of both Procrustes similarities, accumulated over batches.

    ``update(x, y)`` takes paired batches (same inputs through both models) of shape
    (B, C, H, W) / (B, C', H, W) or (B, C) / (B, C') and adds, in float64, the C x C'
    cross-product M = sum_{n,h,w} x_nchw y_nc'hw and the per-channel squared norms. Whole feature
    tensors are never needed: per-channel or global normalisation over the full set is applied
    afterwards, exactly, as M_cc' / (||x_c|| ||y_c'||) or M / (||X|| ||Y||).

    Precision near 1: from M alone the distance is sqrt(2 - 2 tr), which cancels: a distance d
    comes out with an error of about 1e-8, not d * 1e-16. An optional second pass, ``refine(x, y)``
    over the same batches (any order, each once), sums the residual ||X~ - Y~ A*||^2 directly at
    the optimum A* the first pass found, which keeps every digit; once it has covered every sample
    the results use it. The one-shot functions make it when delta^2 < 1e-6 (``_REFINE_BELOW``).

    Differentiable: batches that require grad keep their graph, and ``grelu`` and ``orthogonal``
    then return 0-d tensors. The optimal permutation or rotation is held fixed (detached): the
    gradient of a minimum over A is the gradient at the minimiser (Danskin's theorem).
    """

    def __init__(self) -> None:
        self.n_samples = 0
        self.cross: Tensor | None = None
        self.x_sq: Tensor | None = None
        self.y_sq: Tensor | None = None
        self._positions: int | None = None
        self._ranges: list[Tensor] | None = None  # per-entry (min x, max x, min y, max y) over samples
        self._graph = False
        self._optimum: dict | None = None  # the minimisers, fixed by the first refine()
        self._residuals: dict[str, Tensor] = {}
        self._refined = 0
        self._scales: tuple[float, float] | None = None  # each side's divisor, set by the first batch

    def _batch(self, x: ArrayLike, y: ArrayLike) -> tuple[Tensor, Tensor, bool]:
        graph = _tracks_graph(x, y)
        x, y = _check_pair(x, y, 1, "Procrustes", graph, rescale=False)
        # Rescale before squaring: both measures are invariant to the scale of either side, so
        # each side is divided by one power of two for every batch (the first batch's, where its
        # entries would overflow or underflow once squared; exact).
        if self._scales is None:
            self._scales = tuple(
                1.0 if _rescaled(z) is z else _pow2_scale(float(z.detach().abs().max())) for z in (x, y)
            )
        if self._scales != (1.0, 1.0):
            x, y = x / self._scales[0], y / self._scales[1]
        if x.shape[2] != y.shape[2]:
            raise ValueError(
                f"Procrustes pairs spatial positions, so X and Y need the same number "
                f"of them, got {x.shape[2]} and {y.shape[2]}"
            )
        if self.cross is not None and (
            self.cross.shape != (x.shape[1], y.shape[1]) or self._positions != x.shape[2]
        ):
            raise ValueError(
                f"batch shapes (C={x.shape[1]}, C'={y.shape[1]}, positions="
                f"{x.shape[2]}) differ from earlier batches ({tuple(self.cross.shape)}, "
                f"positions={self._positions})"
            )
        return x, y, graph

    def update(self, x: ArrayLike, y: ArrayLike) -> ProcrustesAccumulator:
        if self._optimum is not None:
            raise ValueError("update() after refine(): the first pass must see every batch before the second")
        x, y, graph = self._batch(x, y)
        # (C, B*P): channels as columns of the (samples x positions) by channels matrix.
        xm, ym = _channel_rows(x), _channel_rows(y)
        cross = xm @ ym.T
        x_sq, y_sq = (
            torch.linalg.vector_norm(xm, dim=1).square(),
            torch.linalg.vector_norm(ym, dim=1).square(),
        )
        self._ranges = _merged_ranges(self._ranges, x, y)
        if self.cross is None:
            self.cross, self.x_sq, self.y_sq, self._positions = cross, x_sq, y_sq, x.shape[2]
        else:
            self.cross = self.cross + cross.to(self.cross.device)
            self.x_sq = self.x_sq + x_sq.to(self.x_sq.device)
            self.y_sq = self.y_sq + y_sq.to(self.y_sq.device)
        self.n_samples += x.shape[0]
        self._graph |= graph
        return self

    def constant(self) -> str | None:
        """Which of the accumulated representations is constant over the samples ("X" or "Y",
        X first), or None: the measures are undefined then (see the module docstring)."""
        return None if self.cross is None else _constant_side(self._ranges, self.n_samples)

    def _state(self, measure: str) -> tuple[Tensor, Tensor, Tensor]:
        if self.cross is None:
            raise ValueError("no batches accumulated yet: call update(x, y) first")
        if too_few_samples(measure, self.n_samples, self._positions):
            raise ValueError(too_few_samples(measure, self.n_samples, self._positions))
        which = self.constant()
        if which:
            raise ConstantRepresentationError(_constant_message(which, self.n_samples, measure), which)
        if 0 < self._refined < self.n_samples:
            raise ValueError(
                f"refine() has seen {self._refined} of the {self.n_samples} samples: give it every "
                "batch of the first pass once"
            )
        return self.cross, self.x_sq, self.y_sq

    def _matching(self) -> tuple[Tensor, np.ndarray, np.ndarray, Tensor, Tensor]:
        """(M~, rows, cols, per-channel norms of X and Y): the Hungarian matching of the
        normalised channels, X's channel rows[i] with Y's cols[i]."""
        M, x_sq, y_sq = self._state("grelu_procrustes")
        if M.shape[0] != M.shape[1]:
            raise ValueError(
                f"grelu_procrustes matches channels one to one, so X and Y need the "
                f"same number of channels, got {M.shape[0]} and {M.shape[1]}"
            )
        # Dead channels keep norm 1: they stay zero rather than becoming NaN (and so does the
        # gradient: the square root never sees the zero).
        nx, ny = torch.where(x_sq > 0, x_sq, 1.0).sqrt(), torch.where(y_sq > 0, y_sq, 1.0).sqrt()
        normalized = M / (nx[:, None] * ny[None, :])
        rows, cols = linear_sum_assignment(normalized.detach().cpu().numpy(), maximize=True)
        return normalized, rows, cols, nx, ny

    def _rotation(self) -> Tensor:
        """The orthogonal Q minimising ||X - Y Q|| for both sides zero-padded to max(C, C')."""
        M = _pad_square(self._state("orthogonal_procrustes")[0].detach())
        U, _, Vh = torch.linalg.svd(M.T)  # Y'X = U S Vh, so tr(Q' Y'X) is largest at Q = U Vh
        return U @ Vh

    def refine(self, x: ArrayLike, y: ArrayLike) -> ProcrustesAccumulator:
        """Second pass: add this batch's residuals at the first pass's optimum (see the class)."""
        if self._optimum is None:
            self._optimum = {"rotation": self._rotation()}
            if self.cross.shape[0] == self.cross.shape[1]:
                self._optimum["matching"] = self._matching()[1:]
            self._residuals = dict.fromkeys(self._optimum, 0.0)
        x, y, _ = self._batch(x, y)
        self._refined += x.shape[0]
        if self._refined > self.n_samples:
            raise ValueError(f"refine() has seen more samples than update()'s {self.n_samples}")
        xr, yr = _channel_rows(x).T, _channel_rows(y).T  # (B*P, C): samples and positions as rows
        width = max(xr.shape[1], yr.shape[1])
        pad = torch.nn.functional.pad
        scale_x, scale_y = self.x_sq.sum().sqrt(), self.y_sq.sum().sqrt()
        rotated = pad(yr, (0, width - yr.shape[1])) @ self._optimum["rotation"].to(yr.device)
        residual = pad(xr, (0, width - xr.shape[1])) / scale_x - rotated / scale_y
        self._residuals["rotation"] = self._residuals["rotation"] + residual.square().sum()
        if "matching" in self._optimum:
            rows, cols, nx, ny = self._optimum["matching"]
            residual = (xr / nx)[:, rows] - (yr / ny)[:, cols]
            self._residuals["matching"] = self._residuals["matching"] + residual.square().sum()
        return self

    def _refined_residual(self, key: str) -> Tensor | None:
        return self._residuals[key] if self._refined and self._refined == self.n_samples else None

    def _distance_sq(self, measure: str) -> tuple[Tensor, int]:
        """(delta^2, C) of ``measure``'s similarity 1 - delta / (2 sqrt(C)), C = 1 for orthogonal
        Procrustes: the refined residual once ``refine`` has seen every sample, else the closed form."""
        if measure == "grelu_procrustes":
            normalized, rows, cols, _, _ = self._matching()
            delta_sq = self._refined_residual("matching")
            if delta_sq is None:
                # ||X~||^2 + ||Y~||^2 - 2 max_P tr(M~ P): 2C - 2 max tr without dead channels.
                live = (self.x_sq > 0).sum() + (self.y_sq > 0).sum()
                delta_sq = (live - 2.0 * normalized[rows, cols].sum()).clamp_min(0.0)
            return delta_sq, normalized.shape[0]
        M, x_sq, y_sq = self._state("orthogonal_procrustes")
        delta_sq = self._refined_residual("rotation")
        if delta_sq is None:
            nuclear = torch.linalg.svdvals(M).sum() / (x_sq.sum() * y_sq.sum()).sqrt()
            delta_sq = (2.0 - 2.0 * nuclear).clamp_min(0.0)
        return delta_sq, 1

    def _similarity(self, delta_sq: Tensor, c: int) -> Tensor | float:
        return _result((1.0 - delta_sq.sqrt() / (2.0 * math.sqrt(c))).clamp(0.0, 1.0), self._graph)

    def grelu(self) -> Tensor | float:
        """G_ReLU Procrustes similarity 1 - delta / (2 sqrt(C)); see ``grelu_procrustes``."""
        return self._similarity(*self._distance_sq("grelu_procrustes"))

    def orthogonal(self) -> Tensor | float:
        """Orthogonal Procrustes similarity 1 - sqrt(2 - 2 ||M||_*) / 2; see ``orthogonal_procrustes``."""
        return self._similarity(*self._distance_sq("orthogonal_procrustes"))


# The closed forms' delta^2 carries an absolute error of about 1e-16 times the channel count
# (rounding of the summed cross-products): above this bound that is under 1e-7 of delta, below
# it the one-shot functions make the second pass that sums the residual directly.
_REFINE_BELOW = 1e-6


def _channel_rows(x: Tensor) -> Tensor:
    """(B, C, P) -> (C, B*P) in float64, one copy (the transpose and the conversion together)."""
    if x.requires_grad:
        return x.transpose(0, 1).reshape(x.shape[1], -1).to(_F64)
    rows = torch.empty((x.shape[1], x.shape[0], x.shape[2]), dtype=_F64, device=x.device)
    return rows.copy_(x.transpose(0, 1)).view(x.shape[1], -1)


def _pad_square(M: Tensor) -> Tensor:
    """M zero-padded to a square matrix."""
    width = max(M.shape)
    return torch.nn.functional.pad(M, (0, width - M.shape[1], 0, width - M.shape[0]))


def _procrustes(X: Tensor, Y: Tensor, max_bytes: int, measure: str) -> Tensor | float:
    """``measure`` of X and Y accumulated over sample batches whose float64 copies stay within
    max_bytes; a second pass where the distance is small enough for the closed form to lose digits."""
    per_sample = (X[0].numel() + Y[0].numel()) * 8
    batch = max(1, _check_max_bytes(max_bytes) // per_sample)
    starts = range(0, X.shape[0], batch)
    acc = ProcrustesAccumulator()
    for start in starts:
        acc.update(X[start : start + batch], Y[start : start + batch])
    delta_sq, c = acc._distance_sq(measure)  # a constant representation is an error naming measure
    if float(delta_sq.detach()) < _REFINE_BELOW:
        for start in starts:
            acc.refine(X[start : start + batch], Y[start : start + batch])
        delta_sq, c = acc._distance_sq(measure)
    return acc._similarity(delta_sq, c)


def grelu_procrustes(X: ArrayLike, Y: ArrayLike, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Tensor | float:
    """Procrustes similarity up to G_ReLU, in [0, 1] (1 iff Y = X A with A in G_ReLU).

    Each channel is divided by its norm over samples and positions (no centring); with X~, Y~ the
    (N*H*W, C) matrices, delta = min_P ||X~ - Y~ P||_F over permutation matrices P, found by the
    Hungarian algorithm on M = X~' Y~ (delta^2 = 2C - 2 max_P tr(M P)), and the similarity is
    1 - delta / (2 sqrt(C)). All-zero (dead) channels stay zero and count 0 in place of 1 in 2C.

    Invariance group: G_ReLU acting on the channels of either argument -- permutations times
    positive diagonal scalings -- i.e. f(X A, Y B) = f(X, Y) for A, B in G_ReLU. Symmetric in X, Y.
    Needs equal channel counts and equal spatial shapes; spatial positions are paired, not matched.
    Features are accumulated over sample batches of about ``max_bytes``; when delta^2 < 1e-6 a
    second pass sums the residual at the optimum, so that similarities near 1 keep their digits.

    Differentiable (almost everywhere: the matching is held fixed): with a tensor that requires
    grad it returns a float64 0-d tensor carrying the graph; otherwise a float.
    """
    graph = _tracks_graph(X, Y)
    X, Y = _check_pair(X, Y, 2, "grelu_procrustes", graph)
    if X.shape[1] != Y.shape[1]:
        raise ValueError(
            f"grelu_procrustes matches channels one to one, so X and Y need the same "
            f"number of channels, got {X.shape[1]} and {Y.shape[1]}"
        )
    return _procrustes(X, Y, max_bytes, "grelu_procrustes")


def orthogonal_procrustes(
    X: ArrayLike, Y: ArrayLike, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> Tensor | float:
    """Orthogonal Procrustes similarity, in [0, 1] (1 iff Y = c X Q with Q orthogonal, c > 0).

    The whole tensor is scaled to unit Frobenius norm (per-channel normalisation would not commute
    with rotations of the channels); with M = X' Y the C x C' cross-product of the (N*H*W, C)
    matrices, min_Q ||X - Y Q||_F^2 = 2 - 2 ||M||_* (nuclear norm), and the similarity is
    1 - sqrt(2 - 2 ||M||_*) / 2. Different channel counts are allowed (the narrower one is
    implicitly zero-padded).

    Invariance group: O(C) acting on the channels of either argument, times positive isotropic
    scaling. Symmetric in X, Y. Not invariant to translation (no centring).

    Accumulated over sample batches; when delta^2 < 1e-6 a second pass sums the residual
    ||X - Y Q*||^2 at the optimal Q* directly, so that similarities near 1 keep their digits
    (sqrt(2 - 2 x) would resolve delta only to about 1e-8). Differentiable: with a
    tensor that requires grad it returns a float64 0-d tensor carrying the graph; otherwise a float.
    """
    graph = _tracks_graph(X, Y)
    X, Y = _check_pair(X, Y, 2, "orthogonal_procrustes", graph)
    return _procrustes(X, Y, max_bytes, "orthogonal_procrustes")


# ---------------------------------------------------------------------------
# CKA measures
# ---------------------------------------------------------------------------


def grelu_cka(X: ArrayLike, Y: ArrayLike, *, max_bytes: int = DEFAULT_MAX_BYTES) -> float:
    """CKA with the max kernel, invariant to G_ReLU (paper, section 5).

    Each channel is centred (mean over samples and positions) and scaled to unit norm; then
    U_mnc = sum_{h,w} X_mchw X_nchw, K_mn = max_c U_mnc, likewise L from Y, and
    CKA = HSIC1(K, L) / sqrt(HSIC1(K, K) HSIC1(L, L)) with the unbiased HSIC_1. Channel counts
    may differ; N >= 4.

    Invariance group: per-channel translations and G_ReLU on the channels of either argument;
    since U is quadratic in each channel, any monomial matrix (signed permutation times nonzero
    diagonal) in fact. Symmetric in X, Y.

    Memory: see ``max_kernel``. Beside the inputs and the two N x N kernels it holds one
    normalised channel-major copy of one input at a time and a product block of at most
    ``max_bytes``.
    """
    X, Y = _check_pair(X, Y, 4, "grelu_cka")
    _require_variation(X, "X", "grelu_cka"), _require_variation(Y, "Y", "grelu_cka")
    kernels = []
    for Z in (X, Y):
        # Normalised in place on the channel-major copy the blocked products need: one copy of Z.
        Zc = _normalize_channels_(_channel_major(Z), center=True, channel_axis=0)
        kernels.append(_max_kernel_of(Zc, "auto", max_bytes))
        del Zc
    return float(_cka(*kernels, max_bytes))


def _linear_hsic_features(A: Tensor, B: Tensor, max_bytes: int) -> Tensor:
    """HSIC1(A A', B B') without forming the N x N Gram matrices: O(N D D') instead of O(N^2 D).

    tr(K~ L~) = ||A'B||_F^2 - sum_i K_ii L_ii and K~ 1 = A (A' 1) - diag K, so every term of the
    unbiased estimator is a feature-space product; ||A'B||_F^2 is summed over column blocks of A.
    """
    n = A.shape[0]
    dk = torch.linalg.vector_norm(A, dim=1).to(_F64).square()
    dl = torch.linalg.vector_norm(B, dim=1).to(_F64).square()
    cols = _rows_per_block(B.shape[1], 8 + B.element_size(), max_bytes)
    cross = sum(
        (A[:, start : start + cols].T @ B).to(_F64).square().sum() for start in range(0, A.shape[1], cols)
    )
    rk = (A @ A.sum(0)).to(_F64) - dk
    rl = (B @ B.sum(0)).to(_F64) - dl
    trace = cross - torch.dot(dk, dl)
    value = trace + rk.sum() * rl.sum() / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * torch.dot(rk, rl)
    return value / (n * (n - 3))


def _gates(X: Tensor) -> Tensor:
    return (X > 0).to(X.dtype if X.is_floating_point() else torch.float64)


def gate_cka(X: ArrayLike, Y: ArrayLike, *, max_bytes: int = DEFAULT_MAX_BYTES) -> float:
    """Linear CKA of the gates ``1{X > 0}`` and ``1{Y > 0}`` flattened over channels and positions
    (unbiased HSIC_1): the CKA of the gate kernels G G^T of gated-network theory. Channel counts may
    differ; N >= 4; a site whose gates are the same for every input is a ConstantRepresentationError.

    Invariance group: G_ReLU on the channels of either argument (and any map that keeps each
    unit's sign pattern); not orthogonal maps. Symmetric in X, Y.
    """
    X, Y = _check_pair(X, Y, 4, "gate_cka")
    GX, GY = _gates(X), _gates(Y)
    _require_variation(GX, "X", "gate_cka"), _require_variation(GY, "Y", "gate_cka")
    return float(_linear_cka(GX, GY, "auto", max_bytes))


def _linear_cka(X: Tensor, Y: Tensor, method: str, max_bytes: int) -> Tensor:
    # Linear CKA with the unbiased HSIC is translation-invariant; centring the features first only
    # keeps the float sums small.
    A, B = _flatten_centered(X), _flatten_centered(Y)
    n, d, e = A.shape[0], A.shape[1], B.shape[1]
    if method == "auto":
        method = "features" if n * (d * d + e * e + d * e) <= n * n * (d + e) else "gram"
    if method == "gram":
        return _cka(_linear_gram(A), _linear_gram(B), max_bytes)
    if method == "features":
        # max_i ||a_i||^2 bounds every entry of the Gram matrix A A' (Cauchy-Schwarz).
        return _cka_from_hsic(
            _linear_hsic_features(A, B, max_bytes),
            _linear_hsic_features(A, A, max_bytes),
            _linear_hsic_features(B, B, max_bytes),
            float(torch.linalg.vector_norm(A.detach(), dim=1).max()) ** 2,
            float(torch.linalg.vector_norm(B.detach(), dim=1).max()) ** 2,
        )
    raise ValueError(f"method must be 'auto', 'gram' or 'features', got {method!r}")


def linear_cka(
    X: ArrayLike,
    Y: ArrayLike,
    *,
    method: Literal["auto", "gram", "features"] = "auto",
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> float:
    """Linear CKA (Kornblith et al. 2019) on the flattened features (N, C*H*W), unbiased HSIC_1.

    No per-channel normalisation. ``method="gram"`` forms the N x N Gram matrices (cheaper when
    C*H*W > N), ``"features"`` works with the D x D' cross-products in column blocks (cheaper
    and N x N-free when C*H*W < N); ``"auto"`` picks the cheaper. Channel counts may differ; N >= 4.

    Invariance group: orthogonal transformations of the flattened features (in particular O(C)
    on the channels), isotropic scaling and translation, of either argument. Symmetric in X, Y.

    Differentiable: with a tensor that requires grad it returns a float64 0-d tensor carrying the
    graph (a training loss); otherwise a float.
    """
    graph = _tracks_graph(X, Y)
    X, Y = _check_pair(X, Y, 4, "linear_cka", graph)
    _require_variation(X, "X", "linear_cka"), _require_variation(Y, "Y", "linear_cka")
    return _result(_linear_cka(X, Y, method, max_bytes), graph)


def channel_normalized_linear_cka(
    X: ArrayLike,
    Y: ArrayLike,
    *,
    method: Literal["auto", "gram", "features"] = "auto",
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> float:
    """Linear CKA after centring each channel and scaling it to unit norm, the variant the paper's
    released code reported as "linear CKA". Kept to compare with published figures.

    Invariance group: per-channel translations and G_ReLU (indeed any monomial matrix) on the
    channels, isotropic scaling; unlike ``linear_cka`` not O(C). Symmetric in X, Y.
    """
    X, Y = _check_pair(X, Y, 4, "channel_normalized_linear_cka")
    for Z, which in ((X, "X"), (Y, "Y")):
        _require_variation(Z, which, "channel_normalized_linear_cka")
    return float(_linear_cka(_channel_normalize(X, True), _channel_normalize(Y, True), method, max_bytes))


def laplace_cka(
    X: ArrayLike,
    Y: ArrayLike,
    bandwidth: float | tuple[float, float] | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> float:
    """CKA with the Laplace kernel exp(-||x - y||_1 / bandwidth) on channel-normalised features.

    Each channel is centred and scaled to unit norm (over samples and positions), the features are
    flattened to (N, C*H*W) and compared by L1 distance. ``bandwidth`` is one value for both
    kernels, a pair (X's, Y's), or None for the median heuristic: the median of the pairwise
    distances d(x_i, x_j), i < j, of each representation. The kernel is positive definite (a
    product of one-dimensional Laplace kernels). Cost O(N^2 C H W) without BLAS (torch.cdist).

    Invariance group: per-channel translations and G_ReLU on the channels (the normalisation
    removes the scales, the L1 norm ignores the order of coordinates; also channel sign flips),
    of either argument. Symmetric in X, Y.
    """
    X, Y = _check_pair(X, Y, 4, "laplace_cka")
    _require_variation(X, "X", "laplace_cka"), _require_variation(Y, "Y", "laplace_cka")
    bx, by = bandwidth if isinstance(bandwidth, tuple) else (bandwidth, bandwidth)
    K = _laplace_kernel(_channel_normalize(X, True).reshape(X.shape[0], -1), bx, max_bytes)
    L = _laplace_kernel(_channel_normalize(Y, True).reshape(Y.shape[0], -1), by, max_bytes)
    return float(_cka(K, L, max_bytes))


# Kornblith et al.'s example fraction of the median distance; also cka_kernel's for rbf_cka.
_RBF_BANDWIDTH_FRACTION = 0.5


def rbf_cka(
    X: ArrayLike,
    Y: ArrayLike,
    *,
    bandwidth_fraction: float = _RBF_BANDWIDTH_FRACTION,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Tensor | float:
    """CKA with the Gaussian (RBF) kernel exp(-||x_i - x_j||^2 / (2 sigma^2)) on the flattened
    features (N, C*H*W) (Kornblith et al. 2019, section 3), unbiased HSIC_1; N >= 4.

    Bandwidth: sigma^2 = ``bandwidth_fraction``^2 times the median squared distance between
    distinct samples of that representation (pairs i < j), i.e. sigma is that fraction of the
    median distance; Kornblith et al. report fractions 0.2-0.8 and their code's example uses 0.5,
    the default here. Their code takes the median over all N^2 entries, the N zeros of the
    diagonal included, which lowers it slightly and shifts with N; here the diagonal is left out.

    Invariance group: orthogonal transformations of the flattened features, isotropic scaling (the
    bandwidth scales with the distances) and translation, of either argument. Symmetric in X, Y.

    Differentiable: with a tensor that requires grad it returns a float64 0-d tensor carrying the
    graph (the median too: it is one or two of the distances); otherwise a float.
    """
    graph = _tracks_graph(X, Y)
    X, Y = _check_pair(X, Y, 4, "rbf_cka", graph)
    _require_variation(X, "X", "rbf_cka"), _require_variation(Y, "Y", "rbf_cka")
    K = _rbf_kernel(X.reshape(X.shape[0], -1), bandwidth_fraction)
    L = _rbf_kernel(Y.reshape(Y.shape[0], -1), bandwidth_fraction)
    return _result(_cka(K, L, max_bytes), graph)


def cka_kernel(measure: str, X: ArrayLike, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Tensor:
    """The N x N kernel a CKA measure computes from one representation, so that
    ``kernel_cka(cka_kernel(m, X), cka_kernel(m, Y)) == m(X, Y)`` for m in ``CKA_MEASURES``.

    Comparing every site of one model with every site of another (the CKA heatmaps) then costs
    one kernel per site instead of one per site pair. ``laplace_cka`` and ``rbf_cka`` use their
    default (median) bandwidths.
    """
    X = _rescaled(_as_features(X, "X"))
    if measure not in CKA_MEASURES:
        raise ValueError(f"unknown CKA measure {measure!r}; expected one of {CKA_MEASURES}")
    if too_few_samples(measure, X.shape[0]):
        raise ValueError(too_few_samples(measure, X.shape[0]))
    _require_variation(X, "X", measure)
    if measure == "grelu_cka":
        Xc = _normalize_channels_(_channel_major(X), center=True, channel_axis=0)
        return _max_kernel_of(Xc, "auto", max_bytes)
    if measure == "linear_cka":
        return _linear_gram(_flatten_centered(X))
    if measure == "channel_normalized_linear_cka":
        return _linear_gram(_flatten_centered(_channel_normalize(X, True)))
    if measure == "gate_cka":
        G = _gates(X)
        _require_variation(G, "X", measure)
        return _linear_gram(_flatten_centered(G))
    if measure == "laplace_cka":
        return _laplace_kernel(_channel_normalize(X, True).reshape(X.shape[0], -1), None, max_bytes)
    if measure == "rbf_cka":
        return _rbf_kernel(X.reshape(X.shape[0], -1), _RBF_BANDWIDTH_FRACTION)
    raise ValueError(f"unknown CKA measure {measure!r}; expected one of {CKA_MEASURES}")


def kernel_cka(K: ArrayLike, L: ArrayLike, *, max_bytes: int = DEFAULT_MAX_BYTES) -> float:
    """CKA of two N x N kernels with the unbiased HSIC_1: HSIC1(K, L) / sqrt(HSIC1(K, K) HSIC1(L, L)).

    Differentiable: with a kernel that requires grad it returns a float64 0-d tensor carrying the
    graph; otherwise a float.
    """
    graph = _tracks_graph(K, L)
    K, L = _as_kernel(K, "K", graph), _as_kernel(L, "L", graph)
    return _result(_cka(K, L.to(K.device), max_bytes), graph)


CKA_MEASURES = (
    "grelu_cka",
    "linear_cka",
    "laplace_cka",
    "rbf_cka",
    "channel_normalized_linear_cka",
    "gate_cka",
)
PROCRUSTES_MEASURES = ("grelu_procrustes", "orthogonal_procrustes")

MEASURES: dict[str, Callable[..., float]] = {
    "grelu_procrustes": grelu_procrustes,
    "orthogonal_procrustes": orthogonal_procrustes,
    "grelu_cka": grelu_cka,
    "linear_cka": linear_cka,
    "laplace_cka": laplace_cka,
    "channel_normalized_linear_cka": channel_normalized_linear_cka,
    "gate_cka": gate_cka,
    "rbf_cka": rbf_cka,
    "svcca": alignment.svcca,
    "pwcca": alignment.pwcca,
    "shape_angular": alignment.shape_angular,
    "shape_euclidean": alignment.shape_euclidean,
}
# Distances (0 for equal representations, up to a symmetry); every other measure is a similarity.
DISTANCES = ("shape_angular", "shape_euclidean")


# ---------------------------------------------------------------------------
# Many layers at once
# ---------------------------------------------------------------------------

# Measures whose CKA is linear in features after a transformation: for these a layer keeps its
# centred features (N, D) when D is at most N, its Gram matrix otherwise.
_LINEAR_TRANSFORMS: dict[str, Callable[[Tensor], Tensor]] = {
    "linear_cka": lambda X: X,
    "channel_normalized_linear_cka": lambda X: _channel_normalize(X, True),
    "gate_cka": _gates,
}
# pwcca takes its weights from one side; every other measure is symmetric in its arguments.
_ASYMMETRIC = ("pwcca",)


class _CKALayer:
    """One representation's share of every CKA it takes part in: its centred features A (N, D),
    or its U-centred N x N kernel (``_u_centered_rows``, stored in the kernel's dtype, in place of
    the kernel); and HSIC1 with itself and a bound of the kernel's entries (``_cka_from_hsic``)."""

    def __init__(self, features: Tensor | None, kernel: Tensor | None, max_bytes: int) -> None:
        self.features, self.centered = features, None
        if kernel is None:
            self.self_hsic = _linear_hsic_features(features, features, max_bytes)
            self.scale = float(torch.linalg.vector_norm(features, dim=1).max()) ** 2
        else:
            self.scale = float(kernel.abs().max())
            self._center(kernel, max_bytes)

    def _center(self, kernel: Tensor, max_bytes: int) -> None:
        """U-centre ``kernel`` in place, row block by row block (a block needs only its own rows
        and the row sums), and sum HSIC1(K, K) from the float64 blocks."""
        n = len(kernel)
        rows = _rows_per_block(n, 4 * 8, max_bytes)
        row_sums = _offdiagonal_row_sums(kernel, rows)
        total, squares = row_sums.sum(), torch.zeros((), dtype=_F64, device=kernel.device)
        for start in range(0, n, rows):
            block = _u_centered_rows(kernel, start, min(n, start + rows), row_sums, total)
            squares = squares + block.square().sum()
            kernel[start : start + rows] = block
        self.centered, self.self_hsic = kernel, squares / (n * (n - 3))

    @property
    def width(self) -> int | None:
        """D of a layer that keeps its features, None for a kernel layer."""
        return None if self.features is None else self.features.shape[1]

    def use_gram(self, max_bytes: int) -> None:
        """Keep the U-centred Gram matrix of A instead of A (HSIC1 with itself is unchanged)."""
        self._center(_linear_gram(self.features), max_bytes)
        self.features = None


def _u_dot(a: _CKALayer, b: _CKALayer, max_bytes: int) -> Tensor:
    """sum_ij U(K)_ij U(L)_ij of two kernel layers, in float64 over row blocks."""
    n = len(a.centered)
    rows = _rows_per_block(n, 3 * 8, max_bytes)
    blocks = (
        (a.centered[start : start + rows].to(_F64) * b.centered[start : start + rows].to(_F64)).sum()
        for start in range(0, n, rows)
    )
    return sum(blocks, torch.zeros((), dtype=_F64, device=a.centered.device))


def _u_dot_features(features: _CKALayer, kernel: _CKALayer, max_bytes: int) -> Tensor:
    """sum_ij U(A A')_ij U(L)_ij = tr(A' U(L) A): U(L) has zero row sums and diagonal, so the
    U-centring of A A' adds nothing to the product (Szekely & Rizzo 2014). O(N^2 D) for A (N, D)."""
    A, L = features.features.to(_F64), kernel.centered
    n = len(L)
    rows = _rows_per_block(n, 2 * 8, max_bytes)
    blocks = (
        ((L[start : start + rows].to(_F64) @ A) * A[start : start + rows]).sum()
        for start in range(0, n, rows)
    )
    return sum(blocks, torch.zeros((), dtype=_F64, device=L.device))


def _cka_of_layers(a: _CKALayer, b: _CKALayer, max_bytes: int) -> float:
    n = len(a.features if a.centered is None else a.centered)
    if a.centered is None and b.centered is None:
        cross = _linear_hsic_features(a.features, b.features, max_bytes)
    elif a.centered is not None and b.centered is not None:
        cross = _u_dot(a, b, max_bytes) / (n * (n - 3))
    else:
        features, kernel = (a, b) if a.centered is None else (b, a)
        cross = _u_dot_features(features, kernel, max_bytes) / (n * (n - 3))
    return float(_cka_from_hsic(cross, a.self_hsic, b.self_hsic, a.scale, b.scale))


def _pair_cost(n: int, a: int | None, b: int | None) -> int:
    """Rough operation count of one CKA pair: D x D' cross-products of features, tr(A' U(L) A)
    for features with a kernel, or a blocked pass over two N x N kernels (None: a kernel layer)."""
    if a is not None and b is not None:
        return n * a * b
    return n * n + n * n * (a or b or 0)


def _choose_grams(layers: list[_CKALayer], partners: list[list[_CKALayer]], n: int, max_bytes: int) -> None:
    """Turn into Gram layers the feature layers wider than the threshold that minimises the total
    operation count of every pair (building a Gram costs N^2 D once; see ``_pair_cost``)."""
    widths = sorted({layer.width for layer in layers if layer.width is not None})
    if not widths:
        return

    def total(threshold: int) -> int:
        width = {
            id(layer): (None if w is not None and w > threshold else w)
            for layer in layers
            for w in [layer.width]
        }
        build = sum(
            n * n * layer.width for layer in layers if layer.width is not None and layer.width > threshold
        )
        return build + sum(
            _pair_cost(n, width[id(a)], width[id(b)]) for a, others in zip(layers, partners) for b in others
        )

    best = min([0, *widths], key=total)
    for layer in layers:
        if layer.width is not None and layer.width > best:
            layer.use_gram(max_bytes)


def _prepare_cka(measure: str, X: Tensor, max_bytes: int) -> _CKALayer:
    if measure in _LINEAR_TRANSFORMS:
        Z = _LINEAR_TRANSFORMS[measure](_rescaled(X))
        _require_variation(Z, "X", measure)
        A = _flatten_centered(Z)
        if A.shape[1] <= A.shape[0]:
            return _CKALayer(A, None, max_bytes)
        return _CKALayer(None, _linear_gram(A), max_bytes)
    return _CKALayer(None, cka_kernel(measure, X, max_bytes=max_bytes), max_bytes)


def _preparer(measure: str, max_bytes: int) -> tuple[Callable, Callable]:
    """(prepare, compare) for a measure: per-representation work and the pair's."""
    if measure in CKA_MEASURES:
        return partial(_prepare_cka, measure, max_bytes=max_bytes), partial(
            _cka_of_layers, max_bytes=max_bytes
        )
    if measure in alignment.PREPARED:
        return alignment.PREPARED[measure]
    # Procrustes: the pair's cross-product is the work; nothing to share.
    return (lambda X: X), partial(MEASURES[measure], max_bytes=max_bytes)


def pairwise(
    measure: str,
    xs: Iterable[ArrayLike],
    ys: Iterable[ArrayLike] | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> np.ndarray:
    """The (len(xs), len(ys)) matrix of ``measure`` between each representation of ``xs`` and each
    of ``ys`` (``ys`` omitted: ``xs`` with itself), all on the same N samples; widths and spatial
    shapes may differ (the Procrustes measures need equal spatial shapes, and ``grelu_procrustes``
    equal widths, for each pair).

    ``xs`` and ``ys`` may be generators: each representation is prepared as it comes, and its
    activations need not outlive that. Per-layer work is done once per layer, not once per pair:
    a kernel CKA layer keeps its U-centred N x N kernel (in place of the kernel) and HSIC1(K, K),
    so that a pair is one pass over two matrices; a linear CKA layer (linear, channel-normalised,
    gate) keeps its centred features (N, D), paired through D x D' cross-products, or its U-centred
    Gram matrix, whichever makes the whole matrix cheaper (a threshold on D chosen from every
    pair's operation count; a feature layer pairs with a Gram layer as tr(A' U(L) A)); the CCA and
    shape measures keep their SVDs (``intertwine.alignment``). Values equal the single-pair
    measure's within rounding. Not differentiable: the entries are floats.
    """
    if measure not in MEASURES:
        raise ValueError(f"unknown measure {measure!r}; expected one of {sorted(MEASURES)}")
    symmetric = ys is None and measure not in _ASYMMETRIC
    prepare, compare = _preparer(measure, max_bytes)
    prepared: dict[str, list] = {}
    samples: set[int] = set()
    for side, layers in ({"xs": xs} if ys is None else {"xs": xs, "ys": ys}).items():
        prepared[side] = []
        for i, layer in enumerate(layers):
            X = _as_features(layer, f"{side}[{i}]")
            samples.add(len(X))
            if len(samples) > 1:
                raise ValueError(
                    f"every representation must hold the same samples, got N = {sorted(samples)}"
                )
            if too_few_samples(measure, len(X), X.shape[2]):
                raise ValueError(too_few_samples(measure, len(X), X.shape[2]))
            try:
                prepared[side].append(prepare(X))
            except ConstantRepresentationError as err:
                raise ConstantRepresentationError(f"{side}[{i}]: {err}", side, index=i) from None
        if not prepared[side]:
            raise ValueError(f"pairwise needs at least one representation in {side}")
    px, py = prepared["xs"], prepared.get("ys", prepared["xs"])
    if measure in _LINEAR_TRANSFORMS:
        # Which linear layers pair best through their Gram matrices depends on all of them.
        everyone = px if ys is None else px + py
        partners = [py] * len(px) if ys is None else [py] * len(px) + [px] * len(py)
        _choose_grams(everyone, partners, samples.pop(), max_bytes)
    matrix = np.empty((len(px), len(py)))
    for i, a in enumerate(px):
        for j, b in enumerate(py):
            if symmetric and j < i:
                matrix[i, j] = matrix[j, i]
                continue
            try:
                matrix[i, j] = compare(a, b)
            except ValueError as err:
                raise type(err)(f"xs[{i}] and {'ys' if ys is not None else 'xs'}[{j}]: {err}") from None
    return matrix


# ---------------------------------------------------------------------------
# Streaming: linear CKA accumulated over batches, and two models compared on a data set
# ---------------------------------------------------------------------------


class LinearCKAAccumulator:
    """Linear CKA (unbiased HSIC_1) of paired batches, accumulated exactly, in float64.

    Every term of the unbiased estimator on features a_i, b_i (flattened) is a sum over samples
    of feature-space products: tr(K~ L~) = ||A'B||^2 - sum_i |a_i|^2 |b_i|^2, and with s = sum_i a_i
    the Gram row sums are a_i . s - |a_i|^2, so sum_i r_i r'_i needs s' A'B s', A' diag|b|^2 and
    the like. The state is the D x D', D x D and D' x D' cross-products and a few vectors: memory
    8 (D + D')^2 bytes, independent of N. Batches are shifted by the first batch's means (the
    estimator ignores translations; the sums stay small).
    """

    def __init__(self) -> None:
        self.n_samples = 0
        self._shift: tuple[Tensor, Tensor] | None = None
        self._sums: dict[str, Tensor] = {}
        self._ranges: list[Tensor] = []
        self._largest = [0.0, 0.0]  # max_i |a_i|^2, max_i |b_i|^2: bounds of the Gram entries
        self._scales: tuple[float, float] | None = None  # each side's divisor, set by the first batch

    def update(self, x: ArrayLike, y: ArrayLike) -> LinearCKAAccumulator:
        x, y = _check_pair(x, y, 1, "linear_cka", rescale=False)
        A, B = x.reshape(len(x), -1).to(_F64), y.reshape(len(y), -1).to(_F64)
        # Rescale before squaring: the sums hold fourth powers, so each side is divided by one
        # power of two for every batch (the first batch's, where those would overflow or underflow).
        if self._scales is None:
            self._scales = tuple(
                1.0 if _rescaled(z, 4) is z else _pow2_scale(float(z.abs().max())) for z in (A, B)
            )
        A, B = A / self._scales[0], B / self._scales[1]
        if self._shift is None:
            self._shift = A.mean(0), B.mean(0)
        elif (A.shape[1], B.shape[1]) != (len(self._shift[0]), len(self._shift[1])):
            raise ValueError(
                f"batch feature sizes ({A.shape[1]}, {B.shape[1]}) differ from earlier batches' "
                f"({len(self._shift[0])}, {len(self._shift[1])})"
            )
        A, B = A - self._shift[0], B - self._shift[1]
        da, db = A.square().sum(1), B.square().sum(1)
        terms = {
            "ab": A.T @ B, "aa": A.T @ A, "bb": B.T @ B, "a": A.sum(0), "b": B.sum(0),
            "a_da": A.T @ da, "a_db": A.T @ db, "b_da": B.T @ da, "b_db": B.T @ db,
            "da": da.sum(), "db": db.sum(), "da_db": da @ db, "da_da": da @ da, "db_db": db @ db,
        }  # fmt: skip
        for key, value in terms.items():
            self._sums[key] = self._sums[key] + value if key in self._sums else value
        self._ranges = _merged_ranges(self._ranges, x, y)
        self._largest = [max(self._largest[0], float(da.max())), max(self._largest[1], float(db.max()))]
        self.n_samples += len(x)
        return self

    def _hsic(self, cross: str, a: str, b: str, a_db: str, b_da: str, da: str, db: str, da_db: str) -> Tensor:
        S, n = self._sums, self.n_samples
        trace = S[cross].square().sum() - S[da_db]
        row_a, row_b = S[a] @ S[a] - S[da], S[b] @ S[b] - S[db]
        rows = S[a] @ S[cross] @ S[b] - S[a] @ S[a_db] - S[b] @ S[b_da] + S[da_db]
        return (trace + row_a * row_b / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * rows) / (n * (n - 3))

    def value(self) -> float:
        """The linear CKA of everything accumulated; see ``linear_cka``."""
        if too_few_samples("linear_cka", self.n_samples):
            raise ValueError(too_few_samples("linear_cka", self.n_samples))
        which = _constant_side(self._ranges, self.n_samples)
        if which:
            raise ConstantRepresentationError(_constant_message(which, self.n_samples, "linear_cka"), which)
        kl = self._hsic("ab", "a", "b", "a_db", "b_da", "da", "db", "da_db")
        kk = self._hsic("aa", "a", "a", "a_da", "a_da", "da", "da", "da_da")
        ll = self._hsic("bb", "b", "b", "b_db", "b_db", "db", "db", "db_db")
        return float(_cka_from_hsic(kl, kk, ll, *self._largest))


def _batches(data, batch_size: int) -> tuple[Iterable, int | None]:
    """(iterable of input batches, their number if known) from a tensor of inputs, a map-style
    Dataset of (input, ...) items, or any iterable of batches (a DataLoader): a batch is a tensor
    or a tuple/list whose first element is the inputs."""
    from torch.utils.data import DataLoader, Dataset, IterableDataset

    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer of at least 1, got {batch_size!r}")
    if isinstance(data, Tensor):
        batches = data.split(batch_size)
    elif isinstance(data, Dataset) and not isinstance(data, IterableDataset):
        batches = DataLoader(data, batch_size=batch_size)
    else:
        batches = data
    count = len(batches) if hasattr(batches, "__len__") else None
    return (batch[0] if isinstance(batch, (tuple, list)) else batch for batch in batches), count


def _positions(X: Tensor) -> int:
    return X[0, 0].numel()


def compare_models(
    model_a: torch.nn.Module,
    model_b: torch.nn.Module,
    data,
    measures: Sequence[str],
    sites_a: Sequence[str] | None = None,
    sites_b: Sequence[str] | None = None,
    *,
    batch_size: int = 256,
    progress: bool = True,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_accumulator_bytes: int = 2**30,
) -> dict[str, pd.DataFrame]:
    """Each of ``measures`` between every site of model a and every site of model b on the same
    inputs: {measure: DataFrame (sites_a x sites_b)}.

    ``sites_a``/``sites_b`` are module names (default: the zoo model's sites, ``models.sites``);
    forward hooks read them, so any ``nn.Module`` works. ``data`` is a tensor of model inputs, a
    map-style Dataset of (input, ...) items (batched by ``batch_size``) or an iterable of batches
    such as a DataLoader; inputs go to each model's device, so the whole computation runs where the
    models are (CPU or GPU), in eval mode without autograd, with a progress bar over batches.

    Streamed with exact accumulation, nothing kept per sample: the Procrustes measures (the
    cross-products of ``ProcrustesAccumulator``, for the site pairs with equal spatial shapes, and
    for ``grelu_procrustes`` equal widths; NaN for the others, where they are undefined) and
    ``linear_cka`` (``LinearCKAAccumulator``) while its site pairs' cross-products fit in
    ``max_accumulator_bytes``. Every other measure (and linear CKA between wider sites) keeps every
    site's activations on the models' device and computes its matrix with ``pairwise`` at the end.
    The Procrustes values here come from one pass (close to 1 they resolve about 1e-8; the
    one-shot functions make a second pass).
    """
    from tqdm.auto import tqdm

    from intertwine.models import site_activations, sites

    unknown = [m for m in measures if m not in MEASURES]
    if unknown:
        raise ValueError(f"unknown measures {unknown}; expected some of {sorted(MEASURES)}")
    names = [
        [s.name for s in sites(model)] if chosen is None else list(chosen)
        for model, chosen in ((model_a, sites_a), (model_b, sites_b))
    ]
    pairs = [(i, j) for i in range(len(names[0])) for j in range(len(names[1]))]
    procrustes: dict[tuple[int, int], ProcrustesAccumulator] = {}
    linear: dict[tuple[int, int], LinearCKAAccumulator] = {}
    kept: list[dict[int, list[Tensor]] | None] | None = None  # per model: site index -> batches
    batches, count = _batches(data, batch_size)
    for inputs in tqdm(batches, total=count, disable=not progress, desc="compare_models", unit="batch"):
        acts = [
            site_activations(model, inputs, chosen, batch_size=len(inputs))
            for model, chosen in zip((model_a, model_b), names)
        ]
        xs, ys = (
            [acts[0][s] for s in names[0]],
            [acts[1][s].to(acts[0][names[0][0]].device) for s in names[1]],
        )
        if kept is None:  # the first batch: decide what is streamed, from the shapes
            kept = [{} for _ in range(2)]
            if any(m in PROCRUSTES_MEASURES for m in measures):
                procrustes = {
                    (i, j): ProcrustesAccumulator()
                    for i, j in pairs
                    if _positions(xs[i]) == _positions(ys[j])
                }
            width = [[x[0].numel() for x in xs], [y[0].numel() for y in ys]]
            state = sum(8 * (width[0][i] + width[1][j]) ** 2 for i, j in pairs)
            if "linear_cka" in measures and state <= max_accumulator_bytes:
                linear = {pair: LinearCKAAccumulator() for pair in pairs}
            collected = [
                m for m in measures if m not in PROCRUSTES_MEASURES and not (m == "linear_cka" and linear)
            ]
            if not collected:
                kept = [None, None]
        for (i, j), acc in procrustes.items():
            acc.update(xs[i], ys[j])
        for (i, j), acc in linear.items():
            acc.update(xs[i], ys[j])
        if kept[0] is not None:
            for side, layers in zip(kept, (xs, ys)):
                for k, layer in enumerate(layers):
                    side.setdefault(k, []).append(layer)
    if kept is None:
        raise ValueError("compare_models: data gave no batches")
    full = [None if side is None else [torch.cat(side[k]) for k in sorted(side)] for side in kept]
    results = {}
    for measure in measures:
        try:
            matrix = _streamed_matrix(
                measure, procrustes, linear, full, len(names[0]), len(names[1]), max_bytes
            )
        except ConstantRepresentationError as err:
            model = {"X": "a", "xs": "a", "Y": "b", "ys": "b"}[err.which]
            site = names[0 if model == "a" else 1][err.index]
            raise ConstantRepresentationError(
                f"{measure}: model {model} at site {site}: {err}", model, site
            ) from None
        results[measure] = pd.DataFrame(matrix, index=names[0], columns=names[1])
    return results


def _streamed_matrix(
    measure: str,
    procrustes: dict[tuple[int, int], ProcrustesAccumulator],
    linear: dict[tuple[int, int], LinearCKAAccumulator],
    full: list[list[Tensor] | None],
    rows: int,
    cols: int,
    max_bytes: int,
) -> np.ndarray:
    """One measure's matrix in ``compare_models`` from its accumulators or kept activations; a
    ConstantRepresentationError carries the site's position in ``index``."""
    if measure in PROCRUSTES_MEASURES or (measure == "linear_cka" and linear):
        matrix = np.full((rows, cols), np.nan)
        accumulators = procrustes if measure in PROCRUSTES_MEASURES else linear
        for (i, j), acc in accumulators.items():
            if measure == "grelu_procrustes" and acc.cross.shape[0] != acc.cross.shape[1]:
                continue
            read = {"grelu_procrustes": "grelu", "orthogonal_procrustes": "orthogonal", "linear_cka": "value"}
            try:
                matrix[i, j] = getattr(acc, read[measure])()
            except ConstantRepresentationError as err:
                err.index = i if err.which == "X" else j
                raise
        return matrix
    return pairwise(measure, full[0], full[1], max_bytes=max_bytes)


# ---------------------------------------------------------------------------
# Between two models: every site's activations on the same images
# ---------------------------------------------------------------------------


def site_procrustes(
    model_a: torch.nn.Module,
    model_b: torch.nn.Module,
    images: Tensor,
    sites: list[str],
    mean: Tensor,
    std: Tensor,
    batch_size: int,
) -> dict[str, ProcrustesAccumulator]:
    """Procrustes statistics of the two models' activations at each of ``sites`` (the same site in
    both) on uint8 ``images``, accumulated over batches: one forward pass per model and batch
    gives every site's activations."""
    from intertwine.models import site_activations

    accumulators = {site: ProcrustesAccumulator() for site in sites}
    for start in range(0, len(images), batch_size):
        reps_a, reps_b = (
            site_activations(model, images[start : start + batch_size], sites, mean, std, batch_size)
            for model in (model_a, model_b)
        )
        for site in sites:
            accumulators[site].update(reps_a[site], reps_b[site])
    for site, acc in accumulators.items():
        which = acc.constant()
        if which:
            model = {"X": "a", "Y": "b"}[which]
            raise ConstantRepresentationError(
                f"model {model} at site {site}: "
                + _constant_message("its representation", acc.n_samples, "every Procrustes measure"),
                model,
                site,
            )
    return accumulators


def site_cka(
    measure: str,
    model_a: torch.nn.Module,
    model_b: torch.nn.Module,
    images: Tensor,
    sites: list[str],
    mean: Tensor,
    std: Tensor,
    batch_size: int,
) -> dict[tuple[str, str], float]:
    """The CKA ``measure`` between model a at each of ``sites`` and model b at each of ``sites``
    (every pair, for the heatmaps) on uint8 ``images``, by ``pairwise``: one site's activations at
    a time are read and prepared (an N x N kernel, or centred features where narrower)."""
    from intertwine.models import site_activations

    def layers(model: torch.nn.Module):
        for site in sites:
            yield site_activations(model, images, [site], mean, std, batch_size)[site]

    try:
        matrix = pairwise(measure, layers(model_a), layers(model_b))
    except ConstantRepresentationError as err:
        name, site = {"xs": "a", "ys": "b"}[err.which], sites[err.index]
        raise ConstantRepresentationError(
            f"model {name} at site {site}: " + _constant_message("its representation", len(images), measure),
            name,
            site,
        ) from None
    return {(a, b): float(matrix[i, j]) for i, a in enumerate(sites) for j, b in enumerate(sites)}
