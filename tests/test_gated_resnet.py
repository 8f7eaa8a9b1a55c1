"""ResNet-110 and its gated forms (Lakshminarayanan & Singh, Table II): the plain network's size,
sites and exact G_ReLU symmetry; a hard-gated DGN whose feature network is its value network is
that ReLU ResNet exactly; the DLGN's feature network is linear; what a residual base refuses."""

import pytest
import torch
from torch import nn

from intertwine import models, symmetry
from intertwine.workflow import paper
from intertwine.workflow.job import Job
from intertwine.workflow.stages.zoo.job import train_member
from intertwine.models.gated import GatedBase, GatedNet
from intertwine.models.gated_resnet import GatedResNet, SiteGate

SMALL = {"arch": "resnet110", "width_multiplier": 0.125}


def randomised(model: nn.Module, seed: int = 0) -> nn.Module:
    """Batch norms away from their initial identity, so that every site matters."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.BatchNorm2d):
                shape = module.weight.shape
                module.weight.copy_(torch.rand(shape, generator=generator) + 0.5)
                module.bias.copy_(0.3 * torch.randn(shape, generator=generator))
                module.running_mean.copy_(0.1 * torch.randn(shape, generator=generator))
                module.running_var.copy_(torch.rand(shape, generator=generator) + 0.5)
    return model.double().eval()


def test_resnet110_is_he_et_als_network():
    model = models.build({"arch": "resnet110"})
    assert models.count_parameters(model) == 1_727_962  # 6n + 2 layers, n = 18, option-A shortcuts
    sites = models.sites(model)
    assert len(sites) == 1 + 3 * 18 * 2 and sites[0].name == "act" and sites[-1].name == "layer3.17.act2"
    assert [s.inside_residual for s in sites[1:3]] == [True, False]
    assert {s.channels for s in sites} == {16, 32, 64}


def test_the_grelu_action_leaves_resnet110_unchanged():
    torch.manual_seed(0)
    model = randomised(models.build(SMALL))
    x = torch.randn(4, 3, 32, 32, dtype=torch.float64)
    acted = symmetry.act_on_weights(
        model, symmetry.random_elements(model, "grelu", torch.Generator().manual_seed(1))
    )
    assert (acted(x) - model(x)).abs().max() <= 1e-12 * model(x).abs().max()
    assert symmetry.acts_on(models.normalize_spec(SMALL))


def test_a_hard_dgn_whose_features_are_its_values_is_the_relu_resnet():
    torch.manual_seed(0)
    gated = randomised(models.build(SMALL | {"gated": {"family": "dgn", "regime": "fr"}}))
    plain = randomised(models.build(SMALL))
    gated.features.load_state_dict(plain.state_dict(), strict=False)  # F has no head
    state = plain.state_dict()
    gated.value.load_state_dict(state)
    x = torch.randn(3, 3, 32, 32, dtype=torch.float64)
    assert torch.equal(gated(x), plain(x))
    # every activation of V is a gate, the residual output's included
    gates = [m for m in gated.value.modules() if isinstance(m, SiteGate)]
    assert len(gates) == len(models.sites(plain)) and not any(
        isinstance(m, nn.ReLU) for m in gated.value.modules()
    )
    # soft gates (the standalone regime) are sigmoid(beta q): not the ReLU network
    soft = randomised(models.build(SMALL | {"gated": {"family": "dgn"}}))
    soft.features.load_state_dict(plain.state_dict(), strict=False)
    soft.value.load_state_dict(state)
    assert not torch.allclose(soft(x), plain(x))


def test_the_dlgn_gates_with_a_linear_network_and_ones_feed_the_values():
    torch.manual_seed(0)
    dlgn = randomised(models.build(SMALL | {"gated": {"family": "dlgn", "value_input": "ones"}}))
    assert not any(isinstance(m, nn.ReLU) for m in dlgn.features.modules())
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)

    def pre(images):
        """F's pre-activation at every site (what its gates threshold)."""
        seen = []
        handles = [
            dlgn.features.get_submodule(site).register_forward_hook(lambda m, args, out: seen.append(args[0]))
            for site in dlgn.site_names
        ]
        dlgn.gates(images)
        for handle in handles:
            handle.remove()
        return torch.cat([q.flatten() for q in seen])

    # F is linear up to its batch norms' shifts: its pre-activations are affine in x
    middle, ends = pre(x.mean(0, keepdim=True)), (pre(x[:1]) + pre(x[1:])) / 2
    assert (middle - ends).abs().max() <= 1e-9 * middle.abs().max()
    seen = []
    handle = dlgn.value.conv1.register_forward_hook(lambda module, args, output: seen.append(args[0]))
    dlgn(x)
    handle.remove()
    assert torch.equal(seen[0], torch.ones_like(x))  # the value network's input is ones
    assert models.sites(dlgn)[0].name == "features.act" and models.sites(dlgn)[109].name == "value.act"


@pytest.mark.parametrize(
    "gated, message",
    [
        ({"family": "dlgn_sf"}, "gated.family': a residual base takes dgn or dlgn"),
        ({"gate_perm": list(range(109))[::-1]}, "gated.gate_perm': a ResNet's sites differ in shape"),
        ({"pools": "gated_max"}, "gated.pools': a ResNet has no max-pools"),
    ],
)
def test_a_residual_base_refuses_what_only_the_plain_stacks_have(gated, message):
    with pytest.raises(ValueError, match=message):
        models.build(SMALL | {"gated": gated})


def test_a_gated_resnet_gates_its_residual_output_or_refuses():
    with pytest.raises(ValueError, match="residual output included; remove residual_activation or gated"):
        models.build(SMALL | {"residual_activation": False, "gated": {"family": "dgn"}})
    assert not symmetry.acts_on(models.normalize_spec(SMALL | {"gated": {"family": "dgn"}}))
    with pytest.raises(ValueError, match="cannot be cut at site 'value.act'"):
        models.forward_to(
            models.build(SMALL | {"gated": {"family": "dgn"}}), torch.randn(1, 3, 32, 32), "value.act"
        )


@pytest.mark.parametrize("base", [SMALL, {"arch": "c4gap", "width_multiplier": 0.25}])
def test_both_gated_networks_share_one_base_that_freezes_hard_features(base):
    for regime, hard in (("fr", True), ("standalone", False)):
        model = models.build(base | {"gated": {"family": "dgn", "regime": regime, "beta": 4.0}})
        assert isinstance(model, GatedBase) and isinstance(model, GatedNet) != isinstance(model, GatedResNet)
        assert "train" not in vars(type(model)) and "_gate" not in vars(type(model))  # the base's
        assert model.hard == hard and (model.family, model.regime, model.beta) == ("dgn", regime, 4.0)
        model.train()
        assert model.value.training and model.features.training != hard  # frozen F stays in eval
        assert all(p.requires_grad != hard for p in model.features.parameters())
        assert all(p.requires_grad for p in model.value.parameters())
        q = torch.tensor([-1.0, 0.0, 0.5], dtype=torch.float64)
        expected = (q > 0).to(q.dtype) if hard else torch.sigmoid(4.0 * q)
        assert torch.equal(model._gate(q), expected)
        assert not model.eval().features.training and model.train(False) is model


def test_table_ii_resnet110_rows_are_the_papers():
    spec = lambda **gated: models.normalize_spec({"arch": "resnet110", **({"gated": gated} if gated else {})})  # noqa: E731
    epochs = paper.TABLE_II_EPOCHS
    assert paper.reported_gated(spec(), "cifar10", epochs)[1:] == ("CIFAR-10 ResNet-110, DNN", 94.0, 0.2)
    row = paper.reported_gated(spec(family="dlgn", value_input="ones"), "cifar100", epochs)
    assert row[0] == "II" and row[2:] == (62.7, 0.3)
    assert paper.reported_gated(spec(family="dgn"), "cifar10", epochs - 1) is None  # below Table II's budget


def test_a_gated_resnet_trains_in_the_zoo(tiny_shapes_dir):
    torch.set_num_threads(1)
    spec = {"arch": "resnet110", "width_multiplier": 0.0625, "gated": {"family": "dlgn"}}
    checkpoint, metrics = train_member(
        Job("cpu", tiny_shapes_dir), "m", 0, spec, {"epochs": 1, "batch_size": 64}
    )
    assert list(metrics["epoch"]) == [1] and 0 <= checkpoint["test_acc"] <= 1
    reloaded = models.build(spec)
    reloaded.load_state_dict(checkpoint["state_dict"])
