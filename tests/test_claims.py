"""The claims scorecard: each verdict rule on synthetic tables that should and should not reproduce
its claim, too few units (inconclusive), and stages not in the config (not run)."""

import re

import numpy as np
import pandas as pd
import pytest

from intertwine.claims import CLAIMS, VERDICTS, Estimate, as_rst, scorecard

SETTINGS = {
    "myrtle_variants": ["myrtle"],
    "residual_variants": ["resnet20"],
    "residual_activation": {"resnet20": True, "resnet20_nores": False},
    "leaky_slopes": {"resnet20": 0.0, "leaky0.1": 0.1, "leaky0.5": 0.5},
    "batch_norm": {"myrtle": True, "myrtle_nobn": False},
    "rotation_variants": ["myrtle_nobn"],
    "select_on": "val",
    "stitching_init": "random",
    "stitching_optimizer": "sgd",
    "stitching_momentum": 0.0,
}
RNG = np.random.default_rng(0)


def noisy(mean, n, sd=0.01):
    return mean + sd * RNG.standard_normal(n)


def verdict(claim_id, tables, settings=SETTINGS):
    card = scorecard(tables, settings, gated_findings=None)
    return card.set_index("claim").loc[claim_id, "verdict"]


def rotation(orthogonal, grelu, trials=8):
    rows = []
    for site in ("act1", "act2", "act3"):
        for group, mean in (("orthogonal", orthogonal[site]), ("grelu", grelu)):
            rows += [
                {"variant": "myrtle_nobn", "site": site, "group": group, "penalty": p}
                for p in noisy(mean, trials)
            ]
    return {"rotation": pd.DataFrame(rows)}


def test_c1_rotation_penalty():
    assert verdict("C1", rotation({"act1": 0.4, "act2": 0.3, "act3": 0.2}, 0.01)) == "reproduced"
    # One layer where orthogonal elements cost nothing more: not "at every layer".
    assert verdict("C1", rotation({"act1": 0.4, "act2": 0.3, "act3": -0.1}, 0.01)) == "not reproduced"
    assert verdict("C1", rotation({"act1": 0.4, "act2": 0.3, "act3": 0.2}, 0.01, trials=1)) == "inconclusive"


def stitching(full, grelu, rank1, pairs=8, residual_gap=0.0, leaky=None):
    rows = []
    for pair in range(pairs):
        for site, inside in (("act1", False), ("act2", False), ("act3", False)):
            for method, mean in (("full", full), ("grelu", grelu), ("rank1", rank1)):
                rows.append(
                    {
                        "variant": "myrtle",
                        "pair": pair,
                        "site": site,
                        "inside_residual": inside,
                        "method": method,
                        "penalty": noisy(mean, 1)[0],
                    }
                )
        for site, inside in (("layer1.0.act1", True), ("layer1.0.act2", False)):
            rows.append(
                {
                    "variant": "resnet20",
                    "pair": pair,
                    "site": site,
                    "inside_residual": inside,
                    "method": "grelu",
                    "penalty": noisy(0.05 + (residual_gap if inside else 0), 1)[0],
                }
            )
        for variant, mean in (leaky or {}).items():
            rows.append(
                {
                    "variant": variant,
                    "pair": pair,
                    "site": "layer1.0.act2",
                    "inside_residual": False,
                    "method": "grelu",
                    "penalty": noisy(mean, 1)[0],
                }
            )
    return {"stitching": pd.DataFrame(rows)}


def test_c2_myrtle_stitching():
    assert verdict("C2", stitching(full=0.0, grelu=0.04, rank1=0.3)) == "reproduced"
    assert verdict("C2", stitching(full=0.0, grelu=0.25, rank1=0.3)) == "not reproduced"  # G_ReLU costly
    assert verdict("C2", stitching(full=0.08, grelu=0.04, rank1=0.3)) == "not reproduced"  # full not free
    assert verdict("C2", stitching(full=0.0, grelu=0.04, rank1=0.3, pairs=1)) == "inconclusive"


def test_c3_residual_sites_cost_more():
    assert verdict("C3", stitching(0, 0.04, 0.3, residual_gap=0.1)) == "reproduced"
    assert verdict("C3", stitching(0, 0.04, 0.3, residual_gap=-0.04)) == "not reproduced"
    assert verdict("C3", stitching(0, 0.04, 0.3, residual_gap=0.0)) == "inconclusive"


def similarity(grelu_below, pairs=8, grelu_drop=0.4, linear_drop=0.1):
    rows = []
    sites = ["act1", "act2", "act3"]
    for pair in range(pairs):
        for site in sites:
            orthogonal = 0.7
            rows.append(
                {
                    "variant": "myrtle",
                    "pair": pair,
                    "site_a": site,
                    "site_b": site,
                    "measure": "orthogonal_procrustes",
                    "value": orthogonal + noisy(0, 1)[0],
                }
            )
            rows.append(
                {
                    "variant": "myrtle",
                    "pair": pair,
                    "site_a": site,
                    "site_b": site,
                    "measure": "grelu_procrustes",
                    "value": orthogonal - grelu_below + noisy(0, 1)[0],
                }
            )
        for a in sites:
            for b in sites:
                for measure, drop in (("grelu_cka", grelu_drop), ("linear_cka", linear_drop)):
                    value = 0.9 - (0 if a == b else drop)
                    rows.append(
                        {
                            "variant": "myrtle",
                            "pair": pair,
                            "site_a": a,
                            "site_b": b,
                            "measure": measure,
                            "value": value + noisy(0, 1)[0],
                        }
                    )
    return {"similarity": pd.DataFrame(rows)}


def test_c4_procrustes_order():
    assert verdict("C4", similarity(grelu_below=0.1)) == "reproduced"
    assert verdict("C4", similarity(grelu_below=-0.1)) == "not reproduced"
    assert verdict("C4", similarity(grelu_below=0.1, pairs=1)) == "inconclusive"


def test_c5_cka_diagonal():
    assert verdict("C5", similarity(0.1)) == "reproduced"
    assert verdict("C5", similarity(0.1, grelu_drop=0.05, linear_drop=0.3)) == "not reproduced"
    assert verdict("C5", similarity(0.1, grelu_drop=0.2, linear_drop=0.2)) == "inconclusive"


def dissection(fall_with, fall_without, seeds=6):
    rows = []
    for variant, fall in (("resnet20", fall_with), ("resnet20_nores", fall_without)):
        for seed in range(seeds):
            for alpha in (0.0, 0.5, 1.0):
                rows.append(
                    {
                        "variant": variant,
                        "seed": seed,
                        "alpha": alpha,
                        "fraction_interpretable": 0.5 - fall * alpha + noisy(0, 1)[0],
                    }
                )
    return {"dissection": pd.DataFrame(rows)}


def test_c6_dissection_falls_only_with_residual_activation():
    assert verdict("C6", dissection(0.3, 0.0)) == "reproduced"
    assert verdict("C6", dissection(0.3, 0.3)) == "not reproduced"  # falls without it too
    assert verdict("C6", dissection(-0.2, 0.0)) == "not reproduced"


def test_c7_leaky_relu_penalties_flat():
    flat = stitching(0, 0.04, 0.3, leaky={"leaky0.1": 0.05, "leaky0.5": 0.055})
    assert verdict("C7", flat) == "reproduced"
    steep = stitching(0, 0.04, 0.3, leaky={"leaky0.1": 0.15, "leaky0.5": 0.3})
    assert verdict("C7", steep) == "not reproduced"
    assert verdict("C7", stitching(0, 0.04, 0.3)) != "reproduced"  # one slope below 1: not run


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


def test_p1_and_d1():
    rows = [
        {"group": "permutation", "mode": m, "scale_spread": 0.0, "cos_min": 1.0}
        for m in ("gradient", "global")
    ]
    rows += [{"group": "grelu", "mode": "global", "scale_spread": 1.0, "cos_min": 0.7}]
    rows += [{"group": "grelu", "mode": "gradient", "scale_spread": 1.0, "cos_min": 1.0}]
    assert verdict("P1", {"pullback_symmetry": pd.DataFrame(rows)}) == "reproduced"
    rows[-1]["cos_min"] = 0.9  # the gradient is not invariant: something is wrong
    assert verdict("P1", {"pullback_symmetry": pd.DataFrame(rows)}) == "not reproduced"
    deq = pd.DataFrame(
        {
            "study": "accuracy",
            "sigma_w2": [0.6],
            "sigma_u2": [0.4],
            "sigma_b2": [0.0],
            "test_acc": [0.443],
            "paper_acc": [0.459],
        }
    )
    assert verdict("D1", {"deqntk": deq}) == "reproduced"
    assert verdict("D1", {"deqntk": deq.assign(test_acc=0.30)}) == "not reproduced"


def test_a_stage_not_in_the_config_reads_not_run():
    card = scorecard({}, SETTINGS, gated_findings=None)
    assert set(card["verdict"]) == {"not run"}
    assert len(card) == len(CLAIMS) + 1  # and one row for the gated findings
    assert (card["figure"] == "").all()


def test_gated_findings_become_claims_and_modes_are_named():
    findings = pd.DataFrame(
        {
            "finding": ["DLGN within 10 %"],
            "paper": ["0.94"],
            "ours": ["0.96"],
            "verdict": ["reproduced"],
            "evidence": ["5 DLGN, 5 DNN"],
        }
    )
    card = scorecard(stitching(0, 0.04, 0.3), SETTINGS, findings).set_index("claim")
    assert card.loc["G1", "verdict"] == "reproduced" and card.loc["G1", "statement"] == "DLGN within 10 %"
    assert "stitching init random (the paper)" in card.loc["C2", "mode"]
    assert "selected on val (corrected" in card.loc["C2", "mode"]
    corrected = SETTINGS | {
        "stitching_init": "match",
        "stitching_momentum": 0.9,
        "rotation_variants": ["myrtle"],
    }
    card = scorecard(stitching(0, 0.04, 0.3), corrected, findings).set_index("claim")
    assert (
        "ours; the paper: random" in card.loc["C2", "mode"]
        and "not the released code" in card.loc["C2", "mode"]
    )
    assert "the paper used a batch-norm-free Myrtle" in card.loc["C1", "mode"]
    assert set(card["verdict"]) <= set(VERDICTS)
    rst = as_rst(card.reset_index(), {"stitching_penalty.png"})
    assert "`stitching_penalty.png`_" in rst and "`rotation_penalty.png`_" not in rst


def test_interval_matches_the_t_distribution():
    estimate = Estimate.of([1.0, 2.0, 3.0])
    assert estimate.mean == pytest.approx(2.0) and estimate.half_width == pytest.approx(
        4.302653 * 1 / np.sqrt(3)
    )
    assert Estimate.of([1.0]).side() == 0 and Estimate.of([5, 6, 7]).side() == 1


def test_welch_interval_matches_scipy():
    from scipy import stats

    a, b = RNG.normal(1.0, 0.5, 7), RNG.normal(0.4, 1.5, 11)
    low, high = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    estimate = Estimate.difference(a, b)
    assert estimate.mean - estimate.half_width == pytest.approx(low)
    assert estimate.mean + estimate.half_width == pytest.approx(high)


def test_rank1_is_compared_with_grelu_on_the_same_pairs():
    tables = stitching(full=0.0, grelu=0.04, rank1=0.3)
    table = tables["stitching"]
    # rank 1 on pair 5 only (stitching.pairs_per_method): compared with pair 5's G_ReLU layer.
    table = table[(table["method"] != "rank1") | (table["pair"] == 5)].copy()
    table.loc[(table["method"] == "grelu") & (table["pair"] == 5), "penalty"] = 0.3  # as bad as rank 1 there
    ours = scorecard({"stitching": table}, SETTINGS, None).set_index("claim").loc["C2", "ours"]
    differences = [float(d) for d in re.findall(r"rank 1 - G_ReLU ([+-][\d.]+) \(no interval\)", ours)]
    # Pair 5 against pair 5: about 0 (noise sd 1 point); another pair's G_ReLU would give about +26.
    assert len(differences) == 3 and all(abs(d) < 5 for d in differences)
