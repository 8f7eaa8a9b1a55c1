"""The Birkhoff polytope (paper section 4): Sinkhorn's projection onto doubly stochastic matrices
and Hungarian rounding back to a permutation, as the stitching layers relax and round their
permutations."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["sinkhorn", "round_to_permutation"]


def sinkhorn(P: Tensor, iters: int = 16, eps: float = 1e-12) -> Tensor:
    """Approximately project onto doubly stochastic matrices, as in the paper's stitching.

    ReLU(P), then ``iters`` rounds of: divide each column by its column sum, then each row
    by its row sum (so rows sum to 1 exactly, columns approximately). Works on batches
    ``(..., n, n)`` on any device and is differentiable. A non-finite entry, or a row or
    column with no positive entry (which no scaling makes stochastic), is a ValueError.

    Parameters
    ----------
    P : Tensor, shape (..., n, n)
        The matrices; finite.
    iters : int
        The number of rounds.
    eps : float
        The floor of each column and row sum before it divides.

    Returns
    -------
    Tensor, shape (..., n, n)
        The approximately doubly stochastic matrices.
    """
    if P.ndim < 2 or P.shape[-1] != P.shape[-2]:
        raise ValueError(f"sinkhorn: expected square matrices (..., n, n), got shape {tuple(P.shape)}")
    if not torch.isfinite(P).all():
        raise ValueError(
            "sinkhorn: the matrix has NaN or infinite entries (a diverged step? lower the learning rate)"
        )
    P = torch.relu(P)
    positive = P > 0
    if not (positive.any(-1).all() and positive.any(-2).all()):
        raise ValueError(
            "sinkhorn: a row or column has no positive entry, so no doubly stochastic "
            "matrix has its support (a collapsed layer? lower the learning rate)"
        )
    for _ in range(iters):
        P = P / P.sum(dim=-2, keepdim=True).clamp_min(eps)
        P = P / P.sum(dim=-1, keepdim=True).clamp_min(eps)
    return P


def round_to_permutation(P) -> Tensor:
    """Permutation maximising ``tr(P Qᵀ) = sum_i P[i, perm[i]]`` (Hungarian algorithm).

    Returns ``perm`` (LongTensor) in the module convention ``Q[i, perm[i]] = 1``. Accepts a
    torch tensor (result on its device) or a numpy array; batched input ``(..., n, n)``
    gives ``(..., n)``.

    Parameters
    ----------
    P : Tensor or ndarray, shape (..., n, n)
        Finite square matrices (computed in float64 on the CPU).

    Returns
    -------
    Tensor, shape (..., n)
        ``perm`` per matrix, int64, on the device of ``P`` (the CPU for a numpy array).
    """
    from scipy.optimize import linear_sum_assignment

    device = P.device if isinstance(P, Tensor) else torch.device("cpu")
    if isinstance(P, Tensor):
        P = P.detach().to("cpu", torch.float64).numpy()
    P = np.asarray(P, dtype=np.float64)
    if P.ndim < 2 or P.shape[-1] != P.shape[-2]:
        raise ValueError(f"expected square matrices (..., n, n), got shape {P.shape}")
    if not np.isfinite(P).all():
        raise ValueError("round_to_permutation: the matrix has NaN or infinite entries")
    n = P.shape[-1]
    flat = P.reshape(-1, n, n)
    # For a square matrix the row indices come back as arange(n), so the column indices are
    # exactly perm[i] = column matched to row i.
    perms = [linear_sum_assignment(m, maximize=True)[1] for m in flat]
    out = torch.as_tensor(np.stack(perms).reshape(P.shape[:-1]), dtype=torch.long)
    return out.to(device)
