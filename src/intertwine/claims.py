"""The papers' claims as data, and the rule that turns this run's tables into a verdict on each.

Each ``Claim`` quotes the sentence it tests (or, where our copy of the paper has only a figure, the
specification's reading of it), names the unit of evidence (a pair of zoo members, a member, a
trial), the stage whose table tests it and the figure of the report that shows it; ``test`` takes
the run's tables (pandas DataFrames by name, absent when the stage is not configured) and the
run's settings and returns what we found, the verdict and the evidence.

The decision rule (``judge``), the same throughout:

1. Rows are reduced to independent units before any interval: a pair's sites become one number
   per pair, a member's sites and rotation draws one number per member. Two conditions measured on
   the same unit are compared within it (paired); conditions on different units (trials, or two
   zoo variants) by Welch's interval.
2. Each comparison is a mean over units with a Student-t 95 % interval and a two-sided p-value of
   "no difference from the claimed threshold". Where pairs share zoo members
   (``pairs_share_members``), the variance counts every two pairs with a member in common as
   correlated (a dyadic cluster-robust variance), so shared members widen the interval.
3. ``reproduced``: every comparison the claim requires lies on the claimed side (its 95 % interval
   excludes the threshold; needing all of them is an intersection-union test, which keeps the
   chance of a false "reproduced" at 5 % without a correction). ``not reproduced``: any
   comparison lies on the other side after Holm's correction over all of the claim's comparisons
   (a union of chances to refute, so their number counts). ``inconclusive`` otherwise (one unit
   gives no interval). A claim whose table is absent reads ``not run``. A NaN in a table's column
   of evidence (``EVIDENCE``) is a failed measurement, no evidence: its rows are left out before
   units are counted (the evidence says how many), and a claim left with none reads
   ``inconclusive`` ("no evidence"), never a verdict. Exact claims (identities)
   compare a maximum error with a tolerance instead.

No file I/O here: the ``claims`` job reads the tables and writes the scorecard.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from intertwine.deviations import paper_value
from intertwine.paper import PAPER_EPOCHS, PAPER_MEMBERS, PAPER_STITCH_EPOCHS  # noqa: F401  (importable from here, as before)
from intertwine.tables import at_stage_temperature

VERDICTS = ("reproduced", "not reproduced", "inconclusive", "not run")
LEVEL = 0.05  # family-wise error of a claim (Holm)
GODFREY = "Godfrey et al. 2022"
GATED = "Lakshminarayanan & Singh 2020"
PULLBACK = "Satkiewicz 2025 (excitation pullbacks)"
DEQ = "Feng & Kolter 2020 (DEQ-NTK)"
OURS = "ours"


# --- statistics ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """A mean over ``n`` independent units with its standard error and degrees of freedom (NaN
    below 2 units): the 95 % t-interval and the two-sided p-value of a zero mean follow."""

    mean: float
    se: float
    df: float
    n: int

    @classmethod
    def of(cls, values, members=None) -> Estimate:
        """The mean of ``values``, one per unit. ``members``: the zoo members each unit rests on
        (one tuple per value); units that share a member are counted as correlated (the dyadic
        cluster-robust variance, never below the independent one), with degrees of freedom from
        the number of distinct members. Without ``members`` the units are independent."""
        values = np.asarray(values, dtype=float)
        keep = np.isfinite(values)
        values = values[keep]
        n = len(values)
        if n == 0:
            return cls(math.nan, math.nan, math.nan, 0)
        if n == 1:
            return cls(float(values[0]), math.nan, math.nan, 1)
        residuals = values - values.mean()
        variance = float(residuals @ residuals) / (n - 1) / n
        df = n - 1
        if members is not None:
            sets = [frozenset(m) for m, k in zip(members, keep) if k]
            shared = np.array([[bool(a & b) for b in sets] for a in sets])
            if shared.sum() > n:  # some units share a member
                dyadic = float(residuals @ shared @ residuals) / (n - 1) / n
                variance = max(variance, dyadic)
                df = min(n - 1, len(frozenset().union(*sets)) - 1)
        return cls(float(values.mean()), math.sqrt(variance), float(max(df, 1)), n)

    @classmethod
    def difference(cls, a, b, scale: float = 1.0) -> Estimate:
        """mean(a) - scale * mean(b) of independent samples (units of two conditions that share
        none), with Welch's standard error and degrees of freedom."""
        a, b = (np.asarray(v, dtype=float) for v in (a, b))
        a, b = a[np.isfinite(a)], b[np.isfinite(b)]
        mean = (a.mean() if len(a) else math.nan) - scale * (b.mean() if len(b) else math.nan)
        if len(a) < 2 or len(b) < 2:
            return cls(float(mean), math.nan, math.nan, min(len(a), len(b)))
        va, vb = a.var(ddof=1) / len(a), scale**2 * b.var(ddof=1) / len(b)
        se = math.sqrt(va + vb)
        df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if se > 0 else len(a) + len(b) - 2
        return cls(float(mean), se, float(df), len(a) + len(b))

    def shift(self, threshold: float) -> Estimate:
        """The same estimate of mean - threshold."""
        return Estimate(self.mean - threshold, self.se, self.df, self.n)

    @property
    def half_width(self) -> float:
        return self.se * stats.t.ppf(0.975, self.df) if self.has_interval else math.nan

    @property
    def has_interval(self) -> bool:
        return self.n >= 2 and math.isfinite(self.se)

    @property
    def p(self) -> float:
        """Two-sided p-value of a zero mean (1 without an interval)."""
        if not self.has_interval:
            return 1.0
        if self.se == 0:
            return 0.0 if self.mean != 0 else 1.0
        return float(2 * stats.t.sf(abs(self.mean) / self.se, self.df))

    def side(self, level: float = LEVEL) -> int:
        """+1 when the 1 - level interval lies above 0, -1 below, 0 when it covers 0 or there is none."""
        return int(np.sign(self.mean)) if self.p < level else 0

    def text(self, scale: float = 1.0, fmt: str = ".3f") -> str:
        interval = f" ± {self.half_width * scale:{fmt}}" if self.has_interval else " (no interval)"
        return f"{self.mean * scale:+{fmt}}{interval}"


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (the same order as given)."""
    m = len(p_values)
    order = np.argsort(p_values)
    adjusted, running = [1.0] * m, 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


@dataclass(frozen=True)
class Comparison:
    """One interval a claim rests on: ``estimate`` is claimed to lie on side ``claimed`` (+1 above
    0, -1 below). ``required``: the claim needs it decided on that side to read reproduced;
    otherwise it can only refute (decided on the other side)."""

    label: str
    estimate: Estimate
    claimed: int
    required: bool = True
    group: str = ""  # comparisons of one group may have ``exceptions`` undecided or against
    threshold: float = 0.0  # ``estimate`` is the measured value minus this (shown unshifted)


def within(label: str, estimate: Estimate, margin: float, scale: float = 100) -> list[Comparison]:
    """The two one-sided comparisons of an equivalence claim ("within +-margin"): the estimate
    lies below +margin and above -margin (both needed; either decided against refutes)."""
    bound = f"{margin * scale:g}"
    return [
        Comparison(f"{label} below +{bound}", estimate.shift(margin), -1, threshold=margin),
        Comparison(f"{label} above -{bound}", estimate.shift(-margin), +1, threshold=-margin),
    ]


@dataclass(frozen=True)
class Judgement:
    verdict: str
    agreement: list[int]  # per comparison: +1 decided on the claimed side, -1 against, 0 undecided
    note: str


def judge(
    comparisons: list[Comparison], exceptions: dict[str, int] | None = None, missing: str = ""
) -> Judgement:
    """The decision rule (module docstring). A claim needs each of its required comparisons (an
    intersection-union test: each at level 0.05 keeps the chance of a false "reproduced" at 0.05,
    no correction needed); it is refuted by any comparison decided against it after Holm's
    correction over all of its comparisons (a union: there the number of intervals counts).
    ``exceptions``: per group, how many of its comparisons may fail ("at all but one layer": 1);
    the group is then shown when all but that many are, each at level 0.05 / (exceptions + 1)
    (Bonferroni over the comparisons that may fail), and refuted when more are against.
    ``missing``: why a part the claim needs was not measured; the claim can then be refuted but
    not reproduced."""
    exceptions = exceptions or {}
    adjusted = holm([c.estimate.p for c in comparisons])
    agreement = []
    for c, p_holm in zip(comparisons, adjusted):
        shown_alone = c.estimate.side(LEVEL / (exceptions.get(c.group, 0) + 1)) == c.claimed
        against = c.claimed * np.sign(c.estimate.mean) < 0 and p_holm < LEVEL
        agreement.append(1 if shown_alone else -1 if against else 0)
    shown, refuted = True, False
    for group in dict.fromkeys(c.group for c in comparisons):
        members = [(c, a) for c, a in zip(comparisons, agreement) if c.group == group]
        allowed = exceptions.get(group, 0)
        refuted |= sum(a < 0 for _, a in members) > allowed
        shown &= sum(a <= 0 for c, a in members if c.required) <= allowed
    shown &= bool(comparisons) and not missing
    verdict = "not reproduced" if refuted else "reproduced" if shown else "inconclusive"
    note = (
        f"each of {len(comparisons)} intervals at 95 % to show, Holm over them to refute"
        if len(comparisons) > 1
        else "one interval"
    ) + (f"; {missing}" if missing else "")
    return Judgement(verdict, agreement, note)


def describe(
    comparisons: list[Comparison], agreement: list[int], scale: float = 100, fmt: str = ".1f"
) -> str:
    """Each comparison's measured value and interval (times ``scale``; before any shift by its
    threshold, which its label names) and whether it was shown."""
    marks = {1: "shown", -1: "against", 0: "undecided"}
    return "; ".join(
        f"{c.label}: {c.estimate.shift(-c.threshold).text(scale, fmt)} [{marks[a]}]"
        for c, a in zip(comparisons, agreement)
    )


# --- claims ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    ours: str
    verdict: str
    evidence: str
    units: str = ""  # how many independent units, of what


def _not_run(why: str) -> Result:
    return Result("", "not run", why)


@dataclass(frozen=True)
class Claim:
    claim: str  # short id: C1, T1, G1, ...
    source: str  # paper and where in it
    sentence: str  # the paper's sentence it tests, quoted, or the specification's reading
    statement: str  # what the verdict tests, in our words
    paper: str  # the paper's numbers
    tables: tuple[str, ...]  # what it needs (names of the claims job's --table inputs)
    figure: str  # the report's figure (file name) that shows it
    test: Callable[[dict[str, pd.DataFrame], dict], Result]
    settings: tuple[str, ...] = ()  # the run's settings it depends on (paper mode vs corrected)
    scale: tuple[str, ...] = ()  # the stages whose budget the scale column reports
    kind: str = "paper"  # "paper": a claim of the papers; "ours": a property of our construction


def _members(frame: pd.DataFrame) -> list[tuple] | None:
    """The zoo members each row (a pair) rests on, when the table names them."""
    if not {"seed_a", "seed_b"} <= set(frame.columns):
        return None
    return [((v, a), (v, b)) for v, a, b in zip(frame["variant"], frame["seed_a"], frame["seed_b"])]


def _pair_keys(frame: pd.DataFrame) -> list[str]:
    return ["variant", "pair"] + [c for c in ("seed_a", "seed_b") if c in frame.columns]


def _units(label: str, n: int) -> str:
    return f"{n} {label}{'' if n == 1 else 's'}"


# --- Godfrey et al. ----------------------------------------------------------------------------


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
        return _not_run("needs rotation trials of a ReLU variant with both groups, grelu and orthogonal")
    judgement = judge(comparisons)
    trials = table[table["group"].isin(["grelu", "orthogonal"])].groupby(["variant", "site", "group"]).size()
    return Result(
        "orthogonal - G_ReLU penalty (points): " + describe(comparisons, judgement.agreement),
        judgement.verdict,
        f"Welch 95 % intervals over trials per site, {judgement.note}; every site above 0 decides",
        f"{int(trials.min())}-{int(trials.max())} trials per site and group"
        if trials.min() != trials.max()
        else _units("trial", int(trials.min())) + " per site and group",
    )


def stitching_myrtle(tables, settings) -> Result:
    """Myrtle: per site, full below G_ReLU, G_ReLU below 10 points (at all but one site) and
    G_ReLU below rank 1; pairs as units, each comparison paired within the pair."""
    table = tables["stitching"]
    myrtle = table[table["variant"].isin(settings["myrtle_variants"])]
    if myrtle.empty or not {"full", "grelu"} <= set(myrtle["method"]):
        return _not_run("needs Myrtle pairs stitched with full and grelu")
    wide = myrtle.pivot_table(
        index=_pair_keys(myrtle) + ["site"], columns="method", values="penalty"
    ).reset_index()
    comparisons = []
    for site, rows in wide.groupby("site", sort=False):
        members = _members(rows)
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
                    f"{site} rank 1 - G_ReLU", Estimate.of(both["rank1"] - both["grelu"], _members(both)), +1
                )
            )
    judgement = judge(comparisons, {"below ten": 1}, "" if "rank1" in wide else "rank 1 was not run")
    return Result(
        "penalty differences (points): " + describe(comparisons, judgement.agreement),
        judgement.verdict,
        f"paired 95 % t-intervals over pairs per site, {judgement.note}; full below G_ReLU and G_ReLU "
        "below rank 1 at every site, G_ReLU below 10 points at all but one",
        _units("pair", wide.groupby(_pair_keys(wide)).ngroups),
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
            index=_pair_keys(rows), columns="inside_residual", values="penalty"
        ).reset_index()
        by_pair = by_pair.dropna(subset=[True, False])
        comparisons.append(
            Comparison(
                f"{variant} {method}", Estimate.of(by_pair[True] - by_pair[False], _members(by_pair)), +1
            )
        )
        pairs = max(pairs, len(by_pair))
    if not comparisons:
        return _not_run("needs a ReLU ResNet stitched at sites inside and outside residual blocks")
    judgement = judge(comparisons)
    return Result(
        "inside - outside residual blocks (points): " + describe(comparisons, judgement.agreement),
        judgement.verdict,
        f"paired 95 % t-intervals over pairs (each pair's mean inside minus its mean outside), {judgement.note}",
        _units("pair", pairs) + " per variant",
    )


def _procrustes_units(tables, settings) -> pd.DataFrame | None:
    table = tables["similarity"]
    same = table[
        (table["site_a"] == table["site_b"]) & table["variant"].isin(settings["relu_similarity_variants"])
    ]
    wide = same.pivot_table(index=_pair_keys(same) + ["site_a"], columns="measure", values="value")
    if not {"grelu_procrustes", "orthogonal_procrustes"} <= set(wide.columns):
        return None
    return wide.dropna(subset=["grelu_procrustes", "orthogonal_procrustes"]).reset_index()


def procrustes_order(tables, settings) -> Result:
    """Pooled over the ReLU variants' pairs: each pair's mean over sites of orthogonal - G_ReLU
    Procrustes above 0 ("less similarity"), and each pair's correlation over sites of the two
    measures above 0 ("otherwise patterns largely follow"), where a variant has 3 or more sites."""
    wide = _procrustes_units(tables, settings)
    if wide is None or wide.empty:
        return _not_run("needs grelu_procrustes and orthogonal_procrustes of a ReLU variant")
    keys = _pair_keys(wide)
    lower = (
        wide.assign(d=wide["orthogonal_procrustes"] - wide["grelu_procrustes"])
        .groupby(keys)["d"]
        .mean()
        .reset_index()
    )
    comparisons = [Comparison("orthogonal - G_ReLU", Estimate.of(lower["d"], _members(lower)), +1)]

    def correlation(rows):
        if len(rows) < 3 or rows["grelu_procrustes"].std() == 0 or rows["orthogonal_procrustes"].std() == 0:
            return math.nan
        return float(np.corrcoef(rows["grelu_procrustes"], rows["orthogonal_procrustes"])[0, 1])

    pattern = wide.groupby(keys).apply(correlation, include_groups=False).rename("r").reset_index().dropna()
    if len(pattern):
        comparisons.append(
            Comparison("depth-pattern correlation", Estimate.of(pattern["r"], _members(pattern)), +1)
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
        _units("pair", len(lower)),
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
        return _not_run("needs grelu_cka and linear_cka (similarity.cka_measures) of a ReLU variant")
    keys = _pair_keys(diagonal)

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
    members = _members(decays)
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
        _units("pair", len(decays)),
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
        return _not_run("needs a dissected ResNet (with or without residual activation)")
    if not (table["alpha"] == 0).any() or table["alpha"].nunique() < 2:
        return _not_run("needs the unrotated basis and a rotated one (dissection.alphas with 0 and more)")
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
        ", ".join(f"{v} {_units('member', len(f))}" for v, f in falls.items()),
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
        return _not_run("needs G_ReLU stitching of at least two slopes below 1")
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
        ", ".join(f"slope {slopes[v]:g} {_units('pair', n)}" for v, n in pairs.items()),
    )


def exact_symmetry(tables, settings) -> Result:
    """G_ReLU elements leave the function unchanged to rounding; orthogonal ones do not."""
    table = tables["symmetry"]
    grelu = table[table["group"] == "grelu"]
    orthogonal = table[table["group"] == "orthogonal"]
    if grelu.empty:
        return _not_run("needs the symmetry check with group grelu")
    tolerance = 1e-4 if (grelu["dtype"] == "float32").any() else 1e-9
    worst = grelu["relative_change"].max()
    ours = f"G_ReLU largest relative change {worst:.1e}"
    verdict = "reproduced" if worst <= tolerance else "not reproduced"
    if len(orthogonal):
        ours += f"; orthogonal smallest {orthogonal['relative_change'].min():.1e} (not a symmetry)"
    return Result(
        ours,
        verdict,
        f"largest error against tolerance {tolerance:g} ({grelu['dtype'].iloc[0]}); an identity needs no interval",
        _units("check", len(grelu)),
    )


# --- the other papers --------------------------------------------------------------------------


def pullback_invariances(tables, settings) -> Result:
    """Permutations leave every pullback unchanged; G_ReLU scalings leave the gradient and the
    per-neuron-temperature pullback unchanged but not the global-temperature one."""
    table = tables["pullback_symmetry"]
    table = at_stage_temperature(table)
    exact = table[(table["group"] == "permutation") | table["mode"].isin(["gradient", "per_neuron"])]
    global_t = table[(table["group"] == "grelu") & (table["mode"] == "global") & (table["scale_spread"] >= 1)]
    worst = (1 - exact["cos_min"]).max()
    ours = f"1 - cos up to {worst:.1e} where invariant"
    if len(global_t):
        ours += f"; global T at spread >= 1: min cosine {global_t['cos_min'].min():.3f}"
    held = worst <= 1e-6 and (global_t.empty or global_t["cos_min"].min() < 0.999)
    return Result(
        ours,
        "reproduced" if held else "not reproduced",
        "largest error against 1e-6 (an identity needs no interval)",
        _units("check", len(table)),
    )


#: Our reading of "largely" in the path stability hypothesis: at the middle of training at least
#: this fraction of a member's gates (averaged over its ReLU call sites) already as at the end.
SETTLED = 0.9


def path_stability(tables, settings) -> Result:
    """Hypothesis 1: per member (independent units: different seeds), the agreement of its gate
    pattern at the middle of training with the final one, mean over ReLU call sites
    (``gates.settling_verdict_values``), above ``SETTLED``."""
    from intertwine.gates import settling_verdict_values

    values = settling_verdict_values(tables["pullback_settling"])
    if values.empty:
        return _not_run("no member recorded gate patterns")
    estimate = Estimate.of(values["agreement"]).shift(SETTLED)
    comparisons = [
        Comparison(f"agreement at mid-training above {SETTLED:g} (points)", estimate, +1, threshold=SETTLED)
    ]
    judgement = judge(comparisons)
    ours = (
        f"agreement with the final pattern at epoch {'/'.join(map(str, sorted(set(values['epoch']))))}: "
        f"{values['agreement'].mean():.3f} (chance {values['chance'].mean():.3f}, at initialisation "
        f"{values['initial'].mean():.3f}), over {len(values)} members of {', '.join(dict.fromkeys(values['variant']))}"
        f" trained {'/'.join(map(str, sorted(set(tables['pullback_settling']['final_epoch']))))} epochs"
    )
    return Result(
        ours,
        judgement.verdict,
        f"{describe(comparisons, judgement.agreement)} ({judgement.note})",
        _units("member", len(values)),
    )


#: Our equivalence margin for D1 (the paper reports single regressions, no spread).
DEQ_MARGIN = 0.03


def deq_accuracy(tables, settings) -> Result:
    """Per setting, our test accuracy minus the paper's, its binomial 95 % interval (test images
    as units) within +-3 points (our margin)."""
    table = tables["deqntk"]
    rows = table[(table["study"] == "accuracy") & table["paper_acc"].notna()]
    if rows.empty:
        return _not_run(
            "no setting of this run has the paper's accuracy (the paper's are CIFAR-10 at 50,000 / 10,000 images)"
        )
    comparisons = []
    for r in rows.itertuples():
        se = math.sqrt(max(r.test_acc * (1 - r.test_acc), 1e-12) / r.n_test)
        d = Estimate(r.test_acc - r.paper_acc, se, math.inf, int(r.n_test))
        data = f"{r.dataset} " if "dataset" in rows else ""
        label = f"{data}({r.sigma_w2:g},{r.sigma_u2:g},{r.sigma_b2:g}) {r.test_acc * 100:.1f} vs {r.paper_acc * 100:.2f}"
        comparisons += within(label, d, DEQ_MARGIN)
    judgement = judge(comparisons)
    return Result(
        "ours - the paper's (points): " + describe(comparisons[::2], judgement.agreement[::2]),
        judgement.verdict,
        f"binomial 95 % interval per setting within +-{DEQ_MARGIN * 100:g} points (our margin), {judgement.note}",
        f"{int(rows['n_test'].min())} test images per setting, {len(rows)} settings",
    )


# --- Ainsworth et al. (linear mode connectivity) ---------------------------------------------------

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
            Comparison(f"{variant} {label}", Estimate.of(rows[higher] - rows[lower], _members(rows)), +1)
        )
        units.append(f"{variant} {_units('pair', len(rows))}")
    return comparisons, units


def barrier_below(lower: str, higher: str, label: str, needs: str):
    """The claim that the test-loss barrier after method ``lower`` is below that after ``higher``:
    per variant, pairs as units, ``higher`` - ``lower`` above 0 (paired within the pair); every
    variant must show it. ``needs`` says what a run without both methods lacks."""

    def test(tables, settings) -> Result:
        comparisons, units = _barrier_differences(tables, settings, lower, higher, label)
        if not comparisons:
            return _not_run(needs)
        judgement = judge(comparisons)
        return Result(
            describe(comparisons, judgement.agreement, 1, ".3f"),
            judgement.verdict,
            f"paired 95 % t-intervals over pairs, one per variant, {judgement.note}",
            ", ".join(units),
        )

    return test


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


def barrier_shrinks_with_width(tables, settings) -> Result:
    """Per architecture with several widths among the connectivity variants: the test-loss barrier
    after weight matching over permutations at the narrowest width minus at the widest, above 0
    (Welch: the widths' pairs are different members)."""
    barriers = _pair_barriers(tables, settings)
    if "weight_permutation" not in barriers:
        return _not_run("needs connectivity.methods weight_permutation")
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
        return _not_run("needs connectivity variants of one architecture at two or more widths")
    judgement = judge(comparisons)
    return Result(
        describe(comparisons, judgement.agreement, 1, ".3f"),
        judgement.verdict,
        f"Welch 95 % t-intervals, narrowest against widest width, one per architecture, {judgement.note}",
        "; ".join(units),
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
        "the issue's reading of their width ablation: the loss barrier after weight matching shrinks as the width grows; "
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
        "T1",
        f"{GODFREY}, Prop. 3.4, Thm. 4.2",
        "Prop. 3.4: the weight-space action of the intertwiner group leaves the network function unchanged",
        "G_ReLU elements act on the weights without changing the function (exact)",
        "exact",
        ("symmetry",),
        "symmetry_summary.csv",
        exact_symmetry,
    ),
    Claim(
        "D1",
        DEQ,
        "the paper's accuracies of ridge-free kernel regression with the fully connected DEQ-NTK on the "
        "whole training and test sets (CIFAR-10 and MNIST)",
        "Our DEQ-NTK regression reaches the paper's accuracy on the run's data set at each variance setting "
        "the paper reports for it (within 3 points, our margin)",
        "CIFAR-10: 59.08 / 59.77 / 59.43 % at (.25,.25,.5) / (.6,.4,0) / (.8,.2,0); MNIST: 98.6 % at "
        "(.25,.25,.5)",
        ("deqntk",),
        "deqntk_accuracy.png",
        deq_accuracy,
    ),
    Claim(
        "H1",
        f"{PULLBACK}, Hypothesis 1 (path stability)",
        '"we formulate the path stability hypothesis, claiming that the binary activation patterns largely '
        'stabilize during training and get encoded in the pre-activation distribution of the final model" '
        "(abstract, arXiv 2507.22832)",
        "Zoo members' binary activation patterns on a fixed probe set (every ReLU call site) agree with the "
        f"final pattern at the middle of training for at least {SETTLED:.0%} of their gates (our reading of "
        '"largely")',
        "a hypothesis; no measurement in the paper",
        ("pullback_settling",),
        "pullback_settling.png",
        path_stability,
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
    Claim(
        "P1",
        OURS,
        "none: the paper's experiments are qualitative; this is a property of our per-neuron temperature",
        "Pullbacks are invariant to permutations; G_ReLU scalings change the global-temperature pullback "
        "but not the gradient or the per-neuron-temperature one (ours)",
        "no claim of the paper",
        ("pullback_symmetry",),
        "pullback_symmetry.png",
        pullback_invariances,
        kind="ours",
    ),
)


def _paper_or_ours(text: str, settings: dict, *keys: str) -> str:
    """``text`` and whether the run's values of the switches ``keys`` (settings named
    ``key.replace(".", "_")``) are the paper's (``intertwine.deviations``)."""
    paper = [paper_value(key) for key in keys]
    ours = [settings[key.replace(".", "_")] for key in keys]
    return (
        f"{text} ("
        + ("the paper" if ours == paper else "ours; the paper: " + ", ".join(map(str, paper)))
        + ")"
    )


MODES = {
    "select_on": lambda s: (
        f"kept weights selected on {s['select_on']} ("
        + ("the released code" if s["select_on"] == "test" else "corrected; the released code: test")
        + ")"
    ),
    "stitching_init": lambda s: _paper_or_ours(f"stitching init {s['stitching_init']}", s, "stitching.init"),
    "stitching_optimizer": lambda s: (
        f"stitching {s['stitching_optimizer']} momentum {s['stitching_momentum']:g} ("
        + (
            "the released code"
            if s["stitching_optimizer"] == "sgd" and s["stitching_momentum"] == 0
            else "not the released code's plain SGD"
        )
        + ")"
    ),
    "stitching_protocol": lambda s: _paper_or_ours(
        f"G_ReLU P update {s['stitching_permutation_update']}, batch-norm refresh "
        f"{s['stitching_batch_norm_refresh']}",
        s,
        "stitching.permutation_update",
        "stitching.batch_norm_refresh",
    ),
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


def scale_text(stages: tuple[str, ...], settings: dict) -> str:
    """How the run's budget compares with the paper's, for the stages a claim rests on."""
    scale = settings.get("scale", {})
    parts = []
    for stage in stages:
        if scale.get(stage):
            parts.append(scale[stage])
    return "; ".join(parts)


def below_budget(stages: tuple[str, ...], settings: dict) -> str:
    """ "at 4 of 50 epochs" when the zoo trained far below the paper's budget, else ""."""
    epochs = settings.get("scale", {}).get("zoo_epochs")
    if "zoo" in stages and epochs is not None and epochs < PAPER_EPOCHS / 2:
        return f"at {epochs} of {PAPER_EPOCHS} epochs"
    return ""


COLUMNS = [
    "claim",
    "kind",
    "source",
    "sentence",
    "statement",
    "paper",
    "ours",
    "verdict",
    "reading",
    "units",
    "scale",
    "evidence",
    "mode",
    "figure",
]


def scorecard(
    tables: dict[str, pd.DataFrame], settings: dict, gated_findings: pd.DataFrame | None
) -> pd.DataFrame:
    """One row per claim (columns ``COLUMNS``): the papers' claims first, then ours (``kind``).
    ``tables`` holds the configured stages' tables by name; ``settings`` the run's settings the
    verdicts, the scale and the mode columns read (``claims_settings`` in the plan);
    ``gated_findings`` the gated-networks stage's findings (None when not configured), one claim
    each. ``reading`` is the verdict with the run's scale where the zoo trained far below the
    paper's budget ("not reproduced at 4 of 50 epochs")."""
    missing = [key for key in SETTINGS_KEYS if key not in settings]
    if missing:
        raise ValueError(
            f"the scorecard's settings lack {missing}: give the run's settings as the plan makes them "
            "(Plan.claims_settings; the claims rule passes them as --settings)"
        )
    unknown = sorted(set(tables) - set(EVIDENCE))
    if unknown:
        raise ValueError(
            f"unknown table {unknown[0]!r} given to the scorecard; the tables are {', '.join(EVIDENCE)} "
            "(gated_findings apart)"
        )
    rows = []
    for claim in CLAIMS:
        if not all(name in tables for name in claim.tables if name != "zoo"):
            result = _not_run(f"its stage is not in the config (needs {', '.join(claim.tables)})")
        else:
            result = _test(claim, tables, settings)
        rows.append(
            {
                "claim": claim.claim,
                "kind": claim.kind,
                "source": claim.source,
                "sentence": claim.sentence,
                "statement": claim.statement,
                "paper": claim.paper,
                "ours": result.ours,
                "verdict": result.verdict,
                "reading": _reading(result.verdict, below_budget(claim.scale, settings)),
                "units": result.units,
                "scale": scale_text(claim.scale, settings) if result.verdict != "not run" else "",
                "evidence": result.evidence,
                "mode": "; ".join(MODES[key](settings) for key in claim.settings),
                "figure": claim.figure if result.verdict != "not run" else "",
            }
        )
    if gated_findings is None:
        rows.append(
            {
                "claim": "G",
                "kind": "paper",
                "source": GATED,
                "sentence": "",
                "statement": "The gated-networks findings (DLGN recovers 83.5 %, value input, gate permutations)",
                "paper": "Tables I-III",
                "ours": "",
                "verdict": "not run",
                "reading": "not run",
                "units": "",
                "scale": "",
                "evidence": "the gated stage is not in the config",
                "mode": "",
                "figure": "",
            }
        )
    else:
        for i, finding in enumerate(gated_findings.fillna("").to_dict("records"), 1):
            budget = finding.get("scale", "")
            rows.append(
                {
                    "claim": f"G{i}",
                    "kind": "paper",
                    "source": f"{GATED}, {finding.get('source', 'Tables I-III')}",
                    "sentence": finding.get("sentence", ""),
                    "statement": finding["finding"],
                    "paper": finding["paper"],
                    "ours": finding["ours"],
                    "verdict": finding["verdict"],
                    "reading": _reading(finding["verdict"], finding.get("below_budget", "")),
                    "units": finding.get("units", ""),
                    "scale": budget,
                    "evidence": finding["evidence"],
                    "mode": "",
                    "figure": "gated_accuracy.png" if finding["verdict"] != "not run" else "",
                }
            )
    table = pd.DataFrame(rows, columns=COLUMNS)
    bad = set(table["verdict"]) - set(VERDICTS)
    if bad:
        raise ValueError(f"verdicts {sorted(bad)} are not among {VERDICTS}")
    # The papers' claims first, ours apart at the end.
    return pd.concat([table[table["kind"] == "paper"], table[table["kind"] != "paper"]], ignore_index=True)


#: The run's settings the claims and the mode column read (``Plan.claims_settings`` holds more).
SETTINGS_KEYS = (
    "myrtle_variants",
    "residual_variants",
    "relu_similarity_variants",
    "residual_activation",
    "leaky_slopes",
    "batch_norm",
    "rotation_variants",
    "rotation_activation",
    "select_on",
    "stitching_init",
    "stitching_optimizer",
    "stitching_momentum",
    "stitching_permutation_update",
    "stitching_batch_norm_refresh",
    "connectivity_barrier",
    "connectivity_families",
)

#: Per table the scorecard reads, its column of evidence: a row whose value there is NaN is no
#: evidence (a failed measurement), left out before any claim counts units or reaches a verdict.
EVIDENCE = {
    "zoo": None,
    "symmetry": "relative_change",
    "rotation": "penalty",
    "stitching": "penalty",
    "similarity": "value",
    "connectivity": "loss",
    "dissection": "fraction_interpretable",
    "pullback_symmetry": "cos_min",
    "pullback_settling": "agreement",
    "deqntk": "test_acc",
}


def _test(claim: Claim, tables: dict[str, pd.DataFrame], settings: dict) -> Result:
    """``claim.test`` on the tables with their NaN evidence left out: a claim whose every row of
    evidence is NaN reads inconclusive ("no evidence"), never a verdict on NaN; a table that lacks
    a column the claim reads is an error naming the table and the column."""
    given, dropped = dict(tables), []
    for name in claim.tables:
        column = EVIDENCE.get(name)
        if column is None or name not in tables:
            continue
        table = tables[name]
        if column not in table.columns:
            raise ValueError(
                f"table {name!r} has no column {column!r} (claim {claim.claim} reads it): it was written by "
                "another stage or an older version; rerun its table job"
            )
        values = pd.to_numeric(table[column], errors="coerce")
        missing = int(values.isna().sum())
        if missing == len(table) and len(table):
            return Result(
                "no evidence",
                "inconclusive",
                f"no evidence: every one of the {len(table)} rows of table {name!r} has NaN {column} "
                "(failed measurements, not a finding)",
                f"0 of {len(table)} rows with a value",
            )
        if missing:
            given[name] = table[values.notna()]
            dropped.append(
                f"{missing} of {len(table)} rows of {name} with NaN {column} left out (no evidence)"
            )
    try:
        result = claim.test(given, settings)
    except KeyError as err:
        names = ", ".join(name for name in claim.tables if name in tables)
        raise ValueError(
            f"claim {claim.claim} reads column {err} that its table ({names}) lacks: it was written by "
            "another stage or an older version; rerun its table job"
        ) from None
    if dropped:
        result = Result(result.ours, result.verdict, f"{result.evidence}; {'; '.join(dropped)}", result.units)
    return result


def _reading(verdict: str, budget: str) -> str:
    return (
        f"{verdict} {budget}"
        if budget and verdict in ("reproduced", "not reproduced", "inconclusive")
        else verdict
    )


DECISION_RULE = (
    "Each claim reduces its rows to independent units (a pair of zoo members with no member in another "
    "pair, a member, a trial) and compares two conditions within a unit where both were measured on it "
    "(paired), across units otherwise (Welch). A comparison is a mean over units with a 95 % t-interval. "
    "Reproduced: every comparison the claim needs lies on the claimed side (needing all of them keeps a "
    "false reproduced at 5 % without correction). Not reproduced: any comparison lies on the other side "
    "after Holm's correction over the claim's comparisons. Inconclusive: otherwise (one unit gives no "
    "interval; a NaN value, a failed measurement, is no evidence and counts as no unit). Not run: its stage is not in the config. A verdict reached far below the paper's "
    "training budget says so."
)


_MARK = re.compile(
    r"([^;]*?): ([+-]?[\d.]+(?: ± [\d.]+)?(?: \(no interval\))?) \[(shown|against|undecided)\]"
)


def headline(ours: str, verdict: str) -> str:
    """The one comparison that carries a verdict, read from ``ours`` (``describe``'s text): for
    "not reproduced" the first decided against it; for "inconclusive" the first undecided; for
    "reproduced" the weakest shown (the smallest value over its interval's half-width). Claims
    without intervals (identities, accuracies) give the text's first part."""
    marks = [(label.strip(), value, mark) for label, value, mark in _MARK.findall(ours)]
    wanted = {"not reproduced": "against", "inconclusive": "undecided", "reproduced": "shown"}.get(verdict)
    chosen = [m for m in marks if m[2] == wanted]
    if not chosen:
        return ours.split("; ")[0]
    if verdict == "reproduced":

        def strength(mark) -> float:
            value, _, half = mark[1].partition(" ± ")
            return abs(float(value)) / float(half) if half and float(half) > 0 else math.inf

        chosen = [min(chosen, key=strength)]
    label, value, _ = chosen[0]
    return f"{label}: {value}"


def as_rst(table: pd.DataFrame, figures: set[str]) -> str:
    """The scorecard as RST list tables for the report's opening page, the papers' claims and
    ours apart; a claim's figure is a link when the report has it (``figures``: its file names)."""

    def cell(text: str) -> str:
        return " ".join(str(text).split()).replace("*", r"\*").replace("|", r"\|").replace("`", "'")

    def block(rows: pd.DataFrame, title: str) -> list[str]:
        lines = [
            f".. list-table:: {title}",
            "   :header-rows: 1",
            "   :widths: 6 30 20 32 12",
            "",
            "   * - claim",
            "     - what it tests (source; the sentence)",
            "     - paper",
            "     - ours (evidence; units; scale)",
            "     - verdict",
        ]
        for row in rows.itertuples():
            figure = f" `{row.figure}`_" if row.figure in figures else ""
            sentence = f" The sentence: {cell(row.sentence)}." if row.sentence else ""
            lines += [
                f"   * - {row.claim}",
                f"     - {cell(row.statement)} ({cell(row.source)}).{sentence}{figure}",
                f"     - {cell(row.paper)}",
                f"     - {cell(row.ours) or '-'} ({cell(row.evidence)}; {cell(row.units) or '-'}"
                + (f"; {cell(row.scale)}" if row.scale else "")
                + ")"
                + (f" [{cell(row.mode)}]" if row.mode else ""),
                f"     - **{cell(row.reading)}**",
            ]
        return lines

    def glance(rows: pd.DataFrame) -> list[str]:
        lines = [
            ".. list-table:: At a glance: each claim's deciding comparison (ours) beside the paper's numbers",
            "   :header-rows: 1",
            "   :widths: 6 34 28 20 12",
            "",
            "   * - claim",
            "     - what it tests",
            "     - ours",
            "     - paper",
            "     - verdict",
        ]
        for row in rows.itertuples():
            lines += [
                f"   * - {row.claim}",
                f"     - {cell(row.statement)}",
                f"     - {cell(headline(row.ours, row.verdict)) or '-'}",
                f"     - {cell(row.paper)}",
                f"     - **{cell(row.reading)}**",
            ]
        return lines

    lines = (
        glance(table[table["kind"] == "paper"])
        + ["", f"**The decision rule.** {DECISION_RULE}", ""]
        + block(
            table[table["kind"] == "paper"],
            "Which of the papers' claims this run reproduces (results/tables/claims.csv)",
        )
    )
    ours = table[table["kind"] != "paper"]
    if len(ours):
        lines += [""] + block(ours, "Properties of our own constructions (not claims of the papers)")
    return "\n".join(lines) + "\n"
