"""Deprecated: each stage's jobs moved to its folder, ``intertwine.workflow.stages.<stage>.job``, and
``Job`` to :mod:`intertwine.workflow.job`. ``intertwine.jobs.Job`` and ``intertwine.jobs.<stage>``
keep working for one release, with a DeprecationWarning."""

from __future__ import annotations

import importlib
import sys
import warnings

from intertwine.workflow import stages
from intertwine.workflow.job import Job  # noqa: F401  (importable from here, as before)

warnings.warn(
    "intertwine.jobs is deprecated and will be removed in the next release: import Job from "
    "intertwine.workflow.job and a stage's jobs from intertwine.workflow.stages.<stage>.job",
    DeprecationWarning,
    stacklevel=2,
)

# `import intertwine.jobs.zoo` finds the stage's job module under its old name.
for _stage in stages.with_part("job"):
    sys.modules[f"{__name__}.{_stage}"] = importlib.import_module(stages.module_name(_stage, "job"))
