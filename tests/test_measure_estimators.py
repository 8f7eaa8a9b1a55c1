"""The estimators others publish: the biased HSIC estimator of every CKA, against a transcription
of Kornblith et al.'s published formula (their ``cka`` with ``debiased=False``: the Gram matrices
double-centred, a Frobenius product over the norms; and its feature-space form for linear CKA);
Procrustes and the shape metrics fitted on one split and scored on another (netrep's convention),
against a transcription of netrep's ``LinearMetric.fit`` / ``score``."""

import numpy as np
import pytest
import torch

from intertwine import measures
from intertwine.measures import CKA_MEASURES, MEASURES, cka_kernel, kernel_cka


def kornblith_cka(gram_x: np.ndarray, gram_y: np.ndarray) -> float:
    n = gram_x.shape[0]
    centring = np.eye(n) - np.ones((n, n)) / n
    gx, gy = centring @ gram_x @ centring, centring @ gram_y @ centring
    return float((gx * gy).sum() / (np.linalg.norm(gx) * np.linalg.norm(gy)))


def kornblith_feature_cka(x: np.ndarray, y: np.ndarray) -> float:
    x, y = x - x.mean(0), y - y.mean(0)
    return float(np.linalg.norm(x.T @ y) ** 2 / (np.linalg.norm(x.T @ x) * np.linalg.norm(y.T @ y)))


@pytest.fixture
def pair():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((24, 3, 2, 2))
    Y = X[:, :2] * 1.5 + 0.5 * rng.standard_normal((24, 2, 2, 2))
    return torch.as_tensor(X), torch.as_tensor(Y)


@pytest.mark.parametrize("method", ["gram", "features"])
def test_biased_linear_cka_is_kornbliths(pair, method):
    X, Y = pair
    x, y = X.flatten(1).numpy(), Y.flatten(1).numpy()
    expected = kornblith_feature_cka(x, y)
    assert expected == pytest.approx(kornblith_cka(x @ x.T, y @ y.T), abs=1e-12)
    assert measures.linear_cka(X, Y, method=method, estimator="biased") == pytest.approx(expected, abs=1e-10)
    assert measures.linear_cka(X, Y, method=method) != pytest.approx(expected, abs=1e-3)  # the unbiased one


@pytest.mark.parametrize("name", CKA_MEASURES)
def test_every_cka_has_the_biased_estimator_of_its_kernel(pair, name):
    X, Y = pair
    K, L = cka_kernel(name, X).numpy(), cka_kernel(name, Y).numpy()
    assert MEASURES[name](X, Y, estimator="biased") == pytest.approx(kornblith_cka(K, L), abs=1e-10)
    assert kernel_cka(K, L, estimator="biased") == pytest.approx(kornblith_cka(K, L), abs=1e-10)


def test_the_biased_estimator_is_positive_on_unrelated_data_the_unbiased_is_not():
    rng = np.random.default_rng(1)
    biased, unbiased = [], []
    for _ in range(50):
        X, Y = torch.as_tensor(rng.standard_normal((20, 8))), torch.as_tensor(rng.standard_normal((20, 8)))
        biased.append(measures.linear_cka(X, Y, estimator="biased"))
        unbiased.append(measures.linear_cka(X, Y))
    assert min(biased) > 0 and abs(np.mean(unbiased)) < 3 * np.std(unbiased) / np.sqrt(50)


def test_an_unknown_estimator_is_named(pair):
    with pytest.raises(ValueError, match="estimator must be one of unbiased, biased, got 'debiased'"):
        measures.grelu_cka(*pair, estimator="debiased")


# --- held-out Procrustes (netrep's fit / score) ------------------------------------------------


def gaussian(seed, *shape):
    return torch.as_tensor(np.random.default_rng(seed).standard_normal(shape))


def test_procrustes_scored_on_its_own_fit_is_the_measure():
    X, Y = gaussian(0, 30, 5, 2, 2), gaussian(1, 30, 5, 2, 2)
    alignment = measures.ProcrustesAlignment().fit(X, Y)
    for name in ("orthogonal_procrustes", "grelu_procrustes"):
        assert alignment.score(X, Y, name) == pytest.approx(MEASURES[name](X, Y), abs=1e-12)


def test_a_fitted_symmetry_scores_one_on_new_inputs():
    Q = torch.linalg.qr(gaussian(2, 5, 5))[0]
    perm = torch.randperm(5, generator=torch.Generator().manual_seed(0))
    grelu = torch.eye(5, dtype=torch.float64)[perm] * torch.linspace(0.5, 2.0, 5, dtype=torch.float64)
    for name, element in (("orthogonal_procrustes", Q), ("grelu_procrustes", grelu)):
        fit, new = gaussian(3, 40, 5), gaussian(4, 25, 5)
        alignment = measures.ProcrustesAlignment().fit(fit, fit @ element)
        assert alignment.score(new, new @ element, name) == pytest.approx(1.0, abs=1e-12)


def test_held_out_scores_undo_the_optimism_of_fitting():
    # unrelated representations, wide for their samples: the fitted alignment finds structure in
    # noise, which new inputs do not share
    inside, outside = [], []
    for seed in range(20):
        X, Y = gaussian(10 + seed, 60, 12), gaussian(100 + seed, 60, 12)
        alignment = measures.ProcrustesAlignment().fit(X[:30], Y[:30])
        inside.append(alignment.score(X[:30], Y[:30]))
        outside.append(alignment.score(X[30:], Y[30:]))
    gap = np.subtract(inside, outside)
    assert gap.mean() > 3 * gap.std(ddof=1) / np.sqrt(len(gap))


def test_procrustes_alignment_names_its_problem():
    X = gaussian(5, 10, 4)
    with pytest.raises(ValueError, match="score before fit"):
        measures.ProcrustesAlignment().score(X, X)
    alignment = measures.ProcrustesAlignment().fit(X, gaussian(6, 10, 3))
    with pytest.raises(ValueError, match="need as many"):
        alignment.score(X, gaussian(7, 10, 3), "grelu_procrustes")
    with pytest.raises(ValueError, match="channels fit saw"):
        alignment.score(X, X)
    with pytest.raises(ValueError, match="measure must be"):
        alignment.score(X, gaussian(7, 10, 3), "linear_cka")


def netrep_linear_metric(X_fit, Y_fit, X, Y, alpha, score):
    """A transcription of netrep's LinearMetric(alpha, center_columns=True, zero_pad=True,
    score_method=score): whiten (preserve_variance, eigenvalues clipped at 1e-7), align by the SVD
    of Xw^T Yw, and score new data through the fitted means and maps."""

    def whiten(Xc):
        if alpha > 1 - 1e-7:
            return np.eye(Xc.shape[1])
        lam, V = np.linalg.eigh(Xc.T @ Xc)
        lam = np.maximum(lam, 1e-7)
        d = alpha + (1 - alpha) * lam ** (-1 / 2)
        new_var = np.sum(alpha**2 * lam + 2 * alpha * (1 - alpha) * lam**0.5 + (1 - alpha) ** 2)
        d *= np.sqrt(np.sum(lam) / new_var)
        return (V * d[None, :]) @ V.T

    mx, my = X_fit.mean(0), Y_fit.mean(0)
    Zx, Zy = whiten(X_fit - mx), whiten(Y_fit - my)
    U, _, Vt = np.linalg.svd(((X_fit - mx) @ Zx).T @ ((Y_fit - my) @ Zy))
    tX, tY = (X - mx) @ Zx @ U, (Y - my) @ Zy @ Vt.T
    if score == "angular":
        cosine = np.dot(tX.ravel(), tY.ravel()) / (np.linalg.norm(tX) * np.linalg.norm(tY))
        return np.arccos(np.clip(cosine, -1.0, 1.0))
    return np.linalg.norm(tX - tY)


@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.0])
@pytest.mark.parametrize("score", ["angular", "euclidean"])
def test_held_out_shape_metric_is_netreps(alpha, score):
    # equal widths, more inputs than features: netrep's alignment is determined
    X, Y = gaussian(20, 90, 8).numpy(), gaussian(21, 90, 8).numpy()
    Y = X @ gaussian(22, 8, 8).numpy() + Y
    alignment = measures.ShapeAlignment(alpha, score).fit(X[:50], Y[:50])
    expected = netrep_linear_metric(X[:50], Y[:50], X[50:], Y[50:], alpha, score)
    assert alignment.score(X[50:], Y[50:]) == pytest.approx(expected, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.0])
@pytest.mark.parametrize("score", ["angular", "euclidean"])
def test_shape_metric_scored_on_its_own_fit_is_the_measure(alpha, score):
    # unequal widths and channels x positions, where the alignment is rank-deficient
    X, Y = gaussian(23, 30, 3, 2, 2), gaussian(24, 30, 5)
    alignment = measures.ShapeAlignment(alpha, score).fit(X, Y)
    expected = measures.shape_metric(X, Y, alpha=alpha, score=score)
    assert alignment.score(X, Y) == pytest.approx(expected, rel=1e-9, abs=1e-9)


def test_held_out_shape_distance_undoes_the_optimism_of_fitting():
    inside, outside = [], []
    for seed in range(20):
        X, Y = gaussian(200 + seed, 60, 12), gaussian(300 + seed, 60, 12)
        alignment = measures.ShapeAlignment().fit(X[:30], Y[:30])
        inside.append(alignment.score(X[:30], Y[:30]))
        outside.append(alignment.score(X[30:], Y[30:]))
    gap = np.subtract(outside, inside)  # distances: larger on new inputs
    assert gap.mean() > 3 * gap.std(ddof=1) / np.sqrt(len(gap))
    # a fitted orthogonal map and shift of the features is recovered exactly on new inputs
    Q = torch.linalg.qr(gaussian(8, 6, 6))[0]
    fit, new = gaussian(9, 40, 6), gaussian(10, 25, 6)
    alignment = measures.ShapeAlignment().fit(fit, fit @ Q + 3.0)
    assert alignment.score(new, new @ Q + 3.0) == pytest.approx(0.0, abs=1e-6)


def test_shape_alignment_names_its_problem():
    X = gaussian(11, 10, 4)
    with pytest.raises(ValueError, match="score before fit"):
        measures.ShapeAlignment().score(X, X)
    with pytest.raises(ValueError, match="widths fit saw"):
        measures.ShapeAlignment().fit(X, X).score(gaussian(12, 10, 6), X)
    with pytest.raises(ValueError, match="average-pool or project"):
        measures.ShapeAlignment().fit(torch.zeros(3, 4097), torch.zeros(3, 4097))
    with pytest.raises(ValueError, match="score must be"):
        measures.ShapeAlignment(score="cosine")


def mpmath_shape_distances(X: np.ndarray, Y: np.ndarray) -> tuple[float, float]:
    """(euclidean, angular) shape distance at alpha = 1 in 50 digits: centre the columns, the
    nuclear norm of Xc^T Yc from mpmath's SVD, then sqrt(|Xc|^2 + |Yc|^2 - 2 nuclear) and
    arccos(nuclear / (|Xc| |Yc|)), whose cancellation 50 digits absorb."""
    import mpmath  # a dev dependency (pyproject.toml)

    with mpmath.workdps(50):

        def centred(A):
            columns = [[mpmath.mpf(float(v)) for v in column] for column in A.T]
            return mpmath.matrix([[v - mpmath.fsum(c) / len(c) for v in c] for c in columns]).T

        Xc, Yc = centred(X), centred(Y)
        nuclear = mpmath.fsum(mpmath.svd_r(Xc.T * Yc, compute_uv=False))
        nx2, ny2 = mpmath.fsum(v**2 for v in Xc), mpmath.fsum(v**2 for v in Yc)
        return float(mpmath.sqrt(nx2 + ny2 - 2 * nuclear)), float(
            mpmath.acos(nuclear / mpmath.sqrt(nx2 * ny2))
        )


@pytest.mark.parametrize("offset", [1e-6, 1e-9, 1e-12])
def test_shape_distances_are_exact_near_zero(offset):
    """Data of norm 100 and a rotated copy moved by ``offset``: sqrt(|X|^2 + |Y|^2 - 2 nuclear)
    was 1.3e-6 off a distance of 8e-12 and the angle 1.5e-8 off 9e-14; the aligned difference
    and Kahan's angle keep them to 1e-13 and 1e-15."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((12, 5))
    X *= 100 / np.linalg.norm(X - X.mean(0))
    Q, _ = np.linalg.qr(rng.standard_normal((5, 5)))
    Y = X @ Q + offset * rng.standard_normal(X.shape)
    euclidean, angular = mpmath_shape_distances(X, Y)
    X_, Y_ = torch.as_tensor(X), torch.as_tensor(Y)
    assert abs(measures.shape_euclidean(X_, Y_) - euclidean) < 1e-13
    assert abs(measures.shape_angular(X_, Y_) - angular) < 1e-15
    for score, expected, tolerance in (("euclidean", euclidean, 1e-13), ("angular", angular, 1e-15)):
        fitted = measures.ShapeAlignment(score=score).fit(X_, Y_)
        assert abs(fitted.score(X_, Y_) - expected) < tolerance  # scored on its fit: the same


@pytest.mark.parametrize("alpha", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("seed", [2, 3])
def test_whitened_shape_distance_of_a_rotated_copy_is_zero_to_rounding(alpha, seed):
    """An orthogonal map of the features changes no shape distance, whitened or not: exactly 0
    (these seeds read 5.4e-6 to 7.6e-6 and 1.5e-8 to 2.6e-8 radians before; now 5e-13, 2e-15)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((20, 6)) * 30
    Q, _ = np.linalg.qr(rng.standard_normal((6, 6)))
    X_, Y_ = torch.as_tensor(X), torch.as_tensor(X @ Q)
    assert measures.shape_euclidean(X_, Y_, alpha=alpha) < 1e-12
    assert measures.shape_angular(X_, Y_, alpha=alpha) < 1e-14
