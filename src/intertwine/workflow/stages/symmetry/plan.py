"""The symmetry self-check's plan: which members are checked, with which settings.

A part of :class:`intertwine.workflow.plan.Plan`, which composes every stage's part (found through
the stage registry) with its core: a part holds the plan and reads through it what it does not
define (``self.spec``, ``self.zoo_seeds``; :class:`intertwine.workflow.planning.StagePlan`)."""

from __future__ import annotations

import functools

from intertwine.workflow.planning import ImageCount, StagePlan
from intertwine.workflow.stages.symmetry.settings import SymmetryConfig


class SymmetryPlan(StagePlan):
    """The symmetry stage's part of the plan."""

    @functools.cached_property
    def symmetry_checks(self) -> list[str]:
        from intertwine.symmetry import acts_on  # the models whose weight action it knows

        return [
            f"results/symmetry/{variant}/seed{seed}.parquet"
            for variant in self.variants
            if acts_on(self.spec(variant))
            for seed in range(min(self.symmetry["seeds"], len(self.zoo_seeds(variant))))
        ]

    @property
    def symmetry_block(self) -> dict:
        return SymmetryConfig.job_block({"symmetry": self.symmetry})

    @property
    def symmetry_outputs(self) -> list[str]:
        if not self.symmetry_checks:
            return []
        return ["results/tables/symmetry.parquet", "results/tables/symmetry_summary.csv"]

    symmetry_claims_tables = {"symmetry": "results/tables/symmetry.parquet"}

    def symmetry_image_counts(self) -> list[ImageCount]:
        return (
            [ImageCount("symmetry.images", self.symmetry["images"], "test")] if self.symmetry["seeds"] else []
        )
