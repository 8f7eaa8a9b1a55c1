"""The ``gated`` block's settings as a dataclass: what the stage's jobs read, each field one config
key with the schema's default (:mod:`intertwine.workflow.settings`)."""

from __future__ import annotations

import dataclasses

from intertwine.workflow.settings import Settings, setting


@dataclasses.dataclass(frozen=True)
class GatedConfig(Settings):
    """The kernels of a gated-networks study member (config ``gated``)."""

    probe_images: int = setting("gated.probe_images")
    value_ntk_draws: int = setting("gated.value_ntk_draws")
