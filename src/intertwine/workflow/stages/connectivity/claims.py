"""The connectivity stage's claims (L1, L2, L3)."""

from __future__ import annotations

import pandas as pd

from intertwine.workflow.claims import (
    OURS,
    Claim,
    Comparison,
    Estimate,
    Result,
    describe,
    judge,
    not_run,
    pair_members,
    units_text,
)

REBASIN = 'Ainsworth, Hayase & Srinivasa 2023 ("Git Re-Basin", ICLR)'


def _pair_barriers(tables, settings) -> pd.DataFrame:
    """One row per (variant, pair) of the test-split curves corrected by ``reset`` (else the first
    correction of the table): each method's barrier (of the run's kind, ``connectivity.barrier``)
    as a column, with the pair's members."""
    table = tables["connectivity"]
    table = table[table["split"] == "test"]
    # Ainsworth et al. reset the normalisation statistics; other corrections are curves beside it.
    corrections = list(dict.fromkeys(table["correction"]))
    table = table[table["correction"] == ("reset" if "reset" in corrections else corrections[0])]
    column = {"endpoints_mean": "barrier", "endpoints_line": "barrier_line"}[settings["connectivity_barrier"]]
    keys = ["variant", "width_multiplier", "pair", "seed_a", "seed_b"]
    return table.groupby(keys + ["method"], sort=False)[column].first().unstack("method").reset_index()


def _barrier_differences(tables, settings, lower: str, higher: str, label: str) -> tuple[list, list]:
    """Per variant, the paired difference ``higher`` - ``lower`` of the test-loss barrier over its
    pairs (claimed above 0), and the pairs' count."""
    barriers = _pair_barriers(tables, settings)
    comparisons, units = [], []
    for variant, rows in barriers.groupby("variant", sort=False):
        if not {lower, higher} <= set(rows.columns) or rows[[lower, higher]].isna().all().any():
            continue
        rows = rows.dropna(subset=[lower, higher])
        comparisons.append(
            Comparison(f"{variant} {label}", Estimate.of(rows[higher] - rows[lower], pair_members(rows)), +1)
        )
        units.append(f"{variant} {units_text('pair', len(rows))}")
    return comparisons, units


def barrier_below(lower: str, higher: str, label: str, needs: str):
    """The claim that the test-loss barrier after method ``lower`` is below that after ``higher``:
    per variant, pairs as units, ``higher`` - ``lower`` above 0 (paired within the pair); every
    variant must show it. ``needs`` says what a run without both methods lacks."""

    def test(tables, settings) -> Result:
        comparisons, units = _barrier_differences(tables, settings, lower, higher, label)
        if not comparisons:
            return not_run(needs)
        judgement = judge(comparisons)
        return Result(
            describe(comparisons, judgement.agreement, 1, ".3f"),
            judgement.verdict,
            f"paired 95 % t-intervals over pairs, one per variant, {judgement.note}",
            ", ".join(units),
        )

    return test


def barrier_shrinks_with_width(tables, settings) -> Result:
    """Per architecture with several widths among the connectivity variants: the test-loss barrier
    after weight matching over permutations at the narrowest width minus at the widest, above 0
    (Welch: the widths' pairs are different members)."""
    barriers = _pair_barriers(tables, settings)
    if "weight_permutation" not in barriers:
        return not_run("needs connectivity.methods weight_permutation")
    families = settings["connectivity_families"]
    barriers["family"] = barriers["variant"].map(lambda v: families.get(v, v))
    comparisons, units = [], []
    for family, rows in barriers.groupby("family", sort=False):
        widths = sorted(rows["width_multiplier"].unique())
        if len(widths) < 2:
            continue
        narrow = rows[rows["width_multiplier"] == widths[0]]["weight_permutation"]
        wide = rows[rows["width_multiplier"] == widths[-1]]["weight_permutation"]
        comparisons.append(
            Comparison(
                f"{family} x{widths[0]:g} - x{widths[-1]:g} barrier", Estimate.difference(narrow, wide), +1
            )
        )
        units.append(f"{family}: {len(narrow)} and {len(wide)} pairs at x{widths[0]:g} and x{widths[-1]:g}")
    if not comparisons:
        return not_run("needs connectivity variants of one architecture at two or more widths")
    judgement = judge(comparisons)
    return Result(
        describe(comparisons, judgement.agreement, 1, ".3f"),
        judgement.verdict,
        f"Welch 95 % t-intervals, narrowest against widest width, one per architecture, {judgement.note}",
        "; ".join(units),
    )


aligned_below_unaligned = barrier_below(
    "weight_permutation",
    "unaligned",
    "unaligned - weight-matched barrier",
    "needs connectivity.methods unaligned and weight_permutation",
)
# Ours, whichever way it comes out.
grelu_alignment_below_permutations = barrier_below(
    "weight_grelu",
    "weight_permutation",
    "permutation - G_ReLU barrier",
    "needs connectivity.methods weight_permutation and weight_grelu",
)


CLAIMS = (
    Claim(
        "L1",
        f"{REBASIN}, abstract",
        '"This transformation produces a functionally equivalent set of weights that lie in an '
        'approximately convex basin near the reference model" (abstract)',
        "The test-loss barrier of the line between two members falls when the second is first aligned to "
        "the first by weight matching over permutations (paired within each pair, every variant)",
        "no numbers in our copy of the paper (its figures; its code interpolates at 25 points)",
        ("connectivity",),
        "connectivity_curves.png",
        aligned_below_unaligned,
        (),
        ("zoo", "connectivity"),
    ),
    Claim(
        "L2",
        f"{REBASIN}, ResNet20 width ablation (their code: widths 1x-32x, CIFAR-10)",
        "our reading of their width ablation (the abstract names the phenomenon, not its direction or size): "
        "the loss barrier after weight matching shrinks as the width grows; "
        '"we identify intriguing phenomena relating model width and training time to mode connectivity" '
        "(abstract)",
        "The test-loss barrier after weight matching over permutations is lower at the widest width of an "
        "architecture than at its narrowest",
        "no numbers in our copy of the paper (its width-ablation figure)",
        ("connectivity",),
        "connectivity_barriers.png",
        barrier_shrinks_with_width,
        (),
        ("zoo", "connectivity"),
    ),
    Claim(
        "L3",
        OURS,
        "none: Ainsworth et al. align by permutations alone; the G_ReLU alignment (permutations and "
        "positive scales, the intertwiner group of ReLU) is ours",
        "Weight matching over G_ReLU reaches a lower test-loss barrier than over permutations alone (paired "
        "within each pair, every variant); reported whichever way it comes out",
        "no claim of a paper",
        ("connectivity",),
        "connectivity_barriers.png",
        grelu_alignment_below_permutations,
        (),
        ("zoo", "connectivity"),
        kind="ours",
    ),
)

#: Per table, its column of evidence (a NaN there is a failed measurement, no evidence).
EVIDENCE = {"connectivity": "loss"}

#: The run's settings its claims and modes read (``ConnectivityPlan.connectivity_claims_settings``).
SETTINGS = ("connectivity_barrier", "connectivity_families")
