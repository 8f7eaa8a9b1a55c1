"""The zoo as a whole (``intertwine.measures.zoo``): the K x K distance matrix of every measure, the
classical MDS embedding and the Procrustes mean, against netrep's published definitions
(Williams et al. 2021: the angular shape distance arccos(||Xc' Yc||_* / (||Xc|| ||Yc||)), the
Procrustes distance min_Q ||X - Y Q||, the mean minimising the summed squared distances)."""

import itertools
import math

import numpy as np
import pytest
import scipy.linalg
import scipy.spatial.distance
import scipy.stats
import torch

from intertwine import measures
from intertwine.measures import (
    MEAN_MEASURES,
    MEASURES,
    METRICS,
    as_distance,
    classical_mds,
    pairwise_distances,
    procrustes_mean,
)


def zoo(k=5, n=40, channels=4, side=2, seed=0, noise=0.5):
    """K noisy copies of one representation, each with its own channel permutation and positive
    scaling (a G_ReLU transform)."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((n, channels, side, side))
    members = []
    for _ in range(k):
        X = base + noise * rng.standard_normal(base.shape)
        members.append(X[:, rng.permutation(channels)] * rng.uniform(0.5, 2.0, (1, channels, 1, 1)))
    return [torch.as_tensor(X) for X in members]


@pytest.mark.parametrize("measure", sorted(MEASURES))
def test_the_distance_matrix_is_symmetric_with_a_zero_diagonal_and_the_pairs_values(measure):
    reps = zoo(k=4, n=60, channels=3)
    D = pairwise_distances(reps, measure)
    assert D.shape == (4, 4)
    np.testing.assert_array_equal(D, D.T)
    np.testing.assert_array_equal(np.diag(D), 0.0)
    assert (D >= 0).all()
    for i, j in itertools.combinations(range(4), 2):
        one = MEASURES[measure](reps[i], reps[j])
        if measure == "pwcca":  # weighted by one side: both directions averaged
            one = (one + MEASURES[measure](reps[j], reps[i])) / 2
            assert D[i, j] == pytest.approx(1 - one, abs=1e-10)
        else:
            assert D[i, j] == pytest.approx(float(as_distance(one, measure)), abs=1e-10)


@pytest.mark.parametrize("measure", METRICS)
def test_the_metric_measures_satisfy_the_triangle_inequality(measure):
    # unrelated representations as well as near ones: the inequality must hold between both
    reps = zoo(k=4, n=60, channels=3, seed=1, noise=0.4) + zoo(k=4, n=60, channels=3, seed=2, noise=3.0)
    D = pairwise_distances(reps, measure)
    for i, j, k in itertools.permutations(range(len(reps)), 3):
        assert D[i, k] <= D[i, j] + D[j, k] + 1e-12, (i, j, k)


def test_the_shape_and_procrustes_distances_are_netreps_definitions():
    X, Y, Z = (R.flatten(1).numpy() for R in zoo(k=3, n=30, channels=3, seed=3))
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)
    nuclear = np.linalg.svd(Xc.T @ Yc, compute_uv=False).sum()
    angular = math.acos(nuclear / (np.linalg.norm(Xc) * np.linalg.norm(Yc)))
    euclidean = math.sqrt(np.linalg.norm(Xc) ** 2 + np.linalg.norm(Yc) ** 2 - 2 * nuclear)
    assert pairwise_distances([X, Y], "shape_angular")[0, 1] == pytest.approx(angular, abs=1e-10)
    assert pairwise_distances([X, Y], "shape_euclidean")[0, 1] == pytest.approx(euclidean, rel=1e-10)
    # orthogonal Procrustes: min_Q ||X / |X| - Y Q / |Y||| (channels as columns, no centring)
    Xn, Zn = X / np.linalg.norm(X), Z / np.linalg.norm(Z)
    Q, _ = scipy.linalg.orthogonal_procrustes(Zn, Xn)
    expected = np.linalg.norm(Xn - Zn @ Q)
    got = pairwise_distances([X, Z], "orthogonal_procrustes")[0, 1]
    assert got == pytest.approx(expected, abs=1e-10)


def test_the_cka_distance_is_the_angle_between_the_kernels():
    X, Y = zoo(k=2, n=30, seed=4)
    value = measures.linear_cka(X, Y)
    assert pairwise_distances([X, Y], "linear_cka")[0, 1] == pytest.approx(math.acos(value), abs=1e-12)


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_mds_reproduces_the_distances_of_points_in_as_many_dimensions(dims):
    rng = np.random.default_rng(dims)
    points = rng.standard_normal((7, dims)) * [3.0, 1.0, 0.5][:dims]
    D = scipy.spatial.distance.squareform(scipy.spatial.distance.pdist(points))
    embedding = classical_mds(D, dims)
    found = scipy.spatial.distance.squareform(scipy.spatial.distance.pdist(embedding.coordinates))
    np.testing.assert_allclose(found, D, atol=1e-10)
    assert embedding.explained == pytest.approx(1.0)
    np.testing.assert_allclose(embedding.coordinates.mean(0), 0.0, atol=1e-12)
    # points in the plane embedded in one dimension keep less than the whole
    if dims == 2:
        assert classical_mds(D, 1).explained < 1.0


def test_mds_rejects_what_is_no_distance_matrix():
    with pytest.raises(ValueError, match="symmetric"):
        classical_mds(np.array([[0.0, 1.0], [2.0, 0.0]]))
    with pytest.raises(ValueError, match="zero diagonal"):
        classical_mds(np.array([[1.0, 1.0], [1.0, 0.0]]))
    with pytest.raises(ValueError, match="dims"):
        classical_mds(np.zeros((2, 2)), 3)


@pytest.mark.parametrize("measure", MEAN_MEASURES)
def test_the_procrustes_mean_is_no_farther_than_any_member_and_is_what_the_measure_sees(measure):
    reps = zoo(k=5, n=40, channels=4, seed=5)
    D = pairwise_distances(reps, measure)
    found = procrustes_mean(reps, measure)
    assert found.converged
    assert found.objective <= (D**2).sum(1).min() + 1e-12
    # well below: for a cloud of points the centre's summed squares are about half a member's
    assert found.objective < 0.75 * (D**2).sum(1).min()
    # the distances it reports are the measure's own, to the mean as a representation
    own = [as_distance(MEASURES[measure](found.mean, X), measure) for X in reps]
    np.testing.assert_allclose(found.distances, own, atol=1e-10)
    assert found.objective == pytest.approx((found.distances**2).sum())


@pytest.mark.parametrize("measure", ["shape_euclidean", "shape_angular"])
def test_the_mean_of_two_is_their_midpoint(measure):
    X, Y = zoo(k=2, n=30, seed=6)
    d = pairwise_distances([X, Y], measure)[0, 1]
    found = procrustes_mean([X, Y], measure)
    np.testing.assert_allclose(found.distances, [d / 2, d / 2], rtol=1e-7)


def rotated_copies(k, seed=7):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((20, 5, 2, 2))
    copies = [X]
    for _ in range(k - 1):
        Q = scipy.stats.ortho_group.rvs(5, random_state=rng)
        copies.append(np.einsum("ncp,cd->ndp", X.reshape(20, 5, 4), Q).reshape(X.shape))
    return X, copies


@pytest.mark.parametrize("measure", ["orthogonal_procrustes", "shape_euclidean", "shape_angular"])
def test_rotated_copies_are_at_distance_zero_and_their_mean_is_the_representation(measure):
    X, copies = rotated_copies(4)
    assert pairwise_distances(copies, measure).max() < 1e-6
    found = procrustes_mean(copies, measure)
    assert found.distances.max() < 1e-6 and found.converged
    # the mean is X up to a rotation (and the scale the measure ignores)
    assert as_distance(MEASURES[measure](found.mean, X), measure) < 1e-6
    if measure == "shape_euclidean":
        Xc = X.reshape(20, -1) - X.reshape(20, -1).mean(0)
        assert float(torch.linalg.norm(found.mean)) == pytest.approx(np.linalg.norm(Xc))


def test_channel_permuted_and_scaled_copies_have_a_grelu_mean_at_distance_zero():
    X = zoo(k=1, n=30, seed=8, noise=0.0)[0]
    rng = np.random.default_rng(8)
    copies = [X[:, rng.permutation(4)] * torch.as_tensor(rng.uniform(0.2, 5, (1, 4, 1, 1))) for _ in range(4)]
    found = procrustes_mean(copies, "grelu_procrustes")
    assert found.distances.max() < 1e-7
    assert measures.grelu_procrustes(found.mean, X) == pytest.approx(1.0, abs=1e-7)
    assert found.mean.shape == X.shape


def test_errors_name_the_problem():
    reps = zoo(k=3)
    with pytest.raises(ValueError, match="no Procrustes mean.*orthogonal_procrustes"):
        procrustes_mean(reps, "linear_cka")
    with pytest.raises(ValueError, match="unknown measure"):
        pairwise_distances(reps, "cosine")
    with pytest.raises(ValueError, match="at least 2"):
        pairwise_distances(reps[:1], "linear_cka")
    with pytest.raises(ValueError, match="same samples"):
        procrustes_mean([reps[0], reps[1][:10]], "orthogonal_procrustes")
    with pytest.raises(measures.ConstantRepresentationError, match=r"representations\[1\]"):
        procrustes_mean([reps[0], torch.ones_like(reps[1])], "orthogonal_procrustes")
