"""The unbiased HSIC_1 estimator (Song et al. 2012; Nguyen, Raghu & Kornblith 2021, eq. 3) and CKA
from it, blocked to stay within ``max_bytes``."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from intertwine.measures._base import (
    DEFAULT_MAX_BYTES,
    F64,
    ArrayLike,
    ConstantRepresentationError,
    rows_per_block,
)

# ---------------------------------------------------------------------------
# Unbiased HSIC and CKA
# ---------------------------------------------------------------------------


def offdiagonal_row_sums(K: Tensor, rows: int) -> Tensor:
    sums = torch.cat([K[start : start + rows].to(F64).sum(1) for start in range(0, K.shape[0], rows)])
    return sums - torch.diagonal(K).to(F64)


def u_centered_rows(K: Tensor, start: int, stop: int, row_sums: Tensor, total: Tensor) -> Tensor:
    """Rows start:stop of the U-centred K (Szekely & Rizzo 2014), in float64.

    U_ij = K_ij - r_i/(n-2) - r_j/(n-2) + s/((n-1)(n-2)) off the diagonal, 0 on it, with r and s
    the row and total sums of K with its diagonal zeroed. Then sum_ij U^K_ij U^L_ij / (n(n-3)) is
    exactly Song et al.'s unbiased HSIC_1, but sums centred numbers: no cancellation between the
    three large terms of the textbook formula.
    """
    n = K.shape[0]
    block = K[start:stop].to(F64, copy=True)
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
    rows = rows_per_block(n, 4 * 8, max_bytes)
    rk, rl = offdiagonal_row_sums(K, rows), offdiagonal_row_sums(L, rows)
    sk, sl = rk.sum(), rl.sum()
    kl = kk = ll = torch.zeros((), dtype=F64, device=K.device)
    for start in range(0, n, rows):
        stop = min(n, start + rows)
        uk = u_centered_rows(K, start, stop, rk, sk).view(-1)
        ul = u_centered_rows(L, start, stop, rl, sl).view(-1)
        kl, kk, ll = kl + torch.dot(uk, ul), kk + torch.dot(uk, uk), ll + torch.dot(ul, ul)
    scale = n * (n - 3)
    return kl / scale, kk / scale, ll / scale


def as_kernel(K: ArrayLike, name: str, graph: bool = False) -> Tensor:
    K = K if isinstance(K, Tensor) else torch.as_tensor(np.asarray(K))
    if K.is_meta:
        raise ValueError(f"{name} is a meta tensor (a shape without data); pass the actual kernel")
    K = K if graph else K.detach()
    if not K.is_floating_point():
        K = K.to(F64)
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

    Parameters
    ----------
    K, L : Tensor or ndarray, shape (n, n)
        Two kernel matrices of the same n >= 4 samples, finite.
    max_bytes : int
        The memory bound of each block of intermediates.

    Returns
    -------
    float
        HSIC_1, which can be slightly negative.
    """
    K, L = as_kernel(K, "K"), as_kernel(L, "L")
    _check_kernels(K, L)
    return float(_hsic_triple(K, L.to(K.device), max_bytes)[0])


#: HSIC estimators of the CKAs: Song et al.'s unbiased HSIC_1 (the default) or the biased
#: HSIC_0 = tr(K H L H) / (n - 1)^2 of Gretton et al. 2005, which Kornblith et al. 2019 reported.
ESTIMATORS = ("unbiased", "biased")


def check_estimator(estimator: str) -> None:
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {', '.join(ESTIMATORS)}, got {estimator!r}")


def _double_centred(K: Tensor) -> Tensor:
    """H K H in float64, H = I - 11'/n: K's row and column means removed."""
    K = K.to(F64)
    return K - K.mean(0, keepdim=True) - K.mean(1, keepdim=True) + K.mean()


def cka(K: Tensor, L: Tensor, max_bytes: int, estimator: str = "unbiased") -> Tensor:
    """HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L)) with the ``estimator``'s HSIC; an error when a
    kernel is constant up to centring (``cka_from_hsic``). The biased one holds both kernels
    double-centred in float64 (two more N x N matrices)."""
    check_estimator(estimator)
    _check_kernels(K, L)
    if estimator == "biased":
        KC, LC = _double_centred(K), _double_centred(L.to(K.device))
        kl, kk, ll = (KC * LC).sum(), (KC * KC).sum(), (LC * LC).sum()
    else:
        kl, kk, ll = _hsic_triple(K, L, max_bytes)
    return cka_from_hsic(kl, kk, ll, float(K.detach().abs().max()), float(L.detach().abs().max()))


# HSIC1(K, K) below (this * max |K_ij|)^2 is rounding: U-centring a constant kernel in float64
# leaves entries of about n * 1e-16 of its size, not the 0 it is.
_CONSTANT_KERNEL = 1e-10


def cka_from_hsic(kl: Tensor, kk: Tensor, ll: Tensor, scale_k: float, scale_l: float) -> Tensor:
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
