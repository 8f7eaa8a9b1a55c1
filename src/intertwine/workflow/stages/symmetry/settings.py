"""The ``symmetry`` block's settings as a dataclass: what the stage's jobs read, each field one config
key with the schema's default (:mod:`intertwine.settings`)."""

from __future__ import annotations

import dataclasses

from intertwine.settings import _Settings, _setting


@dataclasses.dataclass(frozen=True)
class SymmetryConfig(_Settings):
    """The weight-space symmetry check on a trained member (config ``symmetry``)."""

    groups: list[str] = _setting("symmetry.groups")
    images: int = _setting("symmetry.images")
    float64: bool = _setting("symmetry.float64")
    lognormal_sigma: float = _setting("symmetry.lognormal_sigma")
