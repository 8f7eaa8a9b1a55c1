"""Excitation pullbacks' plan: members, pairs, image grids, external models, the settling of gate
patterns, and which variants the pullbacks cannot soften.

A part of :class:`intertwine.workflow.plan.Plan`, which composes every stage's part (found through
the stage registry) with its core: a part holds the plan and reads through it what it does not
define (``self.spec``, ``self.zoo_seeds``; :class:`intertwine.workflow.planning.StagePlan`)."""

from __future__ import annotations

import functools

from intertwine.workflow.planning import ConfigCheck, ImageCount, StagePlan
from intertwine.workflow.stages.pullback.settings import PullbackConfig


class PullbackPlan(StagePlan):
    """The pullback stage's part of the plan."""

    def pullback_seeds(self, variant: str) -> range:
        """The variant's measured members: the first pullback.seeds, or every member (null)."""
        seeds = self.pullback["seeds"]
        return self.zoo_seeds(variant) if seeds is None else self.members("pullback.seeds", variant, seeds)

    @functools.cached_property
    def pullback_member_jobs(self) -> list[str]:
        """Per member, its symmetry rows; its faithfulness rows are ``pullback_faithfulness_parts``."""
        return [
            f"results/pullback/symmetry/{variant}/seed{seed}.parquet"
            for variant in self.pullback["variants"]
            for seed in self.pullback_seeds(variant)
        ]

    @property
    def pullback_faithfulness_parts(self) -> list[str]:
        return [path.replace("/symmetry/", "/faithfulness/") for path in self.pullback_member_jobs]

    def pullback_pairs(self, variant: str) -> list[tuple[int, int]]:
        """The variant's pairs: the similarity stage's draw (its first pullback.pairs; one draw, so
        the two stages compare the same members)."""
        return self._pairs("similarity", variant, self.pullback["pairs"], symmetric=True)

    @functools.cached_property
    def pullback_pair_jobs(self) -> list[str]:
        return [
            f"results/pullback/agreement/{variant}/pair{pair}.parquet"
            for variant in self.pullback["variants"]
            for pair in range(self.pullback["pairs"])
        ]

    @property
    def pullback_transfer_parts(self) -> list[str]:
        """Per pair, its PGD transfer rows (written by the pair's job beside its agreement)."""
        return [path.replace("/agreement/", "/transfer/") for path in self.pullback_pair_jobs]

    def pullback_sites(self, variant: str) -> list[str]:
        """The sites of the hidden-unit agreement: pullback.sites of the variant, or unit_sites of
        its cut sites on the residual stream, evenly spaced, the first and the last included."""
        chosen = self.pullback["sites"].get(variant)
        if chosen is not None:
            return list(chosen)
        inside = {site.name: site.inside_residual for site in self.variant_sites(variant)}
        stream = [site for site in self.cut_site_names(variant) if not inside[site]]
        count = min(self.pullback["unit_sites"], len(stream))
        if count <= 1:
            return stream[len(stream) - count :]
        return [stream[round(i * (len(stream) - 1) / (count - 1))] for i in range(count)]

    def pullback_block(self, kind: str) -> dict:
        """The settings a pullback job of ``kind`` (member, pair, images) reads."""
        return PullbackConfig.job_block({"pullback": self.pullback}, kind)

    def pullback_grids(self, variant: str | None = None) -> list[str]:
        """A variant's image grids (from seed 0), every variant's without ``variant``."""
        variants = self.pullback["variants"] if variant is None else [variant]
        return [f"results/figures/pullback_{kind}_{v}.png" for v in variants for kind in ("grid", "pgd")]

    @property
    def pullback_tables(self) -> list[str]:
        if not self.pullback_member_jobs:
            return []
        return [
            "results/tables/pullback_symmetry.parquet",
            "results/tables/pullback_faithfulness.parquet",
            "results/tables/pullback_agreement.parquet",
            "results/tables/pullback_transfer.parquet",
            "results/tables/pullback_summary.csv",
        ]

    @property
    def pullback_figures(self) -> list[str]:
        if not self.pullback_member_jobs:
            return []
        return [
            "results/figures/pullback_symmetry.png",
            *(["results/figures/pullback_agreement.png"] if self.pullback_pair_jobs else []),
            *(["results/figures/pullback_transfer.png"] if self.pullback_pair_jobs else []),
            "results/figures/pullback_faithfulness.png",
            *(["results/figures/pullback_temperature.png"] if self.pullback.get("sweep") else []),
        ]

    @property
    def pullback_outputs(self) -> list[str]:
        extra = self.settling_outputs + self.pullback_external_outputs
        if not self.pullback_member_jobs:
            return extra
        return self.pullback_tables + self.figure_files(self.pullback_figures + self.pullback_grids()) + extra

    def pullback_external_figures(self, name: str) -> list[str]:
        return [
            f"results/figures/pullback_external_{name}.png",
            f"results/figures/pullback_external_{name}_perturbed.png",
            f"results/figures/pullback_external_{name}_pullbacks.png",
        ]

    @property
    def pullback_external_outputs(self) -> list[str]:
        """Per pullback.external model: its table and grids (the paper's own experiment)."""
        return [
            path
            for name in self.pullback["external"]
            for path in [
                f"results/tables/pullback_external_{name}.parquet",
                *self.figure_files(self.pullback_external_figures(name)),
            ]
        ]

    # Hypothesis 1 (early emergence of stable excitation patterns): gate patterns recorded in training
    @property
    def settling_variants(self) -> list[str]:
        """The variants whose members record gate patterns (zoo.training.gate_probe_images > 0,
        usually set per variant in zoo.training_per_variant)."""
        return [
            v for v in self.imported_variants(False) if self.train_block(v).get("gate_probe_images", 0) > 0
        ]

    @property
    def settling_checkpoints(self) -> list[str]:
        """Every member of the settling variants: each an independent unit of the claim."""
        return [
            f"results/zoo/{variant}/seed{seed}.pt"
            for variant in self.settling_variants
            for seed in self.zoo_seeds(variant)
        ]

    @property
    def settling_outputs(self) -> list[str]:
        if not self.settling_variants:
            return []
        return ["results/tables/pullback_settling.parquet"] + self.figure_files(
            ["results/figures/pullback_settling.png"]
        )

    def pullback_problem(self, variant: str) -> str | None:
        """Why a variant has no pullbacks to measure here (None: it has)."""
        from intertwine.symmetry import ARCHS, acts_on  # the models whose weight action it knows

        spec = self.spec(variant)
        if not acts_on(spec):
            return (
                f"is a {spec['arch']}{' (gated)' if spec.get('gated') else ''}; the stage acts on the "
                f"weights of {', '.join(ARCHS)} networks, not gated ResNets (intertwine.symmetry)"
            )
        if spec["activation"] not in ("relu", "leaky_relu"):
            return (
                f"has {spec['activation']} activations; excitation pullbacks soften ReLU and LeakyReLU "
                "gates only (use the plain gradient elsewhere)"
            )
        return None

    pullback_claims_tables = {
        "pullback_symmetry": "results/tables/pullback_symmetry.parquet",
        "pullback_settling": "results/tables/pullback_settling.parquet",
    }

    def pullback_image_counts(self) -> list[ImageCount]:
        if not self.pullback["variants"]:
            return []
        return [
            ImageCount("pullback.images", self.pullback["images"], "test"),
            ImageCount("pullback.probe_images", self.pullback["probe_images"], "training"),
        ]

    def pullback_errors(self, check: ConfigCheck) -> None:
        """The pullback stage's cross-checks of the config (``Plan.errors``)."""
        pullback = self.pullback
        if check.subset(
            "pullback.variants", pullback["variants"], self.variants, "zoo.variants"
        ) and check.capable("pullback.variants", pullback["variants"], "weights"):
            if pullback["seeds"] is not None:
                check.members("pullback.seeds", pullback["variants"], pullback["seeds"])
            for variant in pullback["variants"]:
                problem = self.pullback_problem(variant)
                if problem:
                    check.errors.append(f"config key pullback.variants: {variant!r} {problem}")
            if pullback["pairs"]:
                check.pairable(
                    "pullback.variants",
                    pullback["variants"],
                    "pullback.pairs",
                    lambda v: pullback["pairs"],
                    symmetric=True,
                )
            if check.subset("pullback.sites", pullback["sites"], pullback["variants"], "pullback.variants"):
                for variant, chosen in pullback["sites"].items():
                    check.subset(
                        f"pullback.sites.{variant}",
                        chosen,
                        self.cut_site_names(variant),
                        f"the sites of {variant}",
                    )
