"""A measure's permutation null and bootstrap interval: the kernel-shuffling shortcut equals
recomputing, the null's p-values are uniform on independent data and tiny for Y = X Q, and the
percentile interval covers a known population value at its level, within standard errors."""

import numpy as np
import pytest
import torch
from scipy import stats

from intertwine import measures
from intertwine.measures import MEASURES, bootstrap_interval, permutation_test


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
        interval = bootstrap_interval("linear_cka", X, Y, resamples=200, seed=trial)
        covered += interval.low <= 0.5 <= interval.high
    standard_error = np.sqrt(0.95 * 0.05 / trials)
    assert abs(covered / trials - 0.95) < 3 * standard_error


def test_statistics_name_their_problem():
    X = torch.randn(8, 3)
    with pytest.raises(ValueError, match="unknown measure 'cka'"):
        permutation_test("cka", X, X)
    with pytest.raises(ValueError, match="same inputs: 8 and 7 rows"):
        bootstrap_interval("linear_cka", X, X[:7])
    with pytest.raises(ValueError, match="level must lie in"):
        bootstrap_interval("linear_cka", X, X, level=95)
    assert measures.permutation_test is permutation_test
