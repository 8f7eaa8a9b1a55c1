"""Excitation pullbacks on the paper's torchvision architectures (random weights, 32 px, float64):
every ReLU *call* is a call site (reused modules, functional calls), per-neuron temperatures make
pullbacks exactly invariant to G_ReLU acting on the weights, the soft max-pool is the paper's
Listing 2, and the result equals a transcription of the paper's released code."""

import copy
import functools

import pytest
import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from intertwine.pullback import per_neuron_temperatures, pullback, soft_backward, soft_max_pool2d

ARCHS = ("resnet18", "resnet50", "vgg11_bn", "densenet121")
CLASSES = 10


def calibrated(model: nn.Module, seed: int) -> nn.Module:
    """Batch-norm statistics of random images (so that activations neither vanish nor blow up over
    50 layers) and random affine parameters (so that channels differ in scale), in eval mode."""
    generator = torch.Generator().manual_seed(seed)
    for module in model.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.momentum = None  # a cumulative average: one pass gives the batch's statistics
    model.train()
    with torch.no_grad():
        model(torch.randn(8, 3, 32, 32, generator=generator, dtype=torch.float64))
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                c = module.num_features
                module.weight.copy_(0.5 + torch.rand(c, generator=generator, dtype=torch.float64))
                module.bias.copy_(0.3 * torch.randn(c, generator=generator, dtype=torch.float64))
    return model.eval()


@functools.cache
def _built(arch: str, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    if arch == "vgg11_bn":
        # torchvision's VGG11_BN with its classifier's layout at width 64 instead of 4096: the 25088 x
        # 4096 matrix would cost 0.8 GB in float64 and nothing in what is tested here.
        with torch.device("meta"):
            model = torchvision.models.vgg11_bn(weights=None, num_classes=CLASSES)
        model.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 64), nn.ReLU(True), nn.Dropout(), nn.Linear(64, 64), nn.ReLU(True),
            nn.Dropout(), nn.Linear(64, CLASSES),
        )  # fmt: skip
        model.features.to_empty(device="cpu")
        for module in model.features:
            if isinstance(module, (nn.Conv2d, nn.BatchNorm2d)):
                module.reset_parameters()
    else:
        model = getattr(torchvision.models, arch)(weights=None, num_classes=CLASSES)
    return calibrated(model.double(), seed)


def build(arch: str, seed: int = 0) -> nn.Module:
    """torchvision's ``arch`` with random weights and batch-norm statistics (10 classes, float64)."""
    return copy.deepcopy(_built(arch, seed))


def images(n=2, seed=1, size=32):
    return torch.randn(n, 3, size, size, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def relative(a, b):
    return ((a - b).norm() / b.norm()).item()


# --- G_ReLU acting on the weights of torchvision models ---------------------------------------------
# A group acts on the channels of one pre-activation: its producers are (layer, batch norm) pairs
# whose output it scales by d > 0 and permutes (a producer's layer is only permuted when a batch
# norm follows it; a permutation needs every producer to have a layer), its consumers the layers
# reading it (input channels permuted and divided by d). Residual streams are one group each.


def resnet_groups(model) -> list[tuple[list, list, bool]]:
    bottleneck = isinstance(model.layer1[0], torchvision.models.resnet.Bottleneck)
    last = 3 if bottleneck else 2
    groups = []
    for stage in range(1, 5):
        for i in range(len(getattr(model, f"layer{stage}"))):
            block = f"layer{stage}.{i}"
            for k in range(1, last):
                groups.append(([(f"{block}.conv{k}", f"{block}.bn{k}")], [f"{block}.conv{k + 1}"], True))
    producers, consumers = [("conv1", "bn1")], []
    for stage in range(1, 5):
        first = f"layer{stage}.0"
        consumers.append(f"{first}.conv1")
        if getattr(model, f"layer{stage}")[0].downsample is not None:
            groups.append((producers, consumers + [f"{first}.downsample.0"], True))
            producers, consumers = [(f"{first}.downsample.0", f"{first}.downsample.1")], []
        for i in range(len(getattr(model, f"layer{stage}"))):
            producers.append((f"layer{stage}.{i}.conv{last}", f"layer{stage}.{i}.bn{last}"))
            if i:
                consumers.append(f"layer{stage}.{i}.conv1")
    groups.append((producers, consumers + ["fc"], True))
    return groups


def vgg_groups(model) -> list[tuple[list, list, bool]]:
    layers = [(f"features.{i}", m) for i, m in enumerate(model.features)]
    convs = [name for name, m in layers if isinstance(m, nn.Conv2d)]
    groups = []
    for k, conv in enumerate(convs):
        bn = f"features.{int(conv.split('.')[1]) + 1}"
        reader = convs[k + 1] if k + 1 < len(convs) else ("classifier.0", 49)  # 7 x 7 positions each
        groups.append(([(conv, bn)], [reader], True))
    groups.append(([("classifier.0", None)], ["classifier.3"], True))
    groups.append(([("classifier.3", None)], ["classifier.6"], True))
    return groups


def densenet_groups(model) -> list[tuple[list, list, bool]]:
    groups = []
    for name, module in model.features.named_modules():
        name = f"features.{name}"
        if isinstance(module, torchvision.models.densenet._DenseLayer):
            # norm1 reads the concatenation that other layers read too: scale it, do not permute
            groups.append(([(None, f"{name}.norm1")], [f"{name}.conv1"], False))
            groups.append(([(f"{name}.conv1", f"{name}.norm2")], [f"{name}.conv2"], True))
        elif isinstance(module, torchvision.models.densenet._Transition):
            groups.append(([(None, f"{name}.norm")], [f"{name}.conv"], False))
    groups.append(([(None, "features.norm5")], ["classifier"], False))  # read by the functional ReLU
    return groups


GROUPS = {
    "resnet18": resnet_groups,
    "resnet50": resnet_groups,
    "vgg11_bn": vgg_groups,
    "densenet121": densenet_groups,
}


@torch.no_grad()
def act_grelu(model: nn.Module, groups, generator: torch.Generator, sigma: float = 1.0) -> nn.Module:
    """The same function with a random G_ReLU element acting on every group's channels."""
    get = model.get_submodule
    for producers, consumers, permute in groups:
        first = producers[0][1] or producers[0][0]
        c = get(first).num_features if producers[0][1] else get(first).out_features
        d = torch.exp(sigma * torch.randn(c, generator=generator, dtype=torch.float64))
        perm = torch.randperm(c, generator=generator) if permute else torch.arange(c)
        for layer, norm in producers:
            if norm is None:  # a Linear's output is the pre-activation
                get(layer).weight.copy_(d[:, None] * get(layer).weight[perm])
                get(layer).bias.copy_(d * get(layer).bias[perm])
                continue
            if layer is not None:
                for t in (t for t in (get(layer).weight, get(layer).bias) if t is not None):
                    t.copy_(t[perm])
            bn = get(norm)
            bn.weight.copy_(d * bn.weight[perm])
            bn.bias.copy_(d * bn.bias[perm])
            bn.running_mean.copy_(bn.running_mean[perm])
            bn.running_var.copy_(bn.running_var[perm])
        for reader in consumers:
            reader, block = reader if isinstance(reader, tuple) else (reader, 1)
            w = get(reader).weight
            grouped = w.view(w.shape[0], c, block, *w.shape[2:])
            scale = d.view(1, c, *([1] * (grouped.dim() - 2)))
            w.copy_((grouped[:, perm] / scale).view_as(w))
    return model


@pytest.fixture(scope="module", params=ARCHS)
def acted(request):
    arch = request.param
    model = build(arch)
    moved = act_grelu(build(arch), GROUPS[arch](model), torch.Generator().manual_seed(7))
    return arch, model, moved


def test_g_relu_invariance_per_call_site(acted):
    arch, model, moved = acted
    x, probe, classes = images(2), images(4, seed=2), [1, 2]
    with torch.no_grad():
        assert relative(moved(x), model(x)) < 1e-12  # the same function
    ours, theirs = per_neuron_temperatures(model, probe), per_neuron_temperatures(moved, probe)
    assert list(ours) == list(theirs)
    if arch == "resnet50":  # torchvision's Bottleneck calls one ReLU three times: 64, 64, 256 channels
        shapes = [ours[f"layer1.0.relu{k}"].shape for k in ("", "@2", "@3")]
        assert shapes == [(64,), (64,), (256,)] and "layer1.0.relu@4" not in ours
    if arch == "densenet121":  # its functional last ReLU, called in the root module's forward
        assert ours["relu()"].shape == (1024,)
    got = {
        mode: [
            pullback(m, x, classes, mode=mode, temperatures=t) for m, t in ((model, ours), (moved, theirs))
        ]
        for mode in ("gradient", "global", "per_neuron")
    }
    assert relative(*got["gradient"]) < 1e-10
    assert relative(*got["per_neuron"]) < 1e-10
    assert relative(*got["global"]) > 1e-3  # a global T is not scale-invariant: the test can fail
    assert relative(got["per_neuron"][0], got["gradient"][0]) > 1e-2  # and the pullback is no gradient


# --- the paper's released code, transcribed (Listings 1 and 2) ----------------------------------------


class TwoWayReLUFunction(torch.autograd.Function):
    """Listing 1: ReLU forward, sigmoid(z / T) backward."""

    @staticmethod
    def forward(ctx, z, temperature):
        ctx.save_for_backward(z)
        ctx.temperature = temperature
        return F.relu(z)

    @staticmethod
    def backward(ctx, grad_output):
        (z,) = ctx.saved_tensors
        return grad_output * torch.sigmoid(z / ctx.temperature), None


class TwoWayReLU(nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.temperature = temperature

    def forward(self, x):
        return TwoWayReLUFunction.apply(x, self.temperature)


class SurrogateSoftMaxPool2d(nn.MaxPool2d):
    """Listing 2: a softmax over F.unfold's zero-padded windows, with the hard max's value."""

    def __init__(self, *args, temperature, **kwargs):
        super().__init__(*args, **kwargs)
        self.temperature = temperature

    def forward(self, x):
        b, c, h, w = x.shape
        k, s, p = self.kernel_size, self.stride, self.padding
        unfolded = F.unfold(x, kernel_size=k, stride=s, padding=p).view(b, c, k * k, -1)
        weights = F.softmax(unfolded / self.temperature, dim=2)
        soft = (unfolded * weights).sum(dim=2).view(b, c, (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1)
        hard = F.max_pool2d(x, k, s, p, self.dilation, ceil_mode=self.ceil_mode)
        return hard.detach() + (soft - soft.detach())


def with_reference_modules(module: nn.Module, temperature: float) -> nn.Module:
    """The released code's replace_module_with_custom_: nn.ReLU and nn.MaxPool2d children replaced."""
    for name, child in module.named_children():
        if isinstance(child, nn.ReLU):
            setattr(module, name, TwoWayReLU(temperature))
        elif isinstance(child, nn.MaxPool2d):
            keys = ("kernel_size", "stride", "padding", "dilation", "return_indices", "ceil_mode")
            setattr(
                module,
                name,
                SurrogateSoftMaxPool2d(**{k: getattr(child, k) for k in keys}, temperature=temperature),
            )
        else:
            with_reference_modules(child, temperature)
    return module


def input_gradient(model, x, classes):
    x = x.clone().requires_grad_(True)
    return torch.autograd.grad(model(x)[torch.arange(len(x)), classes].sum(), x)[0]


@pytest.mark.parametrize("pool", [(3, 2, 1), (2, 2, 0), (3, 1, 1), (3, 2, 0)])
@pytest.mark.parametrize("temperature", [0.3, 0.05])
def test_soft_max_pool_is_listing_2(pool, temperature):
    # post-ReLU inputs, as in ResNet50's and DenseNet121's stems: zeros tie with the padding
    x = F.relu(torch.randn(2, 3, 9, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(3)))
    upstream = torch.randn_like(F.max_pool2d(x, *pool))
    reference = SurrogateSoftMaxPool2d(*pool, temperature=temperature)

    def grad(f):
        z = x.clone().requires_grad_(True)
        out = f(z)
        assert torch.equal(out, F.max_pool2d(x, *pool))
        return torch.autograd.grad((out * upstream).sum(), z)[0]

    expected = grad(reference)
    assert relative(grad(lambda z: soft_max_pool2d(z, temperature, *pool)), expected) < 1e-12
    excluded = grad(lambda z: soft_max_pool2d(z, temperature, *pool, pool_padding="excluded"))
    if pool[2]:  # padding: excluding it is another gradient
        assert relative(excluded, expected) > 1e-3
    else:
        assert relative(excluded, expected) < 1e-12


@pytest.mark.parametrize("arch", ["resnet50", "densenet121"])
def test_equals_the_released_code(arch):
    # The released code swaps nn.ReLU and nn.MaxPool2d modules only: DenseNet's functional last ReLU
    # keeps its hard gradient there, which functional="hard" reproduces; with "soft" it is swapped.
    model, x, classes = build(arch), images(2), torch.tensor([3, 4])
    reference = input_gradient(with_reference_modules(build(arch), 0.3), x, classes)
    hard = pullback(model, x, classes, temperature=0.3, functional="hard")
    assert relative(hard, reference) < 1e-12
    soft = pullback(model, x, classes, temperature=0.3, functional="soft")
    if arch == "densenet121":
        assert relative(soft, reference) > 1e-3
        with soft_backward(model, 0.3, functional="hard") as sites:
            model(x)
        assert sites.hard == ["relu()"] and "relu()" not in sites.soft
    else:
        assert relative(soft, reference) < 1e-12


def test_gate_patterns_name_the_call_sites_of_torchvisions_architectures():
    """Hypothesis 1's record on the paper's architectures: a Bottleneck's ReLU module called three
    times gives three sites; DenseNet121's functional ReLU is recorded; max-pools are not gates."""
    from intertwine.gates import gate_patterns

    x = images()
    resnet = gate_patterns(build("resnet50"), x)
    assert {"layer1.0.relu", "layer1.0.relu@2", "layer1.0.relu@3"} <= set(resnet)
    assert resnet["layer1.0.relu"].shape[1] == 64 and resnet["layer1.0.relu@3"].shape[1] == 256
    assert not any("maxpool" in site for site in resnet)
    densenet = gate_patterns(build("densenet121"), x)
    assert [site for site in densenet if site.endswith("relu()")] == ["relu()"]
    assert all(p.dtype == torch.bool and len(p) == len(x) for p in densenet.values())
    # named as the pullback names its call sites (per-neuron temperatures: every site, pools too)
    for arch in ARCHS:
        model = build(arch)
        pools = (torch.nn.MaxPool2d, torch.nn.AdaptiveMaxPool2d)

        def is_pool(site, model=model):
            base = site.split("@")[0]
            return "pool2d()" in base or (
                not base.endswith(")") and isinstance(model.get_submodule(base), pools)
            )

        sites = [s for s in per_neuron_temperatures(model, x) if not is_pool(s)]
        assert list(gate_patterns(model, x)) == sites, arch
