"""The claims scorecard against known answers: each claim fed the paper's own numbers (laid out in the
table's shape, with the paper's unit count) reads reproduced, the same tables with the effect
reversed read not reproduced, one unit reads inconclusive; the statistics against scipy; the pair
drawing of the shipped configs has no member in two pairs."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from intertwine.workflow.stages.gated import study as gated
from intertwine.claims import (
    CLAIMS,
    VERDICTS,
    Comparison,
    Estimate,
    as_rst,
    describe,
    headline,
    holm,
    judge,
    scorecard,
)
from intertwine.models import normalize_spec
from intertwine.plan import Plan, draw_pairs

sys.path.insert(0, str(Path(__file__).parent))
from test_plan import load

#: The zoo variants the known answers below are laid out for, by the names their tables use.
VARIANTS = {
    "myrtle": {"arch": "myrtle"},
    "myrtle_cw": {"arch": "myrtle", "constant_width": 512},
    "myrtle_nobn": {"arch": "myrtle", "batch_norm": False},
    "myrtle_sigmoid_nobn": {"arch": "myrtle", "activation": "sigmoid", "batch_norm": False},
    "resnet20": {"arch": "resnet20"},
    "resnet20_nores": {"arch": "resnet20", "residual_activation": False},
    "resnet20_w4": {"arch": "resnet20", "width_multiplier": 4.0},
    "resnet18": {"arch": "resnet18"},
    "leaky0.1": {"arch": "resnet20", "activation": "leaky_relu", "negative_slope": 0.1},
    "leaky0.5": {"arch": "resnet20", "activation": "leaky_relu", "negative_slope": 0.5},
}

SETTINGS = {
    "myrtle_variants": ["myrtle"],
    "residual_variants": ["resnet20"],
    "relu_similarity_variants": ["myrtle", "myrtle_cw", "resnet20"],
    "residual_activation": {"resnet20": True, "resnet20_nores": False},
    "leaky_slopes": {"resnet20": 0.0, "leaky0.1": 0.1, "leaky0.5": 0.5},
    "batch_norm": {"myrtle": True, "myrtle_nobn": False},
    "rotation_variants": ["myrtle_nobn"],
    "rotation_activation": {"myrtle_nobn": "relu", "myrtle_sigmoid_nobn": "sigmoid"},
    "select_on": "val",
    "stitching_init": "random",
    "stitching_optimizer": "sgd",
    "stitching_momentum": 0.0,
    "stitching_permutation_update": "paper",
    "stitching_batch_norm_refresh": "grelu",
    "connectivity_barrier": "endpoints_mean",
    "connectivity_families": {"resnet20": "resnet20", "resnet20_w4": "resnet20", "myrtle": "myrtle"},
    "variant_specs": {name: normalize_spec(spec) for name, spec in VARIANTS.items()},
    "scale": {"zoo_epochs": 50, "zoo": "zoo: 50 of the paper's 50 epochs"},
}


def exact(mean: float, sd: float, n: int, seed: int) -> np.ndarray:
    """``n`` values with exactly this mean and sample standard deviation (the paper's summary)."""
    if n == 1:
        return np.array([mean])
    z = np.random.default_rng(seed).standard_normal(n)
    return mean + sd * (z - z.mean()) / z.std(ddof=1)


def verdict(claim_id, tables, settings=SETTINGS):
    card = scorecard(tables, settings, gated_findings=None)
    return card.set_index("claim").loc[claim_id, "verdict"]


def disjoint(pair: int) -> tuple[int, int]:
    return 2 * pair, 2 * pair + 1


# --- statistics --------------------------------------------------------------------------------


def test_interval_matches_the_t_distribution():
    estimate = Estimate.of([1.0, 2.0, 3.0])
    assert estimate.mean == pytest.approx(2.0)
    assert estimate.half_width == pytest.approx(stats.t.ppf(0.975, 2) / np.sqrt(3))
    assert estimate.p == pytest.approx(stats.ttest_1samp([1.0, 2.0, 3.0], 0).pvalue)
    assert Estimate.of([1.0]).side() == 0 and Estimate.of([5, 6, 7]).side() == 1


def test_welch_interval_matches_scipy():
    rng = np.random.default_rng(0)
    a, b = rng.normal(1.0, 0.5, 7), rng.normal(0.4, 1.5, 11)
    result = stats.ttest_ind(a, b, equal_var=False)
    low, high = result.confidence_interval(0.95)
    estimate = Estimate.difference(a, b)
    assert estimate.mean - estimate.half_width == pytest.approx(low)
    assert estimate.mean + estimate.half_width == pytest.approx(high)
    assert estimate.p == pytest.approx(result.pvalue)


def test_holm_matches_its_definition():
    # p sorted 0.01, 0.02, 0.04: adjusted 3 x 0.01, max(0.03, 2 x 0.02), max(0.04, 0.04)
    assert holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert holm([0.3, 0.9]) == pytest.approx([0.6, 0.9])


def test_shared_members_widen_the_interval():
    """Pairs that share members are correlated units: the dyadic variance counts them so; pairs
    with no member in common give the ordinary t-interval."""
    rng = np.random.default_rng(1)
    effect = {m: rng.normal(0, 1) for m in range(6)}
    pairs = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3), (0, 4), (0, 5)]
    values = [effect[a] + effect[b] + 0.1 * rng.normal() for a, b in pairs]
    independent = Estimate.of(values)
    clustered = Estimate.of(values, members=pairs)
    assert clustered.se >= independent.se and clustered.df < independent.df
    separate = [(2 * i, 2 * i + 1) for i in range(len(values))]
    assert Estimate.of(values, members=separate) == independent


def test_judge_requires_every_comparison_and_allows_named_exceptions():
    strong, against, weak = (Estimate.of(exact(m, 0.1, 10, 0)) for m in (1.0, -1.0, 0.01))
    assert judge([Comparison("a", strong, +1), Comparison("b", strong, +1)]).verdict == "reproduced"
    assert judge([Comparison("a", strong, +1), Comparison("b", weak, +1)]).verdict == "inconclusive"
    assert judge([Comparison("a", strong, +1), Comparison("b", against, +1)]).verdict == "not reproduced"
    one_off = [Comparison("a", strong, +1, group="g"), Comparison("b", against, +1, group="g")]
    assert judge(one_off, {"g": 1}).verdict == "reproduced"
    # A comparison that can only refute: decided against refutes, undecided leaves the rest to decide.
    assert (
        judge([Comparison("a", strong, +1), Comparison("c", weak, -1, required=False)]).verdict
        == "reproduced"
    )
    assert judge([Comparison("a", strong, +1), Comparison("c", strong, -1, required=False)]).verdict == (
        "not reproduced"
    )


# --- C1: rotation penalty -----------------------------------------------------------------------


def rotation(orthogonal: dict, grelu: float, trials=10, sd=0.02, variant="myrtle_nobn"):
    rows = []
    for i, (site, mean) in enumerate(orthogonal.items()):
        for group, m in (("orthogonal", mean), ("grelu", grelu)):
            for trial, p in enumerate(exact(m, sd, trials, i)):
                rows.append(
                    {
                        "variant": variant,
                        "seed": 0,
                        "site": site,
                        "group": group,
                        "trial": trial,
                        "penalty": p,
                    }
                )
    return {"rotation": pd.DataFrame(rows)}


def test_c1_rotation_penalty():
    sites = {"act1": 0.4, "act2": 0.3, "act3": 0.2, "act4": 0.15}
    assert verdict("C1", rotation(sites, 0.01)) == "reproduced"
    # One layer where orthogonal elements cost less: not "at every layer".
    assert verdict("C1", rotation(sites | {"act4": -0.1}, 0.01)) == "not reproduced"
    assert verdict("C1", rotation(sites, 0.01, trials=1)) == "inconclusive"
    # A sigmoid network, for which G_ReLU is no symmetry, is not part of the claim.
    assert verdict("C1", rotation(sites, 0.5, variant="myrtle_sigmoid_nobn")) == "not run"


# --- C2, C3, C7: stitching ------------------------------------------------------------------------


def stitching(methods: dict, pairs=32, sd=0.015, variant="myrtle", sites=None, inside=()):
    """Stitching rows: ``methods`` {method: [mean per site]} over member-disjoint pairs."""
    sites = sites or ["act1", "act2", "act3", "act4"]
    rows = []
    for method, means in methods.items():
        for s, (site, mean) in enumerate(zip(sites, means)):
            for pair, p in enumerate(exact(mean, sd, pairs, 7 * s + len(method))):
                a, b = disjoint(pair)
                rows.append(
                    {
                        "variant": variant,
                        "pair": pair,
                        "seed_a": a,
                        "seed_b": b,
                        "site": site,
                        "inside_residual": site in inside,
                        "method": method,
                        "penalty": p,
                    }
                )
    return pd.DataFrame(rows)


# The specification's reading of Fig. 1 (Myrtle, 32 pairs): full about 0, G_ReLU below 10 points at
# all but one layer (rising to the third activation layer, falling at the last), rank 1 above it.
FIG1 = {
    "full": [0.005, 0.008, 0.01, 0.006],
    "grelu": [0.03, 0.06, 0.12, 0.05],
    "rank1": [0.25, 0.3, 0.35, 0.28],
}


def test_c2_reads_figure_1():
    assert verdict("C2", {"stitching": stitching(FIG1)}) == "reproduced"
    reversed_ = FIG1 | {"grelu": FIG1["rank1"], "rank1": FIG1["grelu"]}  # G_ReLU above rank 1
    assert verdict("C2", {"stitching": stitching(reversed_)}) == "not reproduced"
    costly = FIG1 | {"grelu": [0.15, 0.18, 0.2, 0.16]}  # above 10 points at every layer
    assert verdict("C2", {"stitching": stitching(costly)}) == "not reproduced"
    assert verdict("C2", {"stitching": stitching(FIG1, pairs=1)}) == "inconclusive"


def test_c2_can_decide_with_the_default_runs_pairs():
    """Three member-disjoint pairs (the default run) are enough to decide a clear case."""
    assert verdict("C2", {"stitching": stitching(FIG1, pairs=3, sd=0.005)}) == "reproduced"


RESNET_SITES = ["act", "layer1.0.act1", "layer1.0.act2", "layer2.0.act1", "layer3.2.act2"]
RESNET_INSIDE = ("layer1.0.act1", "layer2.0.act1")


def resnet(inside_gap: float, pairs=16, methods=("full", "rank1", "grelu"), variant="resnet20"):
    base = {"full": 0.01, "rank1": 0.3, "grelu": 0.06}
    return stitching(
        {m: [base[m] + (inside_gap if s in RESNET_INSIDE else 0) for s in RESNET_SITES] for m in methods},
        pairs=pairs,
        variant=variant,
        sites=RESNET_SITES,
        inside=RESNET_INSIDE,
    )


def test_c3_residual_sites_cost_more_for_every_method():
    assert verdict("C3", {"stitching": resnet(0.1)}) == "reproduced"
    assert verdict("C3", {"stitching": resnet(-0.05)}) == "not reproduced"
    assert verdict("C3", {"stitching": resnet(0.1, pairs=1)}) == "inconclusive"
    # The units are pairs: 16 pairs x 5 sites are 16 units, not 80.
    card = scorecard({"stitching": resnet(0.1)}, SETTINGS, None).set_index("claim")
    assert card.loc["C3", "units"] == "16 pairs per variant"


def test_c7_leaky_relu_penalties_flat():
    def sweep(means, pairs=16):
        return {
            "stitching": pd.concat(
                [
                    resnet(0.0, pairs, ("grelu",), variant=v).assign(penalty=lambda t, m=m: t["penalty"] + m)
                    for v, m in means.items()
                ]
            )
        }

    assert verdict("C7", sweep({"resnet20": 0.0, "leaky0.1": 0.01, "leaky0.5": 0.015})) == "reproduced"
    assert verdict("C7", sweep({"resnet20": 0.0, "leaky0.1": 0.1, "leaky0.5": 0.25})) == "not reproduced"
    assert verdict("C7", sweep({"resnet20": 0.0, "leaky0.5": 0.01}, pairs=1)) == "inconclusive"
    assert verdict("C7", sweep({"resnet20": 0.0})) == "not run"


# --- C4, C5: similarity ---------------------------------------------------------------------------

# Godfrey et al. Table 2 (Myrtle, 32 pairs, layers 3/6/10/14) and Table 4 (constant-width Myrtle,
# layer 10). Our copy of the tables has means only: the spread between pairs is taken as 0.02.
TABLE2 = {
    "grelu_procrustes": [0.621, 0.511, 0.443, 0.490],
    "orthogonal_procrustes": [0.772, 0.574, 0.509, 0.583],
}
TABLE4 = {"grelu_procrustes": [0.569], "orthogonal_procrustes": [0.541]}


def procrustes(variant, values, pairs, sd=0.02, first_member=0, sites=None):
    sites = sites or [f"layer{k}" for k in (3, 6, 10, 14)][-len(next(iter(values.values()))) :]
    rows = []
    for measure, means in values.items():
        for s, (site, mean) in enumerate(zip(sites, means)):
            for pair, v in enumerate(exact(mean, sd, pairs, 11 * s + len(measure))):
                a, b = disjoint(pair)
                rows.append(
                    {
                        "variant": variant,
                        "pair": pair,
                        "seed_a": first_member + a,
                        "seed_b": first_member + b,
                        "site_a": site,
                        "site_b": site,
                        "measure": measure,
                        "value": v,
                    }
                )
    return pd.DataFrame(rows)


def swap(values):
    return {
        "grelu_procrustes": values["orthogonal_procrustes"],
        "orthogonal_procrustes": values["grelu_procrustes"],
    }


def test_c4_reads_tables_2_and_4():
    paper = pd.concat([procrustes("myrtle", TABLE2, 32), procrustes("myrtle_cw", TABLE4, 4)])
    assert verdict("C4", {"similarity": paper}) == "reproduced"
    # Table 4 with as many pairs as Table 2: its one reversed site does not overturn "largely".
    assert verdict(
        "C4",
        {"similarity": pd.concat([procrustes("myrtle", TABLE2, 32), procrustes("myrtle_cw", TABLE4, 32)])},
    ) == ("reproduced")
    reversed_ = pd.concat([procrustes("myrtle", swap(TABLE2), 32), procrustes("myrtle_cw", swap(TABLE4), 4)])
    assert verdict("C4", {"similarity": reversed_}) == "not reproduced"
    assert verdict("C4", {"similarity": procrustes("myrtle", TABLE2, 1)}) == "inconclusive"


def test_c4_depth_pattern_is_tested():
    """G_ReLU below orthogonal everywhere, but with the opposite depth pattern: not "otherwise
    patterns largely follow those of orthogonal Procrustes"."""
    opposite = {
        "grelu_procrustes": [0.40, 0.45, 0.50, 0.55],
        "orthogonal_procrustes": [0.80, 0.70, 0.65, 0.60],
    }
    assert verdict("C4", {"similarity": procrustes("myrtle", opposite, 16, sd=0.01)}) == "not reproduced"


def cka(grelu_diagonal, linear_diagonal, pairs=16, sd=0.01):
    rows = []
    sites = [f"act{i}" for i in range(1, len(grelu_diagonal) + 1)]
    for measure, diagonal in (("grelu_cka", grelu_diagonal), ("linear_cka", linear_diagonal)):
        for i, a in enumerate(sites):
            for j, b in enumerate(sites):
                mean = diagonal[i] if i == j else min(diagonal[i], diagonal[j]) - 0.2
                for pair, v in enumerate(exact(mean, sd, pairs, 5 * i + j)):
                    x, y = disjoint(pair)
                    rows.append(
                        {
                            "variant": "myrtle",
                            "pair": pair,
                            "seed_a": x,
                            "seed_b": y,
                            "site_a": a,
                            "site_b": b,
                            "measure": measure,
                            "value": v,
                        }
                    )
    return {"similarity": pd.DataFrame(rows)}


def test_c5_diagonal_decays_with_depth():
    decays, flat = [0.9, 0.75, 0.6, 0.45], [0.95, 0.93, 0.9, 0.88]
    assert verdict("C5", cka(decays, flat)) == "reproduced"
    assert verdict("C5", cka(flat, decays)) == "not reproduced"
    assert verdict("C5", cka(decays, flat, pairs=1)) == "inconclusive"
    # A sharp diagonal that does not decay along depth is not the sentence's claim.
    assert verdict("C5", cka([0.9, 0.9, 0.9, 0.9], [0.95, 0.95, 0.95, 0.95])) != "reproduced"


# --- C6: dissection ------------------------------------------------------------------------------


def dissection(fall_with, fall_without, seeds=6, rotations=4, sd=0.02):
    rows = []
    for variant, fall in (("resnet20", fall_with), ("resnet20_nores", fall_without)):
        for seed in range(seeds):
            for s, site in enumerate(("layer2", "layer3")):
                base = 0.5 + exact(0, 0.1, seeds, s)[seed]  # members differ a lot between them
                for alpha in (0.0, 0.5, 1.0):
                    for rotation_seed in range(1 if alpha == 0 else rotations):  # alpha 0 is one basis
                        noise = 0 if alpha == 0 else exact(0, sd, rotations, seed)[rotation_seed]
                        rows.append(
                            {
                                "variant": variant,
                                "seed": seed,
                                "site": site,
                                "alpha": alpha,
                                "rotation_seed": rotation_seed,
                                "fraction_interpretable": base - fall * alpha + noise,
                            }
                        )
    return {"dissection": pd.DataFrame(rows)}


def test_c6_dissection_falls_only_with_residual_activation():
    assert verdict("C6", dissection(0.3, 0.0)) == "reproduced"
    # Without the activation the fraction falls by 15 points at every seed and site: refuted,
    # although members differ by far more than that (the comparison is paired within a member).
    assert verdict("C6", dissection(0.3, 0.15)) == "not reproduced"
    assert verdict("C6", dissection(-0.2, 0.0)) == "not reproduced"
    assert verdict("C6", dissection(0.3, 0.0, seeds=1)) == "inconclusive"
    card = scorecard(dissection(0.3, 0.0), SETTINGS, None).set_index("claim")
    assert card.loc["C6", "units"] == "resnet20 6 members, resnet20_nores 6 members"


def test_c6_fall_is_the_least_squares_trend_over_every_alpha():
    from intertwine.workflow.stages.dissection.claims import _fall_along

    alphas = [0.0, 0.25, 0.5, 0.75, 1.0]
    linear = pd.DataFrame([[0.4 - 0.3 * a for a in alphas], [0.2 + 0.1 * a for a in alphas]], columns=alphas)
    assert _fall_along(linear).tolist() == pytest.approx([0.3, -0.1], abs=1e-12)
    # Two alphas: the difference of the endpoints; a bump in the middle moves the line, not the ends.
    ends = pd.DataFrame([[0.5, 0.2]], columns=[0.0, 1.0])
    assert _fall_along(ends).tolist() == pytest.approx([0.3])
    bump = pd.DataFrame([[0.5, 0.5, 0.9, 0.5, 0.5]], columns=alphas)
    assert _fall_along(bump).tolist() == pytest.approx([0.0], abs=1e-12)
    # A fall beyond alpha 1 (paper.yaml's alphas stop at 1, but a user's may not) scales with the range.
    wide = pd.DataFrame([[0.5, 0.3, 0.1]], columns=[0.0, 1.0, 2.0])
    assert _fall_along(wide).tolist() == pytest.approx([0.4])


# --- T1, P1, D1 -----------------------------------------------------------------------------------


def test_t1_exact_symmetry():
    def table(grelu_change):
        return {
            "symmetry": pd.DataFrame(
                {
                    "group": ["grelu", "grelu", "orthogonal"],
                    "relative_change": [grelu_change, 1e-16, 0.3],
                    "dtype": "float64",
                }
            )
        }

    assert verdict("T1", table(3e-16)) == "reproduced"
    assert verdict("T1", table(1e-3)) == "not reproduced"


def test_p1_is_ours_and_kept_apart():
    rows = [
        {"group": "permutation", "mode": m, "scale_spread": 0.0, "cos_min": 1.0}
        for m in ("gradient", "global")
    ]
    rows += [{"group": "grelu", "mode": "global", "scale_spread": 1.0, "cos_min": 0.7}]
    rows += [{"group": "grelu", "mode": "gradient", "scale_spread": 1.0, "cos_min": 1.0}]
    card = scorecard({"pullback_symmetry": pd.DataFrame(rows)}, SETTINGS, None)
    ours = card["kind"] == "ours"
    assert set(card.loc[ours, "claim"]) == {"L3", "P1"} and ours.iloc[-2:].all()  # ours apart, at the end
    assert (card.loc[~ours, "kind"] == "paper").all()
    assert card.set_index("claim").loc["P1", "verdict"] == "reproduced"
    rows[-1]["cos_min"] = 0.9  # the gradient is not invariant: something is wrong
    assert verdict("P1", {"pullback_symmetry": pd.DataFrame(rows)}) == "not reproduced"
    rst = as_rst(card, set())
    assert rst.index("not claims of the papers") > rst.index("   * - C1")


def settling(agreements_at_middle, rho_early=None, epochs=4, sites=("act1", "act2")):
    """A settling table: per member (one per agreement value), agreement rising linearly from 0.55
    at initialisation to its value at the middle epoch and 1 at the end; the 5 % quantile of the
    path correlation with the final field (``path_rho_low``) at its ``rho_early`` value (default
    0.3) at epoch 1, rising linearly to 1 at the end (half of it at initialisation)."""
    rho_early = [0.3] * len(agreements_at_middle) if rho_early is None else rho_early
    rows = []
    for seed, (middle, rho) in enumerate(zip(agreements_at_middle, rho_early)):
        for epoch in range(epochs + 1):
            half = epochs / 2
            value = (
                0.55 + (middle - 0.55) * epoch / half
                if epoch <= half
                else middle + (1 - middle) * (epoch - half) / half
            )
            low = rho / 2 if epoch == 0 else rho + (1 - rho) * (epoch - 1) / max(epochs - 1, 1)
            for k, site in enumerate(sites):
                rows.append(
                    {
                        "variant": "myrtle",
                        "seed": seed,
                        "epoch": epoch,
                        "site": site,
                        "agreement": value + (0.004 if k else -0.004) * (epoch < epochs),
                        "chance": 0.55,
                        "final_epoch": epochs,
                        "path_rho_low": low,
                        "path_rho_positive": 0.99 if low > 0 else 0.02,
                        "path_rho_mean": min(low + 0.2, 1.0),
                    }
                )
    return {"pullback_settling": pd.DataFrame(rows)}


def test_h1_early_stable_patterns_on_known_answers():
    """Hypothesis 1 on the paper's criterion (no numbers printed: a hypothesis): early gating
    tensors positively correlated with the final ones for almost every image (their 5 % quantile
    above 0) read reproduced, whatever our stricter agreement line says; the effect reversed
    (negative correlation) reads not reproduced; a single member gives no interval."""
    stricter_fails = [0.85, 0.84, 0.86, 0.845]  # below our 0.9: reported, not deciding
    assert verdict("H1", settling(stricter_fails, [0.35, 0.3, 0.4, 0.32])) == "reproduced"
    assert verdict("H1", settling(stricter_fails, [-0.35, -0.3, -0.4, -0.32])) == "not reproduced"
    assert verdict("H1", settling([0.85], [0.35])) == "inconclusive"
    row = (
        scorecard(settling([0.85, 0.86, 0.84], [0.3, 0.35, 0.4]), SETTINGS, None).set_index("claim").loc["H1"]
    )
    assert row["kind"] == "paper" and row["units"] == "3 members"
    assert "Hypothesis 1 (Early emergence of stable excitation patterns)." in row["sentence"]
    assert "path stability" not in row["sentence"] and "largely" not in row["sentence"]
    assert row["ours"].startswith(
        "early epoch 1 of 4: rho(x) with the final gating tensor positive on 99.0 %"
    )
    assert "0.850 against our 0.9 (chance 0.550" in row["ours"]


def test_h1_is_not_run_without_an_early_epoch_or_the_path_columns():
    one_epoch = settling([0.9, 0.9], epochs=1)
    assert verdict("H1", one_epoch) == "not run"
    old = {"pullback_settling": settling([0.9, 0.9])["pullback_settling"].drop(columns=["path_rho_low"])}
    row = scorecard(old, SETTINGS, None).set_index("claim").loc["H1"]
    assert row["verdict"] == "not run" and "retrain" in row["evidence"]


def deq(accuracies, n_test=10_000):
    paper = {(0.25, 0.25, 0.5): 0.5908, (0.6, 0.4, 0.0): 0.5977, (0.8, 0.2, 0.0): 0.5943}
    return {
        "deqntk": pd.DataFrame(
            [
                {
                    "study": "accuracy",
                    "sigma_w2": w,
                    "sigma_u2": u,
                    "sigma_b2": b,
                    "n_test": n_test,
                    "test_acc": acc,
                    "paper_acc": paper[(w, u, b)],
                }
                for (w, u, b), acc in zip(paper, accuracies)
            ]
        )
    }


def test_d1_reads_the_papers_deq_ntk_table():
    assert verdict("D1", deq([0.5908, 0.5977, 0.5943])) == "reproduced"
    assert verdict("D1", deq([0.49, 0.50, 0.51])) == "not reproduced"
    assert verdict("D1", deq([0.5908, 0.5977, 0.5943], n_test=1)) == "inconclusive"
    card = scorecard(deq([0.59, 0.6, 0.59]), SETTINGS, None).set_index("claim")
    assert "checked for the spec" not in " ".join(card.loc["D1"].astype(str))
    # The run's data set is named where the table has it (an MNIST run is not a CIFAR-10 one).
    mnist = {"deqntk": deq([0.986, 0.5, 0.5])["deqntk"].iloc[:1].assign(dataset="mnist", paper_acc=0.986)}
    card = scorecard(mnist, SETTINGS, None).set_index("claim")
    assert (
        card.loc["D1", "verdict"] == "reproduced"
        and "mnist (0.25,0.25,0.5) 98.6 vs 98.60" in card.loc["D1", "ours"]
    )


# --- the gated-networks findings (Tables I and II) --------------------------------------------------

# (data set, table, base): {(family, value input, permuted): (mean, sd, runs)}; Table I's permuted
# rows are the mean of 23 gate permutations, one member each. The paper: 5 runs.
GATED_TABLES = {
    ("CIFAR-10", "I", "c4gap w128"): {
        ("dnn", "x", False): (80.5, 0.4, 5),
        ("dgn", "x", False): (77.4, 0.3, 5),
        ("dgn", "ones", False): (77.5, 0.2, 5),
        ("dlgn", "x", False): (75.4, 0.3, 5),
        ("dlgn", "ones", False): (75.4, 0.2, 5),
        ("dgn", "x", True): (77.3, 0.5, 23),
        ("dgn", "ones", True): (77.9, 0.6, 23),
        ("dlgn", "x", True): (75.9, 0.5, 23),
        ("dlgn", "ones", True): (76.0, 0.5, 23),
    },
    ("CIFAR-100", "I", "c4gap w128"): {
        ("dnn", "x", False): (51.8, 0.4, 5),
        ("dgn", "x", False): (47.4, 0.2, 5),
        ("dgn", "ones", False): (47.3, 0.3, 5),
        ("dlgn", "x", False): (47.4, 0.1, 5),
        ("dlgn", "ones", False): (48.0, 0.2, 5),
        ("dgn", "x", True): (48.4, 0.8, 23),
        ("dgn", "ones", True): (49.2, 0.9, 23),
        ("dlgn", "x", True): (47.5, 1.0, 23),
        ("dlgn", "ones", True): (48.4, 0.9, 23),
    },
    ("CIFAR-10", "II", "vgg16"): {
        ("dnn", "x", False): (93.6, 0.2, 5),
        ("dgn", "x", False): (93.0, 0.1, 5),
        ("dgn", "ones", False): (93.0, 0.1, 5),
        ("dlgn", "x", False): (87.0, 0.1, 5),
        ("dlgn", "ones", False): (87.0, 0.2, 5),
    },
    ("CIFAR-10", "II", "resnet110"): {
        ("dnn", "x", False): (94.0, 0.2, 5),
        ("dgn", "x", False): (93.3, 0.2, 5),
        ("dgn", "ones", False): (93.2, 0.1, 5),
        ("dlgn", "x", False): (87.9, 0.2, 5),
        ("dlgn", "ones", False): (87.8, 0.1, 5),
    },
    ("CIFAR-100", "II", "vgg16"): {
        ("dnn", "x", False): (73.4, 0.3, 5),
        ("dgn", "x", False): (70.3, 0.1, 5),
        ("dgn", "ones", False): (70.5, 0.2, 5),
        ("dlgn", "x", False): (61.5, 0.2, 5),
        ("dlgn", "ones", False): (61.5, 0.1, 5),
    },
    ("CIFAR-100", "II", "resnet110"): {
        ("dnn", "x", False): (72.7, 0.2, 5),
        ("dgn", "x", False): (70.8, 0.2, 5),
        ("dgn", "ones", False): (70.8, 0.4, 5),
        ("dlgn", "x", False): (62.3, 0.2, 5),
        ("dlgn", "ones", False): (62.7, 0.3, 5),
    },
}


def gated_study(rows: dict, base: str, runs: int | None = None, shift: dict | None = None) -> pd.DataFrame:
    records = []
    for i, ((family, value_input, permuted), (mean, sd, n)) in enumerate(rows.items()):
        n = runs or n
        mean += (shift or {}).get((family, value_input, permuted), 0.0)
        for seed, acc in enumerate(exact(mean, sd, n, i)):
            records.append(
                {
                    "variant": f"{family}_{value_input}_{'perm' if permuted else 'id'}",
                    "seed": seed,
                    "base": base,
                    "family": family,
                    "regime": None if family == "dnn" else "standalone",
                    "value_input": value_input,
                    "permuted": permuted,
                    "test_acc": acc / 100,
                }
            )
    return pd.DataFrame(records)


@pytest.mark.parametrize("key", list(GATED_TABLES), ids=lambda k: f"{k[0]}-{k[1]}-{k[2]}")
def test_gated_findings_read_the_papers_tables(key):
    verdicts = gated.findings(gated_study(GATED_TABLES[key], key[2])).set_index("finding")["verdict"]
    recovers = verdicts.filter(like="83.5").iloc[0]
    permutation = verdicts.filter(like="permutation")
    if key[1] == "II":  # Table II has no permuted gates
        assert (permutation == "not run").all()
        verdicts = verdicts.drop(permutation.index)
    if key == ("CIFAR-100", "II", "vgg16"):
        # The paper's worst case, 61.5 / 73.4 = 83.8 %: 0.2 points above its own 83.5 % threshold,
        # within its run-to-run spread over 5 runs, so no interval decides it.
        assert recovers == "inconclusive"
        verdicts = verdicts.drop(verdicts.filter(like="83.5").index)
    assert (verdicts == "reproduced").all(), verdicts


def test_gated_findings_reversed_and_one_unit():
    rows = GATED_TABLES[("CIFAR-10", "I", "c4gap w128")]
    reversed_ = {
        ("dlgn", "x", False): -20.0,  # 55.4: 69 % of the DNN
        ("dlgn", "ones", False): -20.0,
        ("dgn", "ones", False): -10.0,  # value input ones 10 points below x
        ("dgn", "x", True): -15.0,  # a permutation costing 15 points
    }
    verdicts = gated.findings(gated_study(rows, "c4gap w128", shift=reversed_)).set_index("finding")[
        "verdict"
    ]
    assert (
        verdicts["c4gap w128: the DLGN recovers more than 83.5 % of the DNN's accuracy"] == "not reproduced"
    )
    assert verdicts["c4gap w128: the value input barely matters (DGN)"] == "not reproduced"
    assert verdicts["c4gap w128: the gate permutation barely matters"] == "not reproduced"
    one = gated.findings(gated_study(rows, "c4gap w128", runs=1)).set_index("finding")["verdict"]
    assert (one == "inconclusive").all()


def test_gated_findings_say_their_scale():
    table = gated_study(GATED_TABLES[("CIFAR-10", "I", "c4gap w128")], "c4gap w128")
    epochs = {v: 4 for v in table["variant"].unique()}
    found = gated.findings(table, epochs)
    assert found["scale"].str.startswith("4 epochs").all() and (found["below_budget"] != "").all()
    card = scorecard({}, SETTINGS, found).set_index("claim")
    assert card.loc["G1", "reading"].startswith("reproduced at 4 epochs")
    assert card.loc["G1", "units"] == "5 DNN, 10 DLGN members"


# --- the scorecard ------------------------------------------------------------------------------


def test_a_stage_not_in_the_config_reads_not_run():
    card = scorecard({}, SETTINGS, gated_findings=None)
    assert set(card["verdict"]) == {"not run"}
    assert len(card) == len(CLAIMS) + 1  # and one row for the gated findings
    assert (card["figure"] == "").all()


def test_every_claim_quotes_its_sentence_and_names_units_and_scale():
    paper = {"stitching": stitching(FIG1)}
    card = scorecard(
        paper, SETTINGS | {"scale": {"zoo_epochs": 4, "zoo": "zoo: 4 of 50", "stitching": "s"}}, None
    )
    card = card.set_index("claim")
    assert all(claim.sentence for claim in CLAIMS)
    assert card.loc["C2", "units"] == "32 pairs" and card.loc["C2", "scale"] == "zoo: 4 of 50; s"
    assert card.loc["C2", "reading"] == "reproduced at 4 of 50 epochs"
    assert '"the G_ReLU-CKA exhibits a much more significant decay' in card.loc["C5", "sentence"]
    assert "less similarity in terms of G_ReLU-Procrustes" in card.loc["C4", "sentence"]


def test_modes_are_named_and_figures_linked():
    card = scorecard({"stitching": stitching(FIG1)}, SETTINGS, None).set_index("claim")
    assert "stitching init random (the paper)" in card.loc["C2", "mode"]
    assert "selected on val (corrected" in card.loc["C2", "mode"]
    assert "G_ReLU P update paper, batch-norm refresh grelu (the paper)" in card.loc["C2", "mode"]
    corrected = SETTINGS | {
        "stitching_init": "match",
        "stitching_permutation_update": "mirror",
        "stitching_momentum": 0.9,
        "rotation_variants": ["myrtle"],
    }
    card = scorecard({"stitching": stitching(FIG1)}, corrected, None).set_index("claim")
    assert (
        "ours; the paper: random" in card.loc["C2", "mode"]
        and "not the released code" in card.loc["C2", "mode"]
        and "ours; the paper: paper, grelu" in card.loc["C3", "mode"]
    )
    assert "the paper used a batch-norm-free Myrtle" in card.loc["C1", "mode"]
    assert set(card["verdict"]) <= set(VERDICTS)
    rst = as_rst(card.reset_index(), {"stitching_penalty.png"})
    assert "`stitching_penalty.png`_" in rst and "`rotation_penalty.png`_" not in rst


def test_rank1_is_compared_with_grelu_on_the_same_pairs():
    """Rank 1 on a few pairs only is compared with G_ReLU on those pairs (paired), not with every
    pair's G_ReLU layer."""
    table = stitching(FIG1, pairs=8)
    table = table[(table["method"] != "rank1") | (table["pair"] < 4)].copy()
    hard = (table["method"] == "grelu") & (table["pair"] < 4)
    table.loc[hard, "penalty"] += 0.2  # G_ReLU as costly as rank 1 on exactly the pairs rank 1 ran on
    ours = scorecard({"stitching": table}, SETTINGS, None).set_index("claim").loc["C2", "ours"]
    assert "rank 1 - G_ReLU" in ours and "act3 rank 1 - G_ReLU: +3.0" in ours


# --- linear mode connectivity (Ainsworth et al.; L3 ours) ----------------------------------------


def connectivity(
    barriers: dict[str, dict[str, list[float]]],
    widths: dict[str, float] | None = None,
    correction: str = "reset",
):
    """Connectivity rows: per variant, method -> the test-loss barrier of each member-disjoint pair
    (one curve of 3 points each, endpoints at loss 0.5, the middle at 0.5 + barrier)."""
    rows = []
    for variant, methods in barriers.items():
        for method, values in methods.items():
            for pair, value in enumerate(values):
                a, b = disjoint(pair)
                for lam, loss in ((0.0, 0.5), (0.5, 0.5 + value), (1.0, 0.5)):
                    rows.append(
                        {
                            "variant": variant,
                            "pair": pair,
                            "seed_a": a,
                            "seed_b": b,
                            "width_multiplier": (widths or {}).get(variant, 1.0),
                            "method": method,
                            "correction": correction,
                            "split": "test",
                            "lam": lam,
                            "loss": loss,
                            "barrier": value,
                            "barrier_line": value,
                        }
                    )
    return {"connectivity": pd.DataFrame(rows)}


def test_l1_aligned_barrier_below_unaligned_known_answers():
    # the shape of Ainsworth et al.'s finding (our numbers): a large barrier unaligned, a small one after weight
    # matching; 8 pairs with the spread of a few tenths
    unaligned, matched = exact(2.0, 0.3, 8, 1), exact(0.3, 0.2, 8, 2)
    tables = connectivity({"resnet20": {"unaligned": unaligned, "weight_permutation": matched}})
    assert verdict("L1", tables) == "reproduced"
    reversed_ = connectivity({"resnet20": {"unaligned": matched, "weight_permutation": unaligned}})
    assert verdict("L1", reversed_) == "not reproduced"
    one = connectivity({"resnet20": {"unaligned": [2.0], "weight_permutation": [0.3]}})
    assert verdict("L1", one) == "inconclusive"
    assert verdict("L1", connectivity({"resnet20": {"unaligned": unaligned}})) == "not run"
    # Ainsworth et al.'s protocol resets the batch-norm statistics: other corrections' curves do not vote
    repaired = connectivity(
        {"resnet20": {"unaligned": matched, "weight_permutation": unaligned}}, correction="repair"
    )
    both = {"connectivity": pd.concat([tables["connectivity"], repaired["connectivity"]])}
    assert verdict("L1", both) == "reproduced"
    assert verdict("L1", repaired) == "not reproduced"  # without reset curves, the first correction decides


def test_l2_barrier_shrinks_with_width_known_answers():
    widths = {"resnet20": 1.0, "resnet20_w4": 4.0}
    narrow, wide = exact(1.5, 0.3, 8, 3), exact(0.4, 0.2, 8, 4)
    shrinking = connectivity(
        {"resnet20": {"weight_permutation": narrow}, "resnet20_w4": {"weight_permutation": wide}}, widths
    )
    assert verdict("L2", shrinking) == "reproduced"
    growing = connectivity(
        {"resnet20": {"weight_permutation": wide}, "resnet20_w4": {"weight_permutation": narrow}}, widths
    )
    assert verdict("L2", growing) == "not reproduced"
    single = connectivity(
        {"resnet20": {"weight_permutation": [1.5]}, "resnet20_w4": {"weight_permutation": [0.4]}}, widths
    )
    assert verdict("L2", single) == "inconclusive"
    one_width = connectivity({"resnet20": {"weight_permutation": narrow}})
    assert verdict("L2", one_width) == "not run"


def test_l3_is_ours_and_reads_either_way():
    permutation, grelu = exact(0.9, 0.1, 6, 5), exact(0.6, 0.1, 6, 6)
    lower = connectivity({"myrtle": {"weight_permutation": permutation, "weight_grelu": grelu}})
    card = scorecard(lower, SETTINGS, None).set_index("claim")
    assert card.loc["L3", "kind"] == "ours" and card.loc["L3", "verdict"] == "reproduced"
    higher = connectivity({"myrtle": {"weight_permutation": grelu, "weight_grelu": permutation}})
    assert verdict("L3", higher) == "not reproduced"
    # the run's barrier definition decides: here the line's barrier says the opposite
    flipped = lower["connectivity"].assign(barrier_line=lambda t: 2 - t["barrier"])
    line = SETTINGS | {"connectivity_barrier": "endpoints_line"}
    assert verdict("L3", {"connectivity": flipped}, line) == "not reproduced"


# --- independent pairs --------------------------------------------------------------------------


def test_pairs_share_no_member():
    pairs = draw_pairs(10, 5, 0, "stitching", "myrtle")
    members = [m for pair in pairs for m in pair]
    assert len(members) == len(set(members)) == 10
    assert pairs == draw_pairs(10, 5, 0, "stitching", "myrtle")
    with pytest.raises(ValueError, match="5 members form only 2 member-disjoint pairs"):
        draw_pairs(5, 3, 0, "s", "v")
    shared = draw_pairs(4, 12, 0, "s", "v", share_members=True)
    assert len(set(shared)) == 12  # every ordered pair of 4 members


@pytest.mark.parametrize("path", ["config/config.yaml", "config/cifar10_cpu.yaml", "config/paper.yaml"])
def test_shipped_configs_draw_member_disjoint_pairs(path):
    plan = Plan(load(path))
    assert plan.errors() == []
    assert path == "config/cifar10_cpu.yaml" or plan.connectivity["variants"]  # the stage is drawn too
    draws = {
        "stitching": {v: plan.stitch_pairs(v) for v in plan.stitching["variants"]},
        "similarity": {v: plan.similarity_pairs(v) for v in plan.similarity["variants"]},
        "pullback": {v: plan.pullback_pairs(v) for v in plan.pullback["variants"] if plan.pullback["pairs"]},
        "connectivity": {v: plan.connectivity_pairs(v) for v in plan.connectivity["variants"]},
    }
    for stage, by_variant in draws.items():
        for variant, pairs in by_variant.items():
            members = [m for pair in pairs for m in pair]
            assert len(members) == len(set(members)), (path, stage, variant, pairs)


def test_asking_for_more_pairs_than_disjoint_names_the_fix():
    def more(config):
        config["stitching"]["pairs_per_variant"]["myrtle"] = 6  # 10 members: 5 disjoint pairs

    errors = Plan(load("config/config.yaml", more)).errors()
    assert any(
        "stitching.pairs" in e and "no member in common" in e and "pairs_share_members" in e for e in errors
    )

    def shared(config):
        more(config)
        config["pairs_share_members"] = True

    assert Plan(load("config/config.yaml", shared)).errors() == []


def test_the_decision_rule_is_stated():
    from intertwine.claims import DECISION_RULE

    assert "Holm" in DECISION_RULE and "independent units" in DECISION_RULE
    assert math.isclose(0.835, gated.RECOVERS)


# --- NaN evidence, missing columns, unknown tables (issue 33) -------------------------------------


def _symmetry(change):
    return pd.DataFrame(
        {"group": ["grelu", "grelu", "orthogonal"], "relative_change": change, "dtype": "float64"}
    )


def _pullback(cos):
    return pd.DataFrame(
        [{"group": "permutation", "mode": "gradient", "scale_spread": 0.0, "cos_min": c} for c in cos]
    )


NAN = math.nan


@pytest.mark.parametrize(
    "claim, tables, rows",
    [
        ("T1", lambda: {"symmetry": _symmetry([NAN, NAN, NAN])}, 3),
        ("C1", lambda: {"rotation": rotation({"act1": 0.4}, 0.01)["rotation"].assign(penalty=NAN)}, 20),
        ("C2", lambda: {"stitching": stitching(FIG1).assign(penalty=NAN)}, 384),
        ("C4", lambda: {"similarity": procrustes("myrtle", TABLE2, 8).assign(value=NAN)}, 64),
        (
            "C6",
            lambda: {"dissection": dissection(0.3, 0.0)["dissection"].assign(fraction_interpretable=NAN)},
            None,
        ),
        ("D1", lambda: {"deqntk": deq([0.59, 0.59, 0.59])["deqntk"].assign(test_acc=NAN)}, 3),
        ("P1", lambda: {"pullback_symmetry": _pullback([NAN, NAN])}, 2),
        (
            "H1",
            lambda: {"pullback_settling": settling([0.9, 0.9])["pullback_settling"].assign(agreement=NAN)},
            20,
        ),
    ],
)
def test_all_nan_evidence_is_no_evidence_never_a_verdict(claim, tables, rows):
    row = scorecard(tables(), SETTINGS, None).set_index("claim").loc[claim]
    assert row["verdict"] == "inconclusive"
    assert row["evidence"].startswith("no evidence: every one of the")
    assert row["units"].startswith("0 of ")
    if rows is not None:
        assert row["units"] == f"0 of {rows} rows with a value"


def test_partly_nan_evidence_is_left_out_and_said():
    row = scorecard({"symmetry": _symmetry([NAN, 1e-16, 0.3])}, SETTINGS, None).set_index("claim").loc["T1"]
    assert row["verdict"] == "reproduced" and row["units"] == "1 check"
    assert "1 of 3 rows of symmetry with NaN relative_change left out (no evidence)" in row["evidence"]
    # NaN penalties are not counted as trials
    table = rotation({"act1": 0.4, "act2": 0.3}, 0.01, trials=3)["rotation"]
    table.loc[table.index[:2], "penalty"] = NAN
    row = scorecard({"rotation": table}, SETTINGS, None).set_index("claim").loc["C1"]
    assert "2 of 12 rows of rotation with NaN penalty left out" in row["evidence"]
    assert row["units"] == "1-3 trials per site and group"


@pytest.mark.parametrize(
    "tables, message",
    [
        (
            {"symmetry": _symmetry([1e-16] * 3).drop(columns="relative_change")},
            "table 'symmetry' has no column 'relative_change'",
        ),
        (
            {"symmetry": _symmetry([1e-16] * 3).drop(columns="group")},
            r"claim T1 reads column 'group' that its table \(symmetry\) lacks",
        ),
        (
            {"rotation": rotation({"act1": 0.4}, 0.01)["rotation"].drop(columns="site")},
            r"claim C1 reads column 'site' that its table \(rotation\) lacks",
        ),
        (
            {"rotaton": _symmetry([1e-16] * 3)},
            "unknown table 'rotaton' given to the scorecard; the tables are zoo, symmetry",
        ),
    ],
)
def test_missing_columns_and_unknown_tables_are_named(tables, message):
    with pytest.raises(ValueError, match=message):
        scorecard(tables, SETTINGS, None)


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["--table", "rotaton=x.parquet"],
            r"unknown table 'rotaton' \(did you mean 'rotation'\?\); the tables are zoo",
        ),
        (
            ["--table", "results/tables/rotation.parquet"],
            r"expected NAME=PATH \(e.g. rotation=.*\), got 'results/tables/rotation.parquet'",
        ),
        (["--table", "rotation="], "expected NAME=PATH"),
        (["--table", "symmetry=SYM", "--table", "symmetry=SYM"], "--table symmetry= is given twice"),
        (
            ["--table", "symmetry=NOCOL"],
            r"--table symmetry: .*NOCOL.parquet: does not have the table's columns \(missing \['relative_change'\]",
        ),
        (
            ["--table", "gated_findings=FIND"],
            r"--table gated_findings: .*findings.csv: does not have the table's columns \(missing \['verdict'\]",
        ),
    ],
)
def test_claims_command_reads_its_tables_through_their_schemas(tmp_path, argv, message):
    import json
    import subprocess

    from intertwine.workflow.stages.symmetry.tables import SYMMETRY

    full = pd.DataFrame({name: pd.Series(dtype=object) for name in SYMMETRY.names})
    full.drop(columns="relative_change").to_parquet(tmp_path / "NOCOL.parquet")
    pd.DataFrame({"finding": ["x"], "paper": ["y"], "ours": ["z"], "evidence": ["e"]}).to_csv(
        tmp_path / "findings.csv", index=False
    )
    argv = [
        a.replace("NOCOL", str(tmp_path / "NOCOL.parquet"))
        .replace("FIND", str(tmp_path / "findings.csv"))
        .replace("SYM", str(tmp_path / "NOCOL.parquet"))
        for a in argv
    ]
    command = [sys.executable, "-m", "intertwine", "claims", *argv, "--settings", json.dumps(SETTINGS)]
    command += ["--out", str(tmp_path / "claims.csv"), "--rst", str(tmp_path / "claims.rst")]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert re.search(message, result.stderr), result.stderr


def test_headline_is_the_comparison_that_decides():
    """The scorecard's at-a-glance line: against for not reproduced, undecided for inconclusive,
    the weakest shown for reproduced."""
    strong, weak = Estimate(5.0, 0.5, 10, 11), Estimate(2.0, 0.8, 10, 11)
    against, open_ = Estimate(-3.0, 0.5, 10, 11), Estimate(0.1, 1.0, 10, 11)
    shown = [Comparison("a", strong, +1), Comparison("b", weak, +1)]
    text = describe(shown, judge(shown).agreement, 1, ".1f")
    assert judge(shown).verdict == "reproduced" and headline(text, "reproduced") == "b: +2.0 ± 1.8"
    refuted = [Comparison("a", strong, +1), Comparison("c", against, +1)]
    text = describe(refuted, judge(refuted).agreement, 1, ".1f")
    assert judge(refuted).verdict == "not reproduced" and headline(text, "not reproduced").startswith(
        "c: -3.0"
    )
    undecided = [Comparison("a", strong, +1), Comparison("d", open_, +1)]
    text = describe(undecided, judge(undecided).agreement, 1, ".1f")
    assert judge(undecided).verdict == "inconclusive" and headline(text, "inconclusive").startswith("d: +0.1")
    assert headline("G_ReLU largest relative change 8.7e-16; orthogonal 0.1", "reproduced") == (
        "G_ReLU largest relative change 8.7e-16"
    )


def test_report_opens_with_every_papers_verdict_at_a_glance():
    card = scorecard({}, SETTINGS, None)
    rst = as_rst(card, set())
    glance, details = rst.split("**The decision rule.**")
    for claim in card.loc[card["kind"] == "paper", "claim"]:
        assert f"   * - {claim}\n" in glance
    assert "P1" not in glance and "P1" in details


def test_each_claim_lives_in_its_stages_folder_in_the_scorecards_order():
    """Issue 35: a stage's claims are in its folder (``claims.CLAIMS``); the scorecard keeps its
    own order of rows (``ORDER``), which is not the stages' order, and a stage's claim missing
    from it is an error that says where to list it."""
    from intertwine import claims
    from intertwine.workflow import stages

    owners = {
        claim.claim: stage
        for stage in stages.with_part("claims")
        for claim in stages.part(stage, "claims").CLAIMS
    }
    assert [claim.claim for claim in claims.all_claims()] == list(claims.ORDER)
    assert owners["C1"] == "rotation" and owners["D1"] == "deqntk" and owners["L3"] == "connectivity"
    assert set(claims.all_evidence()) == set(claims.scorecard_tables()) - {"gated_findings"}
    claims.all_claims.cache_clear()
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(claims, "ORDER", claims.ORDER[:-1])
            with pytest.raises(RuntimeError, match="list a new claim in intertwine.claims.ORDER"):
                claims.all_claims()
    finally:
        claims.all_claims.cache_clear()
