"""The similarity stage's claims (C4, C5)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from intertwine.claims import (
    GODFREY,
    Claim,
    Comparison,
    Estimate,
    Result,
    describe,
    judge,
    not_run,
    pair_keys,
    pair_members,
    units_text,
)


def _procrustes_units(tables, settings) -> pd.DataFrame | None:
    table = tables["similarity"]
    same = table[
        (table["site_a"] == table["site_b"]) & table["variant"].isin(settings["relu_similarity_variants"])
    ]
    wide = same.pivot_table(index=pair_keys(same) + ["site_a"], columns="measure", values="value")
    if not {"grelu_procrustes", "orthogonal_procrustes"} <= set(wide.columns):
        return None
    return wide.dropna(subset=["grelu_procrustes", "orthogonal_procrustes"]).reset_index()


def procrustes_order(tables, settings) -> Result:
    """Pooled over the ReLU variants' pairs: each pair's mean over sites of orthogonal - G_ReLU
    Procrustes above 0 ("less similarity"), and each pair's correlation over sites of the two
    measures above 0 ("otherwise patterns largely follow"), where a variant has 3 or more sites."""
    wide = _procrustes_units(tables, settings)
    if wide is None or wide.empty:
        return not_run("needs grelu_procrustes and orthogonal_procrustes of a ReLU variant")
    keys = pair_keys(wide)
    lower = (
        wide.assign(d=wide["orthogonal_procrustes"] - wide["grelu_procrustes"])
        .groupby(keys)["d"]
        .mean()
        .reset_index()
    )
    comparisons = [Comparison("orthogonal - G_ReLU", Estimate.of(lower["d"], pair_members(lower)), +1)]

    def correlation(rows):
        if len(rows) < 3 or rows["grelu_procrustes"].std() == 0 or rows["orthogonal_procrustes"].std() == 0:
            return math.nan
        return float(np.corrcoef(rows["grelu_procrustes"], rows["orthogonal_procrustes"])[0, 1])

    pattern = wide.groupby(keys).apply(correlation, include_groups=False).rename("r").reset_index().dropna()
    if len(pattern):
        comparisons.append(
            Comparison("depth-pattern correlation", Estimate.of(pattern["r"], pair_members(pattern)), +1)
        )
    judgement = judge(comparisons)
    means = wide.groupby(["variant", "site_a"], sort=False)[
        ["grelu_procrustes", "orthogonal_procrustes"]
    ].mean()
    by_site = "; ".join(
        f"{variant} "
        + "/".join(f"{g:.2f}" for g in rows["grelu_procrustes"])
        + " vs "
        + "/".join(f"{o:.2f}" for o in rows["orthogonal_procrustes"])
        for variant, rows in means.groupby(level=0, sort=False)
    )
    return Result(
        f"G_ReLU vs orthogonal by site: {by_site}; " + describe(comparisons, judgement.agreement, 1, ".3f"),
        judgement.verdict,
        f"paired 95 % t-intervals over pairs pooled across variants, {judgement.note}"
        + ("" if len(pattern) else "; no variant has 3 sites, so the depth pattern is not tested"),
        units_text("pair", len(lower)),
    )


def cka_diagonal(tables, settings) -> Result:
    """Pooled over the ReLU variants' pairs: the decay of the diagonal (same site in both members)
    from the first site to the last (a least-squares line over depth), G_ReLU-CKA's above linear
    CKA's (paired within the pair)."""
    table = tables["similarity"]
    table = table[table["variant"].isin(settings["relu_similarity_variants"])]
    diagonal = table[
        (table["site_a"] == table["site_b"]) & table["measure"].isin(["grelu_cka", "linear_cka"])
    ]
    if diagonal.empty or diagonal["measure"].nunique() < 2:
        return not_run("needs grelu_cka and linear_cka (similarity.cka_measures) of a ReLU variant")
    keys = pair_keys(diagonal)

    def decay(rows):
        # Depth order from the plan (the model's site order); else the order of the table's rows.
        order = settings.get("site_order", {}).get(rows.name[0]) or list(dict.fromkeys(rows["site_a"]))
        depth = rows["site_a"].map({s: i for i, s in enumerate(order)}).to_numpy(float)
        if len(rows) < 2:
            return math.nan
        slope = np.polyfit(depth, rows["value"].to_numpy(float), 1)[0]
        return float(-slope * (depth.max() - depth.min()))

    decays = (
        diagonal.groupby(keys + ["measure"], sort=False).apply(decay, include_groups=False).unstack("measure")
    )
    decays = decays.dropna().reset_index()
    members = pair_members(decays)
    # The sentence is a comparison ("more ... than its orthogonal counterpart"): one paired interval.
    comparisons = [
        Comparison(
            "G_ReLU - linear decay", Estimate.of(decays["grelu_cka"] - decays["linear_cka"], members), +1
        )
    ]
    judgement = judge(comparisons)
    return Result(
        f"diagonal decay first to last site: G_ReLU-CKA {decays['grelu_cka'].mean():.3f}, linear CKA "
        f"{decays['linear_cka'].mean():.3f}; " + describe(comparisons, judgement.agreement, 1, ".3f"),
        judgement.verdict,
        f"paired 95 % t-intervals over pairs pooled across variants, {judgement.note}",
        units_text("pair", len(decays)),
    )


CLAIMS = (
    Claim(
        "C4",
        f"{GODFREY}, section 5, Tables 2, 4",
        '"distinct representations register less similarity in terms of G_ReLU-Procrustes than orthogonal '
        'Procrustes ... otherwise patterns largely follow those of orthogonal Procrustes" (section 5); the '
        'ResNet20 curves are "qualitatively quite similar" (appendix)',
        "ReLU networks, pooled over pairs: G_ReLU-Procrustes below orthogonal Procrustes on average over "
        "sites, and its depth pattern correlated with orthogonal's",
        "Table 2 (Myrtle, 32 pairs): 0.621/0.511/0.443/0.490 vs 0.772/0.574/0.509/0.583; Table 4 "
        "(constant width, layer 10): 0.569 vs 0.541",
        ("similarity",),
        "similarity_procrustes.png",
        procrustes_order,
        ("select_on",),
        ("zoo", "similarity"),
    ),
    Claim(
        "C5",
        f"{GODFREY}, appendix E, Figs. 2, 5, 11",
        '"the G_ReLU-CKA exhibits a much more significant decay with network depth than its orthogonal '
        'counterpart" (appendix E)',
        "ReLU networks, pooled over pairs: the CKA of a site with the same site of the other member falls "
        "more with depth for G_ReLU-CKA than for linear CKA",
        "G_ReLU-CKA's diagonal decays with depth, linear CKA's less",
        ("similarity",),
        "similarity_cka.png",
        cka_diagonal,
        ("select_on",),
        ("zoo", "similarity"),
    ),
)

#: Per table, its column of evidence (a NaN there is a failed measurement, no evidence).
EVIDENCE = {"similarity": "value"}
