"""The ``dissection`` block's settings as a dataclass: what the stage's jobs read, each field one config
key with the schema's default (:mod:`intertwine.settings`)."""

from __future__ import annotations

import dataclasses

from intertwine.settings import _Settings, _setting


@dataclasses.dataclass(frozen=True)
class DissectionConfig(_Settings):
    """Network dissection of a member (config ``dissection``; ``masks`` for the masks figure only)."""

    alphas: list[float] = _setting("dissection.alphas")
    rotations: int = _setting("dissection.rotations")
    quantile: float = _setting("dissection.quantile")
    iou_threshold: float = _setting("dissection.iou_threshold")
    batch_size: int = _setting("dissection.batch_size")
    probe: dict = _setting("dissection.probe")
    masks: dict = _setting("dissection.masks", only_for=("masks",))
