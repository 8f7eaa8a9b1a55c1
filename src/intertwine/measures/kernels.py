"""The N x N kernels of the CKA measures: the G_ReLU-invariant max kernel, linear, Laplace and RBF."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from intertwine.measures._base import (
    DEFAULT_MAX_BYTES,
    ArrayLike,
    as_features,
    channel_major,
    check_max_bytes,
    rows_per_block,
)

# ---------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------


def _max_kernel_blocks(n: int, c: int, itemsize: int, max_bytes: int) -> tuple[int, int]:
    """(rows, channels) per block so that a (channels, rows, n) block fits in max_bytes."""
    max_bytes = check_max_bytes(max_bytes)
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
    rows = max(1, min(_PER_CHANNEL_ROWS, rows_per_block(n, 2 * Xc.element_size(), max_bytes)))
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


def max_kernel_of(
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

    Parameters
    ----------
    X : Tensor or ndarray, shape (N, C) or (N, C, *spatial)
        The features.
    method : {"auto", "per_channel", "blocked"}
        The computation (above).
    max_bytes : int
        The memory bound of each block of intermediates.
    block_rows, block_channels : int, optional
        The ``"blocked"`` computation's block shape; giving either selects it.

    Returns
    -------
    Tensor, shape (N, N)
        The max kernel, symmetric, in X's floating dtype (float64 for integer input), on its device.
    """
    if block_rows or block_channels:
        method = "blocked"
    return max_kernel_of(channel_major(as_features(X, "X")), method, max_bytes, block_rows, block_channels)


def linear_gram(X: Tensor) -> Tensor:
    return X @ X.T


def _l1_distances(X: Tensor, max_bytes: int) -> Tensor:
    """(N, D) -> (N, N) pairwise L1 distances, computed by row blocks on the upper triangle."""
    n = X.shape[0]
    rows = rows_per_block(n, X.element_size(), max_bytes)
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


def rbf_kernel(X: Tensor, bandwidth_fraction: float) -> Tensor:
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


def laplace_kernel(X: Tensor, bandwidth: float | None, max_bytes: int) -> Tensor:
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
