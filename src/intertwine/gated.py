"""Deprecated: the gated-networks study (its kernel checks, its table beside the paper's and its
findings) moved to :mod:`intertwine.workflow.stages.gated.study` (issue 35), and ``has_npk``,
``npk_inputs``, ``member_npk``, ``logit_ensemble``, ``value_weight_ntk``, ``value_weight_ntk_factor``
to :mod:`intertwine.kernels` (library code, no workflow). Their names stay importable from here for
one release, each with a DeprecationWarning."""

import importlib
import warnings

#: The names that moved to :mod:`intertwine.kernels`.
_TO_KERNELS = (
    "has_npk",
    "logit_ensemble",
    "member_npk",
    "npk_inputs",
    "value_weight_ntk",
    "value_weight_ntk_factor",
)
#: The study's names, now in the gated stage's folder.
_TO_STUDY = (
    "SHIFT_IMAGES",
    "kernel_checks",
    "study_table",
    "ensemble_table",
    "RECOVERS",
    "BARELY",
    "PAPER_MIN_EPOCHS",
    "findings",
)


def __getattr__(name: str):
    if name in _TO_KERNELS:
        where = "intertwine.kernels"
    elif name in _TO_STUDY:
        where = "intertwine.workflow.stages.gated.study"
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"intertwine.gated.{name} is deprecated and will be removed in the next release: import it "
        f"from {where}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(where), name)
