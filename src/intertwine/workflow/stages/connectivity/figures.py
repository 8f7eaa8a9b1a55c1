"""Linear mode connectivity's figures: loss and accuracy along the interpolation curves."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from intertwine.workflow.plotting import (
    SMALL,
    counted,
    few_values,
    interval_half_width,
    mean_ci,
    panel_grid,
    stacked_pairs,
)


CONNECTIVITY_METHODS = {
    "unaligned": ("unaligned", "0.5", "--"),
    "weight_permutation": ("weight matching, permutations", "C0", "-"),
    "weight_grelu": ("weight matching, G_ReLU", "C3", "-"),
    "activation_permutation": ("activation matching, permutations", "C2", ":"),
    "activation_grelu": ("activation matching, G_ReLU", "C1", ":"),
}


def _connectivity_methods(table: pd.DataFrame) -> list[str]:
    return [m for m in CONNECTIVITY_METHODS if m in set(table["method"])]


def _curve_barriers(table: pd.DataFrame, barrier: str) -> pd.DataFrame:
    """One row per (variant, pair, method, correction, split): the curve's barrier of kind
    ``barrier``."""
    column = {"endpoints_mean": "barrier", "endpoints_line": "barrier_line"}[barrier]
    keys = ["variant", "width_multiplier", "pair", "method", "correction", "split"]
    return (
        table.groupby(keys, sort=False)[[column, "accuracy_barrier"]]
        .first()
        .rename(columns={column: "barrier"})
        .reset_index()
    )


def connectivity_summary(table: pd.DataFrame, barrier: str = "endpoints_mean") -> pd.DataFrame:
    """Per variant, method, correction and split: pairs, the loss barrier's and the accuracy
    barrier's mean with its 95 % t half-width over pairs, and the mean seconds of the alignment."""
    curves = _curve_barriers(table, barrier)
    seconds = table.groupby(["variant", "pair", "method"], sort=False)["align_seconds"].first()
    rows = []
    groups = curves.groupby(["variant", "method", "correction", "split"], sort=False)
    for (variant, method, correction, split), group in groups:
        loss, loss_half = mean_ci(group["barrier"])
        accuracy, accuracy_half = mean_ci(group["accuracy_barrier"])
        rows.append(
            {
                "variant": variant,
                "method": method,
                "correction": correction,
                "split": split,
                "pairs": len(group),
                "loss_barrier": round(loss, 4),
                "loss_barrier_ci95": round(loss_half, 4),
                "accuracy_barrier": round(accuracy, 4),
                "accuracy_barrier_ci95": round(accuracy_half, 4),
                "align_seconds": round(
                    float(seconds.xs((variant, method), level=("variant", "method")).mean()), 2
                ),
                "barrier": barrier,
            }
        )
    return pd.DataFrame(rows)


def connectivity_curves(table: pd.DataFrame) -> plt.Figure:
    """Test loss (top) and accuracy (bottom) along the line from f (lambda 0) to the aligned g
    (lambda 1), per variant and correction (a column each) and alignment method: the mean over
    pairs, each pair's curve faint."""
    test = table[table["split"] == "test"]
    several = test["correction"].nunique() > 1
    columns = list(dict.fromkeys(zip(test["variant"], test["correction"])))
    # each column's loss over its accuracy, two columns a row
    fig, pairs = stacked_pairs(len(columns), 2.9, 2.9, sharex=True)
    axes = np.array(pairs, dtype=object).T  # axes[0, c], axes[1, c]: column c's two panels
    for column, (variant, correction) in enumerate(columns):
        rows = test[(test["variant"] == variant) & (test["correction"] == correction)]
        for method in _connectivity_methods(rows):
            label, color, style = CONNECTIVITY_METHODS[method]
            curves = rows[rows["method"] == method]
            for row, value in enumerate(("loss", "accuracy")):
                ax = axes[row, column]
                for _, pair in curves.groupby("pair"):
                    ax.plot(pair["lam"], pair[value], color=color, alpha=0.15, linewidth=0.8)
                mean = curves.groupby("lam")[value].mean()
                ax.plot(mean.index, mean.to_numpy(), color=color, linestyle=style, label=label)
        pairs = rows["pair"].nunique()
        title = f"{variant}, {correction}" if several else variant
        axes[0, column].set_title(f"{title} ({counted(pairs, 'pair')})", fontsize=9)
        axes[0, column].set_ylabel("test loss")
        axes[1, column].set_ylabel("test accuracy")
        axes[1, column].set_xlabel("lambda (0: f, 1: g aligned to f)")
        axes[0, column].tick_params(labelbottom=False)
    axes[0, 0].legend(fontsize=SMALL)
    return fig


def connectivity_barriers(
    table: pd.DataFrame, families: dict[str, str], barrier: str = "endpoints_mean"
) -> plt.Figure:
    """The test-loss barrier per alignment method against the width multiplier, a panel per
    architecture (``families``: variant -> its architecture without the width) and correction;
    mean over pairs with its 95 % t interval (the pairs themselves where there are fewer than 3)."""
    curves = _curve_barriers(table[table["split"] == "test"], barrier)
    curves["architecture"] = curves["variant"].map(lambda v: families.get(v, v))
    if curves["correction"].nunique() > 1:
        curves["architecture"] += ", " + curves["correction"]
    panels = list(dict.fromkeys(curves["architecture"]))
    fig, axes = panel_grid(len(panels), 4.0, 3.4)
    for ax, panel in zip(axes, panels):
        rows = curves[curves["architecture"] == panel]
        widths = sorted(rows["width_multiplier"].unique())
        methods = _connectivity_methods(rows)
        for k, method in enumerate(methods):
            label, color, style = CONNECTIVITY_METHODS[method]
            dodge = 2 ** (0.06 * (k - (len(methods) - 1) / 2))  # side by side at each width
            means, halves = [], []
            for width in widths:
                values = rows[(rows["method"] == method) & (rows["width_multiplier"] == width)]["barrier"]
                means.append(values.mean())
                halves.append(interval_half_width(values))
                few_values(ax, width * dodge, values, color)
            ax.errorbar(
                [w * dodge for w in widths],
                means,
                yerr=halves,
                color=color,
                linestyle=style,
                marker="o",
                label=label,
                capsize=3,
            )
        ax.set_xscale("log", base=2)
        ax.set_xticks(widths, [f"{w:g}" for w in widths])
        ax.minorticks_off()
        ax.set_xlim(widths[0] / 1.5, widths[-1] * 1.5)
        ax.axhline(0, color="0.7", linewidth=0.8)
        ax.set_xlabel("width multiplier")
        ax.set_ylabel(f"test loss barrier ({barrier.replace('_', ' ')})")
        ax.set_title(panel, fontsize=9)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(
        handles, labels, loc="outside lower center", ncol=min(len(labels), 3), fontsize=SMALL, frameon=False
    )
    return fig
