"""The model zoo's plan: each variant's seeds, packs of members trained together, each member's
training settings and files.

A part of :class:`intertwine.workflow.plan.Plan`, which composes every stage's part (found through
the stage registry) with its core: a part holds the plan and reads through it what it does not
define (``self.spec``, ``self.zoo_seeds``; :class:`intertwine.workflow.planning.StagePlan`)."""

from __future__ import annotations

import re
from pathlib import Path

from intertwine.workflow.planning import ZOO_TABLES, ConfigCheck, ConfigError, StagePlan
from intertwine.workflow.settings import TrainConfig


class ZooPlan(StagePlan):
    """The zoo stage's part of the plan."""

    def zoo_seeds(self, variant: str) -> range:
        """The seeds the zoo trains for a variant: zoo.seeds, or its zoo.seeds_per_variant entry; for a
        variant taken from checkpoints (zoo.checkpoints), one per file of its folder."""
        if variant in self.zoo["checkpoints"]:
            return range(len(self.imported_files(variant)))
        return range(self.zoo["seeds_per_variant"].get(variant, self.zoo["seeds"]))

    def checkpoint_folder(self, variant: str) -> tuple[str, bool]:
        """(folder, whole_modules) of a variant taken from checkpoints (its zoo.checkpoints entry)."""
        entry = self.zoo["checkpoints"][variant]
        if isinstance(entry, str):
            return entry, False
        return entry["folder"], entry.get("whole_modules", False)

    def imported_files(self, variant: str) -> list[str]:
        """The member files of a variant taken from checkpoints, member s the s-th
        (``zoo.checkpoint_files``)."""
        from intertwine.workflow.zoo import checkpoint_files

        return [str(path) for path in checkpoint_files(self.checkpoint_folder(variant)[0])]

    def imported_file(self, variant: str, seed: int) -> str:
        return self.imported_files(variant)[seed]

    def imported_variants(self, imported: bool = True) -> list[str]:
        """The variants taken from checkpoints (``imported``), or those the zoo trains."""
        return [v for v in self.variants if (v in self.zoo["checkpoints"]) == imported]

    def member_files(self, pattern: str) -> list[str]:
        """``pattern`` (with ``{variant}`` and ``{seed}``) for every member of the zoo."""
        return [pattern.format(variant=v, seed=s) for v in self.variants for s in self.zoo_seeds(v)]

    def pack_size(self, variant: str) -> int:
        """Members of the variant one job trains (zoo.pack_size, or its zoo.pack_size_per_variant entry)."""
        return self.zoo["pack_size_per_variant"].get(variant, self.zoo["pack_size"])

    def packs(self, variant: str) -> list[range]:
        """The variant's packs: consecutive runs of pack_size seeds (the last may be shorter). With
        a pack size of 1 there are none: each member is its own train_member job."""
        size, seeds = self.pack_size(variant), self.zoo_seeds(variant)
        return (
            []
            if size == 1 or variant in self.zoo["checkpoints"]
            else [seeds[i : i + size] for i in range(0, len(seeds), size)]
        )

    @staticmethod
    def pack_dir(variant: str, pack: range) -> str:
        return f"results/zoo/{variant}/packs/seeds{pack[0]}-{pack[-1]}"

    def member_pack(self, variant: str, seed: int) -> str:
        """The directory of the pack that trains this member."""
        return next(self.pack_dir(variant, pack) for pack in self.packs(variant) if seed in pack)

    def packed_variants(self, packed: bool = True) -> str:
        """A regex matching the variants that train in packs (``packed``) or one member per job:
        the two rules that make a member's checkpoint are told apart by it."""
        names = [v for v in self.imported_variants(False) if (self.pack_size(v) > 1) == packed]
        return self.variant_regex(names)

    @staticmethod
    def variant_regex(names: list[str]) -> str:
        """A regex matching exactly the variants ``names`` (none: a regex that matches nothing)."""
        return "|".join(re.escape(name) for name in names) or "(?!)"

    def train_block(self, variant: str | None = None) -> dict:
        """The training settings of a variant's members: zoo.training with its per-variant
        overrides (``None``: zoo.training as written, which rotation trials fine-tune with)."""
        block = self.zoo["training"] | self.zoo["training_per_variant"].get(variant, {})
        return TrainConfig.job_block({"zoo.training": block})

    def member_epochs(self, variant: str) -> int:
        """The epochs a member of the variant trains: zoo.training's ``epochs``, or the epochs its
        ``steps`` take on the training split (the last one cut short)."""
        images = self.dataset_sizes()[0] - self.config["data"]["val_size"]
        return TrainConfig(**self.train_block(variant)).length(images)[0]

    def train_run(self, variant: str | None = None) -> dict:
        """The training settings beside ``train_block`` that cannot change a result
        (``eval_batch_size``): the rules pass them as ``resources``, not ``params``."""
        block = self.zoo["training"] | self.zoo["training_per_variant"].get(variant, {})
        return TrainConfig.run_block({"zoo.training": block})

    @property
    def zoo_figures(self) -> list[str]:
        return self.figure_files(["results/figures/zoo_accuracy.png"]) + ["results/tables/zoo_summary.csv"]

    @property
    def zoo_outputs(self) -> list[str]:
        return ZOO_TABLES + self.zoo_figures

    def pack_features(self, variant: str, first: int, last: int) -> list[str]:
        """``features_checkpoint`` of each member of a pack."""
        return [path for seed in range(first, last + 1) for path in self.features_checkpoint(variant, seed)]

    def features_checkpoint(self, variant: str, seed: int) -> list[str]:
        """A gated FL variant's feature network: the checkpoint of the same seed of the variant
        its ``gated.features_from`` names (a DAG dependency); nothing for other variants."""
        gated = self.spec(variant).get("gated")
        if gated is None or gated["regime"] != "fl":
            return []
        return [f"results/zoo/{gated['features_from']}/seed{seed}.pt"]

    def members(self, key: str, variant: str, count: int) -> range:
        """Seeds 0 .. count-1 of a variant, which the zoo must have trained."""
        if count > len(self.zoo_seeds(variant)):
            raise ConfigError(
                f"config key {key}: {count} seeds of {variant!r} asked for, but the "
                f"zoo trains {len(self.zoo_seeds(variant))}"
            )
        return range(count)

    def _class_count_errors(self, check: ConfigCheck) -> None:
        """On an image-folder data set, each variant's head has as many classes as the folder has
        class folders (known before the data job runs)."""
        data = self.config["data"]
        if data["dataset"] != "image_folder":
            return
        from intertwine.data.image_folder import count_split_images, split_folders_problem

        root = data["image_folder"]["root"]
        if split_folders_problem(root):
            return  # named by the image counts' check
        classes = sorted(count_split_images(root)["train"])
        for variant in self.variants:
            if self.spec(variant)["num_classes"] != len(classes):
                check.errors.append(
                    f"config key zoo.variants.{variant}.num_classes: {self.spec(variant)['num_classes']}, but "
                    f"data.image_folder.root ({root}) has {len(classes)} classes ({', '.join(classes[:10])}"
                    f"{' ...' if len(classes) > 10 else ''}); set num_classes: {len(classes)}"
                )

    def _imported_errors(self, check: ConfigCheck) -> None:
        """Variants taken from checkpoints: known variants, a folder with member files, no seed
        count of their own, no training settings, no feature network."""
        if not check.subset("zoo.checkpoints", self.zoo["checkpoints"], self.variants, "zoo.variants"):
            return
        for variant in self.zoo["checkpoints"]:
            key = f"zoo.checkpoints.{variant}"
            folder, _ = self.checkpoint_folder(variant)
            from intertwine.workflow.zoo import FOREIGN_SUFFIXES

            if not self.imported_files(variant):
                check.errors.append(
                    f"config key {key}: {folder} "
                    + (
                        "holds no checkpoint files"
                        if Path(folder).expanduser().is_dir()
                        else "is not a folder"
                    )
                    + f" ({', '.join(FOREIGN_SUFFIXES)}); point it at the folder of the variant's checkpoints"
                )
            for block in ("seeds_per_variant", "pack_size_per_variant", "training_per_variant"):
                if variant in self.zoo[block]:
                    check.errors.append(
                        f"config key zoo.{block}.{variant}: {variant!r} is taken from checkpoints "
                        f"({key}), not trained: its members are the folder's files; remove the entry"
                    )
            if (self.spec(variant).get("gated") or {}).get("regime") == "fl":
                check.errors.append(
                    f"config key {key}: a gated FL variant takes its feature network from another "
                    "variant's member when it trains; taken from checkpoints it trains not: use regime "
                    "standalone or fr in its spec"
                )

    zoo_claims_tables = {"zoo": "results/tables/zoo.parquet"}

    @property
    def zoo_claims_settings(self) -> dict:
        """The zoo's settings the claims read (``claims.SETTINGS``): every variant's spec, and the
        split the kept weights were selected on."""
        return {
            "batch_norm": {v: self.spec(v).get("batch_norm", True) for v in self.variants},
            "select_on": self.train_block()["select_on"],
            "variant_specs": {v: self.spec(v) for v in self.variants},
        }

    @property
    def zoo_claims_scale(self) -> dict:
        from intertwine.workflow.paper import PAPER_EPOCHS, PAPER_MEMBERS

        epochs = self.zoo["training"]["epochs"]
        members = sorted({len(self.zoo_seeds(v)) for v in self.variants}) or [0]
        span = f"{members[0]}" if len(members) == 1 else f"{members[0]}-{members[-1]}"
        return {
            "zoo_epochs": epochs,
            "zoo_dataset": self.config["data"]["dataset"],
            "zoo": f"zoo: {epochs} of the paper's {PAPER_EPOCHS} epochs, {span} of its {PAPER_MEMBERS} members "
            f"per variant, {self.config['data']['dataset']}",
        }

    def zoo_errors(self, check: ConfigCheck) -> None:
        """The zoo stage's cross-checks of the config (``Plan.errors``)."""
        check.subset("zoo.seeds_per_variant", self.zoo["seeds_per_variant"], self.variants, "zoo.variants")
        check.subset(
            "zoo.pack_size_per_variant", self.zoo["pack_size_per_variant"], self.variants, "zoo.variants"
        )
        self._imported_errors(check)
        for variant in self.variants:
            if self.spec(variant)["arch"] == "custom":  # the factory imports and builds, its sites are found
                try:
                    self.variant_sites(variant)
                except (ValueError, TypeError) as err:
                    check.errors.append(f"config key zoo.variants.{variant}: {err}")
        for variant in self.settling_variants:
            if self.pack_size(variant) > 1:
                check.errors.append(
                    f"config key zoo.training_per_variant.{variant}.gate_probe_images: the members of "
                    f"{variant!r} train as packs of {self.pack_size(variant)}, which record no gate "
                    "patterns; set zoo.pack_size_per_variant." + variant + ": 1 or drop gate_probe_images"
                )
        for variant in self.variants:
            # A gate permutation's length and shapes are checked where the network is built: at
            # plan time, not in the first training job.
            if (self.spec(variant).get("gated") or {}).get("gate_perm") is not None:
                try:
                    self.variant_sites(variant)
                except ValueError as err:
                    check.errors.append(f"config key zoo.variants.{variant}: {err}")
        check.errors += self._image_count_errors()
        self._class_count_errors(check)
        for variant in self.variants:
            gated = self.spec(variant).get("gated")
            if gated is None or gated["regime"] != "fl":
                continue
            source = gated["features_from"]
            key = f"zoo.variants.{variant}.gated.features_from"
            if source not in self.variants:
                check.errors.append(
                    f"config key {key}: {source!r} is not a zoo variant; name one of {self.variants}"
                )
                continue
            plain = self.spec(variant) | {"gated": None}
            if self.spec(source) != plain:
                check.errors.append(
                    f"config key {key}: {source!r} ({self.zoo['variants'][source]}) is not the plain form of "
                    f"{variant!r}: its feature network must be the same architecture without gated"
                )
            elif len(self.zoo_seeds(source)) < len(self.zoo_seeds(variant)):
                check.errors.append(
                    f"config key {key}: member s of {variant!r} takes member s of {source!r}, which trains "
                    f"{len(self.zoo_seeds(source))} seeds for {len(self.zoo_seeds(variant))}; raise "
                    f"zoo.seeds_per_variant.{source}"
                )
        if check.subset(
            "zoo.training_per_variant", self.zoo["training_per_variant"], self.variants, "zoo.variants"
        ):
            for variant, override in self.zoo["training_per_variant"].items():
                check.overrides(f"zoo.training_per_variant.{variant}", override, "zoo.training")
