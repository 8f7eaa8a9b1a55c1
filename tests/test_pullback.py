"""Excitation pullbacks (intertwine.pullback): limits, the gated-value identity, symmetry, coverage."""

import copy

import pytest
import torch
import torch.nn.functional as F
from test_pullback_torchvision import TwoWayReLU
from torch import nn

from intertwine import models
from intertwine.pullback import (
    SOFT_FORWARDS,
    per_neuron_temperatures,
    pullback,
    soft_backward,
    soft_max_pool2d,
    swapped_modules,
)
from intertwine.symmetry import act_on_weights, random_elements

SMALL_T = 1e-9  # far below every pre-activation of these random nets, so every gate saturates
SOFT_TYPES = (nn.ReLU, nn.LeakyReLU, nn.MaxPool2d, nn.AdaptiveMaxPool2d)

ZOO = {
    "myrtle": {"arch": "myrtle", "width_multiplier": 0.125},
    "myrtle_leaky": {"arch": "myrtle", "width_multiplier": 0.125, "activation": "leaky_relu"},
    "resnet20": {"arch": "resnet20", "width_multiplier": 0.25},
    "resnet20_leaky_nores": {
        "arch": "resnet20",
        "width_multiplier": 0.25,
        "activation": "leaky_relu",
        "negative_slope": 0.1,
        "residual_activation": False,
    },
    "resnet18": {"arch": "resnet18", "width_multiplier": 0.125},
    "resnet18_nores": {"arch": "resnet18", "width_multiplier": 0.125, "residual_activation": False},
}


def build(spec, seed=0):
    torch.manual_seed(seed)
    return models.build(spec).double().eval()


def images(n=4, size=16, seed=1):
    return torch.randn(n, 3, size, size, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def input_gradient(f, x):
    """The plain gradient of sum(f(x)) with respect to x, by torch.autograd."""
    x = x.clone().requires_grad_(True)
    return torch.autograd.grad(f(x).sum(), x)[0]


def relative(a, b):
    return ((a - b).norm() / b.norm()).item()


def max_relative(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def cosines(a, b):
    return F.cosine_similarity(a.flatten(1), b.flatten(1))


# --- the soft max-pool --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [(2,), (3, 2, 1), ((3, 2), (2, 1), (1, 0), (1, 2)), (3, 2, 1, 1, True), (2, 2, 0, 1, True)],
    ids=["k2", "k3s2p1", "rect_dilated", "ceil_padded", "ceil"],
)
def test_soft_max_pool_value_is_max_pool_exactly(args):
    x = torch.randn(2, 3, 9, 11, dtype=torch.float64)
    assert torch.equal(soft_max_pool2d(x, 0.3, *args), F.max_pool2d(x, *args))
    assert torch.equal(soft_max_pool2d(x.float(), 0.3, *args), F.max_pool2d(x.float(), *args))


def test_soft_max_pool_gradient_is_softmax_pool():
    x, t = torch.randn(2, 3, 6, 8, dtype=torch.float64), 0.3
    upstream = torch.randn(2, 3, 3, 4, dtype=torch.float64)

    def softmax_pool(x):  # 2x2 windows moved last, then softmax-weighted
        w = x.reshape(2, 3, 3, 2, 4, 2).permute(0, 1, 2, 4, 3, 5).reshape(2, 3, 3, 4, 4)
        return (torch.softmax(w / t, -1) * w).sum(-1) * upstream

    got = input_gradient(lambda x: soft_max_pool2d(x, t, 2) * upstream, x)
    assert relative(got, input_gradient(softmax_pool, x)) < 1e-12


@pytest.mark.parametrize("output_size", [1, (2, 3)])
def test_soft_adaptive_max_pool(output_size):
    pool, x, t = nn.AdaptiveMaxPool2d(output_size), torch.randn(2, 3, 5, 7, dtype=torch.float64), 0.3
    with soft_backward(pool, t):
        soft = pool(x)
        got = input_gradient(pool, x)
    assert torch.equal(soft, F.adaptive_max_pool2d(x, output_size))
    if output_size == 1:  # global max pool: a softmax over every position
        expected = input_gradient(lambda x: (torch.softmax(x.flatten(2) / t, -1) * x.flatten(2)).sum(-1), x)
        assert relative(got, expected) < 1e-12


def test_forward_unchanged_while_swapped():
    model, x = build(ZOO["myrtle"]), images()
    with soft_backward(model, 0.3) as sites:
        soft = model(x)
    assert sites.soft == swapped_modules(model)
    assert torch.equal(soft, model(x))


# --- limits and the gated-value identity ---------------------------------------------------------


@pytest.mark.parametrize("arch", ["myrtle", "resnet20"])
def test_small_temperature_gives_the_gradient(arch):
    model, x, classes = build(ZOO[arch]), images(), torch.tensor([0, 3, 7, 9])
    expected = input_gradient(lambda x: model(x)[torch.arange(4), classes], x)
    assert relative(pullback(model, x, classes, temperature=SMALL_T), expected) < 1e-6
    assert relative(pullback(model, x, classes, mode="gradient"), expected) < 1e-12


def _mlp():
    return nn.Sequential(nn.Linear(12, 20), nn.ReLU(), nn.Linear(20, 16), nn.ReLU(), nn.Linear(16, 5))


def _cnn():
    net = nn.Sequential(
        nn.Conv2d(3, 6, 3, padding=1),
        nn.BatchNorm2d(6),
        nn.ReLU(),
        nn.Conv2d(6, 8, 3, stride=2),
        nn.LeakyReLU(0.1),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 5),
    )
    net[1].running_mean.uniform_(-0.5, 0.5), net[1].running_var.uniform_(0.5, 2.0)
    return net


@pytest.mark.parametrize("make, shape", [(_mlp, (6, 12)), (_cnn, (6, 3, 8, 8))], ids=["mlp", "cnn"])
def test_pullback_is_the_gradient_of_the_gated_value_network(make, shape):
    torch.manual_seed(0)
    net, t = make().double().eval(), 0.3
    x, classes = torch.randn(*shape, dtype=torch.float64), torch.tensor([0, 1, 2, 3, 4, 0])

    def gated_value(x):
        # The same weights, each activation z -> z * gate with the gate from the original pass
        # (sigmoid(z / T); LeakyReLU: a + (1 - a) sigmoid(z / T)), held fixed.
        h, h_feature = x, x.detach()
        for layer in net:
            if isinstance(layer, (nn.ReLU, nn.LeakyReLU)):
                slope = getattr(layer, "negative_slope", 0.0)
                gate = slope + (1 - slope) * torch.sigmoid(h_feature / t)
                h, h_feature = h * gate, layer(h_feature)
            else:
                h, h_feature = layer(h), layer(h_feature)
        return h[torch.arange(len(x)), classes]

    assert relative(pullback(net, x, classes, temperature=t), input_gradient(gated_value, x)) < 1e-12


def test_large_temperature_halves_every_relu():
    torch.manual_seed(0)
    layers = [nn.Linear(a, b, bias=False) for a, b in [(10, 16), (16, 16), (16, 12), (12, 4)]]
    net = nn.Sequential(layers[0], nn.ReLU(), layers[1], nn.ReLU(), layers[2], nn.ReLU(), layers[3]).double()
    x = torch.randn(4, 10, dtype=torch.float64)
    product = layers[3].weight @ layers[2].weight @ layers[1].weight @ layers[0].weight
    expected = 2.0**-3 * product[torch.arange(4)]  # class i for image i
    assert relative(pullback(net, x, torch.arange(4), temperature=1e6), expected) < 1e-5


# --- symmetry --------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["myrtle", "resnet20"])
def test_pullbacks_are_invariant_to_permutations(arch):
    model, x, probe = build(ZOO[arch]), images(6), images(16, seed=2)
    acted = act_on_weights(model, random_elements(model, "permutation", torch.Generator().manual_seed(0)))
    classes = torch.arange(6)
    assert max_relative(pullback(acted, x, classes), pullback(model, x, classes)) < 1e-12
    ours, theirs = per_neuron_temperatures(model, probe), per_neuron_temperatures(acted, probe)
    got = pullback(acted, x, classes, mode="per_neuron", temperatures=theirs)
    assert max_relative(got, pullback(model, x, classes, mode="per_neuron", temperatures=ours)) < 1e-12


@pytest.fixture(scope="module")
def scaled_myrtle():
    """A random Myrtle, its copy acted on by G_ReLU elements of log-normal spread 1, test images and
    a probe set."""
    model = build({"arch": "myrtle", "width_multiplier": 0.25})
    elements = random_elements(model, "grelu", torch.Generator().manual_seed(0), sigma=1.0)
    return model, act_on_weights(model, elements), images(8), images(32, seed=2)


def test_positive_scalings_change_global_temperature_pullbacks(scaled_myrtle):
    model, acted, x, _ = scaled_myrtle
    classes = torch.arange(8)
    assert max_relative(model(x), acted(x)) < 1e-12  # the same function...
    assert cosines(pullback(acted, x, classes), pullback(model, x, classes)).min() < 0.999  # ...not pullback
    plain = cosines(
        pullback(acted, x, classes, mode="gradient"), pullback(model, x, classes, mode="gradient")
    )
    assert plain.min() > 1 - 1e-12


def test_per_neuron_temperatures_restore_invariance(scaled_myrtle):
    model, acted, x, probe = scaled_myrtle
    classes = torch.arange(8)
    ours = pullback(model, x, classes, mode="per_neuron", temperatures=per_neuron_temperatures(model, probe))
    theirs = pullback(
        acted, x, classes, mode="per_neuron", temperatures=per_neuron_temperatures(acted, probe)
    )
    assert max_relative(theirs, ours) < 1e-10


def test_per_neuron_temperatures_are_scaled_rms():
    torch.manual_seed(0)
    model, probe = build({"arch": "myrtle", "width_multiplier": 0.125, "batch_norm": False}), images(8)
    with torch.no_grad():  # a dead channel: act1's pre-activation is exactly zero there
        model.conv1.weight[0], model.conv1.bias[0] = 0.0, 0.0
    temperatures = per_neuron_temperatures(model, probe, temperature=0.5)
    assert list(temperatures) == swapped_modules(model)
    for name, t in temperatures.items():
        assert t.dtype == torch.float64 and t.device.type == "cpu" and (t >= 0).all(), name
    act2 = models.site_activations(model, probe, ["act2"])["act2"]  # pool2's input
    assert relative(temperatures["pool2"], 0.5 * act2.square().mean((0, 2, 3)).sqrt()) < 1e-12
    assert temperatures["act1"][0] == 0 and (temperatures["act1"][1:] > 0).all()  # dead: no scale
    # Temperature 0 means the T -> 0 limit for that channel: here, everywhere the plain gradient.
    zero = {name: torch.zeros_like(t) for name, t in temperatures.items()}
    x = images(2)
    got = pullback(model, x, [0, 1], mode="per_neuron", temperatures=zero)
    assert relative(got, pullback(model, x, [0, 1], mode="gradient")) < 1e-12


# --- coverage of the zoo ------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", list(ZOO))
def test_every_relu_and_max_pool_of_the_zoo_is_swapped(variant):
    model, x, classes = build(ZOO[variant]), images(2), torch.tensor([1, 2])
    expected = [name for name, module in model.named_modules() if isinstance(module, SOFT_TYPES)]
    assert expected and swapped_modules(model) == expected
    gradient = input_gradient(lambda x: model(x)[torch.arange(2), classes], x)
    # The graph check inside pullback raises if any kink was left unswapped.
    assert relative(pullback(model, x, classes, temperature=SMALL_T), gradient) < 1e-6
    assert relative(pullback(model, x, classes, temperature=0.3), gradient) > 1e-2


class _FunctionalReLU(nn.Module):
    def __init__(self, kind="relu"):
        super().__init__()
        self.conv, self.act, self.kind = nn.Conv2d(3, 4, 3), nn.ReLU(), kind
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        x = self.act(self.conv(x))
        x = {
            "relu": lambda x: F.relu(x - 0.1),
            "pool": lambda x: F.max_pool2d(x, 3, 2, 1),
            "clamp": lambda x: (x - 0.1).clamp(min=0),
        }[self.kind](x)
        return self.fc(x.mean((2, 3)))


class _ModuleReLU(_FunctionalReLU):
    """The same function with modules where _FunctionalReLU calls functions."""

    def __init__(self, kind):
        super().__init__(kind)
        self.second = nn.ReLU() if kind == "relu" else nn.MaxPool2d(3, 2, 1)

    def forward(self, x):
        x = self.act(self.conv(x))
        x = self.second(x - 0.1 if self.kind == "relu" else x)
        return self.fc(x.mean((2, 3)))


@pytest.mark.parametrize("kind, site", [("relu", "relu()"), ("pool", "max_pool2d()")])
def test_functional_calls_are_swapped_or_left_hard(kind, site):
    model, x = _FunctionalReLU(kind).double(), images(2)
    modules = _ModuleReLU(kind).double()
    modules.load_state_dict(model.state_dict(), strict=False)
    # functional="soft" (the default): the call is swapped, as its module form is
    assert relative(pullback(model, x, 0), pullback(modules, x, 0)) < 1e-14
    with soft_backward(model, 0.3) as sites:
        model(x)
    assert sites.soft == ["act", site] and not sites.hard
    # functional="hard": the released code's behaviour, the call keeps its hard gradient
    hard = pullback(model, x, 0, functional="hard")
    released = copy.deepcopy(model)
    released.act = TwoWayReLU(0.3)  # the released code's module swap; the functional call untouched
    assert relative(hard, input_gradient(lambda z: released(z)[:, 0], x)) < 1e-14
    assert relative(hard, pullback(model, x, 0)) > 1e-3
    assert not any("forward" in vars(module) for module in model.modules())


def test_other_kinks_are_refused():
    model, x = _FunctionalReLU("clamp").double(), images(2)
    with pytest.raises(ValueError, match="ClampBackward"):
        pullback(model, x, 0)
    assert not any("forward" in vars(module) for module in model.modules())
    pullback(model, x, 0, mode="gradient")  # the plain gradient needs no swap


def test_zoo_functional_calls_are_call_sites():
    # The CCT's tokenizer calls F.relu and F.max_pool2d: with ReLU blocks it is a pullback model.
    model = build({"arch": "cct", "width_multiplier": 0.25, "activation": "relu"})
    with soft_backward(model, 0.3) as sites:
        model(images(2))
    functional = [site for site in sites.soft if site.endswith("()")]
    assert functional == [f"tokenizer.{i}.{f}()" for i in (0, 1) for f in ("relu", "max_pool2d")]
    x = images(2)
    assert (
        relative(pullback(model, x, 0, temperature=SMALL_T), input_gradient(lambda z: model(z)[:, 0], x))
        < 1e-6
    )


@pytest.mark.parametrize(
    "spec, module",
    [
        ({"arch": "convnext", "width_multiplier": 0.25}, r"stage1\.0\.act \(GELU\)"),
        ({"arch": "cct", "width_multiplier": 0.25}, r"blocks\.0\.act \(GELU\)"),
        ({"arch": "myrtle", "width_multiplier": 0.125, "activation": "sigmoid"}, r"act1 \(Sigmoid\)"),
    ],
)
def test_non_relu_activations_are_refused(spec, module):
    with pytest.raises(ValueError, match=module):
        pullback(build(spec), images(2), 0)


def test_registered_module_types_are_swapped(monkeypatch):
    class Rectifier(nn.ReLU):  # a subclass may compute anything, so it is not swapped as a module
        pass

    net = nn.Sequential(nn.Linear(5, 7), Rectifier(), nn.Linear(7, 3)).double()
    x = torch.randn(4, 5, dtype=torch.float64)
    reference = nn.Sequential(net[0], nn.ReLU(), net[2])
    with soft_backward(net, 0.3) as sites:  # its F.relu call is caught as a functional call
        net(x)
    assert sites.soft == ["1.relu()"]
    assert relative(pullback(net, x, 0), pullback(reference, x, 0)) < 1e-15
    monkeypatch.setitem(SOFT_FORWARDS, Rectifier, SOFT_FORWARDS[nn.ReLU])
    assert swapped_modules(net) == ["1"]
    with soft_backward(net, 0.3) as sites:
        net(x)
    assert sites.soft == ["1"]
    assert relative(pullback(net, x, 0), pullback(reference, x, 0)) < 1e-15


def test_model_is_left_unchanged():
    model, x = build(ZOO["resnet20"]), images(3)
    model.train()
    model.layer1.eval()
    model.fc.weight.requires_grad_(False)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    modes = [m.training for m in model.modules()]
    flags = [p.requires_grad for p in model.parameters()]
    for mode in ("global", "per_neuron", "gradient"):
        temperatures = per_neuron_temperatures(model, x)
        pullback(model, x, 0, mode=mode, temperatures=temperatures)
        pullback(model, x, None, mode=mode, temperatures=temperatures, site="layer2.0.act1", units=1)
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert [m.training for m in model.modules()] == modes
    assert [p.requires_grad for p in model.parameters()] == flags
    assert all(p.grad is None for p in model.parameters())
    for module in model.modules():
        assert not module._forward_hooks and not module._forward_pre_hooks and "forward" not in vars(module)


# --- hidden units ----------------------------------------------------------------------------------


@pytest.mark.parametrize("arch, site", [("myrtle", "act3"), ("resnet20", "layer2.0.act1")])
def test_hidden_unit_pullbacks(arch, site):
    model, x = build(ZOO[arch]), images(3)
    units = torch.tensor([0, 3, 1])

    def unit_sum(x):
        return models.forward_to(model, x, site)[0][torch.arange(3), units].sum((1, 2))

    gradient = input_gradient(unit_sum, x)
    got = pullback(model, x, None, temperature=SMALL_T, site=site, units=units)
    assert relative(got, gradient) < 1e-6
    assert relative(pullback(model, x, None, site=site, units=units), gradient) > 1e-2
    one = pullback(model, x[:1], None, temperature=SMALL_T, site=site, units=0)  # an int unit for all
    assert relative(one, gradient[:1]) < 1e-6


def test_argument_errors():
    model, x = build(ZOO["myrtle"]), images(2)
    with pytest.raises(ValueError, match="unknown mode"):
        pullback(model, x, 0, mode="soft")
    with pytest.raises(ValueError, match="needs temperatures"):
        pullback(model, x, 0, mode="per_neuron")
    with pytest.raises(ValueError, match="no per-neuron temperatures"):
        pullback(model, x, 0, mode="per_neuron", temperatures={"conv1": torch.ones(2)})
    with pytest.raises(ValueError, match="2 images but 3 classes"):
        pullback(model, x, [0, 1, 2])
    with pytest.raises(ValueError, match="either classes"):
        pullback(model, x, 0, site="act1", units=0)
    with pytest.raises(ValueError, match="positive"):
        pullback(model, x, 0, temperature=0.0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_matches_cpu():
    model, x, probe = build(ZOO["myrtle"]), images(4), images(8, seed=2)
    temperatures = per_neuron_temperatures(model, probe)
    cpu = pullback(model, x, [0, 1, 2, 3], mode="per_neuron", temperatures=temperatures)
    gpu = pullback(model.cuda(), x.cuda(), [0, 1, 2, 3], mode="per_neuron", temperatures=temperatures)
    assert gpu.device.type == "cuda" and relative(gpu.cpu(), cpu) < 1e-10


def test_options_set_the_defaults_of_every_pullback_in_the_block():
    from intertwine.pullback import options
    from intertwine.workflow.stages.pullback.directions import with_pullback_options

    model, x = _FunctionalReLU("relu").double(), images(2)
    hard = pullback(model, x, 0, functional="hard")
    with options(functional="hard"):
        assert torch.equal(pullback(model, x, 0), hard)
    assert relative(pullback(model, x, 0), hard) > 1e-3  # restored on exit

    @with_pullback_options
    def job(block):  # a job reads the block's settings as the pullbacks' defaults
        return pullback(model, x, 0)

    assert torch.equal(job({"functional": "hard"}), hard)
    with pytest.raises(ValueError, match="pool_padding must be one of"), options(pool_padding="same"):
        pass


# --- Equation 7: f_Lambda(x) = <v_Lambda(x), x> ------------------------------------------------------


def _bias_free_relu_net(conv: bool, bias: bool = False) -> nn.Sequential:
    """A ReLU network of linear maps only (the paper's Section 2.1 omits max-pooling)."""
    if conv:
        layers = [
            nn.Conv2d(3, 5, 3, padding=1, bias=bias),
            nn.ReLU(),
            nn.Conv2d(5, 4, 3, stride=2, bias=bias),
        ]
        layers += [nn.ReLU(), nn.Flatten(), nn.Linear(4 * 3 * 3, 6, bias=bias)]
    else:
        layers = [nn.Linear(10, 16, bias=bias), nn.ReLU(), nn.Linear(16, 12, bias=bias), nn.ReLU()]
        layers += [nn.Linear(12, 6, bias=bias)]
    return nn.Sequential(*layers).double().eval()


def _f_lambda(net: nn.Sequential, x, classes, gate):
    """f_Lambda(x) = y^T Lambda_L(x) W_L ... Lambda_1(x) W_1 x: the network's linear maps, each ReLU
    replaced by multiplication with ``gate(z)`` of the pre-activation z of the ordinary pass."""
    h, ordinary = x, x
    for layer in net:
        if isinstance(layer, nn.ReLU):
            h, ordinary = h * gate(ordinary), layer(ordinary)
        else:
            h, ordinary = layer(h), layer(ordinary)
    return h[torch.arange(len(x)), classes]


@pytest.mark.parametrize("conv", [False, True], ids=["mlp", "cnn"])
def test_equation_7_the_pullback_represents_f_lambda_without_biases(conv):
    """The paper's Equation 7, f_Lambda(x) = <v_Lambda(x), x>, on a bias-free ReLU network, exact
    to float64 rounding: for the hard gates G (the plain gradient, f_G = f), the global-T
    excitation gates sigmoid(z / T) and per-neuron temperatures."""
    torch.manual_seed(0)
    net = _bias_free_relu_net(conv)
    x = torch.randn(6, *((3, 7, 7) if conv else (10,)), dtype=torch.float64)
    classes = torch.tensor([0, 1, 2, 3, 4, 5])
    temperatures = per_neuron_temperatures(net, x, 0.3)
    sites = [name for name, layer in net.named_children() if isinstance(layer, nn.ReLU)]
    relus = iter(sites * len(net))

    def per_neuron_gate(z):
        t = temperatures[next(relus)]
        return torch.sigmoid(z / t.view(-1, *[1] * (z.dim() - 2)))

    cases = [
        ("gradient", lambda z: (z > 0).double(), net(x)[torch.arange(6), classes]),
        ("global", lambda z: torch.sigmoid(z / 0.3), None),
        ("per_neuron", per_neuron_gate, None),
    ]
    for mode, gate, f in cases:
        v = pullback(net, x, classes, temperature=0.3, mode=mode, temperatures=temperatures)
        expected = _f_lambda(net, x, classes, gate)
        inner = (v * x).flatten(1).sum(1)
        assert torch.allclose(inner, expected, rtol=1e-12, atol=1e-12 * expected.abs().max().item()), mode
        if f is not None:  # f_G is the network's own logit
            assert torch.allclose(expected, f, rtol=1e-12, atol=0)


def test_equation_7_needs_the_papers_augmented_input_when_layers_have_biases():
    """With biases the identity fails on x (the biases' paths do not pass through x); the paper
    assumes them folded in: "the bias term is incorporated by appending a 1 to the end of the input
    vector" (Section 2.1). On the augmented network (each W~ = [[W, b], [0, 1]], a unit carrying
    the 1 through every ReLU) and input (x, 1), f is unchanged and Equation 7 holds exactly for G."""
    torch.manual_seed(1)
    net = _bias_free_relu_net(conv=False, bias=True)
    for layer in net:
        if isinstance(layer, nn.Linear):
            nn.init.uniform_(layer.bias, 0.2, 1.0)
    x, classes = torch.randn(6, 10, dtype=torch.float64), torch.tensor([0, 1, 2, 3, 4, 5])
    f = net(x)[torch.arange(6), classes]
    v = pullback(net, x, classes, mode="gradient")
    assert ((v * x).sum(1) - f).abs().max() > 1e-2  # the bias paths are missing
    augmented = []
    linears = [layer for layer in net if isinstance(layer, nn.Linear)]
    for k, layer in enumerate(linears):
        last = k == len(linears) - 1
        out, inp = layer.out_features + (0 if last else 1), layer.in_features + 1
        lifted = nn.Linear(inp, out, bias=False).double()
        with torch.no_grad():
            lifted.weight.zero_()
            lifted.weight[: layer.out_features, :-1] = layer.weight
            lifted.weight[: layer.out_features, -1] = layer.bias
            if not last:
                lifted.weight[-1, -1] = 1.0
        augmented += [lifted] if last else [lifted, nn.ReLU()]
    lifted_net = nn.Sequential(*augmented).eval()
    x1 = torch.cat([x, torch.ones(6, 1, dtype=torch.float64)], 1)
    assert torch.allclose(lifted_net(x1)[torch.arange(6), classes], f, rtol=1e-12, atol=1e-12)
    v1 = pullback(lifted_net, x1, classes, mode="gradient")
    assert torch.allclose((v1 * x1).sum(1), f, rtol=1e-12, atol=1e-12)
