"""Representation similarity measures (paper section 5, appendix D.7): invariances, reference
formulas, blocked and accumulated computations against one-shot ones, errors."""

import math
import warnings
from itertools import permutations

import numpy as np
import pytest
import scipy.linalg
import torch

from intertwine.groups import random_grelu, random_orthogonal
from intertwine.measures import (
    MEASURES,
    ConstantRepresentationError,
    ProcrustesAccumulator,
    channel_normalized_linear_cka,
    grelu_cka,
    grelu_procrustes,
    laplace_cka,
    linear_cka,
    max_kernel,
    orthogonal_procrustes,
    unbiased_hsic,
)
from intertwine.measures.layerwise import PREPARED

F64 = torch.float64
CKAS = ["grelu_cka", "linear_cka", "laplace_cka", "rbf_cka", "channel_normalized_linear_cka"]
PROCRUSTES = ["grelu_procrustes", "orthogonal_procrustes"]

# Channel transformations each measure claims invariance to (docstrings of intertwine.measures).
GROUPS = {
    "grelu_procrustes": ["grelu"],
    "orthogonal_procrustes": ["orthogonal", "isotropic"],
    "grelu_cka": ["grelu", "monomial", "translation"],
    "linear_cka": ["orthogonal", "isotropic", "translation"],
    "laplace_cka": ["grelu", "monomial", "translation"],
    "channel_normalized_linear_cka": ["grelu", "monomial", "translation"],
    "gate_cka": ["grelu", "isotropic"],  # signs matter: not monomials, not translations
    "rbf_cka": ["orthogonal", "isotropic", "translation"],
}
# The measures of channels above; the CCA and shape measures (intertwine.measures.cca and .shape, also in
# MEASURES) are tested in test_alignment.py, and every measure by pairwise in test_similarity_many.py.
CHANNEL_MEASURES = list(GROUPS)
# A transformation outside each measure's group, and a bound the similarity of (X, X A) must stay
# below on 12 channels of comparable scale (``features(seed, c=12, spread=0)``). The maxima observed
# over seeds 0-39 are quoted; every bound leaves a margin >= 0.05. Comparable channel scales matter
# for the CKAs: when one channel dominates the variance, linear CKA is ~1 for any transformation
# that keeps it dominant. channel_normalized_linear_cka gets a general linear map because a random
# rotation of equal-scale channels barely changes their norms (observed 0.976), so the normalisation
# it adds to the rotation-invariant linear CKA hardly matters.
OUTSIDE = {
    "grelu_procrustes": ("orthogonal", 0.65),  # observed max 0.556
    "orthogonal_procrustes": ("grelu", 0.90),  # observed max 0.816
    "grelu_cka": ("orthogonal", 0.70),  # observed max 0.610
    "linear_cka": ("grelu", 0.90),  # observed max 0.812
    "laplace_cka": ("orthogonal", 0.94),  # observed max 0.887
    "channel_normalized_linear_cka": ("gl", 0.92),  # observed max 0.852
    "gate_cka": ("orthogonal", 0.55),  # observed max 0.466
    "rbf_cka": ("grelu", 0.85),  # observed max 0.789
}


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def transform(X, A):
    """Apply a channel matrix: (X A)_d = sum_c X_c A_cd."""
    return torch.einsum("nchw,cd->ndhw", X, A)


def features(seed=0, n=40, c=6, hw=3, relu=True, spread=1.0, dtype=F64):
    """Activations with correlated channels, ReLU'd (nonnegative) or Gaussian; channel scales are
    lognormal with log-std ``spread``."""
    g = gen(seed)
    z = torch.randn(n, c, hw, hw, generator=g, dtype=F64)
    mix = torch.randn(c, c, generator=g, dtype=F64) / c**0.5 + torch.eye(c, dtype=F64)
    scales = torch.exp(spread * torch.randn(c, generator=g, dtype=F64))
    X = transform(z, mix) * scales[None, :, None, None] + 0.3
    return (X.relu() if relu else X).to(dtype)


def related(X, seed=1):
    """A second representation of the same inputs: a noisy nonlinear function of X."""
    g = gen(seed)
    c = X.shape[1]
    W = torch.randn(c, c, generator=g, dtype=X.dtype) / c**0.5
    noise = 0.3 * torch.randn(X.shape, generator=g, dtype=X.dtype)
    return (transform(X, W) + noise).relu() + 0.1 * X


def element(kind, X, seed):
    """Apply a random element of ``kind`` to the channels of X."""
    g, c = gen(seed), X.shape[1]
    if kind == "grelu":
        return transform(X, random_grelu(c, g, dtype=F64).to(X.dtype))
    if kind == "monomial":
        signs = torch.where(torch.rand(c, generator=g) < 0.5, -1.0, 1.0).to(X.dtype)
        return transform(X, random_grelu(c, g, dtype=F64).to(X.dtype) * signs)
    if kind == "orthogonal":
        return transform(X, random_orthogonal(c, g, dtype=F64).to(X.dtype))
    if kind == "isotropic":
        return X * 3.7
    if kind == "translation":
        return X + 5 * torch.randn(1, c, 1, 1, generator=g, dtype=X.dtype)
    if kind == "gl":
        return transform(X, torch.randn(c, c, generator=g, dtype=X.dtype))
    raise ValueError(kind)


# ---------------------------------------------------------------------------
# Reference transcriptions
# ---------------------------------------------------------------------------


def hsic_loops(K, L):
    """Song et al.'s unbiased HSIC_1, written out with explicit loops."""
    K, L = np.asarray(K, dtype=float), np.asarray(L, dtype=float)
    n = len(K)
    Kt = [[0.0 if i == j else K[i][j] for j in range(n)] for i in range(n)]
    Lt = [[0.0 if i == j else L[i][j] for j in range(n)] for i in range(n)]
    trace = sum(Kt[i][j] * Lt[j][i] for i in range(n) for j in range(n))
    sum_k = sum(Kt[i][j] for i in range(n) for j in range(n))
    sum_l = sum(Lt[i][j] for i in range(n) for j in range(n))
    one_kl_one = sum(Kt[i][j] * Lt[j][m] for i in range(n) for j in range(n) for m in range(n))
    return (trace + sum_k * sum_l / ((n - 1) * (n - 2)) - 2 / (n - 2) * one_kl_one) / (n * (n - 3))


def cka_loops(K, L):
    return hsic_loops(K, L) / np.sqrt(hsic_loops(K, K) * hsic_loops(L, L))


def normalize_channels(X):
    X = X - X.mean(dim=(0, 2, 3), keepdim=True)
    return X / torch.linalg.vector_norm(X, dim=(0, 2, 3), keepdim=True)


def naive_max_kernel(X):
    U = torch.einsum("mchw,nchw->mnc", X, X)  # the full N x N x C tensor
    return U.amax(dim=2)


# ---------------------------------------------------------------------------
# Invariance, identity, margin, range, symmetry
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("relu", [True, False], ids=["relu", "gaussian"])
@pytest.mark.parametrize("measure,kind", [(m, k) for m, kinds in GROUPS.items() for k in kinds])
def test_invariant_under_group(measure, kind, relu):
    f = MEASURES[measure]
    X = features(0, relu=relu)
    Y = related(X)
    reference = f(X, Y)
    assert f(element(kind, X, 2), Y) == pytest.approx(reference, abs=1e-9)
    assert f(element(kind, X, 3), element(kind, Y, 4)) == pytest.approx(reference, abs=1e-9)


@pytest.mark.parametrize("measure,kind", [(m, k) for m, kinds in GROUPS.items() for k in kinds])
def test_one_for_group_element(measure, kind):
    X = features(5)
    assert MEASURES[measure](X, element(kind, X, 6)) == pytest.approx(1.0, abs=1e-7)


@pytest.mark.parametrize("measure", CHANNEL_MEASURES)
def test_below_one_outside_group(measure):
    kind, bound = OUTSIDE[measure]
    values = [
        MEASURES[measure](X, element(kind, X, 10 + seed))
        for seed in range(3)
        for X in [features(seed, c=12, spread=0)]
    ]
    assert max(values) < bound, values


@pytest.mark.parametrize("measure", CHANNEL_MEASURES)
def test_symmetric(measure):
    X = features(7)
    Y = related(X, seed=8)
    assert MEASURES[measure](X, Y) == pytest.approx(MEASURES[measure](Y, X), abs=1e-12)


@pytest.mark.parametrize("measure", PROCRUSTES)
def test_procrustes_in_unit_interval(measure):
    for seed in range(5):
        X = features(seed, relu=seed % 2 == 0)
        for Y in (related(X, seed + 1), features(seed + 20), -X):
            assert 0.0 <= MEASURES[measure](X, Y) <= 1.0


@pytest.mark.parametrize("measure", CKAS)
def test_cka_bounded_and_near_zero_for_independent(measure):
    X, Y = features(0, n=200), features(1, n=200)
    value = MEASURES[measure](X, Y)
    assert -0.1 < value < 0.1  # unbiased HSIC: independent representations give ~0, either sign
    assert MEASURES[measure](X, related(X)) <= 1.0


# ---------------------------------------------------------------------------
# Reference formulas
# ---------------------------------------------------------------------------


def test_unbiased_hsic_matches_loop_transcription():
    g = gen(0)
    A, B = torch.randn(7, 3, generator=g, dtype=F64), torch.randn(7, 5, generator=g, dtype=F64)
    K = A @ A.T + 1.0  # not centred, constant offset
    L = torch.exp(-torch.cdist(B, B))  # nonlinear, with a unit diagonal
    assert unbiased_hsic(K, L) == pytest.approx(hsic_loops(K, L), rel=1e-12, abs=1e-14)
    assert unbiased_hsic(K.numpy(), L.numpy()) == pytest.approx(hsic_loops(K, L), rel=1e-12)
    # Block sizes down to one row give the same sums.
    assert unbiased_hsic(K, L, max_bytes=1) == pytest.approx(hsic_loops(K, L), rel=1e-12)


@pytest.mark.parametrize("method", ["gram", "features", "auto"])
def test_linear_cka_matches_gram_of_raw_features(method):
    X, Y = features(0, n=9), features(1, n=9, c=4)
    K = X.reshape(9, -1) @ X.reshape(9, -1).T  # uncentred: the unbiased HSIC ignores translations
    L = Y.reshape(9, -1) @ Y.reshape(9, -1).T
    assert linear_cka(X, Y, method=method) == pytest.approx(cka_loops(K, L), rel=1e-10)


def test_linear_cka_routes_agree_at_scale():
    X, Y = features(0, n=300, c=8), features(1, n=300, c=5, relu=False)
    Y = Y + related(X, 3)[:, :5]
    gram = linear_cka(X, Y, method="gram")
    assert linear_cka(X, Y, method="features") == pytest.approx(gram, abs=1e-12)
    assert linear_cka(X, Y, method="features", max_bytes=1) == pytest.approx(gram, abs=1e-12)


def test_grelu_cka_matches_naive_formula():
    X, Y = features(0, n=8), related(features(0, n=8))
    K, L = naive_max_kernel(normalize_channels(X)), naive_max_kernel(normalize_channels(Y))
    assert grelu_cka(X, Y) == pytest.approx(cka_loops(K, L), rel=1e-10)


def test_channel_normalized_linear_cka_matches_naive_formula():
    X, Y = features(0, n=8), related(features(0, n=8))
    Xn, Yn = normalize_channels(X).reshape(8, -1), normalize_channels(Y).reshape(8, -1)
    expected = cka_loops(Xn @ Xn.T, Yn @ Yn.T)
    assert channel_normalized_linear_cka(X, Y) == pytest.approx(expected, rel=1e-10)


def test_laplace_cka_matches_naive_formula_and_median_heuristic():
    X, Y = features(0, n=8), related(features(0, n=8))
    Xn, Yn = normalize_channels(X).reshape(8, -1), normalize_channels(Y).reshape(8, -1)
    Dx, Dy = torch.cdist(Xn, Xn, p=1), torch.cdist(Yn, Yn, p=1)
    iu = torch.triu_indices(8, 8, 1)
    mx, my = np.median(Dx[iu[0], iu[1]].numpy()), np.median(Dy[iu[0], iu[1]].numpy())
    expected = cka_loops(torch.exp(-Dx / mx), torch.exp(-Dy / my))
    assert laplace_cka(X, Y) == pytest.approx(expected, rel=1e-10)
    assert laplace_cka(X, Y, bandwidth=(mx, my)) == pytest.approx(expected, rel=1e-10)
    fixed = cka_loops(torch.exp(-Dx / 2.0), torch.exp(-Dy / 2.0))
    assert laplace_cka(X, Y, bandwidth=2.0) == pytest.approx(fixed, rel=1e-10)


def test_grelu_procrustes_matches_brute_force_over_permutations():
    X, Y = features(0, n=10, c=5), related(features(0, n=10, c=5))
    Xn = (X / torch.linalg.vector_norm(X, dim=(0, 2, 3), keepdim=True)).transpose(0, 1).reshape(5, -1).T
    Yn = (Y / torch.linalg.vector_norm(Y, dim=(0, 2, 3), keepdim=True)).transpose(0, 1).reshape(5, -1).T
    delta = min((Xn - Yn[:, list(p)]).norm().item() for p in permutations(range(5)))
    assert grelu_procrustes(X, Y) == pytest.approx(1 - delta / (2 * 5**0.5), abs=1e-12)


def test_orthogonal_procrustes_matches_scipy():
    X, Y = features(0, n=10, c=5), related(features(0, n=10, c=5))
    Xm = X.transpose(0, 1).reshape(5, -1).T.numpy()
    Ym = Y.transpose(0, 1).reshape(5, -1).T.numpy()
    Xm, Ym = Xm / np.linalg.norm(Xm), Ym / np.linalg.norm(Ym)
    Q, _ = scipy.linalg.orthogonal_procrustes(Ym, Xm)
    delta = np.linalg.norm(Xm - Ym @ Q)
    assert orthogonal_procrustes(X, Y) == pytest.approx(1 - delta / 2, abs=1e-12)


# ---------------------------------------------------------------------------
# Blocked and accumulated computations
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [F64, torch.float32])
def test_blocked_max_kernel_equals_naive(dtype):
    X = normalize_channels(features(0, n=13, c=5, relu=False)).to(dtype)
    expected = naive_max_kernel(X.to(F64))
    tol = 1e-12 if dtype == F64 else 1e-6
    for rows, channels in [(1, 1), (2, 3), (4, 5), (5, 2), (13, 5), (20, 7)]:
        K = max_kernel(X, block_rows=rows, block_channels=channels)
        torch.testing.assert_close(K.to(F64), expected, atol=tol, rtol=0)
        assert torch.equal(K, K.T)
    # Block sizes chosen from the byte budget: everything, one row, one row of one channel.
    for max_bytes in (2**30, 5 * 13 * 8, 1):
        torch.testing.assert_close(max_kernel(X, max_bytes=max_bytes).to(F64), expected, atol=tol, rtol=0)


def test_grelu_cka_independent_of_block_size():
    X, Y = features(0, n=30), related(features(0, n=30))
    reference = grelu_cka(X, Y)
    for max_bytes in (1, 1000, 30 * 6 * 8 * 3):
        assert grelu_cka(X, Y, max_bytes=max_bytes) == pytest.approx(reference, abs=1e-13)


def test_accumulator_over_batches_equals_one_shot():
    X, Y = features(0, n=37), related(features(0, n=37))
    acc = ProcrustesAccumulator()
    for start, stop in [(0, 1), (1, 10), (10, 11), (11, 37)]:
        acc.update(X[start:stop], Y[start:stop].numpy())
    assert acc.n_samples == 37
    assert acc.grelu() == pytest.approx(grelu_procrustes(X, Y), abs=1e-13)
    assert acc.orthogonal() == pytest.approx(orthogonal_procrustes(X, Y), abs=1e-13)
    # The one-shot functions batch internally too: one sample at a time changes nothing.
    assert grelu_procrustes(X, Y, max_bytes=1) == pytest.approx(acc.grelu(), abs=1e-13)
    assert orthogonal_procrustes(X, Y, max_bytes=1) == pytest.approx(acc.orthogonal(), abs=1e-13)


def test_accumulator_rejects_inconsistent_batches():
    acc = ProcrustesAccumulator()
    with pytest.raises(ValueError, match="update"):
        acc.grelu()
    acc.update(torch.rand(4, 3, 2, 2), torch.rand(4, 3, 2, 2))
    with pytest.raises(ValueError, match="earlier batches"):
        acc.update(torch.rand(4, 5, 2, 2), torch.rand(4, 3, 2, 2))


# ---------------------------------------------------------------------------
# Inputs: dtypes, numpy, 2-D features, dead channels, differing widths
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("measure", CHANNEL_MEASURES)
def test_float32_agrees_with_float64(measure):
    X, Y = features(0, n=60), related(features(0, n=60))
    exact = MEASURES[measure](X, Y)
    assert MEASURES[measure](X.float(), Y.float()) == pytest.approx(exact, abs=1e-6)


@pytest.mark.parametrize("measure", CHANNEL_MEASURES)
def test_numpy_and_2d_inputs(measure):
    X, Y = features(0), related(features(0))
    f = MEASURES[measure]
    assert f(X.numpy(), Y.numpy()) == pytest.approx(f(X, Y), abs=1e-12)
    X2, Y2 = X[:, :, 0, 0], Y[:, :, 0, 0]  # (N, C) features, e.g. after global pooling
    assert f(X2, Y2) == pytest.approx(f(X2[:, :, None, None], Y2[:, :, None, None]), abs=1e-12)
    assert f(X2.numpy(), element("grelu", X2[:, :, None, None], 1)[:, :, 0, 0]) <= 1.0


@pytest.mark.parametrize("measure", CHANNEL_MEASURES)
def test_dead_channels_do_not_give_nan(measure):
    X = features(0)
    X[:, 2] = 0  # a dead ReLU channel
    value = MEASURES[measure](X, element("grelu", X, 1))
    assert np.isfinite(value)
    if measure not in ("orthogonal_procrustes", "linear_cka", "rbf_cka"):  # not G_ReLU-invariant
        assert value == pytest.approx(1.0, abs=1e-7)


def constant_representations(X):
    """Representations the same for every sample: all zero (every unit dead), one value, and one
    sample's features repeated (varying over channels and positions, not over the inputs)."""
    return {
        "zeros": torch.zeros_like(X),
        "two": torch.full_like(X, 2.0),
        "repeated": X[:1].expand_as(X).clone(),
    }


@pytest.mark.parametrize("measure", CHANNEL_MEASURES)
@pytest.mark.parametrize("kind", ["zeros", "two", "repeated"])
def test_constant_representation_is_an_error_naming_the_argument(measure, kind):
    """One behaviour for every measure: the CKAs were 0/0 = NaN, G_ReLU Procrustes of zeros 0.5,
    orthogonal Procrustes of zeros an error and of the others a number."""
    X = features(0)
    constant = constant_representations(X)[kind]
    with pytest.raises(
        ConstantRepresentationError,
        match=r"^Y is the same for each of its 40 samples.*"
        f"{measure} is undefined",
    ):
        MEASURES[measure](X, constant)
    with pytest.raises(ConstantRepresentationError, match="^X is the same") as caught:
        MEASURES[measure](constant, X)
    assert isinstance(caught.value, ValueError) and caught.value.which == "X"


def test_one_sample_is_constant_only_when_zero():
    """Procrustes takes one sample (its positions are the data); only all zeros is constant then."""
    X = features(0)[:1]
    assert 0 <= grelu_procrustes(X, related(X)) <= 1
    with pytest.raises(ConstantRepresentationError, match="each of its 1 samples"):
        orthogonal_procrustes(X, torch.zeros_like(X))


def test_constant_kernel_and_accumulator():
    from intertwine.measures import cka_kernel, kernel_cka

    X = features(0)
    with pytest.raises(ConstantRepresentationError, match="kernel L is constant"):
        kernel_cka(cka_kernel("linear_cka", X), torch.ones(40, 40, dtype=F64))
    with pytest.raises(ConstantRepresentationError, match="X is the same"):
        cka_kernel("grelu_cka", torch.zeros_like(X))
    acc = ProcrustesAccumulator()
    zeros = torch.zeros_like(X)
    acc.update(X[:20], zeros[:20]).update(X[20:], zeros[20:])  # constant over both batches
    assert acc.constant() == "Y"
    with pytest.raises(ConstantRepresentationError, match="Y is the same for each of its 40 samples"):
        acc.grelu()
    varying = ProcrustesAccumulator().update(X[:1], related(X)[:1]).update(X[1:2], related(X)[1:2])
    assert varying.constant() is None  # each batch of one sample is constant, the two are not


def test_site_measures_name_the_model_and_site():
    from intertwine import models
    from intertwine.compare import site_cka, site_procrustes

    torch.manual_seed(0)
    spec = {"arch": "myrtle", "width_multiplier": 0.125}
    alive, dead = models.build(spec).eval(), models.build(spec).eval()
    with torch.no_grad():  # bn2 outputs -1: every unit of act2 is dead on every input
        dead.bn2.weight.zero_(), dead.bn2.bias.fill_(-1.0)
    images = torch.randint(0, 256, (12, 3, 16, 16), dtype=torch.uint8, generator=gen(0))
    mean, std = torch.full((3,), 0.5), torch.full((3,), 0.25)
    with pytest.raises(
        ConstantRepresentationError,
        match="^model b at site act2: its representation is the same for each of its 12 samples",
    ) as caught:
        site_procrustes(alive, dead, images, ["act1", "act2"], mean, std, 5)
    assert (caught.value.which, caught.value.site) == ("b", "act2")
    with pytest.raises(ConstantRepresentationError, match="^model a at site act2:.*grelu_cka is undefined"):
        site_cka("grelu_cka", dead, alive, images, ["act1", "act2"], mean, std, 5)


@pytest.mark.parametrize("measure", ["orthogonal_procrustes"] + CKAS)
def test_different_channel_counts(measure):
    X = features(0, c=6)
    value = MEASURES[measure](X, related(X)[:, :4])
    assert np.isfinite(value) and value < 1.0


def test_orthogonal_procrustes_with_padding_is_one_for_embedding():
    X = features(0, c=4)
    Q = random_orthogonal(6, gen(1), dtype=F64)[:4]  # isometric embedding R^4 -> R^6
    assert orthogonal_procrustes(X, transform(X, Q)) == pytest.approx(1.0, abs=1e-7)
    assert linear_cka(X, transform(X, Q)) == pytest.approx(1.0, abs=1e-12)


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("measure", CHANNEL_MEASURES)
def test_mismatched_samples(measure):
    with pytest.raises(ValueError, match="same samples"):
        MEASURES[measure](features(0, n=10), features(1, n=11))


@pytest.mark.parametrize("measure", CKAS)
def test_too_few_samples(measure):
    X = features(0, n=3)
    with pytest.raises(ValueError, match="at least 4 samples"):
        MEASURES[measure](X, X)


def test_unbiased_hsic_errors():
    with pytest.raises(ValueError, match="at least 4 samples"):
        unbiased_hsic(torch.eye(3), torch.eye(3))
    with pytest.raises(ValueError, match="same shape"):
        unbiased_hsic(torch.eye(5), torch.eye(6))


def test_grelu_procrustes_needs_equal_channels():
    with pytest.raises(ValueError, match="same number of channels"):
        grelu_procrustes(features(0, c=6), features(0, c=5))


def test_procrustes_needs_equal_positions():
    with pytest.raises(ValueError, match="positions"):
        orthogonal_procrustes(features(0, hw=3), features(0, hw=2))


def test_bad_inputs():
    X = features(0)
    with pytest.raises(ValueError, match="NaN"):
        grelu_cka(X, torch.full_like(X, float("nan")))
    with pytest.raises(ValueError, match="shape"):
        linear_cka(torch.ones(10), torch.ones(10))
    with pytest.raises(ValueError, match="same for each of its"):
        orthogonal_procrustes(X, torch.zeros_like(X))
    with pytest.raises(ValueError, match="bandwidth"):
        laplace_cka(X, X, bandwidth=0.0)


def test_registry():
    assert set(GROUPS) == set(OUTSIDE) == set(MEASURES) - set(PREPARED)
    for name, f in MEASURES.items():
        assert f.__name__ == name
        assert "Invariance group" in f.__doc__ or name in PREPARED


# --- kernels for the heatmaps and the workflow's per-pair entry --------------------------------


@pytest.mark.parametrize(
    "measure", ["grelu_cka", "linear_cka", "laplace_cka", "rbf_cka", "channel_normalized_linear_cka"]
)
def test_kernel_route_equals_the_measure(measure):
    from intertwine.measures import MEASURES, cka_kernel, kernel_cka

    g = torch.Generator().manual_seed(3)
    X = torch.relu(torch.randn(40, 6, 3, 3, generator=g, dtype=torch.float64))
    Y = torch.relu(torch.randn(40, 5, 3, 3, generator=g, dtype=torch.float64))
    via_kernels = kernel_cka(cka_kernel(measure, X), cka_kernel(measure, Y))
    assert via_kernels == pytest.approx(MEASURES[measure](X, Y), abs=1e-12)


def test_cka_kernel_rejects_unknown_measures():
    from intertwine.measures import cka_kernel

    with pytest.raises(ValueError, match="unknown CKA measure 'svcca'"):
        cka_kernel("svcca", torch.randn(8, 3))


def test_similarity_pair_of_a_model_with_its_grelu_transform(tmp_path, tiny_shapes_dir):
    """A zoo member against itself acted on by G_ReLU elements: every G_ReLU measure is 1 at
    every site, orthogonal Procrustes too (G_ReLU elements with unit scales are orthogonal)."""
    from intertwine import models
    from intertwine.workflow.job import Job
    from intertwine.workflow.stages.similarity.job import similarity_pair
    from intertwine.symmetry import act_on_weights, random_elements
    from intertwine.workflow.zoo import CHECKPOINT_FORMAT, save_checkpoint

    torch.manual_seed(0)
    spec = {"arch": "myrtle", "width_multiplier": 0.125}
    model = models.build(spec).eval()
    twin = act_on_weights(model, random_elements(model, "permutation", torch.Generator().manual_seed(1)))
    paths = []
    for seed, m in enumerate((model, twin)):
        path = tmp_path / f"seed{seed}.pt"
        save_checkpoint(
            {
                "format": CHECKPOINT_FORMAT,
                "state_dict": m.state_dict(),
                "spec": models.normalize_spec(spec),
                "variant": "myrtle",
                "seed": seed,
            },
            path,
        )
        paths.append(str(path))
    block = {
        "samples": 48,
        "batch_size": 20,
        "procrustes_measures": ["grelu_procrustes", "orthogonal_procrustes"],
        "cka_measures": ["grelu_cka", "linear_cka"],
    }
    table = similarity_pair(
        Job("cpu", tiny_shapes_dir, log=lambda _: None), *paths, 0, block, procrustes=True, cka=True
    )
    assert set(table["measure"]) == {"grelu_procrustes", "orthogonal_procrustes", "grelu_cka", "linear_cka"}
    assert (table["n_samples"] == 48).all() and (table[["seed_a", "seed_b"]].to_numpy() == [0, 1]).all()
    cka = table[table["measure"] == "grelu_cka"]
    assert len(cka) == 4 * 4  # every pair of Myrtle's four sites
    diagonal = table[table["site_a"] == table["site_b"]]
    assert np.allclose(diagonal["value"], 1, atol=1e-5)
    off = cka[cka["site_a"] != cka["site_b"]]
    assert (off["value"] < 0.999).all()
    assert table[["low", "high"]].isna().all().all()  # no intervals asked for

    # similarity.intervals: the same values, each CKA cell with its jackknife interval around it;
    # at matching sites every left-out group still gives exactly 1, so the interval is [1, 1].
    jackknifed = similarity_pair(
        Job("cpu", tiny_shapes_dir, log=lambda _: None),
        *paths,
        0,
        block | {"intervals": True, "jackknife_groups": 4},
        procrustes=True,
        cka=True,
    )
    np.testing.assert_allclose(jackknifed["value"], table["value"], atol=1e-10)
    cells = jackknifed[jackknifed["measure"].str.endswith("cka")]
    assert (cells["low"] <= cells["value"] + 1e-12).all() and (cells["value"] <= cells["high"] + 1e-12).all()
    matched = cells[cells["site_a"] == cells["site_b"]]
    np.testing.assert_allclose(matched[["low", "high"]], 1, atol=1e-5)
    apart = cells[cells["site_a"] != cells["site_b"]]
    assert (apart["high"] > apart["low"]).all()
    assert (
        jackknifed.loc[jackknifed["measure"].str.endswith("procrustes"), ["low", "high"]].isna().all().all()
    )


def test_similarity_pair_names_the_member_and_site_of_a_constant_representation(tmp_path, tiny_shapes_dir):
    from intertwine import models
    from intertwine.workflow.job import Job
    from intertwine.workflow.stages.similarity.job import similarity_pair
    from intertwine.workflow.zoo import CHECKPOINT_FORMAT, save_checkpoint

    torch.manual_seed(0)
    spec = {"arch": "myrtle", "width_multiplier": 0.125}
    alive, dead = models.build(spec).eval(), models.build(spec).eval()
    with torch.no_grad():
        dead.bn3.weight.zero_(), dead.bn3.bias.fill_(-1.0)  # act3 is 0 on every input
    paths = []
    for seed, model in enumerate((alive, dead)):
        paths.append(str(tmp_path / f"seed{seed}.pt"))
        save_checkpoint(
            {
                "format": CHECKPOINT_FORMAT,
                "state_dict": model.state_dict(),
                "spec": models.normalize_spec(spec),
                "variant": "myrtle",
                "seed": seed,
            },
            paths[-1],
        )
    job = Job("cpu", tiny_shapes_dir, log=lambda _: None)
    with pytest.raises(
        ValueError,
        match=r"myrtle pair 0: model b at site act3: its representation is the same "
        r"for each of its 48 samples.*Check .*seed1\.pt \(if it is dead at act3, "
        r"delete it.*similarity\.samples",
    ):
        similarity_pair(job, *paths, 0, {"samples": 48}, procrustes=True, cka=False)
    with pytest.raises(ValueError, match=r"model b at site act3:.*linear_cka is undefined.*seed1\.pt"):
        similarity_pair(
            job, *paths, 0, {"samples": 48, "cka_measures": ["linear_cka"]}, procrustes=False, cka=True
        )


# --- minimum samples and scale safety (issue 33) ------------------------------------------------

from intertwine import measures  # noqa: E402


def _pair(n, channels=6, positions=(), seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, channels, *positions, generator=g, dtype=F64)
    Y = X + 0.5 * torch.randn(n, channels, *positions, generator=g, dtype=F64)
    return X, Y


@pytest.mark.parametrize("measure", sorted(measures.MIN_SAMPLES))
def test_each_measure_has_one_minimum_sample_count(measure):
    """Below its minimum a measure is undefined or the same for any data: an error naming the
    minimum, from the one-pair function and from ``pairwise`` alike; at the minimum, a value."""
    need = measures.MIN_SAMPLES[measure]
    assert need == (2 if "procrustes" in measure else 4 if "cka" in measure else 3)
    X, Y = _pair(need - 1)
    pattern = rf"{measure} needs at least {need} (samples|rows).*got N = {need - 1}"
    if measure in ("svcca", "pwcca", "shape_angular", "shape_euclidean"):
        pattern = rf"needs at least {need} samples \(inputs\), got N = {need - 1}"
    with pytest.raises(ValueError, match=pattern):
        measures.MEASURES[measure](X, Y)
    with pytest.raises(ValueError, match=pattern):
        measures.pairwise(measure, [X], [Y])
    X, Y = _pair(need, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # SVCCA at N <= width
        assert math.isfinite(measures.MEASURES[measure](X, Y))


def test_procrustes_counts_rows_and_the_accumulators_enforce_the_minimum():
    X, Y = _pair(1)
    with pytest.raises(ValueError, match="orthogonal_procrustes needs at least 2 rows"):
        orthogonal_procrustes(X, Y)  # one vector rotates onto any other: 1 for any data
    acc = ProcrustesAccumulator().update(X, Y)
    with pytest.raises(ValueError, match="grelu_procrustes needs at least 2 rows"):
        acc.grelu()
    X, Y = _pair(1, positions=(3, 3))  # one image: its positions are the rows
    assert 0 < orthogonal_procrustes(X, Y) < 1
    from intertwine.measures import LinearCKAAccumulator

    X, Y = _pair(3)
    with pytest.raises(ValueError, match="linear_cka needs at least 4 samples"):
        LinearCKAAccumulator().update(X[:2], Y[:2]).update(X[2:], Y[2:]).value()


@pytest.mark.parametrize("scale", [1e-200, 1e200, 1e-300, 1e300])
@pytest.mark.parametrize("measure", sorted(measures.MEASURES))
def test_measures_are_right_at_extreme_scales(measure, scale):
    """Rescaled before squaring: the value at scale 1e+-200 (and 1e+-300) is the value at 1 (the
    euclidean shape distance scaled by it). Width 8 against 40 samples keeps CCA well posed (PWCCA
    at widths whose subspaces must intersect has tied correlations of 1 and arbitrary weights)."""
    X, Y = _pair(40, channels=4, positions=(2,))
    f = measures.MEASURES[measure]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = f(X, Y)
        value = f(X * scale, Y * scale)
    if measure == "shape_euclidean":
        value /= scale
    assert value == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert 0.05 < abs(expected)  # not a degenerate value that any scale would give


@pytest.mark.parametrize("scales", [(1e200, 1e-200), (1e-150, 1.0)])
def test_accumulators_and_pairwise_are_scale_safe(scales):
    from intertwine.measures import LinearCKAAccumulator

    X, Y = _pair(40, positions=(2, 2))
    sx, sy = scales
    acc, lin = ProcrustesAccumulator(), LinearCKAAccumulator()
    for start in range(0, 40, 7):
        acc.update(X[start : start + 7] * sx, Y[start : start + 7] * sy)
        lin.update(X[start : start + 7] * sx, Y[start : start + 7] * sy)
    assert acc.grelu() == pytest.approx(grelu_procrustes(X, Y), rel=1e-12)
    assert acc.orthogonal() == pytest.approx(orthogonal_procrustes(X, Y), rel=1e-12)
    assert lin.value() == pytest.approx(linear_cka(X, Y), rel=1e-10)
    for measure in ("linear_cka", "grelu_cka", "shape_angular"):
        matrix = measures.pairwise(measure, [X * sx, X], [Y * sy])
        assert matrix[0, 0] == pytest.approx(matrix[1, 0], rel=1e-10)


def test_svcca_warns_when_samples_do_not_exceed_the_width():
    from intertwine.measures.cca import pwcca, svcca

    X, Y = _pair(20, channels=24)  # width 24 >= N = 20: saturates
    with pytest.warns(RuntimeWarning, match=r"SVCCA on N = 20 samples of X, whose width .* is 24 >= N"):
        svcca(X, Y)
    with pytest.warns(RuntimeWarning, match="PWCCA on N = 20 samples"):
        pwcca(X, Y)
    X, Y = _pair(60, channels=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        svcca(X, Y)  # N well above the width: no warning


def test_summary_and_figure_carry_the_papers_tables_with_their_printed_pm():
    """Table 2 beside a Myrtle's Procrustes, Table 4 beside the constant-width Myrtle's, each with
    its printed ± (``paper.reported_procrustes``)."""
    import pandas as pd

    from intertwine.models import normalize_spec
    from intertwine.workflow.paper import reported_procrustes
    from intertwine.workflow.stages.similarity.figures import similarity_procrustes, similarity_summary

    specs = {"myrtle": {"arch": "myrtle"}, "myrtle_cw": {"arch": "myrtle", "constant_width": 512}}
    paper = {name: reported_procrustes(normalize_spec(spec)) for name, spec in specs.items()}
    rows = [
        {"variant": v, "pair": p, "site_a": s, "site_b": s, "measure": m, "value": 0.5 + 0.01 * p}
        for v in specs
        for p in range(2)
        for s in ("act1", "act3")
        for m in ("grelu_procrustes", "orthogonal_procrustes")
    ]
    table = pd.DataFrame(rows)
    summary = similarity_summary(table, paper).set_index(["variant", "site", "measure"])
    assert summary.loc[("myrtle", "act1", "grelu_procrustes"), ["paper", "paper_pm"]].tolist() == [
        0.6208,
        0.008,
    ]
    assert summary.loc[("myrtle_cw", "act3", "orthogonal_procrustes"), ["paper", "paper_pm"]].tolist() == [
        0.5409,
        0.003,
    ]
    assert pd.isna(summary.loc[("myrtle_cw", "act1", "grelu_procrustes"), "paper"])  # Table 4: layer 10 only
    figure = similarity_procrustes(table, paper)
    crosses = [line for ax in figure.axes for line in ax.get_lines() if line.get_marker() == "x"]
    assert sorted(y for line in crosses for y in line.get_ydata()) == sorted(
        [0.6208, 0.4432, 0.7724, 0.5087, 0.5691, 0.5409]
    )


def test_npk_cka_of_a_model_without_a_path_kernel_is_a_row_saying_so():
    """npk_cka asked of a CCT (no neural path kernel) is not left out silently: the pair's job writes
    a row without a value whose note says why, and the summary keeps it, without a mean."""
    import pandas as pd

    from intertwine.models import build
    from intertwine.workflow.stages.similarity.figures import similarity_summary
    from intertwine.workflow.stages.similarity.job import _npk_rows
    from intertwine.workflow.stages.similarity.tables import SIMILARITY
    from intertwine.workflow.tables import to_table

    class Log:
        def __init__(self):
            self.lines = []

        def log(self, line):
            self.lines.append(line)

    cct = build({"arch": "cct", "width_multiplier": 0.125})
    base = {"variant": "cct", "pair": 0, "seed_a": 1, "seed_b": 2}
    images = torch.zeros(4, 3, 32, 32, dtype=torch.uint8)
    reads = (cct, cct, images, [], torch.zeros(3), torch.ones(3), 4)
    log = Log()
    (row,) = _npk_rows(log, base, None, reads)
    assert row["measure"] == "npk_cka" and np.isnan(row["value"]) and row["n_samples"] == 0
    assert row["note"].startswith("does not apply: a CCT has no neural path kernel")
    assert "npk_cka does not apply: a CCT" in log.lines[-1]
    other = {
        **base,
        "site_a": "act1",
        "site_b": "act1",
        "measure": "linear_cka",
        "value": 0.9,
        "n_samples": 4,
        "note": None,
    }
    table = pd.DataFrame([row, other]).assign(low=np.nan, high=np.nan, config_hash="h", version="v")
    assert to_table(table, SIMILARITY).num_rows == 2  # the table's schema has the note
    summary = similarity_summary(table, {}).set_index("measure")
    assert pd.isna(summary.loc["npk_cka", "mean"]) and summary.loc["npk_cka", "pairs"] == 0
    assert summary.loc["npk_cka", "note"] == row["note"]
    assert summary.loc["linear_cka", "mean"] == 0.9 and pd.isna(summary.loc["linear_cka", "note"])
