"""The gated networks' plan: each member's kernels, the logit ensembles, the study's figures.

A part of :class:`intertwine.workflow.plan.Plan`, which composes every stage's part (found through
the stage registry) with its core: a part holds the plan and reads through it what it does not
define (``self.spec``, ``self.zoo_seeds``; :class:`intertwine.workflow.planning.StagePlan`)."""

from __future__ import annotations

import functools

from intertwine.workflow.planning import GATED_ARCHS, ConfigCheck, ImageCount, StagePlan
from intertwine.workflow.stages.gated.settings import GatedConfig


class GatedPlan(StagePlan):
    """The gated stage's part of the plan."""

    @functools.cached_property
    def npk_jobs(self) -> list[str]:
        from intertwine.symmetry import acts_on  # the kernels' invariance checks act on the weights

        # A gated ResNet's accuracy is the study's (from the zoo table); its kernels are not measured.
        return [
            f"results/gated/{variant}/seed{seed}.parquet"
            for variant in self.gated["variants"]
            if acts_on(self.spec(variant))
            for seed in self.members("gated.seeds", variant, self.gated["seeds"])
        ]

    @functools.cached_property
    def gated_ensembles(self) -> list[str]:
        """The logit ensembles' tables (``gated.ensembles``), when the study runs."""
        if not self.npk_jobs:
            return []
        return [f"results/gated/{variant}/ensemble.parquet" for variant in self.gated["ensembles"]]

    def ensemble_checkpoints(self, variant: str) -> list[str]:
        """The members whose logits an ensemble averages: the variant's first k (``gated.ensembles``)."""
        count = self.gated["ensembles"][variant]
        return [
            f"results/zoo/{variant}/seed{seed}.pt"
            for seed in self.members(f"gated.ensembles.{variant}", variant, count)
        ]

    @property
    def gated_block(self) -> dict:
        return GatedConfig.job_block({"gated": self.gated})

    @functools.cached_property
    def gated_permuted(self) -> bool:
        """Whether the study has a variant with a permuted gate layer (the permutation figure)."""
        perms = [(self.spec(v).get("gated") or {}).get("gate_perm") for v in self.gated["variants"]]
        return any(perm is not None and perm != sorted(perm) for perm in perms)

    @property
    def gated_figures(self) -> list[str]:
        return [
            "results/figures/gated_accuracy.png",
            *(["results/figures/gated_permutations.png"] if self.gated_permuted else []),
            "results/figures/gated_kernels.png",
        ]

    @property
    def gated_similarity(self) -> list[str]:
        """The similarity table, when it compares a variant of the gated study (the kernels
        figure shows its gate, linear and G_ReLU CKAs)."""
        if set(self.gated["variants"]) & set(self.similarity["variants"]) and self.similarity_jobs:
            return ["results/tables/similarity.parquet"]
        return []

    @property
    def gated_outputs(self) -> list[str]:
        if not self.npk_jobs:
            return []
        return [
            "results/tables/gated.parquet",
            "results/tables/npk.parquet",
            "results/tables/gated_findings.csv",
            "results/tables/gated_ensembles.csv",
        ] + self.figure_files(self.gated_figures)

    gated_claims_tables = {"gated_findings": "results/tables/gated_findings.csv"}

    def gated_image_counts(self) -> list[ImageCount]:
        return (
            [ImageCount("gated.probe_images", self.gated["probe_images"], "test")]
            if self.gated["variants"]
            else []
        )

    def gated_errors(self, check: ConfigCheck) -> None:
        """The gated stage's cross-checks of the config (``Plan.errors``)."""
        if check.subset("gated.variants", self.gated["variants"], self.variants, "zoo.variants"):
            check.members("gated.seeds", self.gated["variants"], self.gated["seeds"])
            ensembles = self.gated["ensembles"] if self.gated["variants"] else {}  # the stage off: unused
            if check.subset("gated.ensembles", ensembles, self.gated["variants"], "gated.variants"):
                for variant, count in ensembles.items():
                    check.members(f"gated.ensembles.{variant}", [variant], count)
            for variant in self.gated["variants"]:
                if self.spec(variant)["arch"] not in GATED_ARCHS:
                    check.errors.append(
                        f"config key gated.variants: {variant!r} is a {self.spec(variant)['arch']}; the "
                        f"gated-networks study compares {', '.join(GATED_ARCHS)} networks, plain and gated"
                    )
