"""Linear mode connectivity's plan: the aligned pairs, and each variant's architecture family.

A part of :class:`intertwine.workflow.plan.Plan`, which is every stage's part (found through the stage
registry) and the core: a method here can use the core's and other stages' (``self.spec``,
``self.zoo_seeds``)."""

from __future__ import annotations

from intertwine.workflow.stages.connectivity.settings import ConnectivityConfig

from intertwine.workflow.planning import ConfigCheck


class ConnectivityPlan:
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

    def connectivity_errors(self, check: ConfigCheck) -> None:
        """The connectivity stage's cross-checks of the config (``Plan.errors``)."""
        connectivity = self.connectivity
        if check.subset("connectivity.variants", connectivity["variants"], self.variants, "zoo.variants"):
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
