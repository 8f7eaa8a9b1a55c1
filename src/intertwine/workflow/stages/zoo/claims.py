"""The zoo's accuracy claims: the paper's CIFAR-10 test accuracies of its zoos (C16, one row per
architecture) and of its LeakyReLU ResNet20s (C17, Table 3).

A zoo's accuracy is the paper's number only at the paper's budget: 50 epochs, full width, CIFAR-10
(appendix D.1). Below it (the CPU zoo's 4 epochs, a narrower variant, the synthetic shapes data)
the rows read inconclusive and say "not comparable" with why; nothing is decided there.

The statistic (ours, fixed before any run): members are the units (each an independently trained
network), and our mean test accuracy minus the paper's mean lies within +-``ACCURACY_MARGIN``
points (an equivalence: two one-sided comparisons, ``within``). The margin is ours: the paper
gives none; 2 points allows for our protocol's differences (a 5,000-image validation split held
out of the training set, a different data pipeline) and lets Table 3's two members per slope
decide at the paper's own spread.
"""

from __future__ import annotations

import itertools

import pandas as pd

from intertwine.workflow.claims import (
    GODFREY,
    PAPER_EPOCHS,
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
from intertwine.workflow.paper import (
    LEAKY_RESNET20_ACCURACY,
    ZOO_ACCURACY,
    reported_leaky,
    reported_zoo_accuracy,
)

#: Our equivalence margin (points of test accuracy) for the zoo's accuracies (the paper gives none).
ACCURACY_MARGIN = 2.0
#: The data set of the paper's zoos (appendix D.1).
PAPER_DATASET = "cifar10"
#: Table 3's slopes on the plateau (accuracy 89.2-89.4 %), pooled as "the small slopes" of C17.
PLATEAU = 0.1


def _members(tables) -> pd.DataFrame | None:
    """The zoo table's members with a test accuracy (in %), or None without a zoo table. A NaN
    accuracy is a failed measurement, no member."""
    if "zoo" not in tables:
        return None
    zoo = tables["zoo"]
    zoo = zoo[pd.to_numeric(zoo["test_acc"], errors="coerce").notna()]
    return zoo.assign(acc=100 * zoo["test_acc"].astype(float))


def not_comparable(variant: str, rows: pd.DataFrame, settings: dict) -> str:
    """Why ``variant``'s members are not at the paper's budget ("at 4 of 50 epochs", "on shapes,
    not CIFAR-10", "at width 0.5"), or "" when they are."""
    reasons = []
    epochs = int(rows["epochs"].min())
    if epochs < PAPER_EPOCHS:
        reasons.append(f"at {epochs} of {PAPER_EPOCHS} epochs")
    width = settings["variant_specs"].get(variant, {}).get("width_multiplier", 1.0)
    if width != 1.0:
        reasons.append(f"at width {width:g} (the paper: full width)")
    dataset = settings.get("scale", {}).get("zoo_dataset")
    if dataset != PAPER_DATASET:
        reasons.append(f"on {dataset or 'a data set the settings do not name'}, not CIFAR-10")
    return ", ".join(reasons)


def _is(arch: str, spec: dict) -> bool:
    """Whether a normalised spec is the paper's ``arch`` zoo at any width: ReLU, batch norm, not
    gated; the Myrtle without constant width; the ResNet20 with its residual activation."""
    return (
        spec["arch"] == arch
        and spec.get("activation", "relu") == "relu"
        and reported_zoo_accuracy({**spec, "width_multiplier": 1.0}) == ZOO_ACCURACY[arch]
    )


def _summary(rows: pd.DataFrame) -> str:
    """Mean ± sd (%) over the members, the paper's way of printing a zoo's accuracy."""
    sd = f" ± {rows['acc'].std(ddof=1):.1f}" if len(rows) > 1 else ""
    return f"{rows['acc'].mean():.1f}{sd} % (mean ± sd) over {units_text('member', len(rows))}"


def zoo_accuracy(arch: str):
    """C16's test for ``arch``: per variant of the paper's architecture at its budget, our mean
    test accuracy (members as units) minus the paper's within +-``ACCURACY_MARGIN`` points."""
    paper_mean, paper_sd = ZOO_ACCURACY[arch]

    def test(tables, settings) -> Result:
        members = _members(tables)
        if members is None:
            return not_run("the zoo's table is not in the run")
        specs = settings["variant_specs"]
        variants = [v for v in dict.fromkeys(members["variant"]) if v in specs and _is(arch, specs[v])]
        if not variants:
            return not_run(f"no zoo variant is the paper's {arch} (ReLU, batch norm, not gated)")
        comparisons, texts, below = [], [], []
        for variant in variants:
            rows = members[members["variant"] == variant]
            why = not_comparable(variant, rows, settings)
            if why:
                below.append(f"{variant} not comparable {why}: {_summary(rows)}")
                continue
            difference = Estimate.of(rows["acc"] - paper_mean)
            comparisons += within(f"{variant} ours - the paper's", difference, ACCURACY_MARGIN, scale=1)
            texts.append(f"{variant} {_summary(rows)}")
        counts = "; ".join(
            f"{v} {units_text('member', int((members['variant'] == v).sum()))}" for v in variants
        )
        paper = f"the paper {paper_mean} ± {paper_sd} %"
        if not comparisons:
            return Result(
                "; ".join(below) + f" ({paper})",
                "inconclusive",
                f"decided only at the paper's budget ({PAPER_EPOCHS} epochs, full width, CIFAR-10)",
                counts,
            )
        judgement = judge(comparisons)
        return Result(
            "; ".join(texts + below)
            + f" ({paper}); ours - the paper's (points): "
            + describe(comparisons, judgement.agreement, 1, ".2f"),
            judgement.verdict,
            f"members as units, 95 % t-interval of the mean difference within +-{ACCURACY_MARGIN:g} "
            f"points (ours), {judgement.note}",
            counts,
        )

    return test


def _leaky_members(members: pd.DataFrame, specs: dict) -> dict[float, list[str]]:
    """Table 3's slopes among the zoo's variants: {slope: its LeakyReLU ResNet20 variants}."""
    found: dict[float, list[str]] = {}
    for variant in dict.fromkeys(members["variant"]):
        spec = specs.get(variant, {})
        if spec.get("activation") != "leaky_relu":
            continue
        slope = spec.get("negative_slope")
        paper = reported_leaky(slope)
        if paper is not None and reported_zoo_accuracy({**spec, "width_multiplier": 1.0}) == paper:
            found.setdefault(float(slope), []).append(variant)
    return dict(sorted(found.items()))


def _falls(groups: dict[float, pd.DataFrame]) -> list[Comparison]:
    """Table 3's falls, Welch across slopes (members of different variants are independent): the
    small slopes (<= 0.1, pooled) above the next larger slope, and each larger slope above the
    next: 0.5 above 0.9, 0.9 above 1.0, where the run has them."""
    plateau = [rows for slope, rows in groups.items() if slope <= PLATEAU]
    ladder = [("<= 0.1", pd.concat(plateau))] if plateau else []
    ladder += [(f"{slope:g}", rows) for slope, rows in groups.items() if slope > PLATEAU]
    return [
        Comparison(
            f"slope {high} - slope {low}",
            Estimate.difference(high_rows["acc"], low_rows["acc"]),
            +1,
            group="falls",
        )
        for (high, high_rows), (low, low_rows) in itertools.pairwise(ladder)
    ]


def leaky_accuracy(tables, settings) -> Result:
    """C17: Table 3's pattern (accuracy falls from the small slopes to 0.5, 0.9 and 1.0; Welch
    across slopes, at any budget) and, at the paper's budget only, each slope's mean within
    +-``ACCURACY_MARGIN`` points of its Table 3 value (members as units)."""
    members = _members(tables)
    if members is None:
        return not_run("the zoo's table is not in the run")
    slopes = _leaky_members(members, settings["variant_specs"])
    if not slopes:
        return not_run("no zoo variant is a LeakyReLU ResNet20 at a slope of Table 3")
    groups = {slope: members[members["variant"].isin(vs)] for slope, vs in slopes.items()}
    comparisons = _falls(groups)
    below = []
    for slope, variants in slopes.items():
        for variant in variants:
            rows = members[members["variant"] == variant]
            why = not_comparable(variant, rows, settings)
            if why:
                below.append(f"{variant} {why}")
                continue
            difference = Estimate.of(rows["acc"] - LEAKY_RESNET20_ACCURACY[slope][0])
            comparisons += within(f"slope {slope:g} ours - Table 3", difference, ACCURACY_MARGIN, scale=1)
    if len(comparisons) == 0:
        return Result(
            "not comparable: " + "; ".join(below),
            "inconclusive",
            "one slope of Table 3 in the run: no fall to test, and its accuracy not comparable",
            units_text("slope", len(slopes)),
        )
    missing = f"Table 3's accuracies not comparable: {'; '.join(below)}" if below else ""
    judgement = judge(comparisons, missing=missing)
    means = ", ".join(f"{slope:g}: {groups[slope]['acc'].mean():.1f}" for slope in groups)
    not_compared = f"; not comparable: {'; '.join(below)}" if below else ""
    return Result(
        f"mean accuracy by slope (%) {means}; "
        + describe(comparisons, judgement.agreement, 1, ".2f")
        + not_compared,
        judgement.verdict,
        "Welch 95 % intervals across slopes for each fall (members as units; the slopes <= 0.1 "
        f"pooled), and at the paper's budget each slope within +-{ACCURACY_MARGIN:g} points (ours) of "
        f"Table 3; {judgement.note}",
        ", ".join(f"{slope:g}: {units_text('member', len(rows))}" for slope, rows in groups.items()),
    )


def _zoo_claim(arch: str, name: str, where: str, sentence: str) -> Claim:
    mean, sd = ZOO_ACCURACY[arch]
    return Claim(
        f"C16.{arch}",
        f"{GODFREY}, {where}",
        sentence,
        f"Our {name} zoo's mean CIFAR-10 test accuracy at the paper's budget ({PAPER_EPOCHS} epochs, "
        f"full width) is within {ACCURACY_MARGIN:g} points (ours) of the paper's {mean} %; members as "
        "units; not comparable below that budget",
        f"{mean} ± {sd} % (100 members, appendix D.1)",
        ("zoo",),
        "zoo_accuracy.png",
        zoo_accuracy(arch),
        ("select_on",),
        ("zoo",),
    )


CLAIMS = (
    _zoo_claim(
        "myrtle",
        "Myrtle CNN",
        "captions of Figs. 1 and 13",
        '"The accuracy of the models was 91.3 ± 0.2 %." (Fig. 13 caption; Fig. 1\'s says the same)',
    ),
    _zoo_claim(
        "resnet20",
        "ResNet20",
        "Fig. 6 caption",
        '"Accuracy of the models was 89.9 ± 0.2 %." (Fig. 6 caption)',
    ),
    _zoo_claim(
        "resnet18",
        "ResNet18",
        "Fig. 7 caption",
        '"Accuracy of the models was 92.9 ± 0.2 %." (Fig. 7 caption)',
    ),
    Claim(
        "C17",
        f"{GODFREY}, appendix D.3, Table 3",
        '"The accuracy for two models trained with different random seeds at different LeakyReLU is '
        'given in table 3." (appendix D.3)',
        "A LeakyReLU ResNet20's accuracy falls from the small slopes (<= 0.1, pooled) to 0.5, from 0.5 "
        "to 0.9 and from 0.9 to 1.0, as Table 3 shows (Welch across slopes), and at the paper's "
        f"budget each slope's mean is within {ACCURACY_MARGIN:g} points (ours) of Table 3's; "
        "untested: the order among the small slopes (Table 3: 89.2-89.4 %, within their ±)",
        "Table 3: "
        + ", ".join(f"{s:g}: {m} ± {d}" for s, (m, d) in LEAKY_RESNET20_ACCURACY.items())
        + " % (2 models per slope)",
        ("zoo",),
        "zoo_accuracy.png",
        leaky_accuracy,
        ("select_on",),
        ("zoo",),
    ),
)

#: The zoo's table is context for every other claim (never required, no column of evidence): these
#: claims leave out its NaN accuracies themselves.
EVIDENCE: dict[str, str | None] = {"zoo": None}

#: The run's settings the zoo's claims, and every claim on trained members, read (``ZooPlan.zoo_claims_settings``).
SETTINGS = ("select_on", "variant_specs", "batch_norm")

#: What the mode column says of the split the kept weights were selected on.
MODES = {
    "select_on": lambda s: (
        f"kept weights selected on {s['select_on']} ("
        + ("the released code" if s["select_on"] == "test" else "corrected; the released code: test")
        + ")"
    ),
}
