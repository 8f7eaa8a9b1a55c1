"""Statistics of a measure on one pair of representations: a permutation null (is the similarity
above what unrelated inputs give?) and a bootstrap interval over the inputs (how much does it
move with the sample?).

Both resample the inputs, the first axis of X and Y. ``measure`` is a name of ``MEASURES`` or
any function ``(X, Y) -> float``; keyword options go to it. Arrays in, numbers out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from intertwine.measures._base import _F64, ArrayLike, _as_features
from intertwine.measures.cka import cka_kernel
from intertwine.measures.hsic import _offdiagonal_row_sums, _u_centered_rows
from intertwine.measures.names import CKA_MEASURES, DISTANCES
from intertwine.measures.registry import MEASURES

__all__ = ["BootstrapInterval", "PermutationTest", "bootstrap_interval", "permutation_test"]


@dataclass(frozen=True)
class PermutationTest:
    """The measure's ``value``, its ``null`` (one value per permutation of Y's inputs) and the
    one-sided ``p_value``: the chance of a value at least as extreme under the null (at least as
    large for a similarity, as small for a distance), with the +1 correction."""

    value: float
    null: np.ndarray
    p_value: float


@dataclass(frozen=True)
class BootstrapInterval:
    """The measure's ``value`` on the data, the percentile interval ``(low, high)`` at ``level``
    and the bootstrap ``samples``."""

    value: float
    low: float
    high: float
    level: float
    samples: np.ndarray


def _resolve(measure: str | Callable) -> tuple[str | None, Callable]:
    if callable(measure):
        return None, measure
    if measure not in MEASURES:
        raise ValueError(f"unknown measure {measure!r}; expected a function or one of {', '.join(MEASURES)}")
    return measure, MEASURES[measure]


def _pair(X: ArrayLike, Y: ArrayLike) -> tuple[torch.Tensor, torch.Tensor]:
    X, Y = _as_features(X, "X"), _as_features(Y, "Y")
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"X and Y must hold the same inputs: {X.shape[0]} and {Y.shape[0]} rows")
    return X, Y


def permutation_test(
    measure: str | Callable,
    X: ArrayLike,
    Y: ArrayLike,
    *,
    permutations: int = 999,
    seed: int = 0,
    **options,
) -> PermutationTest:
    """A permutation test of a measure: Y's inputs are shuffled, which breaks their pairing with
    X's and keeps each representation as it is.

    Parameters
    ----------
    measure : a name of ``MEASURES`` or a function ``(X, Y, **options) -> float``.
    X, Y : (N, ...) representations of the same N inputs.
    permutations : shuffles drawn (uniformly, from numpy's generator at ``seed``).
    options : keyword arguments of the measure.

    Returns
    -------
    :class:`PermutationTest`; ``p_value = (1 + #{null at least as extreme}) / (permutations + 1)``
    (Phipson & Smyth 2010), never 0. A CKA measure named without options shuffles its kernel
    instead of recomputing it: its U-centred kernel's rows and columns permute with the inputs,
    so each shuffle costs one N x N product.
    """
    if permutations < 1:
        raise ValueError(f"permutation_test: permutations must be at least 1, got {permutations}")
    name, function = _resolve(measure)
    X, Y = _pair(X, Y)
    rng = np.random.default_rng(seed)
    orders = [torch.as_tensor(rng.permutation(X.shape[0]), device=Y.device) for _ in range(permutations)]
    if name in CKA_MEASURES and not options:
        value, null = _shuffled_cka(name, X, Y, orders)
    else:
        value = float(function(X, Y, **options))
        null = np.array([float(function(X, Y[order], **options)) for order in orders])
    extreme = null <= value if name in DISTANCES else null >= value
    return PermutationTest(value, null, float((1 + extreme.sum()) / (permutations + 1)))


def _u_centred(K: torch.Tensor) -> torch.Tensor:
    n = K.shape[0]
    sums = _offdiagonal_row_sums(K, n)
    return _u_centered_rows(K, 0, n, sums, sums.sum())


def _shuffled_cka(name: str, X, Y, orders) -> tuple[float, np.ndarray]:
    """The CKA of X and Y, and of X and each reordering of Y, from the two U-centred kernels: the
    unbiased HSIC_1 is the Frobenius product of U-centred kernels over n (n - 3), and U-centring
    commutes with reordering the inputs."""
    UK = _u_centred(cka_kernel(name, X).to(_F64))
    UL = _u_centred(cka_kernel(name, Y).to(_F64).to(UK.device))
    scale = torch.sqrt((UK * UK).sum() * (UL * UL).sum())
    value = float((UK * UL).sum() / scale)
    null = np.array([float((UK * UL[order][:, order]).sum() / scale) for order in orders])
    return value, null


def bootstrap_interval(
    measure: str | Callable,
    X: ArrayLike,
    Y: ArrayLike,
    *,
    resamples: int = 1000,
    level: float = 0.95,
    seed: int = 0,
    **options,
) -> BootstrapInterval:
    """A percentile bootstrap interval of a measure over its inputs: N inputs drawn with
    replacement, the same rows of X and Y, the measure recomputed on each draw (a measure whose
    normalisation or bandwidth depends on the sample, as G_ReLU-CKA's channel statistics or the
    RBF's median distance do, recomputes it too).

    Parameters
    ----------
    measure : a name of ``MEASURES`` or a function ``(X, Y, **options) -> float``.
    X, Y : (N, ...) representations of the same N inputs.
    resamples : bootstrap draws (numpy's generator at ``seed``).
    level : the interval's coverage, in (0, 1).
    options : keyword arguments of the measure.

    Returns
    -------
    :class:`BootstrapInterval`: the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of the
    draws (Efron's percentile interval). A draw on which the measure is undefined (a resample
    whose representation is constant) is an error naming the draw.
    """
    if not 0 < level < 1:
        raise ValueError(f"bootstrap_interval: level must lie in (0, 1), got {level}")
    if resamples < 2:
        raise ValueError(f"bootstrap_interval: resamples must be at least 2, got {resamples}")
    _, function = _resolve(measure)
    X, Y = _pair(X, Y)
    rng = np.random.default_rng(seed)
    value = float(function(X, Y, **options))
    samples = np.empty(resamples)
    for k in range(resamples):
        rows = torch.as_tensor(rng.integers(0, X.shape[0], X.shape[0]), device=X.device)
        try:
            samples[k] = float(function(X[rows], Y[rows.to(Y.device)], **options))
        except ValueError as err:
            raise ValueError(f"bootstrap_interval: draw {k} of {resamples}: {err}") from err
    low, high = np.quantile(samples, [(1 - level) / 2, (1 + level) / 2])
    return BootstrapInterval(value, float(low), float(high), level, samples)
