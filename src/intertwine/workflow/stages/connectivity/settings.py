"""The ``connectivity`` block's settings as a dataclass: what the stage's jobs read, each field one config
key with the schema's default (:mod:`intertwine.settings`)."""

from __future__ import annotations

import dataclasses

from intertwine.settings import _Settings, _setting


@dataclasses.dataclass(frozen=True)
class ConnectivityConfig(_Settings):
    """The alignment and interpolation of a pair (config ``connectivity``)."""

    methods: list[str] = _setting("connectivity.methods")
    lambdas: int = _setting("connectivity.lambdas")
    corrections: list[str] = _setting("connectivity.corrections")
    train_images: int = _setting("connectivity.train_images")
    test_images: int | None = _setting("connectivity.test_images")
    fold_batch_norm: bool = _setting("connectivity.fold_batch_norm")
    max_sweeps: int = _setting("connectivity.max_sweeps")
    batch_size: int = _setting("connectivity.batch_size")
