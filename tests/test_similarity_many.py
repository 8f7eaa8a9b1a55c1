"""The similarity library beyond one pair of arrays: many layers at once (``pairwise``), streaming
from models and data (``compare_models``, the accumulators), gradients, precision near 1, the max
kernel's two computations, and RBF CKA against a transcription of Kornblith et al.'s code."""

import numpy as np
import pytest
import scipy.linalg
import torch
from torch import nn

from intertwine import measures
from intertwine.compare import compare_models
from intertwine.groups import random_grelu, random_orthogonal
from intertwine.measures import (
    MEASURES,
    ConstantRepresentationError,
    LinearCKAAccumulator,
    ProcrustesAccumulator,
    pairwise,
)

F64 = torch.float64


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def layers(n=30, seed=0, shapes=((4, 2, 2), (6, 2, 2), (5,), (3, 3, 3))):
    """Representations of the same n inputs with different widths and spatial shapes, related to
    one another through a shared latent."""
    g = gen(seed)
    z = torch.randn(n, 8, generator=g, dtype=F64)
    out = []
    for shape in shapes:
        size = int(np.prod(shape))
        W = torch.randn(8, size, generator=g, dtype=F64)
        out.append((z @ W + 0.5 * torch.randn(n, size, generator=g, dtype=F64)).relu().reshape(n, *shape))
    return out


# ---------------------------------------------------------------------------
# pairwise
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("measure", sorted(MEASURES))
def test_pairwise_equals_per_pair_calls(measure):
    xs, ys = layers(seed=0), layers(seed=1)
    if measure in measures.PROCRUSTES_MEASURES:  # positions paired: one spatial shape
        xs, ys = layers(shapes=((4, 2, 2), (4, 2, 2))), layers(seed=1, shapes=((4, 2, 2), (4, 2, 2)))
    matrix = pairwise(measure, xs, ys)
    assert matrix.shape == (len(xs), len(ys))
    expected = [[MEASURES[measure](x, y) for y in ys] for x in xs]
    np.testing.assert_allclose(matrix, expected, rtol=0, atol=1e-10)


@pytest.mark.parametrize("measure", ["linear_cka", "grelu_cka", "pwcca", "shape_euclidean"])
def test_pairwise_of_one_list_with_itself(measure):
    xs = layers(seed=2)
    matrix = pairwise(measure, xs)
    expected = [[MEASURES[measure](x, y) for y in xs] for x in xs]
    np.testing.assert_allclose(matrix, expected, rtol=0, atol=1e-10)
    if measure == "pwcca":  # weights from one side: the matrix need not be symmetric
        assert not np.allclose(matrix, matrix.T)


@pytest.mark.parametrize("measure", ["linear_cka", "gate_cka", "channel_normalized_linear_cka"])
def test_linear_ckas_pair_feature_and_gram_layers(measure):
    """N = 12 samples: a 4-wide layer keeps its features, a 48-wide one its Gram matrix; every
    combination (features-features, Gram-Gram, features-Gram both ways) equals the measure."""
    xs = layers(n=12, seed=3, shapes=((4,), (3, 4, 4), (2, 2, 1)))
    ys = layers(n=12, seed=4, shapes=((12, 2, 2), (5,)))
    matrix = pairwise(measure, xs, ys)
    expected = [[MEASURES[measure](x, y) for y in ys] for x in xs]
    np.testing.assert_allclose(matrix, expected, rtol=0, atol=1e-12)


def test_pairwise_takes_generators_and_names_constant_layers():
    xs = layers(seed=5)
    matrix = pairwise("linear_cka", (x for x in xs), iter(layers(seed=6)))
    np.testing.assert_allclose(matrix, pairwise("linear_cka", xs, layers(seed=6)), atol=1e-14)
    dead = [xs[0], torch.zeros_like(xs[1])]
    with pytest.raises(ConstantRepresentationError, match=r"^ys\[1\]: ") as caught:
        pairwise("grelu_cka", xs, dead)
    assert (caught.value.which, caught.value.index) == ("ys", 1)


def test_pairwise_errors():
    xs = layers()
    with pytest.raises(ValueError, match="unknown measure 'cka'"):
        pairwise("cka", xs, xs)
    with pytest.raises(ValueError, match="same samples"):
        pairwise("linear_cka", xs, layers(n=31))
    with pytest.raises(ValueError, match="at least one representation in ys"):
        pairwise("linear_cka", xs, [])
    with pytest.raises(ValueError, match=r"xs\[0\] and ys\[2\]: .*positions"):
        pairwise("orthogonal_procrustes", xs, xs)


# ---------------------------------------------------------------------------
# Streaming
# ---------------------------------------------------------------------------


def test_linear_cka_accumulator_equals_one_shot():
    X, Y = layers(n=50, seed=7, shapes=((3, 2, 2), (5,)))
    X = X + 100.0  # a large mean: the first batch's shift keeps the sums small
    acc = LinearCKAAccumulator()
    for start in range(0, 50, 7):
        acc.update(X[start : start + 7], Y[start : start + 7])
    assert acc.n_samples == 50
    assert acc.value() == pytest.approx(measures.linear_cka(X, Y), abs=1e-12)
    with pytest.raises(ValueError, match="feature sizes"):
        acc.update(X[:4, :2], Y[:4])
    with pytest.raises(ConstantRepresentationError, match="^Y is the same"):
        LinearCKAAccumulator().update(X, torch.ones_like(Y)).value()


class TwoLayers(nn.Module):
    """A small network with named activation modules (sites) of different shapes."""

    def __init__(self, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.act1 = nn.ReLU()
        self.pool = nn.AdaptiveAvgPool2d(2)
        self.fc = nn.Linear(16, 6)
        self.act2 = nn.ReLU()

    def forward(self, x):
        return self.act2(self.fc(self.pool(self.act1(self.conv(x))).flatten(1)))


def test_compare_models_streams_and_matches_pairwise():
    a, b = TwoLayers(0).double(), TwoLayers(1).double()
    x = torch.randn(40, 3, 4, 4, generator=gen(8), dtype=F64)
    sites = ["act1", "act2"]
    dataset = torch.utils.data.TensorDataset(x, torch.zeros(40))
    names = ["linear_cka", "grelu_cka", "orthogonal_procrustes", "grelu_procrustes", "svcca"]
    result = compare_models(a, b, dataset, names, sites, sites, batch_size=16, progress=False)
    with torch.no_grad():
        acts_a = [a.act1(a.conv(x)), a(x)]
        acts_b = [b.act1(b.conv(x)), b(x)]
    for measure in ("linear_cka", "grelu_cka", "svcca"):
        assert result[measure].rows == sites and result[measure].columns == sites
        np.testing.assert_allclose(result[measure].values, pairwise(measure, acts_a, acts_b), atol=1e-10)
    assert result["linear_cka"]["act1", "act2"] == result["linear_cka"].values[0, 1]
    procrustes = result["orthogonal_procrustes"].values
    # act1 (4 channels, 16 positions) and act2 (6, 1) are paired only with their own shape
    assert np.isnan(procrustes[0, 1]) and np.isnan(procrustes[1, 0])
    assert procrustes[0, 0] == pytest.approx(measures.orthogonal_procrustes(acts_a[0], acts_b[0]), abs=1e-7)
    assert result["grelu_procrustes"].values[1, 1] == pytest.approx(
        measures.grelu_procrustes(acts_a[1], acts_b[1]), abs=1e-7
    )
    # a DataLoader and a plain tensor of inputs give the same numbers; linear CKA by collection too
    loader = torch.utils.data.DataLoader(dataset, batch_size=8)
    again = compare_models(
        a, b, loader, ["linear_cka"], sites, sites, progress=False, max_accumulator_bytes=0
    )
    np.testing.assert_allclose(again["linear_cka"], result["linear_cka"], atol=1e-12)
    plain = compare_models(a, b, x, ["linear_cka"], sites, sites, batch_size=40, progress=False)
    np.testing.assert_allclose(plain["linear_cka"], result["linear_cka"], atol=1e-12)


def test_compare_models_names_the_model_and_site_of_a_constant_representation():
    a, b = TwoLayers(0).double(), TwoLayers(1).double()
    with torch.no_grad():
        b.fc.weight.zero_(), b.fc.bias.fill_(-1.0)  # act2 of b is dead on every input
    x = torch.randn(20, 3, 4, 4, generator=gen(9), dtype=F64)
    for measure in ("linear_cka", "orthogonal_procrustes", "grelu_cka"):
        with pytest.raises(ConstantRepresentationError, match=f"^{measure}: model b at site act2") as caught:
            compare_models(a, b, x, [measure], ["act1", "act2"], ["act1", "act2"], progress=False)
        assert (caught.value.which, caught.value.site) == ("b", "act2")
    with pytest.raises(ValueError, match="unknown measures"):
        compare_models(a, b, x, ["cka"], ["act1"], ["act1"])


# ---------------------------------------------------------------------------
# Gradients
# ---------------------------------------------------------------------------


DIFFERENTIABLE = {
    "linear_cka (features)": lambda X, Y: measures.linear_cka(X, Y, method="features"),
    "linear_cka (gram)": lambda X, Y: measures.linear_cka(X, Y, method="gram"),
    "rbf_cka": measures.rbf_cka,
    "kernel_cka": lambda X, Y: measures.kernel_cka(
        X.flatten(1) @ X.flatten(1).T, torch.tanh(Y.flatten(1)) @ Y.flatten(1).T
    ),
    "orthogonal_procrustes": measures.orthogonal_procrustes,
    "grelu_procrustes": lambda X, Y: measures.grelu_procrustes(X, Y[:, :3]),
}


@pytest.mark.parametrize("name", list(DIFFERENTIABLE))
def test_differentiable_measures_pass_gradcheck(name):
    X = torch.randn(10, 3, 2, generator=gen(10), dtype=F64, requires_grad=True)
    Y = torch.randn(10, 4, 2, generator=gen(11), dtype=F64, requires_grad=True)
    value = DIFFERENTIABLE[name](X, Y)
    assert isinstance(value, torch.Tensor) and value.ndim == 0 and value.requires_grad
    assert torch.autograd.gradcheck(DIFFERENTIABLE[name], (X, Y))
    with torch.no_grad():  # without a graph, a float as before
        assert isinstance(DIFFERENTIABLE[name](X, Y), float)
    assert isinstance(DIFFERENTIABLE[name](X.detach(), Y.detach()), float)


def test_linear_cka_as_a_training_loss_aligns_a_layer():
    g = gen(12)
    X = torch.randn(64, 8, generator=g, dtype=F64)
    W = torch.randn(8, 8, generator=g, dtype=F64, requires_grad=True)
    target = X @ random_orthogonal(8, g, dtype=F64)
    optimizer = torch.optim.Adam([W], lr=0.05)
    before = measures.linear_cka(torch.tanh(X @ W).detach(), target)
    for _ in range(100):
        optimizer.zero_grad()
        loss = 1 - measures.linear_cka(torch.tanh(X @ W), target)
        loss.backward()
        optimizer.step()
    assert 1 - float(loss.detach()) > before + 0.1


# ---------------------------------------------------------------------------
# Procrustes near 1
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("eps", [1e-6, 1e-10, 1e-13])
def test_procrustes_distances_near_one_keep_their_digits(eps):
    """Y = X A + eps E for A in the measure's group: 1 - similarity = distance / 2 is of order eps
    and must agree to 6 digits with the residual computed directly (scipy's rotation; the known
    matching), where sqrt(2 - 2 x) would be off by about 1e-8."""
    g = gen(13)
    X = torch.randn(200, 6, 3, generator=g, dtype=F64)
    E = torch.randn(200, 6, 3, generator=g, dtype=F64)
    rows = lambda Z: Z.transpose(1, 2).reshape(-1, 6).numpy()  # noqa: E731  (N*P, C)
    Q = random_orthogonal(6, g, dtype=F64)
    Y = torch.einsum("ncp,cd->ndp", X, Q) + eps * E
    x, y = rows(X) / np.linalg.norm(rows(X)), rows(Y) / np.linalg.norm(rows(Y))
    R, _ = scipy.linalg.orthogonal_procrustes(y, x)
    expected = np.linalg.norm(x - y @ R) / 2
    assert 1 - measures.orthogonal_procrustes(X, Y) == pytest.approx(expected, rel=1e-6)
    A = random_grelu(6, g, dtype=F64)
    Y = torch.einsum("ncp,cd->ndp", X, A) + eps * E
    x, y = rows(X) / np.linalg.norm(rows(X), axis=0), rows(Y) / np.linalg.norm(rows(Y), axis=0)
    matched = A.abs().argmax(1).numpy()  # X's channel c went to Y's channel matched[c]
    expected = np.linalg.norm(x - y[:, matched]) / (2 * 6**0.5)
    assert 1 - measures.grelu_procrustes(X, Y) == pytest.approx(expected, rel=1e-6)


def test_refine_pass_rules():
    X, Y = layers(n=20, shapes=((4, 3), (4, 3)))
    acc = ProcrustesAccumulator().update(X[:10], Y[:10]).update(X[10:], Y[10:])
    closed = acc.orthogonal()
    acc.refine(X[:10], Y[:10])
    with pytest.raises(ValueError, match="refine\\(\\) has seen 10 of the 20 samples"):
        acc.orthogonal()
    acc.refine(X[10:], Y[10:])
    assert acc.orthogonal() == pytest.approx(closed, abs=1e-7)
    with pytest.raises(ValueError, match="update\\(\\) after refine"):
        acc.update(X, Y)
    with pytest.raises(ValueError, match="more samples"):
        acc.refine(X, Y)


def test_refine_refuses_other_samples():
    """A second pass over other samples than the first (as many of them) would sum residuals at an
    optimum that is not theirs, a silently wrong distance: it is refused; the same batches in
    another order are accepted."""
    X, Y = layers(n=20, shapes=((4, 3), (4, 3)))
    X2, Y2 = layers(n=20, seed=1, shapes=((4, 3), (4, 3)))
    acc = ProcrustesAccumulator().update(X[:10], Y[:10]).update(X[10:], Y[10:])
    closed = acc.orthogonal()
    acc.refine(X[10:], Y[10:]).refine(X[:10], Y[:10])
    assert acc.orthogonal() == pytest.approx(closed, abs=1e-7)
    acc = ProcrustesAccumulator().update(X, Y)
    with pytest.raises(ValueError, match="other samples than update.*X's channel norms"):
        acc.refine(X2, Y2)
    # One side right, the other another data set's: still refused, naming the side.
    acc = ProcrustesAccumulator().update(X, Y)
    with pytest.raises(ValueError, match="Y's channel norms"):
        acc.refine(X, Y2)


# ---------------------------------------------------------------------------
# Max kernel and RBF CKA
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(37, 5), (37, 5, 3, 3), (600, 3, 2)], ids=["2d", "4d", "blocks"])
def test_max_kernel_methods_agree_with_the_definition(shape):
    X = torch.randn(*shape, generator=gen(14), dtype=F64).relu()
    Z = X.reshape(shape[0], shape[1], -1)
    expected = torch.einsum("mcp,ncp->mnc", Z, Z).amax(2)
    for method in ("auto", "per_channel", "blocked"):
        # a small max_bytes forces several row blocks in both methods
        K = measures.max_kernel(X, method=method, max_bytes=64 * shape[0])
        torch.testing.assert_close(K, expected, atol=1e-12, rtol=0)
        assert torch.equal(K, K.T)
    with pytest.raises(ValueError, match="method must be"):
        measures.max_kernel(X, method="fast")


def kornblith_rbf_cka(X, Y, fraction):
    """Kornblith et al.'s gram_rbf (median over i < j, as intertwine documents) with the unbiased
    HSIC written as the textbook formula."""

    def gram_rbf(x):
        x = x.reshape(len(x), -1)
        dot = x @ x.T
        sq_norms = np.diag(dot)
        sq = -2 * dot + sq_norms[:, None] + sq_norms[None, :]
        median = np.median(sq[np.triu_indices(len(x), 1)])
        return np.exp(-sq / (2 * fraction**2 * median))

    def hsic(K, L):
        n = len(K)
        K, L = K.copy(), L.copy()
        np.fill_diagonal(K, 0), np.fill_diagonal(L, 0)
        one = np.ones(n)
        return (
            np.trace(K @ L)
            + one @ K @ one * (one @ L @ one) / ((n - 1) * (n - 2))
            - 2 / (n - 2) * one @ K @ L @ one
        ) / (n * (n - 3))

    K, L = gram_rbf(X), gram_rbf(Y)
    return hsic(K, L) / np.sqrt(hsic(K, K) * hsic(L, L))


@pytest.mark.parametrize("fraction", [0.2, 0.5, 1.0])
def test_rbf_cka_matches_kornblith_transcription(fraction):
    X, Y = layers(n=41, seed=15, shapes=((3, 2, 2), (7,)))
    expected = kornblith_rbf_cka(X.numpy(), Y.numpy(), fraction)
    assert measures.rbf_cka(X, Y, bandwidth_fraction=fraction) == pytest.approx(expected, abs=1e-12)
    with pytest.raises(ValueError, match="bandwidth_fraction must be positive"):
        measures.rbf_cka(X, Y, bandwidth_fraction=0)


@pytest.mark.parametrize("measure", ["orthogonal_procrustes", "grelu_procrustes"])
def test_procrustes_gradient_near_one_through_the_residual_pass(measure):
    """Close to a group element the second pass gives the value; its gradient passes gradcheck too."""
    X = torch.randn(12, 3, 2, generator=gen(16), dtype=F64)
    A = (
        random_orthogonal(3, gen(17), dtype=F64)
        if measure == "orthogonal_procrustes"
        else random_grelu(3, gen(17), dtype=F64)
    )
    Y = torch.einsum("ncp,cd->ndp", X, A) + 1e-5 * torch.randn(12, 3, 2, generator=gen(18), dtype=F64)
    X.requires_grad_(), Y.requires_grad_()
    assert 0 < 1 - float(MEASURES[measure](X, Y).detach()) < 1e-4
    assert torch.autograd.gradcheck(MEASURES[measure], (X, Y), eps=1e-9, atol=1e-4)
