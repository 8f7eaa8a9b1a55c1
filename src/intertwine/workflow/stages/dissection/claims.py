"""The dissection stage's claims (C6, C15, C15b: Godfrey et al. section 6, appendix F.2).

Which variants are which comes from their specs (``settings["variant_specs"]``): a ResNet with the
activation on its residual output (the paper's ResNet-50), one without it (the "modified
ResNet-50"), a ConvNeXt. Which sites are which comes from the table: a site on the residual
stream (``inside_residual`` false) inside a block's module (its name has a dot: ``layer3.2.act2``,
``stage3.1.out``) is a block's residual output; the stem's activation (``act``) is on the stream
but is no residual output; ``inside_residual`` sites are inside a block (Fig. 19's).

The paper dissects ImageNet models on Broden; the zoo's are CIFAR-sized models probed with the
synthetic ``shapes`` images (each row's statement says so)."""

from __future__ import annotations

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
    units_text,
    within,
)

#: "does not drop" / "remains constant" (section 6) as an equivalence: the fall of the interpretable
#: fraction along the rotation lies within +-5 points (a fraction of 0.05 of the site's units).
#: Ours (the paper gives no margin), fixed before any run of C6 in this form.
NO_DROP_MARGIN = 0.05

SUBSTITUTION = (
    "ours: CIFAR-sized zoo models (ResNet20s, a CIFAR ConvNeXt) probed with synthetic `shapes` images "
    "with concept masks, for the paper's ImageNet ResNet-50s and ConvNeXt dissected on Broden"
)


def _fall_along(fractions: pd.DataFrame) -> pd.Series:
    """Per row (a member's site) of ``fractions`` (columns: the alphas, rotation draws averaged), the
    fall of the interpretable fraction from alpha 0 to the largest alpha read off the least-squares
    line through every alpha measured: minus the slope times the alphas' range. With alphas 0 and 1
    alone it is the difference of the two; with more, every basis along the geodesic counts, as in
    C5's decay along depth. (Chosen after seeing the default run: docs/scorecard.md says so.)"""
    alphas = fractions.columns.to_numpy(float)
    centred = alphas - alphas.mean()
    slopes = (
        (fractions.to_numpy(float) - fractions.to_numpy(float).mean(1, keepdims=True))
        @ centred
        / (centred @ centred)
    )
    return pd.Series(-slopes * (alphas.max() - alphas.min()), index=fractions.index)


def arms(settings: dict, present) -> dict[str, list[str]]:
    """The dissected variants of each of the paper's three models, by spec: ``with`` (a plain ReLU
    ResNet with the residual activation), ``without`` (a ResNet without it), ``convnext``."""
    specs = settings["variant_specs"]
    chosen = {"with": [], "without": [], "convnext": []}
    for variant in present:
        spec = specs.get(variant, {})
        if spec.get("arch") == "convnext":
            chosen["convnext"].append(variant)
        elif "residual_activation" in spec and not spec.get("gated"):
            if not spec["residual_activation"]:
                chosen["without"].append(variant)
            elif spec.get("activation") == "relu":
                chosen["with"].append(variant)
    return chosen


def residual_outputs(table: pd.DataFrame) -> pd.DataFrame:
    """The rows at a block's residual output (see the module docstring)."""
    on_stream = ~table["inside_residual"].astype(bool)
    return table[on_stream & table["site"].str.contains(".", regex=False)]


def member_falls(rows: pd.DataFrame) -> pd.Series:
    """Per member (seed): the fall along the rotation (``_fall_along``, rotation draws averaged at
    each alpha), averaged over the member's sites in ``rows``: one number per member."""
    at = rows.groupby(["seed", "site", "alpha"])["fraction_interpretable"].mean().unstack("alpha")
    return _fall_along(at.dropna()).groupby("seed").mean()


def _usable(table: pd.DataFrame) -> str:
    """Why the table cannot show a fall along the rotation, or ""."""
    if table.empty:
        return "needs a dissected ResNet with or without the residual activation, or a ConvNeXt (dissection.variants)"
    if not (table["alpha"] == 0).any() or table["alpha"].nunique() < 2:
        return "needs the unrotated basis and a rotated one (dissection.alphas with 0 and more)"
    return ""


def dissection_rotation(tables, settings) -> Result:
    """C6, members as units, at the residual outputs: the fall along the rotation is above 0 with
    the residual activation; within +-``NO_DROP_MARGIN`` without it (an equivalence: "does not drop",
    "remains constant"); below 0 (an increase) for a ConvNeXt. Each arm needs its variant."""
    table = residual_outputs(tables["dissection"])
    chosen = arms(settings, table["variant"].unique())
    table = table[table["variant"].isin([v for arm in chosen.values() for v in arm])]
    if why := _usable(table):
        return not_run(why)
    falls = {variant: member_falls(rows) for variant, rows in table.groupby("variant", sort=False)}
    comparisons = [Comparison(f"{v} fall", Estimate.of(falls[v]), +1) for v in chosen["with"]]
    for variant in chosen["without"]:
        comparisons += within(f"{variant} fall", Estimate.of(falls[variant]), NO_DROP_MARGIN)
    comparisons += [Comparison(f"{v} fall", Estimate.of(falls[v]), -1) for v in chosen["convnext"]]
    absent = [
        name
        for name, arm in (
            ("a ResNet with the residual activation", "with"),
            ("a ResNet without it", "without"),
            ("a ConvNeXt", "convnext"),
        )
        if not chosen[arm]
    ]
    judgement = judge(comparisons, missing=f"not dissected: {', '.join(absent)}" if absent else "")
    return Result(
        "fall of the interpretable fraction at the residual outputs along the rotation (points; "
        "least-squares line over alpha, from 0 to the largest): "
        + describe(comparisons, judgement.agreement),
        judgement.verdict,
        f"95 % t-intervals over members (each member's sites and rotation draws averaged), "
        f"{judgement.note}; without the residual activation an equivalence within ±{NO_DROP_MARGIN * 100:g} "
        f"points (ours); residual-output sites only; {SUBSTITUTION}",
        ", ".join(f"{v} {units_text('member', len(f))}" for v, f in falls.items()),
    )


def concept_units(tables, settings) -> Result:
    """C15, members as units: at alpha 0, each member's interpretable fraction averaged over its
    residual outputs; each model with the residual activation above each model without one
    (the modified ResNet and the ConvNeXt), by Welch's interval."""
    table = residual_outputs(tables["dissection"])
    table = table[table["alpha"] == 0]
    chosen = arms(settings, table["variant"].unique())
    without = chosen["without"] + chosen["convnext"]
    if table.empty or not (chosen["with"] or without):
        return not_run("needs the unrotated basis (alpha 0) of a dissected ResNet or ConvNeXt")
    level = {
        variant: rows.groupby("seed")["fraction_interpretable"].mean()
        for variant, rows in table.groupby("variant", sort=False)
        if variant in chosen["with"] + without
    }
    comparisons = [
        Comparison(f"{a} - {b}", Estimate.difference(level[a], level[b]), +1)
        for a in chosen["with"]
        for b in without
    ]
    if not comparisons:
        return Result(
            "",
            "inconclusive",
            "needs a ResNet with the residual activation and a model without one at alpha 0",
            ", ".join(f"{v} {units_text('member', len(f))}" for v, f in level.items()),
        )
    judgement = judge(comparisons)
    return Result(
        "interpretable fraction at the residual outputs in the unrotated basis, with minus without the "
        "residual activation (points): " + describe(comparisons, judgement.agreement),
        judgement.verdict,
        f'Welch 95 % intervals over members, {judgement.note}; "far" untested (the text gives no size); '
        f"{SUBSTITUTION}",
        ", ".join(f"{v} {units_text('member', len(f))}" for v, f in level.items()),
    )


def inside_increase(tables, settings) -> Result:
    """C15b, members as units: at the sites inside a residual block, the fall along the rotation is
    below 0 (an increase) for the ResNet without the residual activation (section 6) and for the one
    with it (appendix F.2)."""
    table = tables["dissection"]
    table = table[table["inside_residual"].astype(bool)]
    chosen = arms(settings, table["variant"].unique())
    table = table[table["variant"].isin(chosen["with"] + chosen["without"])]
    if why := _usable(table):
        return not_run(why.replace("dissected ResNet", "ResNet dissected inside a block"))
    falls = {variant: member_falls(rows) for variant, rows in table.groupby("variant", sort=False)}
    comparisons = [Comparison(f"{v} fall inside", Estimate.of(falls[v]), -1) for v in falls]
    judgement = judge(
        comparisons,
        missing="" if chosen["without"] else "not dissected: a ResNet without the residual activation",
    )
    return Result(
        "fall of the interpretable fraction inside the blocks along the rotation (points): "
        + describe(comparisons, judgement.agreement),
        judgement.verdict,
        f"95 % t-intervals over members, {judgement.note}; sites inside a block only; {SUBSTITUTION}",
        ", ".join(f"{v} {units_text('member', len(f))}" for v, f in falls.items()),
    )


CLAIMS = (
    Claim(
        "C6",
        f"{GODFREY}, section 6, Fig. 3 (Fig. 3's values are not in the text)",
        "As was shown in [Bau+17], interpretability decreases as we rotate away from the axis for the normal "
        "ResNet-50 in appendix F.3. On the other hand, with no activation function, neuron interpretability "
        "does not drop with rotation for the modified ResNet-50 and the ConvNeXt. [...] Interestingly, while "
        "the number of interpretable units remains constant for the residual output of the modified "
        "ResNet-50, for the ConvNeXt model it actually *increases*.",
        "At the residual outputs, the fall of the interpretable fraction along the rotation (least-squares "
        "line over alpha, from 0 to the largest) is above 0 for a ReLU ResNet with the residual activation; "
        f'within ±{NO_DROP_MARGIN * 100:g} points (ours) for a ResNet without it ("does not drop", '
        '"remains constant"); below 0 for a ConvNeXt ("increases"); members as units. Dissection is '
        f"{SUBSTITUTION}",
        "Fig. 3's values are not in the text; the paper's models: ImageNet ResNet-50, a ResNet-50 without "
        "the residual ReLU (76.1 % top-1, appendix F.3), a ConvNeXt; Broden, IoU > 0.04, top 0.5 % "
        "threshold (appendix F.1)",
        ("dissection",),
        "dissection_fraction.png",
        dissection_rotation,
        ("select_on",),
        ("zoo", "dissection"),
    ),
    Claim(
        "C15",
        f"{GODFREY}, section 6, Fig. 3 (Fig. 3's values are not in the text)",
        "We note that the models without residual activation functions also have far fewer concept covering "
        "units for a given basis.",
        "In the unrotated basis (alpha 0), the interpretable fraction at the residual outputs is lower for "
        "each model without the residual activation (a ResNet without it, a ConvNeXt) than for a ReLU "
        'ResNet with it (Welch over members); untested: "far" (no size in the text) and the rotated '
        f"bases. Dissection is {SUBSTITUTION}",
        "Fig. 3's values are not in the text",
        ("dissection",),
        "dissection_fraction.png",
        concept_units,
        ("select_on",),
        ("zoo", "dissection"),
    ),
    Claim(
        "C15b",
        f"{GODFREY}, section 6 and appendix F.2, Fig. 19 (Fig. 19's values are not in the text)",
        'Section 6: "We find similar results, where the number of interpretable units increase with '
        "rotation, for the convolutional layer inside the residual block for the modified ResNet-50 in fig. "
        '19." Appendix F.2: "Like the ConvNeXt model in fig. 3 we find that, surprisingly, the percentage '
        'of interpretable units actually tends to increase away from the activation basis."',
        "At the sites inside a residual block, the fall of the interpretable fraction along the rotation is "
        "below 0 (an increase) for a ResNet without the residual activation (section 6) and for a ReLU "
        'ResNet with it (appendix F.2: "the normal and modified ResNet-50"); members as units. Dissection '
        f"is {SUBSTITUTION}",
        "Fig. 19's values are not in the text",
        ("dissection",),
        "dissection_fraction.png",
        inside_increase,
        ("select_on",),
        ("zoo", "dissection"),
    ),
)

#: Per table, its column of evidence (a NaN there is a failed measurement, no evidence).
EVIDENCE = {"dissection": "fraction_interpretable"}

#: The run's settings its claims and modes read (``DissectionPlan.dissection_claims_settings``).
SETTINGS = ("residual_activation",)
