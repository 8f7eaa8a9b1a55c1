"""The units the similarity claims rest on: which of the run's variants is which of the paper's
architectures, and per pair of members its values by site in depth order, its fall and rise along
depth and its decay, before any interval (``claims`` judges them)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from intertwine.claims import pair_keys, pair_members

#: The architectures the paper measured similarity on, by the suffix of their claim ids:
#: (arch, constant_width, name).
ARCHITECTURES = {
    "myrtle": ("myrtle", None, "Myrtle"),
    "resnet20": ("resnet20", None, "ResNet20"),
    "resnet18": ("resnet18", None, "ResNet18"),
    "myrtle512": ("myrtle", 512, "constant-width Myrtle (512 channels)"),
}

PROCRUSTES = ("grelu_procrustes", "orthogonal_procrustes")


def architecture_variants(settings: dict, key: str) -> list[str]:
    """The run's similarity variants that are the paper's architecture ``key``: plain ReLU (not
    gated), batch norm, width 1x, the residual activation kept (ResNets), and constant width 512
    for ``myrtle512`` only. Each is judged on its own: variants are never pooled."""
    arch, width, _ = ARCHITECTURES[key]
    specs = settings["variant_specs"]
    chosen = []
    for variant in settings["relu_similarity_variants"]:
        spec = specs.get(variant)
        if (
            spec is not None
            and spec["arch"] == arch
            and spec.get("constant_width") == width
            and spec.get("batch_norm", True)
            and spec.get("width_multiplier", 1.0) == 1.0
            and spec.get("residual_activation", True)
        ):
            chosen.append(variant)
    return chosen


def depth_order(settings: dict, variant: str, sites) -> list[str]:
    """``sites`` in the model's forward order (the plan's ``site_order``; else as given)."""
    present = list(dict.fromkeys(sites))
    order = settings.get("site_order", {}).get(variant) or present
    return [site for site in order if site in present]


def layer_70(settings: dict, variant: str) -> str | None:
    """The site the paper calls "layer 70" of its ResNet18: the penultimate site inside a residual
    block (appendix D.3's own gloss), or None when the plan names fewer than two such sites."""
    inside = settings["similarity_inside_residual"].get(variant, [])
    return inside[-2] if len(inside) >= 2 else None


def by_site(table: pd.DataFrame, variant: str, measures, settings: dict) -> dict[str, pd.DataFrame]:
    """Per measure, the variant's same-site values: one row per pair, one column per site in depth
    order, only the sites every measure has and the pairs with a value at each of them."""
    rows = table[
        (table["variant"] == variant) & (table["site_a"] == table["site_b"]) & table["measure"].isin(measures)
    ]
    if rows.empty or not set(measures) <= set(rows["measure"]):
        return {}
    wide = rows.pivot_table(index=pair_keys(rows), columns=["measure", "site_a"], values="value")
    shared = set.intersection(*(set(wide[m].columns) for m in measures))
    sites = depth_order(settings, variant, [s for s in rows["site_a"] if s in shared])
    if not sites:
        return {}
    columns = [(m, s) for m in measures for s in sites]
    wide = wide[columns].dropna()
    return {m: wide[m][sites] for m in measures}


def members(frame: pd.DataFrame) -> list[tuple] | None:
    """The zoo members each row of a ``by_site`` frame (a pair) rests on."""
    return pair_members(frame.index.to_frame(index=False))


def fall_and_rise(values: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per pair (a row; 3 or more sites in depth order): the fall over the sites before the last
    (minus a least-squares line's change from the first site to the penultimate) and the rise at
    the last site (the last minus the penultimate)."""
    array = values.to_numpy(float)
    before = array[:, :-1]
    depth = np.arange(before.shape[1], dtype=float)
    slope = np.polyfit(depth, before.T, 1)[0]
    return -slope * depth[-1], array[:, -1] - array[:, -2]


def correlation(a: pd.DataFrame, b: pd.DataFrame) -> np.ndarray:
    """Per pair (a row), the correlation over sites of ``a`` with ``b`` (NaN where either is flat)."""
    x, y = a.to_numpy(float), b.to_numpy(float)
    x = x - x.mean(axis=1, keepdims=True)
    y = y - y.mean(axis=1, keepdims=True)
    norms = np.sqrt((x * x).sum(axis=1) * (y * y).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norms > 0, (x * y).sum(axis=1) / norms, np.nan)


def decay(values: pd.DataFrame, order: list[str]) -> np.ndarray:
    """Per pair (a row; 2 or more sites), the fall of a least-squares line over depth from the
    first site to the last, depth being each site's place in the model's ``order``."""
    depth = np.array([order.index(site) for site in values.columns], dtype=float)
    slope = np.polyfit(depth, values.to_numpy(float).T, 1)[0]
    return -slope * (depth.max() - depth.min())


def means_text(frames: dict[str, pd.DataFrame], label: dict[str, str]) -> str:
    """The mean over pairs at each site, per measure: "G_ReLU 0.62/0.51 (act1/act2)"."""
    parts = []
    for measure, frame in frames.items():
        values = "/".join(f"{v:.3f}" for v in frame.mean())
        parts.append(f"{label.get(measure, measure)} {values}")
    sites = "/".join(next(iter(frames.values())).columns)
    return f"{' vs '.join(parts)} ({sites})"
