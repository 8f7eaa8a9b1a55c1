"""Linear mode connectivity's plan: the aligned pairs, and each variant's architecture family.

A part of :class:`intertwine.workflow.plan.Plan`, which composes every stage's part (found through
the stage registry) with its core: a part holds the plan and reads through it what it does not
define (``self.spec``, ``self.zoo_seeds``; :class:`intertwine.workflow.planning.StagePlan`)."""

from __future__ import annotations

from intertwine.workflow.planning import ConfigCheck, StagePlan
from intertwine.workflow.stages.connectivity.settings import ConnectivityConfig


class ConnectivityPlan(StagePlan):
    """The connectivity stage's part of the plan."""

    def architecture_family(self, variant: str) -> str:
        """The variant's spec without its width, in words: variants of one family differ in width
        alone (the barrier against width compares them)."""
        from intertwine.models import normalize_spec

        spec, defaults = self.spec(variant), normalize_spec({"arch": self.spec(variant)["arch"]})
        return spec["arch"] + "".join(
            f", {key} {value}"
            for key, value in spec.items()
            if key not in ("arch", "width_multiplier") and value != defaults[key]
        )

    def connectivity_pair_count(self, variant: str) -> int:
        return self.connectivity["pairs_per_variant"].get(variant, self.connectivity["pairs"])

    def connectivity_pairs(self, variant: str) -> list[tuple[int, int]]:
        """The variant's (f, g) pairs: g is aligned to f, so the order matters."""
        return self._pairs("connectivity", variant, self.connectivity_pair_count(variant))

    @property
    def connectivity_block(self) -> dict:
        return ConnectivityConfig.job_block({"connectivity": self.connectivity})

    @property
    def connectivity_jobs(self) -> list[str]:
        return [
            f"results/connectivity/{variant}/pair{pair}.parquet"
            for variant in self.connectivity["variants"]
            for pair in range(self.connectivity_pair_count(variant))
        ]

    CONNECTIVITY_FIGURES = [
        "results/figures/connectivity_curves.png",
        "results/figures/connectivity_barriers.png",
    ]

    @property
    def connectivity_outputs(self) -> list[str]:
        if not self.connectivity_jobs:
            return []
        return [
            "results/tables/connectivity.parquet",
            "results/tables/connectivity_summary.csv",
        ] + self.figure_files(self.CONNECTIVITY_FIGURES)

    connectivity_claims_tables = {"connectivity": "results/tables/connectivity.parquet"}

    @property
    def connectivity_claims_settings(self) -> dict:
        return {
            "connectivity_barrier": self.connectivity["barrier"],
            "connectivity_families": {v: self.architecture_family(v) for v in self.connectivity["variants"]},
        }

    @property
    def connectivity_claims_scale(self) -> dict:
        test_images = self.connectivity["test_images"] or self.split_sizes()[1]
        return {
            "connectivity": f"connectivity: {self.connectivity['lambdas']} points along the line (Ainsworth et "
            f"al.: 25), {test_images:,} test images"
        }

    def connectivity_errors(self, check: ConfigCheck) -> None:
        """The connectivity stage's cross-checks of the config (``Plan.errors``)."""
        connectivity = self.connectivity
        if check.subset(
            "connectivity.variants", connectivity["variants"], self.variants, "zoo.variants"
        ) and check.capable("connectivity.variants", connectivity["variants"], "weights"):
            check.subset(
                "connectivity.pairs_per_variant",
                connectivity["pairs_per_variant"],
                connectivity["variants"],
                "connectivity.variants",
            )
            check.pairable(
                "connectivity.variants",
                connectivity["variants"],
                "connectivity.pairs",
                self.connectivity_pair_count,
                symmetric=False,
            )
            from intertwine.symmetry import ARCHS, acts_on  # the models whose weight action it knows

            for variant in connectivity["variants"]:
                spec = self.spec(variant)
                if not acts_on(spec):
                    check.errors.append(
                        f"config key connectivity.variants: {variant!r} is a {spec['arch']}"
                        f"{' (gated)' if spec.get('gated') else ''}, which has no intertwiner action to "
                        f"align it by; choose among {', '.join(ARCHS)} (plain, or gated but a ResNet)"
                    )
                elif any(m.endswith("grelu") for m in connectivity["methods"]) and spec["activation"] not in (
                    "relu",
                    "leaky_relu",
                ):
                    check.errors.append(
                        f"config key connectivity.methods: G_ReLU alignment needs a positively homogeneous "
                        f"activation, but {variant!r} has {spec['activation']}; use the permutation methods "
                        "alone, or drop the variant"
                    )
