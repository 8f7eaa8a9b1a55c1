"""The ``connectivity`` block's settings as a dataclass: what the stage's jobs read, each field one config
key with the schema's default (:mod:`intertwine.workflow.settings`)."""

from __future__ import annotations

import dataclasses

from intertwine.workflow.settings import Settings, setting


@dataclasses.dataclass(frozen=True)
class ConnectivityConfig(Settings):
    """The alignment and interpolation of a pair (config ``connectivity``)."""

    methods: list[str] = setting("connectivity.methods")
    lambdas: int = setting("connectivity.lambdas")
    corrections: list[str] = setting("connectivity.corrections")
    train_images: int = setting("connectivity.train_images")
    test_images: int | None = setting("connectivity.test_images")
    fold_batch_norm: bool = setting("connectivity.fold_batch_norm")
    max_sweeps: int = setting("connectivity.max_sweeps")
    batch_size: int = setting("connectivity.batch_size")
