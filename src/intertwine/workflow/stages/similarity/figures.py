"""Representation similarity's figures: Procrustes dissimilarities, the CKA heatmaps, and the zoo
as a whole (its embedding and summary)."""

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


# ---------------------------------------------------------------------------
# The zoo as a whole
# ---------------------------------------------------------------------------

#: The most sites of a variant the zoo figure embeds (evenly spread, first and last included); the
#: summary has every site.
ZOO_FIGURE_SITES = 4


def _zoo_matrix(part: pd.DataFrame) -> tuple[np.ndarray, list[int], np.ndarray | None]:
    """(K x K distances, the seeds, each member's distance to the Procrustes mean or None) of one
    variant, site and measure of the similarity_zoo table."""
    pairs = part[part["seed_b"].notna()]
    seeds = sorted(pairs["seed_a"].unique())
    matrix = pairs.pivot(index="seed_a", columns="seed_b", values="distance").loc[seeds, seeds].to_numpy()
    to_mean = part[part["seed_b"].isna()].set_index("seed_a")["distance"]
    return matrix, [int(s) for s in seeds], (to_mean.loc[seeds].to_numpy() if len(to_mean) else None)


def _with_mean(matrix: np.ndarray, to_mean: np.ndarray) -> np.ndarray:
    """The members' distance matrix with the Procrustes mean as one more point (last)."""
    k = len(matrix)
    extended = np.zeros((k + 1, k + 1))
    extended[:k, :k], extended[:k, k], extended[k, :k] = matrix, to_mean, to_mean
    return extended


def similarity_zoo_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per variant, site and measure of the similarity_zoo table: the members K, the mean and
    largest distance between two of them, the share of the zoo's spread the plane's embedding
    keeps (classical MDS, ``Embedding.explained``), and for the measures with a Procrustes mean the
    members' mean distance to it and its summed squared distances over the best member's (below 1:
    the mean is nearer the zoo than any member)."""
    from intertwine.measures.zoo import classical_mds

    rows = []
    for (variant, site, measure), part in table.groupby(["variant", "site", "measure"], sort=False):
        matrix, seeds, to_mean = _zoo_matrix(part)
        off = matrix[~np.eye(len(seeds), dtype=bool)]
        rows.append(
            {
                "variant": variant,
                "site": site,
                "measure": measure,
                "members": len(seeds),
                "distance_mean": round(float(off.mean()), 4),
                "distance_max": round(float(off.max()), 4),
                "plane_explained": round(classical_mds(matrix, min(2, len(seeds))).explained, 4),
                "to_mean": None if to_mean is None else round(float(to_mean.mean()), 4),
                "mean_vs_best_member": (
                    None
                    if to_mean is None
                    else round(float((to_mean**2).sum() / (matrix**2).sum(1).min()), 4)
                ),
            }
        )
    return pd.DataFrame(rows)


def similarity_zoo(table: pd.DataFrame) -> plt.Figure:
    """The zoo embedded in the plane (classical MDS of each measure's distance matrix): one row
    per variant and measure, one panel per site (at most ``ZOO_FIGURE_SITES``, evenly spread), a
    dot per member labelled by its seed and, for the measures with one, the Procrustes mean as a
    star (embedded with the members from its distances to them). The axes are in the measure's
    distance units, equal in x and y."""
    from intertwine.measures.zoo import classical_mds

    groups = list(table.groupby(["variant", "measure"], sort=False))
    columns = max(min(ZOO_FIGURE_SITES, part["site"].nunique()) for _, part in groups)
    side = FIGURE_WIDTH / columns
    fig, axes = plt.subplots(
        len(groups),
        columns,
        squeeze=False,
        layout="constrained",
        figsize=(FIGURE_WIDTH, len(groups) * (side + 0.3)),
    )
    for ax in axes.flat:
        ax.set_visible(False)
    for row, ((variant, measure), part) in enumerate(groups):
        sites = list(dict.fromkeys(part["site"]))
        shown = [
            sites[i]
            for i in sorted(set(np.linspace(0, len(sites) - 1, min(columns, len(sites))).round().astype(int)))
        ]
        for ax, site in zip(axes[row], shown):
            ax.set_visible(True)
            matrix, seeds, to_mean = _zoo_matrix(part[part["site"] == site])
            points = matrix if to_mean is None else _with_mean(matrix, to_mean)
            embedding = classical_mds(points, min(2, len(points)))
            xy = np.pad(embedding.coordinates, ((0, 0), (0, 2 - embedding.coordinates.shape[1])))
            ax.scatter(xy[: len(seeds), 0], xy[: len(seeds), 1], s=18, color="C0")
            for (x, y), seed in zip(xy, seeds):
                ax.annotate(str(seed), (x, y), fontsize=SMALL, xytext=(2, 2), textcoords="offset points")
            if to_mean is not None:
                ax.scatter(*xy[-1], marker="*", s=90, color="black", label="Procrustes mean")
            ax.set_aspect("equal", adjustable="datalim")
            ax.tick_params(labelsize=SMALL)
            ax.set_title(f"{site} ({embedding.explained:.0%} in the plane)", fontsize=SMALL)
        axes[row][0].set_ylabel(f"{variant}\n{MEASURE_LABELS.get(measure, measure)}", fontsize=SMALL)
    fig.suptitle(
        "The zoo embedded by classical MDS of each measure's distance matrix (a dot per member, by seed;"
        "\nthe star: the Procrustes mean); the title's share: the points' spread the plane keeps",
        fontsize=SMALL,
    )
    return fig
