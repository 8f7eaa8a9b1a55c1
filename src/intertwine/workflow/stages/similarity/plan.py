"""Representation similarity's plan: the pairs of members and the parts each pair's job writes.

A part of :class:`intertwine.workflow.plan.Plan`, which is every stage's part (found through the stage
registry) and the core: a method here can use the core's and other stages' (``self.spec``,
``self.zoo_seeds``)."""

from __future__ import annotations

import functools

from intertwine.workflow.stages.similarity.settings import SimilarityConfig

from intertwine.workflow.planning import ConfigCheck


class SimilarityPlan:
    """The similarity stage's part of the plan."""

    def similarity_pair_count(self, variant: str) -> int:
        """How many pairs of ``variant`` the stage compares: the larger of procrustes_pairs and
        cka_pairs, at most its pairs_per_variant."""
        count = max(self.similarity["procrustes_pairs"], self.similarity["cka_pairs"])
        return min(count, self.similarity["pairs_per_variant"].get(variant, count))

    def similarity_pairs(self, variant: str) -> list[tuple[int, int]]:
        """The variant's pairs; the measures are symmetric, so (a, b) and (b, a) are one pair."""
        return self._pairs("similarity", variant, self.similarity_pair_count(variant), symmetric=True)

    def similarity_measures(self, pair: int) -> dict[str, bool]:
        """Which measures pair k computes: Procrustes for the first procrustes_pairs, CKA for the
        first cka_pairs."""
        return {
            "procrustes": pair < self.similarity["procrustes_pairs"],
            "cka": pair < self.similarity["cka_pairs"],
        }

    @property
    def similarity_block(self) -> dict:
        return SimilarityConfig.job_block({"similarity": self.similarity, "gated": self.gated})

    @functools.cached_property
    def similarity_jobs(self) -> list[str]:
        return [
            f"results/similarity/{variant}/pair{pair}.parquet"
            for variant in self.similarity["variants"]
            for pair in range(self.similarity_pair_count(variant))
        ]

    @property
    def similarity_figures(self) -> list[str]:
        return (
            ["results/figures/similarity_procrustes.png"] if self.similarity["procrustes_pairs"] else []
        ) + (["results/figures/similarity_cka.png"] if self.similarity["cka_pairs"] else [])

    @property
    def similarity_outputs(self) -> list[str]:
        if not self.similarity_jobs:
            return []
        return [
            "results/tables/similarity.parquet",
            "results/tables/similarity_summary.csv",
        ] + self.figure_files(self.similarity_figures)

    def similarity_errors(self, check: ConfigCheck) -> None:
        """The similarity stage's cross-checks of the config (``Plan.errors``)."""
        if check.subset("similarity.variants", self.similarity["variants"], self.variants, "zoo.variants"):
            check.subset(
                "similarity.pairs_per_variant",
                self.similarity["pairs_per_variant"],
                self.similarity["variants"],
                "similarity.variants",
            )
            check.pairable(
                "similarity.variants",
                self.similarity["variants"],
                "similarity.procrustes_pairs"
                if self.similarity["procrustes_pairs"] >= self.similarity["cka_pairs"]
                else "similarity.cka_pairs",
                self.similarity_pair_count,
                symmetric=True,
            )
