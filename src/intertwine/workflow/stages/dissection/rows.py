"""The dissection stage's rows: the library's unit labels (:mod:`intertwine.dissection`, arrays)
as the tables ``dissection`` and ``dissection_units``, one row per (site, alpha, rotation draw)
and one per unit of each."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pandas as pd
from torch import Tensor

from intertwine import dissection
from intertwine.data.concepts import ConceptData

#: The keys of a dissection: one per (model, site, basis).
KEYS = ["variant", "seed", "site", "alpha", "rotation_seed"]
#: The units table's columns after the keys.
UNIT_COLUMNS = ["unit", "concept", "category", "iou", "threshold", "detector"]


def rotation_key(global_seed: int, variant: str, seed: int, site: str) -> tuple:
    """The seed key of a site's Haar draws (``dissection.draw_rotation``): the same rotations for
    the member's table and its masks figure."""
    return (global_seed, "dissection", variant, seed, site)


def units_frame(units: dissection.UnitLabels) -> pd.DataFrame:
    """One row per unit: ``unit``, ``concept``, ``category``, ``iou`` (float64), ``detector``
    (bool) and ``threshold`` (float64)."""
    return pd.DataFrame(units.columns())


def unit_labels(frame: pd.DataFrame) -> dissection.UnitLabels:
    """The units of one dissection (one site, alpha and draw) read back from its rows of the
    units table: ``units_frame``'s inverse, ordered by unit."""
    frame = frame.sort_values("unit")
    if frame["unit"].tolist() != list(range(len(frame))):
        raise ValueError(
            f"the units of one dissection are numbered 0..{len(frame) - 1}, got {frame['unit'].tolist()}"
        )
    return dissection.UnitLabels(
        concept=frame["concept"].tolist(),
        category=frame["category"].tolist(),
        iou=frame["iou"].to_numpy(dtype=np.float64),
        detector=frame["detector"].to_numpy(dtype=bool),
        threshold=frame["threshold"].to_numpy(dtype=np.float64),
    )


def rotations_frame(dissected: list[tuple[float, int, dissection.UnitLabels]]) -> pd.DataFrame:
    """``dissection.dissect_rotations``' units as one table: ``units_frame``'s columns plus
    ``alpha`` (float) and ``rotation_seed`` (the draw k)."""
    return pd.concat(
        [units_frame(units).assign(alpha=alpha, rotation_seed=draw) for alpha, draw, units in dissected],
        ignore_index=True,
    )


def summarize(units: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """``dissection.summarize_units`` for each group of ``keys`` (e.g. variant, seed, site, alpha,
    draw): one row per group, in order of first appearance, the ``keys`` columns then the counts."""
    rows = [
        {
            **dict(zip(keys, values)),
            **dissection.summarize_units(group["detector"].to_numpy(dtype=bool), group["concept"].tolist()),
        }
        for values, group in units.groupby(keys, sort=False)
    ]
    return pd.DataFrame(rows)


def dissect_sites(
    read_site: Callable[[str], Tensor],
    sites: list[str],
    inside: dict[str, bool],
    probe: ConceptData,
    block: dict,
    variant: str,
    seed: int,
    global_seed: int,
    log: Callable[[str], None] = print,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``dissection.dissect_rotations`` at each site (activations from ``read_site``) as the
    config's ``dissection`` block says: (summary, units), the stage's tables but for their
    provenance.

    Parameters
    ----------
    read_site : Callable[[str], Tensor]
        Site name -> its (N, C, h, w) activations on the probe images.
    sites : list[str]
        The sites to dissect, in order.
    inside : dict[str, bool]
        Site name -> whether it lies inside a residual block (the summary's ``inside_residual``).
    probe : ConceptData
        The probe set.
    block : dict
        The config's ``dissection`` block: ``alphas``, ``rotations``, ``quantile``,
        ``iou_threshold`` and ``probe``.
    variant : str
        The model's variant (a column, and part of the rotations' seed key).
    seed : int
        The model's seed (likewise).
    global_seed : int
        The global seed (part of the rotations' seed key).
    log : Callable[[str], None], default print
        Where one line per site goes.

    Returns
    -------
    summary : pandas.DataFrame
        One row per (site, alpha, draw): ``variant``, ``seed``, ``site``, ``inside_residual``,
        ``alpha``, ``rotation_seed``, ``summarize_units``' counts, ``n_images``, ``probe`` (the
        probe's source), ``quantile`` and ``iou_threshold``.
    units : pandas.DataFrame
        One row per unit of each: ``KEYS`` then ``UNIT_COLUMNS``.
    """
    tables = []
    for site in sites:
        started = time.perf_counter()
        activations = read_site(site)
        dissected = dissection.dissect_rotations(
            activations,
            probe,
            block["alphas"],
            block["rotations"],
            rotation_key(global_seed, variant, seed, site),
            block["quantile"],
            block["iou_threshold"],
        )
        units = rotations_frame(dissected)
        tables.append(units.assign(site=site))
        fractions = units.groupby("alpha")["detector"].mean()
        log(
            f"{variant} seed {seed} {site}: {activations.shape[1]} units, interpretable fraction "
            f"{fractions.iloc[0]:.3f} at alpha {fractions.index[0]:g}, {fractions.iloc[-1]:.3f} at "
            f"alpha {fractions.index[-1]:g} ({time.perf_counter() - started:.1f}s)"
        )
    units = pd.concat(tables, ignore_index=True).assign(variant=variant, seed=seed)
    summary = summarize(units, KEYS)
    summary.insert(3, "inside_residual", summary["site"].map(inside))
    summary = summary.assign(
        n_images=len(probe),
        probe=block["probe"]["source"],
        quantile=block["quantile"],
        iou_threshold=block["iou_threshold"],
    )
    return summary, units[KEYS + UNIT_COLUMNS]
