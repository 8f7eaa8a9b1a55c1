"""The one list of deviations from the papers: config/paper.yaml uses the paper's value of every
switch (or ours where the list says why), the CPU config ours, and docs/deviations.md shows the list."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_plan import load

from intertwine.workflow.deviations import DEVIATIONS, markdown_table
from intertwine.models import normalize_spec

REPO = Path(__file__).resolve().parents[1]
SWITCHES = [d for d in DEVIATIONS if d.key]


def values(config: dict, key: str) -> list:
    """The values of a dotted key in a validated config; ``zoo.variants.*.<option...>``: the
    option of every variant whose normalised spec has it."""
    head, _, rest = key.partition(".*.")
    if not rest:
        node = config
        for part in key.split("."):
            node = node[part]
        return [node]
    assert head == "zoo.variants", key
    found = []
    for spec in config["zoo"]["variants"].values():
        node = normalize_spec(spec)
        for part in rest.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if node is not None:
            found.append(node)
    return found


@pytest.mark.parametrize("deviation", SWITCHES, ids=[d.key for d in SWITCHES])
def test_paper_config_uses_the_papers_value(deviation):
    found = values(load("config/paper.yaml"), deviation.key)
    assert found, f"config/paper.yaml has no {deviation.key}"
    assert set(map(repr, found)) == {repr(deviation.in_paper_config)}, deviation.key


def test_the_cpu_config_uses_ours_where_it_applies():
    config = load("config/config.yaml")
    for deviation in SWITCHES:
        found = values(config, deviation.key)
        assert repr(deviation.ours) in set(map(repr, found)), deviation.key


def test_every_switch_has_both_values_as_options():
    # the paper's value and ours are each accepted by the schema (a config can choose either)
    for deviation in SWITCHES:
        for value in (deviation.paper, deviation.ours):
            if ".*." in deviation.key:
                continue  # spec options: checked by normalize_spec above
            section, _, name = deviation.key.rpartition(".")

            def choose(config, section=section, name=name, value=value):
                node = config
                for part in filter(None, section.split(".")):
                    node = node.setdefault(part, {})
                node[name] = value

            load("config/config.yaml", choose)  # raises if the schema refuses the value


def test_the_docs_show_the_list():
    page = (REPO / "docs" / "deviations.md").read_text()
    assert markdown_table() in page, (
        "docs/deviations.md: paste intertwine.workflow.deviations.markdown_table()"
    )


def test_paper_config_trains_the_cct_with_hassanis_recipe():
    # Godfrey et al., appendix D.4, and Hassani et al.'s cct_7-3x1_cifar10_300epochs config
    recipe = load("config/paper.yaml")["zoo"]["training_per_variant"]["cct"]
    assert recipe["optimizer"] == "adamw" and recipe["lr"] == 55e-5 and recipe["weight_decay"] == 6e-2
    assert recipe["lr_schedule"] == "cosine" and recipe["lr_min"] == 1e-5 and recipe["batch_size"] == 128
    assert recipe["label_smoothing"] == 0.1 and (recipe["mixup_alpha"], recipe["cutmix_alpha"]) == (0.8, 1.0)
    assert (recipe["epochs"], recipe["mixing_epochs"]) == (300, 175)
    steps_per_epoch = -(-(50_000 - load("config/paper.yaml")["data"]["val_size"]) // 128)
    assert recipe["warmup_steps"] == 10 * steps_per_epoch  # their 10 warm-up epochs
