"""Network dissection's plan: the members and external models dissected, their sites, the masks.

A part of :class:`intertwine.workflow.plan.Plan`, which composes every stage's part (found through
the stage registry) with its core: a part holds the plan and reads through it what it does not
define (``self.spec``, ``self.zoo_seeds``; :class:`intertwine.workflow.planning.StagePlan`)."""

from __future__ import annotations

import functools

from intertwine.workflow.planning import ConfigCheck, StagePlan
from intertwine.workflow.stages.dissection.settings import DissectionConfig


class DissectionPlan(StagePlan):
    """The dissection stage's part of the plan."""

    def dissection_sites(self, variant: str) -> list[str]:
        """The variant's configured sites, or each stage's output and one inside a block."""
        from intertwine.dissection import default_sites

        chosen = self.dissection["sites"].get(variant)
        return default_sites(self.variant_sites(variant)) if chosen is None else chosen

    def mask_site(self, variant: str) -> str:
        """The top-units figure's site: the variant's last dissected site on the residual stream."""
        inside = {site.name: site.inside_residual for site in self.variant_sites(variant)}
        chosen = self.dissection_sites(variant)
        return ([site for site in chosen if not inside[site]] or chosen)[-1]

    def external_sites(self, name: str) -> list[str]:
        from intertwine.models import imagenet

        model = self.dissection["external"][name]
        return model.get("sites") or imagenet.DEFAULT_SITES[model["arch"]]

    def dissection_block(self, kind: str | None = None) -> dict:
        """The settings a dissection job reads (``kind="masks"``: the masks figure's too); the probe
        images are drawn with the data set's `shapes` options."""
        block = DissectionConfig.job_block({"dissection": self.dissection}, kind)
        shapes = {
            k: v
            for k, v in self.config["data"]["shapes"].items()
            if k not in ("train_size", "test_size", "image_size")
        }
        return block | {"probe": block["probe"] | {"shapes": shapes}}

    @functools.cached_property
    def dissection_jobs(self) -> list[str]:
        return [
            f"results/dissection/{variant}/seed{seed}.parquet"
            for variant in self.dissection["variants"]
            for seed in self.members("dissection.seeds", variant, self.dissection["seeds"])
        ] + [f"results/dissection/external/{name}.parquet" for name in self.dissection["external"]]

    @functools.cached_property
    def category_sites(self) -> dict[str, str]:
        """The category figure's site per model: the masks figure's site, or an ImageNet model's
        last residual-stream site."""
        from intertwine.models import imagenet

        zoo = {variant: self.mask_site(variant) for variant in self.dissection["variants"]}
        return zoo | {
            name: (
                [s for s in self.external_sites(name) if imagenet.on_residual_stream(s)]
                or self.external_sites(name)
            )[-1]
            for name in self.dissection["external"]
        }

    @property
    def dissection_masks(self) -> list[str]:
        return [f"results/figures/dissection_masks_{variant}.png" for variant in self.dissection["variants"]]

    DISSECTION_FIGURES = [
        "results/figures/dissection_fraction.png",
        "results/figures/dissection_categories.png",
    ]

    @property
    def dissection_outputs(self) -> list[str]:
        if not self.dissection_jobs:
            return []
        return [
            "results/tables/dissection.parquet",
            "results/tables/dissection_units.parquet",
            "results/tables/dissection_summary.csv",
        ] + self.figure_files(self.DISSECTION_FIGURES + self.dissection_masks)

    dissection_claims_tables = {"dissection": "results/tables/dissection.parquet"}

    @property
    def dissection_claims_settings(self) -> dict:
        return {
            "residual_activation": {
                v: self.spec(v)["residual_activation"]
                for v in self.dissection["variants"]
                if "residual_activation" in self.spec(v)
            },
        }

    @property
    def dissection_claims_scale(self) -> dict:
        return {"dissection": "dissection: generated probe images (the paper: Broden, ImageNet models)"}

    def dissection_errors(self, check: ConfigCheck) -> None:
        """The dissection stage's cross-checks of the config (``Plan.errors``)."""
        dissection = self.dissection
        if check.subset("dissection.variants", dissection["variants"], self.variants, "zoo.variants"):
            for variant in dissection["variants"]:
                if self.spec(variant)["arch"] == "cct":
                    check.errors.append(
                        f"config key dissection.variants: {variant!r} is a transformer, whose "
                        "sites are token sequences, not the spatial maps dissection overlays on "
                        "concept masks; dissect convolutional variants"
                    )
            check.members("dissection.seeds", dissection["variants"], dissection["seeds"])
            if check.subset(
                "dissection.sites", dissection["sites"], dissection["variants"], "dissection.variants"
            ):
                for variant, chosen in dissection["sites"].items():
                    check.subset(
                        f"dissection.sites.{variant}",
                        chosen,
                        self.site_names(variant),
                        f"the sites of {variant}",
                    )
        if dissection["external"] and not dissection["probe"]["broden"]:
            check.errors.append(
                "config key dissection.external: ImageNet models are dissected on Broden; "
                "set dissection.probe.broden to your Broden directory (e.g. broden1_224)"
            )
