"""Whole-network alignment (weight and activation matching) and linear mode connectivity: exact
answers where they exist (a network made from f by a group element is aligned back to f, f aligned
to itself is the identity, the aligned network computes g's function) and the coordinate descent's
monotone objective."""

import copy
import itertools

import pytest
import torch
from torch import nn

from intertwine import mode_connectivity, models
from intertwine.mode_connectivity import (
    RepairGoal,
    barrier,
    channel_statistics,
    correct,
    interpolate,
    interpolation_curve,
    loss_and_accuracy,
    repair,
    repaired_layers,
    reset_batch_norm,
)
from intertwine.network_alignment import (
    activation_matching,
    alignment_variables,
    parameter_distance,
    weight_matching,
)
from intertwine.symmetry import act_on_weights, random_elements

SPECS = {
    "myrtle": {"arch": "myrtle", "width_multiplier": 0.25},
    "resnet20": {"arch": "resnet20", "width_multiplier": 0.5},  # identity and option-A ties
    "resnet18": {"arch": "resnet18", "width_multiplier": 0.125},  # option-B shortcuts
    "dgn_hard": {"arch": "c4gap", "width_multiplier": 0.25, "gated": {"family": "dgn", "regime": "fr"}},
    "dlgn_soft": {"arch": "c4gap", "width_multiplier": 0.25, "gated": {"family": "dlgn"}},
    "dlgn_sf": {"arch": "c4gap", "width_multiplier": 0.25, "gated": {"family": "dlgn_sf"}},
    "c1gap": {"arch": "c1gap", "width_multiplier": 0.125},
    "vgg16": {"arch": "vgg16_avg", "width_multiplier": 0.125},
}


def informative(spec, seed=0, dtype=torch.float64):
    """A model in eval mode whose batch norms are random (at initialisation every channel's weight
    is 1 and bias 0, which no matching can tell apart) and whose channels are alive (a channel that
    is 0 on every image has no activations to match: each pre-activation is normalised by the
    statistics of random images and shifted by a bias near 1)."""
    torch.manual_seed(seed)
    model = models.build(spec).to(dtype).eval()
    generator = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                shape = module.weight.shape
                module.weight.copy_(torch.rand(shape, generator=generator) + 0.5)
                module.bias.copy_(1.0 + 0.3 * torch.randn(shape, generator=generator))
    # statistics of real batches, so that every pre-activation has mean about its bias, 1
    return reset_batch_norm(model, torch.randn(64, 3, 32, 32, generator=generator, dtype=dtype))


def images(n=16, seed=1, dtype=torch.float64):
    return torch.randn(n, 3, 32, 32, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def inverse(element):
    """The inverse of ``(perm, scales)``: y_i = s_i x_perm[i] gives x_j = y_inv[j] / s_inv[j]."""
    perm, scales = element
    back = torch.argsort(perm)
    return back, 1.0 / scales.double()[back]


@pytest.mark.parametrize("name", list(SPECS))
@pytest.mark.parametrize("group", ["permutation", "grelu"])
def test_weight_matching_recovers_the_element_that_made_g_from_f(name, group):
    f = informative(SPECS[name])
    applied = random_elements(f, group, torch.Generator().manual_seed(3))
    g = act_on_weights(f, applied)
    assert parameter_distance(f, g) > 1.0
    alignment = weight_matching(f, g, group)
    for site, element in alignment.elements.items():
        expected_perm, expected_scales = inverse(applied[site])
        assert torch.equal(element[0], expected_perm), site
        assert torch.allclose(element[1], expected_scales, rtol=1e-9, atol=0), site
    aligned = alignment.apply(g)
    assert parameter_distance(f, aligned) < 1e-18 * parameter_distance(f, g) + 1e-20
    x = images()
    assert (aligned(x) - g(x)).abs().max() < 1e-10  # the aligned g is g


@pytest.mark.parametrize("name", ["myrtle", "resnet20"])
def test_weight_matching_without_batch_norm_solves_the_scales_exactly(name):
    """Without batch norm neighbouring sites' scales are coupled (one multiplies a layer's weights,
    the next divides them): coordinate descent left a Myrtle's scales 1.3e-4 off after its 100
    sweeps while the permutations were exact. With the permutations fixed the scales are now
    solved jointly (Gauss-Newton in the log-scales): the element that made g, to 1e-12."""
    f = informative({**SPECS[name], "batch_norm": False})
    applied = random_elements(f, "grelu", torch.Generator().manual_seed(3))
    g = act_on_weights(f, applied)
    alignment = weight_matching(f, g, "grelu")
    for site, (perm, scales) in alignment.elements.items():
        expected_perm, expected_scales = inverse(applied[site])
        assert torch.equal(perm, expected_perm), site
        assert ((scales - expected_scales) / expected_scales).abs().max() < 1e-12, site
    assert alignment.sweeps < 10  # it stops once the permutations hold, not after 100 sweeps
    assert parameter_distance(f, alignment.apply(g)) < 1e-24 * parameter_distance(f, g)


@pytest.mark.parametrize("name", ["myrtle", "resnet20", "dgn_hard", "dlgn_soft"])
@pytest.mark.parametrize("group", ["permutation", "grelu"])
def test_activation_matching_recovers_the_element_that_made_g_from_f(name, group):
    f = informative(SPECS[name])
    applied = random_elements(f, group, torch.Generator().manual_seed(4))
    g = act_on_weights(f, applied)
    alignment = activation_matching(f, g, images(24), group, batch_size=10)
    for site, element in alignment.elements.items():
        expected_perm, expected_scales = inverse(applied[site])
        assert torch.equal(element[0], expected_perm), site
        assert torch.allclose(element[1], expected_scales, rtol=1e-8, atol=0), site


@pytest.mark.parametrize("name", ["myrtle", "resnet20", "dlgn_sf"])
def test_a_network_aligned_to_itself_is_the_identity(name):
    f = informative(SPECS[name])
    for group in ("permutation", "grelu"):
        alignment = weight_matching(f, f, group)
        assert alignment.objective == [0.0] * len(alignment.objective)
        for site, (perm, scales) in alignment.elements.items():
            assert torch.equal(perm, torch.arange(len(perm))), site
            assert torch.allclose(scales, torch.ones_like(scales), rtol=1e-9), site


@pytest.mark.parametrize("name", ["myrtle", "resnet20", "dgn_hard"])
@pytest.mark.parametrize("group", ["permutation", "grelu"])
def test_weight_matching_never_increases_its_objective_and_keeps_the_function(name, group):
    f, g = informative(SPECS[name], seed=0), informative(SPECS[name], seed=7)  # independent draws
    alignment = weight_matching(f, g, group, generator=torch.Generator().manual_seed(0))
    steps = alignment.objective
    assert all(after <= before for before, after in zip(steps, steps[1:]))
    assert steps[-1] < 0.95 * steps[0]
    aligned = alignment.apply(g)
    assert parameter_distance(f, aligned) == pytest.approx(steps[-1], rel=1e-12)
    x = images()
    assert (aligned(x) - g(x)).abs().max() < 1e-10


def test_the_folded_distance_sees_functions_not_a_convs_scale():
    """Batch norm undoes a conv's scale: scaling a conv by c, with its running statistics by c and
    c^2, leaves the function and the folded distance as they were, not the raw one."""
    f = informative(SPECS["resnet20"])
    g = informative(SPECS["resnet20"], seed=7)
    rescaled = copy.deepcopy(g)
    with torch.no_grad():
        rescaled.layer1[0].conv1.weight.mul_(3.0)
        rescaled.layer1[0].bn1.running_mean.mul_(3.0)
        rescaled.layer1[0].bn1.running_var.mul_(9.0)
    x = images()
    assert (rescaled(x) - g(x)).abs().max() < 1e-4  # batch norm's eps is all that differs
    raw = parameter_distance(f, g), parameter_distance(f, rescaled)
    folded = parameter_distance(f, g, True), parameter_distance(f, rescaled, True)
    assert raw[1] > raw[0] + 1.0 and folded[1] == pytest.approx(folded[0], rel=1e-4)
    alignment = weight_matching(f, g, "grelu", fold_batch_norm=True)
    steps = alignment.objective
    assert all(after <= before for before, after in itertools.pairwise(steps)) and steps[-1] < steps[0]
    assert parameter_distance(f, alignment.apply(g), True) == pytest.approx(steps[-1], rel=1e-10)


def test_grelu_alignment_reaches_a_distance_no_larger_than_permutations_alone():
    f, g = informative(SPECS["resnet20"], seed=0), informative(SPECS["resnet20"], seed=7)
    permutation = weight_matching(f, g, "permutation").objective[-1]
    grelu = weight_matching(f, g, "grelu").objective[-1]
    assert grelu < permutation  # a larger group, and the scales are fitted after each assignment


def test_float32_models_keep_their_function_to_float32_precision():
    f = informative(SPECS["resnet20"], dtype=torch.float32)
    g = informative(SPECS["resnet20"], seed=5, dtype=torch.float32)
    aligned = weight_matching(f, g, "grelu").apply(g)
    x = images(dtype=torch.float32)
    assert next(aligned.parameters()).dtype == torch.float32
    assert (aligned(x) - g(x)).abs().max() < 1e-5 * g(x).abs().max().clamp_min(1)


def test_the_variables_follow_the_residual_and_gate_ties():
    resnet = informative(SPECS["resnet20"])  # widths 8, 16, 32 at x0.5
    variables = alignment_variables(resnet)
    stream = variables[0]
    assert set(stream.at) == {"act"} | {f"layer{s}.{b}.act2" for s in (1, 2, 3) for b in range(3)}
    assert torch.equal(stream.at["layer3.0.act2"], torch.arange(8) + 4 + 8)  # the middle, twice padded
    assert {v.size for v in variables if "layer2.0.act2" in v.at} == {8}  # stem and padding, 8 each
    gated = informative(SPECS["dlgn_soft"])
    for variable in alignment_variables(gated):
        sites = set(variable.at)
        assert len(sites) == 2 and {s.split(".")[0] for s in sites} == {"features", "value"}
        feature = next(s for s in sites if s.startswith("features"))
        assert variable.scale_class[feature] is None  # soft gates: permutations only
    assert all(
        cls is None for v in alignment_variables(resnet, "permutation") for cls in v.scale_class.values()
    )


def test_alignment_refuses_models_of_different_widths_and_unknown_groups():
    f = informative(SPECS["myrtle"])
    other = informative({"arch": "myrtle", "width_multiplier": 0.5})
    with pytest.raises(ValueError, match="same architecture at the same width"):
        weight_matching(f, other)
    with pytest.raises(ValueError, match="unknown alignment group 'orthogonal'"):
        weight_matching(f, f, "orthogonal")
    with pytest.raises(ValueError, match="no images"):
        activation_matching(f, f, images(0))


# --- linear mode connectivity ---------------------------------------------------------------------


def test_the_interpolation_is_f_at_0_and_g_at_1():
    f, g = informative(SPECS["resnet20"], seed=0), informative(SPECS["resnet20"], seed=7)
    for lam, expected in ((0.0, f), (1.0, g)):
        state, target = interpolate(f, g, lam).state_dict(), expected.state_dict()
        assert all(torch.equal(state[k], target[k]) for k in target)
    middle = interpolate(f, g, 0.25).state_dict()
    key = "layer1.0.conv1.weight"
    assert torch.allclose(middle[key], 0.75 * f.state_dict()[key] + 0.25 * g.state_dict()[key])
    with pytest.raises(ValueError, match=r"lam must lie in \[0, 1\]"):
        interpolate(f, g, 1.5)


def test_reset_batch_norm_gives_the_plain_average_of_the_batch_statistics():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)).double()
    x = images(12)
    reset_batch_norm(model, x, batch_size=4)
    pre = model[0](x)
    batch_means = torch.stack([pre[i : i + 4].mean((0, 2, 3)) for i in range(0, 12, 4)])
    assert torch.allclose(model[1].running_mean, batch_means.mean(0), atol=1e-12)
    assert not model.training and model[1].momentum == 0.1  # eval mode, momentum restored


def test_a_model_interpolated_with_itself_has_no_barrier():
    f = informative(SPECS["myrtle"])
    x, labels = images(32), torch.arange(32) % 10
    lams = [0.0, 0.25, 0.5, 0.75, 1.0]
    curves = interpolation_curve(
        f, f, lams, {"test": (x, labels)}, "reset", train_images=images(20, seed=2), batch_size=10
    )
    curve = curves["test"]
    losses = [point.loss for point in curve]
    assert max(losses) - min(losses) < 1e-9
    assert abs(barrier(lams, losses)) < 1e-9 and abs(barrier(lams, losses, "endpoints_line")) < 1e-9
    assert curve[0].loss == pytest.approx(
        loss_and_accuracy(reset_batch_norm(f, images(20, seed=2), 10), x, labels)[0]
    )


@pytest.mark.parametrize(
    "spec", [SPECS["myrtle"], {**SPECS["myrtle"], "batch_norm": False}, SPECS["resnet20"]]
)
def test_repair_gives_every_corrected_channel_the_interpolation_of_the_endpoints_statistics(spec):
    f, g = informative(spec, seed=0), informative(spec, seed=5)
    x = images(24, seed=4)
    model = repair(interpolate(f, g, 0.3), f, g, 0.3, x, batch_size=10)
    layers = repaired_layers(model, x)
    kinds = {type(m) for name, m in model.named_modules() if name in layers}
    assert nn.Conv2d in kinds if spec.get("batch_norm") is False else nn.BatchNorm2d in kinds
    assert "fc" not in layers and "linear" not in layers  # the logits are left alone
    reached = channel_statistics(model, x, layers, batch_size=7)
    goal_f, goal_g = channel_statistics(f, x, layers), channel_statistics(g, x, layers)
    for name in layers:
        for k in (0, 1):  # mean, std
            goal = 0.7 * goal_f[name][k] + 0.3 * goal_g[name][k]
            assert torch.allclose(reached[name][k], goal, atol=1e-9, rtol=1e-9), (name, k)


def test_a_curve_measures_the_repair_goal_once_and_scores_as_repair_at_each_lam(monkeypatch):
    f, g = informative(SPECS["resnet20"], seed=0), informative(SPECS["resnet20"], seed=5)
    x, labels, train = images(12, seed=1), torch.arange(12) % 10, images(20, seed=4)
    lams = [0.0, 0.25, 0.5, 1.0]
    goal = RepairGoal.measure(f, g, train, batch_size=8)
    assert goal.layers == tuple(repaired_layers(interpolate(f, g, 0.5), train))
    for lam in lams[1:3]:  # a measured goal is the goal repair measures itself: the same model
        given = repair(interpolate(f, g, lam), f, g, lam, train, 8, goal).state_dict()
        measured = repair(interpolate(f, g, lam), f, g, lam, train, 8).state_dict()
        assert all(torch.equal(given[k], measured[k]) for k in measured)
    measures = []
    original = RepairGoal.measure.__func__
    monkeypatch.setattr(
        RepairGoal, "measure", classmethod(lambda cls, *a, **k: measures.append(1) or original(cls, *a, **k))
    )
    curve = interpolation_curve(f, g, lams, {"test": (x, labels)}, "repair", train, batch_size=8)["test"]
    assert len(measures) == 1  # once per curve, not once per interior lam
    for lam, point in zip(lams, curve):
        model = mode_connectivity.correct(interpolate(f, g, lam), "repair", f, g, lam, train, 8)
        assert (point.loss, point.accuracy) == loss_and_accuracy(model, x, labels, 8)
    measures.clear()
    interpolation_curve(f, g, [0.0, 1.0], {"test": (x, labels)}, "repair", train, batch_size=8)
    assert not measures  # the endpoints are not repaired: nothing to measure


def test_repair_of_a_network_with_itself_changes_nothing():
    f = informative({**SPECS["myrtle"], "batch_norm": False})
    x = images(16, seed=4)
    repaired = repair(interpolate(f, f, 0.5), f, f, 0.5, x)
    assert torch.allclose(repaired(x), f(x), atol=1e-10, rtol=0)


def test_corrections_name_their_problem_and_repair_keeps_the_endpoints():
    f, g = informative(SPECS["myrtle"]), informative(SPECS["myrtle"], seed=5)
    x = images(8, seed=4)
    with pytest.raises(ValueError, match="unknown correction 'renorm'"):
        correct(interpolate(f, g, 0.5), "renorm", f, g, 0.5, x)
    with pytest.raises(ValueError, match="'repair' correction needs training images"):
        correct(interpolate(f, g, 0.5), "repair", f, g, 0.5, None)
    for lam, end in ((0.0, f), (1.0, g)):
        assert torch.equal(correct(interpolate(f, g, lam), "repair", f, g, lam, x)(x), end(x))


def test_a_known_point_is_reused_not_scored_again():
    f, g = informative(SPECS["myrtle"]), informative(SPECS["myrtle"], seed=5)
    x, labels = images(8), torch.arange(8) % 10
    first = interpolation_curve(f, g, [0.0, 1.0], {"test": (x, labels)}, "none")
    planted = {0.0: {"test": first["test"][0].__class__(0.0, 123.0, 0.5)}}
    again = interpolation_curve(f, g, [0.0, 1.0], {"test": (x, labels)}, "none", known=planted)
    assert again["test"][0].loss == 123.0 and again["test"][1] == first["test"][1]


def test_barrier_is_the_largest_excess_over_the_endpoints_mean_or_line():
    assert barrier([0, 0.5, 1], [1.0, 3.0, 2.0]) == pytest.approx(1.5)  # 3 - (1 + 2) / 2
    assert barrier([0, 0.25, 1], [1.0, 3.0, 2.0], "endpoints_line") == pytest.approx(1.75)  # 3 - 1.25
    assert barrier([0, 0.25, 1], [1.0, 1.2, 2.0], "endpoints_line") == 0.0  # below the line: the endpoints'
    assert barrier([0, 0.25, 1], [1.0, 1.2, 2.0]) == pytest.approx(0.5)  # the larger endpoint over the mean
    with pytest.raises(ValueError, match="unknown reference 'midpoint'"):
        barrier([0, 1], [1.0, 2.0], "midpoint")
    with pytest.raises(ValueError, match="must contain lam 0 and 1"):
        barrier([0, 0.5], [1.0, 2.0])
