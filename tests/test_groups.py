"""Intertwiner groups (Table 1), random group elements, Sinkhorn/Hungarian and SO(n) powers."""

from itertools import permutations

import numpy as np
import pytest
import torch

from intertwine.groups import (
    ACTIVATIONS,
    gelu_homogeneity_gap,
    get_activation,
    grelu_matrix,
    permutation_matrix,
    phi,
    random_grelu,
    random_group_element,
    random_orthogonal,
    random_permutation_scaling,
    random_rotation,
    round_to_permutation,
    rotation_power,
    rotation_powers,
    sinkhorn,
)


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def rel_err(a, b):
    return ((a - b).norm() / b.norm()).item()


def assert_orthogonal(Q, atol):
    eye = torch.eye(Q.shape[-1], dtype=Q.dtype)
    torch.testing.assert_close(Q.T @ Q, eye, atol=atol, rtol=0)


# ---------------------------------------------------------------------------
# Table 1
# ---------------------------------------------------------------------------

TABLE_1 = [
    ("identity", {}),
    ("sigmoid", {}),
    ("relu", {}),
    ("leaky_relu", {"slope": 0.01}),
    ("leaky_relu", {"slope": 0.5}),
    ("rbf", {}),
    ("polynomial", {"d": 2}),
    ("polynomial", {"d": 3}),
]


@pytest.mark.parametrize("activation, kw", TABLE_1)
def test_table1_intertwining(activation, kw):
    """sigma(A x) = phi(A) sigma(x) for A in G_sigma, and fails for a generic rotation."""
    n, batch = 8, 64
    sigma = get_activation(activation, **kw)
    x = torch.randn(batch, n, generator=gen(1), dtype=torch.float64)  # rows are vectors
    for seed in range(3):
        A = random_group_element(activation, n, gen(seed), dtype=torch.float64, **kw)
        assert torch.linalg.matrix_rank(A) == n
        lhs = sigma(x @ A.T)
        rhs = sigma(x) @ phi(activation, A, **kw).T
        assert rel_err(lhs, rhs) < 1e-12

    if activation != "identity":
        Q = random_orthogonal(n, gen(5), dtype=torch.float64)
        lhs = sigma(x @ Q.T)
        rhs = sigma(x) @ phi(activation, Q, **kw).T
        assert rel_err(lhs, rhs) > 0.05


def test_table1_float32_default():
    A = random_group_element("relu", 6, gen())
    assert A.dtype == torch.float32
    x = torch.randn(10, 6, generator=gen(1))
    torch.testing.assert_close(torch.relu(x @ A.T), torch.relu(x) @ phi("relu", A).T)


def test_group_structure():
    """Each sampler lands in its monomial group: one nonzero per row and per column."""
    for activation, kw in TABLE_1[1:]:
        A = random_group_element(activation, 7, gen(), **kw)
        nz = A != 0
        assert (nz.sum(0) == 1).all() and (nz.sum(1) == 1).all(), activation
    assert set(random_group_element("sigmoid", 7, gen()).unique().tolist()) == {0.0, 1.0}
    assert set(random_group_element("rbf", 7, gen()).unique().tolist()) <= {-1.0, 0.0, 1.0}
    assert (random_group_element("relu", 7, gen()) >= 0).all()
    signs = random_permutation_scaling(50, gen(), signs=True)
    assert (signs.sum(1).abs() == 1).all() and (signs < 0).any()


def test_activation_table_and_errors():
    assert set(ACTIVATIONS) == {"identity", "sigmoid", "relu", "leaky_relu", "rbf", "polynomial"}
    x = torch.tensor([-2.0, 0.5])
    torch.testing.assert_close(ACTIVATIONS["leaky_relu"](x), torch.tensor([-0.02, 0.5]))
    torch.testing.assert_close(ACTIVATIONS["polynomial"](x), x**3)
    torch.testing.assert_close(ACTIVATIONS["rbf"](torch.zeros(1)), torch.ones(1))
    A = torch.eye(3)
    with pytest.raises(ValueError, match="positively homogeneous"):
        phi("gelu", A)
    with pytest.raises(ValueError, match="relu"):  # lists the known activations
        phi("tanh", A)
    with pytest.raises(TypeError):
        phi("polynomial", A, degree=2)


# ---------------------------------------------------------------------------
# GELU (Fig. 17b)
# ---------------------------------------------------------------------------


def test_gelu_homogeneity_gap():
    gap = gelu_homogeneity_gap([0.5, 1.0, 2.0, 4.0], n_samples=20_000, generator=gen())
    assert gap.shape == (4,)
    assert gap[1] == 0
    assert (gap[[0, 2, 3]] > 0.01).all()
    # Deterministic without a generator (fixed seed, global RNG untouched).
    state = torch.random.get_rng_state()
    torch.testing.assert_close(gelu_homogeneity_gap([2.0]), gelu_homogeneity_gap([2.0]))
    assert torch.equal(state, torch.random.get_rng_state())


# ---------------------------------------------------------------------------
# Random samplers
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 5, 32])
def test_random_orthogonal_and_rotation(n):
    Q = random_orthogonal(n, gen())
    assert Q.dtype == torch.float32
    assert_orthogonal(Q, atol=1e-5)
    dets = [torch.linalg.det(random_rotation(n, gen(s), dtype=torch.float64)) for s in range(6)]
    torch.testing.assert_close(torch.stack(dets), torch.ones(6, dtype=torch.float64))
    if n > 1:  # both determinants occur for O(n)
        signs = {round(torch.linalg.det(random_orthogonal(n, gen(s))).item()) for s in range(20)}
        assert signs == {-1, 1}


def test_random_grelu():
    perm, scales = random_grelu(10, gen(3), as_parts=True)
    A = random_grelu(10, gen(3))
    assert perm.dtype == torch.long and sorted(perm.tolist()) == list(range(10))
    assert (scales > 0).all()
    assert torch.equal(A, grelu_matrix(perm, scales))
    assert torch.equal(A, torch.diag(scales) @ permutation_matrix(perm))
    x = torch.randn(10, generator=gen(4))
    torch.testing.assert_close(A @ x, scales * x[perm])  # (A x)_i = scales[i] x[perm[i]]
    assert not torch.equal(A, random_grelu(10, gen(4)))
    # Lognormal scales normalised to mean 1.
    big = random_grelu(20_000, gen(), as_parts=True)[1]
    assert abs(big.mean().item() - 1) < 0.05
    # The global RNG is never used.
    state = torch.random.get_rng_state()
    random_grelu(5, gen()), random_orthogonal(5, gen()), random_rotation(5, gen())
    assert torch.equal(state, torch.random.get_rng_state())


# ---------------------------------------------------------------------------
# Sinkhorn and Hungarian rounding
# ---------------------------------------------------------------------------


def test_sinkhorn_doubly_stochastic():
    P = torch.rand(4, 3, 6, 6, generator=gen()) + 0.1
    S = sinkhorn(P, iters=16)
    assert S.shape == P.shape and (S >= 0).all()
    ones = torch.ones(4, 3, 6)
    torch.testing.assert_close(S.sum(-1), ones, atol=1e-5, rtol=0)
    torch.testing.assert_close(S.sum(-2), ones, atol=1e-3, rtol=0)


def test_sinkhorn_relu_first_and_grad():
    P = torch.randn(5, 5, generator=gen(), dtype=torch.float64) + 0.5 + 2 * torch.eye(5, dtype=torch.float64)
    P.requires_grad_(True)
    S = sinkhorn(P)
    assert (S[P.detach() < 0] == 0).all()  # negatives clipped before normalising
    (S * torch.arange(25.0, dtype=torch.float64).view(5, 5)).sum().backward()
    assert P.grad is not None and torch.isfinite(P.grad).all() and P.grad.abs().sum() > 0


def test_round_to_permutation():
    n = 12
    true_perm = torch.randperm(n, generator=gen(2))
    noise = sinkhorn(torch.rand(n, n, generator=gen(3)))
    P = 0.7 * permutation_matrix(true_perm) + 0.3 * noise
    perm = round_to_permutation(P)
    assert perm.dtype == torch.long and sorted(perm.tolist()) == list(range(n))
    assert torch.equal(perm, true_perm)
    assert torch.equal(round_to_permutation(P.numpy()), true_perm)
    batched = round_to_permutation(torch.stack([P, permutation_matrix(perm.argsort())]))
    assert torch.equal(batched, torch.stack([true_perm, true_perm.argsort()]))


def test_round_to_permutation_maximises_trace():
    P = torch.rand(5, 5, generator=gen(7))
    best = permutation_matrix(round_to_permutation(P))
    brute = max((P * permutation_matrix(list(p))).sum().item() for p in permutations(range(5)))
    assert abs(torch.trace(P @ best.T).item() - brute) < 1e-6


# ---------------------------------------------------------------------------
# Rotation powers
# ---------------------------------------------------------------------------

MINUS_ONE_PAIR = torch.diag(torch.tensor([-1.0, -1.0, 1.0], dtype=torch.float64))


def _rotations():
    yield from (random_rotation(n, gen(n), dtype=torch.float64) for n in (2, 5, 16))
    yield MINUS_ONE_PAIR
    # A -1 pair hidden in a generic basis, next to ordinary rotation planes.
    Z = random_orthogonal(6, gen(9), dtype=torch.float64)
    R = random_rotation(4, gen(1), dtype=torch.float64)
    D = torch.block_diag(-torch.eye(2, dtype=torch.float64), R)
    yield Z @ D @ Z.T


@pytest.mark.parametrize("Q", list(_rotations()), ids=["n2", "n5", "n16", "diag-1-11", "hidden-1"])
def test_rotation_power(Q):
    n = Q.shape[0]
    eye = torch.eye(n, dtype=Q.dtype)
    torch.testing.assert_close(rotation_power(Q, 0.0), eye, atol=1e-10, rtol=0)
    torch.testing.assert_close(rotation_power(Q, 1.0), Q, atol=1e-10, rtol=0)
    for a, b in [(0.1, 0.25), (0.5, 0.5), (0.0, 0.3), (0.37, 0.05)]:
        Qa, Qb = rotation_power(Q, a), rotation_power(Q, b)
        assert_orthogonal(Qa, atol=1e-10)
        assert abs(torch.linalg.det(Qa).item() - 1) < 1e-10
        torch.testing.assert_close(Qa @ Qb, rotation_power(Q, a + b), atol=1e-10, rtol=0)


def test_rotation_power_dtype_geodesic_and_errors():
    Q = random_rotation(4, gen())
    half = rotation_power(Q, 0.5)
    assert half.dtype == torch.float32
    torch.testing.assert_close(half @ half, Q, atol=1e-5, rtol=0)
    # Minimal geodesic in the plane: a rotation by 3 rad goes through 1.5 rad, not 1.5 - pi.
    c, s = np.cos(3.0), np.sin(3.0)
    R = torch.tensor([[c, -s], [s, c]])
    expected = torch.tensor([[np.cos(1.5), -np.sin(1.5)], [np.sin(1.5), np.cos(1.5)]])
    torch.testing.assert_close(rotation_power(R, 0.5), expected, atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="SO"):
        rotation_power(torch.diag(torch.tensor([-1.0, 1.0, 1.0])), 0.5)


def test_rotation_powers_share_one_decomposition():
    Q = random_rotation(7, torch.Generator().manual_seed(5), dtype=torch.float64)
    alphas = [0.0, 0.3, 1.0, 1.7]
    for alpha, power in zip(alphas, rotation_powers(Q, alphas)):
        torch.testing.assert_close(power, rotation_power(Q, alpha), atol=1e-10, rtol=0)
    identity, same = rotation_powers(Q, [0.0, 1.0])  # no decomposition needed
    assert torch.equal(identity, torch.eye(7, dtype=torch.float64)) and torch.equal(same, Q)


# ---------------------------------------------------------------------------
# Invalid input: an error that says what is wrong, never a wrong result
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "perm, message",
    [
        ([0, 0, 1], r"repeated \[0\], missing \[2\]"),
        ([0, 3, 1], r"out of range \[3\]"),
        ([-1, 0, 1], r"out of range \[-1\]"),
        ([[0, 1], [1, 0]], "one-dimensional"),
        ([0.5, 1.0], "holds integers"),
    ],
)
def test_permutation_helpers_refuse_non_permutations(perm, message):
    with pytest.raises(ValueError, match=message):
        permutation_matrix(perm)
    with pytest.raises(ValueError, match=message):
        grelu_matrix(perm, torch.ones(torch.as_tensor(perm).numel()))


def test_grelu_matrix_checks_its_scales():
    with pytest.raises(ValueError, match="nonnegative"):
        grelu_matrix([1, 0], torch.tensor([1.0, -2.0]))
    with pytest.raises(ValueError, match=r"one entry per index of perm \(3\), got shape \(2,\)"):
        grelu_matrix([1, 0, 2], torch.ones(2))
    with pytest.raises(ValueError, match="finite"):
        grelu_matrix([1, 0], torch.tensor([1.0, float("nan")]))
    assert torch.equal(grelu_matrix([1, 0], torch.tensor([0.0, 2.0])), torch.tensor([[0.0, 0.0], [2.0, 0.0]]))


@pytest.mark.parametrize(
    "P, message",
    [
        (torch.full((3, 3), float("nan")), "NaN or infinite"),
        (-torch.ones(3, 3), "no positive entry"),
        (torch.zeros(3, 3), "no positive entry"),
        (torch.tensor([[1.0, 0.0], [1.0, 0.0]]), "no positive entry"),  # an empty column
        (torch.ones(2, 3), "square"),
    ],
)
def test_sinkhorn_refuses_what_it_cannot_project(P, message):
    with pytest.raises(ValueError, match=message):
        sinkhorn(P)


def test_rotation_power_refuses_non_rotations():
    Q = random_rotation(6, gen())
    with pytest.raises(ValueError, match="not orthogonal"):
        rotation_power(2 * Q, 0.5)
    with pytest.raises(ValueError, match="not orthogonal"):
        rotation_power(torch.randn(6, 6, generator=gen()), 0.5)
    with pytest.raises(ValueError, match="alpha must be finite"):
        rotation_power(Q, float("nan"))
    with pytest.raises(ValueError, match="NaN or infinite"):
        rotation_power(torch.full((3, 3), float("nan")), 0.5)
    with pytest.raises(ValueError, match="NaN or infinite"):
        round_to_permutation(torch.full((3, 3), float("nan")))
    torch.testing.assert_close(rotation_power(Q.float(), 1.0), Q.float())  # float32 rounding is fine
