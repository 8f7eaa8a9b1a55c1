"""Deprecated: the excitation-pullback stage's measurements moved to
:mod:`intertwine.workflow.stages.pullback.study` (issue 35: a stage's code in its folder). This
module re-exports it for one release and warns on import."""

import warnings

from intertwine.workflow.stages.pullback.study import (  # noqa: F401
    MODES,
    GROUPS,
    PAPER_IMAGE_DIMS,
    attributions,
    cosines,
    summarize_cosines,
    symmetry_cosines,
    matched_units,
    agreement_rows,
    saliency,
    deletion_insertion,
    curve_area,
    to_unit_range,
    from_unit_range,
    scaled_to_image,
    random_targets,
    pgd_toward,
    transfer_measures,
    summarize,
)

warnings.warn(
    "intertwine.pullback_study is deprecated and will be removed in the next release: import from "
    "intertwine.workflow.stages.pullback.study",
    DeprecationWarning,
    stacklevel=2,
)
