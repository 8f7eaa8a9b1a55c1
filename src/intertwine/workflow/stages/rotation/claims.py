"""The rotation penalty's claim (C1)."""

from __future__ import annotations

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
)


def fig4_variants(settings) -> list[str]:
    """The rotated variants of Fig. 4's kind: plain ReLU Myrtle CNNs (section 3.3; appendix D.1's
    footnote 7: without batch norm there, which the mode column reports on)."""
    specs = settings["variant_specs"]
    return [
        v
        for v in settings["rotation_variants"]
        if specs.get(v, {}).get("arch") == "myrtle"
        and settings["rotation_activation"].get(v) == "relu"
        and not specs[v].get("gated")
    ]


def rotation_penalty(tables, settings) -> Result:
    """Per ReLU Myrtle variant and site: penalty(orthogonal) - penalty(G_ReLU), trials as units
    (Welch), above 0 at every site ("significantly smaller": each interval at 95 % excludes 0)."""
    table = tables["rotation"]
    table = table[table["variant"].isin(fig4_variants(settings))]
    comparisons = []
    for (variant, site), group in table.groupby(["variant", "site"], sort=False):
        penalties = {g: rows["penalty"] for g, rows in group.groupby("group")}
        if "orthogonal" in penalties and "grelu" in penalties:
            comparisons.append(
                Comparison(
                    f"{variant} {site}",
                    Estimate.difference(penalties["orthogonal"], penalties["grelu"]),
                    +1,
                )
            )
    if not comparisons:
        return not_run(
            "needs rotation trials of a ReLU Myrtle (rotation.variants) with both groups, grelu and orthogonal"
        )
    judgement = judge(comparisons)
    trials = table[table["group"].isin(["grelu", "orthogonal"])].groupby(["variant", "site", "group"]).size()
    with_bn = [v for v in table["variant"].unique() if settings["variant_specs"][v].get("batch_norm", True)]
    return Result(
        "orthogonal - G_ReLU penalty (points): " + describe(comparisons, judgement.agreement),
        judgement.verdict,
        f"Welch 95 % intervals over trials per site, {judgement.note}; every site above 0 decides "
        '("significantly" read as each interval excluding 0, no margin of size)'
        + (f"; {', '.join(with_bn)} with batch norm, unlike Fig. 4's Myrtle (footnote 7)" if with_bn else ""),
        f"{int(trials.min())}-{int(trials.max())} trials per site and group"
        if trials.min() != trials.max()
        else units_text("trial", int(trials.min())) + " per site and group",
    )


CLAIMS = (
    Claim(
        "C1",
        f"{GODFREY}, section 3.3, Fig. 4",
        "We see that this is indeed the case in fig. 4: transforming by $A \\in G_{\\text{ReLU}}$ rather a "
        "random orthogonal matrix results in significantly smaller rotation penalties.",
        "On a ReLU Myrtle CNN, the rotation penalty (accuracy before minus after transforming the "
        "pre-activation of one layer by A and fine-tuning the later layers; ours on the test split, the "
        'paper\'s "validation accuracy") of a random G_ReLU element is below that of a random orthogonal '
        "matrix at every layer rotated, each by a Welch 95 % interval over trials that excludes 0 "
        '("significantly"; no size is claimed)',
        "Fig. 4's values are not in the text; its setting: a Myrtle CNN without batch norm (appendix D.1, "
        "footnote 7) trained 50 epochs, later layers fine-tuned another 50 (section 3.3), 10 trials, "
        "baseline accuracy ≈ 87 % (Fig. 4's caption)",
        ("rotation",),
        "rotation_penalty.png",
        rotation_penalty,
        ("rotation_variants", "select_on"),
        ("zoo", "rotation"),
    ),
)

#: Per table, its column of evidence (a NaN there is a failed measurement, no evidence).
EVIDENCE = {"rotation": "penalty"}

#: What the mode column says of the settings this stage's claims depend on.
MODES = {
    "rotation_variants": lambda s: (
        "rotation on "
        + (", ".join(s["rotation_variants"]) or "no variant")
        + (
            " (a batch-norm-free Myrtle, as the paper)"
            if any(s["batch_norm"].get(v) is False for v in s["rotation_variants"])
            else " (with batch norm; the paper used a batch-norm-free Myrtle)"
        )
    ),
}

#: The run's settings its claims and modes read (``RotationPlan.rotation_claims_settings``).
SETTINGS = ("rotation_variants", "rotation_activation")
