"""The ``symmetry`` block's settings as a dataclass: what the stage's jobs read, each field one config
key with the schema's default (:mod:`intertwine.workflow.settings`)."""

from __future__ import annotations

import dataclasses

from intertwine.workflow.settings import Settings, setting


@dataclasses.dataclass(frozen=True)
class SymmetryConfig(Settings):
    """The weight-space symmetry check on a trained member (config ``symmetry``)."""

    groups: list[str] = setting("symmetry.groups")
    images: int = setting("symmetry.images")
    float64: bool = setting("symmetry.float64")
    lognormal_sigma: float = setting("symmetry.lognormal_sigma")
