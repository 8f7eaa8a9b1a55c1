"""The excitation-pullback stage: its measurements (intertwine.workflow.stages.pullback.study) and its jobs."""

import math

import numpy as np
import pandas as pd
import pytest
import torch

from intertwine import models
from intertwine import gates
from intertwine.pullback import measurements as study
from intertwine.pullback import pgd
from intertwine.workflow.stages.pullback import study as stage_study
from intertwine.pullback import pullback
from intertwine.symmetry import act_on_weights, random_elements

EXACT = 1 - 1e-10  # a cosine at rounding level
MYRTLE = {"arch": "myrtle", "width_multiplier": 0.125}
GATED = {"arch": "c4gap", "width_multiplier": 0.0625, "gated": {"family": "dgn"}}  # soft gates


def build(spec, seed=0):
    torch.manual_seed(seed)
    return models.build(spec).double().eval()


def images(n=3, size=8, seed=1):
    return torch.randn(n, 3, size, size, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def myrtle_rows():
    model = build(MYRTLE)
    return study.symmetry_cosines(
        model, images(), [0, 1, 2], images(6, seed=2), 0.3, [0.1, 1.0, 2.0], torch.Generator().manual_seed(0)
    )


def test_cosines_and_their_summary():
    a = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 1.0]])
    b = torch.tensor([[2.0, 0.0], [1.0, 0.0], [-1.0, -1.0]])
    got = study.cosines(a, b)
    assert got.dtype == torch.float64 and got[0] == 1 and got[1].isnan() and got[2] == pytest.approx(-1)
    assert study.summarize_cosines(got) == pytest.approx({"cos_mean": 0.0, "cos_min": -1.0, "images": 2})
    empty = study.summarize_cosines(torch.tensor([math.nan]))
    assert empty["images"] == 0 and math.isnan(empty["cos_min"])


def test_permutations_leave_every_mode_invariant(myrtle_rows):
    rows = [r for r in myrtle_rows if r["group"] == "permutation"]
    assert {r["mode"] for r in rows} == set(study.MODES) and {r["scale_spread"] for r in rows} == {0.0}
    assert all(r["cos_min"] > EXACT and r["images"] == 3 for r in rows)


def test_scalings_turn_global_temperature_pullbacks_and_per_neuron_ones_restore_invariance(myrtle_rows):
    grelu = [r for r in myrtle_rows if r["group"] == "grelu"]
    assert sorted({r["scale_spread"] for r in grelu}) == [0.1, 1.0, 2.0]
    assert all(r["logit_change"] < 1e-12 for r in myrtle_rows)  # the same function throughout
    for r in grelu:
        if r["mode"] == "global" and r["scale_spread"] >= 1:
            assert r["cos_min"] < 0.999, r
        if r["mode"] in ("gradient", "per_neuron"):
            assert r["cos_min"] > EXACT, r


def test_a_gated_networks_pullback_holds_its_gates_fixed():
    """A soft-gated DGN: the pullback is the value network's gradient with the gates detached, the
    same at every temperature, and invariant to every element the symmetry stage draws."""
    model, x = build(GATED), images(2)
    assert "value.act1" in study.pb.swapped_modules(model)
    one, other = (pullback(model, x, [0, 1], temperature=t) for t in (0.05, 5.0))
    assert ((one - other).norm() / one.norm()).item() < 1e-12
    gradient = pullback(model, x, [0, 1], mode="gradient")  # the plain gradient passes the gates too
    assert ((one - gradient).norm() / gradient.norm()).item() > 1e-3
    rows = study.symmetry_cosines(
        model, x, [0, 1], images(4, seed=3), 0.3, [2.0], torch.Generator().manual_seed(1)
    )
    assert all(r["cos_min"] > EXACT for r in rows)


def test_agreement_of_a_member_with_its_permuted_self_is_exact():
    """Member b is member a with permuted units: the Hungarian match recovers the permutation (unit
    u of a is unit perm[u] of b), and every pullback agrees exactly."""
    a = build(MYRTLE)
    elements = random_elements(a, "permutation", torch.Generator().manual_seed(0))
    b = act_on_weights(a, elements)
    probe = images(16, seed=4)
    acts = {m: models.site_activations(m, probe, ["act2"])["act2"] for m in (a, b)}
    perm, correlation = study.matched_units(acts[a], acts[b])
    # b's channel i is a's channel elements[i]: a's channel u is b's channel inverse(u)
    expected = torch.argsort(elements["act2"][0])
    alive = ~correlation.isnan()
    assert torch.equal(perm[alive], expected[alive]) and (correlation[alive] > EXACT).all()
    rows = study.agreement_rows(a, b, images(3), [0, 1, 2], probe, 0.3, ["act2"], 2, torch.Generator())
    assert {r["site"] for r in rows} == {"logit", "act2"} and len(rows) == 3 + 2 * 3
    assert all(r["cos_min"] > EXACT for r in rows)
    units = [r for r in rows if r["site"] == "act2"]
    assert all(r["unit_b"] == int(expected[r["unit_a"]]) for r in units)


def test_deletion_and_insertion_curves():
    model, x = build(MYRTLE), images(3)
    classes = torch.tensor([0, 3, 7])
    attribution = pullback(model, x, classes)
    deletion, insertion = study.deletion_insertion(model, x, classes, attribution, steps=4)
    assert deletion.shape == insertion.shape == (3, 5)
    with torch.no_grad():
        own = model(x).softmax(1)[torch.arange(3), classes]
        mean_image = model(torch.zeros_like(x)).softmax(1)[torch.arange(3), classes]
    torch.testing.assert_close(deletion[:, 0], own, rtol=0, atol=1e-12)  # nothing deleted
    torch.testing.assert_close(deletion[:, -1], mean_image, rtol=0, atol=1e-12)  # 100 %: the mean image
    torch.testing.assert_close(insertion[:, 0], mean_image, rtol=0, atol=1e-12)
    torch.testing.assert_close(insertion[:, -1], own, rtol=0, atol=1e-12)
    for curve in (deletion, insertion):
        area = study.curve_area(curve)
        assert ((area >= 0) & (area <= 1)).all()
    # Deleting the most salient pixel first: at 25 % the top quarter of |v| summed over channels is 0.
    saliency = study.saliency(attribution).flatten(1)
    top = saliency.argsort(1, descending=True)[:, :16]
    with torch.no_grad():
        deleted = x.flatten(2).clone()
        deleted[torch.arange(3)[:, None, None], torch.arange(3)[None, :, None], top[:, None, :]] = 0
        quarter = model(deleted.view_as(x)).softmax(1)[torch.arange(3), classes]
    torch.testing.assert_close(deletion[:, 1], quarter, rtol=0, atol=1e-12)


def test_pgd_stays_in_the_ball_and_the_image_range():
    model, x = build(MYRTLE), images(4, size=8)
    mean, std = torch.tensor([0.5, 0.4, 0.3]).double(), torch.tensor([0.2, 0.25, 0.3]).double()
    x = pgd.from_unit_range(pgd.to_unit_range(x, mean, std).clamp(-1, 1), mean, std)
    torch.testing.assert_close(pgd.from_unit_range(pgd.to_unit_range(x, mean, std), mean, std), x)
    targets = pgd.random_targets(torch.tensor([0, 1, 2, 3]), 10, torch.Generator().manual_seed(0))
    assert (targets != torch.tensor([0, 1, 2, 3])).all()
    seen = []
    moved = pgd.pgd_toward(
        lambda z, t: pullback(model, z, t),
        x,
        targets,
        mean,
        std,
        steps=3,
        epsilon=2.0,
        step_size=1.5,
        each_step=seen.append,
    )
    assert len(seen) == 3 and torch.equal(seen[-1], moved)
    u0, u = pgd.to_unit_range(x, mean, std), pgd.to_unit_range(moved, mean, std)
    assert ((u - u0).flatten(1).norm(dim=1) <= 2.0 + 1e-9).all()
    assert (u.abs() <= 1 + 1e-12).all()
    with torch.no_grad():  # the ascent raised the target's logit
        before, after = model(x), model(moved)
    rows = torch.arange(4)
    assert (after[rows, targets] - after.mean(1) > before[rows, targets] - before.mean(1)).all()
    assert pgd.scaled_to_image(100, 32 * 32 * 3) == pytest.approx(14.2857, abs=1e-4)


def test_success_and_target_probability_after_each_pgd_step():
    """The per-step records are what the reader predicts on the images of each step: the last
    is the moved images', for the steering model and for another (the transfer's reader)."""
    torch.manual_seed(0)
    model, other, x = build(MYRTLE), build(MYRTLE), images(5, size=8)
    mean, std = torch.tensor([0.5, 0.4, 0.3]).double(), torch.tensor([0.2, 0.25, 0.3]).double()
    targets = pgd.random_targets(torch.arange(5), 10, torch.Generator().manual_seed(1))
    direction = lambda z, t: pullback(model, z, t)  # noqa: E731
    budget = {"steps": 3, "epsilon": 2.0, "step_size": 0.8}
    seen = []
    plain = pgd.pgd_toward(direction, x, targets, mean, std, **budget, each_step=seen.append)
    for reader in (model, other):
        moved, by_step = pgd.pgd_success_by_step(reader, direction, x, targets, mean, std, **budget)
        torch.testing.assert_close(moved, plain, rtol=0, atol=0)
        with torch.no_grad():
            assert by_step == [pgd.success_rate(reader(z), targets) for z in seen]
    moved, probs = pgd.pgd_target_prob_by_step(model, direction, x, targets, mean, std, **budget)
    assert probs.shape == (5, 3) and probs.device.type == "cpu"
    with torch.no_grad():
        final = model(moved).softmax(1)[torch.arange(5), targets]
    torch.testing.assert_close(probs[:, -1], final, rtol=0, atol=0)
    scores = torch.tensor([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]])
    assert pgd.success_rate(scores, torch.tensor([1, 1, 1])) == 2 / 3
    shown = pgd.to_zero_one(plain, mean, std)
    assert shown.min() >= 0 and shown.max() <= 1
    torch.testing.assert_close(shown, (pgd.to_unit_range(plain, mean, std) + 1) / 2, atol=1e-12, rtol=0)


def test_summary_has_a_column_per_mode():
    symmetry = pd.DataFrame(
        [
            {
                "variant": "m",
                "seed": 0,
                "group": g,
                "scale_spread": s,
                "mode": mode,
                "cos_min": c,
                "cos_mean": c,
            }
            for g, s, c in (("permutation", 0.0, 1.0), ("grelu", 1.0, 0.5))
            for mode in study.MODES
        ]
    )
    agreement = pd.DataFrame(
        [
            {"variant": "m", "site": site, "mode": mode, "cos_mean": 0.2}
            for site in ("logit", "act1")
            for mode in study.MODES
        ]
    )
    faithfulness = pd.DataFrame(
        [
            {
                "variant": "m",
                "seed": 0,
                "mode": mode,
                "deletion_auc": 0.1,
                "insertion_auc": 0.4,
                "pgd_success": 1.0,
            }
            for mode in study.MODES
        ]
    )
    summary = stage_study.summarize(symmetry, agreement, faithfulness)
    assert list(summary.columns) == ["variant", "measure", *study.MODES]
    assert summary.loc[summary["measure"] == "min cosine, G_ReLU sigma 1", "global"].item() == 0.5
    assert len(summary) == 2 + 2 + 3


def _checkpoint(path, spec, variant, seed):
    from intertwine.workflow.zoo import CHECKPOINT_FORMAT, save_checkpoint

    torch.manual_seed(seed)
    save_checkpoint(
        {
            "format": CHECKPOINT_FORMAT,
            "state_dict": models.build(spec).state_dict(),
            "spec": models.normalize_spec(spec),
            "variant": variant,
            "seed": seed,
            "test_acc": 0.1,
            "test_dtype": "float32",
        },
        path,
    )
    return str(path)


def test_jobs_on_tiny_models(tmp_path, tiny_shapes_dir):
    from intertwine.workflow.job import Job
    from intertwine.workflow.stages.pullback.job import pullback_images, pullback_member, pullback_pair
    from intertwine.workflow.stages.pullback.tables import (
        PULLBACK_AGREEMENT,
        PULLBACK_FAITHFULNESS,
        PULLBACK_SYMMETRY,
        PULLBACK_TRANSFER,
    )
    from intertwine.workflow.tables import to_table

    paths = [_checkpoint(tmp_path / f"seed{s}.pt", MYRTLE, "myrtle", s) for s in range(2)]
    job = Job("cpu", tiny_shapes_dir, 0, lambda message: None)
    block = {"images": 4, "probe_images": 8, "spreads": [1.0], "deletion_steps": 4, "pgd": {"steps": 2}}
    symmetry, faithfulness = pullback_member(job, paths[0], block)
    to_table(symmetry, PULLBACK_SYMMETRY), to_table(faithfulness, PULLBACK_FAITHFULNESS)
    assert (symmetry[["variant", "seed"]].drop_duplicates().values.tolist()) == [["myrtle", 0]]
    exact = symmetry[(symmetry["group"] == "permutation") | (symmetry["mode"] != "global")]
    assert (exact["cos_min"] > EXACT).all() and len(exact) == 3 + 2
    assert symmetry.loc[symmetry["mode"] == "global", "cos_min"].min() < 0.999
    assert list(faithfulness["mode"]) == list(study.MODES)
    assert faithfulness[["deletion_auc", "insertion_auc", "pgd_success"]].stack().between(0, 1).all()
    for curve, prob in zip(faithfulness["deletion_curve"], faithfulness["mean_image_prob"]):
        assert len(curve) == 5 and curve[-1] == pytest.approx(prob, abs=1e-12)
    assert faithfulness["pgd_epsilon"].iloc[0] == pytest.approx(100 * math.sqrt(16 * 16 * 3 / 150528))
    assert all(len(steps) == 2 for steps in faithfulness["pgd_success_by_step"])

    agreement, transfer = pullback_pair(job, paths[0], paths[1], 0, block | {"units": 2}, ["act2"])
    to_table(agreement, PULLBACK_AGREEMENT)
    assert set(agreement["site"]) <= {"logit", "act2"} and (agreement["seed_b"] == 1).all()
    assert agreement["cos_mean"].between(-1, 1).all()
    to_table(transfer, PULLBACK_TRANSFER)
    # both directions, every mode, the same images and targets
    assert sorted(zip(transfer["seed_source"], transfer["seed_other"], transfer["mode"])) == sorted(
        (a, b, mode) for a, b in ((0, 1), (1, 0)) for mode in study.MODES
    )
    assert (transfer["images"] == 4).all() and transfer["transfer_already"].nunique() <= 2
    columns = ["source_success", "transfer_success", "transfer_target_prob", "transfer_target_prob_before"]
    assert transfer[columns].stack().between(0, 1).all()
    from intertwine.workflow.stages.pullback.figures import pullback_transfer

    assert len(pullback_transfer(transfer).axes) == 2
    assert transfer["transfer_prob_gain"].to_numpy() == pytest.approx(
        (transfer["transfer_target_prob"] - transfer["transfer_target_prob_before"]).to_numpy()
    )
    # the per-step curve ends at the final success (the last step's images are the moved ones)
    for curve, final in zip(transfer["transfer_success_by_step"], transfer["transfer_success"]):
        assert len(curve) == transfer["pgd_steps"].iloc[0] and curve[-1] == final
    assert transfer["transfer_success_area"].to_numpy() == pytest.approx(
        [sum(c) / len(c) for c in transfer["transfer_success_by_step"]]
    )

    arrays = pullback_images(job, paths[0], {"grid_images": 1, "pgd": {"steps": 1}, "probe_images": 8})
    assert len(arrays["images"]) == 10 and set(arrays["attributions"]) == set(study.MODES)
    assert len(arrays["pgd_images"]) == 10 and (arrays["pgd_targets"] != arrays["pgd_labels"]).all()


def test_a_temperature_sweep_adds_soft_rows_and_its_figure(tmp_path, tiny_shapes_dir):
    from intertwine.workflow.stages.pullback.figures import pullback_temperature
    from intertwine.workflow.job import Job
    from intertwine.workflow.stages.pullback.job import pullback_member, pullback_pair
    from intertwine.workflow.stages.pullback.tables import (
        PULLBACK_AGREEMENT,
        PULLBACK_FAITHFULNESS,
        PULLBACK_SYMMETRY,
        PULLBACK_TRANSFER,
    )
    from intertwine.workflow.tables import to_table

    paths = [_checkpoint(tmp_path / f"seed{s}.pt", MYRTLE, "myrtle", s) for s in range(2)]
    job = Job("cpu", tiny_shapes_dir, 0, lambda message: None)
    block = {
        "images": 2,
        "probe_images": 4,
        "spreads": [1.0],
        "deletion_steps": 1,
        "pgd": {"steps": 1},
        "sweep": [0.1, 0.3],  # 0.3, the stage's own T, is not measured twice
    }
    symmetry, faithfulness = pullback_member(job, paths[0], block)
    agreement, transfer = pullback_pair(job, paths[0], paths[1], 0, block | {"units": 1}, ["act2"])
    for table, schema in (
        (symmetry, PULLBACK_SYMMETRY),
        (faithfulness, PULLBACK_FAITHFULNESS),
        (agreement, PULLBACK_AGREEMENT),
        (transfer, PULLBACK_TRANSFER),
    ):
        to_table(table, schema)  # one row per key: the temperature is a key
        soft = table[table["mode"] != "gradient"]
        assert sorted(set(soft["temperature"])) == [0.1, 0.3]
        assert set(table.loc[table["mode"] == "gradient", "temperature"]) == {0.3}  # measured once
        assert (table["sweep"] == (table["temperature"] != 0.3)).all()
    grelu = symmetry[symmetry["group"] == "grelu"]
    for temperature, rows in grelu.groupby("temperature"):  # per-neuron T is invariant at every T
        assert (rows.loc[rows["mode"] == "per_neuron", "cos_min"] > EXACT).all(), temperature
    # the summary reads the stage's own temperature only
    summary = stage_study.summarize(symmetry, agreement, faithfulness, transfer)
    alone = stage_study.summarize(*(t[~t["sweep"]] for t in (symmetry, agreement, faithfulness, transfer)))
    pd.testing.assert_frame_equal(summary, alone)
    assert summary["measure"].str.startswith("PGD transfer across seeds (ours)").sum() == 4
    fig = pullback_temperature(symmetry, agreement, faithfulness)
    panels = [ax for ax in fig.axes if ax.axison]  # five panels, the legend in a sixth cell
    assert len(panels) == 5 and len(panels[2].lines) == 3  # gradient line, global and per-neuron T


def test_transfer_measures_on_known_logits():
    """Two images, target 1 then 0: the source reaches both; the other member reaches the first
    only, its target probability and margin change by what the logits say."""
    targets = torch.tensor([1, 0])
    source_after = torch.tensor([[0.0, 5.0, 0.0], [5.0, 0.0, 0.0]])
    other_before = torch.tensor([[2.0, 0.0, 0.0], [0.0, 2.0, 0.0]])
    other_after = torch.tensor([[0.0, 3.0, 1.0], [1.0, 2.0, 0.0]])
    got = pgd.transfer_measures(source_after, other_before, other_after, targets)
    assert got["images"] == 2 and got["source_success"] == 1.0
    assert got["transfer_success"] == 0.5 and got["transfer_already"] == 0.0
    before = [other_before[0].softmax(0)[1], other_before[1].softmax(0)[0]]
    after = [other_after[0].softmax(0)[1], other_after[1].softmax(0)[0]]
    assert got["transfer_target_prob_before"] == pytest.approx(float(sum(before)) / 2)
    assert got["transfer_prob_gain"] == pytest.approx(float(sum(after) - sum(before)) / 2)
    # margins: image 0 from -2 to 2 (+4), image 1 from -2 to -1 (+1)
    assert got["transfer_margin_gain"] == pytest.approx(2.5)
    with pytest.raises(ValueError, match="expected three"):
        pgd.transfer_measures(source_after, other_before[:1], other_after, targets)
    with pytest.raises(ValueError, match="1 targets for 2 images"):
        pgd.transfer_measures(source_after, other_before, other_after, targets[:1])


def test_transfer_curve_first_step_and_area():
    got = pgd.transfer_curve([0.25, 0.5, 1.0, 1.0])
    assert got == {
        "transfer_success_by_step": [0.25, 0.5, 1.0, 1.0],
        "transfer_success_first_step": 0.25,
        "transfer_success_area": 0.6875,
    }
    # two modes that both saturate at the end are told apart by the curve
    assert (
        pgd.transfer_curve([0.1, 1.0])["transfer_success_area"]
        < pgd.transfer_curve([0.6, 1.0])["transfer_success_area"]
    )
    with pytest.raises(ValueError, match="no step"):
        pgd.transfer_curve([])


def test_the_summary_reports_transfer_per_mode():
    symmetry = pd.DataFrame(
        [{"variant": "m", "scale_spread": 0.0, "mode": mode, "cos_min": 1.0} for mode in study.MODES]
    )
    agreement = pd.DataFrame(columns=["variant", "site", "mode", "cos_mean"])
    faithfulness = pd.DataFrame(
        [
            {"variant": "m", "mode": mode, "deletion_auc": 0.1, "insertion_auc": 0.4, "pgd_success": 1.0}
            for mode in study.MODES
        ]
    )
    transfer = pd.DataFrame(
        [
            {"variant": "m", "mode": mode, "transfer_success": value, "transfer_prob_gain": value / 2}
            for mode, values in zip(study.MODES, ([0.1, 0.3], [0.5, 0.7], [0.6, 0.6]))
            for value in values
        ]
    )
    summary = stage_study.summarize(symmetry, agreement, faithfulness, transfer).set_index("measure")
    row = summary.loc["PGD transfer across seeds (ours): other member predicts the target"]
    assert row[list(study.MODES)].tolist() == pytest.approx([0.2, 0.6, 0.6])
    gain = summary.loc["PGD transfer across seeds (ours): other member's target probability gain"]
    assert gain["gradient"] == pytest.approx(0.1)
    # a table written before the per-step curve: its rows are left out, not an error
    assert "PGD transfer across seeds (ours): the same, mean over the steps" not in summary.index
    assert "PGD transfer across seeds (ours): other member predicts the target" not in set(
        stage_study.summarize(symmetry, agreement, faithfulness)["measure"]
    )


def test_gate_patterns_name_every_relu_call_and_leave_the_model_as_it_was():
    from torch import nn

    from intertwine.gates import gate_patterns

    torch.manual_seed(0)

    class Reused(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.bn = nn.BatchNorm2d(4)
            self.relu = nn.ReLU()
            self.pool = nn.MaxPool2d(2)
            self.head = nn.Linear(4 * 4 * 4, 3)

        def forward(self, x):
            z = self.relu(self.bn(self.conv(x)))
            z = self.pool(self.relu(z - 0.1))  # the module called twice
            return self.head(torch.relu(z.flatten(1)))  # a functional call

    model = Reused().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(5, 3, 8, 8)
    patterns = gate_patterns(model, x, batch_size=2)
    assert list(patterns) == ["relu", "relu@2", "relu()"]  # max-pool left out
    assert patterns["relu"].shape == (5, 4, 8, 8) and patterns["relu()"].shape == (5, 64)
    assert patterns["relu"].dtype == torch.bool
    model.eval()
    z = model.bn(model.conv(x))
    assert torch.equal(patterns["relu"], z > 0)
    assert torch.equal(patterns["relu@2"], torch.relu(z) - 0.1 > 0)
    assert model.training is False and all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_pattern_agreement_chance_and_settling_rows():
    a = torch.tensor([[True, False], [True, True]])
    b = torch.tensor([[True, True], [False, True]])
    assert gates.pattern_agreement(a, a) == 1.0 and gates.pattern_agreement(a, b) == 0.5
    # unit 0: p_a 1, p_b 0.5 -> 0.5; unit 1: p_a 0.5, p_b 1 -> 0.5
    assert gates.chance_agreement(a, b) == pytest.approx(0.5)
    assert gates.chance_agreement(a, ~a) < gates.pattern_agreement(a, a)
    with pytest.raises(ValueError, match="shapes"):
        gates.pattern_agreement(a, b[:1])
    rows = gates.settling_rows([(0, {"s": b}), (1, {"s": a})])
    assert [(r["epoch"], r["agreement"], r["final_epoch"], r["units"]) for r in rows] == [
        (0, 0.5, 1, 2),
        (1, 1.0, 1, 2),
    ]
    with pytest.raises(ValueError, match="changed its ReLU calls"):
        gates.settling_rows([(0, {"t": b}), (1, {"s": a})])


def test_settling_verdict_values_take_the_middle_epoch_per_member():
    rows = [
        {
            "variant": "m",
            "seed": seed,
            "epoch": e,
            "site": site,
            "agreement": a,
            "chance": 0.5,
            "final_epoch": 4,
        }
        for seed in (0, 1)
        for e, a in zip(range(5), (0.6, 0.8, 0.9, 0.95, 1.0))
        for site in ("s", "t")
    ]
    values = stage_study.settling_verdict_values(pd.DataFrame(rows))
    assert list(values["epoch"]) == [2, 2] and list(values["agreement"]) == [0.9, 0.9]
    assert list(values["initial"]) == [0.6, 0.6]


def test_path_correlations_are_the_pearson_correlation_of_the_full_path_tensors():
    """The factorised correlation equals numpy's Pearson correlation over the explicit rank-1
    tensors (every path of a two-site pattern, one per pair of units); a field against itself
    is 1, against a field whose site patterns are complemented it is negative; a site with no
    open gate gives NaN."""
    generator = torch.Generator().manual_seed(0)
    a = {
        "s": torch.rand(5, 3, 2, generator=generator) > 0.4,
        "t": torch.rand(5, 4, generator=generator) > 0.5,
    }
    b = {
        "s": torch.rand(5, 3, 2, generator=generator) > 0.4,
        "t": torch.rand(5, 4, generator=generator) > 0.5,
    }
    a["s"][:, 0, 0] = b["s"][:, 0, 0] = True  # no image's site is all closed
    a["t"][:, 0] = b["t"][:, 0] = True
    a["t"][:, 1] = b["t"][:, 1] = False  # nor all open
    rho = gates.path_correlations(a, b)
    for image in range(5):
        tensor_a = np.outer(a["s"][image].flatten().double(), a["t"][image].double()).ravel()
        tensor_b = np.outer(b["s"][image].flatten().double(), b["t"][image].double()).ravel()
        assert rho[image].item() == pytest.approx(np.corrcoef(tensor_a, tensor_b)[0, 1], abs=1e-12)
    assert torch.allclose(gates.path_correlations(a, a), torch.ones(5, dtype=torch.float64))
    flipped = {site: ~pattern for site, pattern in a.items()}
    assert (gates.path_correlations(a, flipped) < 0).all()
    closed = {"s": torch.zeros_like(a["s"]), "t": a["t"]}
    assert gates.path_correlations(closed, a).isnan().all()
    with pytest.raises(ValueError, match="call sites"):
        gates.path_correlations({"s": a["s"]}, a)


def test_settling_rows_carry_the_epochs_path_correlation_and_the_early_epoch_decides():
    generator = torch.Generator().manual_seed(1)
    final = {
        "s": torch.rand(40, 6, generator=generator) > 0.5,
        "t": torch.rand(40, 5, generator=generator) > 0.5,
    }
    noisy = {k: v ^ (torch.rand(v.shape, generator=generator) > 0.9) for k, v in final.items()}
    fresh = {k: torch.rand(v.shape, generator=generator) > 0.5 for k, v in final.items()}
    rows = gates.settling_rows([(0, fresh), (1, noisy), (2, final)])
    by_epoch = {r["epoch"]: r for r in rows}
    rho = gates.path_correlations(noisy, final)
    assert by_epoch[1]["path_rho_mean"] == pytest.approx(torch.nan_to_num(rho).mean().item())
    assert by_epoch[1]["path_rho_positive"] == (torch.nan_to_num(rho) > 0).double().mean().item()
    assert (
        by_epoch[2]["path_rho_low"] == pytest.approx(1.0)
        and by_epoch[1]["path_rho_low"] > by_epoch[0]["path_rho_low"]
    )
    table = pd.DataFrame(rows).assign(variant="m", seed=0)
    values = stage_study.settling_verdict_values(table)
    assert values.loc[0, "early_epoch"] == 1 and values.loc[0, "final_epoch"] == 2
    assert values.loc[0, "path_rho_low"] == by_epoch[1]["path_rho_low"]
    without = stage_study.settling_verdict_values(table.drop(columns=["path_rho_low"]))
    assert np.isnan(without.loc[0, "path_rho_low"])


def test_the_settling_table_reads_the_members_records(tmp_path, tiny_shapes_dir):
    """Hypothesis 1's table and figure from checkpoints that recorded gate patterns; a member that
    did not is refused by name."""
    from intertwine.workflow.stages.pullback.figures import pullback_settling as figure
    from intertwine.workflow.job import Job
    from intertwine.workflow.stages.pullback.job import pullback_settling
    from intertwine.workflow.stages.zoo.job import train_member
    from intertwine.workflow.stages.pullback.tables import PULLBACK_SETTLING
    from intertwine.workflow.tables import to_table
    from intertwine.workflow.zoo import save_checkpoint

    torch.set_num_threads(1)
    spec, training = {"arch": "myrtle", "width_multiplier": 0.125}, {"epochs": 2, "batch_size": 32}
    paths = []
    for seed in range(2):
        checkpoint, _ = train_member(
            Job("cpu", tiny_shapes_dir), "m", seed, spec, training | {"gate_probe_images": 8}
        )
        save_checkpoint(checkpoint, tmp_path / f"seed{seed}.pt")
        paths.append(str(tmp_path / f"seed{seed}.pt"))
    table = pullback_settling(paths)
    to_table(table, PULLBACK_SETTLING)
    assert sorted(set(table["seed"])) == [0, 1] and set(table["epoch"]) == {0, 1, 2}
    assert table["kept_epoch"].isin([1, 2]).all() and (table["probe_images"] == 8).all()
    assert len([ax for ax in figure(table).axes if ax.get_label() != "<colorbar>"]) == 1
    plain, _ = train_member(Job("cpu", tiny_shapes_dir), "m", 0, spec, training | {"epochs": 1})
    save_checkpoint(plain, tmp_path / "plain.pt")
    with pytest.raises(ValueError, match="no gate record.*gate_probe_images"):
        pullback_settling([str(tmp_path / "plain.pt")])


def _old_procrustes_matching(X, Y):
    # The accumulator's matching before measures.match_channels: Hungarian on M / (|x_i| |y_j|).
    from scipy.optimize import linear_sum_assignment

    xm = X.transpose(0, 1).reshape(X.shape[1], -1).double()
    ym = Y.transpose(0, 1).reshape(Y.shape[1], -1).double()
    x_sq, y_sq = xm.square().sum(1), ym.square().sum(1)
    nx, ny = torch.where(x_sq > 0, x_sq, 1.0).sqrt(), torch.where(y_sq > 0, y_sq, 1.0).sqrt()
    return linear_sum_assignment((xm @ ym.T / (nx[:, None] * ny[None, :])).numpy(), maximize=True)[1]


@pytest.mark.parametrize("seed", range(20))
def test_one_channel_matching_for_pullbacks_and_procrustes(seed):
    # matched_units (was stitching.match_grelu's matching) and ProcrustesAccumulator (its own copy)
    # call measures.match_channels: the same assignment as both former copies, dead channels included.
    from intertwine.measures import ProcrustesAccumulator, match_channels
    from intertwine.stitching import match_grelu

    g = torch.Generator().manual_seed(seed)
    c = 3 + seed % 6
    a = torch.randn(40, c, 3, 3, generator=g).relu()
    b = (a[:, torch.randperm(c, generator=g)] + 0.8 * torch.randn(40, c, 3, 3, generator=g)).relu()
    if seed % 3 == 0:
        a[:, 0] = 0
        b[:, c - 1] = 0
    old = match_grelu(b, a)[0]
    perm, correlation = study.matched_units(a, b)
    assert torch.equal(perm, old)
    assert perm.tolist() == _old_procrustes_matching(a, b).tolist()
    accumulator = ProcrustesAccumulator()
    for start in range(0, 40, 16):
        accumulator.update(a[start : start + 16], b[start : start + 16])
    _, rows, cols, _, _ = accumulator._matching()
    assert rows.tolist() == list(range(c)) and cols.tolist() == perm.tolist()
    xm, ym = (t.transpose(0, 1).reshape(c, -1).double() for t in (a, b))
    assert torch.equal(match_channels(xm @ ym.T, xm.square().sum(1), ym.square().sum(1)), perm)
    with pytest.raises(ValueError, match="same number of channels"):
        match_channels(torch.zeros(2, 3), torch.ones(2), torch.ones(3))
