"""The model zoo's figure: test accuracy per variant beside the papers' reported accuracies."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from intertwine.workflow.plotting import FIGURE_WIDTH, SMALL, chunks, counted, interval_half_width, mean_ci


def zoo_summary(zoo: pd.DataFrame, reported: dict[str, float | None]) -> pd.DataFrame:
    """Per variant: seeds, test accuracy mean, sd and 95% CI (in %), and the paper's number."""
    rows = []
    for variant, group in zoo.groupby("variant", sort=False):
        acc = 100 * group["test_acc"].to_numpy()
        mean, half = mean_ci(acc)
        rows.append(
            {
                "variant": variant,
                "seeds": len(acc),
                "test_acc_mean": round(mean, 2),
                "test_acc_sd": round(float(acc.std(ddof=1)) if len(acc) > 1 else 0.0, 2),
                "test_acc_ci95": round(half, 2),
                "val_acc_mean": round(100 * group["val_acc"].mean(), 2),
                "paper_test_acc": reported.get(variant),
                "n_params": int(group["n_params"].iloc[0]),
            }
        )
    return pd.DataFrame(rows)


def zoo_accuracy(zoo: pd.DataFrame, reported: dict[str, float | None]) -> plt.Figure:
    """Test accuracy of every zoo member per variant, mean with 95% CI, the paper's mean as a cross;
    rows of at most 16 variants."""
    variants = list(dict.fromkeys(zoo["variant"]))
    rows = chunks(variants, 16)
    fig, axes = plt.subplots(
        len(rows), 1, figsize=(FIGURE_WIDTH, 0.6 + 3.0 * len(rows)), squeeze=False, layout="constrained"
    )
    rng = np.random.default_rng(0)  # horizontal jitter only
    for ax, row in zip(axes[:, 0], rows):
        for i, variant in enumerate(row):
            acc = 100 * zoo.loc[zoo["variant"] == variant, "test_acc"].to_numpy()
            ax.scatter(i + rng.uniform(-0.15, 0.15, len(acc)), acc, s=12, alpha=0.6, color="C0")
            ax.errorbar(i + 0.3, acc.mean(), yerr=interval_half_width(acc), fmt="o", color="black", capsize=3)
            if reported.get(variant) is not None:
                ax.plot(i + 0.3, reported[variant], "x", color="C3", markersize=8)
        ax.set_xticks(range(len(row)), row, rotation=30, ha="right", fontsize=SMALL)
        ax.set_xlim(-0.6, max(len(row), 4) - 0.4)
        ax.set_ylabel("test accuracy (%)")
        ax.grid(axis="y", alpha=0.3)
    ax = axes[0, 0]
    if any(value is not None for value in reported.values()):
        ax.plot([], [], "x", color="C3", label="paper (CIFAR-10)")
    ax.errorbar([], [], yerr=[], fmt="o", color="black", label="mean, 95% CI")
    ax.set_title(f"Zoo accuracy per variant ({counted(len(variants), 'variant')})")
    ax.legend(fontsize=SMALL, loc="best")
    return fig
