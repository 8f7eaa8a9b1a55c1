"""The appendix stitching studies' figures and their command: drawn from synthetic tables with the
stitching table's columns, checked by what they plot."""

from __future__ import annotations

import json
import subprocess
import sys

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PathCollection
from matplotlib.container import BarContainer, ErrorbarContainer

from intertwine.workflow.settings import G_RELU_METHODS
from intertwine.workflow.stages.stitching.figures import (
    _l1_lambda,
    _method_order,
    _method_style,
    alpha_selection,
    l1_sparsity,
    leaky_relu_accuracy,
    leaky_relu_penalty,
    softsort_comparison,
    stitching_penalty,
    stitching_summary,
    transformer_penalty,
)

GRID = [1e-3, 1e-2, 0.1, 1.0, 10.0]


def stitching_rows(
    variants=("myrtle", "resnet20"),
    sites=("act1", "act2", "act3"),
    methods=("full", "rank1", "grelu"),
    pairs=3,
    channels=8,
    seed=0,
) -> pd.DataFrame:
    """One row per (variant, pair, site, method) with every column of the stitching table."""
    rng = np.random.default_rng(seed)
    rows = []
    for variant in variants:
        for pair in range(pairs):
            for k, site in enumerate(sites):
                for method in methods:
                    acc_a, acc_b, acc = 0.9, 0.88, 0.89 - rng.uniform(0, 0.3)
                    grelu = method in G_RELU_METHODS
                    l1 = _l1_lambda(method)
                    alpha = GRID[(pair + k) % len(GRID)] if method == "grelu_cv" else (0.1 if grelu else None)
                    rows.append(
                        {
                            "variant": variant,
                            "pair": pair,
                            "seed_a": 2 * pair,
                            "seed_b": 2 * pair + 1,
                            "site": site,
                            "inside_residual": k == 1,
                            "method": method,
                            "rank": int(method[4:]) if method.startswith("rank") else None,
                            "alpha": alpha,
                            "acc_a": acc_a,
                            "acc_b": acc_b,
                            "acc_stitched": acc,
                            "penalty": (acc_a + acc_b) / 2 - acc,
                            "stitch_params": channels if grelu else channels**2,
                            "trainable_params": channels**2 + channels if grelu else channels**2,
                            "channels": channels,
                            "epochs": 1,
                            "train_seconds": (12.0 if method == "softsort" else 1.0) * (1 + rng.uniform()),
                            "permutation": list(rng.permutation(channels)) if grelu else None,
                            "scales": list(rng.uniform(0.5, 2, channels)) if grelu else None,
                            "penalty_start": (acc_a + acc_b) / 2 - acc + 0.02,
                            "off_permutation_mass": 0.1 if grelu else None,
                            "device": "cpu",
                            "off_permutation_mass_by_epoch": [0.3, 0.1] if grelu else None,
                            "config_hash": "abc",
                            "version": "0",
                            "l1_lambda": l1,
                            "sparsity": 1 - 1 / channels if grelu else (min(1.0, 50 * l1) if l1 else 0.0),
                            "alpha_selected": alpha if method == "grelu_cv" else None,
                            "cv_alphas": GRID if method == "grelu_cv" else None,
                            "cv_accuracies": list(rng.uniform(0.5, 0.9, len(GRID)))
                            if method == "grelu_cv"
                            else None,
                        }
                    )
    return pd.DataFrame(rows)


SLOPES = {"resnet20": 0.0, "leaky_0.01": 0.01, "leaky_0.5": 0.5}


def zoo_rows(slopes=SLOPES, members=4) -> pd.DataFrame:
    rows = []
    for i, variant in enumerate(slopes):
        for seed in range(members):
            rows.append(
                {
                    "variant": variant,
                    "seed": seed,
                    "val_acc": 0.8,
                    "test_acc": 0.80 + 0.01 * i + 0.002 * seed,
                    "n_params": 1000,
                    "epochs": 1,
                    "best_epoch": 0,
                    "train_seconds": 1.0,
                    "device": "cpu",
                    "checkpoint": f"{variant}/{seed}.pt",
                    "config_hash": "abc",
                    "version": "0",
                }
            )
    return pd.DataFrame(rows)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def data_axes(fig):
    return [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]


def errorbars(ax):
    return [c for c in ax.containers if isinstance(c, ErrorbarContainer)]


def test_new_methods_are_ordered_labelled_and_shaded():
    methods = ["grelu", "softsort", "l1_0.01", "rank2", "grelu_cv", "full", "l1_0.001", "rank1"]
    assert _method_order(methods) == [
        "full",
        "l1_0.001",
        "l1_0.01",
        "rank1",
        "rank2",
        "grelu",
        "grelu_cv",
        "softsort",
    ]
    assert _l1_lambda("l1_0.01") == 0.01 and _l1_lambda("full") is None
    assert _method_style("l1_0.001", methods)["label"] == "full + L1 λ=0.001"
    assert _method_style("grelu_cv", methods)["label"] == "G_ReLU (alpha by CV)"
    assert _method_style("softsort", methods)["label"] == "G_ReLU (SoftSort)"
    l1_colors = [_method_style(m, methods)["color"] for m in ("l1_0.001", "l1_0.01")]
    assert l1_colors[0] != l1_colors[1]


def test_penalty_figure_and_summary_take_the_new_methods():
    methods = ("full", "l1_0.01", "rank1", "grelu", "grelu_cv", "softsort")
    table = stitching_rows(methods=methods)
    fig = stitching_penalty(table)
    for ax in data_axes(fig):
        assert len(errorbars(ax)) == len(methods)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]  # one legend under the panels
    assert labels == [
        "full",
        "full + L1 λ=0.01",
        "rank 1",
        "G_ReLU",
        "G_ReLU (alpha by CV)",
        "G_ReLU (SoftSort)",
    ]
    summary = stitching_summary(table)
    assert len(summary) == 2 * 3 * len(methods)
    first = summary[(summary["variant"] == "myrtle") & (summary["site"] == "act1")]
    assert list(first["method"]) == list(methods)
    assert first.set_index("method")["sparsity_mean"]["grelu"] == pytest.approx(1 - 1 / 8, abs=1e-3)
    assert first.set_index("method")["off_permutation_mass"].isna().tolist() == [
        True,
        True,
        True,
        False,
        False,
        False,
    ]


def test_leaky_relu_accuracy_table():
    accuracy = leaky_relu_accuracy(zoo_rows(), {"leaky_0.5": 0.5, "resnet20": 0.0, "leaky_0.01": 0.01})
    assert list(accuracy["slope"]) == [0.0, 0.01, 0.5]
    assert list(accuracy["variant"]) == ["resnet20", "leaky_0.01", "leaky_0.5"]
    assert list(accuracy["members"]) == [4, 4, 4]
    assert accuracy["test_acc_mean"].tolist() == pytest.approx([80.3, 81.3, 82.3])
    assert accuracy["test_acc_ci95"].iloc[0] > 0
    assert pd.isna(accuracy["paper_test_acc"].iloc[0])  # Table 3 has no ReLU row
    assert accuracy["paper_test_acc"].iloc[1:].tolist() == [89.2, 86.6]
    with pytest.raises(ValueError, match="zoo.variants"):
        leaky_relu_accuracy(zoo_rows(), {"absent": 0.1})


def test_leaky_relu_figure_has_a_line_per_slope_and_the_paper_beside():
    table = stitching_rows(variants=tuple(SLOPES), methods=("full", "grelu"))
    accuracy = leaky_relu_accuracy(zoo_rows(), SLOPES)
    fig = leaky_relu_penalty(table, SLOPES, accuracy)
    penalty, acc = data_axes(fig)
    assert len(errorbars(penalty)) == 3  # one line per slope, G_ReLU only
    assert [t.get_text() for t in penalty.get_legend().get_texts()] == [
        "0 (ReLU) (3 pairs)",
        "0.01 (3 pairs)",
        "0.5 (3 pairs)",
    ]
    assert len(penalty.get_xticks()) == 3
    ours = errorbars(acc)[0].lines[0]
    assert ours.get_ydata().tolist() == pytest.approx([80.3, 81.3, 82.3])
    paper = [line for line in acc.get_lines() if line.get_marker() == "x"][0]
    assert paper.get_xdata().tolist() == [1, 2] and paper.get_ydata().tolist() == [89.2, 86.6]
    with pytest.raises(ValueError, match="stitching.methods"):
        leaky_relu_penalty(table[table["method"] != "grelu"], SLOPES, accuracy)


def test_alpha_selection_counts_pairs_per_alpha_and_site():
    table = stitching_rows(methods=("grelu", "grelu_cv"), pairs=4)
    fig = alpha_selection(table)
    axes = data_axes(fig)
    assert len(axes) == 4  # (histogram, penalties) per variant
    hist, penalty = axes[:2]
    bars = [c for c in hist.containers if isinstance(c, BarContainer)]
    assert len(bars) == 3 and all(len(b) == len(GRID) for b in bars)  # a bar per (site, alpha)
    assert sum(bar.get_height() for b in bars for bar in b) == 4 * 3  # every pair at every site
    # act1: pairs 0..3 chose GRID[0..3]
    assert [bar.get_height() for bar in bars[0]] == [1, 1, 1, 1, 0]
    assert [t.get_text() for t in hist.get_xticklabels()] == ["0.001", "0.01", "0.1", "1", "10"]
    assert len(errorbars(penalty)) == 2
    with pytest.raises(ValueError, match="grelu_cv to stitching.methods"):
        alpha_selection(stitching_rows())


def test_l1_figure_has_a_point_per_pair_and_site_and_method():
    methods = ("full", "l1_0.001", "l1_0.01", "rank1", "grelu", "softsort")
    table = stitching_rows(methods=methods, pairs=2)
    fig = l1_sparsity(table)
    axes = data_axes(fig)
    assert len(axes) == 2
    scatters = [c for c in axes[0].collections if isinstance(c, PathCollection)]
    assert len(scatters) == 5  # rank layers are left out
    assert all(len(s.get_offsets()) == 2 * 3 for s in scatters)
    grelu = scatters[[t.get_text() for t in fig.legends[0].get_texts()].index("G_ReLU")]
    assert np.allclose(grelu.get_offsets()[:, 0], 1 - 1 / 8)
    with pytest.raises(ValueError, match="l1_<lambda>"):
        l1_sparsity(stitching_rows())


def test_softsort_figure_compares_penalty_and_time_on_the_same_pairs():
    table = stitching_rows(methods=("full", "grelu", "softsort"))
    table = table[~((table["method"] == "softsort") & (table["pair"] == 2))]  # pair 2: no SoftSort
    fig = softsort_comparison(table)
    axes = data_axes(fig)
    assert len(axes) == 4
    penalty, seconds = axes[:2]
    assert len(errorbars(penalty)) == 2 and len(errorbars(seconds)) == 2
    assert "(2 pairs)" in penalty.get_title()
    assert seconds.get_yscale() == "log" and "x G_ReLU's time" in seconds.get_title()
    with pytest.raises(ValueError, match="softsort to stitching.methods"):
        softsort_comparison(stitching_rows())


def test_transformer_figure_draws_only_the_transformers():
    table = pd.concat(
        [
            stitching_rows(methods=("full", "grelu")),
            stitching_rows(
                variants=("cct",), sites=("blocks.0.out", "blocks.1.out"), methods=("full", "grelu")
            ),
        ]
    )
    fig = transformer_penalty(table, ["cct"])
    axes = data_axes(fig)
    assert len(axes) == 1 and axes[0].get_title().startswith("cct")
    assert [t.get_text() for t in axes[0].get_xticklabels()] == ["blocks.0.out", "blocks.1.out*"]
    with pytest.raises(ValueError, match="stitching.variants"):
        transformer_penalty(table, ["vit"])


def intertwine(*args):
    return subprocess.run([sys.executable, "-m", "intertwine", *args], capture_output=True, text=True)


def test_command_draws_each_requested_figure_and_only_those(tmp_path):
    methods = ("full", "grelu", "grelu_cv", "softsort", "l1_0.01")
    table = pd.concat(
        [
            stitching_rows(variants=tuple(SLOPES), methods=methods, pairs=2),
            stitching_rows(variants=("cct",), sites=("blocks.0.out",), methods=("full", "grelu")),
        ]
    )
    table.to_parquet(tmp_path / "stitching.parquet")
    zoo_rows().to_parquet(tmp_path / "zoo.parquet")
    out = tmp_path / "figures"
    common = [
        "stitching-studies",
        "--table",
        str(tmp_path / "stitching.parquet"),
        "--zoo",
        str(tmp_path / "zoo.parquet"),
        "--slopes",
        json.dumps(SLOPES),
        "--figures",
        json.dumps({"dpi": 40}),
    ]
    result = intertwine(
        *common,
        "--leaky-relu",
        str(out / "stitching_leaky_relu.png"),
        "--leaky-relu-table",
        str(out / "leaky_relu_accuracy.csv"),
        "--l1",
        str(out / "stitching_l1_sparsity.png"),
        "--transformers",
        '["cct"]',
        "--transformer",
        str(out / "stitching_transformer.png"),
        "--other-formats",
        str(out / "stitching_l1_sparsity.pdf"),
    )
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "leaky_relu_accuracy.csv",
        "stitching_l1_sparsity.pdf",
        "stitching_l1_sparsity.png",
        "stitching_leaky_relu.png",
        "stitching_transformer.png",
    ]
    assert pd.read_csv(out / "leaky_relu_accuracy.csv")["paper_test_acc"].tolist()[1:] == [89.2, 86.6]

    result = intertwine(
        *common, "--alpha-cv", str(out / "alpha.png"), "--softsort", str(out / "softsort.png")
    )
    assert result.returncode == 0, result.stderr
    assert (out / "alpha.png").stat().st_size > 1000 and (out / "softsort.png").stat().st_size > 1000


def test_command_names_the_config_key_of_a_missing_study(tmp_path):
    stitching_rows().to_parquet(tmp_path / "stitching.parquet")
    result = intertwine(
        "stitching-studies",
        "--table",
        str(tmp_path / "stitching.parquet"),
        "--figures",
        '{"dpi": 40}',
        "--l1",
        str(tmp_path / "l1.png"),
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "intertwine stitching-studies: error:" in result.stderr and "stitching.methods" in result.stderr
    assert not (tmp_path / "l1.png").exists()
    result = intertwine(
        "stitching-studies",
        "--table",
        str(tmp_path / "stitching.parquet"),
        "--figures",
        '{"dpi": 40}',
        "--leaky-relu",
        str(tmp_path / "leaky.png"),
    )
    assert result.returncode != 0 and "--zoo and --slopes" in result.stderr
