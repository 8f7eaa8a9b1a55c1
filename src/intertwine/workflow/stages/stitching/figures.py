"""Model stitching's figures (Godfrey et al. section 4) and the appendix studies'."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
import pandas as pd

from intertwine.workflow.settings import G_RELU_METHODS, parse_method
from intertwine.workflow.plotting import (
    FIGURE_WIDTH,
    SMALL,
    counted,
    drawn_half,
    few_values,
    interval_half_width,
    mean_ci,
    panel_grid,
    stacked_pairs,
    wrapped,
)


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
        few_values(ax, x, v, style.get("color"), style.get("marker", "o"))


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
    ax.set_title(f"{title} ({counted(rows['pair'].nunique(), 'pair')})")
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
    fig, panels = panel_grid(len(variants), 4.0, 3.6)
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
        ax.set(title=wrapped(title, 48), xlabel="epoch", ylabel="off-permutation mass of P", ylim=(0, 1))
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
    fig, axes = panel_grid(len(variants), width, 3.8, columns=2)
    for ax, variant in zip(axes, variants):
        _penalty_panel(ax, table[table["variant"] == variant], variant)
    _legend_of_every_panel(axes)
    return fig


def stitching_dimension(table: pd.DataFrame) -> plt.Figure:
    """Dimension of each stitching layer's parameter manifold per site: C for G_ReLU, 2Cr - r^2
    for rank r, C^2 for full (log scale)."""
    variants = list(dict.fromkeys(table["variant"]))
    width = max(4.0, 0.3 * table.groupby("variant")["site"].nunique().max() + 2.5)
    fig, panels = panel_grid(len(variants), width, 3.4, columns=2)
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
    from intertwine.workflow.paper import reported_leaky_accuracy

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
            label=f"{_slope_label(slopes[variant])} ({counted(part['pair'].nunique(), 'pair')})",
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
        yerr=drawn_half(accuracy["test_acc_ci95"], accuracy["members"]),
        fmt="o",
        color="black",
        capsize=3,
        label="ours (mean, 95% CI)",
    )
    if zoo is not None:
        for at, variant in zip(x, accuracy["variant"]):
            few_values(right, at, 100 * zoo.loc[zoo["variant"] == variant, "test_acc"].to_numpy(), "black")
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
    fig, axes = stacked_pairs(len(variants), 3.4 + 0.2 * np.ceil(n_sites / 3), 3.6, columns)
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
            wrapped(f"{variant}: chosen alpha per site ({counted(rows['pair'].nunique(), 'pair')})", 40),
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
    fig, panels = panel_grid(len(variants), 4.0, 3.8)
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
            f"{variant} ({counted(rows['pair'].nunique(), 'pair')}, {counted(rows['site'].nunique(), 'site')})",
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
    fig, axes = stacked_pairs(len(variants), 3.8, 3.4, 2 if n_sites <= 10 else 1)
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
        seconds.set_title(wrapped(f"{variant}{ratio}", 40), fontsize=9)
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
