"""Neural path kernels (intertwine.kernels.npk) against explicit path enumeration, the expected NTK
of random-sign value weights, their symmetries, and the empirical NTK against a plain loop.

Every reference here is computed independently of the library: paths are enumerated one by one,
value-network NTKs by hand-written backpropagation, per-sample gradients with torch.autograd.
"""

import itertools

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from intertwine.kernels import empirical_ntk, gate_kernel, gates_from_preactivations, npk_conv_gap, npk_fc

F64 = torch.float64


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _fc_gates(x: torch.Tensor, weights: list[torch.Tensor], beta: float | None = None) -> list[torch.Tensor]:
    """Gates of a bias-free ReLU feature network with the given (out, in) weights."""
    gates, z = [], x
    for w in weights:
        q = z @ w.T
        gates.append(gates_from_preactivations(q, beta=beta))
        z = torch.relu(q)
    return gates


# ---------------------------------------------------------------------------
# 1. Paths of a fully connected ReLU network
# ---------------------------------------------------------------------------


def test_fc_output_and_npk_by_path_enumeration():
    g = _gen(0)
    x = torch.randn(5, 3, generator=g, dtype=F64)
    w1, w2 = torch.randn(4, 3, generator=g, dtype=F64), torch.randn(4, 4, generator=g, dtype=F64)
    v = torch.randn(4, generator=g, dtype=F64)
    g1, g2 = _fc_gates(x, [w1, w2])
    assert 0 < g1.mean() < 1 and 0 < g2.mean() < 1  # some gates on, some off
    y = torch.relu(torch.relu(x @ w1.T) @ w2.T) @ v

    paths = list(itertools.product(range(3), range(4), range(4)))  # (input, unit 1, unit 2)
    assert len(paths) == 48
    phi = torch.stack([x[:, i] * g1[:, j] * g2[:, k] for i, j, k in paths], dim=1)
    value = torch.stack([w1[j, i] * w2[k, j] * v[k] for i, j, k in paths])
    torch.testing.assert_close(phi @ value, y, rtol=1e-12, atol=1e-12)
    kernel = npk_fc(x, [g1, g2])
    assert kernel.dtype == F64 and kernel.shape == (5, 5)
    torch.testing.assert_close(kernel, phi @ phi.T, rtol=1e-12, atol=1e-12)
    # A second batch gives the cross kernel.
    cross = npk_fc(x[:2], [g1[:2], g2[:2]], x[2:], [g1[2:], g2[2:]])
    torch.testing.assert_close(cross, (phi @ phi.T)[:2, 2:], rtol=1e-12, atol=1e-12)

    # Value network fed ones, gates still those of x: the paths no longer carry x.
    ones_phi = torch.stack([g1[:, j] * g2[:, k] for _, j, k in paths], dim=1)
    y_ones = (g2 * ((g1 * (torch.ones_like(x) @ w1.T)) @ w2.T)) @ v
    torch.testing.assert_close(ones_phi @ value, y_ones, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(
        npk_fc(x, [g1, g2], value_input="ones"), ones_phi @ ones_phi.T, rtol=1e-12, atol=1e-12
    )


def test_fc_npk_accepts_numpy_and_soft_gates():
    g = _gen(1)
    x = torch.randn(4, 6, generator=g, dtype=F64)
    gates = _fc_gates(x, [torch.randn(5, 6, generator=g, dtype=F64)], beta=3.0)
    assert ((gates[0] > 0) & (gates[0] < 1)).all()
    expected = (x @ x.T) * (gates[0] @ gates[0].T)
    torch.testing.assert_close(npk_fc(x.numpy(), [gates[0].numpy()]), expected, rtol=1e-12, atol=0)
    torch.testing.assert_close(npk_fc(x.float(), [gates[0].float()]), expected, rtol=1e-6, atol=0)


# ---------------------------------------------------------------------------
# 2. Expected NTK of random-sign value weights = d sigma^(2(d-1)) NPK
# ---------------------------------------------------------------------------


def _value_ntk(x: torch.Tensor, gates: list[torch.Tensor], weights: list[torch.Tensor]) -> torch.Tensor:
    """(D, N, N) NTK of the value weights of D gated networks at once, by hand backpropagation.

    ``weights`` are W_1 (D, w_1, d_in), ..., W_L (D, w_L, w_{L-1}) and the head (D, w_L); layer l
    computes z_l = G_l * (W_l z_{l-1}) and the output is head . z_L.
    """
    zs = [x.expand(weights[0].shape[0], *x.shape)]
    for w, gate in zip(weights[:-1], gates):
        zs.append(gate * torch.einsum("dij,dnj->dni", w, zs[-1]))
    theta = torch.einsum("dni,dmi->dnm", zs[-1], zs[-1])  # d y / d head = z_L
    grad = gates[-1] * weights[-1][:, None, :]  # d y / d (W_L z_{L-1})
    for l in reversed(range(len(gates))):
        theta += torch.einsum("dni,dmi->dnm", grad, grad) * torch.einsum("dni,dmi->dnm", zs[l], zs[l])
        if l:
            grad = gates[l - 1] * torch.einsum("dij,dni->dnj", weights[l], grad)
    return theta


class _GatedFC(nn.Module):
    """A deep gated network: fixed feature weights give the gates, value weights are parameters."""

    def __init__(self, features, values, head, order, beta):
        super().__init__()
        self.features, self.order, self.beta = features, order, beta
        self.values = nn.ParameterList([nn.Parameter(w.clone()) for w in values])
        self.head = nn.Parameter(head.clone())

    def forward(self, x):
        gates = _fc_gates(x, self.features, self.beta)
        z = x
        for w, l in zip(self.values, self.order):
            z = gates[l] * (z @ w.T)
        return z @ self.head


@pytest.mark.parametrize("variant", ["hard", "permuted", "soft"])
def test_expected_value_ntk_is_scaled_npk(variant):
    d_in, width, hidden, n, draws, sigma = 8, 32, 3, 3, 16000, 0.7
    depth = hidden + 1  # weight layers on every path, the head included
    g = _gen(2)
    # A common offset keeps every <x, x'> well away from 0, so every entry has a tight relative bound.
    x = torch.randn(n, d_in, generator=g, dtype=F64) + 2.0
    fan_in = [d_in] + [width] * (hidden - 1)
    features = [torch.randn(width, f, generator=g, dtype=F64) / f**0.5 for f in fan_in]
    beta = 4.0 if variant == "soft" else None
    gates = _fc_gates(x, features, beta)
    order = [2, 0, 1] if variant == "permuted" else [0, 1, 2]  # value layer l uses gates[order[l]]
    value_gates = [gates[l] for l in order]

    def draw(shape):
        return sigma * (2.0 * torch.randint(0, 2, shape, generator=g, dtype=F64) - 1.0)

    sums, squares = torch.zeros(n, n, dtype=F64), torch.zeros(n, n, dtype=F64)
    for chunk in range(4):
        size = draws // 4
        weights = [draw((size, width, f)) for f in fan_in] + [draw((size, width))]
        theta = _value_ntk(x, value_gates, weights)
        if chunk == 0:
            # The hand-written NTK of one draw is the empirical NTK of the same gated network.
            net = _GatedFC(features, [w[0] for w in weights[:-1]], weights[-1][0], order, beta)
            torch.testing.assert_close(empirical_ntk(net, x), theta[0], rtol=1e-10, atol=0)
        sums += theta.sum(0)
        squares += theta.square().sum(0)
    mean = sums / draws
    stderr = ((squares / draws - mean.square()) * draws / (draws - 1)).sqrt() / draws**0.5
    expected = depth * sigma ** (2 * (depth - 1)) * npk_fc(x, gates)  # gates in feature order
    # The bound is meaningful (a wrong depth factor, 3/4 or 5/4, is far outside it) ...
    assert (4 * stderr < 0.03 * expected).all()
    # ... and one draw alone scatters far more than the Monte-Carlo mean.
    assert (theta.std(0) > 0.2 * expected).all()
    assert ((mean - expected).abs() <= 4 * stderr).all(), (mean - expected) / stderr


# ---------------------------------------------------------------------------
# 3. Convolutional NPK with GAP: exact recursion = path enumeration
# ---------------------------------------------------------------------------

OFFSETS = list(itertools.product((-1, 0, 1), repeat=2))  # conv2d is a cross-correlation: z[i + k]


def _conv(z: torch.Tensor, w: torch.Tensor, padding: str) -> torch.Tensor:
    if padding == "circular":
        return F.conv2d(F.pad(z, (1, 1, 1, 1), mode="circular"), w)
    return F.conv2d(z, w, padding=1)


def _conv_gates(x, features, padding, pool_before):
    """Hard gates of a bias-free convolutional ReLU feature network, pools where the value net has them."""
    gates, z = [], x
    for w, pool in zip(features, pool_before):
        q = _conv(F.avg_pool2d(z, 2) if pool else z, w, padding)
        gates.append((q > 0).to(F64))
        z = torch.relu(q)
    return gates


def _conv_value_net(z, gates, weights, head, padding, pool_before):
    for w, gate, pool in zip(weights, gates, pool_before):
        z = gate * _conv(F.avg_pool2d(z, 2) if pool else z, w, padding)
    return z.mean(dim=(2, 3)) @ head


def _source(i: int, k: int, size: int, padding: str) -> int | None:
    """Index i + k read by a 3x3 convolution at i, or None in the zero padding."""
    j = i + k
    if padding == "circular":
        return j % size
    return j if 0 <= j < size else None


def _conv_path_features(x, gates, padding, pool):
    """Phi(x, w) of every weight path w = (c0, k1, c1, k2, c2) of a 2-layer conv net with GAP, by
    enumerating its position sequences: (N, C0, 9, C1, 9, C2)."""
    n, c0, h0, w0 = x.shape
    g1, g2 = gates
    c1, c2 = g1.shape[1], g2.shape[1]
    h2, w2 = g2.shape[2:]
    phi = np.zeros((n, c0, 9, c1, 9, c2))
    x, g1, g2 = x.numpy(), g1.numpy(), g2.numpy()
    for (a, (ky1, kx1)), (b, (ky2, kx2)) in itertools.product(enumerate(OFFSETS), repeat=2):
        for y2, x2 in itertools.product(range(h2), range(w2)):
            # Layer 2 at (y2, x2) reads position (y2, x2) + k2 of layer 1's (pooled) output ...
            y1, x1 = _source(y2, ky2, h2, padding), _source(x2, kx2, w2, padding)
            if y1 is None or x1 is None:
                continue
            # ... which is one unit of layer 1, or the average of a 2x2 block of them.
            block = [(2 * y1 + dy, 2 * x1 + dx) for dy in (0, 1) for dx in (0, 1)] if pool else [(y1, x1)]
            for u, v in block:
                y0, x0 = _source(u, ky1, h0, padding), _source(v, kx1, w0, padding)
                if y0 is None or x0 is None:
                    continue
                term = x[:, :, y0, x0, None, None] * g1[:, None, :, u, v, None] * g2[:, None, None, :, y2, x2]
                phi[:, :, a, :, b, :] += term / len(block) / (h2 * w2)
    return torch.from_numpy(phi.reshape(n, -1))


@pytest.mark.parametrize("padding", ["zeros", "circular"])
@pytest.mark.parametrize("pool", [False, True])
@pytest.mark.parametrize("value_input", ["x", "ones"])
def test_conv_npk_by_path_enumeration(padding, pool, value_input):
    g = _gen(3)
    # 4x5: non-square catches swapped axes, the odd width the floor of the pool.
    x = torch.randn(3, 2, 4, 5, generator=g, dtype=F64)
    features = [torch.randn(2, 2, 3, 3, generator=g, dtype=F64) for _ in range(2)]
    pool_before = [False, pool]
    gates = _conv_gates(x, features, padding, pool_before)
    assert gates[1].shape[2:] == ((2, 2) if pool else (4, 5))
    z0 = x if value_input == "x" else torch.ones_like(x)
    phi = _conv_path_features(z0, gates, padding, pool)

    # The enumeration is right: the value network's output is <Phi, v> for random value weights.
    weights = [torch.randn(2, 2, 3, 3, generator=g, dtype=F64) for _ in range(2)]
    head = torch.randn(2, generator=g, dtype=F64)
    value = torch.einsum(
        "pak,qpl,q->akplq", weights[0].reshape(2, 2, 9), weights[1].reshape(2, 2, 9), head
    ).reshape(-1)
    y = _conv_value_net(z0, gates, weights, head, padding, pool_before)
    torch.testing.assert_close(phi @ value, y, rtol=1e-12, atol=1e-12)

    kernel = npk_conv_gap(x, gates, padding=padding, value_input=value_input)
    assert kernel.dtype == F64 and kernel.shape == (3, 3)
    torch.testing.assert_close(kernel, phi @ phi.T, rtol=1e-12, atol=0)
    # One pair per block, and the cross kernel of two batches, give the same numbers.
    small = npk_conv_gap(x, gates, padding=padding, value_input=value_input, max_bytes=1)
    torch.testing.assert_close(small, kernel, rtol=1e-13, atol=0)
    cross = npk_conv_gap(
        x[:1], [t[:1] for t in gates], x[1:], [t[1:] for t in gates], padding=padding, value_input=value_input
    )
    torch.testing.assert_close(cross, kernel[:1, 1:], rtol=1e-13, atol=0)


def test_conv_npk_pool_on_the_input_is_the_pooled_input():
    g = _gen(4)
    x = torch.randn(3, 2, 8, 6, generator=g, dtype=F64)
    # 8x6 input, 4x3 and 2x1 gates: pools before both layers; boolean gates are taken as 0/1.
    gates = [(torch.randn(3, 3, 4, 3, generator=g) > 0).to(F64), (torch.randn(3, 2, 2, 1, generator=g) > 0)]
    pooled = npk_conv_gap(F.avg_pool2d(x, 2), gates)
    torch.testing.assert_close(npk_conv_gap(x, gates), pooled, rtol=1e-12, atol=0)


# ---------------------------------------------------------------------------
# 4-5. Symmetries of the NPKs
# ---------------------------------------------------------------------------


def test_circular_conv_npk_is_invariant_to_cyclic_shifts():
    g = _gen(5)
    x = torch.randn(2, 2, 6, 4, generator=g, dtype=F64)
    features = [
        torch.randn(3, 2, 3, 3, generator=g, dtype=F64),
        torch.randn(3, 3, 3, 3, generator=g, dtype=F64),
    ]
    gx = _conv_gates(x[:1], features, "circular", [False, False])
    gy = _conv_gates(x[1:], features, "circular", [False, False])
    reference = npk_conv_gap(x[:1], gx, x[1:], gy, padding="circular").item()

    def shifted(s):
        y = x[1:].roll(s, dims=(2, 3))
        return y, [t.roll(s, dims=(2, 3)) for t in gy]

    values = [
        npk_conv_gap(x[:1], gx, *shifted(s), padding="circular").item()
        for s in itertools.product(range(6), range(4))
    ]
    np.testing.assert_allclose(values, reference, rtol=1e-10, atol=0)
    # The gates of a circular feature network do shift with its input.
    y, gates_y = shifted((1, 3))
    for a, b in zip(_conv_gates(y, features, "circular", [False, False]), gates_y):
        assert torch.equal(a, b)
    # Zero padding sees the image border, so shifts change it.
    zeros = [npk_conv_gap(x[:1], gx, *shifted(s)).item() for s in [(0, 0), (1, 0), (0, 1)]]
    assert abs(zeros[1] - zeros[0]) > 1e-3 * abs(zeros[0]) and abs(zeros[2] - zeros[0]) > 1e-3 * abs(zeros[0])

    # With a pool, shifts by multiples of 2 move the pooled gates by half as much.
    gates = [
        (torch.rand(2, 2, 6, 4, generator=g) > 0.5).to(F64),
        torch.rand(2, 3, 3, 2, generator=g, dtype=F64),
    ]
    reference = npk_conv_gap(x[:1], [t[:1] for t in gates], x[1:], [t[1:] for t in gates], padding="circular")
    for sy, sx in itertools.product((0, 2, 4), (0, 2)):
        y = x[1:].roll((sy, sx), dims=(2, 3))
        gy = [gates[0][1:].roll((sy, sx), dims=(2, 3)), gates[1][1:].roll((sy // 2, sx // 2), dims=(2, 3))]
        value = npk_conv_gap(x[:1], [t[:1] for t in gates], y, gy, padding="circular")
        torch.testing.assert_close(value, reference, rtol=1e-10, atol=0)


def test_fc_npk_is_invariant_to_permuting_layers():
    g = _gen(6)
    x = torch.randn(6, 5, generator=g, dtype=F64)
    gates = [(torch.randn(6, w, generator=g) > 0).to(F64) for w in (7, 3, 9, 4)]
    gates[2] = torch.sigmoid(torch.randn(6, 9, generator=g, dtype=F64))
    kernel = npk_fc(x, gates)
    for perm in ([3, 2, 1, 0], [1, 3, 0, 2]):
        torch.testing.assert_close(npk_fc(x, [gates[l] for l in perm]), kernel, rtol=1e-13, atol=0)
    # Not trivially: dropping a layer changes it.
    assert not torch.allclose(npk_fc(x, gates[:3]), kernel, rtol=1e-3)


# ---------------------------------------------------------------------------
# 6. Gate kernels of a zoo model under G_ReLU and orthogonal changes of basis
# ---------------------------------------------------------------------------


def test_gate_kernel_cka_is_grelu_invariant_not_orthogonal_invariant():
    from intertwine.measures import kernel_cka
    from intertwine.models import build, site_activations
    from intertwine.symmetry import act_on_weights, random_elements

    torch.manual_seed(0)
    model = build({"arch": "myrtle", "width_multiplier": 0.125}).eval()
    images = torch.randn(24, 3, 16, 16, generator=_gen(7))
    base = site_activations(model, images)
    kernels = {site: gate_kernel(a) for site, a in base.items()}
    for site, a in base.items():
        torch.testing.assert_close(
            kernels[site], ((a > 0).flatten(1).double() @ (a > 0).flatten(1).double().T) / a[0].numel()
        )

    cka = {}
    for group in ("grelu", "orthogonal"):
        moved = act_on_weights(model, random_elements(model, group, _gen(8))).eval()
        acts = site_activations(moved, images)
        for site in base:
            assert not torch.allclose(acts[site], base[site])  # the weights did change
            cka[group, site] = kernel_cka(kernels[site], gate_kernel(acts[site]))
        if group == "grelu":
            # Positive scalings and permutations keep every unit's sign: the same kernels, exactly
            # (a unit within rounding of 0 could flip, but none does with these seeds).
            for site in base:
                assert torch.equal(gate_kernel(acts[site]), kernels[site]), site
    for site in base:
        assert cka["grelu", site] == pytest.approx(1.0, abs=1e-12), site
    # Orthogonal changes of basis are no symmetry of a ReLU network (0.72, 0.50, 0.04, 0.19 here).
    assert all(cka["orthogonal", site] < 0.9 for site in base), cka


def test_gate_kernel_blocks_and_range():
    a = torch.randn(5, 3, 4, 4, generator=_gen(9))
    kernel = gate_kernel(a)
    torch.testing.assert_close(gate_kernel(a, max_bytes=1), kernel, rtol=1e-15, atol=0)
    torch.testing.assert_close(torch.diagonal(kernel), (a > 0).flatten(1).double().mean(1))
    assert (kernel >= 0).all() and (kernel <= 1).all()


# ---------------------------------------------------------------------------
# 7. Empirical NTK against per-sample gradients
# ---------------------------------------------------------------------------


def _tiny_model() -> nn.Module:
    torch.manual_seed(10)
    model = nn.Sequential(
        nn.Conv2d(2, 3, 3, padding=1),
        nn.BatchNorm2d(3),
        nn.ReLU(),
        nn.Dropout(0.5),
        nn.Flatten(),
        nn.Linear(3 * 4 * 4, 3),
    ).double()
    with torch.no_grad():  # running statistics unlike a batch's, so eval mode matters
        model[1].running_mean.uniform_(-1, 1)
        model[1].running_var.uniform_(0.5, 2)
    return model.train()


def _ntk_by_loop(model, x, names):
    model.eval()
    params = [dict(model.named_parameters())[k] for k in names]
    grads = []
    for sample in x:
        out = model(sample[None]).reshape(-1)
        for c in range(out.numel()):
            g = torch.autograd.grad(out[c], params, retain_graph=True)
            grads.append(torch.cat([t.reshape(-1) for t in g]))
    jac = torch.stack(grads).reshape(len(x), -1, sum(p.numel() for p in params))
    return torch.einsum("ncp,mcp->nm", jac, jac)


def test_empirical_ntk_matches_a_gradient_loop():
    model = _tiny_model()
    x = torch.randn(5, 2, 4, 4, generator=_gen(11), dtype=F64)
    kernel = empirical_ntk(model, x)
    assert model.training  # its mode is restored
    assert kernel.dtype == F64 and kernel.shape == (5, 5)
    names = [k for k, _ in model.named_parameters()]
    torch.testing.assert_close(kernel, _ntk_by_loop(model, x, names), rtol=1e-10, atol=0)
    assert torch.equal(kernel, kernel.T)
    eigenvalues = torch.linalg.eigvalsh(kernel)
    assert eigenvalues.min() > -1e-10 * eigenvalues.max()
    # Blocks of one sample, and a subset of the parameters.
    torch.testing.assert_close(empirical_ntk(model, x, max_bytes=1), kernel, rtol=1e-12, atol=0)
    subset = ["0.weight", "5.bias"]
    torch.testing.assert_close(
        empirical_ntk(model, x, subset), _ntk_by_loop(model, x, subset), rtol=1e-10, atol=0
    )
    # Frozen parameters are left out by default.
    model[5].weight.requires_grad_(False)
    free = [k for k, p in model.named_parameters() if p.requires_grad]
    torch.testing.assert_close(empirical_ntk(model, x), _ntk_by_loop(model, x, free), rtol=1e-10, atol=0)


# ---------------------------------------------------------------------------
# 8. Validation
# ---------------------------------------------------------------------------


def test_invalid_inputs_raise_clear_errors():
    x = torch.randn(3, 4)
    gates = [torch.ones(3, 5)]
    images = torch.randn(3, 2, 4, 4)
    conv_gates = [torch.ones(3, 2, 4, 4)]
    with pytest.raises(ValueError, match="value_input must be one of"):
        npk_fc(x, gates, value_input="zeros")
    with pytest.raises(ValueError, match="value_input must be one of"):
        npk_conv_gap(images, conv_gates, value_input="input")
    with pytest.raises(ValueError, match="padding must be one of"):
        npk_conv_gap(images, conv_gates, padding="reflect")
    with pytest.raises(ValueError, match=r"gates\[0\] has 2 samples but its input has 3"):
        npk_fc(x, [torch.ones(2, 5)])
    with pytest.raises(ValueError, match="gates is empty"):
        npk_fc(x, [])
    with pytest.raises(TypeError, match="one gate tensor per layer"):
        npk_fc(x, torch.ones(3, 5))
    with pytest.raises(ValueError, match="x is empty"):
        npk_fc(torch.zeros(0, 4), [torch.zeros(0, 5)])
    with pytest.raises(ValueError, match="gates_y is given without y"):
        npk_fc(x, gates, gates_y=gates)
    with pytest.raises(ValueError, match="y is given without gates_y"):
        npk_fc(x, gates, x)
    with pytest.raises(ValueError, match="gates has 1 layers but gates_y has 2"):
        npk_fc(x, gates, x, gates + gates)
    with pytest.raises(ValueError, match=r"layer 0: gates has units of shape \(5,\) but gates_y \(6,\)"):
        npk_fc(x, gates, x, [torch.ones(3, 6)])
    with pytest.raises(ValueError, match="x has 4 features but y has 2"):
        npk_fc(x, gates, torch.ones(3, 2), gates)
    with pytest.raises(ValueError, match="NaN or infinite"):
        npk_fc(x, [torch.full((3, 5), float("nan"))])
    # Gates are in [0, 1]: negative ones (pre-activations passed as gates) are refused, naming the
    # argument and its layer; the second batch's too, and the convolutional kernels' too.
    with pytest.raises(ValueError, match=r"gates\[0\] has values in \[-1, 1\], but a gate is in \[0, 1\]"):
        npk_fc(x, [torch.ones(3, 5).index_fill(1, torch.tensor([0]), -1.0)])
    with pytest.raises(ValueError, match=r"gates_y\[0\] has values in \[2, 2\]"):
        npk_fc(x, gates, x, [2 * torch.ones(3, 5)])
    with pytest.raises(ValueError, match=r"gates\[0\] has values in \[-0.5, 1\].*gates_from_preactivations"):
        npk_conv_gap(images, [torch.ones(3, 2, 4, 4).index_fill(0, torch.tensor([1]), -0.5)])
    with pytest.raises(ValueError, match=r"x must have shape \(N, C, H, W\)"):
        npk_conv_gap(x, conv_gates)
    with pytest.raises(ValueError, match=r"gates\[1\] is 3x3 but gates\[0\] is 4x4"):
        npk_conv_gap(images, conv_gates + [torch.ones(3, 2, 3, 3)])
    with pytest.raises(ValueError, match=r"gates\[0\] is 8x8 but the input is 4x4"):
        npk_conv_gap(images, [torch.ones(3, 2, 8, 8)])
    with pytest.raises(ValueError, match=r"x has samples of shape \(2, 4, 4\) but y \(1, 4, 4\)"):
        npk_conv_gap(images, conv_gates, torch.ones(3, 1, 4, 4), conv_gates)
    with pytest.raises(ValueError, match="activations is empty"):
        gate_kernel(torch.zeros(0, 3))
    with pytest.raises(ValueError, match="beta must be a positive"):
        gates_from_preactivations(x, beta=-1.0)
    model = nn.Linear(4, 2)
    with pytest.raises(ValueError, match=r"params \['nope'\] are not parameters"):
        empirical_ntk(model, x, ["nope"])
    with pytest.raises(ValueError, match="params is empty"):
        empirical_ntk(model, x, [])
    with pytest.raises(TypeError, match="list of parameter names"):
        empirical_ntk(model, x, "weight")
    with pytest.raises(ValueError, match="x is empty"):
        empirical_ntk(model, torch.zeros(0, 4))
    model.requires_grad_(False)
    with pytest.raises(ValueError, match="no parameters that require grad"):
        empirical_ntk(model, x)


# ---------------------------------------------------------------------------
# 9. Selection pools (max-pools chosen by the feature network): recursion = path enumeration
# ---------------------------------------------------------------------------


def _pool_after(z, pool):
    """The pool after a layer of the value network: None, "avg" (2x2) or a selection (N, C, Ho, Wo)
    of flat source indices, the value at each pooled position gathered from z."""
    if pool is None:
        return z
    if isinstance(pool, str):
        return F.avg_pool2d(z, 2)
    return z.flatten(2).gather(2, pool.flatten(2)).view(pool.shape)


def _selection_value_net(z, gates, weights, head, padding, pools, final):
    """Forward pass of the value network: layer l is gates[l] * conv(z, W_l), then pools[l];
    the output is head . (GAP, or the global selection ``final``)."""
    for w, gate, pool in zip(weights, gates, pools):
        z = _pool_after(gate * _conv(z, w, padding), pool)
    if final is None:
        return z.mean(dim=(2, 3)) @ head
    return z.flatten(2).gather(2, final.flatten(2)).squeeze(2) @ head


def _selection_path_features(z0, gates, padding, pools, final):
    """Phi of every weight path (c_in, k_0, c_0, ..., k_{L-1}, c_{L-1}) of the value network above,
    by walking each of its position sequences back from the output: (N, C_in, 9, C_0, ..., C_{L-1}).
    Paths through a gate that is 0 contribute nothing and are cut early."""
    n, c_in = z0.shape[:2]
    shape = [n, c_in]
    for g in gates:
        shape += [9, g.shape[1]]
    phi = np.zeros(shape)
    z0, gates = z0.numpy(), [g.numpy() for g in gates]
    pools = [p.numpy() if isinstance(p, torch.Tensor) else p for p in pools]

    def reads(l, s, c, j):
        """(position in layer l's map, weight) read by position j = (row, col) of the map after the
        pool after layer l, for channel c of sample s."""
        pool, width = pools[l], gates[l].shape[3]
        if pool is None:
            return [(j, 1.0)]
        if isinstance(pool, str):
            return [((2 * j[0] + dy, 2 * j[1] + dx), 0.25) for dy in (0, 1) for dx in (0, 1)]
        return [(divmod(int(pool[s, c, j[0], j[1]]), width), 1.0)]

    def visit(s, l, c, i, weight, suffix):
        weight = weight * gates[l][s, c, i[0], i[1]]
        if weight == 0:
            return
        h, w = gates[l].shape[2:]
        for k, (ky, kx) in enumerate(OFFSETS):
            src = _source(i[0], ky, h, padding), _source(i[1], kx, w, padding)
            if None in src:
                continue
            if l == 0:
                phi[(s, slice(None), k) + suffix] += z0[s, :, src[0], src[1]] * weight
                continue
            for c_prev in range(gates[l - 1].shape[1]):
                for i_prev, w_prev in reads(l - 1, s, c_prev, src):
                    visit(s, l - 1, c_prev, i_prev, weight * w_prev, (c_prev, k) + suffix)

    last = len(gates) - 1
    h, w = gates[last].shape[2:]
    if isinstance(pools[last], str):
        h, w = h // 2, w // 2
    elif pools[last] is not None:
        h, w = pools[last].shape[2:]
    for s in range(n):
        for c in range(gates[last].shape[1]):
            if final is None:  # GAP over the map after the last pool
                tops = [((y, x), 1.0 / (h * w)) for y in range(h) for x in range(w)]
            else:
                tops = [(divmod(int(final[s, c].reshape(-1)[0]), w), 1.0)]
            for j, weight in tops:
                for i, w_read in reads(last, s, c, j):
                    visit(s, last, c, i, weight * w_read, (c,))
    return torch.from_numpy(phi.reshape(n, -1))


def _path_values(weights, head):
    """prod_l W_l[c_l, c_{l-1}, k_l] * head[c_{L-1}] for every weight path, in the layout of Phi."""
    value = weights[0].reshape(*weights[0].shape[:2], 9).permute(1, 2, 0)  # (c_in, k_0, c_0)
    for w in weights[1:]:
        value = torch.einsum("...c,dck->...ckd", value, w.reshape(*w.shape[:2], 9))
    return (value * head).reshape(-1)


# Input size, channels (input, then each layer), the pool after each layer (None, "avg", or the
# (H_out, W_out) of a selection pool with random sources), a global selection (else GAP), padding,
# soft gates.
SELECTION_CASES = {
    "select-global": ((4, 4), (2, 3, 2), [(2, 2), None], True, "zeros", False),
    "select-gap": ((4, 6), (2, 2, 3), [(2, 3), None], False, "circular", True),
    "avg-global": ((4, 4), (2, 2, 2), ["avg", None], True, "zeros", False),
    "select-select-global": ((4, 4), (3, 2, 2), [(2, 2), (2, 1)], True, "circular", False),
    "mixed": ((8, 8), (2, 2, 3, 2), [(4, 4), "avg", None], True, "zeros", False),
}


def _random_selection_net(case, n, seed):
    """x, gates, pools (selections as index tensors) and global selection of a SELECTION_CASES entry."""
    (h, w), channels, pools, final, _, soft = SELECTION_CASES[case]
    g = _gen(seed)
    x = torch.randn(n, channels[0], h, w, generator=g, dtype=F64)
    gates, selections = [], []
    for c, pool in zip(channels[1:], pools):
        if soft:
            gates.append(torch.sigmoid(2 * torch.randn(n, c, h, w, generator=g, dtype=F64)))
        else:
            gates.append((torch.rand(n, c, h, w, generator=g) < 0.7).to(F64))
        if pool is None or isinstance(pool, str):
            selections.append(pool)
            h, w = (h // 2, w // 2) if pool else (h, w)
        else:
            # Any source position, not only one in the pooled position's 2x2 block.
            selections.append(torch.randint(0, h * w, (n, c, *pool), generator=g))
            h, w = pool
    top = torch.randint(0, h * w, (n, channels[-1], 1, 1), generator=g) if final else None
    return x, gates, selections, top


@pytest.mark.parametrize("value_input", ["x", "ones"])
@pytest.mark.parametrize("case", list(SELECTION_CASES))
def test_selection_pool_npk_by_path_enumeration(case, value_input):
    channels, padding = SELECTION_CASES[case][1], SELECTION_CASES[case][4]
    x, gates, pools, top = _random_selection_net(case, 3, 21)
    z0 = x if value_input == "x" else torch.ones_like(x)
    phi = _selection_path_features(z0, gates, padding, pools, top)

    # The enumeration is right: the value network gathering at the selections is <Phi, v>.
    g = _gen(22)
    weights = [torch.randn(b, a, 3, 3, generator=g, dtype=F64) for a, b in itertools.pairwise(channels)]
    head = torch.randn(channels[-1], generator=g, dtype=F64)
    y = _selection_value_net(z0, gates, weights, head, padding, pools, top)
    torch.testing.assert_close(phi @ _path_values(weights, head), y, rtol=1e-12, atol=1e-12)
    assert (phi.abs().sum(0) > 0).float().mean() > 0.2  # many paths are live

    selections = [p if isinstance(p, torch.Tensor) else None for p in pools]
    kwargs = {"padding": padding, "value_input": value_input}
    if case == "avg-global":  # numpy indices, and an (N, C) global selection
        kwargs["global_selection"] = top.numpy()[:, :, 0, 0]
    else:
        kwargs["selections"], kwargs["global_selection"] = selections, top
    kernel = npk_conv_gap(x, gates, **kwargs)
    assert kernel.dtype == F64 and kernel.shape == (3, 3)
    torch.testing.assert_close(kernel, phi @ phi.T, rtol=1e-12, atol=1e-300)
    # One pair per block, and the cross kernel of two batches, give the same numbers.
    small = npk_conv_gap(x, gates, max_bytes=1, **kwargs)
    torch.testing.assert_close(small, kernel, rtol=1e-13, atol=0)
    first, rest = slice(0, 1), slice(1, 3)
    cross = npk_conv_gap(
        x[first],
        [t[first] for t in gates],
        x[rest],
        [t[rest] for t in gates],
        padding=padding,
        value_input=value_input,
        selections=[None if s is None else s[first] for s in selections],
        selections_y=[None if s is None else s[rest] for s in selections],
        global_selection=None if top is None else top[first],
        global_selection_y=None if top is None else top[rest],
    )
    torch.testing.assert_close(cross, kernel[first, rest], rtol=1e-13, atol=0)


def test_selection_npk_of_a_relu_network_with_max_pools():
    """A bias-free ReLU network with max-pools is its own gated network: gates 1{q > 0} and the
    max-pools' return_indices, passed as they are, give the kernel of its path features."""
    g = _gen(23)
    x = torch.randn(4, 2, 4, 6, generator=g, dtype=F64)
    w1, w2 = torch.randn(3, 2, 3, 3, generator=g, dtype=F64), torch.randn(2, 3, 3, 3, generator=g, dtype=F64)
    head = torch.randn(2, generator=g, dtype=F64)
    q1 = F.conv2d(x, w1, padding=1)
    pooled, s1 = F.max_pool2d(torch.relu(q1), 2, return_indices=True)
    q2 = F.conv2d(pooled, w2, padding=1)
    top_values, top = F.adaptive_max_pool2d(torch.relu(q2), 1, return_indices=True)
    assert s1.shape == (4, 3, 2, 3) and top.shape == (4, 2, 1, 1)
    gates = [(q1 > 0).to(F64), (q2 > 0).to(F64)]
    phi = _selection_path_features(x, gates, "zeros", [s1, None], top)
    torch.testing.assert_close(
        phi @ _path_values([w1, w2], head), top_values.flatten(1) @ head, rtol=1e-12, atol=1e-12
    )
    kernel = npk_conv_gap(x, gates, selections=[s1, None], global_selection=top)
    torch.testing.assert_close(kernel, phi @ phi.T, rtol=1e-12, atol=1e-300)
    # Selections differ from average pools: the kernel is another one.
    assert not torch.allclose(kernel, npk_conv_gap(x, gates), rtol=1e-3)

    # An identity selection is no pool at all, and a global selection on a 1x1 map is the GAP.
    identity = torch.arange(24).view(1, 1, 4, 6).expand(4, 3, 4, 6)
    plain = [gates[0], (torch.randn(4, 2, 4, 6, generator=g) > 0).to(F64)]
    torch.testing.assert_close(
        npk_conv_gap(x, plain, selections=[identity, None]), npk_conv_gap(x, plain), rtol=1e-13, atol=0
    )
    tiny = [gates[0], (torch.randn(4, 2, 1, 1, generator=g) > 0).to(F64)]
    to_one = [torch.randint(0, 24, (4, 3, 1, 1), generator=g), None]
    torch.testing.assert_close(
        npk_conv_gap(x, tiny, selections=to_one, global_selection=torch.zeros(4, 2, 1, 1, dtype=torch.int64)),
        npk_conv_gap(x, tiny, selections=to_one),
        rtol=1e-13,
        atol=0,
    )


def test_selection_invalid_inputs_raise_clear_errors():
    images = torch.randn(3, 2, 4, 4)
    gates = [torch.ones(3, 2, 4, 4), torch.ones(3, 3, 2, 2)]
    sel = torch.zeros(3, 2, 2, 2, dtype=torch.int64)
    top = torch.zeros(3, 3, 1, 1, dtype=torch.int64)
    bad_sel, bad_top = sel.clone(), top.clone()
    bad_sel[1, 1, 0, 1], bad_top[2, 0] = 16, 4

    def kernel(**kwargs):
        return npk_conv_gap(images, gates, **kwargs)

    with pytest.raises(TypeError, match="selections must be a list with one entry per layer"):
        kernel(selections=sel)
    with pytest.raises(ValueError, match="selections has 1 entries but there are 2 layers"):
        kernel(selections=[sel])
    with pytest.raises(ValueError, match=r"selections\[0\] must hold integer indices .* got torch.float32"):
        kernel(selections=[sel.float(), None])
    with pytest.raises(ValueError, match=r"selections\[0\] must hold integer indices .* got torch.bool"):
        kernel(selections=[sel.bool(), None])
    with pytest.raises(
        ValueError, match=r"selections\[0\] must have shape \(N, C, H_out, W_out\) = \(3, 2, H_out"
    ):
        kernel(selections=[sel[:, :1], None])
    with pytest.raises(ValueError, match=r"selections\[0\] must have shape .* got \(3, 2, 4\)"):
        kernel(selections=[sel.flatten(2), None])
    with pytest.raises(ValueError, match=r"selections\[0\] must have shape .* got \(2, 2, 2, 2\)"):
        kernel(selections=[sel[:2], None])
    with pytest.raises(
        ValueError, match=r"selections\[0\] has indices from 0 to 16 but they must lie in \[0, 16\)"
    ):
        kernel(selections=[bad_sel, None])
    with pytest.raises(
        ValueError, match=r"selections\[1\] has indices from -1 to -1 but they must lie in \[0, 4\)"
    ):
        kernel(selections=[sel, torch.full((3, 3, 1, 1), -1)])
    with pytest.raises(ValueError, match=r"gates\[1\] is 2x2 but the selection pool after gates\[0\] is 1x4"):
        kernel(selections=[torch.zeros(3, 2, 1, 4, dtype=torch.int64), None])
    with pytest.raises(ValueError, match=r"global_selection must have shape \(N, C, 1, 1\) = \(3, 3, 1, 1\)"):
        kernel(global_selection=top[:, :2])
    with pytest.raises(ValueError, match=r"global_selection must have shape .* got \(3, 3, 2, 1\)"):
        kernel(global_selection=torch.zeros(3, 3, 2, 1, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"global_selection has indices from 0 to 4 but .* \[0, 4\)"):
        kernel(global_selection=bad_top)
    # Composed with a selection pool after the last layer, it indexes that pool's output.
    with pytest.raises(ValueError, match=r"\[0, 2\): .* the 1x2 positions of the output of the selection"):
        kernel(selections=[None, torch.zeros(3, 3, 1, 2, dtype=torch.int64)], global_selection=top + 2)
    with pytest.raises(ValueError, match="selections_y is given without y"):
        kernel(selections=[sel, None], selections_y=[sel, None])
    with pytest.raises(ValueError, match="global_selection_y is given without y"):
        kernel(global_selection_y=top)
    cross = {"y": images, "gates_y": gates}
    with pytest.raises(
        ValueError, match="selections has a selection pool after layer 0 but selections_y has none"
    ):
        kernel(selections=[sel, None], **cross)
    with pytest.raises(
        ValueError, match="selections_y has a selection pool after layer 0 but selections has none"
    ):
        kernel(selections_y=[sel, None], **cross)
    with pytest.raises(ValueError, match="layer 0: selections pools to 2x2 but selections_y to 1x4"):
        kernel(selections=[sel, None], selections_y=[sel.view(3, 2, 1, 4), None], **cross)
    with pytest.raises(ValueError, match="global_selection is given without global_selection_y"):
        kernel(global_selection=top, **cross)
    with pytest.raises(ValueError, match=r"global_selection_y has indices from 0 to 4"):
        kernel(global_selection=top, global_selection_y=bad_top, **cross)


# ---------------------------------------------------------------------------
# 8. A gated ResNet: the sum of its 2^b sub-networks' kernels (Lemma B.1, Theorem 3.3)
# ---------------------------------------------------------------------------

# Six gated layers of 3 channels on 2-channel 4x5 images: layer 0 (the first block), three residual
# blocks with skips around layers 1-2, 3 and 4, then layer 5 (the last block): b = 3, 8 sub-networks.
RESNET_SKIPS = [(1, 3), (3, 4), (4, 5)]


def _resnet_value_net(z, gates, weights, head, padding, skips):
    """The value ResNet: gated 3x3 convolutions, the input of layer `start` added after layer
    `stop - 1`, then GAP and the head."""
    saved, starts, stops = {}, dict(skips), {stop: start for start, stop in skips}
    for layer, (w, gate) in enumerate(zip(weights, gates)):
        if layer in starts:
            saved[layer] = z
        z = gate * _conv(z, w, padding)
        if layer + 1 in stops:
            z = z + saved.pop(stops[layer + 1])
    return z.mean(dim=(2, 3)) @ head


def _sub_value_net(z, gates, weights, head, padding, layers):
    """A sub-network of the value ResNet: its kept `layers` only, with the ResNet's weights."""
    for layer in layers:
        z = gates[layer] * _conv(z, weights[layer], padding)
    return z.mean(dim=(2, 3)) @ head


@pytest.mark.parametrize("padding", ["zeros", "circular"])
@pytest.mark.parametrize("value_input", ["x", "ones"])
def test_resnet_npk_is_the_sum_of_its_subnetwork_kernels(padding, value_input):
    from intertwine.kernels import npk_resnet_conv_gap, resnet_subnetworks

    g = _gen(11)
    x = torch.randn(4, 2, 4, 5, generator=g, dtype=F64)
    channels = [2, 3, 3, 3, 3, 3, 3]
    # Gates of a feature network (a plain ReLU stack: any gates will do for the identity).
    features = [torch.randn(channels[l + 1], channels[l], 3, 3, generator=g, dtype=F64) for l in range(6)]
    gates = _conv_gates(x, features, padding, [False] * 6)
    subnetworks = resnet_subnetworks(6, RESNET_SKIPS)
    assert len(subnetworks) == 2**3
    assert [layers for kept, layers in subnetworks if kept in ((), (0, 1, 2), (1,))] == [
        [0, 5],
        [0, 3, 5],
        [0, 1, 2, 3, 4, 5],
    ]

    # The path decomposition: the ResNet's output is the sum of its sub-networks' (same weights).
    z0 = x if value_input == "x" else torch.ones_like(x)
    weights = [torch.randn(channels[l + 1], channels[l], 3, 3, generator=g, dtype=F64) for l in range(6)]
    head = torch.randn(3, generator=g, dtype=F64)
    y = _resnet_value_net(z0, gates, weights, head, padding, RESNET_SKIPS)
    parts = sum(_sub_value_net(z0, gates, weights, head, padding, layers) for _, layers in subnetworks)
    torch.testing.assert_close(y, parts, rtol=1e-12, atol=1e-12)

    # Lemma B.1: the ResNet's NPK is the sum of the 2^b sub-networks' (each by npk_conv_gap).
    direct = sum(
        npk_conv_gap(x, [gates[l] for l in layers], padding=padding, value_input=value_input)
        for _, layers in subnetworks
    )
    kernel = npk_resnet_conv_gap(x, gates, RESNET_SKIPS, padding=padding, value_input=value_input)
    assert kernel.dtype == F64 and kernel.shape == (4, 4)
    torch.testing.assert_close(kernel, direct, rtol=1e-12, atol=0)
    # It is not a sub-network's alone (the skips add kernels), and blocks and cross kernels agree.
    assert not torch.allclose(kernel, npk_conv_gap(x, gates, padding=padding, value_input=value_input))
    small = npk_resnet_conv_gap(x, gates, RESNET_SKIPS, padding=padding, value_input=value_input, max_bytes=1)
    torch.testing.assert_close(small, kernel, rtol=1e-13, atol=0)
    cross = npk_resnet_conv_gap(
        x[:1],
        [t[:1] for t in gates],
        RESNET_SKIPS,
        x[1:],
        [t[1:] for t in gates],
        padding=padding,
        value_input=value_input,
    )
    torch.testing.assert_close(cross, kernel[:1, 1:], rtol=1e-13, atol=0)


def test_resnet_npk_rejects_what_is_not_the_papers_resnet():
    from intertwine.kernels import npk_resnet_conv_gap

    g = _gen(12)
    x = torch.randn(2, 3, 4, 4, generator=g, dtype=F64)
    gates = [(torch.randn(2, 3, 4, 4, generator=g) > 0).to(F64) for _ in range(3)]
    with pytest.raises(ValueError, match="overlaps the one before"):
        npk_resnet_conv_gap(x, gates, [(0, 2), (1, 3)])
    with pytest.raises(ValueError, match="every layer lies inside a skip"):
        npk_resnet_conv_gap(x, gates, [(0, 3)])
    with pytest.raises(ValueError, match=r"0 <= start < stop <= 3"):
        npk_resnet_conv_gap(x, gates, [(2, 4)])
    with pytest.raises(ValueError, match="no pools"):
        npk_resnet_conv_gap(x, [gates[0], gates[1][:, :, :2, :2], gates[2]], [(1, 2)])
    wide = [gates[0], torch.ones(2, 5, 4, 4, dtype=F64), gates[2]]
    with pytest.raises(ValueError, match="same channels at both ends"):
        npk_resnet_conv_gap(x, wide, [(1, 2)])
