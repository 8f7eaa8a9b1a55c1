"""Deprecated: each stage's figures moved to its folder, ``intertwine.workflow.stages.<stage>.figures``
(e.g. :mod:`intertwine.workflow.stages.stitching.figures`), and what they share (``mean_ci``,
``save_figure``, the page width) to :mod:`intertwine.workflow.plotting`. The names are importable from
here for one release, with a DeprecationWarning."""

from __future__ import annotations

import warnings

from intertwine.workflow import plotting, stages

warnings.warn(
    "intertwine.figures is deprecated and will be removed in the next release: import a stage's figures "
    "from intertwine.workflow.stages.<stage>.figures and the shared helpers from intertwine.workflow.plotting",
    DeprecationWarning,
    stacklevel=2,
)


def __getattr__(name: str):
    for module in (plotting, *(stages.part(stage, "figures") for stage in stages.with_part("figures"))):
        if not name.startswith("_") and hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
