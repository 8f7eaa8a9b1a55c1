"""A measure's permutation null, jackknife and bootstrap intervals: the kernel-shuffling shortcut
equals recomputing, the null's p-values are uniform on independent data and tiny for Y = X Q, the
intervals cover a known population value at their level, within standard errors, and the matrix
jackknife equals each entry's."""

import numpy as np
import pytest
import torch
from scipy import stats

from intertwine import measures
from intertwine.measures import (
    MEASURES,
    bootstrap_interval,
    jackknife_interval,
    pairwise_jackknife,
    permutation_test,
)


def gaussian(rng, *shape):
    return torch.as_tensor(rng.standard_normal(shape))


@pytest.mark.parametrize("name", ["linear_cka", "grelu_cka", "rbf_cka", "gate_cka"])
def test_shuffling_the_kernel_equals_recomputing_the_measure(name):
    rng = np.random.default_rng(0)
    X, Y = gaussian(rng, 16, 3, 2, 2), gaussian(rng, 16, 4, 2, 2)
    fast = permutation_test(name, X, Y, permutations=20, seed=1)
    slow = permutation_test(lambda a, b: MEASURES[name](a, b), X, Y, permutations=20, seed=1)
    assert fast.value == pytest.approx(MEASURES[name](X, Y), abs=1e-12)
    np.testing.assert_allclose(fast.null, slow.null, atol=1e-12)
    assert fast.p_value == slow.p_value


@pytest.mark.parametrize("name, datasets", [("linear_cka", 300), ("orthogonal_procrustes", 100)])
def test_null_p_values_are_uniform_on_independent_data(name, datasets):
    rng = np.random.default_rng(2)
    p = [
        permutation_test(name, gaussian(rng, 12, 3), gaussian(rng, 12, 3), permutations=99, seed=k).p_value
        for k in range(datasets)
    ]
    assert stats.kstest(p, "uniform").pvalue > 0.01


@pytest.mark.parametrize("name", ["linear_cka", "grelu_cka", "orthogonal_procrustes", "shape_angular"])
def test_a_rotated_copy_is_far_outside_the_null(name):
    rng = np.random.default_rng(3)
    X = gaussian(rng, 40, 6)
    Q = torch.linalg.qr(gaussian(rng, 6, 6))[0]
    if name == "grelu_cka":  # its symmetry: a permutation times positive scales
        Q = (
            torch.eye(6, dtype=torch.float64)[torch.randperm(6, generator=torch.Generator().manual_seed(0))]
            * 2.0
        )
    result = permutation_test(name, X, X @ Q, permutations=199)
    assert result.p_value == pytest.approx(1 / 200) and result.p_value < 0.01  # no shuffle as extreme


def test_the_percentile_interval_covers_the_population_value():
    # One feature each, Y = X + noise: linear CKA estimates the squared correlation, here 1 / 2.
    rng = np.random.default_rng(4)
    trials, covered = 150, 0
    for trial in range(trials):
        X = gaussian(rng, 100, 1)
        Y = X + gaussian(rng, 100, 1)
        interval = bootstrap_interval("linear_cka", X, Y, resamples=100, seed=trial)
        covered += interval.low <= 0.5 <= interval.high
    standard_error = np.sqrt(0.95 * 0.05 / trials)
    assert abs(covered / trials - 0.95) < 3 * standard_error


def test_the_percentile_interval_is_the_quantiles_of_draws_of_the_inputs():
    """scipy.stats.bootstrap's percentile interval is the hand-written one it replaced, number for
    number: draws of N row indices from numpy's generator at the seed, the measure on each, and
    the (1 -/+ level) / 2 quantiles of the draws."""
    rng = np.random.default_rng(7)
    X = gaussian(rng, 30, 4)
    Y = X + gaussian(rng, 30, 4)
    interval = bootstrap_interval("linear_cka", X, Y, resamples=50, level=0.9, seed=11)
    draws = np.random.default_rng(11)
    samples = []
    for _ in range(50):
        rows = torch.as_tensor(draws.integers(0, 30, 30))
        samples.append(float(MEASURES["linear_cka"](X[rows], Y[rows])))
    np.testing.assert_array_equal(interval.samples, samples)
    assert (interval.low, interval.high) == tuple(np.quantile(samples, [0.05, 0.95]))
    assert interval.value == pytest.approx(float(MEASURES["linear_cka"](X, Y)), abs=0)


def test_the_bca_interval_covers_the_population_value():
    # As the percentile interval's test: the squared correlation 1 / 2, here by BCa.
    rng = np.random.default_rng(4)
    trials, covered = 100, 0
    for trial in range(trials):
        X = gaussian(rng, 60, 1)
        Y = X + gaussian(rng, 60, 1)
        interval = bootstrap_interval("linear_cka", X, Y, resamples=100, seed=trial, bootstrap_method="BCa")
        covered += interval.low <= 0.5 <= interval.high
    standard_error = np.sqrt(0.95 * 0.05 / trials)
    assert abs(covered / trials - 0.95) < 3 * standard_error


def test_a_bca_interval_of_a_one_sided_bootstrap_is_an_error_naming_why():
    # RBF-CKA's median bandwidth shrinks with repeated inputs: every draw lies above the value.
    rng = np.random.default_rng(0)
    X = gaussian(rng, 30, 5)
    Y = X + gaussian(rng, 30, 5)
    with pytest.raises(ValueError, match=r"BCa interval is undefined here \(100% of the 20 draws lie above"):
        bootstrap_interval("rbf_cka", X, Y, resamples=20, seed=3, bootstrap_method="BCa")


def _wide_pair(rng, n, A, B, noise=2.0):
    """Y and X share k Gaussian factors through A (k x D) and B, each with isotropic noise."""
    Z = rng.standard_normal((n, A.shape[0]))
    return Z @ A + noise * rng.standard_normal((n, A.shape[1])), Z @ B + noise * rng.standard_normal(
        (n, B.shape[1])
    )


def _population_linear_cka(A, B, noise=2.0):
    """tr(S_xy S_yx) / sqrt(tr(S_xx^2) tr(S_yy^2)): linear CKA of the distribution of _wide_pair."""
    S_xx, S_yy = A.T @ A + noise**2 * np.eye(A.shape[1]), B.T @ B + noise**2 * np.eye(B.shape[1])
    S_xy = A.T @ B
    return np.trace(S_xy @ S_xy.T) / np.sqrt(np.trace(S_xx @ S_xx) * np.trace(S_yy @ S_yy))


def test_the_jackknife_covers_a_wide_population_cka():
    # 32 features, 200 inputs: where a bootstrap draw's repeated inputs bias CKA (the next test).
    rng = np.random.default_rng(3)
    A, B = rng.standard_normal((4, 32)), rng.standard_normal((4, 32))
    population = _population_linear_cka(A, B)
    trials, covered = 100, 0
    for trial in range(trials):
        X, Y = _wide_pair(rng, 200, A, B)
        interval = jackknife_interval("linear_cka", X, Y, groups=20, seed=trial)
        assert interval.low < interval.value < interval.high
        covered += interval.low <= population <= interval.high
    standard_error = np.sqrt(0.95 * 0.05 / trials)
    assert abs(covered / trials - 0.95) < 3 * standard_error


def test_bootstrap_draws_of_a_wide_cka_are_biased_upwards():
    # Why the similarity stage's intervals are the jackknife's: a repeated input's kernel entry is
    # its squared norm, far above the entry between two inputs when the features are many.
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((10, 64)), rng.standard_normal((10, 64))
    X, Y = _wide_pair(rng, 400, A, B, noise=3.0)
    drawn = bootstrap_interval("linear_cka", X, Y, resamples=200, seed=1)
    jackknife = jackknife_interval("linear_cka", X, Y, groups=20)
    assert drawn.samples.mean() - drawn.value > 2 * jackknife.standard_error


@pytest.mark.parametrize("name", ["linear_cka", "grelu_cka", "rbf_cka", "svcca", "shape_angular"])
def test_the_matrix_jackknife_equals_each_entrys(name):
    rng = np.random.default_rng(5)
    xs = [gaussian(rng, 40, 4, 2, 2), gaussian(rng, 40, 6)]
    ys = [xs[0] + gaussian(rng, 40, 4, 2, 2), gaussian(rng, 40, 5)]
    matrix = pairwise_jackknife(name, xs, ys, groups=8, seed=2)
    assert matrix.value.shape == matrix.low.shape == (2, 2)
    for i, X in enumerate(xs):
        for j, Y in enumerate(ys):
            entry = jackknife_interval(name, X, Y, groups=8, seed=2)
            assert matrix.value[i, j] == pytest.approx(entry.value, abs=1e-10)
            assert matrix.low[i, j] == pytest.approx(entry.low, abs=1e-10)
            assert matrix.high[i, j] == pytest.approx(entry.high, abs=1e-10)


def test_statistics_name_their_problem():
    X = torch.randn(8, 3)
    with pytest.raises(ValueError, match="unknown measure 'cka'"):
        permutation_test("cka", X, X)
    with pytest.raises(ValueError, match="same inputs: 8 and 7 rows"):
        bootstrap_interval("linear_cka", X, X[:7])
    with pytest.raises(ValueError, match="level must lie in"):
        bootstrap_interval("linear_cka", X, X, level=95)
    with pytest.raises(ValueError, match=r"bootstrap_method must be one of \('percentile', 'basic', 'BCa'\)"):
        bootstrap_interval("linear_cka", X, X, bootstrap_method="bca")
    constant = torch.zeros(8, 3)
    constant[0] = 1.0  # a draw without row 0 is constant: CKA is undefined there
    with pytest.raises(ValueError, match=r"bootstrap_interval: draw \d+ of 50: "):
        bootstrap_interval("linear_cka", constant, X, resamples=50)
    with pytest.raises(ValueError, match="between 2 and N = 8 groups, got 1"):
        jackknife_interval("linear_cka", X, X, groups=1)
    with pytest.raises(ValueError, match="between 2 and N = 8 groups, got 9"):
        pairwise_jackknife("linear_cka", [X], groups=9)
    assert measures.permutation_test is permutation_test
