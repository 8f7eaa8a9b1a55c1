"""The papers' claims as data, and the rule that turns this run's tables into a verdict on each.

Each ``Claim`` quotes the sentence it tests, verbatim with its location (mathematical markup written
plainly; a figure's values are not in the text, so a claim on a figure quotes the sentence about it
and says what it reads the figure to show), names the unit of evidence (a pair of zoo members, a member, a
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
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from intertwine.workflow.deviations import paper_value
from intertwine.workflow.paper import PAPER_EPOCHS, PAPER_MEMBERS, PAPER_STITCH_EPOCHS  # noqa: F401  (importable from here, as before)
from intertwine.workflow.verdicts import (  # noqa: F401  (the decision rule, importable from here as before)
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
class Findings:
    """A table of claims a stage decides itself (a CSV its own job writes, one finding a row, as
    the gated stage's Tables I-III readings): the ``columns`` the file must have, and ``rows``,
    its scorecard rows (``COLUMNS``) from the table, or from None when the stage is not in the
    config. A stage's ``claims`` module lists them in ``FINDINGS``, by table name."""

    columns: tuple[str, ...]
    rows: Callable[[pd.DataFrame | None], list[dict]]


@dataclass(frozen=True)
class Claim:
    claim: str  # short id: C1, T1, G1, ...
    source: str  # paper and where in it
    sentence: str  # the paper's sentence it tests, quoted verbatim, with its location
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


def paper_or_ours(text: str, settings: dict, *keys: str) -> str:
    """``text`` and whether the run's values of the switches ``keys`` (settings named
    ``key.replace(".", "_")``) are the paper's (``intertwine.workflow.deviations``)."""
    paper = [paper_value(key) for key in keys]
    ours = [settings[key.replace(".", "_")] for key in keys]
    return (
        f"{text} ("
        + ("the paper" if ours == paper else "ours; the paper: " + ", ".join(map(str, paper)))
        + ")"
    )


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


def scorecard(tables: dict[str, pd.DataFrame], settings: dict) -> pd.DataFrame:
    """One row per claim: the papers' claims first, then ours (``kind``).

    Parameters
    ----------
    tables:
        The configured stages' tables by name: those the claims read (``all_evidence``) and the
        stages' own findings (``all_findings``, e.g. ``gated_findings``), each absent when its
        stage is not configured.
    settings:
        The run's settings the verdicts, the scale and the mode columns read
        (``claims_settings`` in the plan; every key of ``all_settings_keys()``).

    Returns
    -------
    The scorecard, columns ``COLUMNS``. ``reading`` is the verdict with the run's scale where the
    zoo trained far below the paper's budget ("not reproduced at 4 of 50 epochs").
    """
    _check_inputs(tables, settings)
    modes = all_modes()
    findings = all_findings()
    read = {name: table for name, table in tables.items() if name not in findings}
    rows = [_claim_row(claim, read, settings, modes) for claim in all_claims()]
    rows += [row for name, found in findings.items() for row in found.rows(tables.get(name))]
    table = pd.DataFrame(rows, columns=COLUMNS)
    bad = set(table["verdict"]) - set(VERDICTS)
    if bad:
        raise ValueError(f"verdicts {sorted(bad)} are not among {VERDICTS}")
    # The papers' claims first, ours apart at the end.
    return pd.concat([table[table["kind"] == "paper"], table[table["kind"] != "paper"]], ignore_index=True)


def _check_inputs(tables: dict[str, pd.DataFrame], settings: dict) -> None:
    """Fail before any verdict on settings the claims would lack, or a table no claim reads (a
    misnamed table would otherwise read as a stage not in the config)."""
    missing = [key for key in all_settings_keys() if key not in settings]
    if missing:
        raise ValueError(
            f"the scorecard's settings lack {missing}: give the run's settings as the plan makes them "
            "(Plan.claims_settings; the claims rule passes them as --settings)"
        )
    known = [*all_evidence(), *all_findings()]
    unknown = sorted(set(tables) - set(known))
    if unknown:
        raise ValueError(
            f"unknown table {unknown[0]!r} given to the scorecard; the tables are {', '.join(known)}"
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
        "reading": reading(result.verdict, below_budget(claim.scale, settings)),
        "units": result.units,
        "scale": scale_text(claim.scale, settings) if result.verdict != "not run" else "",
        "evidence": result.evidence,
        "mode": "; ".join(modes[key](settings) for key in claim.settings),
        "figure": claim.figure if result.verdict != "not run" else "",
    }


def _stage_parts(name: str, empty=()) -> dict[str, object]:
    """``name`` of every stage's ``claims`` module (``empty`` where it has none), by stage in
    report order: ``CLAIMS`` (its claims, in its own order), ``EVIDENCE`` (per table its claims
    read, the column of evidence; None: the table is context), ``MODES`` (per setting, what the
    mode column says of it) and ``SETTINGS`` (the run's settings its claims and modes read, which
    its part of the plan gives, ``<stage>_claims_settings``)."""
    from intertwine.workflow import stages

    return {stage: getattr(stages.part(stage, "claims"), name, empty) for stage in stages.with_part("claims")}


@functools.cache
def all_claims() -> tuple[Claim, ...]:
    """Every stage's claims, in the scorecard's order: stage by stage in report order (the stage
    registry's), each stage's in the order of its ``CLAIMS``. A claim id two stages use is an error
    naming both: the scorecard, its figures and its tests tell claims apart by id."""
    owner: dict[str, str] = {}
    for stage, claims in _stage_parts("CLAIMS").items():
        for claim in claims:
            if claim.claim in owner:
                raise RuntimeError(
                    f"claim id {claim.claim!r} is used by the stages {owner[claim.claim]!r} and {stage!r} "
                    f"(intertwine.workflow.stages.<stage>.claims): give the claim of {stage!r} an id of its own"
                )
            owner[claim.claim] = stage
    return tuple(claim for claims in _stage_parts("CLAIMS").values() for claim in claims)


@functools.cache
def all_findings() -> dict[str, Findings]:
    """Per table of findings a stage decides itself (``Findings``), by name, in report order."""
    return {k: v for part in _stage_parts("FINDINGS", {}).values() for k, v in part.items()}


@functools.cache
def all_evidence() -> dict[str, str | None]:
    """Per table the scorecard reads, its column of evidence (None: the table is context)."""
    return {k: v for part in _stage_parts("EVIDENCE", {}).values() for k, v in part.items()}


@functools.cache
def all_modes() -> dict[str, Callable[[dict], str]]:
    """Per setting a claim depends on, what the mode column says of it."""
    return {k: v for part in _stage_parts("MODES", {}).values() for k, v in part.items()}


@functools.cache
def all_settings_keys() -> tuple[str, ...]:
    """The run's settings the claims and the mode column read (``Plan.claims_settings`` holds more)."""
    return tuple(dict.fromkeys(key for keys in _stage_parts("SETTINGS").values() for key in keys))


def scorecard_tables() -> dict[str, object]:
    """The tables the scorecard reads (``intertwine claims --table NAME=PATH``) with their schemas,
    in report order; a stage's findings (CSVs, ``all_findings``: their columns) have none."""
    from intertwine.workflow.tables import stage_tables

    read = {name for claim in all_claims() for name in claim.tables}
    return {
        **{name: s for name, s in stage_tables().items() if name in read},
        **dict.fromkeys(all_findings()),
    }


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


def reading(verdict: str, budget: str) -> str:
    """The scorecard's reading: the verdict, with the run's ``budget`` (``below_budget``) when the
    run trained below the paper's and the verdict is one of the three a run can reach."""
    return (
        f"{verdict} {budget}"
        if budget and verdict in ("reproduced", "not reproduced", "inconclusive")
        else verdict
    )
