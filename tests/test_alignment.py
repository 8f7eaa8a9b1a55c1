"""SVCCA, PWCCA and netrep's generalized shape metrics (intertwine.measures.cca, intertwine.measures.shape): agreement with
independent numpy transcriptions of the reference code (Google's svcca ``cca_core``/``pwcca``,
netrep's ``LinearMetric``) and with scipy's principal angles, invariances, metric properties,
prepare/compare, errors."""

import math

import numpy as np
import pytest
import scipy.linalg
import torch

from intertwine.measures import ConstantRepresentationError, cca
from intertwine.measures.cca import compare_svcca, prepare_pwcca, prepare_svcca, pwcca, svcca
from intertwine.measures.layerwise import PREPARED
from intertwine.measures.shape import (
    compare_shape_metric,
    prepare_shape_metric,
    shape_angular,
    shape_euclidean,
    shape_metric,
)

F64 = torch.float64


def randn(gen, *shape):
    return torch.randn(*shape, dtype=F64, generator=gen)


def pair(seed, n=120, dx=8, dy=8, noise=0.7):
    """Two related representations: Y a noisy linear read-out of X plus an offset."""
    g = torch.Generator().manual_seed(seed)
    X = randn(g, n, dx) @ randn(g, dx, dx) + randn(g, dx)
    Y = X @ randn(g, dx, dy) + noise * randn(g, n, dy) + 3.0
    return X, Y


def invertible(gen, d):
    """A well-conditioned random invertible matrix."""
    Q = torch.linalg.qr(randn(gen, d, d))[0]
    return Q * torch.linspace(0.5, 2.0, d, dtype=F64)


# ---------------------------------------------------------------------------
# References, written from the papers' code, in plain numpy
# ---------------------------------------------------------------------------


def _posdef_sqrt(a):
    w, v = np.linalg.eigh(a)
    return v @ np.diag(np.sqrt(w)) @ v.T


def google_cca(acts1, acts2):
    """cca_core.get_cca_similarity / compute_ccas (epsilon = 0): acts are (neurons, datapoints)."""
    numx = acts1.shape[0]
    cov = np.cov(acts1, acts2)
    sxx, sxy, syy = cov[:numx, :numx], cov[:numx, numx:], cov[numx:, numx:]
    xmax, ymax = np.max(np.abs(sxx)), np.max(np.abs(syy))
    sxx, syy, sxy = sxx / xmax, syy / ymax, sxy / np.sqrt(xmax * ymax)
    invsqrt_xx = _posdef_sqrt(np.linalg.pinv(sxx))
    invsqrt_yy = _posdef_sqrt(np.linalg.pinv(syy))
    u, s, v = np.linalg.svd(invsqrt_xx @ sxy @ invsqrt_yy)
    return u, np.abs(s), v, invsqrt_xx, invsqrt_yy


def google_svcca(X, Y, variance):
    """The SVCCA tutorial of google/svcca: SVD of the centred activations, keep the top singular
    directions explaining ``variance``, CCA, mean canonical correlation."""

    def reduce(A):
        acts = A.T - A.T.mean(1, keepdims=True)
        _, s, V = np.linalg.svd(acts, full_matrices=False)
        frac = np.cumsum(s**2) / np.sum(s**2)
        k = int(np.argmax(frac >= variance - 1e-12)) + 1
        return s[:k, None] * V[:k]

    return google_cca(reduce(X), reduce(Y))[1].mean()


def google_pwcca(X, Y):
    """pwcca.compute_pwcca with the canonical directions of cca_core (``cca_dirns``: coef @
    invsqrt @ centred acts) and centred activations, the paper's definition; the side with fewer
    neurons gives the weights (X on a tie)."""
    acts1, acts2 = X.T, Y.T
    u, s, v, ixx, iyy = google_cca(acts1, acts2)
    c1, c2 = acts1 - acts1.mean(1, keepdims=True), acts2 - acts2.mean(1, keepdims=True)
    if acts1.shape[0] <= acts2.shape[0]:
        dirns, acts = u.T @ ixx @ c1, c1
    else:
        dirns, acts = v @ iyy @ c2, c2
    P, _ = np.linalg.qr(dirns.T)
    weights = np.sum(np.abs(P.T @ acts.T), axis=1)
    weights = weights / weights.sum()
    return np.sum(weights * s)


def google_pwcca_literal(X, Y):
    """pwcca.compute_pwcca verbatim (X branch): directions ``coef_x @ (acts1 - means) + means``
    without invsqrt_xx, weighted against the raw activations."""
    acts1, acts2 = X.T, Y.T
    assert acts1.shape[0] <= acts2.shape[0]
    u, s, _, _, _ = google_cca(acts1, acts2)
    means = acts1.mean(1, keepdims=True)
    dirns = u.T @ (acts1 - means) + means
    P, _ = np.linalg.qr(dirns.T)
    weights = np.sum(np.abs(P.T @ acts1.T), axis=1)
    weights = weights / np.sum(weights)
    return np.sum(weights * s)


def netrep_whiten(X, alpha, eigval_tol=1e-7):
    """netrep.utils.whiten(X, alpha, preserve_variance=True)."""
    if alpha > 1 - eigval_tol:
        return X
    lam, V = np.linalg.eigh(X.T @ X)
    lam = np.maximum(lam, eigval_tol)
    d = alpha + (1 - alpha) * lam ** (-1 / 2)
    new_var = np.sum(alpha**2 * lam + 2 * alpha * (1 - alpha) * lam**0.5 + (1 - alpha) ** 2)
    d *= np.sqrt(np.sum(lam) / new_var)
    return X @ ((V * d[None, :]) @ V.T)


def netrep_linear_metric(X, Y, alpha, score):
    """netrep.metrics.LinearMetric(alpha, center_columns=True, zero_pad=True, score).fit_score."""
    n = max(X.shape[1], Y.shape[1])
    X, Y = np.pad(X, ((0, 0), (0, n - X.shape[1]))), np.pad(Y, ((0, 0), (0, n - Y.shape[1])))
    Xw, Yw = netrep_whiten(X - X.mean(0), alpha), netrep_whiten(Y - Y.mean(0), alpha)
    R, _ = scipy.linalg.orthogonal_procrustes(Xw, Yw)
    A, B = Xw @ R, Yw
    if score == "angular":
        corr = np.sum(A * B) / (np.linalg.norm(A) * np.linalg.norm(B))
        return np.arccos(np.clip(corr, -1.0, 1.0))
    return np.linalg.norm(A - B)


def principal_cosines(X, Y):
    """Canonical correlations as cosines of the principal angles between centred column spaces."""
    X, Y = np.asarray(X), np.asarray(Y)
    return np.cos(scipy.linalg.subspace_angles(X - X.mean(0), Y - Y.mean(0)))


# ---------------------------------------------------------------------------
# Agreement with the references
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dx,dy", [(8, 8), (6, 11), (12, 5)])
def test_canonical_correlations_match_principal_angles(dx, dy):
    X, Y = pair(0, dx=dx, dy=dy)
    _, rho, _ = cca._canonical(prepare_pwcca(X), prepare_pwcca(Y))
    ref = np.sort(principal_cosines(X, Y))[::-1]
    # observed max |difference| 1.1e-15
    np.testing.assert_allclose(rho.numpy(), ref, rtol=0, atol=1e-10)
    assert svcca(X, Y, variance=1.0) == pytest.approx(ref.mean(), abs=1e-10)


@pytest.mark.parametrize("variance", [0.9, 0.99, 1.0])
@pytest.mark.parametrize("dx,dy", [(10, 10), (7, 14)])
def test_svcca_matches_google(variance, dx, dy):
    g = torch.Generator().manual_seed(1)
    # Decaying spectra so that the SV step drops directions for variance < 1.
    X = randn(g, 150, dx) * torch.logspace(0, -1.5, dx, dtype=F64) + 2.0
    Y = X @ randn(g, dx, dy) * torch.logspace(0, -1, dy, dtype=F64) + 0.3 * randn(g, 150, dy)
    # observed max |difference| 2.8e-15
    assert svcca(X, Y, variance=variance) == pytest.approx(
        google_svcca(X.numpy(), Y.numpy(), variance), abs=1e-10
    )


def test_svcca_keeps_fewer_directions_for_lower_variance():
    g = torch.Generator().manual_seed(2)
    X = randn(g, 100, 12) * torch.logspace(0, -2, 12, dtype=F64)
    ks = [prepare_svcca(X, v).basis.shape[1] for v in (0.5, 0.9, 0.99, 1.0)]
    assert ks == sorted(ks) and ks[0] < ks[-1] == 12


@pytest.mark.parametrize("dx,dy", [(8, 8), (6, 11), (12, 5)])
def test_pwcca_matches_google(dx, dy):
    X, Y = pair(3, dx=dx, dy=dy)
    # observed max |difference| 9.1e-13
    assert pwcca(X, Y) == pytest.approx(google_pwcca(X.numpy(), Y.numpy()), abs=1e-10)
    assert pwcca(Y, X) == pytest.approx(google_pwcca(Y.numpy(), X.numpy()), abs=1e-10)


def test_pwcca_equals_verbatim_google_code_on_orthonormal_centred_features():
    # compute_pwcca omits invsqrt_xx from its directions and uses uncentred activations; both
    # are immaterial when X's columns are centred and orthonormal, where the numbers agree.
    X, Y = pair(4, dx=6, dy=9)
    Xc = X - X.mean(0)
    Q = torch.linalg.qr(Xc)[0]
    # observed |difference| 1.9e-13; on generic features below, 5.1e-3
    assert pwcca(Q, Y) == pytest.approx(google_pwcca_literal(Q.numpy(), Y.numpy()), abs=1e-10)
    # On generic features the verbatim code computes something else (why it is not followed).
    assert abs(pwcca(X, Y) - google_pwcca_literal(X.numpy(), Y.numpy())) > 1e-4


@pytest.mark.parametrize("score", ["angular", "euclidean"])
@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.999, 1.0])
@pytest.mark.parametrize("n,dx,dy", [(120, 8, 8), (120, 6, 11), (15, 20, 9)])
def test_shape_metric_matches_netrep(score, alpha, n, dx, dy):
    X, Y = pair(5, n=n, dx=dx, dy=dy)
    got = shape_metric(X, Y, alpha=alpha, score=score)
    ref = netrep_linear_metric(X.numpy(), Y.numpy(), alpha, score)
    # observed max |difference|: angular 2.0e-13 rad; euclidean 6.7e-12 (7.5e-14 relative,
    # distances ~10-150 here)
    assert got == pytest.approx(ref, rel=1e-10, abs=1e-10)


def test_fully_whitened_angular_is_arccos_of_canonical_correlations():
    X, Y = pair(6, dx=7, dy=10)
    rho = principal_cosines(X, Y)
    expected = math.acos(rho.sum() / math.sqrt(7 * 10))
    assert shape_angular(X, Y, alpha=0.0) == pytest.approx(expected, abs=1e-10)


def test_conv_features_are_flattened_positions_as_features():
    g = torch.Generator().manual_seed(7)
    X, Y = randn(g, 60, 3, 2, 2), randn(g, 60, 2, 3)
    Xf, Yf = X.reshape(60, -1), Y.reshape(60, -1)
    for prepare, compare in PREPARED.values():
        assert compare(prepare(X), prepare(Y)) == pytest.approx(compare(prepare(Xf), prepare(Yf)), abs=1e-12)
    assert svcca(X, Y) == pytest.approx(google_svcca(Xf.numpy(), Yf.numpy(), 0.99), abs=1e-10)


def test_numpy_and_float32_inputs():
    X, Y = pair(8)
    assert svcca(X.numpy(), Y.numpy()) == svcca(X, Y)
    assert isinstance(pwcca(X, Y), float)
    assert shape_angular(X.float(), Y.float()) == pytest.approx(shape_angular(X, Y), abs=1e-5)


# ---------------------------------------------------------------------------
# Invariances, identity, symmetry
# ---------------------------------------------------------------------------


def test_svcca_invariances():
    X, Y = pair(9, dx=8, dy=10)
    g = torch.Generator().manual_seed(90)
    base = svcca(X, Y, variance=1.0)
    moved = svcca(X @ invertible(g, 8) - 5.0, Y @ invertible(g, 10) + randn(g, 10), variance=1.0)
    assert moved == pytest.approx(base, abs=1e-10)
    # With the SV step active (variance < 1): orthogonal maps, isotropic scaling, translation.
    base = svcca(X, Y)
    Q = torch.linalg.qr(randn(g, 8, 8))[0]
    assert svcca(3.0 * X @ Q + 1.0, Y) == pytest.approx(base, abs=1e-10)
    # ... but not general linear maps, which change what the SV step keeps.
    S = torch.diag(torch.logspace(0, 2, 8, dtype=F64))
    assert abs(svcca(X @ S, Y) - base) > 1e-3


def test_pwcca_invariances():
    X, Y = pair(10, dx=8, dy=8)
    g = torch.Generator().manual_seed(100)
    base = pwcca(X, Y)
    # The side not used for the weights (Y on a tie): any invertible linear map and translation.
    assert pwcca(X, Y @ invertible(g, 8) + 2.0) == pytest.approx(base, abs=1e-10)
    # The weighting side: permutations, sign flips, isotropic scaling and translation.
    perm, signs = torch.randperm(8, generator=g), torch.tensor([1.0, -1] * 4, dtype=F64)
    assert pwcca(2.5 * X[:, perm] * signs - 7.0, Y) == pytest.approx(base, abs=1e-10)
    # ... not general linear maps, which change the weights (not the correlations).
    assert abs(pwcca(X @ invertible(g, 8), Y) - base) > 1e-4


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_shape_metric_orthogonal_translation_invariance(alpha):
    X, Y = pair(11, dx=8, dy=6)
    g = torch.Generator().manual_seed(110)
    Qx, Qy = torch.linalg.qr(randn(g, 8, 8))[0], torch.linalg.qr(randn(g, 6, 6))[0]
    for score in ("angular", "euclidean"):
        base = shape_metric(X, Y, alpha=alpha, score=score)
        moved = shape_metric(X @ Qx + randn(g, 8), Y @ Qy - 4.0, alpha=alpha, score=score)
        assert moved == pytest.approx(base, rel=1e-10)
    # Angular with alpha = 1: isotropic scaling too; euclidean scales with the data.
    if alpha == 1.0:
        assert shape_angular(5.0 * X, 0.1 * Y) == pytest.approx(shape_angular(X, Y), abs=1e-10)
        assert shape_euclidean(2.0 * X, 2.0 * Y) == pytest.approx(2 * shape_euclidean(X, Y), rel=1e-10)
    # Not invariant to general linear maps unless fully whitened.
    S = torch.diag(torch.logspace(0, 1, 8, dtype=F64))
    assert abs(shape_angular(X @ S, Y, alpha=alpha) - shape_angular(X, Y, alpha=alpha)) > 1e-3


def test_fully_whitened_angular_linear_invariance():
    X, Y = pair(12, dx=8, dy=6)
    g = torch.Generator().manual_seed(120)
    base = shape_angular(X, Y, alpha=0.0)
    assert shape_angular(X @ invertible(g, 8) + 1.0, Y @ invertible(g, 6), alpha=0.0) == pytest.approx(
        base, abs=1e-10
    )


def test_identity():
    X, _ = pair(13, dx=9)
    assert svcca(X, X) == pytest.approx(1.0, abs=1e-12)
    assert pwcca(X, X) == pytest.approx(1.0, abs=1e-12)
    for alpha in (0.0, 0.5, 1.0):
        assert shape_angular(X, X, alpha=alpha) < 1e-6  # arccos(1 - 1e-16) ~ 1.5e-8
        assert shape_euclidean(X, X, alpha=alpha) < 1e-6 * torch.linalg.norm(X).item()
        # Equal up to an orthogonal map and translation: distance 0 too.
        Q = torch.linalg.qr(X[:9, :9])[0]
        assert shape_angular(X, X @ Q + 1.0, alpha=alpha) < 1e-6


def test_symmetry():
    for dx, dy in [(8, 8), (5, 9)]:
        X, Y = pair(14, dx=dx, dy=dy)
        assert svcca(X, Y) == pytest.approx(svcca(Y, X), abs=1e-12)
        for alpha in (0.0, 0.4, 1.0):
            for score in ("angular", "euclidean"):
                assert shape_metric(X, Y, alpha=alpha, score=score) == pytest.approx(
                    shape_metric(Y, X, alpha=alpha, score=score), rel=1e-10
                )


def test_pwcca_is_not_symmetric_for_equal_ranks():
    X, Y = pair(15, dx=8, dy=8)
    assert abs(pwcca(X, Y) - pwcca(Y, X)) > 1e-3
    # Different ranks: both orders weight by the smaller representation.
    X, Y = pair(15, dx=5, dy=9)
    assert pwcca(X, Y) == pytest.approx(pwcca(Y, X), abs=1e-12)


# ---------------------------------------------------------------------------
# Metric properties
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_euclidean_and_angular_consistent(alpha):
    # Full rank, equal widths: netrep's rescale preserves ||Xc||_F, so by the law of cosines
    # euclidean^2 = ||Xc||^2 + ||Yc||^2 - 2 ||Xc|| ||Yc|| cos(angular).
    X, Y = pair(16, dx=7, dy=7)
    nx, ny = (torch.linalg.norm(A - A.mean(0)).item() for A in (X, Y))
    angle = shape_angular(X, Y, alpha=alpha)
    expected = math.sqrt(nx**2 + ny**2 - 2 * nx * ny * math.cos(angle))
    assert shape_euclidean(X, Y, alpha=alpha) == pytest.approx(expected, rel=1e-10)


@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.0])
def test_angular_triangle_inequality(alpha):
    g = torch.Generator().manual_seed(17)
    for _ in range(5):
        X, Z = randn(g, 80, 6), randn(g, 80, 6)
        # A representation between X and Z makes the inequality nearly tight.
        for Y in (0.5 * (X + Z), randn(g, 80, 6), X + 0.1 * randn(g, 80, 6)):
            d = {
                (a, b): shape_angular(A, B, alpha=alpha)
                for (a, A), (b, B) in [(("x", X), ("y", Y)), (("y", Y), ("z", Z)), (("x", X), ("z", Z))]
            }
            assert d["x", "z"] <= d["x", "y"] + d["y", "z"] + 1e-12
            assert all(0.0 <= v <= math.pi / 2 + 1e-12 for v in d.values())


# ---------------------------------------------------------------------------
# prepare / compare, errors
# ---------------------------------------------------------------------------


def test_prepared_equals_one_shot():
    X, Y = pair(18, dx=7, dy=9)
    one_shot = {
        "svcca": svcca(X, Y),
        "pwcca": pwcca(X, Y),
        "shape_angular": shape_angular(X, Y),
        "shape_euclidean": shape_euclidean(X, Y),
    }
    assert set(PREPARED) == set(one_shot)
    for name, (prepare, compare) in PREPARED.items():
        assert compare(prepare(X), prepare(Y)) == one_shot[name]
    px, py = prepare_shape_metric(X, 0.3), prepare_shape_metric(Y, 0.3)
    assert compare_shape_metric(px, py, score="euclidean") == shape_euclidean(X, Y, alpha=0.3)
    assert compare_svcca(prepare_svcca(X, 0.9), prepare_svcca(Y, 0.9)) == svcca(X, Y, variance=0.9)


@pytest.mark.parametrize("name", sorted(PREPARED))
@pytest.mark.parametrize("constant", ["X", "Y"])
def test_constant_representation_names_argument(name, constant):
    X, Y = pair(19)
    C = torch.full_like(X, 0.1)
    one_shot = {
        "svcca": svcca,
        "pwcca": pwcca,
        "shape_angular": shape_angular,
        "shape_euclidean": shape_euclidean,
    }[name]
    args = (C, Y) if constant == "X" else (X, C)
    with pytest.raises(ConstantRepresentationError, match=f"^{constant} is the same") as err:
        one_shot(*args)
    assert err.value.which == constant


def test_errors():
    X, Y = pair(20)
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="alpha"):
            shape_metric(X, Y, alpha=bad)
        with pytest.raises(ValueError, match="alpha"):
            prepare_shape_metric(X, bad)
    with pytest.raises(ValueError, match="score"):
        shape_metric(X, Y, score="cosine")
    with pytest.raises(ValueError, match="score"):
        compare_shape_metric(prepare_shape_metric(X), prepare_shape_metric(Y), score="cosine")
    with pytest.raises(ValueError, match="different alpha"):
        compare_shape_metric(prepare_shape_metric(X, 0.5), prepare_shape_metric(Y, 1.0))
    with pytest.raises(ValueError, match="variance"):
        svcca(X, Y, variance=0.0)
    for measure in (svcca, pwcca, shape_angular, shape_euclidean):
        with pytest.raises(ValueError, match=r"X and Y .*N = 120 for X and N = 100 for Y"):
            measure(X, Y[:100])
        for n in (1, 2):  # two centred samples span one line: 1 (or 0) for any data
            with pytest.raises(ValueError, match=f"at least 3 samples \\(inputs\\), got N = {n}"):
                measure(X[:n], Y[:n])
    for prepare, compare in PREPARED.values():
        with pytest.raises(ValueError, match="N = 120 for X and N = 100 for Y"):
            compare(prepare(X), prepare(Y[:100]))
    with pytest.raises(ValueError, match="NaN"):
        pwcca(X, torch.full_like(Y, float("nan")))
