"""Deprecated: the symmetry stage's self-check moved to
:mod:`intertwine.workflow.stages.symmetry.study` (issue 35: a stage's code in its folder). This
module re-exports it for one release and warns on import."""

import warnings

from intertwine.workflow.stages.symmetry.study import (  # noqa: F401
    check_symmetry,
    checked_group,
    summarize,
)

warnings.warn(
    "intertwine.symmetry_study is deprecated and will be removed in the next release: import from "
    "intertwine.workflow.stages.symmetry.study",
    DeprecationWarning,
    stacklevel=2,
)
