"""What every stage's figures share: the page width and smallest text every figure keeps to, the
panel grid they wrap into, intervals drawn from few values, and the atomic save."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import matplotlib.ticker
import numpy as np
from scipy import stats

from intertwine.utils import atomic_path


def counted(n: int, noun: str) -> str:
    """'1 pair', '5 pairs'."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


FIGURE_WIDTH = 8.0  # inches: shown 800 px wide (the report's width), 8-pt text reads as 8.3 pt
SMALL = 8  # points: the smallest text of any figure (a legend, a tick label, a cell's title)


def panel_grid(n: int, width: float, height: float, columns: int = 2):
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


def chunks(items: list, size: int) -> list[list]:
    """``items`` in rows of at most ``size``, the rows as even as they can be."""
    rows = max(1, -(-len(items) // max(1, size)))
    per_row = -(-len(items) // rows) if items else 0
    return [items[i : i + per_row] for i in range(0, len(items), per_row)] or [[]]


def wrapped(text: str, width: int) -> str:
    """``text`` broken into lines of at most ``width`` characters (at spaces)."""
    import textwrap

    return "\n".join(textwrap.wrap(text, width)) or text


def stacked_pairs(n: int, top: float, bottom: float, columns: int = 2, sharex: bool = False):
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


def drawn_half(half, n) -> np.ndarray:
    """A table's half-widths ``half``, each from ``n`` values, as figures draw them: NaN below
    ``MIN_INTERVAL_VALUES``."""
    return np.where(np.asarray(n) >= MIN_INTERVAL_VALUES, np.asarray(half, dtype=float), np.nan)


def few_values(ax, x, values, color, marker="o") -> None:
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


def save_figure(fig: plt.Figure, paths, dpi: int = 150) -> None:
    """Write ``fig`` to each of ``paths`` (its format from the suffix), each atomically, and close it."""
    for path in paths:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=dpi, format=Path(path).suffix.lstrip("."))
    plt.close(fig)
