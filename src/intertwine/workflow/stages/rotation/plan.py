"""The rotation penalty's plan: the trials (member, site, group, trial) and their settings.

A part of :class:`intertwine.workflow.plan.Plan`, which is every stage's part (found through the stage
registry) and the core: a method here can use the core's and other stages' (``self.spec``,
``self.zoo_seeds``)."""

from __future__ import annotations

import functools

from intertwine.workflow.stages.rotation.settings import RotationConfig

from intertwine.workflow.planning import ConfigCheck


class RotationPlan:
    """The rotation stage's part of the plan."""

    def rotation_sites(self, variant: str) -> list[str]:
        return self.rotation["sites"] or self.cut_site_names(variant)

    @functools.cached_property
    def rotation_trials(self) -> list[str]:
        return [
            f"results/rotation/{variant}/seed{seed}/{site}/{group}/trial{trial}.parquet"
            for variant, groups in self.rotation["variants"].items()
            for seed in self.members("rotation.seeds", variant, self.rotation["seeds"])
            for site in self.rotation_sites(variant)
            for group in groups
            for trial in range(self.rotation["trials"])
        ]

    @property
    def rotation_block(self) -> dict:
        return RotationConfig.job_block({"rotation": self.rotation})

    @property
    def rotation_outputs(self) -> list[str]:
        if not self.rotation_trials:
            return []
        return ["results/tables/rotation.parquet"] + self.figure_files(
            ["results/figures/rotation_penalty.png"]
        )

    def rotation_errors(self, check: ConfigCheck) -> None:
        """The rotation stage's cross-checks of the config (``Plan.errors``)."""
        if check.subset("rotation.variants", self.rotation["variants"], self.variants, "zoo.variants"):
            for variant in self.rotation["variants"]:
                check.subset(
                    "rotation.sites",
                    self.rotation["sites"],
                    self.cut_site_names(variant),
                    f"the sites of {variant}",
                )
            check.members("rotation.seeds", self.rotation["variants"], self.rotation["seeds"])
