"""The ``rotation`` block's settings as a dataclass: what the stage's jobs read, each field one config
key with the schema's default (:mod:`intertwine.workflow.settings`)."""

from __future__ import annotations

import dataclasses

from intertwine.workflow.settings import Settings, setting


@dataclasses.dataclass(frozen=True)
class RotationConfig(Settings):
    """A rotation-penalty trial's fine-tuning (config ``rotation``; the rest is ``zoo.training``'s)."""

    epochs: int = setting("rotation.epochs")
    lr: float | None = setting("rotation.lr")
    train_images: int | None = setting("rotation.train_images")
    lognormal_sigma: float = setting("rotation.lognormal_sigma")
