"""The decision rule of the claims scorecard, numbers in and verdicts out: a mean over independent
units with its Student-t interval (``Estimate``), comparisons of it with a claimed side
(``Comparison``, ``within``), Holm's correction (``holm``) and the verdict they give (``judge``).
:mod:`intertwine.workflow.claims` says which units each claim rests on (its docstring states the rule)."""

from __future__ import annotations

import math
from dataclasses import dataclass
import numpy as np
from scipy import stats


LEVEL = 0.05  # family-wise error of a claim (Holm)


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
