"""The intertwiner-group action on weights (Prop. 3.4) and its residual constraints (Remark 3.6)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from torch import nn

from intertwine import models
from intertwine.groups import grelu_matrix, random_grelu, random_orthogonal
from intertwine.symmetry import (
    act_on_representation,
    act_on_weights,
    element_matrix,
    random_elements,
    site_groups,
)

SPECS = {
    "myrtle": {"arch": "myrtle", "width_multiplier": 0.125},
    "myrtle_nobn": {"arch": "myrtle", "width_multiplier": 0.125, "batch_norm": False},
    "resnet20": {"arch": "resnet20", "width_multiplier": 0.25},
    "resnet18": {"arch": "resnet18", "width_multiplier": 0.125},
    "resnet20_leaky": {
        "arch": "resnet20",
        "width_multiplier": 0.25,
        "activation": "leaky_relu",
        "negative_slope": 0.1,
    },
    "resnet20_noresact": {"arch": "resnet20", "width_multiplier": 0.25, "residual_activation": False},
}
RESNETS = ["resnet20", "resnet18", "resnet20_leaky", "resnet20_noresact"]


def _make(spec: dict, dtype: torch.dtype = torch.float64, seed: int = 0) -> nn.Module:
    """A random model in eval mode with non-trivial BN affine parameters and running stats."""
    torch.manual_seed(seed)
    model = models.build(spec).to(dtype)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                m.bias.copy_(0.2 * torch.randn(m.num_features, generator=g))
        model.train()
        for _ in range(2):
            model(torch.randn(8, 3, 16, 16, generator=g).to(dtype))
    return model.eval()


def _x(dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(8, 3, 16, 16, generator=torch.Generator().manual_seed(123)).to(dtype)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def zoo() -> dict[str, nn.Module]:
    return {key: _make(spec) for key, spec in SPECS.items()}


# --- G_ReLU elements everywhere: same function, transformed representations -------------------


@pytest.mark.parametrize("key", list(SPECS))
def test_grelu_action_preserves_function_and_moves_representations(zoo, key):
    model = zoo[key]
    before = _state(model)
    elements = random_elements(model, "grelu", torch.Generator().manual_seed(1))
    assert set(elements) == {s.name for s in models.sites(model)}
    acted = act_on_weights(model, elements)
    x = _x()
    with torch.no_grad():
        assert _rel(acted(x), model(x)) < 1e-10
    old, new = models.site_activations(model, x), models.site_activations(acted, x)
    for site in models.sites(model):  # inside blocks too, with that block's free element
        expected = act_on_representation(old[site.name], elements[site.name])
        assert _rel(new[site.name], expected) < 1e-10, site.name
        assert _rel(new[site.name], old[site.name]) > 1e-2, site.name  # really moved
    # the input model is untouched
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


@pytest.mark.parametrize("key", ["myrtle", "resnet20", "resnet18"])
def test_grelu_action_float32(key):
    model = _make(SPECS[key], torch.float32)
    acted = act_on_weights(
        model, random_elements(model, "grelu", torch.Generator().manual_seed(2), dtype=torch.float32)
    )
    x = _x(torch.float32)
    with torch.no_grad():
        assert _rel(acted(x), model(x)) < 1e-4
    assert acted.conv1.weight.dtype == torch.float32


def test_grelu_action_exact_in_training_mode_too():
    model = _make(SPECS["resnet20"]).train()
    acted = act_on_weights(model, random_elements(model, "grelu", torch.Generator().manual_seed(3)))
    x = _x()
    with torch.no_grad():
        assert _rel(acted(x), model(x)) < 1e-10  # batch statistics permute and scale alike
    assert acted.training


# --- orthogonal contrast ----------------------------------------------------------------------


@pytest.mark.parametrize("key", list(SPECS))
def test_orthogonal_element_on_one_stream_changes_function(zoo, key):
    model = zoo[key]
    elements = random_elements(model, "grelu", torch.Generator().manual_seed(4))
    ortho = random_elements(model, "orthogonal", torch.Generator().manual_seed(5))
    group = site_groups(model)[0]  # the stem's site, with its whole residual stream
    assert group[0] == models.sites(model)[0].name
    mixed = {**elements, **{name: ortho[name] for name in group}}
    acted = act_on_weights(model, mixed)
    x = _x()
    with torch.no_grad():
        assert _rel(acted(x), model(x)) > 1e-2
    # the pre-activation of the first site is exactly Q times the old one (checks the BN folding)
    first = group[0]
    pre_old, pre_new = _pre_activation(model, first, x), _pre_activation(acted, first, x)
    assert _rel(pre_new, act_on_representation(pre_old, ortho[first])) < 1e-10


def _pre_activation(model: nn.Module, name: str, x: torch.Tensor) -> torch.Tensor:
    seen = []
    handle = model.get_submodule(name).register_forward_pre_hook(
        lambda _m, inputs: seen.append(inputs[0].detach())
    )
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()
    return seen[0]


@pytest.mark.parametrize("key", ["resnet20", "resnet18"])
def test_orthogonal_inside_block_folds_bn_without_conv_bias(zoo, key):
    model = zoo[key]
    name = "layer2.1.act1"
    n = model.get_submodule("layer2.1.conv1").out_channels
    q = random_orthogonal(n, torch.Generator().manual_seed(6), dtype=torch.float64)
    acted = act_on_weights(model, {name: q})
    bn = acted.get_submodule("layer2.1.bn1")
    assert acted.get_submodule("layer2.1.conv1").bias is None
    assert torch.equal(bn.weight, torch.ones_like(bn.weight))
    assert torch.equal(bn.running_mean, torch.zeros_like(bn.running_mean))
    assert torch.allclose(bn.running_var + bn.eps, torch.ones_like(bn.running_var))
    x = _x()
    pre_old, pre_new = _pre_activation(model, name, x), _pre_activation(acted, name, x)
    assert _rel(pre_new, act_on_representation(pre_old, q)) < 1e-10
    with torch.no_grad():
        assert _rel(acted(x), model(x)) > 1e-2


def test_general_matrix_with_bn_warns_in_training_mode():
    model = models.build(SPECS["myrtle"]).train()
    q = random_orthogonal(model.conv1.out_channels, torch.Generator().manual_seed(7))
    with pytest.warns(UserWarning, match="eval mode"):
        act_on_weights(model, {"act1": q})


def test_positive_monomial_matrix_is_treated_as_grelu_element(zoo):
    model = zoo["myrtle"]
    perm, scales = random_grelu(
        model.conv2.out_channels, torch.Generator().manual_seed(8), as_parts=True, dtype=torch.float64
    )
    by_parts = act_on_weights(model, {"act2": (perm, scales)}).state_dict()
    by_matrix = act_on_weights(model, {"act2": grelu_matrix(perm, scales)}).state_dict()
    assert all(
        torch.allclose(by_parts[k].double(), by_matrix[k].double(), rtol=1e-12, atol=0) for k in by_parts
    )
    assert not torch.allclose(
        by_matrix["bn2.running_var"], torch.ones_like(by_matrix["bn2.running_var"])
    )  # no BN folding


# --- residual-stream constraints --------------------------------------------------------------


@pytest.mark.parametrize("key", RESNETS)
def test_stream_sites_must_share_their_element(zoo, key):
    model = zoo[key]
    elements = random_elements(model, "grelu", torch.Generator().manual_seed(9))
    site = "layer1.1.act2"
    n = model.get_submodule("layer1.1.conv2").out_channels
    bad = {**elements, site: random_grelu(n, torch.Generator().manual_seed(10), as_parts=True)}
    with pytest.raises(ValueError, match=r"'layer1\.1\.act2'.*identity skip"):
        act_on_weights(model, bad)
    missing = {k: v for k, v in elements.items() if k != "layer1.0.act2"}
    with pytest.raises(ValueError, match=r"'layer1\.0\.act2'"):
        act_on_weights(model, missing)
    # free elements inside blocks: any act1 alone is fine
    assert act_on_weights(model, {"layer1.0.act1": elements["layer1.0.act1"]}) is not model


def test_resnet18_stages_carry_independent_elements(zoo):
    model = zoo["resnet18"]
    elements = random_elements(model, "grelu", torch.Generator().manual_seed(11))
    assert torch.equal(elements["act"][0], elements["layer1.1.act2"][0])
    assert torch.equal(elements["layer2.0.act2"][0], elements["layer2.1.act2"][0])
    # option-B shortcuts decouple the stages: changing one stage's stream alone is valid
    n = model.get_submodule("layer3.0.conv2").out_channels
    fresh = random_grelu(n, torch.Generator().manual_seed(12), as_parts=True, dtype=torch.float64)
    elements.update({"layer3.0.act2": fresh, "layer3.1.act2": fresh})
    acted = act_on_weights(model, elements)
    x = _x()
    with torch.no_grad():
        assert _rel(acted(x), model(x)) < 1e-10
    assert [len(g) for g in site_groups(model)[:1]] == [3]  # act, layer1.0.act2, layer1.1.act2


def _zeropad(model, block="layer2.0"):
    sc = model.get_submodule(f"{block}.shortcut")
    n_out = model.get_submodule(f"{block}.conv2").out_channels
    n_in = model.get_submodule(f"{block}.conv1").in_channels
    return sc.pad_before, n_in, n_out


@pytest.mark.parametrize("key", ["resnet20", "resnet20_noresact"])
def test_option_a_structure_of_random_elements(zoo, key):
    model = zoo[key]
    pb, n_in, n_out = _zeropad(model)
    mid = torch.arange(pb, pb + n_in)
    pad = torch.tensor([i for i in range(n_out) if not pb <= i < pb + n_in])
    g = random_elements(model, "grelu", torch.Generator().manual_seed(13))
    perm_in, scales_in = g["layer1.2.act2"]
    perm, scales = g["layer2.0.act2"]
    assert torch.equal(perm[mid], perm_in + pb) and torch.equal(scales[mid], scales_in)
    assert torch.equal(torch.sort(perm[pad]).values, pad)  # padding maps among itself
    o = random_elements(model, "orthogonal", torch.Generator().manual_seed(13))
    a = o["layer2.0.act2"]
    assert torch.equal(a[pb : pb + n_in, pb : pb + n_in], o["layer1.2.act2"])
    assert torch.equal(a[pad][:, mid], torch.zeros(len(pad), n_in, dtype=a.dtype))
    assert torch.allclose(a @ a.T, torch.eye(n_out, dtype=a.dtype), atol=1e-12)


@pytest.mark.parametrize("key", ["resnet20", "resnet20_noresact"])
def test_option_a_constraint_violations(zoo, key):
    model = zoo[key]
    elements = random_elements(model, "grelu", torch.Generator().manual_seed(14))
    x = _x()

    def with_stage(stage, element):
        return {**elements, **{f"layer{stage}.{j}.act2": element for j in range(3)}}

    def swap(t, i, j):
        t = t.clone()
        t[i], t[j] = t[j].clone(), t[i].clone()
        return t

    # the last stage: its padded channels may be permuted among themselves (function preserved)
    pb, n_in, n_out = _zeropad(model, "layer3.0")
    pad = [i for i in range(n_out) if not pb <= i < pb + n_in]
    perm, scales = elements["layer3.0.act2"]
    acted = act_on_weights(model, with_stage(3, (swap(perm, pad[0], pad[1]), scales)))
    with torch.no_grad():
        assert _rel(acted(x), model(x)) < 1e-10
    # but not scale a middle channel differently from the previous stream's element
    s2 = scales.clone()
    s2[pb] *= 2
    with pytest.raises(ValueError, match=r"'layer3\.0\.act2'.*option-A"):
        act_on_weights(model, with_stage(3, (perm, s2)))
    # nor swap a middle channel with a padded one
    with pytest.raises(ValueError, match=r"'layer3\.0\.act2'.*zero-padded channels"):
        act_on_weights(model, with_stage(3, (swap(perm, pb, pad[0]), scales)))
    # general matrices: A_next = [[A_prev, C], [0, D]] (middle, padded) satisfies A E = E A_prev
    a = element_matrix(elements["layer3.0.act2"])
    a[pb, pad[0]] = 0.5
    act_on_weights(model, with_stage(3, a))
    a[pad[0], pb] = 0.5
    with pytest.raises(ValueError, match=r"'layer3\.0\.act2'"):
        act_on_weights(model, with_stage(3, a))
    # the stream is one chain: stage 2's middle block is stage 3's, so changing stage 2 alone
    # (even only on its padding) breaks the link to stage 3
    pb2, n_in2, n_out2 = _zeropad(model, "layer2.0")
    pad2 = [i for i in range(n_out2) if not pb2 <= i < pb2 + n_in2]
    perm2, scales2 = elements["layer2.0.act2"]
    with pytest.raises(ValueError, match=r"'layer3\.0\.act2'"):
        act_on_weights(model, with_stage(2, (swap(perm2, pad2[0], pad2[1]), scales2)))


# --- activations ------------------------------------------------------------------------------


@pytest.mark.parametrize("activation, name", [("gelu", "GELU"), ("sigmoid", "Sigmoid")])
def test_gelu_rejects_scalings_but_accepts_permutations(activation, name):
    model = _make({"arch": "resnet20", "width_multiplier": 0.25, "activation": activation})
    n = model.conv1.out_channels
    perm, scales = random_grelu(n, torch.Generator().manual_seed(15), as_parts=True)
    with pytest.raises(ValueError, match=rf"'layer1\.0\.act1'.*{name} is not positively homog"):
        act_on_weights(model, {"layer1.0.act1": (perm, scales)})
    with pytest.raises(ValueError, match="permutation"):
        random_elements(model, "grelu", torch.Generator().manual_seed(15))
    elements = random_elements(model, "permutation", torch.Generator().manual_seed(15))
    acted = act_on_weights(model, elements)
    x = _x()
    with torch.no_grad():
        assert _rel(acted(x), model(x)) < 1e-10


# --- malformed input, determinism, helpers ----------------------------------------------------


def test_malformed_elements_are_rejected(zoo):
    model = zoo["myrtle"]
    n = model.conv1.out_channels
    ones = torch.ones(n)
    cases = [
        ({"nope": (torch.arange(n), ones)}, "unknown site"),
        ({"act1": (torch.arange(n + 1), torch.ones(n + 1))}, "'act1'.*channels"),
        ({"act1": (torch.zeros(n, dtype=torch.long), ones)}, "'act1'.*not a permutation"),
        ({"act1": (torch.arange(n), -ones)}, "'act1'.*positive"),
        ({"act1": torch.zeros(n, n)}, "'act1'.*singular"),
        ({"act1": torch.eye(n + 1)}, "'act1'"),
    ]
    for elements, match in cases:
        with pytest.raises(ValueError, match=match):
            act_on_weights(model, elements)


@pytest.mark.parametrize("group", ["grelu", "permutation", "orthogonal"])
def test_random_elements_deterministic(zoo, group):
    model = zoo["resnet20"]

    def flat(elements):
        return [t for v in elements.values() for t in (v if isinstance(v, tuple) else (v,))]

    a = flat(random_elements(model, group, torch.Generator().manual_seed(16)))
    b = flat(random_elements(model, group, torch.Generator().manual_seed(16)))
    c = flat(random_elements(model, group, torch.Generator().manual_seed(17)))
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    assert not all(torch.equal(u, v) for u, v in zip(a, c))
    with pytest.raises(ValueError, match="unknown group"):
        random_elements(model, "rotations", torch.Generator())


def test_element_helpers_follow_the_groups_convention():
    perm, scales = torch.tensor([2, 0, 1]), torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    a = element_matrix((perm, scales))
    assert torch.equal(a, grelu_matrix(perm, scales))
    x = torch.randn(4, 3, 2, 2, dtype=torch.float64)
    expected = torch.einsum("ij,njhw->nihw", a, x)
    assert torch.allclose(act_on_representation(x, (perm, scales)), expected)
    assert torch.allclose(act_on_representation(x, a + 0.1), torch.einsum("ij,njhw->nihw", a + 0.1, x))


def test_site_activations_of_normalised_inputs_and_groups(zoo):
    model = zoo["resnet20"]
    reps = models.site_activations(model, _x())  # no mean/std: inputs as they are
    assert list(reps) == [s.name for s in models.sites(model)]
    assert reps["layer3.2.act2"].shape == (8, 16, 4, 4)
    groups = site_groups(model)
    assert groups[0] == ["act"] + [f"layer{i}.{j}.act2" for i in (1, 2, 3) for j in range(3)]
    assert all(len(g) == 1 and g[0].endswith("act1") for g in groups[1:])
    assert site_groups(zoo["myrtle"]) == [["act1"], ["act2"], ["act3"], ["act4"]]


def test_check_symmetry_separates_the_groups():
    from intertwine.workflow.stages.symmetry.study import check_symmetry, summarize

    torch.manual_seed(0)
    model = models.build({"arch": "resnet20", "width_multiplier": 0.25}).double().eval()
    x = torch.randn(4, 3, 16, 16, dtype=torch.float64)
    rows = [
        dict(row, variant="r", seed=0)
        for group in ("grelu", "orthogonal")
        for row in check_symmetry(model, x, group, torch.Generator().manual_seed(1))
    ]
    assert [row["site"] for row in rows[:19]] == [site.name for site in models.sites(model)]
    summary = summarize(pd.DataFrame(rows)).set_index("group")
    assert summary.loc["grelu", "max_relative_change"] < 1e-12
    assert summary.loc["grelu", "max_representation_error"] < 1e-12
    assert summary.loc["orthogonal", "max_relative_change"] > 1e-2
    # Thm. 4.2: the stitched network through the exact element (no inside_residual column here:
    # every site counts, and inside a block the identity fails, Remark 3.6).
    assert set(rows[0]) >= {"stitched_relative_change", "stitched_agreement"}
    inside = {site.name: site.inside_residual for site in models.sites(model)}
    stream = summarize(pd.DataFrame(rows).assign(inside_residual=lambda t: t["site"].map(inside)))
    stream = stream.set_index("group")
    assert stream.loc["grelu", "max_stitched_relative_change"] < 1e-12
    assert stream.loc["grelu", "min_stitched_agreement"] == 1.0
    assert stream.loc["orthogonal", "max_stitched_relative_change"] > 1e-2


# --- Thm. 4.2: f stitched into its transform through the exact element --------------------------


@pytest.mark.parametrize("key", list(SPECS))
def test_stitching_through_the_exact_element_is_f(zoo, key):
    """S(f, f~, l, phi(A_l)) = f at every cut site on the residual stream (appendix E.5), in float64
    to rounding; a random orthogonal bridge in place of A_l is no such identity."""
    from intertwine.symmetry import stitch_through_element

    model = zoo[key]
    drawn = random_elements(model, "grelu", torch.Generator().manual_seed(2))
    transformed = act_on_weights(model, drawn)
    x = _x()
    inside = {site.name: site.inside_residual for site in models.sites(model)}
    with torch.no_grad():
        logits = model(x)
        for site in models.cut_sites(model):
            if inside[site]:
                continue
            assert _rel(stitch_through_element(model, transformed, site, drawn[site])(x), logits) < 1e-12, (
                site
            )
            wrong = random_orthogonal(len(drawn[site][0]), torch.Generator().manual_seed(3)).double()
            assert _rel(stitch_through_element(model, transformed, site, wrong)(x), logits) > 1e-3, site
            # Without the bridge (phi = identity) f~'s later layers read f's unpermuted channels.
            identity = torch.eye(len(wrong), dtype=torch.float64)
            assert _rel(stitch_through_element(model, transformed, site, identity)(x), logits) > 1e-3, site
    model.requires_grad_(True)  # stitching freezes the front model


@pytest.mark.parametrize("key", RESNETS)
def test_stitching_inside_a_block_is_not_f(zoo, key):
    """Inside a residual block the skip path carries f's block input, which f~ expects multiplied by
    the stream's element: the stitched network is not f there (Remark 3.6)."""
    from intertwine.symmetry import stitched_changes

    model = zoo[key]
    drawn = random_elements(model, "grelu", torch.Generator().manual_seed(2))
    changes = stitched_changes(model, _x(), drawn)
    for site in models.sites(model):
        change = changes[site.name]["stitched_relative_change"]
        assert (change > 1e-3) if site.inside_residual else (change < 1e-12), site.name
    assert all(p.requires_grad for p in model.parameters())  # the check leaves the model as it was
