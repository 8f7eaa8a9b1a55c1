"""Deprecated: the excitation pullbacks' measurements moved to :mod:`intertwine.pullback.measurements`
(library code), and the stage's table summary (``summarize``) to
:mod:`intertwine.workflow.stages.pullback.study` (issue 35). This module re-exports them for one
release and warns on import."""

import warnings

from intertwine.pullback.measurements import *  # noqa: F403
from intertwine.pullback.measurements import __all__ as _measurements
from intertwine.workflow.stages.pullback.study import summarize

warnings.warn(
    "intertwine.pullback_study is deprecated and will be removed in the next release: import the "
    "measurements from intertwine.pullback.measurements, summarize from "
    "intertwine.workflow.stages.pullback.study",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = [*_measurements, "summarize"]
