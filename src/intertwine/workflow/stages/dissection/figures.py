"""Network dissection's figures (Godfrey et al. section 5)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from intertwine.workflow.plotting import (
    FIGURE_WIDTH,
    SMALL,
    drawn_half,
    few_values,
    mean_ci,
    panel_grid,
    stacked_pairs,
)


def _dissection_draws(table: pd.DataFrame) -> pd.DataFrame:
    """Rows of independent (seed, draw) samples: alpha 0 is the same basis for every draw, so only
    draw 0 counts there (otherwise the intervals would shrink by repetition)."""
    return table[(table["alpha"] > 0) | (table["rotation_seed"] == table["rotation_seed"].min())]


def dissection_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per variant, site and alpha: interpretable fraction and unique concepts, mean and 95% CI
    over seeds and rotation draws."""
    rows = []
    for (variant, site, alpha), group in _dissection_draws(table).groupby(
        ["variant", "site", "alpha"], sort=False
    ):
        fraction, fraction_ci = mean_ci(group["fraction_interpretable"])
        unique, unique_ci = mean_ci(group["n_unique_concepts"])
        rows.append(
            {
                "variant": variant,
                "site": site,
                "inside_residual": group["inside_residual"].iloc[0],
                "alpha": alpha,
                "samples": len(group),
                "n_units": int(group["n_units"].iloc[0]),
                "fraction_interpretable": round(fraction, 4),
                "fraction_ci95": round(fraction_ci, 4),
                "unique_concepts": round(unique, 2),
                "unique_concepts_ci95": round(unique_ci, 2),
            }
        )
    return pd.DataFrame(rows)


def dissection_fraction(table: pd.DataFrame) -> plt.Figure:
    """Fraction of interpretable units (top) and unique detected concepts (bottom) against the
    rotation alpha, one panel per variant, one line per site with a 95% CI band over seeds and
    rotation draws (the paper's Figs. 3 and 19). Sites inside a residual block are dashed."""
    summary = dissection_summary(table)
    draws = _dissection_draws(table)
    variants = list(dict.fromkeys(summary["variant"]))
    # each variant's fractions over its concepts, two variants a row
    fig, pairs = stacked_pairs(len(variants), 3.1, 2.9, sharex=True)
    axes = np.array(pairs, dtype=object).T  # axes[0, c], axes[1, c]: variant c's two panels
    for c, variant in enumerate(variants):
        part = summary[summary["variant"] == variant]
        for k, (site, rows) in enumerate(part.groupby("site", sort=False)):
            style = {
                "color": f"C{k}",
                "linestyle": "--" if rows["inside_residual"].iloc[0] else "-",
                "marker": ".",
            }
            label = f"{site}{'*' if rows['inside_residual'].iloc[0] else ''} ({rows['n_units'].iloc[0]})"
            samples = draws[(draws["variant"] == variant) & (draws["site"] == site)]
            for ax, column, ci, drawn in zip(
                axes[:, c],
                ("fraction_interpretable", "unique_concepts"),
                ("fraction_ci95", "unique_concepts_ci95"),
                ("fraction_interpretable", "n_unique_concepts"),
            ):
                mean, half = rows[column].to_numpy(), drawn_half(rows[ci], rows["samples"])
                ax.plot(rows["alpha"], mean, label=label, **style)
                ax.fill_between(rows["alpha"], mean - half, mean + half, color=style["color"], alpha=0.15)
                for alpha, at in samples.groupby("alpha")[drawn]:
                    few_values(ax, alpha, at, style["color"])
        axes[0, c].set_title(variant)
        axes[0, c].set_ylabel("fraction of interpretable units")
        axes[1, c].set_ylabel("unique concepts detected")
        axes[1, c].set_xlabel(r"rotation $\alpha$ (basis $Q^\alpha$)")
        # With few seeds and draws a t interval can be wide: the axes follow the means.
        # room above the lines for the site legend (one line a site)
        room = 1.3 + 0.1 * part["site"].nunique()
        axes[0, c].set_ylim(0, min(1.0, room * part["fraction_interpretable"].max() + 0.05))
        axes[1, c].set_ylim(0, 1.3 * part["unique_concepts"].max() + 1)
        axes[0, c].legend(fontsize=SMALL, title="site (units)", title_fontsize=SMALL)
        for ax in axes[:, c]:
            ax.grid(alpha=0.3)
        axes[0, c].tick_params(labelbottom=False)
    return fig


def dissection_categories(units: pd.DataFrame, sites: dict[str, str], alphas=(0.0, 0.5, 1.0)) -> plt.Figure:
    """Interpretable units per concept category at a few alphas (the grid values nearest to
    ``alphas``), mean over seeds and rotation draws, at one site per variant (``sites``; the
    paper's Figs. 18, 20, 22, 24)."""
    variants = [v for v in dict.fromkeys(units["variant"]) if v in sites]
    categories = list(dict.fromkeys(units["category"]))
    grid = np.array(sorted(units["alpha"].unique()))
    chosen = list(dict.fromkeys(float(grid[np.abs(grid - a).argmin()]) for a in alphas))
    fig, panels = panel_grid(len(variants), 4.0, 3.4)
    width = 0.8 / len(chosen)
    for ax, variant in zip(panels, variants):
        part = _dissection_draws(units[(units["variant"] == variant) & (units["site"] == sites[variant])])
        for k, alpha in enumerate(chosen):
            at = part[part["alpha"] == alpha]
            samples = at.groupby(["seed", "rotation_seed"]).ngroups
            counts = at[at["detector"]].groupby("category").size().reindex(categories, fill_value=0)
            x = np.arange(len(categories)) + (k - (len(chosen) - 1) / 2) * width
            ax.bar(
                x,
                counts.to_numpy() / max(1, samples),
                width,
                label=rf"$\alpha$ = {alpha:g}",
                color=plt.cm.viridis(0.1 + 0.8 * k / max(1, len(chosen) - 1)),
            )
        ax.set_xticks(range(len(categories)), categories)
        ax.set_title(f"{variant}: {sites[variant]}", fontsize=9)
        ax.set_ylabel("interpretable units (mean)")
        ax.legend(fontsize=SMALL)
        ax.grid(axis="y", alpha=0.3)
    return fig


def dissection_masks(images: np.ndarray, panels: list[dict]) -> plt.Figure:
    """Top units' regions over probe images (the paper's Figs. 21, 23, 25): one row per unit, its
    best concept and IoU in the row title, each image dimmed outside the unit's thresholded,
    upsampled activation. ``panels``: dicts with ``title`` and ``examples`` [(image index, mask)]."""
    columns = max(len(p["examples"]) for p in panels)
    fig, axes = plt.subplots(
        len(panels),
        columns,
        figsize=(min(1.3 * columns + 0.2, FIGURE_WIDTH), 1.45 * len(panels)),
        squeeze=False,
    )
    for row, panel in zip(axes, panels):
        for ax in row:
            ax.axis("off")
        for ax, (index, mask) in zip(row, panel["examples"]):
            image = images[index].transpose(1, 2, 0) / 255.0
            ax.imshow(image * (0.25 + 0.75 * mask[..., None]), interpolation="nearest")
            ax.contour(mask, levels=[0.5], colors="yellow", linewidths=0.6)
        row[0].set_title(panel["title"], fontsize=SMALL, loc="left")
    fig.tight_layout()
    return fig
