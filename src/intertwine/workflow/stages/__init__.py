"""The registry of the workflow's stages: one folder each, ``intertwine.workflow.stages.<stage>``.

A folder holds its stage's parts as modules of fixed names (today ``figures``: the stage's figures,
drawn from its tables). The figure commands, the figure jobs' code identities and the tests find a
stage's parts through this registry (``part``, ``with_part``), never through a list of their own,
so a new stage is one folder and one line here.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

#: Every stage, in the order of the report.
STAGES = (
    "zoo",
    "symmetry",
    "rotation",
    "stitching",
    "similarity",
    "connectivity",
    "dissection",
    "gated",
    "deqntk",
    "pullback",
)


def module_name(stage: str, part: str) -> str:
    """The dotted name of part ``part`` (e.g. ``figures``) of ``stage``."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}: the stages are {', '.join(STAGES)}")
    return f"{__name__}.{stage}.{part}"


def with_part(part: str) -> list[str]:
    """The stages that have part ``part``, in report order."""
    return [
        stage
        for stage in STAGES
        if importlib.util.find_spec(f"{__name__}.{stage}")
        and importlib.util.find_spec(module_name(stage, part))
    ]


def part(stage: str, part: str) -> ModuleType:
    """Part ``part`` of ``stage``, imported."""
    return importlib.import_module(module_name(stage, part))


def plan_parts() -> tuple[type, ...]:
    """Each stage's part of the plan, ``<Stage>Plan`` of its folder's ``plan`` module (e.g.
    ``StitchingPlan``), in report order: :class:`intertwine.plan.Plan` is all of them and the core."""
    return tuple(getattr(part(stage, "plan"), f"{stage.capitalize()}Plan") for stage in with_part("plan"))
