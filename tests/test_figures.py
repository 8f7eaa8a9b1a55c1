"""The figures' intervals: a Student-t 95 % interval from 3 values on; below that the values
themselves and no interval (the tables keep their half-widths); accuracy axes within [0, 100]."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PathCollection
from matplotlib.container import ErrorbarContainer
from scipy import stats
from test_study_figures import SLOPES, stitching_rows, zoo_rows

from intertwine.workflow.plotting import MIN_INTERVAL_VALUES, drawn_half, interval_half_width, mean_ci
from intertwine.workflow.stages.similarity.figures import similarity_cka
from intertwine.workflow.stages.stitching.figures import (
    leaky_relu_accuracy,
    leaky_relu_penalty,
    stitching_convergence,
    stitching_penalty,
    stitching_summary,
)
from intertwine.workflow.stages.zoo.figures import zoo_accuracy


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def drawn_intervals(ax) -> list[int]:
    """Per errorbar line of ``ax``, how many of its points have an interval drawn."""
    return [
        sum(len(segment) > 0 for segment in c.lines[2][0].get_segments())
        for c in ax.containers
        if isinstance(c, ErrorbarContainer)
    ]


def points(ax) -> int:
    return sum(len(c.get_offsets()) for c in ax.collections if isinstance(c, PathCollection))


def test_no_interval_below_three_values_and_the_t_interval_from_three():
    assert MIN_INTERVAL_VALUES == 3
    for values in ([], [0.5], [0.2, 0.9]):
        assert math.isnan(interval_half_width(values))
    values = [1.0, 2.0, 3.0]  # sd 1: half-width t(0.975, 2) / sqrt(3)
    assert interval_half_width(values) == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    values = np.array([0.3, 0.1, 0.4, 0.15, 0.9])
    expected = stats.t.ppf(0.975, 4) * values.std(ddof=1) / math.sqrt(5)
    assert interval_half_width(values) == pytest.approx(expected)
    # The tables are unchanged: mean_ci still gives 2 values their (wide) interval.
    assert mean_ci([0.2, 0.9])[1] == pytest.approx(stats.t.ppf(0.975, 1) * 0.35)
    drawn = drawn_half([1.0, 2.0, 3.0, 0.0], [2, 3, 10, 1])
    assert np.isnan(drawn[[0, 3]]).all() and drawn[1:3].tolist() == [2.0, 3.0]


@pytest.mark.parametrize("pairs", [2, 3])
def test_penalty_figure_draws_intervals_from_three_pairs_and_the_pairs_below(pairs):
    table = stitching_rows(methods=("full", "grelu"), pairs=pairs)
    for ax in [ax for ax in stitching_penalty(table).axes if ax.containers]:
        if pairs < 3:  # each site's 2 penalties as points, no interval
            assert drawn_intervals(ax) == [0, 0] and points(ax) == 2 * 3 * pairs
        else:
            assert drawn_intervals(ax) == [3, 3] and points(ax) == 0
    summary = stitching_summary(table)
    assert (summary["penalty_ci95"] > 0).all()  # the table keeps its intervals


def test_leaky_relu_accuracy_panel_stays_within_0_and_100_percent():
    zoo = zoo_rows(members=3)
    zoo.loc[zoo["variant"] == "leaky_0.5", "test_acc"] = [0.999, 0.90, 0.998]  # its interval passes 100 %
    accuracy = leaky_relu_accuracy(zoo, SLOPES)
    assert (accuracy["test_acc_mean"] + accuracy["test_acc_ci95"]).max() > 100
    table = stitching_rows(variants=tuple(SLOPES), methods=("grelu",))
    _, right = leaky_relu_penalty(table, SLOPES, accuracy, zoo).axes
    bottom, top = right.get_ylim()
    assert 0 <= bottom < top <= 100
    assert drawn_intervals(right) == [3] and points(right) == 0


def test_leaky_relu_accuracy_panel_shows_two_members_not_their_interval():
    zoo = zoo_rows(members=2)
    accuracy = leaky_relu_accuracy(zoo, SLOPES)
    assert (accuracy["test_acc_ci95"] > 0).all()  # the table keeps its intervals
    table = stitching_rows(variants=tuple(SLOPES), methods=("grelu",))
    _, right = leaky_relu_penalty(table, SLOPES, accuracy, zoo).axes
    assert drawn_intervals(right) == [0] and points(right) == 2 * 3


def test_zoo_figure_draws_an_interval_only_from_three_seeds():
    zoo = pd.concat([zoo_rows({"myrtle": 0.0}, members=2), zoo_rows({"resnet20": 0.0}, members=4)])
    ax = zoo_accuracy(zoo, {}).axes[0]
    assert drawn_intervals(ax)[:2] == [0, 1]  # myrtle's 2 seeds: no interval; resnet20's 4: one
    assert points(ax) == 6  # every member is drawn anyway


def test_stitching_convergence_names_the_layers_that_did_not_converge():
    table = stitching_rows(methods=("full", "grelu", "softsort"))
    late = (table["site"] == "act2") & (table["method"] == "softsort")
    table.loc[late, "off_permutation_mass"] = 0.6
    fig = stitching_convergence(table)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[:2] == [
        "myrtle: not converged at act2 (softsort)",
        "resnet20: not converged at act2 (softsort)",
    ]
    assert len(fig.axes[0].lines) == 3 * 2 + 1  # one curve per site and G_ReLU method, and the 0.3 line
    summary = stitching_summary(table)
    converged = summary.set_index(["variant", "site", "method"])["converged"]
    assert (
        converged[("myrtle", "act2", "softsort")] is False and converged[("myrtle", "act1", "grelu")] is True
    )
    assert converged[("myrtle", "act1", "full")] is None
    assert "penalty_start_mean" in summary
    empty = stitching_convergence(table[table["method"] == "full"])
    assert empty.axes[0].get_title() == "(no G_ReLU layer trained)"


@pytest.mark.parametrize("n_sites, rows", [(3, 3), (20, 5)])
def test_penalty_panels_wrap_into_rows_readable_at_the_reports_width(n_sites, rows):
    """Five variants: rows of two panels (one where the sites make a panel wide), not one strip;
    every label at least 8 pt when the figure is shown 800 px wide; one pair is '1 pair'."""
    variants = ("v1", "v2", "v3", "v4", "v5")
    table = stitching_rows(variants=variants, sites=[f"act{k}" for k in range(n_sites)], pairs=1)
    fig = stitching_penalty(table)
    axes = [ax for ax in fig.axes if ax.get_visible() and ax.get_title()]
    assert len(axes) == 5
    assert len({round(ax.get_position().y0, 3) for ax in axes}) == rows
    shown = 800 / (fig.get_size_inches()[0] * 72)  # points on screen per point of the figure
    for ax in axes:
        assert ax.get_title().endswith("(1 pair)")
        for label in [*ax.get_xticklabels(), *ax.get_yticklabels(), ax.yaxis.label]:
            assert label.get_fontsize() * shown >= 8, label.get_text()
    plt.close(fig)


def _heatmap_rows(pairs: int, intervals: dict) -> pd.DataFrame:
    """grelu_cka between sites s0-s2 of two members, 1 at matching sites; ``intervals`` gives an
    off-diagonal cell's (low, high), the others (value, value)."""
    rows = []
    for pair in range(pairs):
        for a in range(3):
            for b in range(3):
                value = 1.0 if a == b else 0.5
                low, high = intervals.get((a, b), (value, value))
                rows.append(
                    {
                        "variant": "myrtle",
                        "pair": pair,
                        "site_a": f"s{a}",
                        "site_b": f"s{b}",
                        "measure": "grelu_cka",
                        "value": value,
                        "low": low,
                        "high": high,
                    }
                )
    return pd.DataFrame(rows)


def _hatched(fig) -> set[tuple[int, int]]:
    """(row, column) of the hatched cells of the first heatmap."""
    ax = fig.axes[0]
    return {(round(p.get_y() + 0.5), round(p.get_x() + 0.5)) for p in ax.patches if p.get_hatch()}


def test_heatmap_hatches_the_cells_whose_interval_holds_the_diagonal():
    # s0 x s2's interval reaches 1 (s0's matched value), s1 x s0's does not: only the first is hatched.
    fig = similarity_cka(_heatmap_rows(2, {(0, 2): (0.3, 1.0), (1, 0): (0.3, 0.9)}))
    assert _hatched(fig) == {(0, 2)}
    assert "jackknife interval" in fig.get_suptitle()
    # in one pair of three: not hatched
    rows = _heatmap_rows(3, {})
    rows.loc[(rows["pair"] == 0) & (rows["site_a"] == "s0") & (rows["site_b"] == "s2"), "high"] = 1.0
    assert _hatched(similarity_cka(rows)) == set()
    # a table without intervals: no hatching and no word about it
    plain = similarity_cka(_heatmap_rows(1, {}).assign(low=np.nan, high=np.nan))
    assert _hatched(plain) == set() and not plain.get_suptitle()
