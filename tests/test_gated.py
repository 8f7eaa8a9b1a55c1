"""Gated networks (Lakshminarayanan & Singh): the models, their symmetries, the paper's numbers,
the findings' verdicts, the kernels of a member, and the signed monomial stitching layer."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from intertwine import kernels, measures, models, stitching, symmetry
from intertwine.workflow import paper
from intertwine.workflow.stages.gated import study as gated
from intertwine.workflow.stages.symmetry import study as symmetry_study
from intertwine.groups import random_gl
from intertwine.models.myrtle import Myrtle
from intertwine.workflow.plan import Plan

sys.path.insert(0, str(Path(__file__).parent))
from test_plan import load

GATED = {"arch": "c4gap", "width_multiplier": 0.0625}  # 8 channels per layer


def gated_spec(**options) -> dict:
    return GATED | {"gated": options}


def randomized(model: torch.nn.Module) -> torch.nn.Module:
    """float64, eval mode, batch-norm statistics and affine parameters drawn away from the identity."""
    torch.manual_seed(0)
    model = model.double().eval()
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.running_mean.normal_(0, 0.3), module.running_var.uniform_(0.5, 2.0)
            module.weight.data.normal_(1, 0.3), module.bias.data.normal_(0, 0.3)
    return model


def images(n=6, size=8, seed=1):
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# --- models -------------------------------------------------------------------------------------


def test_plain_stacks_have_the_papers_shapes():
    assert (
        models.count_parameters(models.build({"arch": "c4gap"}))
        == 3 * 128 * 9 + 128 + 3 * (128 * 128 * 9 + 128) + 4 * 256 + 128 * 10 + 10
    )
    vgg = models.build({"arch": "vgg16_avg", "width_multiplier": 0.125})
    assert len(models.sites(vgg)) == 13
    assert not any(isinstance(m, torch.nn.MaxPool2d) for m in vgg.modules())
    assert vgg(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    assert [s.name for s in models.sites(models.build({"arch": "c1gap"}))] == ["act1"]


@pytest.mark.parametrize(
    "spec",
    [
        gated_spec(family="dgn"),
        gated_spec(family="dlgn", value_input="ones", gate_perm=[3, 2, 1, 0]),
        gated_spec(family="dlgn_sf", regime="fr"),
        {"arch": "myrtle", "width_multiplier": 0.125, "gated": {"family": "dlgn"}},
        {"arch": "myrtle", "width_multiplier": 0.125, "gated": {"family": "dgn", "regime": "fr"}},
    ],
)
def test_gated_models_cut_at_value_sites_and_read_every_site(spec):
    model = randomized(models.build(spec))
    x = images(size=16)
    logits = model(x)
    names = [s.name for s in models.sites(model)]
    assert names[: len(names) // 2] == [f"features.{n.split('.')[1]}" for n in names[len(names) // 2 :]]
    assert set(models.site_activations(model, x)) == set(names)
    assert models.cut_sites(model) == [n for n in names if n.startswith("value.")]
    for site in models.cut_sites(model):
        torch.testing.assert_close(
            models.forward_from(model, models.forward_to(model, x, site), site), logits
        )
    with pytest.raises(ValueError, match="cut only at its value sites"):
        models.forward_to(model, x, names[0])
    myrtle = isinstance(model.value, Myrtle)
    assert not myrtle or not any(
        isinstance(m, (torch.nn.MaxPool2d, torch.nn.AdaptiveMaxPool2d)) for m in model.value.modules()
    )


def test_frozen_features_stay_frozen_in_training_mode():
    model = models.build(gated_spec(family="dgn", regime="fr"))
    model.train()
    assert not model.features.training and model.value.training
    assert not any(p.requires_grad for p in model.features.parameters())
    assert models.count_parameters(model) == sum(p.numel() for p in model.value.parameters())


@pytest.mark.parametrize(
    "spec, message",
    [
        (gated_spec(family="glu"), "gated.family"),
        (gated_spec(regime="fl"), "features_from"),
        (gated_spec(family="dlgn", regime="fl", features_from="c4gap"), "gated.family"),
        (gated_spec(features_from="c4gap"), "features_from"),
        (gated_spec(gate_perm=[0, 0, 1, 2]), "gate_perm"),
        (gated_spec(gate_perm=[1, 0]), "gate_perm"),
        (gated_spec(beta=0), "gated.beta"),
        (gated_spec(colour=1), "unknown key"),
        (GATED | {"activation": "gelu", "gated": {}}, "ReLU"),
        ({"arch": "myrtle", "width_multiplier": 0.125, "gated": {"gate_perm": [1, 0, 2, 3]}}, "equal shape"),
    ],
)
def test_bad_gated_specs_are_refused_naming_the_key(spec, message):
    with pytest.raises(ValueError, match=message):
        models.build(spec)


def test_value_network_fed_ones_reads_the_image_through_the_gates_only():
    """With V fed ones the logits depend on x only through F: with F frozen (hard gates) the input
    gradient is zero, and two inputs with the same gates give the same logits."""
    ones = randomized(models.build(gated_spec(family="dgn", regime="fr", value_input="ones")))
    x = images().requires_grad_()
    assert ones(x).requires_grad  # the value weights train
    (grad,) = torch.autograd.grad(ones(x).sum(), x, allow_unused=True, materialize_grads=True)
    assert torch.equal(grad, torch.zeros_like(x))
    fed_x = randomized(models.build(gated_spec(family="dgn", regime="fr")))
    (grad,) = torch.autograd.grad(fed_x(x).sum(), x)
    assert grad.abs().max() > 0
    gates = ones.gates(x.detach())
    z = torch.ones_like(x.detach())
    for layer in range(4):
        z = ones._value_layer(layer, z, gates)
    torch.testing.assert_close(ones._head(z, None), ones(x.detach()))


# --- symmetries: signed monomials on the value network ---------------------------------------------


@pytest.mark.parametrize("regime", ["standalone", "fr"])
def test_signed_monomials_on_the_value_network_leave_a_dgn_unchanged(regime):
    model = randomized(models.build(gated_spec(family="dgn", regime=regime, gate_perm=[1, 0, 3, 2])))
    elements = symmetry.random_elements(model, "monomial", torch.Generator().manual_seed(3))
    assert any((scales < 0).any() for site, (_, scales) in elements.items() if site.startswith("value."))
    if regime == "standalone":  # soft gates: F admits permutations only
        assert all(
            (scales == 1).all() for site, (_, scales) in elements.items() if site.startswith("features.")
        )
    x = images()
    assert (symmetry.act_on_weights(model, elements)(x) - model(x)).abs().max() < 1e-12
    rows = symmetry_study.check_symmetry(model, x, "monomial", torch.Generator().manual_seed(4))
    assert max(r["relative_change"] for r in rows) < 1e-12
    assert max(r["representation_error"] for r in rows) < 1e-12


def test_gated_elements_that_are_no_symmetry_are_refused():
    soft = models.build(gated_spec(family="dgn"))
    hard = models.build(gated_spec(family="dgn", regime="fr"))
    n = 8
    perm, other = torch.randperm(n), torch.roll(torch.arange(n), 1)
    with pytest.raises(ValueError, match="same permutation"):
        symmetry.act_on_weights(
            hard, {"features.act2": (perm, torch.ones(n)), "value.act2": (other, torch.ones(n))}
        )
    with pytest.raises(ValueError, match="soft"):
        symmetry.act_on_weights(
            soft, {"features.act2": (perm, torch.full((n,), 2.0)), "value.act2": (perm, torch.ones(n))}
        )
    with pytest.raises(ValueError, match="positive"):
        symmetry.act_on_weights(
            hard, {"features.act2": (perm, -torch.ones(n)), "value.act2": (perm, torch.ones(n))}
        )
    with pytest.raises(ValueError, match="gated network's value units"):
        symmetry.act_on_weights(models.build(GATED), {"act2": (perm, -torch.ones(n))})
    with pytest.raises(ValueError, match="gated network"):
        symmetry.random_elements(models.build(GATED), "monomial", torch.Generator())
    # hard gates admit positive scalings of F with the matching permutation of V
    scaled = {"features.act2": (perm, torch.rand(n) + 0.5), "value.act2": (perm, -torch.rand(n) - 0.5)}
    model = randomized(hard)
    x = images()
    assert (symmetry.act_on_weights(model, scaled)(x) - model(x)).abs().max() < 1e-12


def test_a_general_map_in_a_linear_feature_network_changes_that_layers_gates_only():
    """DLGN: T at feature layer l (W_l -> T W_l, W_{l+1} -> W_{l+1} T^-1) leaves the later feature
    layers unchanged but changes layer l's gates unless T is a permutation times positive scales."""
    model = randomized(models.build(gated_spec(family="dlgn", regime="fr")))
    x = images(n=24)
    acted = symmetry.act_on_weights(
        model, {"features.act2": random_gl(8, torch.Generator().manual_seed(5), dtype=torch.float64)}
    )
    before, after = models.site_activations(model, x), models.site_activations(acted, x)
    for site in ("features.act3", "features.act4"):
        torch.testing.assert_close(after[site], before[site], rtol=1e-9, atol=1e-9)
    assert measures.gate_cka(before["features.act2"], after["features.act2"]) < 0.95
    assert (acted(x) - model(x)).abs().max() > 1e-3


def test_gate_cka_is_invariant_to_grelu_not_to_rotations():
    model = randomized(models.build({"arch": "myrtle", "width_multiplier": 0.125}))
    x = images(n=32, size=16)
    grelu = symmetry.act_on_weights(
        model, symmetry.random_elements(model, "grelu", torch.Generator().manual_seed(6))
    )
    rotated = symmetry.act_on_weights(
        model, symmetry.random_elements(model, "orthogonal", torch.Generator().manual_seed(6))
    )
    before, same, other = (models.site_activations(m, x) for m in (model, grelu, rotated))
    for site in before:
        assert measures.gate_cka(before[site], same[site]) == pytest.approx(1, abs=1e-12)
        kernel = measures.cka_kernel("gate_cka", before[site])
        assert measures.kernel_cka(kernel, measures.cka_kernel("gate_cka", same[site])) == pytest.approx(
            1, abs=1e-12
        )
    assert min(measures.gate_cka(before[s], other[s]) for s in before) < 0.9


# --- kernels of a member ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [GATED, gated_spec(family="dgn", gate_perm=[1, 0, 3, 2]), gated_spec(family="dlgn", value_input="ones")],
)
def test_kernel_checks_find_the_grelu_invariance_exact(spec):
    model = randomized(models.build(spec))
    rows = gated.kernel_checks(model, images(n=8).float(), torch.Generator().manual_seed(7))
    kinds = [row["kernel"] for row in rows]
    assert kinds.count("npk") == 1 and kinds.count("gate") == len(models.sites(model))
    assert max(row["permutation_error"] for row in rows) < 1e-12
    npk_row = rows[kinds.index("npk")]
    assert 0 < npk_row["shift_error"] < 1 and -1 <= npk_row["ntk_cka"] <= 1


def test_the_npk_of_a_gated_network_uses_its_gates_in_value_order():
    model = randomized(models.build(gated_spec(family="dgn", regime="fr", gate_perm=[3, 2, 1, 0])))
    x = images(n=5)
    gates = model.gates(x)
    from intertwine.kernels import npk_conv_gap

    torch.testing.assert_close(kernels.member_npk(model, x), npk_conv_gap(x, gates[::-1]))
    with pytest.raises(ValueError, match="neural path kernel"):
        kernels.member_npk(models.build({"arch": "resnet20", "width_multiplier": 0.25}), x.float())


# --- the paper's numbers and the findings ------------------------------------------------------


def test_paper_rows_are_found_for_their_specs_only():
    def spec(**gated_options):
        return models.normalize_spec({"arch": "c4gap", **({"gated": gated_options} if gated_options else {})})

    assert paper.reported_gated(spec(), "cifar10", 50)[1:] == ("CIFAR-10 C4GAP w128, DNN", 80.5, 0.4)
    assert paper.reported_gated(spec(family="dgn", value_input="ones"), "cifar100", 50)[2] == 47.3
    permuted = paper.reported_gated(spec(family="dlgn", gate_perm=[1, 0, 2, 3]), "cifar10", 50)
    assert permuted[0] == "I" and "permuted" in permuted[1] and permuted[2] == 75.9
    assert paper.reported_gated(spec(family="dgn"), "shapes", 50) is None
    assert paper.reported_gated(spec(family="dgn", regime="fr"), "cifar10", 50) is None
    # Table III's C1GAP is "a shallow DNN with ReLU" (no gates): its rows score the plain network
    c1gap = models.normalize_spec({"arch": "c1gap"})
    assert paper.reported_gated(c1gap, "cifar10", 2000)[1:] == (
        "CIFAR-10 C1GAP (2000 epochs), DNN",
        70.0,
        0.2,
    )
    assert paper.reported_gated(c1gap, "cifar100", 200)[2] == 36.3
    assert paper.reported_gated(c1gap, "cifar10", 7) is None
    sf = models.normalize_spec({"arch": "c1gap", "gated": {"family": "dlgn_sf", "value_input": "ones"}})
    assert paper.reported_gated(sf, "cifar10", 200) is None
    sf4 = models.normalize_spec(
        {"arch": "c4gap", "width_multiplier": 4.0, "gated": {"family": "dlgn_sf", "value_input": "ones"}}
    )
    assert paper.reported_gated(sf4, "cifar10", 50)[2] == 75.1
    vgg = models.normalize_spec({"arch": "vgg16_avg", "gated": {"family": "dlgn"}})
    assert paper.reported_gated(vgg, "cifar10", 182)[:3] == ("II", "CIFAR-10 VGG16, DLGN(x,x)", 87.0)
    assert paper.reported_gated(vgg, "cifar10", 32) is None  # not Table II's 64,000 iterations


# The findings' verdicts on the paper's own Tables I and II, reversed and with one member:
# tests/test_claims.py (test_gated_findings_*).


# --- monomial stitching -------------------------------------------------------------------------


def test_match_monomial_recovers_a_signed_monomial_and_training_keeps_signs():
    generator = torch.Generator().manual_seed(8)
    x = torch.randn(64, 6, 3, 3, generator=generator)
    perm = torch.randperm(6, generator=generator)
    scales = torch.tensor([1.5, -0.5, 2.0, -3.0, 0.7, -1.1])
    y = x[:, perm] * scales.view(1, -1, 1, 1)
    found_perm, found_scales = stitching.match_monomial(x, y)
    assert torch.equal(found_perm, perm)
    torch.testing.assert_close(found_scales, scales)
    layer = stitching.build_layer("monomial", 6)
    layer.match(x, y)
    layer.project()
    assert (layer.scales < 0).sum() == 3
    assert stitching.build_layer("grelu", 6).__class__ is stitching.GReLUStitch
    _, grelu_scales = stitching.match_grelu(x, y)
    assert (grelu_scales >= 0).all()


# --- Thm 2.1: the value weights' NTK at a +-sigma initialisation is d sigma^(2(d-1)) NPK -------------


@pytest.mark.parametrize(
    "spec, size",
    [
        ({"arch": "c4gap", "width_multiplier": 1 / 32, "gated": {"family": "dgn"}}, 6),  # no pools
        (
            {"arch": "c4gap", "width_multiplier": 1 / 32, "gated": {"family": "dlgn", "value_input": "ones"}},
            6,
        ),
        # Myrtle's value network: gated max-pools and a global selection in place of the average pool
        ({"arch": "myrtle", "width_multiplier": 1 / 32, "gated": {"family": "dgn", "pools": "gated_max"}}, 8),
    ],
    ids=["c4gap dgn", "c4gap dlgn ones", "myrtle gated max-pools"],
)
def test_value_weight_ntk_is_d_sigma_to_the_2_d_minus_1_times_the_npk_in_expectation(spec, size):
    """The paper's Thm 2.1 on convolutional gated networks (the identity the NPK module's docstring
    states): averaged over +-sigma initialisations of the value weights, their NTK equals d
    sigma^(2(d-1)) NPK, every entry within 4 standard errors (fixed seeds); the factor with one
    layer fewer is rejected by the same test."""
    torch.manual_seed(0)
    model = models.build(spec)
    x = torch.randn(3, 3, size, size, dtype=torch.float64)
    mean, se = kernels.value_weight_ntk(
        model, x, sigma=0.7, draws=300, generator=torch.Generator().manual_seed(1)
    )
    npk = kernels.member_npk(model.double(), x)
    d = len(model.value.layer_names()) + 1
    assert kernels.value_weight_ntk_factor(model, 0.7) == pytest.approx(d * 0.7 ** (2 * (d - 1)))
    assert float(((mean - kernels.value_weight_ntk_factor(model, 0.7) * npk) / se).abs().max()) < 4
    wrong = (d - 1) * 0.7 ** (2 * (d - 2)) * npk
    assert float(((mean - wrong) / se).abs().max()) > 4


def test_gated_figures_draw_the_papers_row_of_the_members_data_set_and_budget():
    """CIFAR-100 members are drawn beside Table I's CIFAR-100 row, not CIFAR-10's; a plain C1GAP at
    50 epochs has no row (Table III's are at 200 and 2000), so nothing is drawn beside it."""
    import matplotlib.pyplot as plt
    import pandas as pd

    from intertwine.workflow.stages.gated.figures import gated_accuracy

    specs = {
        "c4gap": models.normalize_spec({"arch": "c4gap"}),
        "c4gap_dlgn_ones": models.normalize_spec(
            {"arch": "c4gap", "gated": {"family": "dlgn", "value_input": "ones"}}
        ),
        "c1gap": models.normalize_spec({"arch": "c1gap"}),
    }
    zoo = pd.DataFrame(
        [
            {"variant": v, "seed": s, "test_acc": 0.4 + 0.01 * s, "config_hash": "h", "version": "v"}
            for v in specs
            for s in range(3)
        ]
    )
    table = gated.study_table(zoo, specs, "cifar100", {"c4gap": 50, "c4gap_dlgn_ones": 50, "c1gap": 50})
    reported = table.groupby("variant")["paper_acc"].first() * 100
    assert reported["c4gap"] == pytest.approx(paper.reported_gated(specs["c4gap"], "cifar100", 50)[2])
    assert reported["c4gap"] == pytest.approx(51.8) and pd.isna(reported["c1gap"])
    fig = gated_accuracy(table)
    heights = sorted(
        round(p.get_height(), 1) for p in fig.axes[0].patches if p.get_facecolor()[:3] == (0.7, 0.7, 0.7)
    )
    assert heights == sorted([51.8, round(reported["c4gap_dlgn_ones"], 1)])
    assert "CIFAR-100" in fig.axes[0].get_title()
    plt.close(fig)


def test_table_ii_is_the_row_of_a_vgg_trained_its_64000_iterations_only():
    vgg = models.normalize_spec({"arch": "vgg16_avg"})
    assert paper.TABLE_II_EPOCHS == 164
    assert paper.reported_gated(vgg, "cifar10", 182)[0] == "II"  # 64,000 steps of 128 over 45,000 images
    assert paper.reported_gated(vgg, "cifar10", 32) is None  # Table III's 32-epoch budget, a DNN: no row


@pytest.mark.parametrize("path", ["config/paper.yaml", "config/gated_cifar100.yaml"])
def test_vgg16_dlgn_sf_trains_with_table_iis_recipe(path):
    """Appendix C: "The VGG-16-DLGN-SF in Table III of Figure 4 uses the same optimiser, batch size
    and learning rate schedule as the models in Table II": Table II's VGG16 recipe, its weight decay
    and translations included, for Table III's 32 epochs."""
    plan = Plan(load(path))
    sf, table_ii = plan.train_block("vgg16_dlgn_sf"), plan.train_block("vgg16_dlgn_x")
    assert (sf["epochs"], sf["steps"], table_ii["steps"]) == (32, None, 64000)
    assert plan.member_epochs("vgg16_dlgn_sf") == 32
    assert {key for key in sf if sf[key] != table_ii[key]} == {"epochs", "steps"}
    assert (sf["optimizer"], sf["weight_decay"], sf["translate"]) == ("sgd", 0.0001, 4)


# --- logit ensembles (the paper's C1GAP-16-ENS) ----------------------------------------------------


class _Fixed(torch.nn.Module):
    """A 'network' that returns fixed logits per input index (the input's first pixel)."""

    def __init__(self, logits):
        super().__init__()
        self.logits = torch.tensor(logits)

    def forward(self, x):
        return self.logits[x[:, 0, 0, 0].long()]


def test_logit_ensemble_averages_logits_not_votes():
    # Two of three members vote class 0 on image 0, but the third is far surer of class 1: the
    # averaged logits pick 1 (a majority vote would pick 0); on image 1 all agree on class 1.
    members = [
        _Fixed([[1.0, 0.0], [0.0, 1.0]]),
        _Fixed([[1.0, 0.0], [0.0, 1.0]]),
        _Fixed([[0.0, 5.0], [0.0, 1.0]]),
    ]
    x = torch.tensor([0.0, 1.0]).reshape(2, 1, 1, 1)
    mean, each = kernels.logit_ensemble(members, x, batch_size=1)
    assert each.shape == (3, 2, 2)
    assert torch.allclose(mean, torch.tensor([[2 / 3, 5 / 3], [0.0, 1.0]]))
    assert mean.argmax(1).tolist() == [1, 1]
    with pytest.raises(ValueError, match="at least 2 members"):
        kernels.logit_ensemble(members[:1], x)
    with pytest.raises(ValueError, match="disagree on their outputs"):
        kernels.logit_ensemble([members[0], _Fixed([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])], x)


def test_ensemble_job_scores_the_named_members_and_the_paper_row(tmp_path, tiny_shapes_dir):
    import pandas as pd

    from intertwine.workflow.job import Job
    from intertwine.workflow.stages.gated.job import gated_ensemble
    from intertwine.workflow.zoo import CHECKPOINT_FORMAT, save_checkpoint

    spec = {"arch": "c1gap", "width_multiplier": 1 / 64}
    paths = []
    for seed in range(3):
        torch.manual_seed(seed)
        paths.append(tmp_path / f"seed{seed}.pt")
        checkpoint = {
            "format": CHECKPOINT_FORMAT,
            "state_dict": models.build(spec).state_dict(),
            "spec": models.normalize_spec(spec),
            "variant": "c1gap",
            "seed": seed,
            "test_acc": 0.1,
            "test_dtype": "float32",
        }
        save_checkpoint(checkpoint, paths[-1])
    job = Job("cpu", tiny_shapes_dir, 0, lambda message: None)
    row = gated_ensemble(job, [str(p) for p in paths]).iloc[0]
    assert (row["variant"], row["members"], row["seeds"]) == ("c1gap", 3, "0,1,2")
    assert row["member_acc_min"] <= row["member_acc_mean"] <= row["member_acc_max"]
    # The paper's number is C1GAP-16-ENS's (Table III): 16 plain width-512 C1GAPs, 200 or 2000 epochs.
    c1gap = models.normalize_spec({"arch": "c1gap"})
    assert paper.reported_ensemble(c1gap, "cifar10", 200, 16) == ("CIFAR-10 C1GAP-16-ENS (200 epochs)", 63.81)
    assert paper.reported_ensemble(c1gap, "cifar10", 2000, 16)[1] == 72.2
    assert paper.reported_ensemble(c1gap, "cifar10", 200, 8) is None
    assert paper.reported_ensemble(c1gap, "cifar100", 200, 16) == (
        "CIFAR-100 C1GAP-16-ENS (200 epochs)",
        38.23,
    )
    assert paper.reported_ensemble(c1gap, "cifar100", 2000, 16)[1] == 45.47
    assert paper.reported_ensemble(c1gap, "shapes", 200, 16) is None
    table = gated.ensemble_table(
        pd.DataFrame([row.to_dict() | {"members": 16}]), {"c1gap": c1gap}, "cifar10", {"c1gap": 200}
    )
    assert table.loc[0, "paper_acc"] == pytest.approx(0.6381) and "C1GAP-16-ENS" in table.loc[0, "paper_row"]
