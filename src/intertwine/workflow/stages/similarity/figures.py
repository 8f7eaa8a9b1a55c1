"""Representation similarity's figures: Procrustes dissimilarities and the CKA heatmaps."""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle
import numpy as np
import pandas as pd

from intertwine.workflow.plotting import (
    FIGURE_WIDTH,
    MEASURE_LABELS,
    SMALL,
    counted,
    few_values,
    interval_half_width,
    mean_ci,
    panel_grid,
)


def similarity_summary(
    table: pd.DataFrame, paper: dict[str, dict[str, dict[str, tuple[float, float]]]]
) -> pd.DataFrame:
    """Procrustes per variant, site and measure (mean, 95% CI over pairs) beside the paper's value
    and its printed ± (``paper.reported_procrustes``), and the CKA of each site with the same site
    of the other model (the heatmaps' diagonal). A measure that does not apply to a variant (rows
    without a value) keeps its row, without a mean, and its ``note`` says why."""
    same = table[table["site_a"] == table["site_b"]]
    notes = same["note"] if "note" in same else pd.Series(None, index=same.index, dtype=object)
    rows = []
    for (variant, site, measure), group in same.groupby(["variant", "site_a", "measure"], sort=False):
        values = group["value"].dropna()
        mean, half = mean_ci(values) if len(values) else (None, None)
        reported = paper.get(variant, {}).get(measure, {}).get(site)
        note = notes[group.index].dropna()
        rows.append(
            {
                "variant": variant,
                "site": site,
                "measure": measure,
                "pairs": len(values),
                "mean": None if mean is None else round(mean, 4),
                "ci95": None if half is None else round(half, 4),
                "paper": reported[0] if reported else None,
                "paper_pm": reported[1] if reported else None,
                "note": note.iloc[0] if len(note) else None,
            }
        )
    return pd.DataFrame(rows)


def similarity_procrustes(
    table: pd.DataFrame, paper: dict[str, dict[str, dict[str, tuple[float, float]]]]
) -> plt.Figure:
    """G_ReLU vs orthogonal Procrustes similarity per site, mean with 95% CI over pairs, one panel
    per variant; the paper's CIFAR-10 values as crosses where they exist (Table 2; Figs. 9, 10)."""
    rows = table[table["measure"].str.endswith("procrustes")]
    variants = list(dict.fromkeys(rows["variant"]))
    fig, panels = panel_grid(len(variants), 4.0, 3.6)
    for ax, variant in zip(panels, variants):
        part = rows[rows["variant"] == variant]
        sites = list(dict.fromkeys(part["site_a"]))
        for k, measure in enumerate(dict.fromkeys(part["measure"])):
            values = [
                part.loc[(part["site_a"] == s) & (part["measure"] == measure), "value"].to_numpy(dtype=float)
                for s in sites
            ]
            color = "C3" if measure.startswith("grelu") else "C0"
            ax.errorbar(
                range(len(sites)),
                [v.mean() for v in values],
                yerr=[interval_half_width(v) for v in values],
                capsize=3,
                marker="o",
                color=color,
                label=MEASURE_LABELS.get(measure, measure),
            )
            for at, v in enumerate(values):
                few_values(ax, at, v, color)
            reported = paper.get(variant, {}).get(measure, {})
            if reported:
                ax.plot(
                    [i for i, s in enumerate(sites) if s in reported],
                    [reported[s][0] for s in sites if s in reported],
                    "x",
                    color=color,
                    markersize=8,
                    label=f"paper ({MEASURE_LABELS.get(measure, measure)})",
                )
        ax.set_xticks(range(len(sites)), sites, rotation=45, ha="right", fontsize=SMALL)
        ax.set_ylim(0, 1)
        ax.set_title(f"{variant} ({counted(part['pair'].nunique(), 'pair')})")
        ax.set_ylabel("similarity")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=SMALL, loc="lower left")
    return fig


def similarity_cka(table: pd.DataFrame) -> plt.Figure:
    """Heatmaps of the measures between every pair of sites (the CKAs: G_ReLU CKA beside linear
    CKA, Figs. 2, 5, 11; and any of SVCCA, PWCCA, the shape distances), site of model a x site of
    model b, averaged over pairs: one row per variant, one column per measure. Similarities share
    the 0-1 colour scale; a distance has its own, from 0."""
    from intertwine.measures.names import DISTANCES

    # npk_cka is one number per pair (site "model"), in the summary, not a heatmap
    rows = table[~table["measure"].str.endswith("procrustes") & (table["measure"] != "npk_cka")]
    variants = list(dict.fromkeys(rows["variant"]))
    measures = list(dict.fromkeys(rows["measure"]))
    n_sites = rows.groupby("variant")["site_a"].nunique().max()
    # Each variant's measures in rows of at most 3 heatmaps (2 where sites are many), the figure
    # the report's width; a variant's next measures wrap onto the next row.
    columns = len(measures) if len(measures) <= 3 else 3 if n_sites <= 12 else 2
    per_variant = -(-len(measures) // columns)
    side = (FIGURE_WIDTH - 1.8) / columns
    fig, axes = plt.subplots(
        len(variants) * per_variant,
        columns,
        squeeze=False,
        layout="constrained",
        figsize=(FIGURE_WIDTH, len(variants) * per_variant * (side + 0.9)),
    )
    for ax in axes.flat:
        ax.set_visible(False)
    shown, with_intervals = [], False
    for r, variant in enumerate(variants):
        for c, measure in enumerate(measures):
            ax = axes[r * per_variant + c // columns][c % columns]
            part = rows[(rows["variant"] == variant) & (rows["measure"] == measure)]
            if part.empty:
                continue
            ax.set_visible(True)
            shown.append(ax)
            sites = list(dict.fromkeys(part["site_a"]))
            grid = part.groupby(["site_a", "site_b"])["value"].mean().unstack().loc[sites, sites]
            if measure in DISTANCES:
                distance = ax.imshow(grid.to_numpy(), vmin=0, cmap="viridis")
                fig.colorbar(distance, ax=ax, shrink=0.8, label="distance")
            else:
                image = ax.imshow(grid.to_numpy(), vmin=0, vmax=1, cmap="magma")
            with_intervals |= _hatch_like_the_diagonal(ax, part, sites)
            # every site labelled where 8-pt labels fit, else every second (third, ...) one
            step = max(1, int(np.ceil(10.0 * len(sites) / (0.8 * side * 72))))
            ticks = range(0, len(sites), step)
            ax.set_xticks(ticks, [sites[i] for i in ticks], rotation=90, fontsize=SMALL)
            ax.set_yticks(ticks, [sites[i] for i in ticks], fontsize=SMALL)
            ax.set_title(
                f"{variant} ({counted(part['pair'].nunique(), 'pair')})\n{MEASURE_LABELS.get(measure, measure)}",
                fontsize=9,
            )
            ax.set_xlabel("site of model b", fontsize=SMALL)
            ax.set_ylabel("site of model a", fontsize=SMALL)
    if any(m not in DISTANCES for m in measures):
        fig.colorbar(image, ax=shown, shrink=0.6, label="similarity")
    if with_intervals:
        fig.suptitle(
            "hatched: the cell's 95 % jackknife interval holds its row's matched-site value\n"
            "(in at least half the pairs): not told apart from the site that matches",
            fontsize=SMALL,
        )
    return fig


def _hatch_like_the_diagonal(ax, part: pd.DataFrame, sites: list[str]) -> bool:
    """Hatch the off-diagonal cells whose interval (similarity.intervals) holds the value of their
    row's diagonal cell, site a against the same site of model b, in at least half the pairs: the
    heatmap cannot tell them from the matching site. Whether the table has intervals to draw."""
    if "low" not in part or part["low"].isna().all():
        return False
    matched = part[part["site_a"] == part["site_b"]].set_index(["pair", "site_a"])["value"]
    diagonal = matched.reindex(pd.MultiIndex.from_frame(part[["pair", "site_a"]])).to_numpy()
    holds = part.assign(holds=(part["low"].to_numpy() <= diagonal) & (diagonal <= part["high"].to_numpy()))
    share = holds.groupby(["site_a", "site_b"])["holds"].mean()
    position = {site: i for i, site in enumerate(sites)}
    for (a, b), fraction in share.items():
        if a != b and fraction >= 0.5:
            ax.add_patch(
                Rectangle(
                    (position[b] - 0.5, position[a] - 0.5),
                    1,
                    1,
                    fill=False,
                    hatch="////",
                    edgecolor="0.55",
                    linewidth=0,
                )
            )
    return True
