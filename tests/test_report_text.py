"""The report's opening (workflow/report/workflow.rst), rendered as Snakemake's report renders it
(Jinja with ``snakemake.config``, then reStructuredText): it states the zoo's seeds truly, and
the scorecard's verdicts are marked for the page's colours."""

from __future__ import annotations

import re
from pathlib import Path

import jinja2
import pandas as pd
import pytest
import yaml
from docutils.core import publish_parts

from intertwine.workflow.claims import VERDICTS
from intertwine.workflow.scorecard_page import VERDICT_ROLES, as_rst

REPO = Path(__file__).resolve().parents[1]
# Snakemake calls docutils with writer_name=, which docutils 0.22 deprecates; so do we.
pytestmark = pytest.mark.filterwarnings('ignore:Argument "writer_name":PendingDeprecationWarning')


def opening(config: dict) -> str:
    """The report's first section as text: the template rendered with ``config`` (Jinja set up as
    snakemake.report sets it up), then through docutils, tags stripped and lines joined."""

    class Snakemake:
        pass

    Snakemake.config = config
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    text = env.from_string((REPO / "workflow/report/workflow.rst").read_text()).render(snakemake=Snakemake)
    html = publish_parts(text, writer_name="html", settings_overrides={"halt_level": 2})["html_body"]
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def zoo_config(seeds: int, variants: list[str], per_variant: dict | None = None) -> dict:
    zoo = {
        "seeds": seeds,
        "variants": {name: {"arch": "myrtle"} for name in variants},
        "training": {"epochs": 3},
    }
    if per_variant is not None:
        zoo["seeds_per_variant"] = per_variant
    return {"data": {"dataset": "cifar10"}, "zoo": zoo}


def test_opening_gives_the_seeds_of_the_tiny_config():
    config = yaml.safe_load((REPO / "tests/configs/tiny.yaml").read_text())
    zoo = config["zoo"]
    text = opening(config)
    counts = {variant: zoo["seeds_per_variant"].get(variant, zoo["seeds"]) for variant in zoo["variants"]}
    assert len(set(counts.values())) > 1  # the case this checks: not every variant has zoo.seeds
    clauses = re.search(r"This run: data set shapes ; (.*); 2 training epochs\.", text)[1].split("; ")
    assert len(clauses) == len(set(counts.values()))
    for clause in clauses:  # "<n> seed(s) [each] of <variants>"
        n, names = re.fullmatch(r"(\d+) seeds? (?:each )?of (.+)", clause).groups()
        assert names.split(", ") == [v for v, count in counts.items() if count == int(n)]


@pytest.mark.parametrize(
    "config, sentence",
    [
        (zoo_config(3, ["myrtle", "resnet20"]), "3 seeds each of myrtle, resnet20; 3 training epochs."),
        (zoo_config(3, ["myrtle", "resnet20"], {}), "3 seeds each of myrtle, resnet20; 3 training epochs."),
        (zoo_config(1, ["myrtle"]), "1 seed of myrtle; 3 training epochs."),
        # Counts in the order their variants first come; an override of an absent variant counts nothing.
        (
            zoo_config(3, ["a", "b", "c", "d"], {"b": 2, "d": 2, "absent": 5}),
            "3 seeds each of a, c; 2 seeds each of b, d; 3 training epochs.",
        ),
        (zoo_config(4, ["a", "b"], {"a": 2}), "2 seeds of a; 4 seeds of b; 3 training epochs."),
    ],
)
def test_opening_gives_each_variants_seeds(config, sentence):
    text = opening(config)
    assert sentence in text
    assert "seeds for each of the variants" not in text and "5 seeds" not in text


def test_verdicts_are_marked_for_colour_and_keep_their_words():
    """Issue 55: each verdict in the scorecard's tables is a span the opening page colours (one
    colour per verdict, defined in workflow.rst's style), its words as they were."""
    rows = [
        {"claim": "C1", "verdict": "reproduced", "reading": "reproduced at 4 of 50 epochs"},
        {"claim": "C2.full", "verdict": "not reproduced", "reading": "not reproduced"},
        {"claim": "C2.grelu", "verdict": "inconclusive", "reading": "inconclusive"},
        {"claim": "C3", "verdict": "not run", "reading": "not run"},
    ]
    texts = ("source", "sentence", "statement", "paper", "ours", "units", "scale", "evidence", "mode")
    card = pd.DataFrame([row | dict.fromkeys(texts, "x") | {"kind": "paper", "figure": ""} for row in rows])
    html = publish_parts(as_rst(card, set()), writer_name="html", settings_overrides={"halt_level": 2})[
        "html_body"
    ]
    spans = re.findall(r'<span class="verdict (verdict-[\w-]+)">([^<]*)</span>', html)
    assert {role: text for role, text in spans} == {VERDICT_ROLES[v]: v for v in VERDICTS}
    # the opening table's C2 row counts its clauses' verdicts, each word marked
    assert re.search(
        r'1 <span class="verdict verdict-not-reproduced">not reproduced</span>, '
        r'1 <span class="verdict verdict-inconclusive">inconclusive</span>',
        html,
    )
    plain = " ".join(re.sub(r"<[^>]+>", " ", html).split())
    assert "reproduced at 4 of 50 epochs" in plain and "**" not in plain
    style = (REPO / "workflow/report/workflow.rst").read_text()
    colours = {
        role: re.search(rf"span\.{role} {{ background: (#[0-9a-f]{{6}})", style)
        for role in VERDICT_ROLES.values()
    }
    assert all(colours.values()), colours
    assert len({found[1] for found in colours.values()}) == len(VERDICTS)
