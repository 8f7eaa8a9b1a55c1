"""Representation similarity's plan: the pairs of members and the parts each pair's job writes, and
the zoo-as-a-whole jobs (``similarity.zoo``: one per variant, over its first K members).

A part of :class:`intertwine.workflow.plan.Plan`, which composes every stage's part (found through
the stage registry) with its core: a part holds the plan and reads through it what it does not
define (``self.spec``, ``self.zoo_seeds``; :class:`intertwine.workflow.planning.StagePlan`)."""

from __future__ import annotations

import functools

from intertwine.workflow.planning import ConfigCheck, ImageCount, StagePlan
from intertwine.workflow.stages.similarity.settings import SimilarityConfig, SimilarityZooConfig


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
        pairs = (
            [
                "results/tables/similarity.parquet",
                "results/tables/similarity_summary.csv",
            ]
            + self.figure_files(self.similarity_figures)
            if self.similarity_jobs
            else []
        )
        return pairs + self.similarity_zoo_outputs

    # --- the zoo as a whole -------------------------------------------------------------------

    def similarity_zoo_members(self, variant: str) -> list[int]:
        """The seeds of the variant's zoo view: its first similarity.zoo.members (null: all)."""
        count = self.similarity["zoo"]["members"] or len(self.zoo_seeds(variant))
        return list(self.members("similarity.zoo.members", variant, count))

    def similarity_zoo_sites(self, variant: str) -> list[str]:
        """The sites of the variant's zoo view: its similarity.zoo.sites entry, else every site."""
        return list(self.similarity["zoo"]["sites"].get(variant) or self.site_names(variant))

    @property
    def similarity_zoo_block(self) -> dict:
        return SimilarityZooConfig.job_block(
            {"similarity": self.similarity, "similarity.zoo": self.similarity["zoo"]}
        )

    @property
    def similarity_zoo_jobs(self) -> list[str]:
        return [f"results/similarity/{variant}/zoo.parquet" for variant in self.similarity["zoo"]["variants"]]

    SIMILARITY_ZOO_FIGURE = "results/figures/similarity_zoo.png"

    @property
    def similarity_zoo_outputs(self) -> list[str]:
        if not self.similarity_zoo_jobs:
            return []
        return [
            "results/tables/similarity_zoo.parquet",
            "results/tables/similarity_zoo_summary.csv",
        ] + self.figure_files([self.SIMILARITY_ZOO_FIGURE])

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
                (
                    "similarity.procrustes_pairs"
                    if self.similarity["procrustes_pairs"] >= self.similarity["cka_pairs"]
                    else "similarity.cka_pairs"
                ),
                self.similarity_pair_count,
                symmetric=True,
            )
        self._similarity_zoo_errors(check)

    def _similarity_zoo_errors(self, check: ConfigCheck) -> None:
        """similarity.zoo's cross-checks: known variants with at least 2 members, known sites, and
        no more test images than the split holds."""
        zoo = self.similarity["zoo"]
        if not check.subset("similarity.zoo.variants", zoo["variants"], self.variants, "zoo.variants"):
            return
        check.subset("similarity.zoo.sites", zoo["sites"], zoo["variants"], "similarity.zoo.variants")
        check.members("similarity.zoo.members", zoo["variants"], zoo["members"] or 0)
        for variant in zoo["variants"]:
            seeds = len(self.zoo_seeds(variant))
            if min(zoo["members"] or seeds, seeds) < 2:
                check.errors.append(
                    f"config key similarity.zoo.variants: a zoo view needs at least 2 members, but "
                    f"the zoo trains {seeds} of {variant!r}; raise zoo.seeds (or zoo.seeds_per_variant) "
                    "or drop the variant"
                )
            if variant in zoo["sites"]:
                check.subset(
                    f"similarity.zoo.sites.{variant}",
                    zoo["sites"][variant],
                    self.site_names(variant),
                    f"the sites of {variant}",
                )
        test_images = self.dataset_sizes()[1]
        if zoo["variants"] and zoo["samples"] > test_images:
            check.errors.append(
                f"config key similarity.zoo.samples: {zoo['samples']} test images asked for, but the "
                f"test split of {self.config['data']['dataset']} has {test_images}; ask for at most {test_images}"
            )
