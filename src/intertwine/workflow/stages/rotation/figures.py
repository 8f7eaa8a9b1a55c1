"""The rotation penalty's figure (Godfrey et al. section 3.3)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from intertwine.workflow.plotting import SMALL, few_values, interval_half_width, panel_grid


GROUP_LABELS = {"grelu": "G_ReLU", "orthogonal": "orthogonal", "permutation": "permutation"}


def rotation_penalty(table: pd.DataFrame) -> plt.Figure:
    """Penalty (accuracy points lost) per site and group, mean with 95% CI over trials and seeds,
    one panel per variant (the paper's Fig. 4)."""
    variants = list(dict.fromkeys(table["variant"]))
    fig, panels = panel_grid(len(variants), 4.0, 3.4)
    for ax, variant in zip(panels, variants):
        rows = table[table["variant"] == variant]
        sites = list(dict.fromkeys(rows["site"]))
        groups = list(dict.fromkeys(rows["group"]))
        width = 0.8 / len(groups)
        for k, group in enumerate(groups):
            values = [
                100 * rows.loc[(rows["site"] == site) & (rows["group"] == group), "penalty"].to_numpy()
                for site in sites
            ]
            x = np.arange(len(sites)) + (k - (len(groups) - 1) / 2) * width
            ax.bar(
                x,
                [v.mean() for v in values],
                width,
                yerr=[interval_half_width(v) for v in values],
                capsize=3,
                label=GROUP_LABELS.get(group, group),
                color=f"C{k}",
            )
            for at, v in zip(x, values):
                few_values(ax, at, v, "black")
        labels = [
            f"{site}*" if inside else site
            for site, inside in rows.drop_duplicates("site")[["site", "inside_residual"]].itertuples(
                index=False
            )
        ]
        ax.set_xticks(range(len(sites)), labels, rotation=30, ha="right", fontsize=SMALL)
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_title(variant)
        ax.set_ylabel("rotation penalty (accuracy points)")
        ax.legend(fontsize=SMALL)
    return fig
