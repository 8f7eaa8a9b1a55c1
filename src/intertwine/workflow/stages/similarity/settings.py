"""The ``similarity`` block's settings as a dataclass: what the stage's jobs read, each field one config
key with the schema's default (:mod:`intertwine.workflow.settings`)."""

from __future__ import annotations

import dataclasses

from intertwine.workflow.settings import Settings, setting


@dataclasses.dataclass(frozen=True)
class SimilarityConfig(Settings):
    """The similarity measures of a pair (config ``similarity``)."""

    procrustes_measures: list[str] = setting("similarity.procrustes_measures")
    cka_measures: list[str] = setting("similarity.cka_measures")
    samples: int | None = setting("similarity.samples")
    intervals: bool = setting("similarity.intervals")
    jackknife_groups: int = setting("similarity.jackknife_groups", read_when="intervals")
    npk_images: int = setting("gated.probe_images")  # npk_cka's images (the exact NPK is costly)
    batch_size: int = setting("similarity.batch_size")


@dataclasses.dataclass(frozen=True)
class SimilarityZooConfig(Settings):
    """The zoo-as-a-whole job of a variant (config ``similarity.zoo``): which variants, members and
    sites are the plan's; each job gets these."""

    measures: list[str] = setting("similarity.zoo.measures")
    samples: int = setting("similarity.zoo.samples")
    mean_iterations: int = setting("similarity.zoo.mean_iterations")
    batch_size: int = setting("similarity.batch_size")
