"""The stitching appendix's further findings (Godfrey et al. appendices D.2-D.6; claims C10-C14):
the ranking of the layers inside and outside ResNet20 residual blocks, the transformer, alpha by
cross-validation, L1-regularised layers and SoftSort. The stage's ``claims`` module lists them in
its ``CLAIMS``. The paper prints no number for any of them (its figures' values are not in the
text), so every margin and threshold here is ours, fixed before any run was read."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from intertwine.workflow.claims import (
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
    within,
)
from intertwine.stitch_methods import parse_method

#: How close two G_ReLU layers' penalties (alpha by cross-validation or SoftSort against the
#: Birkhoff layer with the fixed alpha) must stay to count as "very similar" / "comparable" (ours:
#: the paper gives no number; 5 points, the margin of C7).
SIMILAR_MARGIN = 0.05

#: G_ReLU's penalty above the full (linear) layer's by more than this counts as "large" (ours: a
#: tenth of the accuracy; the paper gives no number).
LARGE_PENALTY = 0.10

#: "Substantial variance" in the alpha chosen by cross-validation (ours): at a site, fewer than this
#: share of the pairs chose the site's most common alpha.
MODAL_SHARE = 0.75

#: "Nearly overlap" (ours): the final site's lambda-0.01 layer within this many points of penalty
#: and this much sparsity (a fraction of the matrix) of the G_ReLU layer's.
OVERLAP_PENALTY = 0.05
OVERLAP_SPARSITY = 0.05

#: The L1 strength whose layer the paper finds beside G_ReLU's in the final layer (appendix D.6).
OVERLAP_LAMBDA = 0.01

#: SoftSort "took far longer (> 10x) to optimize": log10 of its time over the Birkhoff layer's.
SLOWER_LOG10 = 1.0

STITCHING_MODES = ("stitching_init", "stitching_optimizer", "stitching_protocol", "select_on")


def _variants(settings: dict, wanted) -> list[str]:
    """The run's variants whose normalised spec satisfies ``wanted``."""
    return [v for v, spec in settings["variant_specs"].items() if wanted(spec)]


def _plain_resnet20(spec: dict) -> bool:
    """The paper's ResNet20: ReLU, not gated, the activation after the residual sum."""
    return (
        spec["arch"] == "resnet20"
        and spec.get("activation") == "relu"
        and not spec.get("gated")
        and spec.get("residual_activation", True)
    )


def _label(method: str) -> str:
    kind, value = parse_method(method)
    names = {"full": "full", "grelu": "G_ReLU", "grelu_cv": "G_ReLU (alpha by CV)", "softsort": "SoftSort"}
    if kind == "rank":
        return f"rank {value}"
    if kind == "l1":
        return f"L1 λ {value:g}"
    return names.get(kind, method)


def _wide(rows: pd.DataFrame, values: str, extra: tuple[str, ...] = ()) -> pd.DataFrame:
    """One row per pair and site, one column per method (``values`` of each)."""
    return rows.pivot_table(
        index=pair_keys(rows) + ["site", *extra], columns="method", values=values, sort=False
    ).reset_index()


def _pair_means(frame: pd.DataFrame, values: pd.Series) -> pd.DataFrame:
    """Each pair's mean of ``values`` (one per row of ``frame``) over its sites: one unit a pair."""
    keyed = frame[pair_keys(frame)].assign(value=values.to_numpy())
    return keyed.groupby(pair_keys(frame), sort=False)["value"].mean().reset_index()


def _unit(means: pd.DataFrame) -> Estimate:
    return Estimate.of(means["value"], pair_members(means))


def _stitched(tables, variants: list[str], methods: set[str]) -> pd.DataFrame | None:
    """The stitching rows of ``variants``, or None when any of ``methods`` was not run on them."""
    table = tables["stitching"]
    rows = table[table["variant"].isin(variants)]
    return rows if methods <= set(rows["method"]) else None


def _result(prefix: str, comparisons, judgement, evidence: str, pairs: int, per: str = "") -> Result:
    return Result(
        prefix + describe(comparisons, judgement.agreement),
        judgement.verdict,
        f"{evidence}, {judgement.note}",
        units_text("pair", pairs) + per,
    )


# --- C10: the ranking flips inside ResNet20 residual blocks (appendix D.3, Fig. 6) --------------


def ranking_flip_resnet20(tables, settings) -> Result:
    """ReLU ResNet20, per site (pairs as units, paired within the pair): outside residual blocks
    rank 1 minus G_ReLU above 0; inside, G_ReLU minus each other layer of Fig. 6 (full and every
    rank) above 0."""
    variants = _variants(settings, _plain_resnet20)
    rows = _stitched(tables, variants, {"grelu", "rank1"})
    if rows is None or rows.empty:
        return not_run("needs ReLU ResNet20 pairs stitched with grelu and rank 1 (stitching.methods, ranks)")
    if rows["inside_residual"].nunique() < 2:
        return not_run("needs ResNet20 sites both inside and outside residual blocks (stitching.sites)")
    others = [m for m in dict.fromkeys(rows["method"]) if parse_method(m)[0] in ("full", "rank")]
    comparisons, pairs = [], 0
    for variant, in_variant in rows.groupby("variant", sort=False):
        wide = _wide(in_variant, "penalty", ("inside_residual",))
        prefix = f"{variant} " if rows["variant"].nunique() > 1 else ""
        for (site, inside), at_site in wide.groupby(["site", "inside_residual"], sort=False):
            contrasts = [(m, "grelu") for m in others if m in at_site] if inside else [("grelu", "rank1")]
            for better, worse in contrasts:
                both = at_site.dropna(subset=[better, worse])
                label = f"{prefix}{site}{'*' if inside else ''} {_label(worse)} - {_label(better)}"
                estimate = Estimate.of(both[worse] - both[better], pair_members(both))
                comparisons.append(Comparison(label, estimate, +1))
        pairs = max(pairs, in_variant.groupby(pair_keys(in_variant)).ngroups)
    judgement = judge(comparisons)
    return _result(
        "penalty differences (points; * inside a residual block): ",
        comparisons,
        judgement,
        "paired 95 % t-intervals over pairs per site; 'consistently' read as at every site: outside "
        "blocks G_ReLU below rank 1, inside blocks G_ReLU above full and every rank; untested: "
        "'(and sometimes rank 2)', as 'sometimes' names no rate",
        pairs,
        " per variant",
    )


# --- C11: the transformer's large G_ReLU penalties (appendix D.4, Fig. 12) ----------------------


def transformer_grelu_penalty(tables, settings) -> Result:
    """CCT: each pair's mean over its sites of G_ReLU's penalty minus the full (linear) layer's,
    above 0 and above 10 points (ours: "large")."""
    rows = _stitched(tables, _variants(settings, lambda s: s["arch"] == "cct"), {"full", "grelu"})
    if rows is None or rows.empty:
        return not_run("needs CCT pairs stitched with full and grelu (stitching.methods_per_variant)")
    comparisons, pairs = [], 0
    for variant, in_variant in rows.groupby("variant", sort=False):
        wide = _wide(in_variant, "penalty").dropna(subset=["full", "grelu"])
        means = _pair_means(wide, wide["grelu"] - wide["full"])
        prefix = f"{variant} " if rows["variant"].nunique() > 1 else ""
        comparisons += [
            Comparison(f"{prefix}G_ReLU - full", _unit(means), +1),
            Comparison(
                f"{prefix}G_ReLU - full above {LARGE_PENALTY * 100:g} (large)",
                _unit(means).shift(LARGE_PENALTY),
                +1,
                threshold=LARGE_PENALTY,
            ),
        ]
        pairs = max(pairs, len(means))
    judgement = judge(comparisons)
    return _result(
        "each pair's mean over sites (points): ",
        comparisons,
        judgement,
        f"95 % t-intervals over pairs; 'large' read as more than {LARGE_PENALTY * 100:g} points above "
        "the linear layer (ours: the paper gives no number); untested: 'due to the lack of activation "
        "functions', as the zoo has no transformer with an activation after its blocks",
        pairs,
    )


# --- C12: alpha by cross-validation (appendix D.5, Figs. 13, 14) --------------------------------


def alpha_by_cross_validation(tables, settings) -> Result:
    """Myrtle: each pair's mean over sites of grelu_cv's penalty minus grelu's within +-5 points
    (ours); at every site, the share of pairs that chose the site's most common alpha below 3/4
    (ours: "substantial variance")."""
    rows = _stitched(tables, settings["myrtle_variants"], {"grelu", "grelu_cv"})
    if rows is None or rows.empty:
        return not_run("needs Myrtle pairs stitched with grelu and grelu_cv (stitching.methods)")
    wide = _wide(rows, "penalty").dropna(subset=["grelu", "grelu_cv"])
    means = _pair_means(wide, wide["grelu_cv"] - wide["grelu"])
    comparisons = within("G_ReLU (alpha by CV) - G_ReLU", _unit(means), SIMILAR_MARGIN)
    cv = rows[(rows["method"] == "grelu_cv") & rows["alpha_selected"].notna()]
    modes = []
    for (variant, site), at_site in cv.groupby(["variant", "site"], sort=False):
        where = f"{variant} {site}" if cv["variant"].nunique() > 1 else site
        chosen = at_site["alpha_selected"].round(12)
        common = chosen.value_counts().idxmax()
        modes.append(f"{where}: {units_text('alpha', chosen.nunique())}")
        comparisons.append(
            Comparison(
                f"{where} pairs choosing alpha {common:g} (%)",
                Estimate.of((chosen == common).astype(float), pair_members(at_site)).shift(MODAL_SHARE),
                -1,
                threshold=MODAL_SHARE,
            )
        )
    judgement = judge(comparisons, missing="" if len(cv) else "no alpha_selected was recorded")
    return _result(
        "penalty (points) and the share of pairs choosing each site's most common alpha: ",
        comparisons,
        judgement,
        f"95 % t-intervals over pairs; 'very similar' read as within +-{SIMILAR_MARGIN * 100:g} points on "
        f"each pair's mean over sites, 'substantial variance' as fewer than {MODAL_SHARE:.0%} of the pairs "
        f"choosing the site's most common alpha, at every site (both ours); {'; '.join(modes)}",
        len(means),
    )


# --- C13: L1-regularised stitching against G_ReLU (appendix D.6, Fig. 15) -----------------------


def _l1_against_grelu(site: str, penalty: pd.DataFrame, sparsity: pd.DataFrame, l1: list[str]) -> list:
    """At one site: each L1 layer at least as sparse as G_ReLU's (on the mean over pairs), or the
    sparsest L1 layer where none is, costs more than G_ReLU (paired within the pair)."""
    level = sparsity[[m for m in l1 if m in sparsity]].mean().dropna()
    if level.empty or "grelu" not in sparsity:
        return []
    chosen = [m for m in level.index if level[m] >= sparsity["grelu"].mean()] or [level.idxmax()]
    comparisons = []
    for method in chosen:
        both = penalty.dropna(subset=[method, "grelu"])
        estimate = Estimate.of(both[method] - both["grelu"], pair_members(both))
        comparisons.append(Comparison(f"{site} {_label(method)} - G_ReLU", estimate, +1))
    return comparisons


def l1_sparsity_against_grelu(tables, settings) -> Result:
    """Myrtle, per site: every L1 layer at least as sparse as G_ReLU's, or the sparsest where none
    is, costs more than G_ReLU; at the final site, lambda 0.01's layer within +-5 points of
    penalty and +-0.05 of sparsity of G_ReLU's (ours)."""
    table = tables["stitching"]
    rows = table[table["variant"].isin(settings["myrtle_variants"])]
    l1 = [m for m in dict.fromkeys(rows["method"]) if parse_method(m)[0] == "l1"]
    if "grelu" not in set(rows["method"]) or not l1:
        return not_run("needs Myrtle pairs stitched with grelu and l1 (stitching.methods, l1_lambdas)")
    overlap = next((m for m in l1 if math.isclose(parse_method(m)[1], OVERLAP_LAMBDA)), None)
    comparisons, pairs, overlaps = [], 0, 0
    for variant, in_variant in rows.groupby("variant", sort=False):
        penalty, sparsity = _wide(in_variant, "penalty"), _wide(in_variant, "sparsity")
        sites = list(dict.fromkeys(in_variant["site"]))
        for site in sites:
            at_site = penalty[penalty["site"] == site]
            present = [m for m in l1 if m in at_site and at_site[m].notna().any()]
            if present:
                comparisons += _l1_against_grelu(site, at_site, sparsity[sparsity["site"] == site], present)
        measured = all(c in frame for frame in (penalty, sparsity) for c in (overlap, "grelu"))
        if measured and penalty.loc[penalty["site"] == sites[-1], overlap].notna().any():
            overlaps += 1
            for name, frame, margin in (
                ("penalty", penalty, OVERLAP_PENALTY),
                ("sparsity", sparsity, OVERLAP_SPARSITY),
            ):
                both = frame[frame["site"] == sites[-1]].dropna(subset=[overlap, "grelu"])
                difference = Estimate.of(both[overlap] - both["grelu"], pair_members(both))
                comparisons += within(f"{sites[-1]} {_label(overlap)} - G_ReLU {name}", difference, margin)
        pairs = max(pairs, in_variant.groupby(pair_keys(in_variant)).ngroups)
    missing = (
        "" if overlaps else f"λ = {OVERLAP_LAMBDA:g} was not run at the last site: its overlap is untested"
    )
    judgement = judge(comparisons, missing=missing)
    return _result(
        "penalty differences (points; sparsity in % of the matrix's entries): ",
        comparisons,
        judgement,
        "paired 95 % t-intervals over pairs per site; 'low stitching penalties for their sparsity levels' "
        "read as: every L1 layer at least as sparse as G_ReLU's (the mean over pairs), or the sparsest "
        f"where none is, costs more; 'nearly overlap' as within +-{OVERLAP_PENALTY * 100:g} points of "
        f"penalty and +-{OVERLAP_SPARSITY:.0%} of the entries in sparsity at the last site (ours)",
        pairs,
    )


# --- C14: SoftSort against the Birkhoff layer (appendix D.2.1) ----------------------------------


def softsort_comparable_but_slower(tables, settings) -> Result:
    """Myrtle: each pair's mean over sites of SoftSort's penalty minus the Birkhoff G_ReLU layer's
    within +-5 points (ours); log10 of each pair's SoftSort training time over G_ReLU's (summed
    over the sites both ran) above 1 (the paper's "> 10x")."""
    rows = _stitched(tables, settings["myrtle_variants"], {"grelu", "softsort"})
    if rows is None or rows.empty:
        return not_run("needs Myrtle pairs stitched with grelu and softsort (stitching.methods)")
    penalty = _wide(rows, "penalty").dropna(subset=["grelu", "softsort"])
    means = _pair_means(penalty, penalty["softsort"] - penalty["grelu"])
    seconds = _wide(rows, "train_seconds").dropna(subset=["grelu", "softsort"])
    totals = seconds.groupby(pair_keys(seconds), sort=False)[["softsort", "grelu"]].sum().reset_index()
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.log10(totals["softsort"] / totals["grelu"])  # a zero time is no evidence (inf)
    slower = Estimate.of(ratio, pair_members(totals)).shift(SLOWER_LOG10)
    penalties = within("SoftSort - G_ReLU", _unit(means), SIMILAR_MARGIN)
    timing = [Comparison("log10(SoftSort / G_ReLU time)", slower, +1, threshold=SLOWER_LOG10)]
    judgement = judge(penalties + timing)
    agreement = judgement.agreement
    return Result(
        "each pair's mean penalty over sites (points): "
        + describe(penalties, agreement[:2])
        + "; "
        + describe(timing, agreement[2:], scale=1, fmt=".2f"),
        judgement.verdict,
        f"95 % t-intervals over pairs; 'comparable' read as within +-{SIMILAR_MARGIN * 100:g} points "
        "(ours); '> 10x' as log10 of each pair's time ratio above 1 (the wall time depends on the "
        f"machine and on our implementations of both layers, not only on the method), {judgement.note}",
        units_text("pair", len(means)),
    )


CLAIMS = (
    Claim(
        "C10",
        f"{GODFREY}, appendix D.3, Fig. 6",
        '"whereas G_{ReLU} stitching consistently outperforms rank 1 (and sometimes rank 2) stitching '
        'outside residual blocks, it consistently underperforms all strategies inside residual blocks" '
        "(appendix D.3, on ResNet20)",
        "ReLU ResNet20, at every site: outside residual blocks G_ReLU's penalty below rank 1's; inside, "
        "above full's and every rank's (paired within the pair)",
        "Fig. 6, 16 pairs (values not in the text)",
        ("stitching",),
        "stitching_penalty.png",
        ranking_flip_resnet20,
        STITCHING_MODES,
        ("zoo", "stitching"),
    ),
    Claim(
        "C11",
        f"{GODFREY}, appendix D.4, Fig. 12",
        '"The large stitching penalties for G_{ReLU} are expected due to the lack of activation '
        'functions after the linear (feedforward) layers for each encoder layer." (appendix D.4)',
        "CCT: each pair's mean over sites of G_ReLU's penalty minus the linear layer's above 0 and above "
        "10 points (ours: 'large')",
        "Fig. 12, 5 pairs (values not in the text)",
        ("stitching",),
        "stitching_transformer.png",
        transformer_grelu_penalty,
        STITCHING_MODES,
        ("zoo", "stitching"),
    ),
    Claim(
        "C12",
        f"{GODFREY}, appendix D.5, Figs. 13, 14",
        '"In fig. 13 we obtain very similar results to those in fig. 1." ... "there is substantial '
        'variance in the α selected by cross-validation, at all layers of our Myrtle CNN network" '
        "(appendix D.5)",
        "Myrtle: G_ReLU with alpha by cross-validation within 5 points of G_ReLU with alpha 0.1 (each "
        "pair's mean over sites; ours); at every site fewer than 75 % of pairs chose the most common "
        "alpha (ours)",
        "Figs. 13, 14, 32 pairs (values not in the text)",
        ("stitching",),
        "stitching_alpha_cv.png",
        alpha_by_cross_validation,
        STITCHING_MODES,
        ("zoo", "stitching"),
    ),
    Claim(
        "C13",
        f"{GODFREY}, appendix D.6, Fig. 15",
        '"seems to show that G_{ReLU} layers achieve low stitching penalties for their sparsity levels" '
        '... "in the final layer the scatter points corresponding to G_{ReLU} and $\\lambda = 0.01$ '
        'nearly overlap" (appendix D.6)',
        "Myrtle, per site: the L1 layers at least as sparse as G_ReLU's (or the sparsest) cost more "
        "than G_ReLU; at the last site lambda 0.01 within 5 points of penalty and 0.05 of sparsity of "
        "G_ReLU (ours)",
        "Fig. 15, 32 pairs (values not in the text)",
        ("stitching",),
        "stitching_l1_sparsity.png",
        l1_sparsity_against_grelu,
        STITCHING_MODES,
        ("zoo", "stitching"),
    ),
    Claim(
        "C14",
        f"{GODFREY}, appendix D.2.1",
        '"Our final results were comparable, however this method took far longer (> $10\\times$) to '
        'optimize than the Birkhoff polytope method." (appendix D.2.1, of SoftSort)',
        "Myrtle: SoftSort's penalty within 5 points of the Birkhoff G_ReLU layer's (each pair's mean "
        "over sites; ours) and its training time over 10 times G_ReLU's (machine-dependent)",
        "> 10x the Birkhoff layer's time; no penalties in the text",
        ("stitching",),
        "stitching_softsort.png",
        softsort_comparable_but_slower,
        STITCHING_MODES,
        ("zoo", "stitching"),
    ),
)
