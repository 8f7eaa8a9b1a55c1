"""Deprecated: the DEQ-NTK stage's mathematics (unit inputs, the Gram in blocks, kernel regression's
accuracy, the depth sweep, the convolutional kernel's accuracy, the reference CKAs) moved to
:mod:`intertwine.kernels.deq_regression`, the Gram blocks' files (``save_block``, ``load_block``,
``check_blocks``) to :mod:`intertwine.workflow.stages.deqntk.job`, and ``parse_variances``, ``variances_name``
are :mod:`intertwine.settings`'. This module re-exports them for one release and warns on import."""

import warnings

from intertwine.workflow.stages.deqntk.job import check_blocks, load_block, save_block
from intertwine.kernels.deq_regression import (
    DEQ,
    PREPROCESSING,
    Block,
    assemble,
    conv_accuracy,
    depth_sweep,
    draw,
    frozen_ridge,
    gram_block,
    panel_curves,
    reference_rows,
    regression_accuracy,
    unit_pixels,
    unit_rows,
)
from intertwine.settings import parse_variances, variances_name

warnings.warn(
    "intertwine.deqntk is deprecated and will be removed in the next release: import the kernel regression "
    "from intertwine.kernels.deq_regression, save_block, load_block and check_blocks from "
    "intertwine.workflow.stages.deqntk.job, parse_variances and variances_name from intertwine.settings",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = [
    "DEQ",
    "PREPROCESSING",
    "Block",
    "assemble",
    "check_blocks",
    "conv_accuracy",
    "depth_sweep",
    "draw",
    "frozen_ridge",
    "gram_block",
    "load_block",
    "panel_curves",
    "parse_variances",
    "reference_rows",
    "regression_accuracy",
    "save_block",
    "unit_pixels",
    "unit_rows",
    "variances_name",
]
