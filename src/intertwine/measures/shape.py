"""The generalized shape metrics with partial whitening of Williams, Kunz, Kornblith & Linderman
(NeurIPS 2021), scored exactly as ``netrep.metrics.LinearMetric(alpha, center_columns=True,
zero_pad=True).fit_score``: angular and euclidean distances."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from intertwine.measures._base import ArrayLike, pow2_scale, rescaled_exactly
from intertwine.measures.cca import centred_svd, check_pair_n, check_same_n

# netrep.utils.whiten: eigenvalues of X^T X are clipped to this value, and alpha > 1 - tol means
# no whitening at all.
_NETREP_EIGVAL_TOL = 1e-7
_SCORES = ("angular", "euclidean")


@dataclass(frozen=True)
class PreparedShape:
    """Per-representation state of the partially whitened shape metric.

    ``basis`` (N, r) is an orthonormal basis of the centred column space (without whitening, where
    D <= N: the centred features themselves, ``scales`` ones) and ``scales`` (r,) the
    lengths of the partially whitened data along it before netrep's variance-preserving rescale:
    the whitened data is Xw = basis diag(scales * c) Vh, Vh orthonormal rows, so its Gram matrix
    and every score need only basis and scales. The rescale c depends on how many zero columns
    netrep pads on, so it is applied in ``compare_shape_metric`` from ``lam_sum`` (the sum of the
    clipped eigenvalues of Xc^T Xc), ``new_var`` (the unscaled variance of the whitened data) and
    ``width`` (D). ``whiten`` is False when alpha > 1 - 1e-7 (netrep then skips whitening)."""

    basis: Tensor
    scales: Tensor
    lam_sum: float
    new_var: float
    width: int
    alpha: float
    whiten: bool
    #: ``scales`` are in units of ``unit`` (a power of two, 1 unless the features' squares would
    #: overflow or underflow), ``lam_sum`` and ``new_var`` in units of ``ref`` squared (1, or the
    #: largest clipped singular value where its square would overflow): rescaled before squaring.
    unit: float = 1.0
    ref: float = 1.0


def _zero_eig_terms(alpha: float) -> tuple[float, float]:
    """(clipped eigenvalue, contribution to new_var) of one zero eigenvalue in netrep's whiten."""
    lam = _NETREP_EIGVAL_TOL
    return lam, alpha**2 * lam + 2 * alpha * (1 - alpha) * lam**0.5 + (1 - alpha) ** 2


def _check_alpha(alpha: float) -> float:
    real = isinstance(alpha, (int, float, np.integer, np.floating)) and not isinstance(alpha, bool)
    ok = real and 0.0 <= float(alpha) <= 1.0
    if not ok:
        raise ValueError(
            f"alpha must be a number in [0, 1] (1: no whitening, 0: full whitening), got {alpha!r}"
        )
    return float(alpha)


def prepare_shape_metric(X: ArrayLike, alpha: float = 1.0, *, name: str = "X") -> PreparedShape:
    """Per-representation part of ``shape_metric``: centre and partially whiten (netrep's
    ``LinearMetric.partial_fit`` with ``whiten(..., preserve_variance=True)``), via a thin SVD of
    the centred (N, D) features instead of an eigendecomposition of the D x D matrix Xc^T Xc.
    ``name`` ("X" or "Y") is how errors name the argument."""
    alpha = _check_alpha(alpha)
    if alpha > 1 - _NETREP_EIGVAL_TOL:
        # No whitening: any factor G with G G' = Xc Xc' serves; the centred features themselves
        # where they are no wider than tall (no SVD), else U diag(s), N x r.
        Fc, _, _, width, unit = centred_svd(X, name, "the shape metric", svd=False)
        if width <= Fc.shape[0]:
            return PreparedShape(
                Fc, torch.ones_like(Fc[0]), float(Fc.square().sum()), 1.0, width, alpha, False, unit
            )
        U, s, _, width, more = centred_svd(Fc, name, "the shape metric")
        return PreparedShape(U, s, float(s.square().sum()), 1.0, width, alpha, False, unit * more)
    U, s, _, width, unit = centred_svd(X, name, "the shape metric")
    # Eigenvalues of Xc^T Xc: s_i^2 for the r kept directions, 0 for the other D - r.
    zero_lam, zero_var = _zero_eig_terms(alpha)
    nulls = width - len(s)
    if unit == 1.0:  # s^2 is representable
        lam = s.square().clamp_min(_NETREP_EIGVAL_TOL)
        d = alpha + (1 - alpha) * lam.rsqrt()
        new_var = float((alpha**2 * lam + 2 * alpha * (1 - alpha) * lam.sqrt() + (1 - alpha) ** 2).sum())
        new_var += nulls * zero_var
        lam_sum = float(lam.sum()) + nulls * zero_lam
        return PreparedShape(U, s * d, lam_sum, new_var, width, alpha, True)
    # Features far from unit scale: the clipped eigenvalues' square roots sigma (in the data's
    # units, as netrep clips them) are representable, their squares perhaps not, so the sums are
    # taken relative to ref = max sigma.
    sigma = (s * unit).clamp_min(_NETREP_EIGVAL_TOL**0.5)
    ref = float(sigma.max())
    rho = sigma / ref
    d = alpha + (1 - alpha) / sigma
    new_var = float(
        (alpha**2 * rho.square() + 2 * alpha * (1 - alpha) * rho / ref + (1 - alpha) ** 2 / ref / ref).sum()
    )
    new_var += nulls * zero_var / ref / ref
    lam_sum = float(rho.square().sum()) + nulls * zero_lam / ref / ref
    return PreparedShape(U, s * d, lam_sum, new_var, width, alpha, True, unit, ref)


def _whitened_gram_factor(p: PreparedShape, width: int) -> Tensor:
    """G (N, r) with G G^T = Xw Xw^T for the data zero-padded to ``width`` features."""
    if not p.whiten:
        return p.basis * p.scales
    zero_lam, zero_var = _zero_eig_terms(p.alpha)
    pad = width - p.width
    c = ((p.lam_sum + pad * zero_lam / p.ref / p.ref) / (p.new_var + pad * zero_var / p.ref / p.ref)) ** 0.5
    return p.basis * (p.scales * c)


def compare_shape_metric(
    px: PreparedShape, py: PreparedShape, score: Literal["angular", "euclidean"] = "angular"
) -> float:
    """Shape distance between two prepared representations (see ``shape_metric``)."""
    if score not in _SCORES:
        raise ValueError(f"score must be 'angular' or 'euclidean', got {score!r}")
    check_same_n(px, py, "shape metric")
    if px.alpha != py.alpha:
        raise ValueError(f"X and Y were prepared with different alpha: {px.alpha} and {py.alpha}")
    width = max(px.width, py.width)
    factors = []
    for p in (px, py):
        # G in units of p.unit, rescaled once more where its products would over- or underflow.
        G = _whitened_gram_factor(p, width)
        rescaled = rescaled_exactly(G)
        factors.append((rescaled, p.unit * (1.0 if rescaled is G else pow2_scale(float(G.abs().max())))))
    (Gx, ux), (Gy, uy) = factors
    if score == "angular":  # invariant to the scale of either side
        return _aligned_angle(*_aligned(Gx, Gy))
    # In the units of the larger side: the smaller one's share may underflow, as it is negligible.
    unit = max(ux, uy)
    aligned, target = _aligned(Gx * (ux / unit), Gy * (uy / unit))
    return unit * float(torch.linalg.norm(aligned - target))


def _aligned(Gx: Tensor, Gy: Tensor) -> tuple[Tensor, Tensor]:
    """(Gx Q, Gy), both zero-padded to one width, Q the orthogonal map that brings Gx closest to
    Gy (Q = U V^T of the SVD of Gx^T Gy, whose singular values sum to max_Q <Gx Q, Gy>).

    The distances are then taken from the aligned difference itself: sqrt(||Gx||^2 + ||Gy||^2 -
    2 ||Gx^T Gy||_*) loses half the digits near 0 (1.3e-6 for a distance of 8e-12 on data of
    norm 90), the difference keeps them (1e-14). Any completion of U V^T where singular values
    vanish pairs nothing with nothing, so it leaves the difference unchanged."""
    width = max(Gx.shape[1], Gy.shape[1])
    Gx = torch.nn.functional.pad(Gx, (0, width - Gx.shape[1]))
    Gy = torch.nn.functional.pad(Gy, (0, width - Gy.shape[1]))
    U, _, Vh = torch.linalg.svd(Gx.T @ Gy)
    return Gx @ (U @ Vh), Gy


def _aligned_angle(a: Tensor, b: Tensor) -> float:
    """The angle between a and b (as vectors), 2 atan2(||a' - b'||, ||a' + b'||) of the unit
    vectors: exact near 0, where arccos of the cosine loses half the digits (Kahan)."""
    a, b = a / torch.linalg.norm(a), b / torch.linalg.norm(b)
    return float(2 * torch.atan2(torch.linalg.norm(a - b), torch.linalg.norm(a + b)))


def shape_metric(
    X: ArrayLike,
    Y: ArrayLike,
    *,
    alpha: float = 1.0,
    score: Literal["angular", "euclidean"] = "angular",
) -> float:
    """Generalized shape metric with partial whitening (Williams et al. 2021), as netrep scores it:
    ``netrep.metrics.LinearMetric(alpha, center_columns=True, zero_pad=True,
    score_method=score).fit_score(X, Y)`` on the flattened (N, D) features.

    Each representation is centred and partially whitened,
    Xw = Xc Z with Z = V diag(alpha + (1 - alpha) lam^(-1/2)) V^T, V diag(lam) V^T the
    eigendecomposition of Xc^T Xc (not divided by N; eigenvalues clipped at 1e-7), rescaled so
    that ||Xw||_F = ||Xc||_F as netrep's ``preserve_variance`` computes it (the rescale counts
    the zero eigenvalues of the null and zero-padded directions, each clipped to 1e-7). The
    narrower representation is zero-padded to the wider's width and the two are aligned by the
    optimal orthogonal map.

    Parameters
    ----------
    X, Y : Tensor or ndarray, shape (N, C) or (N, C, *spatial)
        The same N >= 3 inputs through two networks (``MIN_SAMPLES``); widths may differ.
    alpha : float in [0, 1]
        1: no whitening (only centring), the Procrustes shape metric; 0: full whitening, a
        CCA-like metric: the angular score is then arccos(sum_i rho_i / sqrt(r_x r_y)), rho_i the
        canonical correlations and r the ranks (when no eigenvalue falls below netrep's 1e-7).
    score : {"angular", "euclidean"}
        ``"angular"``: arccos(||Xw^T Yw||_* / (||Xw||_F ||Yw||_F)), in radians in [0, pi/2].
        ``"euclidean"``: min over orthogonal Q of ||Xw Q - Yw||_F
        = sqrt(||Xw||^2 + ||Yw||^2 - 2 ||Xw^T Yw||_*), unnormalised (not divided by N), in the
        units of the data.

    Returns
    -------
    float
        A distance: 0 for a representation with itself.

    Notes
    -----
    Symmetric, and a metric (triangle inequality) on representations modulo the invariance group.
    alpha = 1: invariant to translations and orthogonal maps of the features; the angular score
    also to isotropic scaling. alpha = 0: the angular score is invariant to every invertible linear
    map of the features (the euclidean score is not, through netrep's variance-preserving
    rescale). The euclidean score with alpha < 1 depends on the feature widths through that
    rescale, exactly as in netrep.
    """
    if score not in _SCORES:
        raise ValueError(f"score must be 'angular' or 'euclidean', got {score!r}")
    alpha = _check_alpha(alpha)
    check_pair_n(X, Y)
    return compare_shape_metric(
        prepare_shape_metric(X, alpha), prepare_shape_metric(Y, alpha, name="Y"), score=score
    )


def shape_angular(X: ArrayLike, Y: ArrayLike, *, alpha: float = 1.0) -> float:
    """``shape_metric(X, Y, alpha=alpha, score="angular")``: radians in [0, pi/2].

    Parameters
    ----------
    X, Y : Tensor or ndarray, shape (N, C) or (N, C, *spatial)
        The same N >= 3 inputs through two networks; widths may differ.
    alpha : float in [0, 1]
        The partial whitening, as in ``shape_metric``: 1 none, 0 full.

    Returns
    -------
    float
        The angular distance, in radians in [0, pi/2].
    """
    return shape_metric(X, Y, alpha=alpha, score="angular")


def shape_euclidean(X: ArrayLike, Y: ArrayLike, *, alpha: float = 1.0) -> float:
    """``shape_metric(X, Y, alpha=alpha, score="euclidean")``: unnormalised Frobenius distance.

    Parameters
    ----------
    X, Y : Tensor or ndarray, shape (N, C) or (N, C, *spatial)
        The same N >= 3 inputs through two networks; widths may differ.
    alpha : float in [0, 1]
        The partial whitening, as in ``shape_metric``: 1 none, 0 full.

    Returns
    -------
    float
        The euclidean distance, >= 0, in the units of the data (not divided by N).
    """
    return shape_metric(X, Y, alpha=alpha, score="euclidean")


#: ShapeAlignment works in feature space (D x D matrices): 4096 features are 128 MiB a matrix.
MAX_ALIGNED_FEATURES = 4096


class ShapeAlignment:
    """The shape metric fitted on one split and scored on another, netrep's ``fit`` / ``score``
    convention (``LinearMetric(alpha, center_columns=True, zero_pad=True, score_method=score)``):
    a distance scored on the data its alignment was fitted to is optimistic.

    ``fit(X, Y)`` learns each side's mean and partial whitening Z (netrep's ``whiten`` with
    ``preserve_variance``) and the orthogonal alignment of the whitened data; ``score(X, Y)``
    centres new data with the fitted means, maps it through the fitted Z and alignment, and returns
    the angular or euclidean distance (``shape_metric``'s definitions). On the fitted data the score
    is ``shape_metric(X, Y)``.

    Where the fitted cross-covariance is rank-deficient (unequal widths, more features than inputs,
    dead units), an orthogonal alignment is determined only on its range: netrep completes it with
    whatever its SVD returns, we map only the determined directions (U_r V_r^T over the r nonzero
    singular values), so a held-out score does not depend on the linear-algebra library. Both agree
    where the alignment is determined. Features are flattened to (N, D), the narrower side
    zero-padded; D is at most ``MAX_ALIGNED_FEATURES`` (pool or project wider layers first).
    """

    def __init__(self, alpha: float = 1.0, score: Literal["angular", "euclidean"] = "angular") -> None:
        if score not in _SCORES:
            raise ValueError(f"score must be 'angular' or 'euclidean', got {score!r}")
        self.alpha, self.score_method = _check_alpha(alpha), score
        self._fitted: tuple | None = None

    def _flat(self, X: ArrayLike, name: str) -> Tensor:
        X = X if isinstance(X, Tensor) else torch.as_tensor(np.asarray(X))
        X = X.detach().reshape(X.shape[0], -1).to(torch.float64)
        if X.shape[1] > MAX_ALIGNED_FEATURES:
            raise ValueError(
                f"ShapeAlignment aligns at most {MAX_ALIGNED_FEATURES} features (D x D matrices), "
                f"{name} has {X.shape[1]}: average-pool or project the features first"
            )
        return X

    def _whitening(self, Xc: Tensor) -> Tensor:
        """netrep.utils.whiten's Z (preserve_variance=True) for centred features."""
        if self.alpha > 1 - _NETREP_EIGVAL_TOL:
            return torch.eye(Xc.shape[1], dtype=Xc.dtype)
        lam, V = torch.linalg.eigh(Xc.T @ Xc)
        lam = lam.clamp_min(_NETREP_EIGVAL_TOL)
        a = self.alpha
        d = a + (1 - a) * lam.rsqrt()
        new_var = (a**2 * lam + 2 * a * (1 - a) * lam.sqrt() + (1 - a) ** 2).sum()
        d = d * (lam.sum() / new_var).sqrt()
        return (V * d) @ V.T

    def _padded(self, X: ArrayLike, Y: ArrayLike, width: int | None = None) -> tuple[Tensor, Tensor]:
        check_pair_n(X, Y)
        X, Y = self._flat(X, "X"), self._flat(Y, "Y")
        wide = max(X.shape[1], Y.shape[1])
        if width is not None and wide != width:
            raise ValueError(
                f"score takes the widths fit saw (the wider {width}), got {X.shape[1]} and {Y.shape[1]}"
            )
        return tuple(torch.nn.functional.pad(Z, (0, wide - Z.shape[1])) for Z in (X, Y))

    def fit(self, X: ArrayLike, Y: ArrayLike) -> ShapeAlignment:
        """Fit the means, whitenings and alignment on X and Y, (N, ...) activations of the same
        N inputs. Returns self."""
        X, Y = self._padded(X, Y)
        means = X.mean(0), Y.mean(0)
        whitenings = self._whitening(X - means[0]), self._whitening(Y - means[1])
        U, s, Vh = torch.linalg.svd(((X - means[0]) @ whitenings[0]).T @ ((Y - means[1]) @ whitenings[1]))
        kept = s > s.max() * X.shape[1] * torch.finfo(s.dtype).eps
        self._fitted = (means, whitenings, (U[:, kept], Vh[kept].T), X.shape[1])
        return self

    def score(self, X: ArrayLike, Y: ArrayLike) -> float:
        """The distance of new X and Y (the same inputs, the widths fit saw) at the fitted alignment."""
        if self._fitted is None:
            raise ValueError("ShapeAlignment.score before fit: fit(X, Y) on the fitting split first")
        means, whitenings, (U, V), width = self._fitted
        Xw, Yw = ((Z - m) @ W for Z, m, W in zip(self._padded(X, Y, width), means, whitenings))
        # Only the aligned directions pair up: each side is its aligned part and the rest, held
        # apart, so <a, b> = <Xw U, Yw V>, |a| = |Xw|, |b| = |Yw|, and the distances come from the
        # difference a - b (exact near 0, as in compare_shape_metric).
        Xa, Ya = Xw @ U, Yw @ V
        Xr, Yr = Xw - Xa @ U.T, Yw - Ya @ V.T
        a = torch.cat([Xa, Xr, torch.zeros_like(Yr)], dim=1)
        b = torch.cat([Ya, torch.zeros_like(Xr), Yr], dim=1)
        if self.score_method == "angular":
            return _aligned_angle(a, b)
        return float(torch.linalg.norm(a - b))


# ---------------------------------------------------------------------------
# Helpers and registry
# ---------------------------------------------------------------------------
