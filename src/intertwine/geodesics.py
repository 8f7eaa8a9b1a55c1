"""Geodesics on SO(n): a rotation's fractional powers ``Q^alpha`` along the minimal geodesic from
the identity, as the dissection stage interpolates a basis rotation (paper section 6)."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

__all__ = ["rotation_power", "rotation_powers"]


def _rot2(theta: float) -> np.ndarray:
    c, s = math.cos(theta), math.sin(theta)
    return np.array([[c, -s], [s, c]])


def rotation_power(Q, alpha: float) -> Tensor:
    """``Q^alpha`` for Q in SO(n), along the minimal geodesic from I (alpha=0) to Q (alpha=1).

    Uses the real Schur form Q = Z T Zᵀ (Z orthogonal, T block diagonal because Q is
    normal): each 2x2 block is a plane rotation by theta in (-pi, pi], replaced by the
    rotation by alpha * theta; +1 blocks stay 1; -1 eigenvalues (which come in pairs in
    SO(n), possibly as separate 1x1 blocks) are paired into rotations by alpha * pi. Any
    real alpha works and Q^a Q^b = Q^(a+b). Computed in float64; returns Q's dtype/device.
    Raises ValueError if Q has an odd number of -1 eigenvalues (det Q = -1).

    Parameters
    ----------
    Q : Tensor or array-like, shape (n, n)
        A rotation: orthogonal (max |Q^T Q - I| at most 1e-8 sqrt(n); 1e-4 sqrt(n) for float32 or
        half-precision input) with an even number of -1 eigenvalues (ValueError otherwise).
    alpha : float
        The power, finite.

    Returns
    -------
    Tensor, shape (n, n)
        ``Q^alpha``, in Q's floating dtype (float64 for an integer Q) and on its device.
    """
    return rotation_powers(Q, [alpha])[0]


def rotation_powers(Q, alphas) -> list[Tensor]:
    """``[rotation_power(Q, a) for a in alphas]`` from one Schur decomposition (the costly part:
    about 13 s for n = 2048 on one CPU core); alpha 0 and 1 give I and Q without one.

    Parameters
    ----------
    Q : Tensor or array-like, shape (n, n)
        A rotation, as in :func:`rotation_power`.
    alphas : iterable of float
        The powers, finite.

    Returns
    -------
    list of Tensor
        ``Q^alpha`` per alpha, each (n, n), in Q's floating dtype (float64 for an integer Q) and on
        its device.
    """
    from scipy.linalg import schur

    Qt = torch.as_tensor(Q)
    dtype = Qt.dtype if Qt.is_floating_point() else torch.float64
    Qn = Qt.detach().to("cpu", torch.float64).numpy()
    n = Qn.shape[0] if Qn.ndim else 0
    if Qn.ndim != 2 or Qn.shape != (n, n):
        raise ValueError(f"expected a square matrix, got shape {tuple(Qn.shape)}")
    if not np.isfinite(Qn).all():
        raise ValueError("rotation_power: Q has NaN or infinite entries")
    # float32 rounding leaves about 1e-6 per entry; a matrix further from orthogonal has no geodesic.
    tolerance = 1e-4 if Qt.dtype in (torch.float16, torch.bfloat16, torch.float32) else 1e-8
    if n and np.abs(Qn.T @ Qn - np.eye(n)).max() > tolerance * max(1, n) ** 0.5:
        raise ValueError(
            f"rotation_power: Q is not orthogonal (max |QᵀQ - I| = "
            f"{np.abs(Qn.T @ Qn - np.eye(n)).max():.2g}); pass a rotation, e.g. groups.random_rotation"
        )
    alphas = [float(a) for a in alphas]
    if not all(math.isfinite(a) for a in alphas):
        raise ValueError(f"rotation_power: alpha must be finite, got {alphas}")
    if set(alphas) <= {0.0, 1.0}:
        ends = {0.0: np.eye(n), 1.0: Qn}
        return [torch.as_tensor(ends[a], dtype=dtype).to(Qt.device) for a in alphas]
    T, Z = schur(Qn, output="real")

    planes, ones, minus_ones = [], [], []  # (index, theta) of 2x2 blocks; indices of 1x1 blocks
    i = 0
    while i < n:
        if i + 1 < n and T[i + 1, i] != 0:  # LAPACK zeroes the subdiagonal between blocks
            block = T[i : i + 2, i : i + 2]
            # Average the symmetric parts so a slightly non-orthogonal block still gives
            # the angle of its nearest rotation.
            planes.append((i, math.atan2((block[1, 0] - block[0, 1]) / 2, (block[0, 0] + block[1, 1]) / 2)))
            i += 2
        else:
            (ones if T[i, i] > 0 else minus_ones).append(i)
            i += 1
    if len(minus_ones) % 2:
        raise ValueError("Q is not in SO(n): it has an odd number of -1 eigenvalues")

    powers = []
    for alpha in alphas:
        Ta = np.zeros_like(T)
        for i, theta in planes:
            Ta[i : i + 2, i : i + 2] = _rot2(alpha * theta)
        for i in ones:
            Ta[i, i] = 1.0
        # Two -1 eigen-directions span a plane where Q acts as the rotation by pi.
        for j, k in zip(minus_ones[0::2], minus_ones[1::2]):
            Ta[np.ix_([j, k], [j, k])] = _rot2(alpha * math.pi)
        powers.append(torch.as_tensor(Z @ Ta @ Z.T, dtype=dtype).to(Qt.device))
    return powers
