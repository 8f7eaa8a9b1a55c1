"""The stitching stage's claims (C2, C3, C7)."""

from __future__ import annotations

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
    paper_or_ours,
    units_text,
    within,
)


def stitching_myrtle(tables, settings) -> Result:
    """Myrtle: per site, full below G_ReLU, G_ReLU below 10 points (at all but one site) and
    G_ReLU below rank 1; pairs as units, each comparison paired within the pair."""
    table = tables["stitching"]
    myrtle = table[table["variant"].isin(settings["myrtle_variants"])]
    if myrtle.empty or not {"full", "grelu"} <= set(myrtle["method"]):
        return not_run("needs Myrtle pairs stitched with full and grelu")
    wide = myrtle.pivot_table(
        index=pair_keys(myrtle) + ["site"], columns="method", values="penalty"
    ).reset_index()
    comparisons = []
    for site, rows in wide.groupby("site", sort=False):
        members = pair_members(rows)
        comparisons.append(
            Comparison(f"{site} G_ReLU - full", Estimate.of(rows["grelu"] - rows["full"], members), +1)
        )
        comparisons.append(
            Comparison(
                f"{site} G_ReLU below 10",
                Estimate.of(rows["grelu"], members).shift(0.10),
                -1,
                group="below ten",
                threshold=0.10,
            )
        )
        if "rank1" in rows:
            both = rows.dropna(subset=["rank1", "grelu"])
            comparisons.append(
                Comparison(
                    f"{site} rank 1 - G_ReLU",
                    Estimate.of(both["rank1"] - both["grelu"], pair_members(both)),
                    +1,
                )
            )
    judgement = judge(comparisons, {"below ten": 1}, "" if "rank1" in wide else "rank 1 was not run")
    return Result(
        "penalty differences (points): " + describe(comparisons, judgement.agreement),
        judgement.verdict,
        f"paired 95 % t-intervals over pairs per site, {judgement.note}; full below G_ReLU and G_ReLU "
        "below rank 1 at every site, G_ReLU below 10 points at all but one",
        units_text("pair", wide.groupby(pair_keys(wide)).ngroups),
    )


def stitching_residual(tables, settings) -> Result:
    """Per ReLU ResNet and method: the pair's mean penalty inside residual blocks minus outside,
    above 0 (pairs as units)."""
    table = tables["stitching"]
    resnets = table[table["variant"].isin(settings["residual_variants"])]
    comparisons, pairs = [], 0
    for (variant, method), rows in resnets.groupby(["variant", "method"], sort=False):
        if rows["inside_residual"].nunique() < 2:
            continue
        by_pair = rows.pivot_table(
            index=pair_keys(rows), columns="inside_residual", values="penalty"
        ).reset_index()
        by_pair = by_pair.dropna(subset=[True, False])
        comparisons.append(
            Comparison(
                f"{variant} {method}", Estimate.of(by_pair[True] - by_pair[False], pair_members(by_pair)), +1
            )
        )
        pairs = max(pairs, len(by_pair))
    if not comparisons:
        return not_run("needs a ReLU ResNet stitched at sites inside and outside residual blocks")
    judgement = judge(comparisons)
    return Result(
        "inside - outside residual blocks (points): " + describe(comparisons, judgement.agreement),
        judgement.verdict,
        f"paired 95 % t-intervals over pairs (each pair's mean inside minus its mean outside), {judgement.note}",
        units_text("pair", pairs) + " per variant",
    )


#: How close penalties of different slopes must stay to count as flat (ours: the paper gives no
#: number; its Fig. 8 shows the penalties of slopes below 1 within a few points of each other).
FLAT_MARGIN = 0.05


def leaky_relu_flat(tables, settings) -> Result:
    """Per site shared by the slopes below 1: each slope's G_ReLU penalty minus the smallest
    slope's (Welch over pairs, which differ between variants) within +-5 points (our margin)."""
    table = tables["stitching"]
    slopes = {v: s for v, s in settings["leaky_slopes"].items() if s < 1}
    grelu = table[(table["method"] == "grelu") & table["variant"].isin(slopes)]
    if grelu["variant"].nunique() < 2:
        return not_run("needs G_ReLU stitching of at least two slopes below 1")
    base = min(grelu["variant"].unique(), key=slopes.get)
    sites = set.intersection(*(set(rows["site"]) for _, rows in grelu.groupby("variant")))
    comparisons = []
    for site in dict.fromkeys(s for s in grelu["site"] if s in sites):
        reference = grelu[(grelu["variant"] == base) & (grelu["site"] == site)]["penalty"]
        for variant in (v for v in dict.fromkeys(grelu["variant"]) if v != base):
            d = Estimate.difference(
                grelu[(grelu["variant"] == variant) & (grelu["site"] == site)]["penalty"], reference
            )
            label = f"{site} slope {slopes[variant]:g} - {slopes[base]:g}"
            comparisons += within(label, d, FLAT_MARGIN)
    judgement = judge(comparisons)
    accuracy = ""
    if "zoo" in tables:
        zoo = tables["zoo"]
        acc = zoo[zoo["variant"].isin(slopes)].groupby("variant")["test_acc"].mean()
        accuracy = "; test accuracy " + ", ".join(f"{slopes[v]:g}: {a * 100:.1f}" for v, a in acc.items())
    means = grelu.groupby("variant")["penalty"].mean()
    pairs = grelu.groupby("variant")["pair"].nunique()
    return Result(
        "mean penalty by slope (points) "
        + ", ".join(f"{slopes[v]:g}: {m * 100:.1f}" for v, m in means.items())
        + accuracy
        + "; "
        + describe(comparisons[::2], judgement.agreement[::2]),
        judgement.verdict,
        f"Welch 95 % intervals per site over pairs, each within +-{FLAT_MARGIN * 100:g} points (our margin: "
        f"the paper gives none), {judgement.note}",
        ", ".join(f"slope {slopes[v]:g} {units_text('pair', n)}" for v, n in pairs.items()),
    )


CLAIMS = (
    Claim(
        "C2",
        f"{GODFREY}, section 4, Fig. 1",
        "the specification's reading of Fig. 1 (Myrtle, 32 pairs): full ≈ 0, G_ReLU < 10 % at all but one "
        "layer, and below rank-1 where stitching is outside residual blocks",
        "Myrtle: full stitching below G_ReLU and G_ReLU below rank 1 at every site, G_ReLU below 10 points "
        "at all but one",
        "full ~0, G_ReLU < 10 points at all but one layer, rank 1 above G_ReLU",
        ("stitching",),
        "stitching_penalty.png",
        stitching_myrtle,
        ("stitching_init", "stitching_optimizer", "stitching_protocol", "select_on"),
        ("zoo", "stitching"),
    ),
    Claim(
        "C3",
        f"{GODFREY}, appendix D.2, Figs. 6, 7",
        "the specification's reading of Figs. 6, 7 (ResNets, 16 pairs): layers inside residual blocks have "
        "higher penalties for every method",
        "ReLU ResNets: each pair's stitching penalty inside residual blocks above its penalty outside, "
        "for every method",
        "higher penalties inside blocks",
        ("stitching",),
        "stitching_penalty.png",
        stitching_residual,
        ("stitching_init", "stitching_optimizer", "stitching_protocol", "select_on"),
        ("zoo", "stitching"),
    ),
    Claim(
        "C7",
        f"{GODFREY}, appendix D.3, Table 3, Fig. 8",
        "the specification's reading of Fig. 8: G_ReLU stitching penalties of LeakyReLU ResNet20s are flat "
        "for slopes below 1",
        "G_ReLU stitching penalties of the slopes below 1 within 5 points of the smallest slope's at every "
        "site (our margin)",
        "flat penalties for slopes < 1",
        ("stitching", "zoo"),
        "stitching_leaky_relu.png",
        leaky_relu_flat,
        ("stitching_init", "stitching_optimizer", "stitching_protocol", "select_on"),
        ("zoo", "stitching"),
    ),
)

#: Per table, its column of evidence (a NaN there is a failed measurement, no evidence).
EVIDENCE = {"stitching": "penalty"}

#: What the mode column says of the settings this stage's claims depend on.
MODES = {
    "stitching_init": lambda s: paper_or_ours(f"stitching init {s['stitching_init']}", s, "stitching.init"),
    "stitching_optimizer": lambda s: (
        f"stitching {s['stitching_optimizer']} momentum {s['stitching_momentum']:g} ("
        + (
            "the released code"
            if s["stitching_optimizer"] == "sgd" and s["stitching_momentum"] == 0
            else "not the released code's plain SGD"
        )
        + ")"
    ),
    "stitching_protocol": lambda s: paper_or_ours(
        f"G_ReLU P update {s['stitching_permutation_update']}, batch-norm refresh "
        f"{s['stitching_batch_norm_refresh']}",
        s,
        "stitching.permutation_update",
        "stitching.batch_norm_refresh",
    ),
}

# The appendix's further findings (C10-C14) live in a module of their own, so that this one stays
# short; the stage's registry reads this module's CLAIMS.
from intertwine.workflow.stages.stitching.appendix_claims import CLAIMS as APPENDIX_CLAIMS

CLAIMS += APPENDIX_CLAIMS
