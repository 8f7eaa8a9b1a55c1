"""The registry of the workflow's stages: one folder each, ``intertwine.workflow.stages.<stage>``.

A folder holds its stage's parts as modules of fixed names: ``plan`` (its part of
:class:`intertwine.workflow.plan.Plan`, named ``<Stage>Plan``: its jobs and outputs, its config
cross-checks and image counts, and the tables and settings its claims read), ``job`` (its jobs, one
function per torch rule), ``commands`` (its subcommands, added by ``add_commands``), ``tables``
(its tables' schemas, ``TABLES``), ``figures``, ``claims`` (its claims, ``CLAIMS``, with the columns
of evidence, the settings and the mode texts they read), ``study`` (what its table job computes
beyond collecting rows), ``resources`` (what its heavy rules ask a cluster for, ``NEEDS``) and
``identity`` (where its jobs' code identities start beyond its job, figures and tables modules).
The plan, the command line, the tables, the scorecard, the cluster's needs, the code identities of
the jobs and the tests find a stage's parts through this registry (``part``, ``with_part``), never
through a list of their own: a stage is its folder, its rule file and its name here.
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


def module_name(stage: str, name: str) -> str:
    """The dotted name of ``stage``'s part ``name`` (``plan``, ``job``, ``commands``, ``tables``,
    ``figures``, ``claims``, ``study``, ``resources``, ``identity``)."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage {stage!r}: the stages are {', '.join(STAGES)}")
    return f"{__name__}.{stage}.{name}"


def with_part(name: str) -> list[str]:
    """The stages that have part ``name``, in report order."""
    return [
        stage
        for stage in STAGES
        if importlib.util.find_spec(f"{__name__}.{stage}")
        and importlib.util.find_spec(module_name(stage, name))
    ]


def part(stage: str, name: str) -> ModuleType:
    """``stage``'s part ``name``, imported."""
    return importlib.import_module(module_name(stage, name))


def plan_parts() -> dict[str, type]:
    """Each stage's part of the plan, ``<Stage>Plan`` of its folder's ``plan`` module (e.g.
    ``StitchingPlan``), by stage in report order: :class:`intertwine.workflow.plan.Plan` composes
    them, one object each, with its core."""
    return {stage: getattr(part(stage, "plan"), f"{stage.capitalize()}Plan") for stage in with_part("plan")}
