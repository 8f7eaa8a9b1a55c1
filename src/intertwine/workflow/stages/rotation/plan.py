"""The rotation penalty's plan: the trials (member, site, group, trial) and their settings.

A part of :class:`intertwine.workflow.plan.Plan`, which composes every stage's part (found through
the stage registry) with its core: a part holds the plan and reads through it what it does not
define (``self.spec``, ``self.zoo_seeds``; :class:`intertwine.workflow.planning.StagePlan`)."""

from __future__ import annotations

import functools

from intertwine.workflow.planning import ConfigCheck, StagePlan
from intertwine.workflow.stages.rotation.settings import RotationConfig


class RotationPlan(StagePlan):
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

    rotation_claims_tables = {"rotation": "results/tables/rotation.parquet"}

    @property
    def rotation_claims_settings(self) -> dict:
        return {
            "rotation_variants": list(self.rotation["variants"]),
            "rotation_activation": {v: self.spec(v)["activation"] for v in self.rotation["variants"]},
        }

    @property
    def rotation_claims_scale(self) -> dict:
        return {
            "rotation": f"rotation: {self.rotation['trials']} of the paper's 10 trials, {self.rotation['epochs']} "
            "of its 50 fine-tuning epochs"
        }

    def rotation_errors(self, check: ConfigCheck) -> None:
        """The rotation stage's cross-checks of the config (``Plan.errors``)."""
        if check.subset(
            "rotation.variants", self.rotation["variants"], self.variants, "zoo.variants"
        ) and check.capable("rotation.variants", self.rotation["variants"], "pieces"):
            for variant in self.rotation["variants"]:
                check.subset(
                    "rotation.sites",
                    self.rotation["sites"],
                    self.cut_site_names(variant),
                    f"the sites of {variant}",
                )
            check.members("rotation.seeds", self.rotation["variants"], self.rotation["seeds"])
