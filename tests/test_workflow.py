"""The workflow, run for real with Snakemake on a tiny config: outputs, reruns, config errors."""

import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import chromium
import code_identities
import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from intertwine.workflow import doc_numbers
from intertwine.workflow.claims import VERDICTS
from intertwine.workflow.scorecard_page import glance_rows

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "configs" / "tiny.yaml"
pytestmark = pytest.mark.workflow


# Snakemake's protected() relies on file permissions, which do not bind root (CI runs as root):
# this entry point makes os.access answer as it does for any other user.
AS_NON_ROOT = """
import os, sys
_access = os.access
def access(path, mode, *args, **kwargs):
    if mode & os.W_OK and os.path.exists(path) and not os.stat(path).st_mode & 0o222:
        return False
    return _access(path, mode, *args, **kwargs)
os.access = access
from snakemake.cli import main
sys.argv[0] = "snakemake"
main()
"""


def snakemake(workdir, *args, config=TINY, check=True, as_non_root=False, source=None, **popen):
    """Snakemake on ``workdir``; with ``source`` (a folder holding a copy of the package, see
    ``source_copy``) first on PYTHONPATH, so Snakemake and its jobs run that copy."""
    env = os.environ | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    if source is not None:
        env["PYTHONPATH"] = str(source)
    entry = ["-c", AS_NON_ROOT] if as_non_root else ["-m", "snakemake"]
    command = [
        sys.executable,
        *entry,
        "-s",
        str(REPO / "workflow" / "Snakefile"),
        "-d",
        str(workdir),
        "--configfile",
        str(config),
        "--cores",
        "2",
        *args,
    ]
    code_identities.seed(workdir)
    if popen:
        return subprocess.Popen(command, env=env, **popen)
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    code_identities.keep(workdir)
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


def planned_jobs(workdir, config=TINY, *targets, source=None):
    """{rule: count} of what a dry-run (of ``targets``, default all) would run."""
    result = snakemake(workdir, *targets, "-n", "--quiet", "rules", config=config, source=source)
    text = result.stdout + result.stderr
    if "Nothing to be done" in text:
        return {}
    return {
        m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", text, re.M) if m[1] not in ("total", "count")
    }


def changed_config(tmp_path, name, change):
    config = yaml.safe_load(TINY.read_text())
    change(config)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def source_copy(tmp_path_factory):
    """A folder holding a copy of the package, for the tests that edit its code: the repository's
    own source is never edited, so a test killed mid-edit leaves it whole and tests running beside
    it never see the edit."""
    root = tmp_path_factory.mktemp("source")
    package = REPO / "src" / "intertwine"
    shutil.copytree(package, root / "intertwine", ignore=shutil.ignore_patterns("__pycache__"))
    return root


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("tiny")
    snakemake(workdir)
    return workdir


def test_paper_config_dag(tmp_path):
    config = REPO / "config" / "paper.yaml"
    started = time.perf_counter()
    result = snakemake(tmp_path, "-n", config=config)
    assert time.perf_counter() - started < 300  # minutes would mean a DAG build gone quadratic
    text = result.stdout + result.stderr
    per_variant = {}
    for variant, seed in re.findall(r"wildcards: variant=([^,\s]+), seed=(\d+)", text):
        per_variant.setdefault(variant, set()).add(int(seed))
    zoo = yaml.safe_load(config.read_text())["zoo"]
    expected = {v: zoo["seeds_per_variant"].get(v, 100) for v in zoo["variants"]}
    # Godfrey et al.'s 16 variants, the connectivity stage's 4 widths (64 seeds: 32 member-disjoint
    # pairs) and the gated-networks study's 113 (Tables I-III with Table II's ResNet-110s, the plain
    # C1GAP at 200 and 2000 epochs, FL, FR), 5 seeds each but the C1GAPs' 16 (C1GAP-16-ENS)
    gated = yaml.safe_load(config.read_text())["gated"]
    ensembles = gated["ensembles"]
    gated = gated["variants"]
    assert ensembles == {"c1gap": 16, "c1gap_e2000": 16}
    assert len(expected) == 16 + 4 + 113 and len(gated) == 113
    assert all(expected[v] == ensembles.get(v, 5) for v in gated)
    assert sum(v.startswith("c4gap_dgn_x_") for v in gated) == 24  # every gate-layer permutation
    assert expected["myrtle_sigmoid_nobn"] == 3 and expected["convnext"] == 10
    assert expected["cct"] == 10
    assert {v: len(seeds) for v, seeds in per_variant.items()} == expected
    jobs = {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", text, re.M)}
    # packed 32 per job (zoo.pack_size): 11 variants of 100 seeds in 4 packs each, the 4 widths'
    # 64 in 2, 104 variants of 3-10 seeds in one; one member per job for the constant-width Myrtle
    # (100), CCT (10), the six VGG16s, the 4x-wide C4GAP and the five ResNet-110s (5 each), which
    # gain nothing from packing or were not measured packed (docs/cluster.md)
    assert jobs["train_member"] == 100 + 10 + 7 * 5 + 5 * 5 and jobs["train_pack"] == 11 * 4 + 4 * 2 + 104
    assert jobs["unpack_member"] == 2076 - 170 and jobs["prepare_data"] == 1 and jobs["zoo_table"] == 1
    # kernels of every study variant but the four gated ResNet-110s (no weight action to check them by)
    assert jobs["npk_member"] == 113 - 4 and jobs["gated_table"] == 1 and jobs["gated_ensemble"] == 2
    # rotation: 4 sites x (3 groups for each of 2 variants) x 10 trials
    assert jobs["rotation_trial"] == 4 * 6 * 10
    # stitching: pairs x methods, one job covering every site of the variant: Myrtle with full, 6
    # ranks, grelu and the appendix's grelu_cv, softsort and 3 L1 strengths; the ResNets with full,
    # 6 ranks and grelu; the 7 LeakyReLU ResNet20s with grelu; the CCT with full and grelu
    assert jobs["stitch_pair"] == 32 * 13 + (16 + 16) * 8 + 7 * 16 + 5 * 2
    assert jobs["stitching_studies_figure"] == 1
    assert jobs["similarity_pair"] == 4 * 32  # Myrtle, constant-width Myrtle, ResNet20, ResNet18
    assert jobs["similarity_zoo"] == 2  # Myrtle and ResNet20 as a whole
    assert jobs["dissect_member"] == 3 * 10 and jobs["dissection_masks"] == 3
    assert jobs["connectivity_pair"] == 7 * 32  # Myrtle and ResNet20 at three widths, Myrtle without BN
    assert sum(jobs.values()) < 12_000
    # the docs' count of the paper's jobs (tests/test_docs.py checks the rest of their numbers)
    pages = [REPO / "README.md", *(REPO / "docs").glob("*.md")]
    assert doc_numbers.stated(pages)["paper.jobs"] == {f"{jobs['total']:,}"}


def test_cifar10_cpu_config_dag(tmp_path):
    """The laptop-scale real-data config plans every Godfrey stage and the scorecard (CI does not run it)."""
    jobs = planned_jobs(tmp_path, REPO / "config" / "cifar10_cpu.yaml")
    assert jobs["train_member"] == 6 + 2 + 4 + 2 and jobs["claims"] == 1
    # 3 Myrtle pairs x (full, rank, G_ReLU), 2 ResNet20 pairs x (full, G_ReLU)
    assert jobs["stitch_pair"] == 3 * 3 + 2 * 2 and jobs["rotation_trial"] == 4 * 2 * 2
    assert jobs["dissect_member"] == 2 + 2 and jobs["pullback_member"] == 2 + 2
    assert {"similarity_pair", "symmetry_check", "pullback_pair"} <= set(jobs)


def test_claims_scorecard(tiny_run):
    card = pd.read_csv(tiny_run / "results/tables/claims.csv", keep_default_na=False)
    assert {"claim", "source", "sentence", "paper", "ours", "verdict", "reading", "units", "scale"} <= set(
        card.columns
    )
    assert card.loc[card["verdict"] != "not run", "units"].str.len().gt(0).all()
    assert set(card["verdict"]) <= {"reproduced", "not reproduced", "inconclusive", "not run"}
    by_claim = card.set_index("claim")
    assert by_claim.loc["T1", "verdict"] == "reproduced"  # G_ReLU elements are exact symmetries
    assert by_claim.loc["C1", "verdict"] == "inconclusive"  # one trial per group: no interval
    assert by_claim.loc["D1", "verdict"] == "not run"  # no setting with reference accuracies
    assert "selected on val" in by_claim.loc["C2.full", "mode"]


def test_tiny_run_outputs(tiny_run):
    zoo = pd.read_parquet(tiny_run / "results/tables/zoo.parquet")
    assert sorted(zip(zoo["variant"], zoo["seed"])) == [
        ("c4gap", 0),
        ("c4gap", 1),
        ("c4gap_dgn", 0),
        ("c4gap_dgn", 1),
        ("c4gap_dgn", 2),
        ("c4gap_dgn_fl", 0),
        ("c4gap_dgn_fl", 1),
        ("c4gap_dlgn_reversed", 0),
        ("c4gap_dlgn_reversed", 1),
        ("cct", 0),
        ("cct", 1),
        ("convnext", 0),
        ("myrtle", 0),
        ("myrtle", 1),
        ("myrtle", 2),
        ("myrtle_leaky", 0),
        ("myrtle_leaky", 1),
        ("resnet20", 0),
        ("resnet20", 1),
    ]
    assert list(zoo.columns[:2]) == ["variant", "seed"]
    assert zoo["test_acc"].between(0, 1).all() and (zoo["n_params"] > 0).all()
    epochs = pd.read_parquet(tiny_run / "results/tables/zoo_epochs.parquet")
    assert len(epochs) == 19 * 2
    checkpoint = tiny_run / "results/zoo/myrtle/seed0.pt"
    assert not os.stat(checkpoint).st_mode & stat.S_IWUSR  # protected
    assert (tiny_run / "results/figures/zoo_accuracy.png").stat().st_size > 1000
    summary = pd.read_csv(tiny_run / "results/tables/zoo_summary.csv")
    gated = ["c4gap", "c4gap_dgn", "c4gap_dlgn_reversed", "c4gap_dgn_fl"]
    assert list(summary["variant"]) == ["myrtle", "resnet20", "convnext", "myrtle_leaky", "cct", *gated]
    assert list(summary["seeds"]) == [
        3,
        2,
        1,
        2,
        2,
        2,
        3,
        2,
        2,
    ]  # tiny.yaml: myrtle and c4gap_dgn 3, convnext 1
    for log in ["data/shapes.log", "zoo/myrtle/seed0.log", "tables/zoo.log", "figures/zoo_accuracy.log"]:
        assert (tiny_run / "results/logs" / log).exists()
    assert "epoch 2/2" in (tiny_run / "results/logs/zoo/myrtle/seed0.log").read_text()


def test_cluster_requests_cover_what_the_jobs_used(tiny_run):
    """Every job's measured peak (its benchmark file) is below the smallest memory and time a torch
    job asks a cluster for (intertwine.workflow.cluster), before the margin."""
    from intertwine.workflow.cluster import TORCH_MB, TORCH_MINUTES

    measured = [
        pd.read_csv(path, sep="\t").iloc[0] for path in (tiny_run / "results/benchmarks").rglob("*.tsv")
    ]
    assert len(measured) > 20
    assert max(row["max_rss"] for row in measured) < TORCH_MB
    assert max(row["s"] for row in measured) < TORCH_MINUTES * 60


def test_symmetry_and_rotation_tables(tiny_run):
    symmetry = pd.read_parquet(tiny_run / "results/tables/symmetry.parquet")
    assert set(symmetry["group"]) == {"grelu", "orthogonal", "monomial"}
    # both groups at every site of myrtle, resnet20, myrtle_leaky and c4gap (not convnext, cct),
    # and signed monomials too at the 8 sites of each gated variant
    assert len(symmetry) == 2 * (4 + 19 + 4 + 4) + 3 * 3 * 8
    assert set(symmetry.loc[symmetry["group"] == "monomial", "variant"]) == {
        "c4gap_dgn",
        "c4gap_dlgn_reversed",
        "c4gap_dgn_fl",
    }
    grelu = symmetry[symmetry["group"].isin(["grelu", "monomial"])]
    assert (grelu["relative_change"] < 1e-10).all() and (grelu["representation_error"] < 1e-10).all()
    orthogonal = symmetry[symmetry["group"] == "orthogonal"]
    assert (orthogonal["relative_change"] > 1e-3).all()
    rotation = pd.read_parquet(tiny_run / "results/tables/rotation.parquet")
    assert sorted(rotation["group"]) == ["grelu", "orthogonal"] and set(rotation["site"]) == {"act2"}
    assert (rotation["penalty"] == rotation["acc_before"] - rotation["acc_finetuned"]).all()
    assert (tiny_run / "results/figures/rotation_penalty.png").stat().st_size > 1000


def test_stitching_table_and_figures(tiny_run):
    table = pd.read_parquet(tiny_run / "results/tables/stitching.parquet")
    assert list(table.columns[:5]) == ["variant", "pair", "seed_a", "seed_b", "site"]
    methods = table.groupby("variant")["method"].agg(set).to_dict()
    assert methods == {
        "myrtle": {"full", "rank2", "grelu", "grelu_cv", "softsort", "l1_0.01"},
        "resnet20": {"full", "rank2", "grelu"},
        "myrtle_leaky": {"grelu"},
        "cct": {"full", "grelu"},
        "c4gap_dgn": {"grelu", "monomial"},
    }
    assert len(table) == 6 + 3 * 2 + 1 + 2 + 2  # Myrtle at act2, ResNet20 at two sites, one each
    assert (table["seed_a"] != table["seed_b"]).all()
    assert dict(zip(table["site"], table["inside_residual"])) == {
        "act2": False,
        "layer1.0.act1": True,
        "layer1.0.act2": False,
        "blocks.1.out": False,
        "value.act2": False,
    }
    assert (
        table["penalty"] - ((table["acc_a"] + table["acc_b"]) / 2 - table["acc_stitched"])
    ).abs().max() < 1e-12
    group = table[table["method"].isin(["grelu", "grelu_cv", "softsort", "monomial"])]
    for perm, scales, channels in zip(group["permutation"], group["scales"], group["channels"]):
        assert sorted(perm) == list(range(channels)) and len(scales) == channels
    assert (group["stitch_params"] == group["channels"]).all()
    # a rounded G_ReLU layer is a scaled permutation: at least 1 - 1/C of its entries are 0
    assert (group["sparsity"] >= 1 - 1 / group["channels"] - 1e-12).all()
    assert (
        table[~table["method"].isin(["grelu", "grelu_cv", "softsort", "monomial"])]["permutation"]
        .isna()
        .all()
    )
    monomial = table[table["method"] == "monomial"]
    assert any(min(scales) < 0 for scales in monomial["scales"]) or (monomial["penalty"] < 1).all()
    l1 = table[table["method"] == "l1_0.01"]
    assert (l1["l1_lambda"] == 0.01).all() and (l1["epochs"] == 2).all()  # settings_per_method
    assert (
        table[table["method"] != "l1_0.01"]["l1_lambda"].isna().all()
        and table["sparsity"].between(0, 1).all()
    )
    cv = table[table["method"] == "grelu_cv"].iloc[0]
    assert list(cv["cv_alphas"]) == [0.1, 1.0] and len(cv["cv_accuracies"]) == 2
    assert cv["alpha_selected"] in (0.1, 1.0) and cv["alpha"] == cv["alpha_selected"]
    assert table[table["method"] != "grelu_cv"]["alpha_selected"].isna().all()
    # What training added, and how close each G_ReLU layer came to a permutation, epoch by epoch.
    assert table["penalty_start"].notna().all()
    assert (group["off_permutation_mass"].between(0, 1)).all()
    grelu = table[table["method"] == "grelu"]
    assert all(
        len(curve) == epochs for curve, epochs in zip(grelu["off_permutation_mass_by_epoch"], grelu["epochs"])
    )
    summary = pd.read_csv(tiny_run / "results/tables/stitching_summary.csv")
    assert len(summary) == len(table)  # one pair: one row per (variant, site, method)
    for figure in [
        "stitching_penalty.png",
        "stitching_dimension.png",
        "stitching_convergence.png",
        "stitching_leaky_relu.png",
        "stitching_alpha_cv.png",
        "stitching_l1_sparsity.png",
        "stitching_softsort.png",
        "stitching_transformer.png",
    ]:
        assert (tiny_run / "results/figures" / figure).stat().st_size > 1000
    leaky = pd.read_csv(tiny_run / "results/tables/leaky_relu_accuracy.csv")
    assert list(leaky["slope"]) == [0.0, 0.5] and list(leaky["variant"]) == ["myrtle", "myrtle_leaky"]
    assert leaky["paper_test_acc"].tolist()[1] == 86.6


def test_similarity_table_and_figures(tiny_run):
    table = pd.read_parquet(tiny_run / "results/tables/similarity.parquet")
    gated = table[table["variant"] == "c4gap_dgn"]  # test_gated_tables_and_figures checks it
    table = table[table["variant"] == "myrtle"]
    assert set(gated["measure"]) == set(table["measure"]) | {"gate_cka", "npk_cka"}
    table = table[~table["measure"].isin(["gate_cka", "npk_cka"])]
    assert list(table.columns[:8]) == [
        "variant",
        "pair",
        "seed_a",
        "seed_b",
        "site_a",
        "site_b",
        "measure",
        "value",
    ]
    procrustes = table[table["measure"].str.endswith("procrustes")]
    assert len(procrustes) == 2 * 2 * 4  # 2 pairs, 2 measures, Myrtle's 4 sites
    assert (procrustes["site_a"] == procrustes["site_b"]).all() and procrustes["value"].between(0, 1).all()
    heatmaps = table[~table["measure"].str.endswith("procrustes")]
    # 1 pair; G_ReLU and linear CKA, SVCCA, the angular shape distance; 4x4 sites
    assert len(heatmaps) == 1 * 4 * 4 * 4 and set(heatmaps["pair"]) == {0}
    shape = heatmaps.loc[heatmaps["measure"] == "shape_angular", "value"]
    assert (
        shape.between(0, np.pi / 2).all()
        and heatmaps.loc[heatmaps["measure"] == "svcca", "value"].between(0, 1).all()
    )
    assert (table["n_samples"] == 64).all()
    # similarity.intervals: each heatmap cell with its jackknife interval around it, none elsewhere
    assert heatmaps[["low", "high"]].notna().all().all()
    assert (heatmaps["low"] <= heatmaps["value"] + 1e-9).all() and (
        heatmaps["value"] <= heatmaps["high"] + 1e-9
    ).all()
    assert procrustes[["low", "high"]].isna().all().all()
    summary = pd.read_csv(tiny_run / "results/tables/similarity_summary.csv")
    assert set(summary["measure"]) == {
        "grelu_procrustes",
        "orthogonal_procrustes",
        "grelu_cka",
        "linear_cka",
        "gate_cka",
        "npk_cka",
        "svcca",
        "shape_angular",
    }
    assert summary["paper"].isna().all()  # the paper's numbers are CIFAR-10 only
    for figure in ["similarity_procrustes.png", "similarity_cka.png"]:
        assert (tiny_run / "results/figures" / figure).stat().st_size > 1000


def test_similarity_zoo_table_and_figure(tiny_run):
    """The zoo as a whole: Myrtle's 3 members at act1 and act4, each measure's 3 x 3 matrix, and
    the distances to the Procrustes mean of the measures that have one."""
    table = pd.read_parquet(tiny_run / "results/tables/similarity_zoo.parquet")
    measures = {"orthogonal_procrustes", "grelu_procrustes", "linear_cka", "shape_angular"}
    assert set(table["variant"]) == {"myrtle"} and set(table["site"]) == {"act1", "act4"}
    assert set(table["measure"]) == measures and (table["n_samples"] == 32).all()
    pairs = table[table["seed_b"].notna()]
    assert len(pairs) == 2 * 4 * 9
    assert (pairs.loc[pairs["seed_a"] == pairs["seed_b"], "distance"] == 0).all()
    to_mean = table[table["seed_b"].isna()]
    assert set(to_mean["measure"]) == measures - {"linear_cka"} and len(to_mean) == 2 * 3 * 3
    summary = pd.read_csv(tiny_run / "results/tables/similarity_zoo_summary.csv")
    assert len(summary) == 2 * 4 and (summary["members"] == 3).all()
    assert (summary["mean_vs_best_member"].dropna() < 1).all()
    assert (tiny_run / "results/figures/similarity_zoo.png").stat().st_size > 1000


def test_connectivity_table_and_figures(tiny_run):
    table = pd.read_parquet(tiny_run / "results/tables/connectivity.parquet")
    methods = [
        "unaligned",
        "weight_permutation",
        "weight_grelu",
        "activation_permutation",
        "activation_grelu",
    ]
    # tiny.yaml: one pair of ResNet20 (its residual ties) and of the gated C4GAP (its gate ties)
    assert set(table["variant"]) == {"resnet20", "c4gap_dgn"} and set(table["method"]) == set(methods)
    assert len(table) == 2 * 5 * 3 * 2 * 3  # variants, methods, corrections, splits, lambdas
    for (variant, correction, split), rows in table.groupby(["variant", "correction", "split"]):
        ends = rows[rows["lam"].isin([0.0, 1.0])].pivot(index="method", columns="lam", values="loss")
        # lambda 0 is f whatever the method; lambda 1 is g aligned, which computes g's function
        assert ends[0.0].max() - ends[0.0].min() == 0, (variant, correction, split)
        assert ends[1.0].max() - ends[1.0].min() < 1e-4 * ends[1.0].mean(), (variant, correction, split)
        weight = rows[rows["method"] == "weight_permutation"]
        assert (weight["sweeps"] >= 1).all() and (
            weight["distance"] <= rows[rows["method"] == "unaligned"]["distance"].iloc[0]
        ).all()
    # REPAIR's goal at an endpoint is the endpoint's own statistics: it leaves f and T(g) as they are
    ends = table[table["lam"].isin([0.0, 1.0])].set_index(["variant", "method", "split", "lam", "correction"])
    assert (
        ends["loss"].xs("repair", level="correction") == ends["loss"].xs("none", level="correction")
    ).all()
    assert (
        table["barrier"] >= table["barrier_line"] - 1e-12
    ).all()  # the mean of the ends is below their max
    assert (table["images"] == 64).all() and set(table["correction"]) == {"reset", "repair", "none"}
    summary = pd.read_csv(tiny_run / "results/tables/connectivity_summary.csv")
    assert set(summary["method"]) == set(methods) and (summary["pairs"] == 1).all()
    assert len(summary) == 2 * 5 * 3 * 2  # variants, methods, corrections, splits
    for figure in ["connectivity_curves.png", "connectivity_barriers.png"]:
        assert (tiny_run / "results/figures" / figure).stat().st_size > 1000
    card = pd.read_csv(tiny_run / "results/tables/claims.csv", keep_default_na=False).set_index("claim")
    assert card.loc["L2", "verdict"] == "not run"  # one width of each architecture
    assert card.loc["L3", "kind"] == "ours" and card.loc["L1", "verdict"] in VERDICTS


def test_dissection_tables_and_figures(tiny_run):
    table = pd.read_parquet(tiny_run / "results/tables/dissection.parquet")
    # resnet20: each stage's output and the last site inside a block; convnext likewise
    assert list(dict.fromkeys(table.loc[table["variant"] == "resnet20", "site"])) == [
        "layer1.2.act2",
        "layer2.2.act2",
        "layer3.2.act2",
        "layer3.2.act1",
    ]
    assert list(dict.fromkeys(table.loc[table["variant"] == "convnext", "site"])) == [
        "stage1.1.out",
        "stage2.1.out",
        "stage3.1.out",
        "stage3.1.act",
    ]
    assert len(table) == 2 * 4 * 3 * 2  # variants x sites x alphas x rotations
    assert (table["n_interpretable"] <= table["n_units"]).all()
    units = pd.read_parquet(tiny_run / "results/tables/dissection_units.parquet")
    assert len(units) == table["n_units"].sum()
    counted = units.groupby(["variant", "site", "alpha", "rotation_seed"])["detector"].sum()
    assert (
        counted.to_numpy()
        == table.set_index(counted.index.names).loc[counted.index, "n_interpretable"].to_numpy()
    ).all()
    # alpha 0 is the unrotated basis: every draw gives the same units
    at_zero = units[units["alpha"] == 0].pivot_table(
        index=["variant", "site", "unit"], columns="rotation_seed", values="iou"
    )
    assert (at_zero[0] == at_zero[1]).all()
    summary = pd.read_csv(tiny_run / "results/tables/dissection_summary.csv")
    assert set(summary["alpha"]) == {0.0, 0.5, 1.0} and summary["fraction_interpretable"].between(0, 1).all()
    for figure in [
        "dissection_fraction.png",
        "dissection_categories.png",
        "dissection_masks_resnet20.png",
        "dissection_masks_convnext.png",
    ]:
        assert (tiny_run / "results/figures" / figure).stat().st_size > 1000


def test_gated_tables_and_figures(tiny_run):
    """The gated-networks stage: the study's table, the kernels with their exact invariance, the
    findings, the figures; an FL member's feature network is its source member's, frozen."""
    from intertwine.workflow.zoo import read_checkpoint

    table = pd.read_parquet(tiny_run / "results/tables/gated.parquet")
    assert len(table) == 9 and set(table["family"]) == {"dnn", "dgn", "dlgn"}
    reversed_ = table[table["variant"] == "c4gap_dlgn_reversed"]
    assert reversed_["permuted"].all() and (reversed_["gate_perm"] == "3,2,1,0").all()
    assert table["paper_acc"].isna().all()  # shapes: no paper row
    npk = pd.read_parquet(tiny_run / "results/tables/npk.parquet")
    assert set(npk["kernel"]) == {"npk", "gate"} and (npk["probe_images"] == 8).all()
    assert (npk["permutation_error"] < 1e-10).all()  # G_ReLU acting on the weights: exact
    assert npk.loc[npk["kernel"] == "npk", "shift_error"].notna().all()
    assert npk["ntk_cka"].dropna().between(-1, 1).all()
    findings = pd.read_csv(tiny_run / "results/tables/gated_findings.csv")
    assert set(findings["verdict"]) <= {"reproduced", "not reproduced", "inconclusive", "not run"}
    assert any("permutation" in f for f in findings["finding"])
    for name in ["gated_accuracy", "gated_permutations", "gated_kernels"]:
        assert (tiny_run / f"results/figures/{name}.png").stat().st_size > 1000
    fl = read_checkpoint(tiny_run / "results/zoo/c4gap_dgn_fl/seed1.pt")["state_dict"]
    source = read_checkpoint(tiny_run / "results/zoo/c4gap/seed1.pt")["state_dict"]
    for key, value in source.items():
        if not key.startswith("fc."):
            assert torch.equal(fl[f"features.{key}"], value), key
    similarity = pd.read_parquet(tiny_run / "results/tables/similarity.parquet")
    gated_pair = similarity[similarity["variant"] == "c4gap_dgn"]
    assert {"gate_cka", "npk_cka"} <= set(gated_pair["measure"])
    assert (gated_pair.loc[gated_pair["measure"] == "npk_cka", "site_a"] == "model").all()
    stitching = pd.read_parquet(tiny_run / "results/tables/stitching.parquet")
    assert set(stitching.loc[stitching["variant"] == "c4gap_dgn", "method"]) == {"grelu", "monomial"}


def test_deqntk_tables_and_figures(tiny_run):
    """The DEQ neural tangent kernel stage: the accuracy study from a Gram in blocks, the depth
    sweep, the kernel reference, the figures; the DEQ-NTK has one accuracy per draw at every depth."""
    table = pd.read_parquet(tiny_run / "results/tables/deqntk.parquet")
    assert list(table.columns[:13]) == [
        "study",
        "dataset",
        "sigma_w2",
        "sigma_u2",
        "sigma_b2",
        "n_train",
        "n_test",
        "depth",
        "draw",
        "panel",
        "preprocessing",
        "readout",
        "test_acc",
    ]
    assert (table["preprocessing"] == "raw").all() and (table["panel"] == "").all()
    assert table["test_acc"].between(0, 1).all() and (table["dataset"] == "shapes").all()
    accuracy = table[table["study"] == "accuracy"]
    assert sorted(accuracy["n_train"]) == [40, 64] and (accuracy["n_test"] == 32).all()
    assert (accuracy["depth"] == "deq").all() and (accuracy["iterations"] > 0).all()
    assert (accuracy["gram_seconds"] > 0).all() and accuracy["paper_acc"].isna().all()  # shapes
    depth = table[table["study"] == "depth"]
    assert sorted(depth["draw"].unique()) == [0, 1] and (depth["n_train"] == 48).all()
    finite = depth[depth["depth"] != "deq"]
    assert sorted(finite["depth"].unique()) == ["1", "2"] and finite["iterations"].isna().all()
    assert (finite[["sigma_w2", "sigma_u2", "sigma_b2"]].to_numpy() == [1.0, 0.0, 0.0]).all()
    assert (finite["ridge"] > 0).all()  # Theta(x, x) / n, the paper's regulariser of these kernels
    equilibrium = depth[depth["depth"] == "deq"]
    assert len(equilibrium) == 2 and (equilibrium["sigma_w2"] == 0.6).all()  # flat: one per draw
    assert (tiny_run / "results/deqntk/gram/w0.6_u0.4_b0/train40.npz").exists()
    reference = pd.read_parquet(tiny_run / "results/tables/kernel_reference.parquet")
    assert list(reference.columns[:6]) == ["variant", "seed", "site", "kernel", "cka", "samples"]
    assert set(zip(reference["variant"], reference["seed"])) == {("myrtle", 0)}
    assert set(reference["kernel"]) == {"grelu_cka", "linear_cka"} and len(reference) == 4 * 2
    assert reference["cka"].dropna().between(-1, 1).all() and (reference["samples"] == 64).all()
    for name in ["deqntk_accuracy", "deqntk_depth", "deqntk_reference"]:
        assert (tiny_run / f"results/figures/{name}.png").stat().st_size > 1000
    for log in ["deqntk/gram/w0.6_u0.4_b0/test0.log", "deqntk/depth/draw0.log", "figures/deqntk.log"]:
        assert (tiny_run / "results/logs" / log).exists()


def test_deqntk_settings_rerun_their_jobs_only(tiny_run, tmp_path):
    """The ridge is read by the regressions and the depth sweep, not by the Gram's blocks; a new
    training-set size within the Gram adds one regression."""
    rerun = {"deqntk_table": 1, "deqntk_figure": 1, "claims": 1, "all": 1}
    config = changed_config(tmp_path, "ridge.yaml", lambda c: c["deqntk"].update(ridge=0.1))
    assert planned_jobs(tiny_run, config) == {"deqntk_regression": 2, "deqntk_depth": 2, **rerun}
    config = changed_config(tmp_path, "sizes.yaml", lambda c: c["deqntk"].update(n_train=[40, 50, 64]))
    assert planned_jobs(tiny_run, config) == {"deqntk_regression": 1, **rerun}
    # the input preprocessing: every DEQ-NTK job, and nothing of another stage
    config = changed_config(tmp_path, "centred.yaml", lambda c: c["deqntk"].update(preprocessing="centred"))
    assert planned_jobs(tiny_run, config) == {
        "deqntk_gram": 3,
        "deqntk_regression": 2,
        "deqntk_depth": 2,
        "kernel_reference_member": 1,
        "kernel_reference_table": 1,
        **rerun,
    }


def test_pullback_tables_and_figures(tiny_run):
    """The excitation-pullback stage: per member the symmetry cosines (exact for permutations in
    every mode and for G_ReLU with per-neuron T; a global T turns under large scalings, except in
    the gated network, whose pullback holds its gates fixed), faithfulness, per pair the agreement."""
    symmetry = pd.read_parquet(tiny_run / "results/tables/pullback_symmetry.parquet")
    assert list(symmetry.columns[:8]) == [
        "variant",
        "seed",
        "group",
        "scale_spread",
        "mode",
        "cos_mean",
        "cos_min",
        "images",
    ]
    assert set(zip(symmetry["variant"], symmetry["seed"])) == {("myrtle", 0), ("c4gap_dgn", 0)}
    assert set(symmetry["mode"]) == {"gradient", "global", "per_neuron"}
    assert set(symmetry["group"]) == {"permutation", "grelu"}
    assert sorted(symmetry["scale_spread"].unique()) == [0.0, 0.5, 2.0]
    assert (symmetry["images"] == 8).all() and (symmetry["logit_change"] < 1e-10).all()
    exact = (symmetry["group"] == "permutation") | (symmetry["mode"] != "global")
    assert (symmetry.loc[exact, "cos_min"] > 1 - 1e-10).all()
    turned = symmetry[~exact & (symmetry["scale_spread"] == 2.0)].set_index("variant")["cos_min"]
    assert turned["myrtle"] < 0.999 and turned["c4gap_dgn"] > 1 - 1e-10
    agreement = pd.read_parquet(tiny_run / "results/tables/pullback_agreement.parquet")
    assert list(agreement.columns[:9]) == [
        "variant",
        "pair",
        "seed_a",
        "seed_b",
        "site",
        "unit_a",
        "unit_b",
        "match_correlation",
        "mode",
    ]
    assert {"logit", "act1", "act4", "value.act1", "value.act4"} >= set(agreement["site"]) > {"logit"}
    assert (agreement["seed_a"] != agreement["seed_b"]).all()
    assert agreement["cos_mean"].dropna().between(-1, 1).all()
    faithfulness = pd.read_parquet(tiny_run / "results/tables/pullback_faithfulness.parquet")
    assert len(faithfulness) == 2 * 3
    assert faithfulness[["deletion_auc", "insertion_auc", "pgd_success"]].stack().between(0, 1).all()
    for curve, prob in zip(faithfulness["deletion_curve"], faithfulness["mean_image_prob"]):
        assert len(curve) == 5 and abs(curve[-1] - prob) < 1e-12
    transfer = pd.read_parquet(tiny_run / "results/tables/pullback_transfer.parquet")
    assert len(transfer) == 2 * 2 * 3  # variants x directions x modes
    assert (transfer["seed_source"] != transfer["seed_other"]).all()
    assert transfer[["source_success", "transfer_success"]].stack().between(0, 1).all()
    summary = pd.read_csv(tiny_run / "results/tables/pullback_summary.csv")
    assert list(summary.columns) == ["variant", "measure", "gradient", "global", "per_neuron"]
    # per variant: the final success, after the first step, the mean over the steps, the probability gain
    assert summary["measure"].str.startswith("PGD transfer across seeds (ours)").sum() == 2 * 4
    for name in [
        "symmetry",
        "agreement",
        "transfer",
        "faithfulness",
        "grid_myrtle",
        "pgd_myrtle",
        "grid_c4gap_dgn",
    ]:
        assert (tiny_run / f"results/figures/pullback_{name}.png").stat().st_size > 1000
    for log in ["pullback/myrtle/seed0.log", "pullback/c4gap_dgn/pair0.log", "tables/pullback.log"]:
        assert (tiny_run / "results/logs" / log).exists()


@pytest.fixture(scope="module")
def report(tiny_run):
    snakemake(tiny_run, "--report", "results/report.html")
    return tiny_run / "results/report.html"


def test_report(tiny_run, report):
    html = report.read_text()
    for item in [
        "zoo_accuracy.png",
        "zoo_summary.csv",
        "symmetry_summary.csv",
        "rotation_penalty.png",
        "stitching_penalty.png",
        "stitching_summary.csv",
        "similarity_cka.png",
        "similarity_summary.csv",
        "similarity_zoo.png",
        "similarity_zoo_summary.csv",
        "dissection_fraction.png",
        "dissection_categories.png",
        "dissection_masks_resnet20.png",
        "dissection_summary.csv",
        "stitching_leaky_relu.png",
        "leaky_relu_accuracy.csv",
        "stitching_alpha_cv.png",
        "stitching_l1_sparsity.png",
        "stitching_softsort.png",
        "stitching_transformer.png",
        "deqntk_accuracy.png",
        "deqntk_depth.png",
        "deqntk_reference.png",
        "pullback_symmetry.png",
        "pullback_grid_myrtle.png",
        "pullback_summary.csv",
        "claims.csv",
    ]:
        assert item in html
    # The opening page shows the scorecard, its claims linked to their figures.
    opening = html.index("Which of the papers' claims this run reproduces")
    assert html.index("The decision rule.") < opening  # stated in plain words before the table
    assert opening < html.index("rotation_penalty.png</a>") < html.index("stitching_penalty.png</a>")
    # The opening gives each variant's seeds, zoo.seeds_per_variant included (tests/test_report_text.py).
    zoo = yaml.safe_load(TINY.read_text())["zoo"]
    for variant in zoo["variants"]:
        n = zoo["seeds_per_variant"].get(variant, zoo["seeds"])
        assert re.search(rf"(?<!\d){n} seeds? (each )?of [^;]*\b{re.escape(variant)}\b", html), variant


# Issue 38, item 7: in a browser window of 1,400 x 1,200 the report opens on the scorecard at a
# glance, every claim's verdict within the first two screens, nothing cut off.
_GLANCE = """
const glance = [...document.querySelectorAll("table")].find(
    (t) => (t.querySelector("caption") || {}).textContent?.startsWith("At a glance"));
if (!glance) return null;
const box = (cell) => { const r = cell.getBoundingClientRect();
    return {top: r.top, bottom: r.bottom, left: r.left, right: r.right, width: r.width}; };
const head = [...glance.rows[0].cells].map((c) => c.textContent.trim());
return {
    window: [innerWidth, innerHeight],
    head: head,
    ours: box(glance.rows[0].cells[head.indexOf("ours")]),
    opening: box(document.querySelector(".prose p")),
    rows: [...glance.rows].slice(1).map((r) => ({
        claim: r.cells[0].textContent.trim(),
        verdict: r.cells[r.cells.length - 1].textContent.trim(),
        box: box(r.cells[r.cells.length - 1]),
    })),
};
"""


def test_report_opens_on_the_verdicts_in_chromium(tiny_run, report):
    seen = chromium.measure(report, _GLANCE)
    assert seen is not None, "the report's opening page has no 'At a glance' table"
    width, height = seen["window"]
    assert seen["head"] == ["claim", "what it tests", "ours", "paper", "verdict"]
    claims = pd.read_csv(tiny_run / "results/tables/claims.csv", keep_default_na=False)
    rows = glance_rows(claims[claims["kind"] == "paper"])  # one per claim tested, the rest in one
    assert [row["claim"] for row in seen["rows"]] == [row["claim"] for row in rows]
    assert [row["verdict"] for row in seen["rows"]] == [row["verdict"] for row in rows]
    # Snakemake's page centres a long description, which would put its top above the window.
    assert 0 <= seen["opening"]["top"] < height
    assert seen["ours"]["width"] >= 150, seen["ours"]
    for row in seen["rows"]:
        box = row["box"]
        assert 0 <= box["top"] and box["bottom"] <= 2 * height, row
        assert 0 <= box["left"] and box["right"] <= width, row


# Issue 55, item 6: at 1,400 px nothing scrolls sideways, on the opening page and with each
# category of results opened in the menu (which widens the menu), and every table's verdict column
# stays on screen; each verdict is coloured, its words kept.
_SIDEWAYS = """
const pause = (ms) => new Promise((done) => setTimeout(done, ms));
const scrolled = () => [...document.querySelectorAll("*")].filter((el) => {
    const overflow = getComputedStyle(el).overflowX;
    const scrolls = overflow == "auto" || overflow == "scroll" || el === document.documentElement;
    return scrolls && el.scrollWidth > el.clientWidth + 1;
}).map((el) => `${el.tagName}.${el.className}: ${el.scrollWidth} > ${el.clientWidth}`);
const verdicts = () => [...document.querySelectorAll("table")].filter((t) => t.querySelector("caption")).map((t) => {
    const content = t.closest(".overflow-auto").getBoundingClientRect();
    const column = [...t.rows[0].cells].findIndex((c) => c.textContent.trim() == "verdict");
    const right = Math.max(...[...t.rows].map((r) => r.cells[column].getBoundingClientRect().right));
    return {table: t.querySelector("caption").textContent, right: right, visible: content.left + t.closest(".overflow-auto").clientWidth};
});
const state = (name) => ({name: name, menu: document.querySelector("nav").getBoundingClientRect().width,
                          scrolled: scrolled(), verdicts: verdicts()});
const seen = [state("opening")];
const names = [...document.querySelectorAll("nav a span")].map((s) => s.textContent);
for (const name of names.slice(names.indexOf("About") + 1)) {
    [...document.querySelectorAll("nav a")].find((a) => a.textContent == name).click();
    await pause(300);
    seen.push(state(name));
    app.setView({navbarMode: "menu", content: "rulegraph"});  // back to the menu (Snakemake's global app)
    await pause(300);
}
const colours = {};
for (const span of document.querySelectorAll("span.verdict")) {
    colours[span.className] = colours[span.className] || {text: new Set(), background: getComputedStyle(span).backgroundColor};
    colours[span.className].text.add(span.textContent);
}
for (const c of Object.values(colours)) c.text = [...c.text];
return {window: [innerWidth, innerHeight], states: seen, colours: colours};
"""


def test_report_fits_the_window_with_any_category_open_in_chromium(tiny_run, report):
    seen = chromium.measure(report, _SIDEWAYS)
    assert seen["window"][0] == 1400
    assert len(seen["states"]) > 5  # the opening and each category of results
    for state in seen["states"]:
        assert state["scrolled"] == [], state
        assert len(state["verdicts"]) >= 2, state  # the glance and the full table
        for table in state["verdicts"]:
            assert table["right"] <= table["visible"], (state["name"], table)
    claims = pd.read_csv(tiny_run / "results/tables/claims.csv", keep_default_na=False)
    colours = seen["colours"]
    assert {f"verdict verdict-{v.replace(' ', '-')}" for v in claims["verdict"]} <= set(colours)
    for role, found in colours.items():
        assert found["text"] == [role.removeprefix("verdict verdict-").replace("-", " ")], role
    backgrounds = [found["background"] for found in colours.values()]
    assert len(set(backgrounds)) == len(backgrounds) and "rgba(0, 0, 0, 0)" not in backgrounds


def test_rerun_has_nothing_to_do(tiny_run):
    assert planned_jobs(tiny_run) == {}


def test_zoo_change_reruns_zoo_and_downstream(tiny_run, tmp_path):
    config = changed_config(tmp_path, "epochs.yaml", lambda c: c["zoo"]["training"].update(epochs=3))
    assert planned_jobs(tiny_run, config) == {
        "train_member": 14,
        "train_pack": 3,  # c4gap_dgn's seeds 0-1 and 2, c4gap_dgn_fl's 0-1
        "unpack_member": 5,
        "zoo_table": 1,
        "zoo_figure": 1,
        "symmetry_check": 7,
        "symmetry_table": 1,
        "rotation_trial": 2,
        "rotation_table": 1,
        "rotation_figure": 1,
        "all": 1,
        "stitch_pair": 14,
        "stitching_table": 1,
        "stitching_figure": 1,
        "stitching_studies_figure": 1,
        "similarity_pair": 4,
        "similarity_table": 1,
        "similarity_figure": 1,
        "similarity_zoo": 1,
        "similarity_zoo_table": 1,
        "similarity_zoo_figure": 1,
        "connectivity_pair": 2,
        "connectivity_table": 1,
        "connectivity_figure": 1,
        "dissect_member": 2,
        "dissection_table": 1,
        "dissection_figure": 1,
        "dissection_masks": 2,
        "kernel_reference_member": 1,
        "kernel_reference_table": 1,
        "deqntk_figure": 1,  # the zoo's accuracies beside the kernel's
        "npk_member": 4,
        "gated_ensemble": 1,
        "gated_table": 1,
        "gated_figure": 1,
        "claims": 1,
        **PULLBACK_RERUN,
    }


def test_figure_change_reruns_figures_only(tiny_run, tmp_path):
    config = changed_config(tmp_path, "dpi.yaml", lambda c: c["figures"].update(dpi=61))
    assert planned_jobs(tiny_run, config) == {
        "zoo_figure": 1,
        "rotation_figure": 1,
        "stitching_figure": 1,
        "stitching_studies_figure": 1,
        "similarity_figure": 1,
        "similarity_zoo_figure": 1,
        "connectivity_figure": 1,
        "dissection_figure": 1,
        "dissection_masks": 2,
        "deqntk_figure": 1,
        "pullback_images": 2,
        "pullback_figure": 1,
        "gated_figure": 1,
        "all": 1,
    }


def test_settings_that_cannot_change_a_result_rerun_nothing(tiny_run, tmp_path):
    """zoo.training.eval_batch_size (cuda_graphs and compile too, for packs) reaches the jobs as a
    resources entry and threads as the rules' threads, neither a rerun trigger; the job's command
    still carries them, so it replays."""
    config = changed_config(
        tmp_path,
        "speed.yaml",
        lambda c: (
            c["zoo"]["training"].update(
                eval_batch_size=7, threads=2, cuda_graphs=False, compile="default", pack_mode="streams"
            ),
            c["zoo"].update(training_per_variant={"convnext": {"eval_batch_size": 5}}),
        ),
    )
    assert planned_jobs(tiny_run, config) == {}
    command = (tiny_run / "results/logs/zoo/myrtle/seed0.log").read_text().splitlines()[0]
    assert command.startswith("intertwine train-member ") and " --eval-batch-size 1000 " in command
    pack = next((tiny_run / "results/logs/zoo").glob("*/packs/*.log")).read_text().splitlines()[0]
    assert (
        pack.startswith("intertwine train-pack ")
        and " --cuda-graphs 1 --pack-mode wide --compile none " in pack
    )
    # stitching.eval_batch_size is also the batch of the batch-norm refresh, so it changes the
    # stitched accuracy (settings.StitchConfig): its jobs rerun.
    config = changed_config(tmp_path, "stitch_eval.yaml", lambda c: c["stitching"].update(eval_batch_size=7))
    assert planned_jobs(tiny_run, config) == {"stitch_pair": 14, **STITCHING_RERUN}


def test_per_variant_training_retrains_that_variant_only(tiny_run, tmp_path):
    config = changed_config(
        tmp_path,
        "convnext_lr.yaml",
        lambda c: c["zoo"].update(training_per_variant={"convnext": {"lr": 0.004}}),
    )
    assert planned_jobs(tiny_run, config) == {
        "train_member": 1,
        "zoo_table": 1,
        "zoo_figure": 1,
        "dissect_member": 1,
        "dissection_table": 1,
        "dissection_figure": 1,
        "dissection_masks": 2,
        "stitching_studies_figure": 1,  # its LeakyReLU table reads the zoo's accuracies
        "deqntk_figure": 1,  # so does the DEQ-NTK's accuracy figure
        "gated_table": 1,  # and the gated study's table (its variants' rows are unchanged)
        "gated_figure": 1,
        "claims": 1,  # the scorecard reads every stage's table
        "all": 1,
    }


STITCHING_RERUN = {
    "stitching_table": 1,
    "stitching_figure": 1,
    "stitching_studies_figure": 1,
    "claims": 1,
    "all": 1,
}
# every job of the pullback stage (member, pair and images: myrtle and c4gap_dgn)
PULLBACK_RERUN = {
    "pullback_member": 2,
    "pullback_pair": 2,
    "pullback_images": 2,
    "pullback_table": 1,
    "pullback_figure": 1,
}


@pytest.mark.parametrize(
    "change, jobs",
    [
        # grelu of myrtle, resnet20, myrtle_leaky, cct and c4gap_dgn, and c4gap_dgn's monomial
        ({"alpha": 0.2}, 6),
        ({"sinkhorn_iters": 8}, 7),  # and grelu_cv
        ({"alpha_grid": [0.5, 1.0]}, 1),
        ({"softsort_tau": 0.05}, 1),
        ({"settings_per_method": {"l1": {"epochs": 3}}}, 1),
        ({"l1_lambdas": [0.01, 0.1]}, 1),  # a new method; the existing l1_0.01 job stays
    ],
)
def test_method_setting_reruns_that_methods_jobs_only(tiny_run, tmp_path, change, jobs):
    config = changed_config(tmp_path, "method.yaml", lambda c: c["stitching"].update(change))
    assert planned_jobs(tiny_run, config) == {"stitch_pair": jobs, **STITCHING_RERUN}


@pytest.mark.parametrize(
    "module, function, reruns",
    [
        (
            "workflow/plotting.py",
            "mean_ci",  # the figure jobs of every stage whose figures draw an interval
            {
                "zoo_figure": 1,
                "rotation_figure": 1,
                "stitching_figure": 1,
                "stitching_studies_figure": 1,
                "similarity_figure": 1,
                "similarity_zoo_figure": 1,  # the stage's figures module is its entry
                "connectivity_figure": 1,
                "dissection_figure": 1,
                "dissection_masks": 2,
                "deqntk_figure": 1,
                "all": 1,
            },
        ),
        (
            "workflow/stages/pullback/figures.py",
            "pullback_grid",  # one stage's figures: its figure jobs only (the module is their entry)
            {"pullback_images": 2, "pullback_figure": 1, "all": 1},
        ),
        (
            "rotation.py",
            "rotation_trial",
            {"rotation_trial": 2, "rotation_table": 1, "rotation_figure": 1, "claims": 1, "all": 1},
        ),
        ("stitching/fitting.py", "stitch_site", {"stitch_pair": 14, **STITCHING_RERUN}),
        # weight matching is the connectivity stage's alone
        (
            "network_alignment.py",
            "weight_matching",
            {
                "connectivity_pair": 2,
                "connectivity_table": 1,
                "connectivity_figure": 1,
                "claims": 1,
                "all": 1,
            },
        ),
        # only stitching matches with match_grelu (the pullback stage: measures.match_channels)
        ("stitching/matching.py", "match_grelu", {"stitch_pair": 14, **STITCHING_RERUN}),
        (
            "measures/cka.py",
            "linear_cka",
            # the gated figure reads the similarity table too; the zoo view computes linear CKA
            {
                "similarity_pair": 4,
                "similarity_table": 1,
                "similarity_figure": 1,
                "similarity_zoo": 1,
                "similarity_zoo_table": 1,
                "similarity_zoo_figure": 1,
                "gated_figure": 1,
                "claims": 1,
                "all": 1,
            },
        ),
        (
            "measures/cka.py",
            "kernel_cka",
            {
                "similarity_pair": 4,
                "similarity_table": 1,
                "similarity_figure": 1,
                # the gated stage's kernels use gate_cka's kernel and CKA
                "npk_member": 4,
                "gated_table": 1,
                "gated_figure": 1,
                # the kernel reference computes the similarity measures' kernels
                "kernel_reference_member": 1,
                "kernel_reference_table": 1,
                "deqntk_figure": 1,
                "claims": 1,
                "all": 1,
            },
        ),
        (
            "workflow/stages/dissection/rows.py",
            "dissect_sites",
            {
                "dissect_member": 2,
                "dissection_table": 1,
                "dissection_figure": 1,
                "dissection_masks": 2,
                "claims": 1,
                "all": 1,
            },
        ),
    ],
)
def test_later_stage_code_change_does_not_retrain(tiny_run, source_copy, module, function, reruns):
    """A function's code edited: the jobs that run it rerun, with what reads them; nothing else."""
    assert planned_after_edit(tiny_run, source_copy, module, function) == reruns


def test_an_edit_undone_reruns_nothing(tiny_run, source_copy):
    """The identity is the code's, not the file's time: an edit and its undoing leave nothing to run."""
    path, original, edited = edited_function(source_copy, "workflow/plotting.py", "mean_ci")
    path.write_text(edited)
    path.write_bytes(original)
    assert planned_jobs(tiny_run, source=source_copy) == {}


def planned_after_edit(workdir, source, module: str, function: str) -> dict[str, int]:
    """The jobs Snakemake plans in ``workdir`` running the package copy ``source`` while one of
    its functions is edited (``edited_function``); the copy is restored whatever happens."""
    path, original, edited = edited_function(source, module, function)
    try:
        path.write_text(edited)
        return planned_jobs(workdir, source=source)
    finally:
        path.write_bytes(original)


def edited_function(source, module: str, function: str, statement: str = "_edited_by_a_test = 1"):
    """(path, original bytes, edited text): ``statement`` put first in the body of a top-level
    function (or a method, ``"Class.method"``) of a module of the package copy in ``source``, after
    its docstring."""
    import ast

    path = source / "intertwine" / module
    original = path.read_bytes()
    lines = original.decode().splitlines(keepends=True)
    node = ast.parse(original)
    for name in function.split("."):
        node = next(n for n in node.body if getattr(n, "name", None) == name)
    first = node.body[1] if ast.get_docstring(node) else node.body[0]
    indent = " " * first.col_offset
    lines.insert(first.lineno - 1, f"{indent}{statement}\n")
    return path, original, "".join(lines)


@pytest.mark.parametrize(
    "module, edit",
    [
        ("training.py", lambda text: text.replace('"""', '"""Edited. ', 1)),  # the module docstring
        ("training.py", lambda text: text.replace("def train(", "# a comment\ndef train(", 1)),
        (
            "measures/cca.py",
            lambda text: text + "\n\ndef a_new_measure(x):\n    return x\n",
        ),  # used by nothing
        ("models/__init__.py", lambda text: text.replace("\n\n", "\n\n\n", 1)),  # formatting
    ],
    ids=["docstring", "comment", "new unused function", "blank lines"],
)
def test_edits_that_change_no_code_a_job_runs_rerun_nothing(tiny_run, source_copy, module, edit):
    path = source_copy / "intertwine" / module
    original = path.read_bytes()
    try:
        path.write_text(edit(original.decode()))
        assert planned_jobs(tiny_run, source=source_copy) == {}
    finally:
        path.write_bytes(original)


def test_editing_a_measure_reruns_the_jobs_that_compute_it(tiny_run, source_copy):
    """SVCCA (measures/cca.py) is computed by the similarity jobs; nothing else reruns but what reads them."""
    jobs = planned_after_edit(tiny_run, source_copy, "measures/cca.py", "svcca")
    assert jobs["similarity_pair"] == 4 and jobs["similarity_table"] == 1
    assert not {"train_member", "train_pack", "stitch_pair", "rotation_trial", "dissect_member"} & set(jobs)


def test_editing_the_gated_findings_reruns_the_table_that_holds_them(tiny_run, source_copy):
    """The findings are computed by the gated table's job (gated.findings), not by a job of the stage:
    editing them reruns that table and what reads it, no training and no kernel."""
    jobs = planned_after_edit(tiny_run, source_copy, "workflow/stages/gated/study.py", "findings")
    assert jobs.get("gated_table") == 1
    assert not {"train_member", "train_pack", "npk_member", "similarity_pair"} & set(jobs)


def test_editing_a_read_only_model_helper_retrains_nothing(tiny_run, source_copy):
    """site_activations reads a trained model: the stages that read activations rerun, the zoo does not."""
    jobs = planned_after_edit(tiny_run, source_copy, "models/__init__.py", "site_activations")
    assert jobs.get("similarity_pair") == 4
    assert not {"train_member", "train_pack", "unpack_member", "zoo_table"} & set(jobs)


def planned_variants_after_edit(workdir, source, module: str, function: str) -> dict[str, list[str]]:
    """{rule: the zoo variant of each of its planned jobs} (``""`` for a job without a ``variant``
    wildcard) of a dry run with one function or method of the package copy edited."""
    path, original, edited = edited_function(source, module, function)
    try:
        path.write_text(edited)
        result = snakemake(workdir, "-n", source=source)
    finally:
        path.write_bytes(original)
    planned: dict[str, list[str]] = {}
    output = result.stdout + result.stderr
    for job in re.finditer(r"^(?:local)?rule (\w+):\n((?:[ \t]+.*\n?)*)", output, re.M):
        variant = re.search(r"^\s+wildcards:.*\bvariant=([\w-]+)", job[2], re.M)
        planned.setdefault(job[1], []).append(variant[1] if variant else "")
    return planned


# What reads a variant's members in tests/configs/tiny.yaml beyond its own jobs: the tables, figures
# and scorecard that collect every variant's rows, and each dissection masks figure, drawn after
# the dissection table.
COLLECTING = {
    "zoo_table": 1,
    "zoo_figure": 1,
    "symmetry_table": 1,
    "stitching_table": 1,
    "stitching_figure": 1,
    "stitching_studies_figure": 1,
    "gated_table": 1,  # it reads the zoo table
    "gated_figure": 1,
    "deqntk_figure": 1,  # the zoo's accuracies beside the kernel's
    "claims": 1,
    "all": 1,
}


@pytest.mark.parametrize(
    "module, method, variants, reruns",
    [
        (
            "models/myrtle.py",
            "Myrtle.forward",
            {"myrtle", "myrtle_leaky"},
            {
                "train_member": 5,  # myrtle's 3 seeds, myrtle_leaky's 2
                "symmetry_check": 2,
                "stitch_pair": 7,
                "similarity_pair": 2,
                "rotation_trial": 2,
                "pullback_member": 1,
                "pullback_pair": 1,
                "pullback_images": 1,
                "kernel_reference_member": 1,
                "kernel_reference_table": 1,
                "similarity_table": 1,
                "similarity_figure": 1,
                "similarity_zoo": 1,  # the zoo view of myrtle's members
                "similarity_zoo_table": 1,
                "similarity_zoo_figure": 1,
                "rotation_table": 1,
                "rotation_figure": 1,
                "pullback_table": 1,
                "pullback_figure": 1,
                **COLLECTING,
            },
        ),
        (
            "models/resnet.py",
            "BasicBlock.forward",
            {"resnet20"},
            {
                "train_member": 2,
                "symmetry_check": 1,
                "stitch_pair": 3,
                "connectivity_pair": 1,
                "dissect_member": 1,
                "dissection_masks": 2,  # convnext's too: drawn after the dissection table
                "connectivity_table": 1,
                "connectivity_figure": 1,
                "dissection_table": 1,
                "dissection_figure": 1,
                **COLLECTING,
            },
        ),
    ],
    ids=["Myrtle", "ResNet"],
)
def test_editing_one_model_reruns_its_members_and_their_consumers_only(
    tiny_run, source_copy, module, method, variants, reruns
):
    """A behaviour-preserving edit of one architecture's forward pass: that architecture's members
    retrain and the jobs reading them rerun, with what collects their rows; no other variant's
    member, and no DEQ-NTK kernel job (those build no model)."""
    planned = planned_variants_after_edit(tiny_run, source_copy, module, method)
    assert {rule: len(jobs) for rule, jobs in planned.items()} == reruns
    assert set(planned["train_member"]) == variants
    per_variant = {
        variant for rule, jobs in planned.items() if rule != "dissection_masks" for variant in jobs
    }
    assert per_variant - {""} == variants
    assert not {"deqntk_gram", "deqntk_regression", "deqntk_depth"} & set(planned)


def test_editing_the_training_loop_reruns_the_zoo_and_stops_at_its_checkpoints(tiny_run, source_copy):
    path, original, edited = edited_function(source_copy, "training.py", "train")
    checkpoints = sorted((tiny_run / "results/zoo").rglob("*.pt"))
    before = [checkpoint.read_bytes() for checkpoint in checkpoints]
    try:
        path.write_text(edited)
        jobs = planned_jobs(tiny_run, source=source_copy)
        result = snakemake(
            tiny_run, "--until", "train_member", check=False, as_non_root=True, source=source_copy
        )
    finally:
        path.write_bytes(original)
    assert jobs["train_member"] > 0 and jobs["zoo_table"] == 1
    assert result.returncode != 0 and "protected" in result.stderr.lower()
    assert [checkpoint.read_bytes() for checkpoint in checkpoints] == before
    assert planned_jobs(tiny_run) == {}


def test_editing_packed_training_reruns_the_packs_not_the_members_trained_alone(tiny_run, source_copy):
    """train_member and train_pack have identities of their own: a member trained alone does not
    run the packed loop, so an edit there reruns the packs (and what reads their members) only."""
    path, original, edited = edited_function(source_copy, "packed_training.py", "train_stacked")
    try:
        path.write_text(edited)
        jobs = planned_jobs(tiny_run, source=source_copy)
    finally:
        path.write_bytes(original)
    assert jobs.get("train_pack", 0) > 0 and "train_member" not in jobs, jobs


def test_protected_checkpoint_is_not_retrained_silently(tiny_run, tmp_path):
    config = changed_config(tmp_path, "epochs.yaml", lambda c: c["zoo"]["training"].update(epochs=3))
    checkpoints = sorted((tiny_run / "results/zoo").rglob("*.pt"))
    before = [checkpoint.read_bytes() for checkpoint in checkpoints]
    result = snakemake(tiny_run, "--until", "train_member", config=config, check=False, as_non_root=True)
    assert result.returncode != 0
    # Which member's job meets its protected checkpoint first depends on the scheduling order.
    assert "protected" in result.stderr.lower()
    assert re.search(r"results/zoo/\w+/seed\d+\.pt", result.stderr)
    assert [checkpoint.read_bytes() for checkpoint in checkpoints] == before
    assert planned_jobs(tiny_run) == {}


def test_deleted_member_of_a_pack_is_linked_again_not_retrained(tiny_run):
    """A member of a pack whose checkpoint is deleted comes back from its pack (unpack_member, a
    link: the same bytes and modification time, so what read it does not rerun); the pack and the
    other members are not touched."""
    zoo = tiny_run / "results/zoo/c4gap_dgn"
    others = {
        path: (path.stat().st_ino, path.stat().st_mtime_ns) for path in (zoo / "seed1.pt", zoo / "seed2.pt")
    }
    (zoo / "seed0.pt").unlink()
    # Snakemake remakes a missing intermediate file when asked for it (or when a job reading it reruns).
    assert planned_jobs(tiny_run, TINY, "results/zoo/c4gap_dgn/seed0.pt") == {"unpack_member": 1}
    snakemake(tiny_run, "results/zoo/c4gap_dgn/seed0.pt")
    assert (zoo / "seed0.pt").stat().st_ino == (zoo / "packs/seeds0-1/seed0.pt").stat().st_ino
    assert {path: (path.stat().st_ino, path.stat().st_mtime_ns) for path in others} == others
    assert planned_jobs(tiny_run) == {}


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c["zoo"]["training"].update(epoch=3), "config key zoo.training.epoch: unknown key"),
        (lambda c: c["zoo"].update(seeds="two"), "config key zoo.seeds: 'two' is not of type 'integer'"),
        (
            lambda c: c["zoo"]["variants"].update(bad={"arch": "resnet20", "constant_width": 8}),
            "config key zoo.variants.bad: unknown model option 'constant_width'",
        ),
        (lambda c: c["zoo"]["variants"].update(bad={"arch": "vgg"}), "config key zoo.variants.bad.arch"),
        (
            lambda c: c["zoo"].update(seeds=1),
            "config key stitching.variants: stitching pairs need at least 2",
        ),
        (
            lambda c: c["stitching"].update(methods_per_variant={"myrtle": ["orthogonal"]}),
            "config key stitching.methods_per_variant.myrtle.0: 'orthogonal' is not one of",
        ),
        (
            lambda c: c["stitching"].update(settings_per_method={"lasso": {"epochs": 3}}),
            "stitching.settings_per_method",
        ),
        (lambda c: c["zoo"]["variants"]["cct"].update(depth=0), "config key zoo.variants.cct.depth"),
    ],
)
def test_config_errors_name_the_key(tmp_path, change, message):
    """Schema errors, and the plan's cross-checks (each tested in test_plan.py) as Snakemake shows them."""
    result = snakemake(tmp_path, "-n", config=changed_config(tmp_path, "bad.yaml", change), check=False)
    assert result.returncode != 0
    assert message in result.stdout + result.stderr


def test_a_key_written_twice_or_a_yte_template_stops_the_run(tmp_path):
    """Snakemake reads the config files itself: it kept the last of two ``symmetry:`` blocks and
    ran a file with ``__use_yte__: true`` as a template, while check-config refused only the latter."""
    twice = tmp_path / "twice.yaml"
    twice.write_text(TINY.read_text() + "symmetry:\n  seeds: 1\n")
    result = snakemake(tmp_path / "run", "-n", config=twice, check=False)
    assert result.returncode != 0
    assert re.search(
        rf"{twice}: key symmetry is written twice, on lines \d+ and \d+;", result.stdout + result.stderr
    )
    template = tmp_path / "template.yaml"
    template.write_text("__use_yte__: true\n" + TINY.read_text())
    result = snakemake(tmp_path / "run", "-n", config=template, check=False)
    assert result.returncode != 0
    assert f"{template}: key __use_yte__: it would make Snakemake run the file as a YTE template" in (
        result.stdout + result.stderr
    )
    assert "no job has run" in result.stdout + result.stderr


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without a GPU")
def test_cuda_device_without_a_gpu_stops_before_any_job(tmp_path):
    """It failed only after the data stage, in the first torch job. (With a cluster executor the
    check is left to the jobs: a login node has no GPU while the jobs do.)"""
    config = changed_config(tmp_path, "cuda.yaml", lambda c: c.update(device="cuda"))
    result = snakemake(tmp_path / "run", config=config, check=False)
    assert result.returncode != 0
    assert re.search(
        r"config key device: 'cuda', but no CUDA GPU is visible here .*, and this run executes its "
        r"jobs on this machine, so every torch job would fail\. Set device: auto .* or device: cpu",
        result.stderr,
    ), result.stderr[-3000:]
    assert not (tmp_path / "run" / "results").exists()  # not even the data stage ran
    assert snakemake(tmp_path / "run", "-n", config=config).returncode == 0  # a dry run plans as before


def test_killed_training_leaves_no_checkpoint_and_rerun_completes(tmp_path):
    config = changed_config(
        tmp_path,
        "slow.yaml",
        lambda c: (
            c["zoo"].update(
                seeds=1,
                seeds_per_variant={},
                pack_size_per_variant={},
                variants={"myrtle": c["zoo"]["variants"]["myrtle"]},
            ),
            c["zoo"]["training"].update(epochs=200),
            c["stitching"].update(variants=[], sites={}, methods_per_variant={}),
            c["similarity"].update(variants=[]),
            c["similarity"]["zoo"].update(variants=[], sites={}),
            c["connectivity"].update(variants=[]),
            c["dissection"].update(variants=[]),
            c["gated"].update(variants=[]),
            c["pullback"].update(variants=[]),
        ),
    )
    workdir = tmp_path / "run"
    process = snakemake(
        workdir, config=config, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    log = workdir / "results/logs/zoo/myrtle/seed0.log"
    deadline = time.time() + 120
    while not (log.exists() and "epoch 2/" in log.read_text()):
        assert time.time() < deadline and process.poll() is None, "training never started"
        time.sleep(0.5)
    os.killpg(process.pid, signal.SIGKILL)  # snakemake and its job, as a lost node would
    process.wait()
    assert not list((workdir / "results/zoo").rglob("*.pt"))
    snakemake(workdir, "--unlock", config=config)
    finished = changed_config(
        tmp_path,
        "slow.yaml",
        lambda c: (
            c["zoo"].update(
                seeds=1,
                seeds_per_variant={},
                pack_size_per_variant={},
                variants={"myrtle": c["zoo"]["variants"]["myrtle"]},
            ),
            c["stitching"].update(variants=[], sites={}, methods_per_variant={}),
            c["similarity"].update(variants=[]),
            c["similarity"]["zoo"].update(variants=[], sites={}),
            c["connectivity"].update(variants=[]),
            c["dissection"].update(variants=[]),
            c["gated"].update(variants=[]),
            c["pullback"].update(variants=[]),
        ),
    )
    checkpoint = "results/zoo/myrtle/seed0.pt"
    snakemake(workdir, checkpoint, config=finished)  # --rerun-incomplete comes from the default profile
    assert (workdir / checkpoint).exists()
    assert planned_jobs(workdir, finished, checkpoint) == {}


def test_lint_is_clean(tmp_path):
    result = snakemake(tmp_path, "--lint")
    assert "Congratulations, your workflow is in a good condition" in result.stdout + result.stderr


def test_runs_from_an_environment_that_is_not_activated(tmp_path):
    """`.venv/bin/snakemake` without `source .venv/bin/activate`: the jobs still find `intertwine`."""
    bare = os.environ | {"PATH": "/usr/bin:/bin"}
    command = [
        str(Path(sys.executable).parent / "snakemake"),
        "-s",
        str(REPO / "workflow" / "Snakefile"),
        "-d",
        str(tmp_path),
        "--configfile",
        str(TINY),
        "--cores",
        "1",
        "--until",
        "prepare_data",
    ]
    result = subprocess.run(command, env=bare, capture_output=True, text=True)
    log = tmp_path / "results/logs/data/shapes.log"
    assert result.returncode == 0, result.stderr[-2000:] + (log.read_text() if log.exists() else "")
    assert (tmp_path / "results/data/shapes/meta.json").exists()


def test_a_file_of_overrides_plans_the_default_run_with_its_change(tmp_path):
    """`--configfile my.yaml` holding only `zoo: {training: {epochs: 2}}` plans every job of the
    default run (before: the schema's one-variant zoo, 12 jobs), each training job with 2 epochs
    and the rest of the default's recipe (batch 32, its learning rates)."""
    default = REPO / "config" / "config.yaml"
    overrides = tmp_path / "epochs.yaml"
    overrides.write_text("zoo:\n  training: {epochs: 2}\n")

    def dry_run(config):
        result = snakemake(tmp_path / "run", "-n", "-p", config=config)
        text = result.stdout + result.stderr
        counts = {m[1]: int(m[2]) for m in re.finditer(r"^(\w+)\s+(\d+)$", text, re.M) if m[1] != "count"}
        training = sorted(
            set(re.findall(r"^Shell command: (intertwine train-(?:member|pack) .*)$", text, re.M))
        )
        return counts, training

    counts, training = dry_run(default)
    assert counts["total"] > 100 and counts["train_member"] > 10 and training
    assert all('"epochs": 4' in line and '"batch_size": 32' in line for line in training)
    changed_counts, changed_training = dry_run(overrides)
    assert changed_counts == counts
    assert changed_training == [line.replace('"epochs": 4', '"epochs": 2') for line in training]


def test_a_missing_data_folder_stops_the_run_before_its_first_job(tmp_path):
    config = changed_config(
        tmp_path, "cifar.yaml", lambda c: c["data"].update(dataset="cifar10", cifar10={"root": "nowhere"})
    )
    result = snakemake(tmp_path / "run", "--until", "prepare_data", config=config, check=False)
    assert result.returncode != 0
    root = tmp_path / "run" / "nowhere"
    assert f"config key data.cifar10.root (nowhere): {root} is not a directory" in result.stderr
    assert not (tmp_path / "run" / "results" / "logs").exists()  # no job ran
    assert snakemake(tmp_path / "run", "--until", "prepare_data", "-n", config=config).returncode == 0
