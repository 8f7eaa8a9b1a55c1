"""The dissection stage's claim (C6)."""

from __future__ import annotations

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
    units_text,
)


def _fall_along(fractions: pd.DataFrame) -> pd.Series:
    """Per row (a member's site) of ``fractions`` (columns: the alphas, rotation draws averaged), the
    fall of the interpretable fraction from alpha 0 to the largest alpha read off the least-squares
    line through every alpha measured: minus the slope times the alphas' range. With alphas 0 and 1
    alone it is the difference of the two; with more, every basis along the geodesic counts, as in
    C5's decay along depth."""
    alphas = fractions.columns.to_numpy(float)
    centred = alphas - alphas.mean()
    slopes = (
        (fractions.to_numpy(float) - fractions.to_numpy(float).mean(1, keepdims=True))
        @ centred
        / (centred @ centred)
    )
    return pd.Series(-slopes * (alphas.max() - alphas.min()), index=fractions.index)


def dissection_rotation(tables, settings) -> Result:
    """Members as units: each member's fall of the interpretable fraction from alpha 0 to the
    largest alpha (``_fall_along``: the least-squares trend over every alpha, rotation draws
    averaged at each; mean over the member's sites, so paired within member and site). With a
    residual activation the fall is above 0 and above the fall without one (Welch across
    variants); without one, a fall decided above 0 refutes the claim."""
    table = tables["dissection"]
    flags = settings["residual_activation"]
    table = table[table["variant"].isin(flags)]
    if table.empty:
        return not_run("needs a dissected ResNet (with or without residual activation)")
    if not (table["alpha"] == 0).any() or table["alpha"].nunique() < 2:
        return not_run("needs the unrotated basis and a rotated one (dissection.alphas with 0 and more)")
    falls = {}
    for variant, rows in table.groupby("variant", sort=False):
        at = rows.groupby(["seed", "site", "alpha"])["fraction_interpretable"].mean().unstack("alpha")
        falls[variant] = _fall_along(at.dropna()).groupby("seed").mean()
    comparisons = []
    with_activation = [v for v in falls if flags[v]]
    without = [v for v in falls if not flags[v]]
    for variant in with_activation:
        comparisons.append(Comparison(f"{variant} fall", Estimate.of(falls[variant]), +1))
    for variant in without:
        comparisons.append(Comparison(f"{variant} fall", Estimate.of(falls[variant]), -1, required=False))
        for other in with_activation:
            comparisons.append(
                Comparison(f"{other} - {variant} fall", Estimate.difference(falls[other], falls[variant]), +1)
            )
    judgement = judge(
        comparisons,
        missing=""
        if with_activation and without
        else "needs variants with and without the residual activation",
    )
    return Result(
        "fall of the interpretable fraction along the rotation (least-squares line over alpha, from 0 "
        "to the largest): " + describe(comparisons, judgement.agreement, 1, ".3f"),
        judgement.verdict,
        f"95 % t-intervals over members (paired within member and site), Welch between variants, "
        f"{judgement.note}; without the activation a fall decided above 0 refutes",
        ", ".join(f"{v} {units_text('member', len(f))}" for v, f in falls.items()),
    )


CLAIMS = (
    Claim(
        "C6",
        f"{GODFREY}, section 6, Fig. 3",
        "the specification's reading of section 6: with the activation on the residual output, "
        "interpretability falls with rotation; without it, it stays flat or rises",
        "Dissection: the interpretable fraction falls from alpha 0 to 1 with a residual activation, more "
        "than without one, and does not fall without one",
        "fewer interpretable units after rotation only with a residual activation",
        ("dissection",),
        "dissection_fraction.png",
        dissection_rotation,
        ("select_on",),
        ("zoo", "dissection"),
    ),
)

#: Per table, its column of evidence (a NaN there is a failed measurement, no evidence).
EVIDENCE = {"dissection": "fraction_interpretable"}
