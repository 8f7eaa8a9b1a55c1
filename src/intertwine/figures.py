"""Figures, drawn only from the aggregated tables."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import matplotlib.ticker
from matplotlib.patches import Rectangle
import numpy as np
import pandas as pd
from scipy import stats

from intertwine.settings import G_RELU_METHODS, parse_method
from intertwine.tables import at_stage_temperature
from intertwine.utils import atomic_path


def _count(n: int, noun: str) -> str:
    """'1 pair', '5 pairs'."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


FIGURE_WIDTH = 8.0  # inches: shown 800 px wide (the report's width), 8-pt text reads as 8.3 pt
SMALL = 8  # points: the smallest text of any figure (a legend, a tick label, a cell's title)


def _panel_grid(n: int, width: float, height: float, columns: int = 2):
    """(figure, the n axes in reading order): panels in rows of at most ``columns``, so that a figure
    of many panels stays readable at the report's width: the figure is at most ``FIGURE_WIDTH``
    wide (panels narrower than ``width`` where ``columns`` of them would be wider), ``height`` a row;
    unused cells are hidden. Constrained layout: the caller draws no ``tight_layout``."""
    columns = max(1, min(columns, n, int(FIGURE_WIDTH // min(width, FIGURE_WIDTH))))
    rows = -(-n // columns)
    fig, axes = plt.subplots(
        rows,
        columns,
        figsize=(min(width * columns, FIGURE_WIDTH), height * rows),
        squeeze=False,
        layout="constrained",
    )
    flat = list(axes.flat)
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat[:n]


def _chunks(items: list, size: int) -> list[list]:
    """``items`` in rows of at most ``size``, the rows as even as they can be."""
    rows = max(1, -(-len(items) // max(1, size)))
    per_row = -(-len(items) // rows) if items else 0
    return [items[i : i + per_row] for i in range(0, len(items), per_row)] or [[]]


def _wrapped(text: str, width: int) -> str:
    """``text`` broken into lines of at most ``width`` characters (at spaces)."""
    import textwrap

    return "\n".join(textwrap.wrap(text, width)) or text


def _stacked_pairs(n: int, top: float, bottom: float, columns: int = 2, sharex: bool = False):
    """(figure, n (upper, lower) axes pairs in reading order): each item a panel over another, the
    items in rows of at most ``columns`` within ``FIGURE_WIDTH``; ``top`` and ``bottom`` the panels'
    heights (inches). The axes are created item by item (upper, lower, next upper, ...)."""
    columns = max(1, min(columns, n))
    rows = -(-n // columns)
    fig = plt.figure(
        figsize=(FIGURE_WIDTH if columns > 1 else FIGURE_WIDTH * 0.75, rows * (top + bottom)),
        layout="constrained",
    )
    grid = fig.add_gridspec(2 * rows, columns, height_ratios=[top, bottom] * rows)
    pairs = []
    for k in range(n):
        row, column = divmod(k, columns)
        upper = fig.add_subplot(grid[2 * row, column])
        lower = fig.add_subplot(grid[2 * row + 1, column], sharex=upper if sharex else None)
        pairs.append((upper, lower))
    return fig, pairs


def mean_ci(values, confidence: float = 0.95) -> tuple[float, float]:
    """Mean and half-width of its Student-t confidence interval (0 for a single value)."""
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return float(values.mean()), 0.0
    half = stats.t.ppf(0.5 + confidence / 2, len(values) - 1) * stats.sem(values)
    return float(values.mean()), float(half)


MIN_INTERVAL_VALUES = 3  # figures draw a t interval from this many values on, the values below it


def interval_half_width(values, confidence: float = 0.95) -> float:
    """Half-width of the Student-t interval a figure draws around the mean of ``values``: NaN (no
    interval) below ``MIN_INTERVAL_VALUES`` values, where from 2 values t = 12.7 makes it span
    the axis; figures draw those values themselves instead. The tables keep ``mean_ci``'s."""
    values = np.asarray(values, dtype=float)
    return mean_ci(values, confidence)[1] if len(values) >= MIN_INTERVAL_VALUES else float("nan")


def _drawn_half(half, n) -> np.ndarray:
    """A table's half-widths ``half``, each from ``n`` values, as figures draw them: NaN below
    ``MIN_INTERVAL_VALUES``."""
    return np.where(np.asarray(n) >= MIN_INTERVAL_VALUES, np.asarray(half, dtype=float), np.nan)


def _few_values(ax, x, values, color, marker="o") -> None:
    """Draw ``values`` at ``x`` when too few for an interval but more than one (one is its mean)."""
    values = np.asarray(values, dtype=float)
    if 1 < len(values) < MIN_INTERVAL_VALUES:
        ax.scatter(
            np.full(len(values), x),
            values,
            s=10,
            alpha=0.6,
            color=color,
            marker="o" if marker == "." else marker,
            zorder=3,
        )  # "." would be too small to see


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
    rows = _chunks(variants, 16)
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
    ax.set_title(f"Zoo accuracy per variant ({_count(len(variants), 'variant')})")
    ax.legend(fontsize=SMALL, loc="best")
    return fig


GROUP_LABELS = {"grelu": "G_ReLU", "orthogonal": "orthogonal", "permutation": "permutation"}


def rotation_penalty(table: pd.DataFrame) -> plt.Figure:
    """Penalty (accuracy points lost) per site and group, mean with 95% CI over trials and seeds,
    one panel per variant (the paper's Fig. 4)."""
    variants = list(dict.fromkeys(table["variant"]))
    fig, panels = _panel_grid(len(variants), 4.0, 3.4)
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
                _few_values(ax, at, v, "black")
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


def _site_labels(rows: pd.DataFrame) -> tuple[list[str], list[str]]:
    """Sites in table order, and their tick labels with residual-internal sites marked *."""
    first = rows.drop_duplicates("site")
    return list(first["site"]), [
        f"{s}*" if inside else s for s, inside in first[["site", "inside_residual"]].itertuples(index=False)
    ]


def _l1_lambda(method: str) -> float | None:
    """The penalty weight of an L1-regularised full layer ('l1_0.01' -> 0.01), else None."""
    kind, param = parse_method(method)
    return param if kind == "l1" else None


def _method_order(methods) -> list[str]:
    """full, L1-regularised full layers by increasing lambda, ranks in increasing order, G_ReLU,
    G_ReLU with alpha by cross-validation, SoftSort, then anything else as it comes."""
    methods = list(dict.fromkeys(methods))
    l1 = sorted((m for m in methods if m.startswith("l1_")), key=_l1_lambda)
    ranks = sorted((m for m in methods if m.startswith("rank")), key=lambda m: int(m[4:]))
    grelu = [m for m in G_RELU_METHODS if m in methods]
    ordered = [m for m in methods if m == "full"] + l1 + ranks + grelu
    return ordered + [m for m in methods if m not in ordered]


METHOD_LABELS = {
    "full": "full",
    "grelu": "G_ReLU",
    "grelu_cv": "G_ReLU (alpha by CV)",
    "softsort": "G_ReLU (SoftSort)",
}


def _method_label(method: str) -> str:
    if method.startswith("l1_"):
        return f"full + L1 λ={_l1_lambda(method):g}"
    return METHOD_LABELS.get(method, method.replace("rank", "rank "))


def _method_style(method: str, methods: list[str]) -> dict:
    """Label and line style of a stitching method; ranks (viridis) and L1 weights (copper) shade
    from dark to light by rank and by lambda."""
    label = _method_label(method)
    fixed = {
        "grelu": {"color": "C3", "marker": "s", "linewidth": 2.0},
        "grelu_cv": {"color": "darkred", "marker": "D", "linewidth": 1.5, "linestyle": "-."},
        "softsort": {"color": "C4", "marker": "^", "linewidth": 1.5, "linestyle": "-."},
        "full": {"color": "black", "marker": "o", "linewidth": 1.5},
    }
    if method in fixed:
        return {"label": label, **fixed[method]}
    family, colormap, marker, linestyle = (
        ("l1_", plt.cm.copper, "v", ":") if method.startswith("l1_") else ("rank", plt.cm.viridis, ".", "--")
    )
    members = [m for m in _method_order(methods) if m.startswith(family)]
    shade = members.index(method) / max(1, len(members) - 1) if method in members else 0
    return {
        "label": label,
        "color": colormap(0.15 + 0.7 * shade),
        "marker": marker,
        "linewidth": 1.0,
        "linestyle": linestyle,
    }


def _mean_or_none(values, digits: int):
    values = pd.Series(values, dtype=float).dropna()
    return round(float(values.mean()), digits) if len(values) else None


def stitching_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per variant, site and method: penalty mean and 95% CI over pairs (points), stitched
    accuracy, the layer's dimension, for G_ReLU layers how far P was from a permutation, the
    layer's sparsity and its training time."""
    rows = []
    for (variant, site, method), group in table.groupby(["variant", "site", "method"], sort=False):
        mean, half = mean_ci(100 * group["penalty"])
        rows.append(
            {
                "variant": variant,
                "site": site,
                "inside_residual": bool(group["inside_residual"].iloc[0]),
                "method": method,
                "pairs": len(group),
                "penalty_mean": round(mean, 2),
                "penalty_ci95": round(half, 2),
                "penalty_start_mean": _mean_or_none(100 * group["penalty_start"], 2),
                "acc_stitched_mean": round(100 * group["acc_stitched"].mean(), 2),
                "stitch_params": int(group["stitch_params"].iloc[0]),
                "off_permutation_mass": _mean_or_none(group["off_permutation_mass"], 3),
                "converged": _converged(group),
                "sparsity_mean": _mean_or_none(group["sparsity"], 3),
                "train_seconds_mean": _mean_or_none(group["train_seconds"], 1),
            }
        )
    summary = pd.DataFrame(rows)
    order = {m: i for i, m in enumerate(_method_order(summary["method"]))}
    return summary.sort_values(
        ["variant", "method"],
        key=lambda col: (
            col.map(order)
            if col.name == "method"
            else col.map({v: i for i, v in enumerate(dict.fromkeys(table["variant"]))})
        ),
        kind="stable",
    ).reset_index(drop=True)


def _site_errorbar(
    ax, rows: pd.DataFrame, sites: list[str], column: str = "penalty", scale: float = 100.0, **style
) -> None:
    """One line of the mean of ``scale * column`` per site (none where a site has no rows) with its
    95% CI, or below ``MIN_INTERVAL_VALUES`` values the values themselves."""
    values = [scale * rows.loc[rows["site"] == site, column].to_numpy(dtype=float) for site in sites]
    mean = [v.mean() if len(v) else np.nan for v in values]
    ax.errorbar(range(len(sites)), mean, yerr=[interval_half_width(v) for v in values], capsize=2, **style)
    for x, v in enumerate(values):
        _few_values(ax, x, v, style.get("color"), style.get("marker", "o"))


def _penalty_panel(ax, rows: pd.DataFrame, title: str) -> None:
    """Penalty per site, one line per method (mean, 95% CI over pairs); the axis follows the means."""
    sites, labels = _site_labels(rows)
    methods = _method_order(rows["method"])
    for method in methods:
        _site_errorbar(
            ax, rows[rows["method"] == method], sites, markersize=5, **_method_style(method, methods)
        )
    ax.set_xticks(range(len(sites)), labels, rotation=45, ha="right", fontsize=SMALL)
    ax.axhline(0, color="gray", linewidth=0.8)
    # Penalties lie in [-100, 100]; with few pairs a t interval can reach far beyond, so the
    # axis follows the means and long bars run off it.
    means = 100 * rows.groupby(["site", "method"])["penalty"].mean()
    ax.set_ylim(max(-100.0, min(0.0, means.min()) - 10), min(100.0, means.max() + 15))
    ax.set_title(f"{title} ({_count(rows['pair'].nunique(), 'pair')})")
    ax.set_ylabel("stitching penalty (accuracy points)")
    ax.grid(axis="y", alpha=0.3)


def _legend_of_every_panel(axes) -> None:
    """One legend under the panels with every label drawn in any panel (variants may use different
    methods), each once (the figure's layout is constrained)."""
    entries = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    axes[0].figure.legend(
        entries.values(),
        entries.keys(),
        fontsize=SMALL,
        loc="outside lower center",
        ncol=min(len(entries), 4),
    )


CONVERGED_MASS = 0.3  # a G_ReLU layer whose P ends with more mass off its permutation did not converge


def _converged(rows: pd.DataFrame) -> bool | None:
    """Whether every G_ReLU layer of ``rows`` ended near its permutation (None for other layers)."""
    mass = rows["off_permutation_mass"].dropna()
    return bool((mass <= CONVERGED_MASS).all()) if len(mass) else None


def stitching_convergence(table: pd.DataFrame) -> plt.Figure:
    """How far each G_ReLU layer's P is from the permutation it rounds to after each epoch (mean
    over pairs), per variant, site and method; layers ending above ``CONVERGED_MASS`` are named
    in the panel's title as not converged."""
    rows = (
        table[table["off_permutation_mass_by_epoch"].notna()]
        if "off_permutation_mass_by_epoch" in table
        else table.iloc[:0]
    )
    variants = list(dict.fromkeys(rows["variant"])) or ["(no G_ReLU layer trained)"]
    fig, panels = _panel_grid(len(variants), 4.0, 3.6)
    for ax, variant in zip(panels, variants):
        mine = rows[rows["variant"] == variant]
        sites = list(dict.fromkeys(mine["site"]))
        colors = {site: plt.cm.viridis(i / max(1, len(sites) - 1)) for i, site in enumerate(sites)}
        styles = {"grelu": "-", "grelu_cv": "-.", "softsort": ":"}
        for (site, method), group in mine.groupby(["site", "method"], sort=False):
            curves = np.array([list(curve) for curve in group["off_permutation_mass_by_epoch"]], dtype=float)
            ax.plot(
                range(1, curves.shape[1] + 1),
                curves.mean(0),
                marker="o",
                markersize=3,
                color=colors[site],
                linestyle=styles.get(method, "-"),
                label=f"{site} {_method_label(method)}",
            )
        ax.axhline(CONVERGED_MASS, color="grey", linewidth=0.8, linestyle="--")
        late = mine[mine["off_permutation_mass"] > CONVERGED_MASS]
        title = (
            variant
            if late.empty
            else f"{variant}: not converged at "
            + ", ".join(sorted({f"{r.site} ({r.method})" for r in late.itertuples()}))
        )
        ax.set(title=_wrapped(title, 48), xlabel="epoch", ylabel="off-permutation mass of P", ylim=(0, 1))
        ax.title.set_fontsize(9)
        if len(mine):
            ax.legend(fontsize=SMALL, loc="upper right", ncol=1 + (len(mine.groupby(["site", "method"])) > 6))
    return fig


def stitching_penalty(table: pd.DataFrame) -> plt.Figure:
    """Stitching penalty per site and method, mean with 95% CI over pairs, one panel per variant;
    residual-internal sites marked * (the paper's Figs. 1, 6, 7)."""
    variants = list(dict.fromkeys(table["variant"]))
    width = max(4.0, 0.3 * table.groupby("variant")["site"].nunique().max() + 2.5)
    # Two panels a row, one where a variant's sites make a panel wide: 8-pt labels stay at least
    # 8 pt when the figure is shown 800 px wide.
    fig, axes = _panel_grid(len(variants), width, 3.8, columns=2)
    for ax, variant in zip(axes, variants):
        _penalty_panel(ax, table[table["variant"] == variant], variant)
    _legend_of_every_panel(axes)
    return fig


def stitching_dimension(table: pd.DataFrame) -> plt.Figure:
    """Dimension of each stitching layer's parameter manifold per site: C for G_ReLU, 2Cr - r^2
    for rank r, C^2 for full (log scale)."""
    variants = list(dict.fromkeys(table["variant"]))
    width = max(4.0, 0.3 * table.groupby("variant")["site"].nunique().max() + 2.5)
    fig, panels = _panel_grid(len(variants), width, 3.4, columns=2)
    for ax, variant in zip(panels, variants):
        rows = table[table["variant"] == variant]
        sites, labels = _site_labels(rows)
        methods = _method_order(rows["method"])
        for method in methods:
            dims = [
                rows.loc[(rows["site"] == site) & (rows["method"] == method), "stitch_params"].iloc[0]
                for site in sites
            ]
            ax.plot(range(len(sites)), dims, **_method_style(method, methods))
        ax.set_yscale("log")
        ax.set_xticks(range(len(sites)), labels, rotation=45, ha="right", fontsize=SMALL)
        ax.set_title(variant)
        ax.set_ylabel("parameter dimension")
        ax.grid(alpha=0.3)
    _legend_of_every_panel(panels)
    return fig


def _study_rows(table: pd.DataFrame, mask, what: str, hint: str) -> pd.DataFrame:
    """The rows a study figure draws, or a ValueError that says which configuration makes them."""
    rows = table[mask]
    if rows.empty:
        raise ValueError(f"the stitching table has no rows for {what}: {hint}")
    return rows


def _paired(rows: pd.DataFrame, methods: list[str]) -> pd.DataFrame:
    """Rows of those of ``methods`` present, kept only for (variant, pair, site) that have all of
    them, so that methods are compared on the same pairs."""
    rows = rows[rows["method"].isin(methods)]
    present = rows.groupby(["variant", "pair", "site"])["method"].transform("nunique")
    return rows[present == rows["method"].nunique()]


def _slope_label(slope: float) -> str:
    return "0 (ReLU)" if slope == 0 else f"{slope:g}"


def leaky_relu_accuracy(zoo: pd.DataFrame, slopes: dict[str, float]) -> pd.DataFrame:
    """Zoo test accuracy per LeakyReLU negative slope (``slopes``: variant -> slope, ReLU 0):
    members, mean and 95% CI in %, beside the paper's Table 3 (empty where it has none)."""
    from intertwine.paper import reported_leaky_accuracy

    rows = []
    for variant, slope in sorted(slopes.items(), key=lambda item: item[1]):
        acc = 100 * zoo.loc[zoo["variant"] == variant, "test_acc"].to_numpy()
        if len(acc) == 0:
            continue
        mean, half = mean_ci(acc)
        rows.append(
            {
                "slope": float(slope),
                "variant": variant,
                "members": len(acc),
                "test_acc_mean": round(mean, 2),
                "test_acc_ci95": round(half, 2),
                "paper_test_acc": reported_leaky_accuracy(slope),
            }
        )
    if not rows:
        raise ValueError(
            f"the zoo has no members of the LeakyReLU variants {list(slopes)}: list them under zoo.variants"
        )
    return pd.DataFrame(rows)


def leaky_relu_penalty(
    table: pd.DataFrame, slopes: dict[str, float], accuracy: pd.DataFrame, zoo: pd.DataFrame | None = None
) -> plt.Figure:
    """Left: G_ReLU stitching penalty per site, one line per LeakyReLU slope (mean, 95% CI over
    pairs; the paper's Fig. 8). Right: zoo test accuracy per slope (``accuracy``, from
    :func:`leaky_relu_accuracy`; the members' own accuracies from ``zoo`` where too few for an
    interval) beside the paper's Table 3."""
    rows = _study_rows(
        table,
        table["variant"].isin(list(slopes)) & (table["method"] == "grelu"),
        f"G_ReLU stitching of the LeakyReLU variants {list(slopes)}",
        "list them in stitching.variants and grelu in stitching.methods",
    )
    ordered = sorted((v for v in slopes if v in set(rows["variant"])), key=lambda v: slopes[v])
    sites, labels = _site_labels(rows)
    # the penalties over the accuracies, each the report's width
    fig, (left, right) = plt.subplots(2, 1, figsize=(FIGURE_WIDTH * 0.8, 7.4), layout="constrained")
    for k, variant in enumerate(ordered):
        part = rows[rows["variant"] == variant]
        _site_errorbar(
            left,
            part,
            sites,
            marker="o",
            markersize=4,
            color=plt.cm.viridis(0.9 * k / max(1, len(ordered) - 1)),
            label=f"{_slope_label(slopes[variant])} ({_count(part['pair'].nunique(), 'pair')})",
        )
    left.set_xticks(range(len(sites)), labels, rotation=45, ha="right", fontsize=SMALL)
    left.axhline(0, color="gray", linewidth=0.8)
    means = 100 * rows.groupby(["variant", "site"])["penalty"].mean()
    left.set_ylim(max(-100.0, min(0.0, means.min()) - 10), min(100.0, means.max() + 15))
    left.set_ylabel("G_ReLU stitching penalty (accuracy points)")
    left.set_title("G_ReLU stitching per negative slope")
    left.grid(axis="y", alpha=0.3)
    left.legend(
        fontsize=SMALL, title="slope", title_fontsize=SMALL, loc="upper left", bbox_to_anchor=(1.01, 1)
    )

    x = np.arange(len(accuracy))
    right.errorbar(
        x,
        accuracy["test_acc_mean"],
        yerr=_drawn_half(accuracy["test_acc_ci95"], accuracy["members"]),
        fmt="o",
        color="black",
        capsize=3,
        label="ours (mean, 95% CI)",
    )
    if zoo is not None:
        for at, variant in zip(x, accuracy["variant"]):
            _few_values(right, at, 100 * zoo.loc[zoo["variant"] == variant, "test_acc"].to_numpy(), "black")
    paper = accuracy["paper_test_acc"].astype(float)
    if paper.notna().any():
        right.plot(
            x[paper.notna().to_numpy()],
            paper.dropna(),
            "x",
            color="C3",
            markersize=8,
            label="paper (Table 3, CIFAR-10)",
        )
    right.set_xticks(x, [_slope_label(s) for s in accuracy["slope"]], rotation=45, ha="right", fontsize=SMALL)
    right.set_xlabel("negative slope")
    right.set_ylabel("zoo test accuracy (%)")
    bottom, top = right.get_ylim()
    right.set_ylim(max(0.0, bottom), min(100.0, top))  # an interval may reach past 100 %
    right.set_title("Zoo accuracy per slope")
    right.grid(axis="y", alpha=0.3)
    right.legend(fontsize=SMALL, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def _chosen_alpha(rows: pd.DataFrame) -> np.ndarray:
    if "alpha_selected" in rows and rows["alpha_selected"].notna().all():
        return rows["alpha_selected"].to_numpy(dtype=float)
    return rows["alpha"].to_numpy(dtype=float)


def alpha_selection(table: pd.DataFrame) -> plt.Figure:
    """One row per variant. Left: how many pairs chose each alpha of the cross-validation grid,
    one bar per site (the paper's Figs. 13, 14). Right: penalty per site of G_ReLU with alpha by
    cross-validation beside the fixed alpha, on the same pairs."""
    cv = _study_rows(
        table,
        table["method"] == "grelu_cv",
        "G_ReLU with alpha by cross-validation",
        "add grelu_cv to stitching.methods",
    )
    chosen = _chosen_alpha(cv)
    listed = (
        [float(a) for grid in cv["cv_alphas"] if isinstance(grid, (list, tuple, np.ndarray)) for a in grid]
        if "cv_alphas" in cv
        else []
    )
    grid = np.unique(np.round(np.concatenate([listed, chosen]), 12))
    variants = list(dict.fromkeys(cv["variant"]))
    n_sites = cv.groupby("variant")["site"].nunique().max()
    # each variant's histogram over its penalties, two variants a row (one where sites are many)
    columns = 2 if n_sites <= 8 and len(grid) <= 6 else 1
    fig, axes = _stacked_pairs(len(variants), 3.4 + 0.2 * np.ceil(n_sites / 3), 3.6, columns)
    for (hist, penalty), variant in zip(axes, variants):
        rows = cv[cv["variant"] == variant]
        picked = _chosen_alpha(rows)
        sites, labels = _site_labels(rows)
        width = 0.8 / len(sites)
        for k, (site, label) in enumerate(zip(sites, labels)):
            at = picked[(rows["site"] == site).to_numpy()]
            counts = [int(np.isclose(at, alpha).sum()) for alpha in grid]
            hist.bar(
                np.arange(len(grid)) + (k - (len(sites) - 1) / 2) * width,
                counts,
                width,
                label=label,
                color=plt.cm.viridis(0.9 * k / max(1, len(sites) - 1)),
            )
        hist.set_xticks(range(len(grid)), [f"{alpha:g}" for alpha in grid])
        hist.set_xlabel(r"$\alpha$ chosen by cross-validation")
        hist.set_ylabel("pairs")
        hist.set_title(
            _wrapped(f"{variant}: chosen alpha per site ({_count(rows['pair'].nunique(), 'pair')})", 40),
            fontsize=9,
        )
        hist.yaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        hist.grid(axis="y", alpha=0.3)
        hist.legend(
            fontsize=SMALL,
            title="site",
            title_fontsize=SMALL,
            ncol=min(len(sites), 3),
            loc="upper center",
            bbox_to_anchor=(0.5, -0.25),
        )
        _penalty_panel(penalty, _paired(table[table["variant"] == variant], ["grelu", "grelu_cv"]), variant)
        penalty.legend(fontsize=SMALL)
    return fig


def l1_sparsity(table: pd.DataFrame) -> plt.Figure:
    """Stitching penalty against the layer's sparsity (fraction of entries |W_ij| <= 1e-3), one
    point per pair and site, one colour per L1 weight, with the plain full layer (lambda 0) and
    the G_ReLU layers (sparsity 1 - 1/C) for comparison; one panel per variant (the paper's Fig. 15)."""
    l1 = _study_rows(
        table,
        table["method"].str.startswith("l1_"),
        "L1-regularised full stitching",
        "add l1_<lambda> methods (e.g. l1_0.01) to stitching.methods",
    )
    if "sparsity" not in table:
        raise ValueError("the stitching table has no sparsity column: rerun the stitching stage")
    variants = list(dict.fromkeys(l1["variant"]))
    fig, panels = _panel_grid(len(variants), 4.0, 3.8)
    for ax, variant in zip(panels, variants):
        rows = table[
            (table["variant"] == variant)
            & (table["method"].str.startswith("l1_") | table["method"].isin(["full", *G_RELU_METHODS]))
        ]
        methods = _method_order(rows["method"])
        for method in methods:
            part = rows[rows["method"] == method]
            style = _method_style(method, methods)
            if method == "full":
                style["label"] = "full (λ=0)"
            ax.scatter(
                part["sparsity"],
                100 * part["penalty"],
                s=18,
                alpha=0.75,
                color=style["color"],
                marker=style["marker"],
                label=style["label"],
            )
        ax.axhline(0, color="gray", linewidth=0.8)
        ax.set_xlim(-0.03, 1.03)
        ax.set_xlabel("sparsity (fraction of |W_ij| <= 1e-3)")
        ax.set_ylabel("stitching penalty (accuracy points)")
        ax.set_title(
            f"{variant} ({_count(rows['pair'].nunique(), 'pair')}, {_count(rows['site'].nunique(), 'site')})",
            fontsize=9,
        )
        ax.grid(alpha=0.3)
    _legend_of_every_panel(panels)
    return fig


def softsort_comparison(table: pd.DataFrame) -> plt.Figure:
    """One row per variant, on the pairs stitched by both: penalty per site of the SoftSort-
    parameterised G_ReLU layer beside the Birkhoff one (left) and their training wall time per
    site (right, log scale; the paper found SoftSort over 10x slower, appendix D.2.2)."""
    soft = _study_rows(
        table, table["method"] == "softsort", "SoftSort stitching", "add softsort to stitching.methods"
    )
    variants = list(dict.fromkeys(soft["variant"]))
    n_sites = soft.groupby("variant")["site"].nunique().max()
    # each variant's penalties over its times, two variants a row (one where sites are many)
    fig, axes = _stacked_pairs(len(variants), 3.8, 3.4, 2 if n_sites <= 10 else 1)
    for (penalty, seconds), variant in zip(axes, variants):
        rows = _paired(table[table["variant"] == variant], ["grelu", "softsort"])
        _penalty_panel(penalty, rows, variant)
        penalty.legend(fontsize=SMALL)
        sites, labels = _site_labels(rows)
        methods = _method_order(rows["method"])
        for method in methods:
            _site_errorbar(
                seconds,
                rows[rows["method"] == method],
                sites,
                "train_seconds",
                1.0,
                markersize=5,
                **_method_style(method, methods),
            )
        total = rows.groupby("method")["train_seconds"].sum()
        ratio = (
            f": SoftSort {total['softsort'] / total['grelu']:.1f}x G_ReLU's time"
            if {"softsort", "grelu"} <= set(total.index) and total["grelu"] > 0
            else ""
        )
        seconds.set_yscale("log")
        seconds.set_xticks(range(len(sites)), labels, rotation=45, ha="right", fontsize=SMALL)
        seconds.set_ylabel("training wall time (s)")
        seconds.set_title(_wrapped(f"{variant}{ratio}", 40), fontsize=9)
        seconds.grid(axis="y", alpha=0.3)
        seconds.legend(fontsize=SMALL)
    return fig


def transformer_penalty(table: pd.DataFrame, variants: list[str]) -> plt.Figure:
    """Stitching penalty after each encoder block of the transformer ``variants`` (the paper's
    Fig. 12): the full layer is there a linear map on each token's features."""
    rows = _study_rows(
        table,
        table["variant"].isin(list(variants)),
        f"the transformer variants {list(variants)}",
        "list them in stitching.variants",
    )
    return stitching_penalty(rows)


MEASURE_LABELS = {
    "grelu_procrustes": "G_ReLU Procrustes",
    "orthogonal_procrustes": "orthogonal Procrustes",
    "grelu_cka": "G_ReLU CKA",
    "linear_cka": "linear CKA",
    "laplace_cka": "Laplace CKA",
    "channel_normalized_linear_cka": "linear CKA (channels normalised)",
    "gate_cka": "gate CKA",
    "npk_cka": "NPK CKA",
    "rbf_cka": "RBF CKA",
    "svcca": "SVCCA",
    "pwcca": "PWCCA",
    "shape_angular": "angular shape distance",
    "shape_euclidean": "Euclidean shape distance",
}


def similarity_summary(table: pd.DataFrame, paper: dict[str, dict[str, dict[str, float]]]) -> pd.DataFrame:
    """Procrustes per variant, site and measure (mean, 95% CI over pairs) beside the paper's value,
    and the CKA of each site with the same site of the other model (the heatmaps' diagonal)."""
    same = table[table["site_a"] == table["site_b"]]
    rows = []
    for (variant, site, measure), group in same.groupby(["variant", "site_a", "measure"], sort=False):
        mean, half = mean_ci(group["value"])
        rows.append(
            {
                "variant": variant,
                "site": site,
                "measure": measure,
                "pairs": len(group),
                "mean": round(mean, 4),
                "ci95": round(half, 4),
                "paper": paper.get(variant, {}).get(measure, {}).get(site),
            }
        )
    return pd.DataFrame(rows)


def similarity_procrustes(table: pd.DataFrame, paper: dict[str, dict[str, dict[str, float]]]) -> plt.Figure:
    """G_ReLU vs orthogonal Procrustes similarity per site, mean with 95% CI over pairs, one panel
    per variant; the paper's CIFAR-10 values as crosses where they exist (Table 2; Figs. 9, 10)."""
    rows = table[table["measure"].str.endswith("procrustes")]
    variants = list(dict.fromkeys(rows["variant"]))
    fig, panels = _panel_grid(len(variants), 4.0, 3.6)
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
                _few_values(ax, at, v, color)
            reported = paper.get(variant, {}).get(measure, {})
            if reported:
                ax.plot(
                    [i for i, s in enumerate(sites) if s in reported],
                    [reported[s] for s in sites if s in reported],
                    "x",
                    color=color,
                    markersize=8,
                    label=f"paper ({MEASURE_LABELS.get(measure, measure)})",
                )
        ax.set_xticks(range(len(sites)), sites, rotation=45, ha="right", fontsize=SMALL)
        ax.set_ylim(0, 1)
        ax.set_title(f"{variant} ({_count(part['pair'].nunique(), 'pair')})")
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
                f"{variant} ({_count(part['pair'].nunique(), 'pair')})\n{MEASURE_LABELS.get(measure, measure)}",
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
    fig, pairs = _stacked_pairs(len(variants), 3.1, 2.9, sharex=True)
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
                mean, half = rows[column].to_numpy(), _drawn_half(rows[ci], rows["samples"])
                ax.plot(rows["alpha"], mean, label=label, **style)
                ax.fill_between(rows["alpha"], mean - half, mean + half, color=style["color"], alpha=0.15)
                for alpha, at in samples.groupby("alpha")[drawn]:
                    _few_values(ax, alpha, at, style["color"])
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
    fig, panels = _panel_grid(len(variants), 4.0, 3.4)
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


# --- gated networks --------------------------------------------------------------------------

FAMILY_ORDER = ("dnn", "dgn", "dlgn", "dlgn_sf")


def _gated_columns(table: pd.DataFrame) -> list[tuple[str, str]]:
    """(family, value input) columns of the study's standalone, identity-gate members, in order."""
    present = set(zip(table["family"], table["value_input"]))
    return [(f, v) for f in FAMILY_ORDER for v in ("x", "ones") if (f, v) in present]


def _paper_reference(rows: pd.DataFrame) -> tuple[float, float, str] | None:
    """(mean %, sd %, "Table T: row") of the paper's number for a group of the gated table's
    members (``paper.reported_gated``: the data set, base, gates and training budget they have),
    or None where the paper reports none."""
    reported = rows.dropna(subset=["paper_acc"])
    if reported.empty:
        return None
    first = reported.iloc[0]
    return (
        100 * first["paper_acc"],
        100 * first["paper_sd"],
        f"Table {first['paper_table']}: {first['paper_row']}",
    )


def gated_accuracy(table: pd.DataFrame) -> plt.Figure:
    """Test accuracy per family x value input (standalone regime, identity gates; mean and sd over
    seeds, members as dots) per base architecture, each beside the paper's number for those members
    where it reports one (grey bar: the table row that matches their data set, base and training
    budget, ``paper.reported_gated``) and, in a second panel, the FL and FR regimes."""
    from intertwine.paper import gated_label

    standalone = table[(table["regime"].isna() | (table["regime"] == "standalone")) & ~table["permuted"]]
    regimes = table[table["regime"].isin(["fl", "fr"]) & ~table["permuted"]]
    # the standalone members over the FL and FR regimes, each the report's width
    fig, axes = plt.subplots(
        2, 1, figsize=(FIGURE_WIDTH, 7.0), layout="constrained", height_ratios=[3.8, 3.0]
    )
    ax = axes[0]
    columns = _gated_columns(standalone)
    archs = list(dict.fromkeys(standalone["base"]))
    width = 0.8 / (2 * len(archs))
    sources = []
    for k, arch in enumerate(archs):
        for i, (family, value_input) in enumerate(columns):
            where = dict(base=arch, family=family, value_input=value_input)
            acc = _group_acc(standalone, **where)
            if not len(acc):
                continue
            x = i + (2 * k - len(archs)) * width
            ax.bar(
                x,
                acc.mean(),
                width,
                yerr=acc.std(ddof=1) if len(acc) > 1 else 0,
                color=f"C{k}",
                label=f"ours: {arch}" if i == 0 else None,
            )
            ax.scatter(np.full(len(acc), x), acc, s=8, color="k", zorder=3)
            reference = _paper_reference(_group_rows(standalone, **where))
            if reference is not None:
                mean, sd, source = reference
                ax.bar(x + width, mean, width, yerr=sd, color="0.7", label=None if sources else "the paper's")
                sources.append(source.split(",")[0])
    ax.set_xticks(
        range(len(columns)),
        [gated_label("dnn" if f == "dnn" else f"{f} {v}") for f, v in columns],
        fontsize=SMALL if len(columns) > 6 else None,
    )
    ax.set_ylabel("test accuracy (%)")
    reference_note = "; ".join(dict.fromkeys(sources)) if sources else "no paper number at this budget"
    ax.set_title(_wrapped(f"standalone: family x value input (grey: {reference_note})", 90), fontsize=9)
    ax.legend(fontsize=SMALL, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax = axes[1]
    if len(regimes):
        groups = list(dict.fromkeys(zip(regimes["variant"], regimes["regime"], regimes["family"])))
        for i, (variant, regime, family) in enumerate(groups):
            acc = regimes.loc[regimes["variant"] == variant, "test_acc"].to_numpy() * 100
            ax.bar(i, acc.mean(), 0.6, color="C2" if regime == "fl" else "C4")
            ax.scatter(np.full(len(acc), i), acc, s=8, color="k", zorder=3)
        ax.set_xticks(
            range(len(groups)), [f"{r.upper()} {f.upper()}\n{v}" for v, r, f in groups], fontsize=SMALL
        )
        ax.set_ylabel("test accuracy (%)")
        ax.set_title("feature network learned (FL) or random (FR)", fontsize=9)
    else:
        ax.text(0.5, 0.5, "no FL / FR variants", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    return fig


def _group_rows(table: pd.DataFrame, **where) -> pd.DataFrame:
    """The rows whose columns equal ``where``'s values."""
    mask = np.ones(len(table), bool)
    for column, value in where.items():
        mask &= (table[column] == value).to_numpy()
    return table[mask]


def _group_acc(table: pd.DataFrame, **where) -> np.ndarray:
    return _group_rows(table, **where)["test_acc"].to_numpy() * 100


def gated_permutations(table: pd.DataFrame) -> plt.Figure:
    """Test accuracy per gate-layer permutation (identity first) for each family x value input that
    has permuted members, beside the paper's mean over the 23 permutations where it reports one for
    those members (Table I's permuted row of their data set, ``paper.reported_gated``)."""
    from intertwine.paper import gated_label

    rows = table[table["family"] != "dnn"].copy()
    rows["perm"] = rows["gate_perm"].fillna("identity")
    keys = [
        k
        for k in dict.fromkeys(zip(rows["base"], rows["family"], rows["value_input"]))
        if rows[(rows["base"] == k[0]) & (rows["family"] == k[1]) & (rows["value_input"] == k[2])][
            "permuted"
        ].any()
    ]
    n_perms = len(rows["perm"].unique())
    fig, ax = plt.subplots(figsize=(min(FIGURE_WIDTH, max(5, 0.9 * n_perms + 2)), 3.8), layout="constrained")
    perms = ["identity"] + sorted(p for p in rows["perm"].unique() if p != "identity")
    for k, (arch, family, value_input) in enumerate(keys):
        part = rows[
            (rows["base"] == arch) & (rows["family"] == family) & (rows["value_input"] == value_input)
        ]
        xs, means = [], []
        for i, perm in enumerate(perms):
            acc = part.loc[part["perm"] == perm, "test_acc"].to_numpy() * 100
            if len(acc):
                ax.scatter(np.full(len(acc), i), acc, s=10, color=f"C{k}", alpha=0.6)
                xs.append(i), means.append(acc.mean())
        key = f"{family} {value_input}"
        ax.plot(xs, means, "-o", color=f"C{k}", label=f"{arch} {gated_label(key)}")
        reference = _paper_reference(part[part["permuted"]])
        if reference is not None:
            ax.axhline(reference[0], color=f"C{k}", ls=":", lw=1)
    ax.set_xticks(range(len(perms)), perms, rotation=30 if n_perms <= 8 else 90, fontsize=SMALL)
    ax.set_xlabel("gate layer of each value layer (gate_perm)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(
        _wrapped("gate-layer permutations (dotted: the paper's mean over 23, Table I of the data set)", 60),
        fontsize=9,
    )
    ax.legend(fontsize=SMALL, loc="best")
    return fig


def gated_kernels(npk: pd.DataFrame, similarity: pd.DataFrame | None) -> plt.Figure:
    """Left: across seeds, CKA at each site with the same site of the other member: gate CKA beside
    linear and G_ReLU CKA (the similarity stage's heatmap diagonals; study variants only). Right:
    each kernel's CKA with the member's empirical NTK (NPK and per-site gate kernels)."""
    # the CKAs across seeds over the CKAs with the NTK, each the report's width
    fig, axes = plt.subplots(2, 1, figsize=(FIGURE_WIDTH, 7.6), layout="constrained")
    ax = axes[0]
    variants = list(dict.fromkeys(npk["variant"]))
    if similarity is not None:
        same = similarity[
            (similarity["site_a"] == similarity["site_b"]) & similarity["variant"].isin(variants)
        ]
        measures = [m for m in ("gate_cka", "linear_cka", "grelu_cka") if m in set(same["measure"])]
        styles = {"gate_cka": "-", "linear_cka": "--", "grelu_cka": ":"}
        for k, variant in enumerate(v for v in variants if v in set(same["variant"])):
            for measure in measures:
                part = same[
                    (same["variant"] == variant) & (same["measure"] == measure) & (same["site_a"] != "model")
                ]
                means = part.groupby("site_a", sort=False)["value"].mean()
                ax.plot(
                    range(len(means)),
                    means.to_numpy(),
                    styles[measure],
                    marker="o",
                    ms=3,
                    color=f"C{k}",
                    label=f"{variant}: {MEASURE_LABELS[measure]}",
                )
                ax.set_xticks(range(len(means)), means.index, rotation=45, ha="right", fontsize=SMALL)
        ax.set_ylabel("CKA across seeds (same site)")
        ax.legend(fontsize=SMALL, loc="upper left", bbox_to_anchor=(1.01, 1))
    else:
        ax.text(
            0.5,
            0.5,
            "the similarity stage compares\nno variant of the study",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.set_axis_off()
    ax = axes[1]
    for k, variant in enumerate(variants):
        part = npk[npk["variant"] == variant]
        gates = part[part["kernel"] == "gate"].groupby("site", sort=False)["ntk_cka"].mean()
        ax.plot(range(len(gates)), gates.to_numpy(), "-o", ms=3, color=f"C{k}", label=variant)
        model = part.loc[part["kernel"] == "npk", "ntk_cka"]
        if len(model):
            ax.axhline(model.mean(), color=f"C{k}", ls="--", lw=1)
    ax.set_xlabel("site (gate kernel); dashed: the value network's NPK")
    ax.set_ylabel("CKA with the empirical NTK")
    ax.legend(fontsize=SMALL, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig


def save_figure(fig: plt.Figure, paths, dpi: int = 150) -> None:
    for path in paths:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=dpi, format=Path(path).suffix.lstrip("."))
    plt.close(fig)


# --- linear mode connectivity -------------------------------------------------------------------

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
    fig, pairs = _stacked_pairs(len(columns), 2.9, 2.9, sharex=True)
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
        axes[0, column].set_title(f"{title} ({_count(pairs, 'pair')})", fontsize=9)
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
    fig, axes = _panel_grid(len(panels), 4.0, 3.4)
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
                _few_values(ax, width * dodge, values, color)
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


# --- DEQ neural tangent kernel ------------------------------------------------------------------


def _variances_label(w: float, u: float, b: float) -> str:
    return f"({w:g}, {u:g}, {b:g})"


def deqntk_accuracy(table: pd.DataFrame, zoo: pd.DataFrame | None, paper: dict) -> plt.Figure:
    """The DEQ-NTK's test accuracy per variance setting (sigma_w2, sigma_u2, sigma_b2), one marker
    per training-set size, the paper's number (``paper``: {variances: %}) as a cross; beside it the
    zoo's members (dots) and their mean with its 95 % t interval."""
    rows = table[table["study"] == "accuracy"]
    settings = list(dict.fromkeys(zip(rows["sigma_w2"], rows["sigma_u2"], rows["sigma_b2"])))
    variants = [] if zoo is None else list(dict.fromkeys(zoo["variant"]))
    sizes = sorted(rows["n_train"].unique())
    # at most 16 columns a row: the zoo's variants past the first row wrap onto rows below
    first = max(16 - len(settings), 4)
    more = _chunks(variants[first:], 16) if len(variants) > first else []
    fig, axes = plt.subplots(
        1 + len(more),
        1,
        figsize=(
            min(FIGURE_WIDTH, max(5.0, 0.5 * (len(settings) + len(variants)) + 2)),
            4.4 + 3.2 * len(more),
        ),
        layout="constrained",
        squeeze=False,
        height_ratios=[4.4] + [3.2] * len(more),
    )
    ax = axes[0, 0]
    for k, n in enumerate(sizes):
        for i, setting in enumerate(settings):
            part = rows[
                (rows["n_train"] == n)
                & (rows["sigma_w2"] == setting[0])
                & (rows["sigma_u2"] == setting[1])
                & (rows["sigma_b2"] == setting[2])
            ]
            x = i + 0.5 * (k - (len(sizes) - 1) / 2) / max(1, len(sizes))
            ax.plot(
                np.full(len(part), x),
                100 * part["test_acc"],
                "o",
                color=f"C{k}",
                label=f"DEQ-NTK, {n:,} training images" if i == 0 else None,
            )
    crossed = False
    for i, setting in enumerate(settings):
        reported = next(
            (acc for key, acc in paper.items() if np.allclose(key, setting, atol=1e-9)),
            None,
        )
        if reported is not None:
            ax.plot(
                i,
                reported,
                "x",
                color="C3",
                markersize=9,
                label=None if crossed else "paper (50,000 training images)",
            )
            crossed = True
    for row, (at, shown) in enumerate(
        [(ax, variants[:first])] + [(a, chunk) for a, chunk in zip(axes[1:, 0], more)]
    ):
        start = len(settings) if row == 0 else 0
        for j, variant in enumerate(shown):
            acc = 100 * zoo.loc[zoo["variant"] == variant, "test_acc"].to_numpy()
            x = start + j
            at.scatter(np.full(len(acc), x - 0.1), acc, s=10, alpha=0.6, color="0.4")
            at.errorbar(x + 0.1, acc.mean(), yerr=interval_half_width(acc), fmt="s", color="black", capsize=3)
        if row:
            at.set_xticks(range(len(shown)), shown, rotation=45, ha="right", fontsize=SMALL)
            at.set_ylabel("test accuracy (%)")
            at.grid(axis="y", alpha=0.3)
    if variants:
        ax.errorbar([], [], yerr=[], fmt="s", color="black", label="zoo: mean, 95% CI (dots: members)")
        ax.axvline(len(settings) - 0.5, color="0.8", lw=1)
    labels = [f"DEQ-NTK\n{_variances_label(*s)}" for s in settings] + variants[:first]
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize=SMALL)
    n_test = ", ".join(f"{n:,}" for n in sorted(rows["n_test"].unique()))
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(
        _wrapped(
            f"Kernel regression with the DEQ-NTK (sigma_w2, sigma_u2, sigma_b2) beside the trained zoo; {n_test} test images",
            80,
        ),
        fontsize=9,
    )
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=SMALL, loc="best")
    return fig


def _depth_panel(ax, rows: pd.DataFrame, depths: list[int]) -> None:
    """One panel of the depth sweep: each finite network's accuracy over depth and each DEQ-NTK's
    (flat), means over draws with 95 % t intervals (the draws themselves below three)."""
    finite = rows[rows["depth"] != "deq"].assign(L=lambda df: df["depth"].astype(int))
    equilibrium = rows[rows["depth"] == "deq"]
    for k, ((w, u, b), part) in enumerate(finite.groupby(["sigma_w2", "sigma_u2", "sigma_b2"], sort=False)):
        color = f"C{k}"
        means, halves = [], []
        for depth in depths:
            acc = 100 * part.loc[part["L"] == depth, "test_acc"].dropna().to_numpy()
            means.append(acc.mean() if len(acc) else np.nan)
            halves.append(interval_half_width(acc) if len(acc) else np.nan)
            _few_values(ax, depth, acc, color)
        means, halves = np.array(means), np.array(halves)
        ax.plot(depths, means, "-o", ms=4, color=color, label=f"depth-L NTK {_variances_label(w, u, b)}")
        ax.fill_between(depths, means - halves, means + halves, color=color, alpha=0.2, lw=0)
    for (w, u, b), part in equilibrium.groupby(["sigma_w2", "sigma_u2", "sigma_b2"], sort=False):
        acc = 100 * part["test_acc"].dropna().to_numpy()
        mean, half = acc.mean(), interval_half_width(acc)
        span = [min(depths, default=1), max(depths, default=1)]
        ax.plot(span, [mean, mean], "--", color="black", label=f"DEQ-NTK {_variances_label(w, u, b)}")
        if np.isfinite(half):
            ax.fill_between(span, mean - half, mean + half, color="black", alpha=0.12, lw=0)
        else:
            for value in acc:
                ax.plot(span, [value, value], ":", color="black", lw=0.8, alpha=0.6)
    ax.set_xscale("log", base=2)
    ax.set_xticks(depths, [str(d) for d in depths])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("depth L (hidden layers)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=SMALL, loc="best")


def deqntk_depth(table: pd.DataFrame) -> plt.Figure:
    """The paper's Figure 1: test accuracy of the depth-L NTK against depth, per finite network's
    variances, and of the DEQ-NTK (flat: it has no depth), mean over draws with the 95 % t interval
    (the draws themselves below three). One panel per ``panel`` of the table (the paper's: the
    depth-L NTK at (sigma_w2, 0, sigma_b2) against its DEQ-NTK), the curves outside the panels
    (panel "") in a first panel of their own."""
    rows = table[table["study"] == "depth"]
    if "panel" not in rows:
        rows = rows.assign(panel="")
    rows = rows.assign(panel=rows["panel"].fillna(""))
    depths = sorted(rows.loc[rows["depth"] != "deq", "depth"].astype(int).unique())
    # the curves outside the panels first, then the panels in the config's order
    panels = sorted(dict.fromkeys(rows["panel"]), key=lambda name: name != "") or [""]
    if len(panels) == 1:
        fig, axes = plt.subplots(figsize=(6.4, 4.0), layout="constrained", squeeze=False)
    else:
        fig, flat = _panel_grid(len(panels), 4.0, 4.0)
        axes = [flat]
    for ax, panel in zip(axes[0], panels):
        _depth_panel(ax, rows[rows["panel"] == panel], depths)
        if panel:
            w, b = panel[1:].split("_b")
            ax.set_title(f"$\\sigma_W^2$ = {w}, $\\sigma_b^2$ = {b}", fontsize=9)
    axes[0][0].set_ylabel("test accuracy (%)")
    draws = rows["draw"].nunique()
    sizes = (
        f"{int(rows['n_train'].iloc[0]):,} training / {int(rows['n_test'].iloc[0]):,} test images"
        if len(rows)
        else ""
    )
    fig.suptitle(
        _wrapped(
            f"Finite depth against the equilibrium: {sizes}, {_count(draws, 'draw')}, 95% t intervals", 90
        ),
        fontsize=9,
    )
    return fig


def deqntk_reference(reference: pd.DataFrame) -> plt.Figure:
    """CKA of each site's representation with the DEQ-NTK Gram of the same images, one panel per
    variant: per kernel of the representation (the similarity measure's), the mean over members
    (members as dots)."""
    variants = list(dict.fromkeys(reference["variant"]))
    fig, flat = _panel_grid(len(variants), 4.0, 3.8)
    axes = [flat]
    for ax, variant in zip(axes[0], variants):
        part = reference[reference["variant"] == variant]
        sites = list(dict.fromkeys(part["site"]))
        for k, kernel in enumerate(dict.fromkeys(part["kernel"])):
            rows = part[part["kernel"] == kernel]
            means = rows.groupby("site", sort=False)["cka"].mean().reindex(sites)
            ax.plot(
                range(len(sites)),
                means.to_numpy(),
                "-o",
                ms=3,
                color=f"C{k}",
                label=MEASURE_LABELS.get(kernel, kernel),
            )
            if rows["seed"].nunique() > 1:
                x = [sites.index(site) for site in rows["site"]]
                ax.scatter(x, rows["cka"], s=6, color=f"C{k}", alpha=0.4)
        ax.set_xticks(range(len(sites)), sites, rotation=45, ha="right", fontsize=SMALL)
        ax.set_title(f"{variant} ({_count(part['seed'].nunique(), 'member')})", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("CKA with the DEQ-NTK")
    axes[0][0].legend(fontsize=SMALL)
    return fig


# --- excitation pullbacks ------------------------------------------------------------------------

PULLBACK_MODES = {
    "gradient": "gradient",
    "global": "pullback, global T",
    "per_neuron": "pullback, per-neuron T",
}


def _pullback_modes(table: pd.DataFrame) -> list[str]:
    return [mode for mode in PULLBACK_MODES if mode in set(table["mode"])]


def _rgb(images: np.ndarray) -> np.ndarray:
    """uint8 (N, C, H, W) or floats in [0, 1] -> (N, H, W, 3) floats in [0, 1]."""
    images = images.astype(float) / (255.0 if images.dtype == np.uint8 else 1.0)
    if images.shape[1] == 1:
        images = np.repeat(images, 3, axis=1)
    return images.transpose(0, 2, 3, 1)


def _signed_rgb(attribution: np.ndarray) -> np.ndarray:
    """Attributions (N, C, H, W) as images: 0.5 + 0.5 v / max|v| per image (grey is zero)."""
    scale = np.abs(attribution).reshape(len(attribution), -1).max(1).clip(1e-30)
    return _rgb(0.5 + 0.5 * attribution / scale[:, None, None, None])


def pullback_symmetry(table: pd.DataFrame) -> plt.Figure:
    """Per variant, 1 - cosine between a member's pullbacks and those of the same function with a
    random group element on its weights, against the G_ReLU scale spread (0: permutations), per
    temperature mode: solid the smallest cosine over members and images, dashed the mean. Rounding
    level (about 1e-16) is invariance."""
    table = at_stage_temperature(table)
    variants = list(dict.fromkeys(table["variant"]))
    fig, flat = _panel_grid(len(variants), 4.0, 3.6)
    axes = [flat]
    floor = 1e-17
    for ax, variant in zip(axes[0], variants):
        part = table[table["variant"] == variant]
        spreads = sorted(set(part["scale_spread"]))
        for k, mode in enumerate(_pullback_modes(part)):
            rows = part[part["mode"] == mode].groupby("scale_spread")
            worst = (1 - rows["cos_min"].min()).reindex(spreads).clip(lower=floor)
            mean = (1 - rows["cos_mean"].mean()).reindex(spreads).clip(lower=floor)
            x = range(len(spreads))
            ax.plot(x, worst.to_numpy(), "-o", ms=4, color=f"C{k}", label=PULLBACK_MODES[mode])
            ax.plot(x, mean.to_numpy(), "--", color=f"C{k}", lw=1)
        ax.set_yscale("log")
        ax.set_ylim(floor / 2, 2)
        ax.axhline(1e-10, color="0.6", lw=0.8, ls=":")
        ax.set_xticks(range(len(spreads)), ["perm." if s == 0 else f"{s:g}" for s in spreads])
        ax.set_xlabel("G_ReLU scale spread sigma\n(perm.: permutations)")
        ax.set_title(f"{variant} ({_count(part['seed'].nunique(), 'member')})", fontsize=9)
        ax.grid(alpha=0.3)
    for ax in axes[0]:
        ax.set_ylabel("1 - cosine\n(solid: worst image, dashed: mean)")
    axes[0][0].legend(fontsize=SMALL, loc="center left")
    return fig


def _mode_bars(ax, table: pd.DataFrame, column: str, per: list[str], ylabel: str) -> None:
    """Bars per variant x mode: the mean of ``column`` over the rows, one dot per group of ``per``."""
    variants = list(dict.fromkeys(table["variant"]))
    modes = _pullback_modes(table)
    width = 0.8 / max(len(modes), 1)
    for k, mode in enumerate(modes):
        for i, variant in enumerate(variants):
            part = table[(table["variant"] == variant) & (table["mode"] == mode)]
            if not len(part):
                continue
            values = part.groupby(per)[column].mean().to_numpy()
            x = i + (k - (len(modes) - 1) / 2) * width
            ax.bar(
                x, np.nanmean(values), width, color=f"C{k}", label=PULLBACK_MODES[mode] if i == 0 else None
            )
            ax.scatter(np.full(len(values), x), values, s=6, color="k", zorder=3)
    ax.set_xticks(range(len(variants)), variants, rotation=30, ha="right", fontsize=SMALL)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)


def _bar_panels(table: pd.DataFrame, n: int = 2):
    """(figure, n axes) for per-variant bar panels: side by side within ``FIGURE_WIDTH`` for a few
    variants, one over the other for more."""
    columns = 2 if table["variant"].nunique() <= 3 else 1
    fig, axes = _panel_grid(n, FIGURE_WIDTH / columns, 3.8 if columns == 2 else 3.4, columns=columns)
    return fig, axes


def pullback_agreement(table: pd.DataFrame) -> plt.Figure:
    """Agreement across seeds: the mean cosine over images between two members' pullbacks, per
    variant and mode; left of the true class's logit (a dot per pair), right of hidden units matched
    by the Hungarian algorithm (a dot per unit)."""
    table = at_stage_temperature(table)
    fig, axes = _bar_panels(table)
    logits, units = table[table["site"] == "logit"], table[table["site"] != "logit"]
    _mode_bars(axes[0], logits, "cos_mean", ["pair"], "cosine across seeds (mean over images)")
    axes[0].set_title("class logit", fontsize=9)
    axes[0].legend(fontsize=SMALL, loc="upper left", bbox_to_anchor=(0, -0.25), ncol=2)
    if len(units):
        _mode_bars(axes[1], units, "cos_mean", ["pair", "site", "unit_a"], "cosine across seeds")
        axes[1].set_title(
            _wrapped("hidden units, each against its Hungarian match (a dot per unit)", 45), fontsize=9
        )
    else:
        axes[1].text(
            0.5, 0.5, "no hidden units compared", ha="center", va="center", transform=axes[1].transAxes
        )
        axes[1].set_axis_off()
    return fig


def pullback_transfer(table: pd.DataFrame) -> plt.Figure:
    """PGD transfer across seeds (ours), per variant and mode, a dot per pair and direction: left,
    the fraction of images the *other* member predicts as the target after the paper's PGD along
    the source member's gradient or pullback (the source member's own success as open circles);
    right, the other member's gain in target probability. The same images, targets and budget in
    every mode."""
    table = at_stage_temperature(table)
    fig, axes = _bar_panels(table)
    keys = ["pair", "seed_source"]
    _mode_bars(axes[0], table, "transfer_success", keys, "other member predicts\nthe target")
    variants = list(dict.fromkeys(table["variant"]))
    modes = _pullback_modes(table)
    width = 0.8 / max(len(modes), 1)
    for k, mode in enumerate(modes):
        for j, variant in enumerate(variants):
            part = table[(table["variant"] == variant) & (table["mode"] == mode)]
            x = j + (k - (len(modes) - 1) / 2) * width
            axes[0].scatter(
                np.full(len(part), x),
                part["source_success"],
                facecolors="none",
                edgecolors=f"C{k}",
                s=18,
                label="source member itself" if (j == 0 and k == 0) else None,
            )
    axes[0].set_ylim(-0.02, 1.02)
    axes[0].set_title(_wrapped("PGD along one member's direction, read by another seed", 45), fontsize=9)
    axes[0].legend(fontsize=SMALL, loc="upper left", bbox_to_anchor=(0, -0.25), ncol=2)
    _mode_bars(axes[1], table, "transfer_prob_gain", keys, "other member's target\nprobability gain")
    axes[1].axhline(0, color="grey", lw=0.6)
    axes[1].set_title(_wrapped("target probability, after minus before (mean over images)", 45), fontsize=9)
    return fig


def pullback_settling(table: pd.DataFrame) -> plt.Figure:
    """Hypothesis 1 (path stability), a panel per variant: the agreement of each recorded epoch's
    binary activation pattern (epoch 0: initialisation) with the final one, per ReLU call site
    (colour from the first to the last site; mean over members, the band their range), and the
    agreement by chance with the same units' rates (dashed, mean over sites)."""
    variants = list(dict.fromkeys(table["variant"]))
    fig, flat = _panel_grid(max(len(variants), 1), 4.0, 3.8)
    for ax, variant in zip(flat, variants):
        part = table[table["variant"] == variant]
        sites = list(dict.fromkeys(part["site"]))
        colours = plt.cm.viridis(np.linspace(0, 0.9, len(sites)))
        for site, colour in zip(sites, colours):
            rows = part[part["site"] == site].groupby("epoch")["agreement"]
            mean, low, high = rows.mean(), rows.min(), rows.max()
            ax.plot(mean.index, mean.to_numpy(), color=colour, lw=1)
            ax.fill_between(mean.index, low.to_numpy(), high.to_numpy(), color=colour, alpha=0.15, lw=0)
        chance = part.groupby("epoch")["chance"].mean()
        ax.plot(chance.index, chance.to_numpy(), "--", color="grey", lw=1, label="chance (units' rates)")
        members = part[["seed"]].drop_duplicates()
        ax.set_title(f"{variant} ({_count(len(members), 'member')})", fontsize=9)
        ax.set_xlabel("epoch (0: initialisation)")
        ax.set_ylabel("gates as in the final pattern")
        ax.set_ylim(min(0.45, float(part["chance"].min()) - 0.02), 1.01)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=SMALL, loc="lower right")
        # the sites as a colour bar (first to last), every one named where 8-pt names fit
        scale = matplotlib.colors.ListedColormap(colours)
        bar = fig.colorbar(
            plt.cm.ScalarMappable(
                matplotlib.colors.BoundaryNorm(np.arange(len(sites) + 1) - 0.5, len(sites)), scale
            ),
            ax=ax,
            pad=0.01,
        )
        step = max(1, int(np.ceil(len(sites) * 10 / (2.6 * 72))))
        bar.set_ticks(range(0, len(sites), step), labels=sites[::step], fontsize=SMALL)
        bar.set_label("ReLU site (first to last)", fontsize=SMALL)
    return fig


def _scaled_each(difference: np.ndarray) -> np.ndarray:
    """Per image (..., 3, H, W) -> (..., H, W, 3) in [0, 1], min-max scaled on its own (as the
    released code's torchvision ``make_grid(normalize=True, scale_each=True)``)."""
    low = difference.min(axis=(-3, -2, -1), keepdims=True)
    high = difference.max(axis=(-3, -2, -1), keepdims=True)
    scaled = (difference - low) / np.where(high > low, high - low, 1)
    return np.moveaxis(scaled, -3, -1)


def pullback_external(arrays: dict, perturbed: bool = False) -> plt.Figure:
    """The paper's grid (its Figure 1 and README grids) for one ImageNet model: a block of rows per
    mode (gradient, global-T and per-neuron-T pullback), a row per image (its clean image first),
    a column per target class (the images' own classes, the diagonal, then random extra labels):
    each cell the difference between the image after the paper's PGD toward that target and the
    clean image, min-max scaled per cell (``perturbed``: the perturbed image itself)."""
    modes = [m for m in PULLBACK_MODES if m in arrays["perturbed"]]
    images = arrays["images"]
    n, t = len(images), len(arrays["targets"])
    # inches: a cell (the columns within the report's width), the title, the row labels
    head, left = 1.3, 1.25
    cell = min(1.0, (FIGURE_WIDTH - left) / (t + 1))
    rows = n * len(modes)
    width, height = left + cell * (t + 1), head + cell * rows
    fig, axes = plt.subplots(rows, t + 1, figsize=(width, height), squeeze=False)
    for b, mode in enumerate(modes):
        moved = arrays["perturbed"][mode]
        shown = np.moveaxis(moved, -3, -1) if perturbed else _scaled_each(moved - images[:, None])
        for i in range(n):
            row = axes[b * n + i]
            row[0].imshow(np.moveaxis(images[i], 0, -1), aspect="auto")
            _row_label(row[0], arrays["labels"][i])
            if i == 0:
                row[0].set_title(PULLBACK_MODES[mode], fontsize=SMALL, loc="left", fontweight="bold")
            for j in range(t):
                row[j + 1].imshow(shown[i, j], aspect="auto")
                if b == 0 and i == 0:
                    row[j + 1].set_title(_wrapped(arrays["targets"][j], 10), fontsize=SMALL)
            for ax in row:
                ax.set_xticks([])
                ax.set_yticks([])
    what = "perturbed images" if perturbed else "perturbed minus clean"
    fig.suptitle(
        f"{arrays['title']}\n{arrays['steps']}-step PGD toward each column's class\n(L2 radius "
        f"{arrays['epsilon']:.3g}, images in [-1, 1]); {what}",
        fontsize=SMALL,
    )
    fig.subplots_adjust(
        left=left / width, right=0.995, bottom=0.005, top=1 - head / height, wspace=0.03, hspace=0.18
    )
    return fig


def pullback_faithfulness(table: pd.DataFrame) -> plt.Figure:
    """Per variant and mode (a dot per member): the area under the deletion curve (pixels ranked by
    |v| set to the data mean, 5 % per step; lower is more faithful) and under the insertion curve
    (from the mean image; higher is more faithful), both our extension; and the success of the
    paper's PGD toward a random other class after each step."""
    table = at_stage_temperature(table)
    # the two areas side by side over the PGD curves
    fig, mosaic = plt.subplot_mosaic(
        [["deletion", "insertion"], ["pgd", "pgd"]], figsize=(FIGURE_WIDTH, 7.4), layout="constrained"
    )
    axes = [mosaic["deletion"], mosaic["insertion"], mosaic["pgd"]]
    _mode_bars(axes[0], table, "deletion_auc", ["seed"], "deletion area (lower: more faithful)")
    axes[0].set_title("deletion (ours)", fontsize=9)
    axes[0].legend(fontsize=SMALL, loc="upper left", bbox_to_anchor=(0, -0.25), ncol=2)
    _mode_bars(axes[1], table, "insertion_auc", ["seed"], "insertion area (higher: more faithful)")
    axes[1].set_title("insertion (ours)", fontsize=9)
    ax = axes[2]
    styles = ["-", "--", ":", "-."]
    for j, variant in enumerate(dict.fromkeys(table["variant"])):
        for k, mode in enumerate(_pullback_modes(table)):
            part = table[(table["variant"] == variant) & (table["mode"] == mode)]
            curve = np.mean(np.stack([np.asarray(c) for c in part["pgd_success_by_step"]]), axis=0)
            ax.plot(
                range(1, len(curve) + 1),
                curve,
                styles[j % len(styles)],
                color=f"C{k}",
                label=f"{variant}: {PULLBACK_MODES[mode]}",
            )
    epsilon = table["pgd_epsilon"].iloc[0] if len(table) else float("nan")
    ax.set_xlabel(f"PGD step (L2 radius {epsilon:.3g}, images in [-1, 1])")
    ax.set_ylabel("success: target class predicted")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("PGD toward a random other class (the paper's)", fontsize=9)
    ax.legend(fontsize=SMALL, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.grid(alpha=0.3)
    return fig


def _row_label(ax, text: str) -> None:
    """A grid row's name, horizontal, left of its first image, in lines of at most 12 characters."""
    ax.set_ylabel(_wrapped(text, 12), fontsize=SMALL, rotation=0, ha="right", va="center", labelpad=4)


def pullback_grid(arrays: dict) -> plt.Figure:
    """Test images (grid_images per class) and, below each, its gradient and pullbacks (global and
    per-neuron T) of its class's logit, each as 0.5 + 0.5 v / max|v| (grey is zero); blocks of 10
    images."""
    images, labels, classes = arrays["images"], arrays["labels"], arrays["classes"]
    rows = [("image", _rgb(images))] + [
        (PULLBACK_MODES[mode], _signed_rgb(values)) for mode, values in arrays["attributions"].items()
    ]
    per_block = 10
    blocks = -(-len(images) // per_block)
    cell = 0.66  # inches: 10 cells and the row names within the report's width
    fig, axes = plt.subplots(
        blocks * len(rows),
        per_block,
        figsize=(cell * per_block + 1.2, (cell + 0.05) * blocks * len(rows) + 0.2 * blocks + 0.5),
        squeeze=False,
        layout="constrained",
    )
    for ax in axes.flat:
        ax.set_xticks([]), ax.set_yticks([])
        ax.set_frame_on(False)
    for i in range(len(images)):
        block, column = divmod(i, per_block)
        for r, (name, pictures) in enumerate(rows):
            ax = axes[block * len(rows) + r][column]
            ax.imshow(pictures[i], interpolation="nearest")
            if r == 0:
                ax.set_title(classes[int(labels[i])], fontsize=SMALL)
            if column == 0:
                _row_label(ax, name)
    fig.suptitle(f"{arrays['title']}: gradient vs excitation pullbacks of the class logit", fontsize=9)
    return fig


def pullback_pgd(arrays: dict) -> plt.Figure:
    """One test image per class and the image after the paper's PGD toward a random other class
    (column title: label -> target), with the gradient or a pullback as the ascent direction; each
    result titled with the class it is then predicted as (green: the target); blocks of 10 images."""
    originals, labels, targets = arrays["pgd_images"], arrays["pgd_labels"], arrays["pgd_targets"]
    classes = arrays["classes"]
    rows = [("image", _rgb(originals), None)] + [
        (PULLBACK_MODES[mode], _rgb(moved), arrays["pgd_predicted"][mode])
        for mode, moved in arrays["pgd_moved"].items()
    ]
    per_block = min(10, len(originals))
    blocks = -(-len(originals) // per_block)
    cell = 0.66
    fig, axes = plt.subplots(
        blocks * len(rows),
        per_block,
        figsize=(cell * per_block + 1.2, (cell + 0.2) * blocks * len(rows) + 0.25 * blocks + 0.5),
        squeeze=False,
        layout="constrained",
    )
    for ax in axes.flat:
        ax.set_xticks([]), ax.set_yticks([])
        ax.set_frame_on(False)
    for r, (name, pictures, predicted) in enumerate(rows):
        for i in range(len(originals)):
            block, column = divmod(i, per_block)
            ax = axes[block * len(rows) + r][column]
            ax.imshow(pictures[i], interpolation="nearest")
            if predicted is None:
                ax.set_title(f"{classes[int(labels[i])]}\n-> {classes[int(targets[i])]}", fontsize=SMALL)
            else:
                hit = predicted[i] == targets[i]
                ax.set_title(classes[int(predicted[i])], fontsize=SMALL, color="green" if hit else "red")
            if column == 0:
                _row_label(ax, name)
    fig.suptitle(f"{arrays['title']}: PGD toward a target class (the paper's, 32x32-scaled)", fontsize=9)
    return fig


def _against_temperature(ax, table: pd.DataFrame, column: str, reduce: str, ylabel: str) -> None:
    """Per variant (line style) and soft mode (colour): ``column`` reduced over the rows (``reduce``
    "mean" or "min") against T; the plain gradient, which has no T, a horizontal line per variant."""
    styles = ["-", "--", ":", "-."]
    for j, variant in enumerate(dict.fromkeys(table["variant"])):
        part = table[table["variant"] == variant]
        for k, mode in enumerate(_pullback_modes(part)):
            rows = part[part["mode"] == mode].groupby("temperature")[column].agg(reduce)
            label = f"{variant}: {PULLBACK_MODES[mode]}"
            if mode == "gradient":
                ax.axhline(rows.iloc[0], color=f"C{k}", ls=styles[j % len(styles)], lw=0.8, label=label)
            else:
                ax.plot(
                    rows.index,
                    rows.to_numpy(),
                    styles[j % len(styles)],
                    marker="o",
                    ms=3,
                    color=f"C{k}",
                    label=label,
                )
    ax.set_xlabel("temperature T")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)


def pullback_temperature(
    symmetry: pd.DataFrame, agreement: pd.DataFrame, faithfulness: pd.DataFrame
) -> plt.Figure:
    """The stage at every temperature (``pullback.temperature`` and ``pullback.sweep``): 1 - the
    smallest cosine under G_ReLU at the largest scale spread (over members and images), the mean
    agreement of the class logit's pullbacks across seeds, the deletion and insertion areas and the
    PGD success (means over members), each against T, the plain gradient a horizontal line."""
    # five panels in rows of two, the legend in the sixth cell
    fig, cells = plt.subplots(3, 2, figsize=(FIGURE_WIDTH, 9.6), layout="constrained")
    axes, key = list(cells.flat[:5]), cells.flat[5]
    grelu = symmetry[symmetry["group"] == "grelu"]
    grelu = grelu[grelu["scale_spread"] == grelu["scale_spread"].max()]
    grelu = grelu.assign(one_minus_cos=(1 - grelu["cos_min"]).clip(lower=1e-17))
    _against_temperature(axes[0], grelu, "one_minus_cos", "max", "1 - cosine (worst image)")
    axes[0].set_yscale("log")
    spread = grelu["scale_spread"].max() if len(grelu) else float("nan")
    axes[0].set_title(f"G_ReLU symmetry, scale spread {spread:g}", fontsize=9)
    logits = agreement[agreement["site"] == "logit"]
    if len(logits):
        _against_temperature(axes[1], logits, "cos_mean", "mean", "cosine across seeds (mean)")
    axes[1].set_title("agreement across seeds, class logit", fontsize=9)
    _against_temperature(
        axes[2], faithfulness, "deletion_auc", "mean", "deletion area (lower: more faithful)"
    )
    axes[2].set_title("deletion (ours)", fontsize=9)
    _against_temperature(
        axes[3], faithfulness, "insertion_auc", "mean", "insertion area (higher: more faithful)"
    )
    axes[3].set_title("insertion (ours)", fontsize=9)
    _against_temperature(axes[4], faithfulness, "pgd_success", "mean", "PGD success (target predicted)")
    axes[4].set_title("the paper's PGD toward a random other class", fontsize=9)
    key.set_axis_off()
    handles, labels = axes[4].get_legend_handles_labels()
    key.legend(handles, labels, fontsize=SMALL, loc="center", ncol=1 + (len(labels) > 9))
    return fig
