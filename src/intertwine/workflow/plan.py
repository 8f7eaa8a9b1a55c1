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
cross-checks) and each stage's part, ``<Stage>Plan`` in its folder's ``plan.py``
(``intertwine.workflow.stages.stitching.plan.StitchingPlan``), found through the stage registry;
a stage's part names its outputs ``<stage>_outputs``. Cross-checks of the config that the schema
cannot express are in `Plan.errors()`: each names the config key and the fix. Methods that build
models cache them (`variant_sites`).
"""

from __future__ import annotations

from intertwine.data.folder_checks import image_folder_errors
from intertwine.workflow import stages
from intertwine.workflow.planning import (  # noqa: F401  (importable from here, as before)
    GATED_ARCHS,
    MAX_PARAMETERS,
    ZOO_TABLES,
    ConfigCheck,
    ConfigError,
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


class Plan(*stages.plan_parts()):
    """The jobs and outputs of every stage for one validated config (schema defaults filled)."""

    def __init__(self, config: dict):
        self.config = config
        self.zoo = config["zoo"]
        self.rotation = config["rotation"]
        self.symmetry = config["symmetry"]
        self.stitching = config["stitching"]
        self.similarity = config["similarity"]
        self.connectivity = config["connectivity"]
        self.dissection = config["dissection"]
        self.gated = config["gated"]
        self.deqntk = config["deqntk"]
        self.pullback = config["pullback"]
        self.variants = list(self.zoo["variants"])

    # --- shared -------------------------------------------------------------------------------

    def spec(self, variant: str) -> dict:
        from intertwine.models import normalize_spec

        return normalize_spec(self.zoo["variants"][variant])

    def variant_sites(self, variant: str) -> list:
        """The variant's sites (name, channels, inside_residual), in forward order."""
        return list(spec_sites(as_json(self.zoo["variants"][variant])))

    def site_names(self, variant: str) -> list[str]:
        return [site.name for site in self.variant_sites(variant)]

    def cut_site_names(self, variant: str) -> list[str]:
        """The sites stitching and the rotation penalty can cut the variant at (``models.cut_sites``)."""
        return list(spec_cut_sites(as_json(self.zoo["variants"][variant])))

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

    # --- zoo ----------------------------------------------------------------------------------

    def members(self, key: str, variant: str, count: int) -> range:
        """Seeds 0 .. count-1 of a variant, which the zoo must have trained."""
        if count > len(self.zoo_seeds(variant)):
            raise ConfigError(
                f"config key {key}: {count} seeds of {variant!r} asked for, but the "
                f"zoo trains {len(self.zoo_seeds(variant))}"
            )
        return range(count)

    # --- symmetry -----------------------------------------------------------------------------

    # --- rotation -----------------------------------------------------------------------------

    # --- stitching ----------------------------------------------------------------------------

    # --- similarity ---------------------------------------------------------------------------

    # --- linear mode connectivity ---------------------------------------------------------------

    # --- dissection ---------------------------------------------------------------------------

    # --- gated networks -----------------------------------------------------------------------

    # --- DEQ neural tangent kernel ----------------------------------------------------------

    def dataset_sizes(self) -> tuple[int, int]:
        """(training images, validation split included; test images) of the configured data set."""
        data = self.config["data"]
        if data["dataset"] == "shapes":
            return data["shapes"]["train_size"], data["shapes"]["test_size"]
        if data["dataset"] == "mnist":
            return 60_000, 10_000
        return 50_000, 10_000  # CIFAR-10 and CIFAR-100

    # --- excitation pullbacks ------------------------------------------------------------------

    # --- the claims scorecard -----------------------------------------------------------------

    CLAIMS_TABLES = {
        "zoo": "results/tables/zoo.parquet",
        "symmetry": "results/tables/symmetry.parquet",
        "rotation": "results/tables/rotation.parquet",
        "stitching": "results/tables/stitching.parquet",
        "similarity": "results/tables/similarity.parquet",
        "connectivity": "results/tables/connectivity.parquet",
        "dissection": "results/tables/dissection.parquet",
        "gated_findings": "results/tables/gated_findings.csv",
        "pullback_symmetry": "results/tables/pullback_symmetry.parquet",
        "pullback_settling": "results/tables/pullback_settling.parquet",
        "deqntk": "results/tables/deqntk.parquet",
    }
    CLAIMS_OUTPUTS = ["results/tables/claims.csv", "results/tables/claims.rst"]

    @property
    def claims_tables(self) -> dict[str, str]:
        """The tables the claims job reads: those the configured stages write (a claim whose
        table is missing reads `not run`)."""
        made = set(self.stage_outputs)
        return {name: path for name, path in self.CLAIMS_TABLES.items() if path in made}

    @property
    def claims_figures(self) -> list[str]:
        """The report's figures and summaries a scorecard row can link to (file names)."""
        return sorted(
            {path.rpartition("/")[2] for path in self.stage_outputs if path.endswith((".png", ".csv"))}
        )

    @property
    def claims_settings(self) -> dict:
        """What the verdicts read of the config: which variants each claim tests, the settings whose
        paper and corrected modes the scorecard names, and the run's scale beside the paper's."""

        def plain_relu(variant):
            spec = self.spec(variant)
            return spec["activation"] == "relu" and not spec.get("gated")

        stitched = self.stitching["variants"]
        return {
            "myrtle_variants": [
                v
                for v in stitched
                if self.spec(v)["arch"] == "myrtle"
                and plain_relu(v)
                and not self.spec(v).get("constant_width")
            ],
            "relu_similarity_variants": [v for v in self.similarity["variants"] if plain_relu(v)],
            "site_order": {v: self.site_names(v) for v in self.similarity["variants"]},
            # the sites inside residual blocks, in forward order (C4.resnet18 leaves out the paper's
            # "layer 70", the penultimate of them)
            "similarity_inside_residual": {
                v: [site.name for site in self.variant_sites(v) if site.inside_residual]
                for v in self.similarity["variants"]
            },
            "residual_activation": {
                v: self.spec(v)["residual_activation"]
                for v in self.dissection["variants"]
                if "residual_activation" in self.spec(v)
            },
            "leaky_slopes": self.leaky_slopes,
            "batch_norm": {v: self.spec(v).get("batch_norm", True) for v in self.variants},
            "rotation_variants": list(self.rotation["variants"]),
            "rotation_activation": {v: self.spec(v)["activation"] for v in self.rotation["variants"]},
            "select_on": self.train_block()["select_on"],
            "stitching_init": self.stitching["init"],
            "stitching_optimizer": self.stitching["optimizer"],
            "stitching_momentum": self.stitching["momentum"],
            "stitching_permutation_update": self.stitching["permutation_update"],
            "stitching_batch_norm_refresh": self.stitching["batch_norm_refresh"],
            "connectivity_barrier": self.connectivity["barrier"],
            "connectivity_families": {v: self.architecture_family(v) for v in self.connectivity["variants"]},
            "variant_specs": {v: self.spec(v) for v in self.variants},
            "scale": self.claims_scale,
        }

    @property
    def claims_scale(self) -> dict:
        """The run's budget beside the paper's (Godfrey et al., appendix D), per stage, in words."""
        from intertwine.workflow.paper import PAPER_EPOCHS, PAPER_MEMBERS, PAPER_STITCH_EPOCHS

        n_train, n_test = self.dataset_sizes()
        n_train -= self.config["data"]["val_size"]
        epochs = self.zoo["training"]["epochs"]
        members = sorted({len(self.zoo_seeds(v)) for v in self.variants}) or [0]
        span = f"{members[0]}" if len(members) == 1 else f"{members[0]}-{members[-1]}"
        stitch_images = self.stitching["train_images"] or n_train
        samples = self.similarity["samples"] or n_test
        return {
            "zoo_epochs": epochs,
            "zoo_dataset": self.config["data"]["dataset"],
            "zoo": f"zoo: {epochs} of the paper's {PAPER_EPOCHS} epochs, {span} of its {PAPER_MEMBERS} members "
            f"per variant, {self.config['data']['dataset']}",
            "rotation": f"rotation: {self.rotation['trials']} of the paper's 10 trials, {self.rotation['epochs']} "
            "of its 50 fine-tuning epochs",
            "stitching": f"stitching: {self.stitching['epochs']} of the paper's {PAPER_STITCH_EPOCHS} epochs on "
            f"{stitch_images:,} training images",
            "similarity": f"similarity: {samples:,} of {n_test:,} test images (the paper: the whole test set)",
            "dissection": "dissection: generated probe images (the paper: Broden, ImageNet models)",
            "connectivity": f"connectivity: {self.connectivity['lambdas']} points along the line (Ainsworth et "
            f"al.: 25), {self.connectivity['test_images'] or n_test:,} test images",
        }

    # --- everything ---------------------------------------------------------------------------

    @property
    def stage_outputs(self) -> list[str]:
        """Every stage's outputs (``<stage>_outputs``), in report order."""
        return [path for stage in stages.with_part("plan") for path in getattr(self, f"{stage}_outputs")]

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
        for name, spec in self.zoo["variants"].items():
            try:
                normalize_spec(spec)
            except ValueError as err:
                check.errors.append(f"config key zoo.variants.{name}: {err}")
        if not check.errors:
            self._model_size_errors(check)
        if check.errors:
            return check.errors
        for stage in stages.with_part("plan"):
            stage_errors = getattr(self, f"{stage}_errors", None)
            if stage_errors is not None:
                stage_errors(check)
        return check.errors

    def _model_size_errors(self, check: ConfigCheck) -> None:
        """Each variant's parameter count, from its shapes (built on the meta device), at most
        ``MAX_PARAMETERS``: a model too large to train is named here, not by the allocator."""
        for name, spec in self.zoo["variants"].items():
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
        """Image counts the data set's splits must hold, each under the key the user set: a job
        takes the first n images of a split and would otherwise take fewer without a word."""
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
        if train_split < 1:  # checked first: every count of training images below rests on it
            larger = " (or raise data.shapes.train_size)" if dataset == "shapes" else ""
            message = (
                f"config key data.val_size: {val_size} validation images are held out of the "
                f"{train_size} training images of {dataset}, leaving {max(train_split, 0)} to train on; "
                f"set data.val_size to at most {train_size - 1}{larger}"
            )
            return [message]
        checks = []
        if self.symmetry["seeds"]:
            checks.append(("symmetry.images", self.symmetry["images"], test_size, "test"))
        if self.similarity["variants"]:
            checks.append(("similarity.samples", self.similarity["samples"], test_size, "test"))
        if self.gated["variants"]:
            checks.append(("gated.probe_images", self.gated["probe_images"], test_size, "test"))
        if self.pullback["variants"]:
            checks.append(("pullback.images", self.pullback["images"], test_size, "test"))
            checks.append(("pullback.probe_images", self.pullback["probe_images"], train_split, "training"))
        # An image-folder copy holds what was copied, not the data set's full splits.
        folder_errors = image_folder_errors(self.config["data"], [(k, n, what) for k, n, _, what in checks])
        if folder_errors:
            return folder_errors
        return [
            f"config key {key}: {n} {what} images asked for, but the {what} split of {dataset} has "
            f"{available}; ask for at most {available}"
            + (" (or null for the whole split)" if key == "similarity.samples" else "")
            + (" (data.val_size of the training images are held out)" if what == "training" else "")
            for key, n, available, what in checks
            if n is not None and n > available
        ]
