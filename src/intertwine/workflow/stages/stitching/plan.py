"""Model stitching's plan: the pairs, methods and sites, each method's settings, the appendix
studies' figures.

A part of :class:`intertwine.workflow.plan.Plan`, which composes every stage's part (found through
the stage registry) with its core: a part holds the plan and reads through it what it does not
define (``self.spec``, ``self.zoo_seeds``; :class:`intertwine.workflow.planning.StagePlan`)."""

from __future__ import annotations

import dataclasses
import functools

from intertwine.workflow.planning import ConfigCheck, StagePlan, as_json
from intertwine.workflow.settings import StitchConfig, expand_methods, method_kind


class StitchingPlan(StagePlan):
    """The stitching stage's part of the plan."""

    def stitch_methods(self, variant: str) -> list[str]:
        """The variant's stitching methods as job names (rank<r>, l1_<lambda>, ...)."""
        methods = self.stitching["methods_per_variant"].get(variant, self.stitching["methods"])
        return expand_methods(methods, self.stitching["ranks"], self.stitching["l1_lambdas"])

    def stitch_block(self, method: str) -> dict:
        """The settings a job of this method reads, with the method's own overrides."""
        kind = method_kind(method)
        stitching = self.stitching | self.stitching["settings_per_method"].get(kind, {})
        return StitchConfig.job_block({"stitching": stitching, "zoo.training": self.zoo["training"]}, kind)

    def stitch_pairs(self, variant: str) -> list[tuple[int, int]]:
        """The variant's (seed_a, seed_b) pairs, drawn from the global seed."""
        count = self.stitching["pairs_per_variant"].get(variant, self.stitching["pairs"])
        return self._pairs("stitching", variant, count)

    def method_pairs(self, variant: str, method: str) -> int:
        """How many of the variant's pairs a method runs on: the first pairs_per_method of them."""
        pairs = len(self.stitch_pairs(variant))
        return min(pairs, self.stitching["pairs_per_method"].get(method_kind(method), pairs))

    @functools.cached_property
    def stitch_jobs(self) -> list[str]:
        return [
            f"results/stitching/{variant}/pair{pair}/{method}.parquet"
            for variant in self.stitching["variants"]
            for method in self.stitch_methods(variant)
            for pair in range(self.method_pairs(variant, method))
        ]

    @functools.cached_property
    def leaky_slopes(self) -> dict[str, float]:
        """The LeakyReLU sweep (appendix D.3): G_ReLU-stitched variants that differ only in the
        activation's negative slope (a ReLU variant counts as slope 0), when two or more slopes
        are stitched; {variant: slope}, else empty."""

        def rest(variant):
            return as_json(
                {k: v for k, v in self.spec(variant).items() if k not in ("activation", "negative_slope")}
            )

        candidates = [
            v
            for v in self.stitching["variants"]
            if "grelu" in self.stitch_methods(v) and self.spec(v)["activation"] in ("relu", "leaky_relu")
        ]
        base = next((rest(v) for v in candidates if self.spec(v)["activation"] == "leaky_relu"), None)
        slopes = {
            v: self.spec(v)["negative_slope"] if self.spec(v)["activation"] == "leaky_relu" else 0.0
            for v in candidates
            if rest(v) == base
        }
        return slopes if len(set(slopes.values())) >= 2 else {}

    @functools.cached_property
    def transformers(self) -> list[str]:
        """The transformer variants stitched (appendix D.4)."""
        return [v for v in self.stitching["variants"] if self.spec(v)["arch"] == "cct"]

    @functools.cached_property
    def study_figures(self) -> dict[str, str]:
        """The appendix's stitching studies the config asks for: {study: figure}, each study named
        like the option of ``intertwine stitching-studies`` that draws it."""
        kinds = {method_kind(m) for v in self.stitching["variants"] for m in self.stitch_methods(v)}
        studies = [
            ("leaky_relu", "leaky_relu", bool(self.leaky_slopes)),
            ("alpha_cv", "alpha_cv", "grelu_cv" in kinds),
            ("l1", "l1_sparsity", "l1" in kinds),
            ("softsort", "softsort", "softsort" in kinds),
            ("transformer", "transformer", bool(self.transformers)),
        ]
        return {study: f"results/figures/stitching_{name}.png" for study, name, wanted in studies if wanted}

    @property
    def study_tables(self) -> list[str]:
        return ["results/tables/leaky_relu_accuracy.csv"] if self.leaky_slopes else []

    @property
    def stitching_outputs(self) -> list[str]:
        if not self.stitch_jobs:
            return []
        return (
            ["results/tables/stitching.parquet", "results/tables/stitching_summary.csv"]
            + self.figure_files(
                [
                    "results/figures/stitching_penalty.png",
                    "results/figures/stitching_dimension.png",
                    "results/figures/stitching_convergence.png",
                ]
            )
            + self.figure_files(list(self.study_figures.values()))
            + self.study_tables
        )

    stitching_claims_tables = {"stitching": "results/tables/stitching.parquet"}

    @property
    def stitching_claims_settings(self) -> dict:
        return {
            "myrtle_variants": [
                v
                for v in self.stitching["variants"]
                if self.spec(v)["arch"] == "myrtle"
                and self.plain_relu(v)
                and not self.spec(v).get("constant_width")
            ],
            "leaky_slopes": self.leaky_slopes,
            "stitching_init": self.stitching["init"],
            "stitching_optimizer": self.stitching["optimizer"],
            "stitching_momentum": self.stitching["momentum"],
            "stitching_permutation_update": self.stitching["permutation_update"],
            "stitching_batch_norm_refresh": self.stitching["batch_norm_refresh"],
        }

    @property
    def stitching_claims_scale(self) -> dict:
        from intertwine.workflow.paper import PAPER_STITCH_EPOCHS

        images = self.stitching["train_images"] or self.split_sizes()[0]
        return {
            "stitching": f"stitching: {self.stitching['epochs']} of the paper's {PAPER_STITCH_EPOCHS} epochs on "
            f"{images:,} training images"
        }

    def stitching_errors(self, check: ConfigCheck) -> None:
        """The stitching stage's cross-checks of the config (``Plan.errors``)."""
        stitching = self.stitching
        if check.subset(
            "stitching.variants", stitching["variants"], self.variants, "zoo.variants"
        ) and check.capable("stitching.variants", stitching["variants"], "pieces"):
            check.subset(
                "stitching.pairs_per_variant",
                stitching["pairs_per_variant"],
                stitching["variants"],
                "stitching.variants",
            )
            if check.subset("stitching.sites", stitching["sites"], self.variants, "zoo.variants"):
                for variant, chosen in stitching["sites"].items():
                    check.subset(
                        f"stitching.sites.{variant}",
                        chosen,
                        self.cut_site_names(variant),
                        f"the sites of {variant}",
                    )
            check.subset(
                "stitching.methods_per_variant",
                stitching["methods_per_variant"],
                stitching["variants"],
                "stitching.variants",
            )
            check.pairable(
                "stitching.variants",
                stitching["variants"],
                "stitching.pairs",
                lambda v: stitching["pairs_per_variant"].get(v, stitching["pairs"]),
                symmetric=False,
            )
        per_method = [
            f.metadata["key"].split(".")[-1]
            for f in dataclasses.fields(StitchConfig)
            if f.metadata["key"].startswith("stitching.")
        ]
        for method, override in stitching["settings_per_method"].items():
            if check.subset(
                f"stitching.settings_per_method.{method}", override, per_method, "the method's settings"
            ):
                check.overrides(f"stitching.settings_per_method.{method}", override, "stitching")
