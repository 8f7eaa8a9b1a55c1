"""The ``dissection`` block's settings as a dataclass: what the stage's jobs read, each field one config
key with the schema's default (:mod:`intertwine.workflow.settings`)."""

from __future__ import annotations

import dataclasses

from intertwine.workflow.settings import Settings, setting


@dataclasses.dataclass(frozen=True)
class DissectionConfig(Settings):
    """Network dissection of a member (config ``dissection``; ``masks`` for the masks figure only)."""

    alphas: list[float] = setting("dissection.alphas")
    rotations: int = setting("dissection.rotations")
    quantile: float = setting("dissection.quantile")
    iou_threshold: float = setting("dissection.iou_threshold")
    batch_size: int = setting("dissection.batch_size")
    probe: dict = setting("dissection.probe")
    masks: dict = setting("dissection.masks", only_for=("masks",))
