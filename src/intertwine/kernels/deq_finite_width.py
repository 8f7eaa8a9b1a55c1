"""The empirical NTK of one sampled weight-tied DEQ of finite width (``finite_deq_ntk``,
re-exported by :mod:`intertwine.kernels.deq`): the network whose infinite-width limit is
``deq_ntk``, for checking that limit on a few inputs.
"""

from __future__ import annotations

import math

import torch

from intertwine.kernels.deq_fc import (
    ArrayLike,
    KernelResult,
    check_count,
    check_iteration,
    check_matrices,
    check_variances,
    effective_tol,
    warn_unconverged,
)

__all__ = ["finite_deq_ntk"]


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
    a seed gives the same network on any device), finds the equilibrium f* of each row x of X by
    iteration from 0, and returns the NTK of f* with respect to (W, U, b), averaged over its N
    coordinates, ``(1/N) sum_i <d f*_i(x)/d theta, d f*_i(y)/d theta>``, computed by implicit
    differentiation (the formula, and how it tends to ``deq_ntk``, are in :mod:`intertwine.kernels.deq`).
    Cost: n inverses of N x N matrices (n N^2 memory): meant for a few inputs.

    Parameters
    ----------
    X : Tensor or ndarray, shape (n, d)
        The inputs, unit rows (unless ``normalize``).
    width : int
        N, the network's width, >= 1.
    sigma_w2, sigma_u2, sigma_b2 : float
        The layer map's variances: each >= 0, summing to 1, with sigma_w2 < 1.
    generator : torch.Generator, optional
        The CPU generator of the weights; None (the default): torch's global generator.
    normalize : bool
        Divide each row by its norm instead of requiring unit rows.
    tol : float
        The equilibrium iteration stops at its first step (max over entries) of at most ``tol``.
    max_iter : int
        The most steps; a RuntimeWarning if the iteration had not converged by then.

    Returns
    -------
    gram : Tensor, shape (n, n)
        The empirical NTK, in the inputs' floating dtype (float64 for integer input), on their device.
        The three are a ``KernelResult`` named tuple.
    iterations : int
        The equilibrium iteration's steps (its rate is about ``sqrt(sigma_w2)``).
    residual : float
        Its last step, ``max |f_(k+1) - f_k|``.
    """
    check_variances(sigma_w2, sigma_u2, sigma_b2, equilibrium=True)
    check_iteration(tol, max_iter)
    width = check_count(width, "width")
    X, _ = check_matrices(X, None, normalize)
    dtype, device, n = X.dtype, X.device, X.shape[0]

    def normal(*shape):
        return torch.randn(*shape, generator=generator, dtype=dtype, device="cpu").to(device)

    W, U, b = normal(width, width), normal(width, X.shape[1]), normal(width)
    scale = math.sqrt(sigma_w2 / width)
    injected = math.sqrt(sigma_u2) * X @ U.T + math.sqrt(sigma_b2) * b
    f = torch.zeros_like(injected)
    iterations, residual = 0, math.inf
    while iterations < max_iter and residual > effective_tol(tol, dtype):
        new = scale * (math.sqrt(2.0) * torch.relu(f)) @ W.T + injected
        residual = float((new - f).abs().max())
        f, iterations = new, iterations + 1
    warn_unconverged(residual, tol, max_iter, dtype)
    activity = math.sqrt(2.0) * torch.relu(f)
    slopes = math.sqrt(2.0) * (f > 0).to(dtype)
    eye = torch.eye(width, dtype=dtype, device=device)
    M = torch.stack([torch.linalg.inv(eye - scale * W * slopes[i]) for i in range(n)])
    explicit = sigma_w2 / width * activity @ activity.T + sigma_u2 * X @ X.T + sigma_b2
    overlap = torch.einsum("aij,bij->ab", M, M) / width
    return KernelResult(explicit * overlap, iterations, residual)
