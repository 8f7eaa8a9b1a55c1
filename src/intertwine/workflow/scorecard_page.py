"""The scorecard as the report's opening page shows it: the decision rule in words, each claim's
deciding comparison (``headline``), the summary of claims split into rows, and the RST tables."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from intertwine.workflow.claims import VERDICTS, units_text

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
#: A comparison's label that names its threshold ("act1 G_ReLU penalty below 10 points").
_THRESHOLD = re.compile(r"(?P<subject>.+?) (?P<relation>below|above) (?P<bound>[+-]?\d[\d.]*)(?P<rest>.*)")
#: A site of a network (act1, layer2.0.act2, features.act3, stage2.1.out): a label that starts with
#: one ("act1 G_ReLU - full") or is a variant and a site ("myrtle act3") is that comparison at a site.
_SITE = re.compile(r"(?:\w+\.)*(?:act\d*|out)")
_OPPOSITE = {"below": "above", "above": "below"}


def _at_site(label: str) -> tuple[str, str]:
    """(the comparison, its site) of ``label``; the site is "" where the label names none."""
    words = label.split(" ")
    if len(words) > 1 and _SITE.fullmatch(words[0]):
        return " ".join(words[1:]), words[0]
    if len(words) == 2 and _SITE.fullmatch(words[1]):
        return words[0], words[1]
    return label, ""


def _finding(comparison: str, value: str, mark: str) -> str:
    """What the run found for ``comparison`` (a label without its site), in words a reader can check
    against ``value``: the side of its threshold (0 where the label names none) the interval lies on,
    or that it was not shown on the claimed side."""
    threshold = _THRESHOLD.fullmatch(comparison)
    if threshold:
        subject, relation, bound, rest = threshold.groups()
        if mark == "shown":
            return f"{subject} {relation} {bound}{rest}"
        if mark == "against":
            return f"{subject} {_OPPOSITE[relation]} {bound}{rest}"
        return f"{subject} not shown {relation} {bound}{rest}"
    if mark == "undecided":
        return f"{comparison} undecided" + (" (its interval includes 0)" if "±" in value else "")
    return f"{comparison} {'below' if value.startswith('-') else 'above'} 0"


def _quantity(ours: str, first: re.Match) -> tuple[str, str]:
    """(what ``ours`` measures, the first comparison's label): "penalties (points): act1 G_ReLU -
    full" gives ("penalties (points)", "act1 G_ReLU - full"). A colon or semicolon within
    parentheses is part of the text; text before a semicolon is a note, not the quantity."""
    head = ours[: first.end(1)]
    depth, masked = 0, []
    for character in head:
        depth += character == "("
        masked.append(character if depth == 0 else "_")
        depth -= character == ")" and depth > 0
    masked = "".join(masked)
    start = masked.rfind("; ") + 2 if "; " in masked else 0
    colon = masked.rfind(": ")
    if colon < start:
        return "", first[1].strip()
    return head[start:colon].strip(), head[colon + 2 :].strip()


def headline(ours: str, verdict: str) -> str:
    """The comparison that carries a verdict, read from ``ours`` (``describe``'s text) and written
    as a sentence a reader can check: which side of its threshold (0 where it names none) the
    interval lies on, or that it was not shown on the claimed side, at every site where the same
    comparison reads so, the quantity last: "G_ReLU penalty above 10 points at 3 of 4 sites:
    +24.6 ± 8.4 at act1, ... (penalties, points)". For "not reproduced" the first comparison decided
    against the claim, for "inconclusive" the first undecided, for "reproduced" the weakest shown
    (the smallest value over its interval's half-width). The words are made here, when the page is
    written, so that a run's scorecard kept from before reads the same way. Claims without
    intervals (identities, accuracies) give the text's first part."""
    found = list(_MARK.finditer(ours))
    quantity, first = _quantity(ours, found[0]) if found else ("", "")
    marks = [(first if i == 0 else m[1].strip(), m[2], m[3]) for i, m in enumerate(found)]
    wanted = {"not reproduced": "against", "inconclusive": "undecided", "reproduced": "shown"}.get(verdict)
    chosen = [m for m in marks if m[2] == wanted]
    if not chosen:
        return ours.split("; ")[0]
    if verdict == "reproduced":

        def strength(mark) -> float:
            value, _, half = mark[1].partition(" ± ")
            return abs(float(value)) / float(half) if half and float(half) > 0 else math.inf

        chosen = [min(chosen, key=strength)]
    comparison, site = _at_site(chosen[0][0])
    finding = _finding(comparison, chosen[0][1], chosen[0][2])
    if not site:
        sentence = f"{finding}: {chosen[0][1]}"
    else:
        at_sites = [(_at_site(label), value, mark) for label, value, mark in marks]
        alike = [
            (v, at) for (other, at), v, mark in at_sites if other == comparison and at and mark == wanted
        ]
        measured = sum(1 for (other, at), _, _ in at_sites if other == comparison and at)
        sentence = (
            f"{finding} at {site}: {chosen[0][1]}"
            if measured == 1
            else f"{finding} at {len(alike)} of {measured} sites: "
            + ", ".join(f"{v} at {at}" for v, at in alike)
        )
    # What is measured comes last, so that a cell cut short keeps the finding; a long parenthesis
    # of it (a list of sites) is left out.
    quantity = re.sub(r" \([^()]{30,}\)", "", quantity)
    return f"{sentence} ({_flat(quantity)})" if quantity else sentence


def _flat(quantity: str) -> str:
    """``quantity`` without a closing parenthesis, to stand in one: "penalties (points)" gives
    "penalties, points"."""
    return re.sub(r" \(([^()]*)\)$", r", \1", quantity)


#: The suffixes of a claim split by architecture (``C4.myrtle``); other splits are by clause
#: (``C2.full``, ``C2.depth``).
ARCHITECTURE_SUFFIXES = frozenset({"myrtle", "myrtle512", "resnet20", "resnet18"})


def split_summary(table: pd.DataFrame) -> list[str]:
    """One line per claim split into rows (ids ``C4.myrtle``, ``C2.full``, ...): how many of the
    rows the run tested it reproduces, e.g. "C4: reproduced for 2 of 3 architectures run (...)";
    a split by clause counts clauses."""
    lines = []
    split = table[table["claim"].str.contains(".", regex=False)]
    for claim, rows in split.groupby(split["claim"].str.partition(".")[0], sort=False):
        run = rows[rows["verdict"] != "not run"]
        held = run[run["verdict"] == "reproduced"]
        suffixes = set(rows["claim"].str.partition(".")[2])
        unit = "architecture" if suffixes <= ARCHITECTURE_SUFFIXES else "clause"
        parts = [
            f"{verdict}: {', '.join(rows.loc[rows['verdict'] == verdict, 'claim'])}"
            for verdict in VERDICTS
            if (rows["verdict"] == verdict).any()
        ]
        lines.append(
            f"{claim}: reproduced for {len(held)} of {units_text(unit, len(run))} run ({'; '.join(parts)})"
        )
    return lines


def _family_verdict(run: pd.DataFrame) -> str:
    """How the tested rows of a split claim read, in one cell: their common reading, or each
    reading's count ("2 reproduced, 1 inconclusive at 4 of 50 epochs")."""
    readings = list(dict.fromkeys(run["reading"]))
    if len(readings) == 1:
        return readings[0]
    counts = run["verdict"].value_counts()
    budget = {
        reading.removeprefix(verdict).strip() for reading, verdict in zip(run["reading"], run["verdict"])
    }
    return ", ".join(f"{counts[v]} {v}" for v in VERDICTS if v in counts) + (
        f" {budget.pop()}" if len(budget) == 1 and "" not in budget else ""
    )


#: The longest text (characters) a cell of the opening table shows: the report's content column is
#: about 900 px wide, and a row of three such cells stays within three or four lines.
GLANCE_CHARACTERS = 100


def _glance_text(text: str) -> str:
    """``text`` cut at a word before ``GLANCE_CHARACTERS``, marked with an ellipsis (the full text is
    in the table below)."""
    text = " ".join(str(text).split())
    if len(text) <= GLANCE_CHARACTERS:
        return text
    return text[:GLANCE_CHARACTERS].rsplit(" ", 1)[0].rstrip(",;:") + " …"


def glance_rows(table: pd.DataFrame) -> list[dict[str, str]]:
    """The rows of the report's opening table: one per claim the run tested, a claim split into
    rows (``C2.full``, ``C4.myrtle``, ...) as one row that says how each of its rows reads, and the
    claims the run did not test (``not run``) together in a last row, so that the table stays a
    glance as claims are added (the full table below has every row)."""
    rows, not_run = [], []
    for claim, group in table.groupby(table["claim"].str.partition(".")[0], sort=False):
        run = group[group["verdict"] != "not run"]
        if run.empty:
            not_run += list(group["claim"])
            continue
        if len(group) == 1:
            row = group.iloc[0]
            ours, statement, verdict = headline(row["ours"], row["verdict"]), row["statement"], row["reading"]
        else:
            parts = run["claim"].str.partition(".")[2]
            unit = (
                "architecture"
                if set(group["claim"].str.partition(".")[2]) <= ARCHITECTURE_SUFFIXES
                else "clause"
            )
            ours = "; ".join(f"{part}: {verdict}" for part, verdict in zip(parts, run["verdict"]))
            untested = [c for c in group["claim"] if c not in set(run["claim"])]
            statement = f"by {unit}: {', '.join(parts)}" + (
                f" (not run: {', '.join(c.partition('.')[2] for c in untested)})" if untested else ""
            )
            verdict = _family_verdict(run)
        rows.append(
            {
                "claim": claim,
                "statement": _glance_text(statement),
                "ours": _glance_text(ours),
                "paper": _glance_text(run.iloc[0]["paper"]),
                "verdict": verdict,
            }
        )
    if not_run:
        rows.append(
            {
                "claim": "not run",
                "statement": ", ".join(not_run),
                "ours": "",
                "paper": "",
                "verdict": "not run",
            }
        )
    return rows


#: Each verdict's RST role: ``:verdict-not-reproduced:`...``` is a span of classes "verdict
#: verdict-not-reproduced", which the report's opening page (workflow/report/workflow.rst) colours.
VERDICT_ROLES = {verdict: "verdict-" + verdict.replace(" ", "-") for verdict in VERDICTS}
_VERDICT_WORDS = re.compile(r"(?<![\w-])(not reproduced|not run|inconclusive|reproduced)(?![\w-])")


def verdict_markup(reading: str) -> str:
    """``reading`` (a verdict cell's text, "not reproduced at 4 of 50 epochs", "2 reproduced, 1
    inconclusive") with each verdict word marked by its role; the text stays as it was."""
    return _VERDICT_WORDS.sub(lambda word: f":{VERDICT_ROLES[word[1]]}:`{word[1]}`", reading)


def _role_definitions() -> list[str]:
    lines = []
    for role in VERDICT_ROLES.values():
        lines += [f".. role:: {role}", f"   :class: verdict {role}", ""]
    return lines


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
                f"     - {verdict_markup(cell(row.reading))}",
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
        for row in glance_rows(rows):
            lines += [
                f"   * - {row['claim']}",
                f"     - {cell(row['statement'])}",
                f"     - {cell(row['ours']) or '-'}",
                f"     - {cell(row['paper'])}",
                f"     - {verdict_markup(cell(row['verdict']))}",
            ]
        return lines

    split = split_summary(table)
    lines = (
        _role_definitions()
        + glance(table[table["kind"] == "paper"])
        + (
            ["", "**Claims split into rows (by architecture or by clause).**", ""]
            + [f"- {cell(line)}" for line in split]
            if split
            else []
        )
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


def markdown_summary(card: pd.DataFrame) -> str:
    """A run's scorecard (``claims.csv``) as the docs show it: one line per claim with its reading,
    the comparison that carries the verdict (``headline``) and its units."""

    def cell(text) -> str:
        return " ".join(str(text).split()).replace("|", r"\|") if pd.notna(text) and text != "" else "-"

    lines = ["| claim | reading | deciding comparison (ours) | units |", "| --- | --- | --- | --- |"]
    for row in card.itertuples():
        ours = row.ours if pd.notna(row.ours) else ""
        decides = headline(ours, row.verdict) if ours else row.evidence
        lines.append(f"| {row.claim} | {cell(row.reading)} | {cell(decides)} | {cell(row.units)} |")
    return "\n".join(lines) + "\n"


#: A generated block in a docs page: the scorecard of the run whose ``claims.csv`` the marker names.
SCORECARD_BLOCK = re.compile(
    r"(<!-- scorecard: (?P<csv>\S+) -->\n)(?P<table>.*?)(<!-- /scorecard -->)", re.DOTALL
)


#: A generated block in a docs page: a table a run wrote (a CSV kept in docs/results/), as it is.
TABLE_BLOCK = re.compile(r"(<!-- table: (?P<csv>\S+) -->\n)(?P<table>.*?)(<!-- /table -->)", re.DOTALL)


def markdown_table(table: pd.DataFrame) -> str:
    """A CSV's rows as a markdown table, numbers to 4 significant digits."""

    def cell(value) -> str:
        if isinstance(value, float):
            return "-" if math.isnan(value) else f"{value:.4g}"
        return str(value).replace("|", r"\|")

    lines = ["| " + " | ".join(table.columns) + " |", "|" + " --- |" * len(table.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join(lines) + "\n"


def refresh_docs(page: str, root: Path) -> str:
    """``page`` (a docs page's text) with each scorecard block rewritten from the ``claims.csv`` its
    marker names, and each table block from its CSV (paths relative to ``root``, the repository)."""

    def scorecard(match: re.Match) -> str:
        card = pd.read_csv(root / match["csv"], keep_default_na=False, na_values=[""])
        return match[1] + markdown_summary(card) + match[4]

    def table(match: re.Match) -> str:
        return match[1] + markdown_table(pd.read_csv(root / match["csv"])) + match[4]

    return TABLE_BLOCK.sub(table, SCORECARD_BLOCK.sub(scorecard, page))


if __name__ == "__main__":
    # python -m intertwine.workflow.scorecard_page docs/scorecard.md docs/results.md: the docs' scorecard
    # and table blocks rewritten from the runs' CSV files their markers name.
    import sys

    for name in sys.argv[1:]:
        path = Path(name)
        path.write_text(refresh_docs(path.read_text(), Path.cwd()))
