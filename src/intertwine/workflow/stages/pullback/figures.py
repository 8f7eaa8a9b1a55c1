"""Excitation pullbacks' figures (Satkiewicz)."""

from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
import pandas as pd

from intertwine.workflow.stages.pullback.tables import at_stage_temperature
from intertwine.workflow.plotting import FIGURE_WIDTH, SMALL, counted, panel_grid, wrapped


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
    fig, flat = panel_grid(len(variants), 4.0, 3.6)
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
        ax.set_title(f"{variant} ({counted(part['seed'].nunique(), 'member')})", fontsize=9)
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
    fig, axes = panel_grid(n, FIGURE_WIDTH / columns, 3.8 if columns == 2 else 3.4, columns=columns)
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
            wrapped("hidden units, each against its Hungarian match (a dot per unit)", 45), fontsize=9
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
    axes[0].set_title(wrapped("PGD along one member's direction, read by another seed", 45), fontsize=9)
    axes[0].legend(fontsize=SMALL, loc="upper left", bbox_to_anchor=(0, -0.25), ncol=2)
    _mode_bars(axes[1], table, "transfer_prob_gain", keys, "other member's target\nprobability gain")
    axes[1].axhline(0, color="grey", lw=0.6)
    axes[1].set_title(wrapped("target probability, after minus before (mean over images)", 45), fontsize=9)
    return fig


def pullback_settling(table: pd.DataFrame) -> plt.Figure:
    """Hypothesis 1 (early emergence of stable excitation patterns), a panel per variant: the
    agreement of each recorded epoch's binary activation pattern (epoch 0: initialisation) with
    the final one, per ReLU call site (colour from the first to the last site; mean over members,
    the band their range), the
    agreement by chance with the same units' rates (dashed, mean over sites), and the paper's
    criterion: the 5 % quantile over the probe images of the correlation rho(x) with the final
    gating tensor (black, mean over members; H1 asks for it above 0)."""
    variants = list(dict.fromkeys(table["variant"]))
    fig, flat = panel_grid(max(len(variants), 1), 4.0, 3.8)
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
        low = float(part["chance"].min())
        if "path_rho_low" in part and part["path_rho_low"].notna().any():
            # the paper's criterion (H1): the correlation with the final gating tensor, > 0
            rho = part.groupby(["seed", "epoch"])["path_rho_low"].first().groupby("epoch").mean()
            ax.plot(rho.index, rho.to_numpy(), color="black", lw=1.2, label="rho(x), 5 % quantile")
            ax.axhline(0, color="black", lw=0.5, ls=":")
            low = min(low, float(rho.min()), 0.0)
        members = part[["seed"]].drop_duplicates()
        ax.set_title(f"{variant} ({counted(len(members), 'member')})", fontsize=9)
        ax.set_xlabel("epoch (0: initialisation)")
        ax.set_ylabel("gates as in the final pattern;\nrho with the final tensor")
        ax.set_ylim(min(0.45, low - 0.02), 1.01)
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


def pullback_external(arrays: dict, perturbed: bool = False, pullbacks: bool = False) -> plt.Figure:
    """The paper's grid (its Figures 1 and 3) for one ImageNet model: a block of rows per mode
    (gradient, global-T and per-neuron-T pullback), a row per image (its clean image first), a
    column per target class (the images' own classes, the diagonal, then random extra labels):
    each cell the difference between the image after the paper's PGD toward that target and the
    clean image, min-max scaled per cell (``perturbed``: the perturbed image itself;
    ``pullbacks``: its Figure 2, the raw pullback of the target at the clean image, min-max scaled
    per cell as torchvision's ``make_grid(scale_each=True)``)."""
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
        if pullbacks:
            shown = _scaled_each(arrays["pullbacks"][mode])
        else:
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
                    row[j + 1].set_title(wrapped(arrays["targets"][j], 10), fontsize=SMALL)
            for ax in row:
                ax.set_xticks([])
                ax.set_yticks([])
    what = "perturbed images" if perturbed else "perturbed minus clean"
    title = (
        f"{arrays['title']}\nraw pullback (gradient) of each column's class\nat the clean image, "
        "min-max scaled per cell"
        if pullbacks
        else f"{arrays['title']}\n{arrays['steps']}-step PGD toward each column's class\n(L2 radius "
        f"{arrays['epsilon']:.3g}, images in [-1, 1]); {what}"
    )
    fig.suptitle(title, fontsize=SMALL)
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
    ax.set_ylabel(wrapped(text, 12), fontsize=SMALL, rotation=0, ha="right", va="center", labelpad=4)


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
