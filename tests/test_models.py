"""The model registry: parameter counts, activation sites, spec validation, seeding."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from intertwine.models import (
    ARCHITECTURES,
    Site,
    Stitched,
    build,
    count_parameters,
    forward_from,
    forward_to,
    normalize_spec,
    sites,
)
from intertwine.models.convnext import ConvNeXtBlock
from intertwine.models.myrtle import PAPER_LAYER_INDEX
from intertwine.models.resnet import ZeroPadShortcut, cifar_resnet

ACTIVATION_TYPES = (nn.ReLU, nn.LeakyReLU, nn.GELU)


def _is_identity_site(model: nn.Module, site: Site) -> bool:
    """A residual output without an activation (ConvNeXt's ``out``, a ResNet's ``act2`` with
    ``residual_activation: False``): a plain nn.Identity on the residual stream."""
    return type(model.get_submodule(site.name)) is nn.Identity and not site.inside_residual


# The zoo's own architectures; `custom` (the user's factory) is tested in tests/test_own_models.py.
ZOO_ARCHITECTURES = [arch for arch in ARCHITECTURES if arch != "custom"]


@pytest.fixture(scope="module")
def defaults() -> dict[str, nn.Module]:
    torch.manual_seed(0)
    return {arch: build({"arch": arch}) for arch in ZOO_ARCHITECTURES}


def _hooked_forward(model: nn.Module, names: list[str], size: int = 32) -> list[tuple[str, int]]:
    """(name, channels) of each hooked module in the order the forward pass reaches it."""
    seen: list[tuple[str, int]] = []
    handles = [
        model.get_submodule(name).register_forward_hook(
            lambda _m, _i, out, name=name: seen.append((name, out.shape[1]))
        )
        for name in names
    ]
    try:
        with torch.no_grad():
            out = model(torch.randn(2, 3, size, size))
    finally:
        for handle in handles:
            handle.remove()
    assert out.shape == (2, 10)
    return seen


# --- parameter counts -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arch, expected",
    [("myrtle", 1_558_026), ("resnet20", 269_722), ("resnet18", 11_173_962), ("convnext", 1_596_874)],
)
def test_default_parameter_counts(defaults, arch, expected):
    assert count_parameters(defaults[arch]) == expected


@pytest.mark.parametrize(
    "arch, n, options, expected",
    [
        ("resnet20", 3, {}, 269_722),
        ("resnet20", 3, {"width_multiplier": 0.125}, 4_492),
        ("resnet20", 3, {"batch_norm": False, "width_multiplier": 0.5}, 67_706),
        ("resnet110", 18, {}, 1_727_962),
        ("resnet110", 18, {"width_multiplier": 0.125}, 28_012),
        ("resnet110", 18, {"batch_norm": False, "width_multiplier": 0.5}, 432_266),
    ],
)
def test_cifar_resnets_are_one_builder_with_their_own_keys_and_counts(arch, n, options, expected):
    """resnet20 and resnet110 are cifar_resnet(3) and cifar_resnet(18): the counts and state-dict
    keys they had as separate builders, the same initialisation from the same seed."""
    torch.manual_seed(0)
    model = build({"arch": arch, **options})
    torch.manual_seed(0)
    direct = cifar_resnet(n, **options)
    assert count_parameters(model) == count_parameters(direct) == expected
    bn = options.get("batch_norm", True)  # without it, BNs are Identities and convs have biases
    conv = ["weight"] if bn else ["weight", "bias"]
    norm = ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"] if bn else []
    keys = [f"conv1.{k}" for k in conv] + [f"bn1.{k}" for k in norm]
    for stage in (1, 2, 3):
        for j in range(n):
            for i in (1, 2):
                keys += [f"layer{stage}.{j}.conv{i}.{k}" for k in conv]
                keys += [f"layer{stage}.{j}.bn{i}.{k}" for k in norm]
    keys += ["fc.weight", "fc.bias"]
    assert list(model.state_dict()) == list(direct.state_dict()) == keys
    assert all(torch.equal(v, direct.state_dict()[k]) for k, v in model.state_dict().items())


def test_count_parameters_skips_frozen():
    model = build({"arch": "myrtle", "width_multiplier": 0.125})
    total = count_parameters(model)
    model.fc.requires_grad_(False)
    assert count_parameters(model) == total - model.fc.weight.numel() - model.fc.bias.numel()


def test_myrtle_without_bn_drops_exactly_the_bn_parameters(defaults):
    bn_params = sum(
        p.numel()
        for m in defaults["myrtle"].modules()
        if isinstance(m, nn.BatchNorm2d)
        for p in m.parameters()
    )
    assert bn_params == 2 * (64 + 128 + 256 + 512)
    no_bn = build({"arch": "myrtle", "batch_norm": False})
    assert count_parameters(no_bn) == 1_558_026 - bn_params
    assert not any(isinstance(m, nn.BatchNorm2d) for m in no_bn.modules())


def test_resnet_without_bn_has_conv_biases():
    model = build({"arch": "resnet20", "batch_norm": False, "width_multiplier": 0.25})
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert convs and all(c.bias is not None for c in convs)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in model.modules())


def test_constant_width_myrtle():
    model = build({"arch": "myrtle", "constant_width": 32})
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) == 4
    assert [c.out_channels for c in convs] == [32] * 4
    assert [c.in_channels for c in convs] == [3, 32, 32, 32]
    assert model.fc.in_features == 32
    assert [s.channels for s in sites(model)] == [32] * 4


@pytest.mark.parametrize(
    "arch, full, quarter",
    [
        ("myrtle", [64, 128, 256, 512], [16, 32, 64, 128]),
        ("resnet20", [16, 32, 64], [4, 8, 16]),
        ("resnet18", [64, 128, 256, 512], [16, 32, 64, 128]),
        ("convnext", [64, 128, 256, 512, 1024], [16, 32, 64, 128, 256]),  # C and 4C
    ],
)
def test_width_multiplier_shrinks_channels(defaults, arch, full, quarter):
    def widths(model):
        return sorted({s.channels for s in sites(model)})

    small = build({"arch": arch, "width_multiplier": 0.25})
    assert widths(defaults[arch]) == full
    assert widths(small) == quarter
    assert count_parameters(small) < count_parameters(defaults[arch]) / 8
    _hooked_forward(small, [s.name for s in sites(small)])  # still runs end to end


# --- sites ------------------------------------------------------------------------------------


def test_myrtle_sites(defaults):
    got = sites(defaults["myrtle"])
    assert got == [
        Site("act1", 64, False),
        Site("act2", 128, False),
        Site("act3", 256, False),
        Site("act4", 512, False),
    ]
    assert set(PAPER_LAYER_INDEX) == {s.name for s in got}


def test_resnet_site_layout(defaults):
    r20, r18 = sites(defaults["resnet20"]), sites(defaults["resnet18"])
    assert len(r20) == 19 and len(r18) == 17
    for got, stages in ((r20, [3, 3, 3]), (r18, [2, 2, 2, 2])):
        expected = [("act", False)]
        for i, n_blocks in enumerate(stages, start=1):
            for j in range(n_blocks):
                expected += [(f"layer{i}.{j}.act1", True), (f"layer{i}.{j}.act2", False)]
        assert [(s.name, s.inside_residual) for s in got] == expected
    assert [s.channels for s in r20][:3] == [16, 16, 16] and r20[-1].channels == 64
    assert r18[-1] == Site("layer4.1.act2", 512, False)


@pytest.mark.parametrize("arch", ZOO_ARCHITECTURES)
def test_sites_match_forward_hooks(defaults, arch):
    model = defaults[arch]
    listed = sites(model)
    for site in listed:
        assert isinstance(model.get_submodule(site.name), ACTIVATION_TYPES) or _is_identity_site(model, site)
    seen = _hooked_forward(model, [s.name for s in listed])
    # Each site is reached exactly once, in the listed order, with the listed channel count.
    assert seen == [(s.name, s.channels) for s in listed]


@pytest.mark.parametrize(
    "spec",
    [
        {"arch": "myrtle", "width_multiplier": 0.25},
        {"arch": "myrtle", "width_multiplier": 0.25, "batch_norm": False},
        {"arch": "resnet20", "width_multiplier": 0.5},
        {"arch": "resnet20", "width_multiplier": 0.5, "residual_activation": False},
        {"arch": "resnet18", "width_multiplier": 0.125},
        {"arch": "convnext", "width_multiplier": 0.25},
        {"arch": "convnext", "width_multiplier": 0.25, "activation": "relu"},
    ],
)
def test_forward_split_at_every_site_is_the_forward(spec):
    torch.manual_seed(0)
    model = build(spec).eval()
    x = torch.randn(3, 3, 16, 16)
    hooked = {}
    handles = [
        model.get_submodule(s.name).register_forward_hook(
            lambda _m, _i, out, name=s.name: hooked.setdefault(name, out)
        )
        for s in sites(model)
    ]
    with torch.no_grad():
        expected = model(x)
        for handle in handles:
            handle.remove()
        assert [name for name, _ in model.pieces() if name] == [s.name for s in sites(model)]
        for site in sites(model):
            state = forward_to(model, x, site.name)
            # The state starts with the site's output; inside a block it also carries the skip input.
            torch.testing.assert_close(state[0], hooked[site.name], rtol=0, atol=0)
            assert len(state) == (2 if site.inside_residual else 1)
            torch.testing.assert_close(forward_from(model, state, site.name), expected, rtol=0, atol=0)


def test_forward_split_names_the_sites_on_a_typo(defaults):
    with pytest.raises(ValueError, match="no site 'act9'.*act1"):
        forward_to(defaults["myrtle"], torch.randn(1, 3, 8, 8), "act9")


@pytest.mark.parametrize("arch", ZOO_ARCHITECTURES)
def test_every_activation_module_is_a_site(defaults, arch):
    model = defaults[arch]
    activations = [name for name, m in model.named_modules() if isinstance(m, ACTIVATION_TYPES)]
    assert activations == [s.name for s in sites(model) if not _is_identity_site(model, s)]


@pytest.mark.parametrize("arch", ["resnet20", "resnet18"])
def test_residual_activation_off_keeps_identity_sites(defaults, arch):
    spec = {"arch": arch, "residual_activation": False, "width_multiplier": 0.25}
    model = build(spec)
    listed = sites(model)
    assert [s.name for s in listed] == [s.name for s in sites(defaults[arch])]
    for site in listed:
        module = model.get_submodule(site.name)
        if site.name.endswith(".act2"):
            assert type(module) is nn.Identity
        else:
            assert isinstance(module, nn.ReLU)
    seen = _hooked_forward(model, [s.name for s in listed])
    assert seen == [(s.name, s.channels) for s in listed]
    # With no activation after the sum, the block outputs go negative.
    block_out = {}
    model.layer1[0].act2.register_forward_hook(lambda _m, _i, out: block_out.update(x=out))
    with torch.no_grad():
        model(torch.randn(2, 3, 32, 32))
    assert (block_out["x"] < 0).any()


def test_convnext_sites(defaults):
    expected = []
    for stage, channels in (("stage1", 64), ("stage2", 128), ("stage3", 256)):
        for j in range(2):
            expected += [
                Site(f"{stage}.{j}.act", 4 * channels, True),
                Site(f"{stage}.{j}.out", channels, False),
            ]
    assert sites(defaults["convnext"]) == expected


def test_convnext_has_no_activation_on_the_residual_stream(defaults):
    model = defaults["convnext"]
    blocks = [m for m in model.modules() if isinstance(m, ConvNeXtBlock)]
    assert len(blocks) == 6
    for site in sites(model):
        module = model.get_submodule(site.name)
        if site.name.endswith(".out"):
            assert type(module) is nn.Identity
        else:
            assert type(module) is nn.GELU and module.approximate == "none"
    # Block 0 of stage 1 computes x + gamma * pwconv2(act(...)) and passes it on unchanged.
    block = model.stage1[0]
    x = torch.randn(2, 64, 8, 8)
    with torch.no_grad():
        expected = x + block.gamma * block.pwconv2(block.start(x))
        torch.testing.assert_close(block(x), expected, rtol=0, atol=0)


@pytest.mark.parametrize("site", ["stage1.0.act", "stage2.0.act", "stage2.1.out", "stage3.1.out"])
def test_convnext_stitched_to_itself_is_itself(site):
    torch.manual_seed(0)
    model = build({"arch": "convnext", "width_multiplier": 0.25}).eval()
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        expected = model(x)
        stitched = Stitched(model, model, site, bridge=nn.Identity()).eval()
        torch.testing.assert_close(stitched(x), expected, rtol=0, atol=0)


def test_sites_same_across_seeds():
    spec = {"arch": "resnet20", "width_multiplier": 0.5}
    torch.manual_seed(1)
    a = sites(build(spec))
    torch.manual_seed(2)
    assert sites(build(spec)) == a


def test_sites_rejects_foreign_model():
    with pytest.raises(TypeError, match="site_layout"):
        sites(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()))


def test_small_inputs(defaults):
    for arch, model in defaults.items():
        size = 32 if arch == "vgg16_avg" else 16  # five 2x2 pools need 32 pixels
        with torch.no_grad():
            assert model(torch.randn(2, 3, size, size)).shape == (2, 10), arch


# --- activations ------------------------------------------------------------------------------


def test_leaky_relu_slope_applied():
    model = build({"arch": "resnet20", "activation": "leaky_relu", "negative_slope": 0.1})
    modules = [model.get_submodule(s.name) for s in sites(model)]
    assert all(isinstance(m, nn.LeakyReLU) and m.negative_slope == 0.1 for m in modules)
    default_slope = build({"arch": "myrtle", "activation": "leaky_relu", "width_multiplier": 0.125})
    assert default_slope.act1.negative_slope == 0.01


def test_gelu_and_num_classes():
    model = build({"arch": "myrtle", "activation": "gelu", "num_classes": 7, "width_multiplier": 0.25})
    assert all(isinstance(model.get_submodule(s.name), nn.GELU) for s in sites(model))
    with torch.no_grad():
        assert model(torch.randn(2, 3, 32, 32)).shape == (2, 7)


@pytest.mark.parametrize(
    "spec, kind",
    [
        ({"activation": "relu"}, nn.ReLU),
        ({"activation": "leaky_relu", "negative_slope": 0.2}, nn.LeakyReLU),
        ({"activation": "sigmoid"}, nn.Sigmoid),
    ],
)
def test_convnext_activation_option_replaces_gelu(spec, kind):
    model = build({"arch": "convnext", "width_multiplier": 0.125, **spec})
    for site in sites(model):
        module = model.get_submodule(site.name)
        assert type(module) is (kind if site.inside_residual else nn.Identity)
    assert not any(isinstance(m, nn.GELU) for m in model.modules())
    if kind is nn.LeakyReLU:
        assert model.stage2[1].act.negative_slope == 0.2
    with torch.no_grad():
        assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)


@pytest.mark.parametrize("arch", ZOO_ARCHITECTURES)
def test_activation_modules_not_shared(defaults, arch):
    model = defaults[arch]
    activations = [m for m in model.modules() if isinstance(m, ACTIVATION_TYPES)]
    assert len(activations) == len([s for s in sites(model) if not _is_identity_site(model, s)])
    assert len({id(m) for m in activations}) == len(activations)
    # modules() deduplicates shared instances; named_modules(remove_duplicate=False) would not.
    all_names = [n for n, m in model.named_modules(remove_duplicate=False) if isinstance(m, ACTIVATION_TYPES)]
    assert len(all_names) == len(activations)


def test_option_a_shortcut_subsamples_and_pads():
    shortcut = ZeroPadShortcut(16, 32, stride=2)
    x = torch.randn(2, 16, 8, 8)
    out = shortcut(x)
    assert out.shape == (2, 32, 4, 4)
    assert torch.equal(out[:, 8:24], x[:, :, ::2, ::2])
    assert out[:, :8].abs().sum() == 0 and out[:, 24:].abs().sum() == 0
    assert count_parameters(shortcut) == 0


# --- spec validation --------------------------------------------------------------------------


def test_normalize_spec_fills_defaults_and_is_idempotent():
    spec = {"arch": "resnet20", "activation": "leaky_relu", "negative_slope": 1, "width_multiplier": 1}
    normalized = normalize_spec(spec)
    assert normalized == {
        "arch": "resnet20",
        "activation": "leaky_relu",
        "negative_slope": 1.0,
        "width_multiplier": 1.0,
        "batch_norm": True,
        "num_classes": 10,
        "residual_activation": True,
    }
    assert type(normalized["negative_slope"]) is float
    assert normalize_spec(normalized) == normalized
    assert spec == {
        "arch": "resnet20",
        "activation": "leaky_relu",
        "negative_slope": 1,
        "width_multiplier": 1,
    }  # input untouched
    assert normalize_spec({"arch": "myrtle"})["constant_width"] is None


def test_convnext_spec_defaults_to_gelu():
    assert normalize_spec({"arch": "convnext"}) == {
        "arch": "convnext",
        "activation": "gelu",
        "negative_slope": 0.01,
        "width_multiplier": 1.0,
        "num_classes": 10,
    }
    leaky = normalize_spec({"arch": "convnext", "activation": "leaky_relu", "negative_slope": 0.1})
    assert leaky["negative_slope"] == 0.1


@pytest.mark.parametrize("spec", [{}, {"arch": "resnet50"}, {"activation": "relu"}])
def test_bad_arch_lists_known(spec):
    with pytest.raises(
        ValueError,
        match="known architectures: myrtle, c4gap, c1gap, vgg16_avg, resnet20, resnet18, resnet110, convnext",
    ):
        build(spec)


@pytest.mark.parametrize(
    "spec, key",
    [
        ({"arch": "myrtle", "widht_multiplier": 0.5}, "widht_multiplier"),
        ({"arch": "myrtle", "residual_activation": False}, "residual_activation"),
        ({"arch": "resnet20", "constant_width": 512}, "constant_width"),
        ({"arch": "convnext", "batch_norm": False}, "batch_norm"),  # LayerNorm only
        ({"arch": "convnext", "residual_activation": True}, "residual_activation"),
    ],
)
def test_unknown_option_names_key_and_allowed(spec, key):
    with pytest.raises(ValueError) as info:
        build(spec)
    message = str(info.value)
    assert repr(key) in message
    allowed = ARCHITECTURES[spec["arch"]].options
    assert all(option in message.split("allowed options")[1] for option in allowed)


@pytest.mark.parametrize(
    "spec, key",
    [
        ({"arch": "myrtle", "activation": "tanh"}, "activation"),
        ({"arch": "myrtle", "batch_norm": "no"}, "batch_norm"),
        ({"arch": "myrtle", "width_multiplier": 0}, "width_multiplier"),
        ({"arch": "myrtle", "num_classes": 2.5}, "num_classes"),
        ({"arch": "myrtle", "constant_width": True}, "constant_width"),
        ({"arch": "resnet20", "residual_activation": 0}, "residual_activation"),
        ({"arch": "resnet20", "negative_slope": 0.1}, "negative_slope"),  # relu: slope is a mistake
        ({"arch": "convnext", "negative_slope": 0.1}, "negative_slope"),  # gelu by default
    ],
)
def test_bad_option_value_names_key(spec, key):
    with pytest.raises(ValueError, match=repr(key)):
        build(spec)


def test_spec_must_be_mapping():
    with pytest.raises(TypeError):
        build("resnet20")


# --- seeding ----------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ZOO_ARCHITECTURES)
def test_seed_determines_weights(arch):
    spec = {"arch": arch, "width_multiplier": 0.25}

    def state(seed):
        torch.manual_seed(seed)
        return build(spec).state_dict()

    a, b, c = state(0), state(0), state(1)
    assert a.keys() == b.keys() == c.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    weights = [k for k in a if k.endswith("weight") and a[k].dim() > 1]
    assert weights and all(not torch.equal(a[k], c[k]) for k in weights)


def test_resnet20_kaiming_init():
    # akamaster initialises conv weights with kaiming_normal_: std sqrt(2 / fan_in).
    torch.manual_seed(0)
    model = build({"arch": "resnet20"})
    w = model.layer3[1].conv1.weight
    expected = (2 / (64 * 9)) ** 0.5
    assert abs(w.std().item() - expected) / expected < 0.05


def test_convnext_init():
    # Kaiming-normal conv and linear weights (std sqrt(2 / fan_in)), zero biases, layer scale 1e-6.
    torch.manual_seed(0)
    model = build({"arch": "convnext"})
    w = model.stage3[0].pwconv1.weight
    expected = (2 / 256) ** 0.5
    assert abs(w.std().item() - expected) / expected < 0.05
    for module in model.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            assert torch.count_nonzero(module.bias) == 0
    for block in (m for m in model.modules() if isinstance(m, ConvNeXtBlock)):
        assert torch.equal(block.gamma, torch.full_like(block.gamma, 1e-6))


def test_stitched_checks_the_widths_at_the_site():
    """A bridge of the wrong width was accepted until the forward pass (an einsum error)."""
    from intertwine.models import Stitched

    f, g = (
        build({"arch": "myrtle", "width_multiplier": 0.125}),
        build({"arch": "myrtle", "width_multiplier": 0.125}),
    )
    with pytest.raises(
        ValueError,
        match=r"the stitching layer maps 8 channels to 8, but site 'act2' has 16 channels "
        r"in front \(f, run up to it\) and 16 in back .*build_layer\(method, 16\)",
    ):
        Stitched(f, g, "act2", nn.Conv2d(8, 8, 1, bias=False))
    wide = build({"arch": "myrtle", "width_multiplier": 0.25})
    with pytest.raises(ValueError, match=r"site 'act2' has 16 channels in front .* but 32 in back"):
        Stitched(f, wide, "act2")
    assert Stitched(f, g, "act2", nn.Conv2d(16, 16, 1, bias=False))(torch.randn(2, 3, 16, 16)).shape == (
        2,
        10,
    )


@pytest.mark.parametrize(
    "key, value",
    [("width_multiplier", float("inf")), ("negative_slope", float("nan")), ("negative_slope", float("-inf"))],
)
def test_non_finite_options_are_refused(key, value):
    spec = {"arch": "resnet20", "activation": "leaky_relu", key: value}
    with pytest.raises(ValueError, match=f"model option '{key}': expected a .*finite"):
        normalize_spec(spec)


def test_site_activations_refuses_empty_input_and_batch_size():
    from intertwine.models import site_activations

    model = build({"arch": "myrtle", "width_multiplier": 0.125})
    with pytest.raises(ValueError, match="no images given"):  # was torch.cat's error
        site_activations(model, torch.zeros(0, 3, 16, 16, dtype=torch.uint8), ["act1"])
    with pytest.raises(ValueError, match="batch size must be at least 1, got 0"):
        site_activations(model, torch.zeros(2, 3, 16, 16, dtype=torch.uint8), ["act1"], batch_size=0)
    with pytest.raises(ValueError, match="normalize takes uint8 images"):  # float images were scaled twice
        site_activations(model, torch.rand(2, 3, 16, 16), ["act1"], torch.zeros(3), torch.ones(3))
