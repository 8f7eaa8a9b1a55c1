"""Representation similarity's plan: the pairs of members and the parts each pair's job writes.

A part of :class:`intertwine.workflow.plan.Plan`, which composes every stage's part (found through
the stage registry) with its core: a part holds the plan and reads through it what it does not
define (``self.spec``, ``self.zoo_seeds``; :class:`intertwine.workflow.planning.StagePlan`)."""

from __future__ import annotations

import functools

from intertwine.workflow.planning import ConfigCheck, ImageCount, StagePlan
from intertwine.workflow.stages.similarity.settings import SimilarityConfig


class SimilarityPlan(StagePlan):
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

    similarity_claims_tables = {"similarity": "results/tables/similarity.parquet"}

    @property
    def similarity_claims_settings(self) -> dict:
        variants = self.similarity["variants"]
        return {
            "relu_similarity_variants": [v for v in variants if self.plain_relu(v)],
            "site_order": {v: self.site_names(v) for v in variants},
            # the sites inside residual blocks, in forward order (C4.resnet18 leaves out the paper's
            # "layer 70", the penultimate of them)
            "similarity_inside_residual": {
                v: [site.name for site in self.variant_sites(v) if site.inside_residual] for v in variants
            },
        }

    @property
    def similarity_claims_scale(self) -> dict:
        n_test = self.split_sizes()[1]
        samples = self.similarity["samples"] or n_test
        return {
            "similarity": f"similarity: {samples:,} of {n_test:,} test images (the paper: the whole test set)"
        }

    def similarity_image_counts(self) -> list[ImageCount]:
        if not self.similarity["variants"]:
            return []
        return [
            ImageCount(
                "similarity.samples", self.similarity["samples"], "test", " (or null for the whole split)"
            )
        ]

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
