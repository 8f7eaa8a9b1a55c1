"""Figures, drawn only from the aggregated tables."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from scipy import stats  # noqa: E402

from intertwine.utils import atomic_path  # noqa: E402


def mean_ci(values, confidence: float = 0.95) -> tuple[float, float]:
    """Mean and half-width of its Student-t confidence interval (0 for a single value)."""
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return float(values.mean()), 0.0
    half = stats.t.ppf(0.5 + confidence / 2, len(values) - 1) * stats.sem(values)
    return float(values.mean()), float(half)


def zoo_summary(zoo: pd.DataFrame, reported: dict[str, float | None]) -> pd.DataFrame:
    """Per variant: seeds, test accuracy mean, sd and 95% CI (in %), and the paper's number."""
    rows = []
    for variant, group in zoo.groupby("variant", sort=False):
        acc = 100 * group["test_acc"].to_numpy()
        mean, half = mean_ci(acc)
        rows.append({"variant": variant, "seeds": len(acc), "test_acc_mean": round(mean, 2),
                     "test_acc_sd": round(float(acc.std(ddof=1)) if len(acc) > 1 else 0.0, 2),
                     "test_acc_ci95": round(half, 2),
                     "val_acc_mean": round(100 * group["val_acc"].mean(), 2),
                     "paper_test_acc": reported.get(variant),
                     "n_params": int(group["n_params"].iloc[0])})
    return pd.DataFrame(rows)


def zoo_accuracy(zoo: pd.DataFrame, reported: dict[str, float | None]) -> plt.Figure:
    """Test accuracy of every zoo member per variant, mean with 95% CI, the paper's mean as a cross."""
    variants = list(dict.fromkeys(zoo["variant"]))
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(variants) + 1.5), 3.6))
    rng = np.random.default_rng(0)  # horizontal jitter only
    for i, variant in enumerate(variants):
        acc = 100 * zoo.loc[zoo["variant"] == variant, "test_acc"].to_numpy()
        ax.scatter(i + rng.uniform(-0.15, 0.15, len(acc)), acc, s=12, alpha=0.6, color="C0")
        mean, half = mean_ci(acc)
        ax.errorbar(i + 0.3, mean, yerr=half, fmt="o", color="black", capsize=3)
        if reported.get(variant) is not None:
            ax.plot(i + 0.3, reported[variant], "x", color="C3", markersize=8)
    if any(value is not None for value in reported.values()):
        ax.plot([], [], "x", color="C3", label="paper (CIFAR-10)")
    ax.errorbar([], [], yerr=[], fmt="o", color="black", label="mean, 95% CI")
    ax.set_xticks(range(len(variants)), variants, rotation=20, ha="right")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("Zoo accuracy per variant")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    return fig


GROUP_LABELS = {"grelu": "G_ReLU", "orthogonal": "orthogonal", "permutation": "permutation"}


def rotation_penalty(table: pd.DataFrame) -> plt.Figure:
    """Penalty (accuracy points lost) per site and group, mean with 95% CI over trials and seeds,
    one panel per variant (the paper's Fig. 4)."""
    variants = list(dict.fromkeys(table["variant"]))
    fig, axes = plt.subplots(1, len(variants), figsize=(4.2 * len(variants), 3.4), squeeze=False)
    for ax, variant in zip(axes[0], variants):
        rows = table[table["variant"] == variant]
        sites = list(dict.fromkeys(rows["site"]))
        groups = list(dict.fromkeys(rows["group"]))
        width = 0.8 / len(groups)
        for k, group in enumerate(groups):
            stats_ = [mean_ci(100 * rows.loc[(rows["site"] == site) & (rows["group"] == group), "penalty"])
                      for site in sites]
            x = np.arange(len(sites)) + (k - (len(groups) - 1) / 2) * width
            ax.bar(x, [m for m, _ in stats_], width, yerr=[h for _, h in stats_], capsize=3,
                   label=GROUP_LABELS.get(group, group), color=f"C{k}")
        labels = [f"{site}*" if inside else site for site, inside in
                  rows.drop_duplicates("site")[["site", "inside_residual"]].itertuples(index=False)]
        ax.set_xticks(range(len(sites)), labels, rotation=30, ha="right")
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_title(variant)
        ax.set_ylabel("rotation penalty (accuracy points)")
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def save_figure(fig: plt.Figure, paths, dpi: int = 150) -> None:
    for path in paths:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=dpi, format=Path(path).suffix.lstrip("."))
    plt.close(fig)
