"""The papers' claims as data, and the rule that turns this run's tables into a verdict on each.

Each ``Claim`` names its paper and figure, the paper's numbers, the stage whose table tests it and
the figure of the report that shows it; ``verdict`` takes the run's tables (pandas DataFrames by
name, absent when the stage is not configured) and the run's settings and returns what we found,
the verdict and the evidence: the statistic, its 95 % interval and how many units (pairs, seeds,
trials) it rests on.

The decision rule is the same throughout: a difference (or a margin) is estimated as a mean over
independent units with a Student-t 95 % interval; a claim is ``reproduced`` when every interval it
rests on lies on the claimed side, ``not reproduced`` when one lies entirely on the other side,
and ``inconclusive`` otherwise, which includes fewer than two units (no interval). A claim whose
table is absent reads ``not run``. Exact claims (identities) compare a maximum error with a
tolerance instead. No file I/O here: the ``claims`` job reads the tables and writes the scorecard.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import pandas as pd
from scipy import stats

VERDICTS = ("reproduced", "not reproduced", "inconclusive", "not run")
GODFREY = "Godfrey et al. 2022"
GATED = "Lakshminarayanan & Singh 2020"
PULLBACK = "Excitation pullbacks"
DEQ = "Feng & Kolter 2020 (DEQ-NTK)"


@dataclass(frozen=True)
class Estimate:
    """A mean over ``n`` units with the half-width of its 95 % t-interval (NaN below 2 units)."""

    mean: float
    half_width: float
    n: int

    @classmethod
    def of(cls, values) -> Estimate:
        values = np.asarray(values, dtype=float)
        values = values[np.isfinite(values)]
        n = len(values)
        if n == 0:
            return cls(math.nan, math.nan, 0)
        if n == 1:
            return cls(float(values[0]), math.nan, 1)
        half = stats.t.ppf(0.975, n - 1) * values.std(ddof=1) / math.sqrt(n)
        return cls(float(values.mean()), float(half), n)

    @classmethod
    def difference(cls, a, b) -> Estimate:
        """mean(a) - mean(b) of independent samples, Welch's interval."""
        a, b = (np.asarray(v, dtype=float) for v in (a, b))
        a, b = a[np.isfinite(a)], b[np.isfinite(b)]
        mean = (a.mean() if len(a) else math.nan) - (b.mean() if len(b) else math.nan)
        if len(a) < 2 or len(b) < 2:
            return cls(float(mean), math.nan, min(len(a), len(b)))
        va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
        se = math.sqrt(va + vb)
        df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if se > 0 else len(a) + len(b) - 2
        return cls(float(mean), float(stats.t.ppf(0.975, df) * se), len(a) + len(b))

    def side(self) -> int:
        """+1 when the interval lies above 0, -1 below, 0 when it covers 0 or there is none."""
        if not math.isfinite(self.half_width):
            return 0
        return 1 if self.mean - self.half_width > 0 else -1 if self.mean + self.half_width < 0 else 0

    def points(self) -> str:
        """In accuracy points (the tables hold fractions)."""
        return self.text(100, ".1f")

    def text(self, scale: float = 1.0, fmt: str = ".3f") -> str:
        interval = (
            f" ± {self.half_width * scale:{fmt}}" if math.isfinite(self.half_width) else " (no interval)"
        )
        return f"{self.mean * scale:+{fmt}}{interval}"


def combine(sides: list[int]) -> str:
    """All intervals on the claimed side: reproduced; any on the other side: not reproduced."""
    if sides and all(side > 0 for side in sides):
        return "reproduced"
    if any(side < 0 for side in sides):
        return "not reproduced"
    return "inconclusive"


@dataclass(frozen=True)
class Result:
    ours: str
    verdict: str
    evidence: str


@dataclass(frozen=True)
class Claim:
    claim: str  # short id: C1, T1, G1, ...
    source: str  # paper and where in it
    statement: str
    paper: str  # the paper's numbers
    tables: tuple[str, ...]  # what it needs (names of the claims job's --table inputs)
    figure: str  # the report's figure (file name) that shows it
    test: Callable[[dict[str, pd.DataFrame], dict], Result]
    settings: tuple[str, ...] = ()  # the run's settings it depends on (paper mode vs corrected)


def _sites(table: pd.DataFrame, column: str = "site") -> list[str]:
    return list(dict.fromkeys(table[column]))


# --- Godfrey et al. ----------------------------------------------------------------------------


def rotation_penalty(tables, settings) -> Result:
    """Per variant and site: penalty(orthogonal) - penalty(G_ReLU) over trials, > 0 everywhere."""
    table = tables["rotation"]
    parts, sides = [], []
    for (variant, site), group in table.groupby(["variant", "site"], sort=False):
        penalties = {g: rows["penalty"] for g, rows in group.groupby("group")}
        if "orthogonal" not in penalties or "grelu" not in penalties:
            continue
        d = Estimate.difference(penalties["orthogonal"], penalties["grelu"])
        sides.append(d.side())
        parts.append(f"{variant} {site} {d.points()}")
    if not parts:
        return Result("", "not run", "needs rotation trials of both groups, grelu and orthogonal")
    return Result(
        "orthogonal - G_ReLU penalty (points): " + "; ".join(parts),
        combine(sides),
        f"Welch 95 % interval per site over {len(table)} trials; every site's interval above 0 decides",
    )


def stitching_myrtle(tables, settings) -> Result:
    """Myrtle: full stitching about 0 (below 2 points), G_ReLU below 10 points at most sites, and
    below a rank-1 layer outside residual blocks."""
    table = tables["stitching"]
    myrtle = table[table["variant"].isin(settings["myrtle_variants"])]
    if myrtle.empty or not {"full", "grelu"} <= set(myrtle["method"]):
        return Result("", "not run", "needs Myrtle pairs stitched with full and grelu")
    parts, sides, below_ten = [], [], []
    for site, group in myrtle.groupby("site", sort=False):
        full = Estimate.of(group.loc[group["method"] == "full", "penalty"] - 0.02)
        grelu = Estimate.of(group.loc[group["method"] == "grelu", "penalty"] - 0.10)
        sides.append(-full.side())  # full below 2 points
        below_ten.append(-grelu.side())
        part = f"{site}: full {full.mean * 100 + 2:.1f}, G_ReLU {grelu.mean * 100 + 10:.1f}"
        by_pair = group.pivot_table(index="pair", columns="method", values="penalty")
        if "rank1" in by_pair:
            # Paired by pair: rank 1 may run on fewer pairs than G_ReLU (stitching.pairs_per_method).
            d = Estimate.of((by_pair["rank1"] - by_pair["grelu"]).dropna())
            sides.append(d.side())
            part += f", rank 1 - G_ReLU {d.points()}"
        parts.append(part)
    # "at most sites": a majority of sites with G_ReLU's interval below 10 points.
    majority = sum(s > 0 for s in below_ten) > len(below_ten) / 2
    against = sum(s < 0 for s in below_ten) >= len(below_ten) / 2
    sides.append(1 if majority else -1 if against else 0)
    return Result(
        "penalty (points): " + "; ".join(parts),
        combine(sides),
        f"{myrtle['pair'].nunique()} pairs; 95 % t-intervals per site: full below 2, G_ReLU below 10 at most sites, "
        "rank 1 above G_ReLU where rank 1 was run",
    )


def stitching_residual(tables, settings) -> Result:
    """G_ReLU stitching costs more at sites inside residual blocks than outside."""
    table = tables["stitching"]
    grelu = table[(table["method"] == "grelu") & table["variant"].isin(settings["residual_variants"])]
    inside, outside = grelu[grelu["inside_residual"]], grelu[~grelu["inside_residual"]]
    if inside.empty or outside.empty:
        return Result(
            "", "not run", "needs G_ReLU stitching of a ResNet at sites inside and outside residual blocks"
        )
    d = Estimate.difference(inside["penalty"], outside["penalty"])
    return Result(
        f"inside - outside residual blocks {d.points()} points",
        combine([d.side()]),
        f"Welch 95 % interval, {len(inside)} inside and {len(outside)} outside site-pairs",
    )


def procrustes_order(tables, settings) -> Result:
    """Per site: orthogonal - G_ReLU Procrustes similarity over pairs, above 0 at every site."""
    table = tables["similarity"]
    same = table[table["site_a"] == table["site_b"]]
    wide = same.pivot_table(index=["variant", "pair", "site_a"], columns="measure", values="value")
    if not {"grelu_procrustes", "orthogonal_procrustes"} <= set(wide.columns):
        return Result(
            "", "not run", "needs similarity.procrustes_measures grelu_procrustes and orthogonal_procrustes"
        )
    wide = wide.dropna(subset=["grelu_procrustes", "orthogonal_procrustes"]).reset_index()
    parts, sides = [], []
    for (variant, site), group in wide.groupby(["variant", "site_a"], sort=False):
        d = Estimate.of(group["orthogonal_procrustes"] - group["grelu_procrustes"])
        sides.append(d.side())
        parts.append(
            f"{variant} {site} {group['grelu_procrustes'].mean():.2f} vs {group['orthogonal_procrustes'].mean():.2f}"
        )
    return Result(
        "G_ReLU vs orthogonal: " + "; ".join(parts),
        combine(sides),
        f"paired 95 % t-interval of the difference per site over {wide['pair'].nunique()} pairs",
    )


def cka_diagonal(tables, settings) -> Result:
    """Per pair: (diagonal - off-diagonal mean) of G_ReLU-CKA minus that of linear CKA, > 0."""
    table = tables["similarity"]
    drops = {}
    for measure in ("grelu_cka", "linear_cka"):
        rows = table[table["measure"] == measure]
        if rows.empty or (rows["site_a"] != rows["site_b"]).sum() == 0:
            return Result(
                "", "not run", "needs grelu_cka and linear_cka across sites (similarity.cka_measures)"
            )
        diagonal = rows["site_a"] == rows["site_b"]
        keys = ["variant", "pair"]
        drops[measure] = (
            rows[diagonal].groupby(keys)["value"].mean() - rows[~diagonal].groupby(keys)["value"].mean()
        )
    d = Estimate.of((drops["grelu_cka"] - drops["linear_cka"]).dropna())
    return Result(
        f"G_ReLU-CKA falls {drops['grelu_cka'].mean():.2f} off the diagonal, linear CKA "
        f"{drops['linear_cka'].mean():.2f}; difference {d.text()}",
        combine([d.side()]),
        f"paired 95 % t-interval over {d.n} pairs",
    )


def dissection_rotation(tables, settings) -> Result:
    """Fraction of interpretable units at no rotation minus at the strongest: > 0 with a residual
    activation, not > 0 without one."""
    table = tables["dissection"]
    parts, sides = [], []
    dissected = table[table["variant"].isin(settings["residual_activation"])]
    for variant, group in dissected.groupby("variant", sort=False):
        top = group["alpha"].max()
        fall = Estimate.difference(
            group.loc[group["alpha"] == 0, "fraction_interpretable"],
            group.loc[group["alpha"] == top, "fraction_interpretable"],
        )
        residual = settings["residual_activation"][variant]
        # With a residual activation it must fall; without one it must not.
        if residual:
            sides.append(fall.side())
        else:
            sides.append(0 if not math.isfinite(fall.half_width) else -1 if fall.side() > 0 else 1)
        parts.append(f"{variant} ({'with' if residual else 'without'} residual activation) {fall.text()}")
    if not parts:
        return Result("", "not run", "needs a dissected ResNet (with and without residual activation)")
    return Result(
        "fall of the interpretable fraction, alpha 0 to the largest: " + "; ".join(parts),
        combine(sides),
        "Welch 95 % intervals over seeds, sites and rotations; without a residual activation an interval "
        "covering 0 counts as no fall",
    )


def leaky_relu_flat(tables, settings) -> Result:
    """G_ReLU stitching penalties of the slopes below 1 within 5 points of each other."""
    table = tables["stitching"]
    slopes = {v: s for v, s in settings["leaky_slopes"].items() if s < 1}
    grelu = table[(table["method"] == "grelu") & table["variant"].isin(slopes)]
    means = grelu.groupby("variant")["penalty"].apply(Estimate.of)
    if len(means) < 2:
        return Result("", "not run", "needs G_ReLU stitching of at least two slopes below 1")
    lows = [e.mean - e.half_width for e in means]
    highs = [e.mean + e.half_width for e in means]
    spread = max(e.mean for e in means) - min(e.mean for e in means)
    # Flat when even the farthest interval ends are within 5 points; not flat when the nearest are 5 apart.
    side = 1 if max(highs) - min(lows) <= 0.05 else -1 if min(highs) < max(lows) - 0.05 else 0
    accuracy = ""
    if "zoo" in tables:
        zoo = tables["zoo"]
        acc = zoo[zoo["variant"].isin(slopes)].groupby("variant")["test_acc"].mean()
        accuracy = "; test accuracy " + ", ".join(f"{slopes[v]:g}: {a * 100:.1f}" for v, a in acc.items())
    return Result(
        f"penalty by slope (points) "
        + ", ".join(f"{slopes[v]:g}: {e.mean * 100:.1f}" for v, e in means.items())
        + f" (spread {spread * 100:.1f}){accuracy}",
        "inconclusive" if side == 0 else "reproduced" if side > 0 else "not reproduced",
        f"{len(grelu)} site-pairs over {len(means)} slopes; 95 % t-intervals all within 5 points decide",
    )


def exact_symmetry(tables, settings) -> Result:
    """G_ReLU elements leave the function unchanged to rounding; orthogonal ones do not."""
    table = tables["symmetry"]
    grelu = table[table["group"] == "grelu"]
    orthogonal = table[table["group"] == "orthogonal"]
    if grelu.empty:
        return Result("", "not run", "needs the symmetry check with group grelu")
    tolerance = 1e-4 if (grelu["dtype"] == "float32").any() else 1e-9
    worst = grelu["relative_change"].max()
    ours = f"G_ReLU largest relative change {worst:.1e}"
    verdict = "reproduced" if worst <= tolerance else "not reproduced"
    if len(orthogonal):
        ours += f"; orthogonal smallest {orthogonal['relative_change'].min():.1e} (not a symmetry)"
    return Result(ours, verdict, f"{len(grelu)} checks, tolerance {tolerance:g} ({grelu['dtype'].iloc[0]})")


# --- the other papers --------------------------------------------------------------------------


def pullback_invariances(tables, settings) -> Result:
    """Permutations leave every pullback unchanged; G_ReLU scalings leave the gradient and the
    per-neuron-temperature pullback unchanged but not the global-temperature one."""
    table = tables["pullback_symmetry"]
    exact = table[(table["group"] == "permutation") | table["mode"].isin(["gradient", "per_neuron"])]
    global_t = table[(table["group"] == "grelu") & (table["mode"] == "global") & (table["scale_spread"] >= 1)]
    worst = (1 - exact["cos_min"]).max()
    ours = f"1 - cos up to {worst:.1e} where invariant"
    if len(global_t):
        ours += f"; global T at spread >= 1: min cosine {global_t['cos_min'].min():.3f}"
    held = worst <= 1e-6 and (global_t.empty or global_t["cos_min"].min() < 0.999)
    return Result(ours, "reproduced" if held else "not reproduced", f"{len(table)} rows; invariance to 1e-6")


def deq_accuracy(tables, settings) -> Result:
    """Kernel regression with the DEQ-NTK within 3 points of the numbers checked for the spec."""
    table = tables["deqntk"]
    rows = table[(table["study"] == "accuracy") & table["paper_acc"].notna()]
    if rows.empty:
        return Result(
            "",
            "not run",
            "no setting of this run has a reference accuracy (those checked are for CIFAR-10 at the spec's sizes)",
        )
    diffs = (rows["test_acc"] - rows["paper_acc"]) * 100
    ours = ", ".join(
        f"({r.sigma_w2:g},{r.sigma_u2:g},{r.sigma_b2:g}) {r.test_acc * 100:.1f} vs {r.paper_acc * 100:.1f}"
        for r in rows.itertuples()
    )
    verdict = "reproduced" if (diffs.abs() <= 3).all() else "not reproduced"
    return Result(ours, verdict, f"one regression per setting ({len(rows)}, no interval); within 3 points")


CLAIMS = (
    Claim(
        "C1",
        f"{GODFREY}, Fig. 4",
        "The rotation penalty of G_ReLU elements is far below that of orthogonal ones at every layer",
        "orthogonal penalties of tens of points, G_ReLU near 0",
        ("rotation",),
        "rotation_penalty.png",
        rotation_penalty,
        ("rotation_variants", "select_on"),
    ),
    Claim(
        "C2",
        f"{GODFREY}, Fig. 1",
        "Full stitching is nearly free; G_ReLU stitching costs < 10 points at most Myrtle sites and "
        "less than a rank-1 layer outside residual blocks",
        "full ~0, G_ReLU < 10 points",
        ("stitching",),
        "stitching_penalty.png",
        stitching_myrtle,
        ("stitching_init", "stitching_optimizer", "select_on"),
    ),
    Claim(
        "C3",
        f"{GODFREY}, Figs. 6, 7",
        "Sites inside residual blocks cost more to stitch with G_ReLU",
        "higher penalties inside blocks",
        ("stitching",),
        "stitching_penalty.png",
        stitching_residual,
        ("stitching_init", "stitching_optimizer", "select_on"),
    ),
    Claim(
        "C4",
        f"{GODFREY}, Table 2",
        "G_ReLU-Procrustes similarity is below orthogonal Procrustes at every site",
        "0.62/0.51/0.44/0.49 vs 0.77/0.57/0.51/0.58",
        ("similarity",),
        "similarity_procrustes.png",
        procrustes_order,
        ("select_on",),
    ),
    Claim(
        "C5",
        f"{GODFREY}, Figs. 2, 5",
        "G_ReLU-CKA falls off the diagonal faster than linear CKA",
        "sharper diagonal for G_ReLU-CKA",
        ("similarity",),
        "similarity_cka.png",
        cka_diagonal,
        ("select_on",),
    ),
    Claim(
        "C6",
        f"{GODFREY}, Fig. 3",
        "Dissection detectors fall with rotation only with a residual activation",
        "fewer interpretable units after rotation (ResNet with residual activation)",
        ("dissection",),
        "dissection_fraction.png",
        dissection_rotation,
        ("select_on",),
    ),
    Claim(
        "C7",
        f"{GODFREY}, Table 3, Fig. 8",
        "LeakyReLU stitching penalties are flat for slopes below 1; accuracy per slope",
        "flat penalties for slopes < 1",
        ("stitching", "zoo"),
        "stitching_leaky_relu.png",
        leaky_relu_flat,
        ("stitching_init", "stitching_optimizer", "select_on"),
    ),
    Claim(
        "T1",
        f"{GODFREY}, Prop. 3.4, Thm. 4.2",
        "G_ReLU elements act on the weights without changing the function (exact)",
        "exact",
        ("symmetry",),
        "symmetry_summary.csv",
        exact_symmetry,
    ),
    Claim(
        "P1",
        PULLBACK,
        "Pullbacks are invariant to permutations; G_ReLU scalings change the global-temperature "
        "pullback but not the gradient or the per-neuron-temperature one",
        "invariance of the soft-gate backward to hidden-unit permutations",
        ("pullback_symmetry",),
        "pullback_symmetry.png",
        pullback_invariances,
    ),
    Claim(
        "D1",
        DEQ,
        "Ridge-free kernel regression with the DEQ-NTK reaches the accuracies checked for the spec",
        "per (sigma_w2, sigma_u2, sigma_b2)",
        ("deqntk",),
        "deqntk_accuracy.png",
        deq_accuracy,
    ),
)

MODES = {
    "select_on": lambda s: (
        f"kept weights selected on {s['select_on']} ("
        + ("the released code" if s["select_on"] == "test" else "corrected; the released code: test")
        + ")"
    ),
    "stitching_init": lambda s: (
        f"stitching init {s['stitching_init']} ("
        + ("the paper" if s["stitching_init"] == "random" else "ours; the paper: random")
        + ")"
    ),
    "stitching_optimizer": lambda s: (
        f"stitching {s['stitching_optimizer']} momentum {s['stitching_momentum']:g} ("
        + (
            "the released code"
            if s["stitching_optimizer"] == "sgd" and s["stitching_momentum"] == 0
            else "not the released code's plain SGD"
        )
        + ")"
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


def scorecard(
    tables: dict[str, pd.DataFrame], settings: dict, gated_findings: pd.DataFrame | None
) -> pd.DataFrame:
    """One row per claim: claim, source, statement, paper, ours, verdict, evidence, mode, figure.
    ``tables`` holds the configured stages' tables by name; ``settings`` the run's settings the
    verdicts and the mode column read (``claims_settings`` in the plan); ``gated_findings`` the
    gated-networks stage's findings (None when not configured), one claim each."""
    rows = []
    for claim in CLAIMS:
        if not all(name in tables for name in claim.tables if name != "zoo"):
            result = Result(
                "", "not run", f"its stage is not in the config (needs {', '.join(claim.tables)})"
            )
        else:
            result = claim.test(tables, settings)
        rows.append(
            {
                "claim": claim.claim,
                "source": claim.source,
                "statement": claim.statement,
                "paper": claim.paper,
                "ours": result.ours,
                "verdict": result.verdict,
                "evidence": result.evidence,
                "mode": "; ".join(MODES[key](settings) for key in claim.settings),
                "figure": claim.figure if result.verdict != "not run" else "",
            }
        )
    if gated_findings is None:
        rows.append(
            {
                "claim": "G",
                "source": GATED,
                "statement": "The gated-networks findings (DLGN near DNN, value input, gate permutations)",
                "paper": "Tables I-III",
                "ours": "",
                "verdict": "not run",
                "evidence": "the gated stage is not in the config",
                "mode": "",
                "figure": "",
            }
        )
    else:
        for i, finding in enumerate(gated_findings.fillna("").itertuples(), 1):
            rows.append(
                {
                    "claim": f"G{i}",
                    "source": f"{GATED}, Tables I-III",
                    "statement": finding.finding,
                    "paper": finding.paper,
                    "ours": finding.ours,
                    "verdict": finding.verdict,
                    "evidence": finding.evidence,
                    "mode": "",
                    "figure": "gated_accuracy.png" if finding.verdict != "not run" else "",
                }
            )
    table = pd.DataFrame(rows)
    bad = set(table["verdict"]) - set(VERDICTS)
    if bad:
        raise ValueError(f"verdicts {sorted(bad)} are not among {VERDICTS}")
    return table


def as_rst(table: pd.DataFrame, figures: set[str]) -> str:
    """The scorecard as an RST list table for the report's opening page; a claim's figure is a
    link when the report has it (``figures``: the file names it shows)."""
    lines = [
        ".. list-table:: Which of the papers' claims this run reproduces (results/tables/claims.csv)",
        "   :header-rows: 1",
        "   :widths: 6 30 22 30 12",
        "",
        "   * - claim",
        "     - statement (source)",
        "     - paper",
        "     - ours (evidence)",
        "     - verdict",
    ]

    def cell(text: str) -> str:
        return " ".join(str(text).split()).replace("*", r"\*").replace("|", r"\|").replace("`", "'")

    for row in table.itertuples():
        figure = f" `{row.figure}`_" if row.figure in figures else ""
        lines += [
            f"   * - {row.claim}",
            f"     - {cell(row.statement)} ({cell(row.source)}){figure}",
            f"     - {cell(row.paper)}",
            f"     - {cell(row.ours) or '-'} ({cell(row.evidence)})"
            + (f" [{cell(row.mode)}]" if row.mode else ""),
            f"     - **{row.verdict}**",
        ]
    return "\n".join(lines) + "\n"
