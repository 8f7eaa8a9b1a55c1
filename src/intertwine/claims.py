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

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from intertwine.deviations import paper_value
from intertwine.paper import PAPER_EPOCHS, PAPER_MEMBERS, PAPER_STITCH_EPOCHS  # noqa: F401  (importable from here, as before)
from intertwine.verdicts import (  # noqa: F401  (the decision rule, importable from here as before)
    LEVEL,
    Comparison,
    Estimate,
    Judgement,
    describe,
    holm,
    judge,
    within,
)

VERDICTS = ("reproduced", "not reproduced", "inconclusive", "not run")
GODFREY = "Godfrey et al. 2022"
GATED = "Lakshminarayanan & Singh 2021"  # the text's date: October 8, 2021 (a preprint)
PULLBACK = "Satkiewicz 2025 (excitation pullbacks)"
DEQ = "Feng & Kolter 2020 (DEQ-NTK)"
OURS = "ours"


# --- claims ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    ours: str
    verdict: str
    evidence: str
    units: str = ""  # how many independent units, of what


def not_run(why: str) -> Result:
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


def pair_members(frame: pd.DataFrame) -> list[tuple] | None:
    """The zoo members each row (a pair) rests on, when the table names them."""
    if not {"seed_a", "seed_b"} <= set(frame.columns):
        return None
    return [((v, a), (v, b)) for v, a, b in zip(frame["variant"], frame["seed_a"], frame["seed_b"])]


def pair_keys(frame: pd.DataFrame) -> list[str]:
    return ["variant", "pair"] + [c for c in ("seed_a", "seed_b") if c in frame.columns]


def units_text(label: str, n: int) -> str:
    return f"{n} {label}{'' if n == 1 else 's'}"


#: The scorecard's rows in order (the gated findings, G1, G2, ..., follow H1): each claim is defined in
#: its stage's folder (``intertwine.workflow.stages.<stage>.claims``, ``CLAIMS``).
ORDER = ("C1", "C2", "C3", "C4", "C5", "C6", "C7", "L1", "L2", "T1", "D1", "H1", "L3", "P1")


def paper_or_ours(text: str, settings: dict, *keys: str) -> str:
    """``text`` and whether the run's values of the switches ``keys`` (settings named
    ``key.replace(".", "_")``) are the paper's (``intertwine.deviations``)."""
    paper = [paper_value(key) for key in keys]
    ours = [settings[key.replace(".", "_")] for key in keys]
    return (
        f"{text} ("
        + ("the paper" if ours == paper else "ours; the paper: " + ", ".join(map(str, paper)))
        + ")"
    )


#: What the mode column says of each setting a claim depends on (``Claim.settings``): the
#: core's here, each stage's in its ``claims`` module (``MODES``).
CORE_MODES = {
    "select_on": lambda s: (
        f"kept weights selected on {s['select_on']} ("
        + ("the released code" if s["select_on"] == "test" else "corrected; the released code: test")
        + ")"
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
    """One row per claim: the papers' claims first, then ours (``kind``).

    Parameters
    ----------
    tables:
        The configured stages' tables by name (``all_evidence`` names those it knows).
    settings:
        The run's settings the verdicts, the scale and the mode columns read
        (``claims_settings`` in the plan; every key of ``SETTINGS_KEYS``).
    gated_findings:
        The gated-networks stage's findings, one claim each; None when the stage is not
        configured.

    Returns
    -------
    The scorecard, columns ``COLUMNS``. ``reading`` is the verdict with the run's scale where the
    zoo trained far below the paper's budget ("not reproduced at 4 of 50 epochs").
    """
    _check_inputs(tables, settings)
    modes = all_modes()
    rows = [_claim_row(claim, tables, settings, modes) for claim in all_claims()]
    rows += _gated_rows(gated_findings)
    table = pd.DataFrame(rows, columns=COLUMNS)
    bad = set(table["verdict"]) - set(VERDICTS)
    if bad:
        raise ValueError(f"verdicts {sorted(bad)} are not among {VERDICTS}")
    # The papers' claims first, ours apart at the end.
    return pd.concat([table[table["kind"] == "paper"], table[table["kind"] != "paper"]], ignore_index=True)


def _check_inputs(tables: dict[str, pd.DataFrame], settings: dict) -> None:
    """Fail before any verdict on settings the claims would lack, or a table no claim reads (a
    misnamed table would otherwise read as a stage not in the config)."""
    missing = [key for key in SETTINGS_KEYS if key not in settings]
    if missing:
        raise ValueError(
            f"the scorecard's settings lack {missing}: give the run's settings as the plan makes them "
            "(Plan.claims_settings; the claims rule passes them as --settings)"
        )
    evidence = all_evidence()
    unknown = sorted(set(tables) - set(evidence))
    if unknown:
        raise ValueError(
            f"unknown table {unknown[0]!r} given to the scorecard; the tables are {', '.join(evidence)} "
            "(gated_findings apart)"
        )


def _claim_row(
    claim: Claim, tables: dict[str, pd.DataFrame], settings: dict, modes: dict[str, Callable[[dict], str]]
) -> dict:
    """A claim's scorecard row: tested on the tables, or ``not run`` when a stage it needs is not
    configured (the zoo's table is context, never required)."""
    if not all(name in tables for name in claim.tables if name != "zoo"):
        result = not_run(f"its stage is not in the config (needs {', '.join(claim.tables)})")
    else:
        result = _test(claim, tables, settings)
    return {
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
        "mode": "; ".join(modes[key](settings) for key in claim.settings),
        "figure": claim.figure if result.verdict != "not run" else "",
    }


def _gated_rows(gated_findings: pd.DataFrame | None) -> list[dict]:
    """The gated-networks findings' rows, G1, G2, ... in the findings' order, or one ``not run``
    row G when the stage is not configured (so the scorecard always names the paper)."""
    if gated_findings is None:
        return [
            {
                "claim": "G",
                "kind": "paper",
                "source": GATED,
                "sentence": "",
                "statement": "The gated-networks findings (DLGN recovers 83.5 %, value input, gate permutations, "
                "DNN > DGN >> DLGN, Table III's readings)",
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
        ]
    rows = []
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
    return rows


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
    "variant_specs",
)

#: Per table the scorecard reads, its column of evidence: a row whose value there is NaN is no
#: evidence (a failed measurement), left out before any claim counts units or reaches a verdict.
CORE_EVIDENCE = {"zoo": None}


def _stage_parts(name: str) -> list:
    """``name`` (``CLAIMS``, ``EVIDENCE``, ``MODES``) of every stage's ``claims`` module."""
    from intertwine.workflow import stages

    return [getattr(stages.part(stage, "claims"), name, {}) for stage in stages.with_part("claims")]


@functools.cache
def all_claims() -> tuple[Claim, ...]:
    """Every stage's claims, in the scorecard's order (``ORDER``)."""
    found = {claim.claim: claim for claims in _stage_parts("CLAIMS") for claim in claims}
    if set(found) != set(ORDER):
        raise RuntimeError(
            f"the stages' claims {sorted(found)} are not the scorecard's ORDER {sorted(ORDER)}: list a "
            "new claim in intertwine.claims.ORDER"
        )
    return tuple(found[claim] for claim in ORDER)


@functools.cache
def all_evidence() -> dict[str, str | None]:
    """Per table the scorecard reads, its column of evidence (None: the table is context)."""
    return {**CORE_EVIDENCE, **{k: v for part in _stage_parts("EVIDENCE") for k, v in part.items()}}


@functools.cache
def all_modes() -> dict[str, Callable[[dict], str]]:
    """Per setting a claim depends on, what the mode column says of it."""
    return {**CORE_MODES, **{k: v for part in _stage_parts("MODES") for k, v in part.items()}}


def scorecard_tables() -> dict[str, object]:
    """The tables the scorecard reads (``intertwine claims --table NAME=PATH``) with their schemas,
    in report order; ``gated_findings`` (a CSV, ``tables.GATED_FINDINGS_COLUMNS``) has none."""
    from intertwine.tables import stage_tables

    read = {name for claim in all_claims() for name in claim.tables}
    return {**{name: s for name, s in stage_tables().items() if name in read}, "gated_findings": None}


def __getattr__(name: str):
    # The assembled registries under their former names (they are built from the stages' modules,
    # which import this one, so only on first use).
    built = {"CLAIMS": all_claims, "EVIDENCE": all_evidence, "MODES": all_modes}
    if name in built:
        return built[name]()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _test(claim: Claim, tables: dict[str, pd.DataFrame], settings: dict) -> Result:
    """``claim.test`` on the tables with their NaN evidence left out: a claim whose every row of
    evidence is NaN reads inconclusive ("no evidence"), never a verdict on NaN; a table that lacks
    a column the claim reads is an error naming the table and the column."""
    given, dropped = dict(tables), []
    for name in claim.tables:
        column = all_evidence().get(name)
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
