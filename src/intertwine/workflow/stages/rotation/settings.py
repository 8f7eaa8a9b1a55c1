"""The ``rotation`` block's settings as a dataclass: what the stage's jobs read, each field one config
key with the schema's default (:mod:`intertwine.settings`)."""

from __future__ import annotations

import dataclasses

from intertwine.settings import _Settings, _setting


@dataclasses.dataclass(frozen=True)
class RotationConfig(_Settings):
    """A rotation-penalty trial's fine-tuning (config ``rotation``; the rest is ``zoo.training``'s)."""

    epochs: int = _setting("rotation.epochs")
    lr: float | None = _setting("rotation.lr")
    train_images: int | None = _setting("rotation.train_images")
    lognormal_sigma: float = _setting("rotation.lognormal_sigma")
