"""The rotation penalty's claim (C1)."""

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
    units_text,
)


def rotation_penalty(tables, settings) -> Result:
    """Per ReLU variant and site: penalty(orthogonal) - penalty(G_ReLU), trials as units (Welch),
    above 0 at every site."""
    table = tables["rotation"]
    relu = [v for v, activation in settings["rotation_activation"].items() if activation == "relu"]
    table = table[table["variant"].isin(relu)]
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
        return not_run("needs rotation trials of a ReLU variant with both groups, grelu and orthogonal")
    judgement = judge(comparisons)
    trials = table[table["group"].isin(["grelu", "orthogonal"])].groupby(["variant", "site", "group"]).size()
    return Result(
        "orthogonal - G_ReLU penalty (points): " + describe(comparisons, judgement.agreement),
        judgement.verdict,
        f"Welch 95 % intervals over trials per site, {judgement.note}; every site above 0 decides",
        f"{int(trials.min())}-{int(trials.max())} trials per site and group"
        if trials.min() != trials.max()
        else units_text("trial", int(trials.min())) + " per site and group",
    )


CLAIMS = (
    Claim(
        "C1",
        f"{GODFREY}, section 3.3, Fig. 4",
        "the specification's reading of Fig. 4: G_ReLU penalties are much smaller than orthogonal ones",
        "On a ReLU Myrtle, the rotation penalty of a random G_ReLU element is below that of a random "
        "orthogonal matrix at every layer",
        "orthogonal penalties of tens of points, G_ReLU near 0",
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
