"""CCA- and shape-based representation similarity measures that the literature compares against.

Small functions in the style of netrep / scikit-learn: arrays in, numbers out, no file I/O.

* ``svcca``: SVCCA (Raghu et al., NeurIPS 2017), the mean canonical correlation between the top
  singular directions of each representation.
* ``pwcca``: projection-weighted CCA (Morcos, Raghu & Bengio, NeurIPS 2018), following
  ``compute_pwcca`` of Google's ``svcca`` repository. Not symmetric (see its docstring).
* ``shape_metric`` / ``shape_angular`` / ``shape_euclidean``: the generalized shape metrics with
  partial whitening of Williams, Kunz, Kornblith & Linderman (NeurIPS 2021), scored exactly as
  ``netrep.metrics.LinearMetric(alpha, center_columns=True, zero_pad=True).fit_score``.

Inputs: torch tensors or numpy arrays of shape (N, C) or (N, C, *spatial) holding the same N inputs
through two networks. Each is flattened to an (N, D) matrix with D = C * prod(spatial): spatial
positions are separate features, as in linear CKA on flattened features. All computation is in
float64 on the inputs' device; every measure returns a python float.

Every measure is ``compare(prepare(X), prepare(Y))``: ``prepare_*`` does the per-representation
work (centring, an SVD), ``compare_*`` only the pair's (an SVD of a small cross-product), so that
comparing L layers with L layers costs L prepares and L^2 cheap compares. ``PREPARED`` maps
measure names to these (prepare, compare) pairs.

Constant representations (the same for every sample: zero variance after centring) define none of
these measures and raise ``ConstantRepresentationError`` naming the argument; no measure returns
NaN.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from intertwine.measures._base import (
    F64,
    ArrayLike,
    ConstantRepresentationError,
    as_features,
    pow2_scale,
    rescaled_exactly,
)

# ---------------------------------------------------------------------------
# Shared per-representation work
# ---------------------------------------------------------------------------


#: The fewest samples CCA and the shape metrics are defined on (``intertwine.measures.MIN_SAMPLES``): N
#: centred samples span at most N - 1 directions, so at N = 2 both representations are the same
#: line, SVCCA and PWCCA 1 and the shape distances 0 for any data.
CCA_MIN_SAMPLES = 3


def centred_svd(
    X: ArrayLike, which: str, measure: str, svd: bool = True
) -> tuple[Tensor, Tensor, Tensor, int, float]:
    """Thin SVD of the centred (N, D) features, numerically zero singular values dropped (with
    ``svd=False``: the centred features themselves, then None, None, D, unit).

    Returns (U, s, Vh, D, unit): U (N, r) orthonormal basis of the centred column space, s (r,)
    its singular values in decreasing order in units of ``unit``, Vh (r, D), r the numerical rank
    (numpy's ``matrix_rank`` tolerance s_max * max(N, D) * eps). ``unit`` is 1, or a power of two
    the features were divided by where their squares would overflow or underflow (beyond about
    1e+-77 in float64): rescaled before squaring, exactly."""
    F = as_features(X, which)
    n = F.shape[0]
    if n < CCA_MIN_SAMPLES:
        raise ValueError(
            f"{measure} needs at least {CCA_MIN_SAMPLES} samples (inputs), got N = {n} in {which}: N centred "
            f"samples span N - 1 directions, so below {CCA_MIN_SAMPLES} it is the same for any data (see "
            "intertwine.measures.MIN_SAMPLES); compare the representations of more inputs"
        )
    F = F.reshape(n, -1).to(F64)
    rescaled = rescaled_exactly(F)
    unit = 1.0 if rescaled is F else pow2_scale(float(F.abs().max()))
    F = rescaled
    constant = ConstantRepresentationError(
        f"{which} is the same for each of its {n} samples (zero variance after centring), so "
        f"{measure} is undefined: it compares how two representations vary across inputs",
        which,
    )
    if torch.equal(F.amin(0), F.amax(0)):
        raise constant
    Fc = F - F.mean(0, keepdim=True)
    if not svd:
        return Fc, None, None, Fc.shape[1], unit
    U, s, Vh = torch.linalg.svd(Fc, full_matrices=False)
    tol = s[0] * max(Fc.shape) * torch.finfo(F64).eps
    r = int((s > tol).sum())
    if r == 0:
        raise constant
    return U[:, :r], s[:r], Vh[:r], Fc.shape[1], unit


def _warn_saturation(measure: str, which: str, n: int, width: int, kept: int) -> None:
    """A RuntimeWarning where CCA saturates: N centred samples span N - 1 directions, so a
    representation whose kept directions are that many contains the other's, and every canonical
    correlation is 1; as N falls towards the width the correlations creep up to it."""
    if n <= width:
        warnings.warn(
            f"{measure} on N = {n} samples of {which}, whose width (features, C x positions) is {width} "
            f">= N: {kept} directions kept of the at most {n - 1} that N centred samples span, so the "
            "canonical correlations saturate towards 1 whatever the representations; use well more "
            "samples than the width (or compare with CKA)",
            RuntimeWarning,
            stacklevel=4,
        )


def check_same_n(px, py, measure: str) -> None:
    nx, ny = px.basis.shape[0], py.basis.shape[0]
    if nx != ny:
        raise ValueError(
            f"X and Y must hold the same samples (first axis), got N = {nx} for X and N = {ny} for Y "
            f"({measure})"
        )
    if px.basis.device != py.basis.device:
        raise ValueError(f"X and Y must be on the same device, got {px.basis.device} and {py.basis.device}")


def check_pair_n(X: ArrayLike, Y: ArrayLike) -> None:
    """ValueError naming X and Y if their first axes (the samples) differ in length."""
    sx, sy = tuple(np.shape(X)), tuple(np.shape(Y))
    nx, ny = (sx or (None,))[0], (sy or (None,))[0]
    if sx and sy and nx != ny:
        raise ValueError(
            f"X and Y must hold the same samples (first axis), got N = {nx} for X and N = {ny} for Y"
        )


def _canonical(px, py) -> tuple[Tensor, Tensor, Tensor]:
    """SVD A diag(rho) B^T of Ux^T Uy: rho are the canonical correlations (cosines of the principal
    angles between the centred column spaces), Ux A and Uy B the unit-norm canonical variates."""
    A, rho, Bh = torch.linalg.svd(px.basis.T @ py.basis)
    return A, rho.clamp(0.0, 1.0), Bh.T


# ---------------------------------------------------------------------------
# SVCCA
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PreparedSVCCA:
    """Per-representation SVCCA state: ``basis`` (N, k), an orthonormal basis of the top-k singular
    directions of the centred features (the SV step), k the fewest explaining ``variance``."""

    basis: Tensor
    variance: float


def prepare_svcca(X: ArrayLike, variance: float = 0.99, *, name: str = "X") -> PreparedSVCCA:
    """SV step of SVCCA for one representation.

    Parameters
    ----------
    X : Tensor or ndarray, shape (N, C) or (N, C, *spatial)
        Flattened to (N, D), D = C * prod(spatial).
    variance : float in (0, 1]
        Fraction of the total variance (sum of squared singular values of the centred features)
        the kept directions must explain: the fewest top singular directions k with
        sum_{i<=k} s_i^2 >= variance * sum_i s_i^2 (up to 1e-12) are kept. ``variance=1`` keeps
        the numerical rank.
    name : str
        How errors name the argument ("X" or "Y").

    Returns
    -------
    PreparedSVCCA
    """
    real = isinstance(variance, (int, float, np.integer, np.floating)) and not isinstance(variance, bool)
    if not real or not 0.0 < variance <= 1.0:
        raise ValueError(f"variance must be a number in (0, 1], got {variance!r}")
    U, s, _, width, _ = centred_svd(X, name, "SVCCA")
    power = s.square()
    ratio = power.cumsum(0) / power.sum()
    k = min(int(torch.searchsorted(ratio, ratio.new_tensor(variance - 1e-12))) + 1, len(s))
    _warn_saturation("SVCCA", name, U.shape[0], width, k)
    return PreparedSVCCA(U[:, :k], float(variance))


def compare_svcca(px: PreparedSVCCA, py: PreparedSVCCA) -> float:
    """Mean canonical correlation between two prepared representations (see ``svcca``)."""
    check_same_n(px, py, "SVCCA")
    _, rho, _ = _canonical(px, py)
    return float(rho.mean())


def svcca(X: ArrayLike, Y: ArrayLike, *, variance: float = 0.99) -> float:
    """SVCCA similarity (Raghu et al. 2017).

    Each representation is flattened to (N, D) and each feature centred over the N samples; the
    SV step keeps the top singular directions explaining ``variance`` of its variance; CCA between
    the two reduced representations gives min(k_x, k_y) canonical correlations, whose mean is
    returned.

    Parameters
    ----------
    X, Y : Tensor or ndarray, shape (N, C) or (N, C, *spatial)
        The same N >= 3 inputs through two networks (``CCA_MIN_SAMPLES``); widths may differ.
    variance : float in (0, 1]
        See ``prepare_svcca``.

    Returns
    -------
    float in [0, 1]
        1 when one reduced subspace contains the other.

    Notes
    -----
    Symmetric. Invariant to translations of either representation and to orthogonal maps and
    isotropic scalings of its features; with ``variance=1`` (or whenever the reduction keeps the
    full rank) invariant to every invertible linear map of the features. The canonical
    correlations are the singular values of Ux^T Uy for orthonormal bases Ux, Uy of the reduced
    spaces, the same numbers as Google's ``cca_core`` computes from covariance inverse square
    roots.
    """
    check_pair_n(X, Y)
    return compare_svcca(prepare_svcca(X, variance), prepare_svcca(Y, variance, name="Y"))


# ---------------------------------------------------------------------------
# PWCCA
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PreparedPWCCA:
    """Per-representation PWCCA state: ``basis`` (N, r), an orthonormal basis of the centred
    column space (r the numerical rank), and ``loadings`` (r, D) = basis^T Xc, the coordinates of
    the centred features in that basis."""

    basis: Tensor
    loadings: Tensor


def prepare_pwcca(X: ArrayLike, *, name: str = "X") -> PreparedPWCCA:
    """Per-representation part of ``pwcca``: centre, reduce to the numerical rank (an SVD).
    ``name`` ("X" or "Y") is how errors name the argument."""
    U, s, Vh, width, _ = centred_svd(X, name, "PWCCA")
    _warn_saturation("PWCCA", name, U.shape[0], width, len(s))
    return PreparedPWCCA(U, s[:, None] * Vh)


def compare_pwcca(px: PreparedPWCCA, py: PreparedPWCCA) -> float:
    """Projection-weighted mean canonical correlation of two prepared representations (see
    ``pwcca``; the weights come from ``px`` unless ``py`` has the smaller rank)."""
    check_same_n(px, py, "PWCCA")
    A, rho, B = _canonical(px, py)
    if px.basis.shape[1] <= py.basis.shape[1]:
        # Unit canonical variates of X are Ux A; <h_i, x_j> = (A^T Ux^T Xc)_ij.
        proj = A.T @ px.loadings
    else:
        proj = B.T @ py.loadings
    weights = proj.abs().sum(1)
    weights = weights / weights.sum()
    return float((weights * rho).sum())


def pwcca(X: ArrayLike, Y: ArrayLike) -> float:
    """Projection-weighted CCA (Morcos et al. 2018), as Google's ``svcca/pwcca.py``
    (``compute_pwcca``).

    Each representation is flattened to (N, D), its features centred, and reduced to its numerical
    rank r (so CCA is well defined). CCA gives min(r_x, r_y) canonical correlations rho_i and unit
    canonical variates h_i on each side. On the side with the smaller rank (X on a tie, as
    ``compute_pwcca`` picks X when X has no more neurons than Y) the weights are
    alpha_i = sum_j |<h_i, x_j>| over that side's centred features x_j, normalised to sum to 1;
    the result is sum_i alpha_i rho_i.

    Parameters
    ----------
    X, Y : Tensor or ndarray, shape (N, C) or (N, C, *spatial)
        The same N >= 3 inputs through two networks (``CCA_MIN_SAMPLES``); widths may differ.

    Returns
    -------
    float in [0, 1]

    Notes
    -----
    NOT symmetric: when X and Y have the same rank, the weights come from X's features, so
    ``pwcca(X, Y) != pwcca(Y, X)`` in general (with different ranks both orders weight by the
    smaller side and agree). Invariant to translations of either side, to invertible linear maps
    of the features of the side whose features are not used for the weights, and to permutations,
    sign flips and isotropic scaling of the features of the weighting side -- but not to general
    linear maps or rotations of it, which change the weights.

    Where this departs from Google's code: ``compute_pwcca`` orthonormalises (QR) the directions
    ``coef_x @ (acts1 - mean) + mean``, which omit the ``invsqrt_xx`` factor of the canonical
    variates and add the feature means back, and weights them against uncentred activations; its
    Y branch also projects ``acts1``. Here h_i are the exact (centred, unit-norm, mutually
    orthogonal) canonical variates and the x_j centred, the paper's definition; the two coincide
    when the weighting side's centred features are orthonormal (the tests check this).
    """
    check_pair_n(X, Y)
    return compare_pwcca(prepare_pwcca(X), prepare_pwcca(Y, name="Y"))


# ---------------------------------------------------------------------------
# Generalized shape metrics (netrep LinearMetric)
# ---------------------------------------------------------------------------
