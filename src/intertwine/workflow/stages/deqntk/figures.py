"""The DEQ neural tangent kernel's figures (Feng & Kolter)."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
import pandas as pd

from intertwine.workflow.plotting import (
    FIGURE_WIDTH,
    MEASURE_LABELS,
    SMALL,
    chunks,
    counted,
    few_values,
    interval_half_width,
    panel_grid,
    wrapped,
)


def _variances_label(w: float, u: float, b: float) -> str:
    return f"({w:g}, {u:g}, {b:g})"


def _accuracy_axes(settings: int, variants: int, wrapped_rows: int):
    """The accuracy figure and its column of axes: the first for the kernels and the zoo's first
    variants, one shorter row below for each further chunk of the zoo's variants."""
    return plt.subplots(
        1 + wrapped_rows,
        1,
        figsize=(
            min(FIGURE_WIDTH, max(5.0, 0.5 * (settings + variants) + 2)),
            4.4 + 3.2 * wrapped_rows,
        ),
        layout="constrained",
        squeeze=False,
        height_ratios=[4.4] + [3.2] * wrapped_rows,
    )


def _kernel_accuracies(ax, rows: pd.DataFrame, settings: list[tuple]) -> None:
    """The DEQ-NTK's accuracies, a column per variance setting, one colour per training-set size
    (sizes side by side within the column)."""
    sizes = sorted(rows["n_train"].unique())
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


def _paper_crosses(ax, settings: list[tuple], paper: dict) -> None:
    """The paper's accuracy (``paper``: {variances: %}) as a cross in the column of each setting it
    reports, labelled once."""
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
                label=None if crossed else "paper (the whole data set)",
            )
            crossed = True


def _zoo_accuracies(ax, zoo: pd.DataFrame, shown: list[str], start: int) -> None:
    """The zoo's ``shown`` variants from column ``start`` on: the members as dots, their mean with
    its 95 % t interval beside them."""
    for j, variant in enumerate(shown):
        acc = 100 * zoo.loc[zoo["variant"] == variant, "test_acc"].to_numpy()
        x = start + j
        ax.scatter(np.full(len(acc), x - 0.1), acc, s=10, alpha=0.6, color="0.4")
        ax.errorbar(x + 0.1, acc.mean(), yerr=interval_half_width(acc), fmt="s", color="black", capsize=3)


def deqntk_accuracy(table: pd.DataFrame, zoo: pd.DataFrame | None, paper: dict) -> plt.Figure:
    """The DEQ-NTK's test accuracy per variance setting beside the trained zoo.

    Parameters
    ----------
    table : pandas.DataFrame
        The DEQ-NTK table; its ``study == "accuracy"`` rows are drawn, one column per variance
        setting (sigma_w2, sigma_u2, sigma_b2) and one marker per training-set size.
    zoo : pandas.DataFrame or None
        The zoo's members (variant, test_acc), drawn as dots beside the kernels with their mean
        and its 95 % t interval; None draws the kernels alone.
    paper : dict
        The paper's numbers, {variances: %}, drawn as crosses.

    Returns
    -------
    matplotlib.figure.Figure
        The figure.
    """
    rows = table[table["study"] == "accuracy"]
    settings = list(dict.fromkeys(zip(rows["sigma_w2"], rows["sigma_u2"], rows["sigma_b2"])))
    variants = [] if zoo is None else list(dict.fromkeys(zoo["variant"]))
    # at most 16 columns a row: the zoo's variants past the first row wrap onto rows below
    first = max(16 - len(settings), 4)
    more = chunks(variants[first:], 16) if len(variants) > first else []
    fig, axes = _accuracy_axes(len(settings), len(variants), len(more))
    ax = axes[0, 0]
    _kernel_accuracies(ax, rows, settings)
    _paper_crosses(ax, settings, paper)
    for row, (at, shown) in enumerate(
        [(ax, variants[:first])] + [(a, chunk) for a, chunk in zip(axes[1:, 0], more)]
    ):
        _zoo_accuracies(at, zoo, shown, len(settings) if row == 0 else 0)
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
        wrapped(
            f"Kernel regression with the DEQ-NTK (sigma_w2, sigma_u2, sigma_b2) beside the trained zoo; {n_test} test images",
            80,
        ),
        fontsize=9,
    )
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=SMALL, loc="best")
    return fig


def _depth_label(w: float, u: float, b: float) -> str:
    """A finite-depth curve's name: with input injection (sigma_u2 > 0) the depth-L kernel is the
    DEQ-NTK's finite-depth iteration (Feng & Kolter's Theorem 1), without it the plain depth-L NTK."""
    if u > 0:
        return f"DEQ-NTK iterated to depth L {_variances_label(w, u, b)}"
    return f"depth-L NTK {_variances_label(w, u, b)}"


def _depth_panel(ax, rows: pd.DataFrame, depths: list[int]) -> None:
    """One panel of the depth sweep: each finite-depth kernel's accuracy over depth (the NTK and the
    DEQ-NTK's finite-depth iteration) and each DEQ-NTK's fixed point (flat, dashed), means over
    draws with 95 % t intervals (the draws themselves below three)."""
    finite = rows[rows["depth"] != "deq"].assign(L=lambda df: df["depth"].astype(int))
    equilibrium = rows[rows["depth"] == "deq"]
    for k, ((w, u, b), part) in enumerate(finite.groupby(["sigma_w2", "sigma_u2", "sigma_b2"], sort=False)):
        color = f"C{k}"
        means, halves = [], []
        for depth in depths:
            acc = 100 * part.loc[part["L"] == depth, "test_acc"].dropna().to_numpy()
            means.append(acc.mean() if len(acc) else np.nan)
            halves.append(interval_half_width(acc) if len(acc) else np.nan)
            few_values(ax, depth, acc, color)
        means, halves = np.array(means), np.array(halves)
        ax.plot(depths, means, "-o", ms=4, color=color, label=_depth_label(w, u, b))
        ax.fill_between(depths, means - halves, means + halves, color=color, alpha=0.2, lw=0)
    for (w, u, b), part in equilibrium.groupby(["sigma_w2", "sigma_u2", "sigma_b2"], sort=False):
        acc = 100 * part["test_acc"].dropna().to_numpy()
        mean, half = acc.mean(), interval_half_width(acc)
        span = [min(depths, default=1), max(depths, default=1)]
        ax.plot(
            span, [mean, mean], "--", color="black", label=f"DEQ-NTK, fixed point {_variances_label(w, u, b)}"
        )
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
    """The paper's Figure 1 ("Finite depth NTK vs. finite depth iteration of DEQ-NTK."): test
    accuracy against depth of the depth-L NTK and of the DEQ-NTK's finite-depth iteration, per
    variances, and of the DEQ-NTK's fixed point (flat: it has no depth), mean over draws with the
    95 % t interval (the draws themselves below three). One panel per ``panel`` of the table (the
    caption's: the depth-L NTK at (sigma_w2, 0, sigma_b2) against the DEQ-NTK iterated to depth L
    at (sigma_w2, sigma_b2 - 0.1, 0.1), and its fixed point), the curves outside the panels
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
        fig, flat = panel_grid(len(panels), 4.0, 4.0)
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
        wrapped(
            f"Finite depth NTK vs. finite depth iteration of DEQ-NTK: {sizes}, {counted(draws, 'draw')}, "
            "95% t intervals",
            90,
        ),
        fontsize=9,
    )
    return fig


def deqntk_reference(reference: pd.DataFrame) -> plt.Figure:
    """CKA of each site's representation with the DEQ-NTK Gram of the same images, one panel per
    variant: per kernel of the representation (the similarity measure's), the mean over members
    (members as dots)."""
    variants = list(dict.fromkeys(reference["variant"]))
    fig, flat = panel_grid(len(variants), 4.0, 3.8)
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
        ax.set_title(f"{variant} ({counted(part['seed'].nunique(), 'member')})", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("CKA with the DEQ-NTK")
    axes[0][0].legend(fontsize=SMALL)
    return fig
