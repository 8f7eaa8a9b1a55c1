"""The job plan: from a validated config, which jobs each stage runs, what each job is given, and
which files each stage writes. Plain Python, no Snakemake: the workflow's rules read it, the
tests check it, and a person can ask it what a config would run (`Plan(config).stitch_jobs`).

How a setting flows, e.g. `stitching.lr`:
  1. the config YAML, or the default in `config.schema.yaml` (filled in by validation);
  2. `Plan.stitch_block(method)`: the settings a job of that method reads, one `StitchConfig`
     field each (`settings.py`), as the rule's `params` (so a change reruns those jobs only);
     a setting that cannot change a result (`zoo.training.eval_batch_size`: `Plan.train_run`)
     goes to the job as a `resources:` entry instead, which no rerun trigger reads;
  3. the rule's shell command passes them as JSON to `intertwine stitch-pair --config`;
  4. the job builds `StitchConfig.from_block(...)`, and `stitching.fit` makes its optimiser.

`Plan` is the core (here: what every stage uses, the scorecard's inputs, the config's
cross-checks), which names no stage, composing each stage's part, ``<Stage>Plan`` in its folder's
``plan.py`` (``intertwine.workflow.stages.stitching.plan.StitchingPlan``), found through the stage
registry: one object per stage holding the plan (``planning.StagePlan``, which lists what the core
asks of a part: ``<stage>_outputs``, ``<stage>_errors``, ``<stage>_claims_settings``, ...).
Cross-checks of the config that the schema cannot express are in `Plan.errors()`: each names the
config key and the fix. Methods that build models cache them (`variant_sites`).
"""

from __future__ import annotations

from intertwine.data.folder_checks import image_folder_errors, split_word
from intertwine.workflow import stages
from intertwine.workflow.planning import (  # noqa: F401  (importable from here, as before)
    GATED_ARCHS,
    MAX_PARAMETERS,
    ZOO_TABLES,
    ConfigCheck,
    ConfigError,
    ImageCount,
    StagePlan,
    as_json,
    distinct_pairs,
    draw_pairs,
    spec_cut_sites,
    spec_parameters,
    spec_sites,
)


# The most the procedural data set may take, in bytes (ours): it is generated in one job and held in
# memory by every job that reads it; a size that does not fit is named here, not by the allocator.
MAX_SHAPES_BYTES = 16 * 2**30


class Plan:
    """The jobs and outputs of every stage for one validated config (schema defaults filled): the
    core (what every stage uses, the scorecard's inputs, the config's cross-checks) composing each
    stage's part, ``<Stage>Plan`` of its folder's ``plan.py``, one object per stage holding this
    plan. The plan answers for each part (``Plan(config).stitch_jobs`` is the stitching part's):
    a name the core lacks is the first part's (in registry order) that defines it."""

    def __init__(self, config: dict):
        self.config = config
        self.variants = list(config["zoo"]["variants"])
        # Each stage's config block under its name (``self.stitching``), which its part reads
        # through the plan as ``self.<stage>``.
        for stage in stages.with_part("plan"):
            setattr(self, stage, config[stage])
        self.parts = {stage: part(self) for stage, part in stages.plan_parts().items()}
        self._part_of = {}
        for stage_part in self.parts.values():
            for name in set(dir(type(stage_part))) - set(dir(StagePlan)):
                self._part_of.setdefault(name, stage_part)

    def __getattr__(self, name: str):
        # Called only for a name the core lacks: a stage part's method, property or constant.
        part_of = self.__dict__.get("_part_of")
        if part_of is None or name not in part_of:
            raise AttributeError(
                f"the plan has no {name!r}: neither its core nor a stage's part "
                "(intertwine.workflow.stages.<stage>.plan) defines it"
            )
        return getattr(part_of[name], name)

    def _each_part(self, hook: str):
        """(stage, bound ``<stage>_<hook>``) of every part that defines it, in registry order."""
        for stage, stage_part in self.parts.items():
            if hasattr(type(stage_part), f"{stage}_{hook}"):
                yield stage, getattr(stage_part, f"{stage}_{hook}")

    # --- shared -------------------------------------------------------------------------------

    def spec(self, variant: str) -> dict:
        from intertwine.models import normalize_spec

        return normalize_spec(self.config["zoo"]["variants"][variant])

    def variant_sites(self, variant: str) -> list:
        """The variant's sites (name, channels, inside_residual), in forward order."""
        return list(spec_sites(as_json(self.config["zoo"]["variants"][variant])))

    def site_names(self, variant: str) -> list[str]:
        return [site.name for site in self.variant_sites(variant)]

    def cut_site_names(self, variant: str) -> list[str]:
        """The sites stitching and the rotation penalty can cut the variant at (``models.cut_sites``)."""
        return list(spec_cut_sites(as_json(self.config["zoo"]["variants"][variant])))

    def plain_relu(self, variant: str) -> bool:
        """Whether the variant is a plain ReLU network (not gated)."""
        spec = self.spec(variant)
        return spec["activation"] == "relu" and not spec.get("gated")

    def other_formats(self, pngs: list[str]) -> list[str]:
        """The figures' files besides their .png (which the report shows), one per configured format."""
        return [
            f"{png.removesuffix('.png')}.{ext}"
            for png in pngs
            for ext in self.config["figures"]["formats"]
            if ext != "png"
        ]

    def figure_files(self, pngs: list[str]) -> list[str]:
        """The .png files and their other formats."""
        return pngs + self.other_formats(pngs)

    def dataset_sizes(self) -> tuple[int, int]:
        """(training images, validation split included; test images) of the configured data set."""
        data = self.config["data"]
        if data["dataset"] == "shapes":
            return data["shapes"]["train_size"], data["shapes"]["test_size"]
        if data["dataset"] == "mnist":
            return 60_000, 10_000
        if data["dataset"] == "image_folder":  # what the folder holds (none while it is not one)
            from intertwine.data.image_folder import count_split_images, split_folders_problem

            root = data["image_folder"]["root"]
            if split_folders_problem(root):
                return 0, 0
            counts = count_split_images(root)
            return sum(counts["train"].values()), sum(counts["test"].values())
        return 50_000, 10_000  # CIFAR-10 and CIFAR-100

    def image_side(self) -> int:
        """The side of the data set's images, in pixels (for the cluster's estimates): shapes' and an
        image folder's configured size, an image folder's first training image without one, else 32."""
        data = self.config["data"]
        if data["dataset"] == "shapes":
            return data["shapes"]["image_size"]
        if data["dataset"] == "image_folder":
            from intertwine.data.image_folder import first_image_side

            return data["image_folder"]["image_size"] or first_image_side(data["image_folder"]["root"]) or 32
        return 32

    def split_sizes(self) -> tuple[int, int]:
        """(training images once the validation split is held out, test images)."""
        n_train, n_test = self.dataset_sizes()
        return n_train - self.config["data"]["val_size"], n_test

    # --- the claims scorecard -----------------------------------------------------------------

    CLAIMS_OUTPUTS = ["results/tables/claims.csv", "results/tables/claims.rst"]

    @property
    def claims_tables(self) -> dict[str, str]:
        """The tables the claims job reads (each stage's ``<stage>_claims_tables``): those the
        configured stages write (a claim whose table is missing reads `not run`)."""
        made = set(self.stage_outputs)
        return {
            name: path
            for _, tables in self._each_part("claims_tables")
            for name, path in tables.items()
            if path in made
        }

    @property
    def claims_figures(self) -> list[str]:
        """The report's figures and summaries a scorecard row can link to (file names)."""
        return sorted(
            {path.rpartition("/")[2] for path in self.stage_outputs if path.endswith((".png", ".csv"))}
        )

    @property
    def claims_settings(self) -> dict:
        """What the verdicts read of the config (each stage's ``<stage>_claims_settings``: which
        variants each claim tests, the settings whose paper and corrected modes the scorecard
        names) and the run's scale beside the paper's."""
        settings = {}
        for _, stage_settings in self._each_part("claims_settings"):
            settings |= stage_settings
        return settings | {"scale": self.claims_scale}

    @property
    def claims_scale(self) -> dict:
        """The run's budget beside the paper's (Godfrey et al., appendix D), per stage, in words
        (each stage's ``<stage>_claims_scale``)."""
        scale = {}
        for _, stage_scale in self._each_part("claims_scale"):
            scale |= stage_scale
        return scale

    # --- everything ---------------------------------------------------------------------------

    @property
    def stage_outputs(self) -> list[str]:
        """Every stage's outputs (``<stage>_outputs``), in report order."""
        return [
            path
            for stage, stage_part in self.parts.items()
            for path in getattr(stage_part, f"{stage}_outputs")
        ]

    @property
    def all_outputs(self) -> list[str]:
        return self.stage_outputs + self.CLAIMS_OUTPUTS

    def _pairs(self, stage: str, variant: str, count: int, symmetric: bool = False) -> list[tuple[int, int]]:
        return draw_pairs(
            len(self.zoo_seeds(variant)),
            count,
            self.config["seed"],
            stage,
            variant,
            symmetric=symmetric,
            share_members=self.config["pairs_share_members"],
        )

    def errors(self) -> list[str]:
        """Every cross-check of the config the schema cannot express, as messages that name the
        key and the fix (empty when the plan can run): the model specs first (the other checks
        build models from them), then each stage's (``<stage>_errors`` of its part of the plan)."""
        from intertwine.models import normalize_spec

        check = ConfigCheck(self)
        for name, spec in self.config["zoo"]["variants"].items():
            try:
                normalize_spec(spec)
            except ValueError as err:
                check.errors.append(f"config key zoo.variants.{name}: {err}")
        if not check.errors:
            self._model_size_errors(check)
        if check.errors:
            return check.errors
        for _, stage_errors in self._each_part("errors"):
            stage_errors(check)
        return check.errors

    def _model_size_errors(self, check: ConfigCheck) -> None:
        """Each variant's parameter count, from its shapes (built on the meta device), at most
        ``MAX_PARAMETERS``: a model too large to train is named here, not by the allocator."""
        for name, spec in self.config["zoo"]["variants"].items():
            try:
                parameters = spec_parameters(as_json(spec))
            except ValueError:
                continue  # a spec the model refuses: the zoo's plan names it (zoo_errors)
            if parameters > MAX_PARAMETERS:
                check.errors.append(
                    f"config key zoo.variants.{name}: {parameters:.3g} parameters, more than the "
                    f"{MAX_PARAMETERS:.0e} a zoo model may have (4 bytes each, 4 times over in training); "
                    "lower its width_multiplier (or constant_width, depth)"
                )

    def _image_count_errors(self) -> list[str]:
        """Image counts the data set's splits must hold (each stage's ``<stage>_image_counts``), each
        under the key the user set: a job takes the first n images of a split and would otherwise
        take fewer without a word."""
        train_size, test_size = self.dataset_sizes()
        val_size = self.config["data"]["val_size"]
        train_split = train_size - val_size
        dataset = self.config["data"]["dataset"]
        if dataset == "shapes":
            shapes = self.config["data"]["shapes"]
            stored = (train_size + test_size) * 3 * shapes["image_size"] ** 2  # uint8 pixels
            if stored > MAX_SHAPES_BYTES:
                return [
                    f"config key data.shapes: {train_size} + {test_size} images of "
                    f"{shapes['image_size']} x {shapes['image_size']} pixels are {stored / 2**30:.3g} GiB, "
                    f"more than the {MAX_SHAPES_BYTES // 2**30} GiB the data set may take; lower "
                    "data.shapes.train_size, test_size or image_size"
                ]
        if dataset == "image_folder":
            from intertwine.data.image_folder import split_folders_problem

            problem = split_folders_problem(self.config["data"]["image_folder"]["root"])
            if problem:
                return [problem]
        if train_split < 1:  # checked first: every count of training images below rests on it
            larger = " (or raise data.shapes.train_size)" if dataset == "shapes" else ""
            message = (
                f"config key data.val_size: {val_size} validation images are held out of the "
                f"{train_size} training images of {dataset}, leaving {max(train_split, 0)} to train on; "
                f"set data.val_size to at most {train_size - 1}{larger}"
            )
            return [message]
        available = {"test": test_size, "training": train_split, "stored training": train_size}
        notes = {
            "test": "",
            "training": " (data.val_size of the training images are held out)",
            "stored training": " (its validation images included)",
        }
        counts = [count for _, image_counts in self._each_part("image_counts") for count in image_counts()]
        # An image-folder copy holds what was copied, not the data set's full splits.
        folder_errors = image_folder_errors(self.config["data"], [(c.key, c.asked, c.split) for c in counts])
        if folder_errors:
            return folder_errors
        return [
            f"config key {count.key}: {count.asked} {split_word(count.split)} images asked for, "
            f"but the {split_word(count.split)} split of {dataset} has {available[count.split]}; "
            f"ask for at most {available[count.split]}" + count.hint + notes[count.split]
            for count in counts
            if count.asked is not None and count.asked > available[count.split]
        ]
