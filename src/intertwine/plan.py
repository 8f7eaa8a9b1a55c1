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

import dataclasses

import jsonschema

from intertwine.settings import (
    StitchConfig,
    schema_block,
)
from intertwine.workflow import stages
from intertwine.workflow.planning import (  # noqa: F401  (importable from here, as before)
    GATED_ARCHS,
    ZOO_TABLES,
    ConfigError,
    as_json,
    distinct_pairs,
    draw_pairs,
    spec_cut_sites,
    spec_sites,
)


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
            "residual_variants": [
                v for v in stitched if self.spec(v)["arch"] in ("resnet20", "resnet18") and plain_relu(v)
            ],
            "relu_similarity_variants": [v for v in self.similarity["variants"] if plain_relu(v)],
            "site_order": {v: self.site_names(v) for v in self.similarity["variants"]},
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
            "scale": self.claims_scale,
        }

    @property
    def claims_scale(self) -> dict:
        """The run's budget beside the paper's (Godfrey et al., appendix D), per stage, in words."""
        from intertwine.paper import PAPER_EPOCHS, PAPER_MEMBERS, PAPER_STITCH_EPOCHS

        n_train, n_test = self.dataset_sizes()
        n_train -= self.config["data"]["val_size"]
        epochs = self.zoo["training"]["epochs"]
        members = sorted({len(self.zoo_seeds(v)) for v in self.variants}) or [0]
        span = f"{members[0]}" if len(members) == 1 else f"{members[0]}-{members[-1]}"
        stitch_images = self.stitching["train_images"] or n_train
        samples = self.similarity["samples"] or n_test
        return {
            "zoo_epochs": epochs,
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
        key and the fix (empty when the plan can run)."""
        from intertwine.models import normalize_spec

        errors = []

        def subset(key, chosen, available, among):
            unknown = sorted(set(chosen) - set(available))
            if unknown:
                errors.append(f"config key {key}: {unknown} must be among {among}: {list(available)}")
            return not unknown

        share = self.config["pairs_share_members"]

        def pairable(key, variants, count_key, count, symmetric):
            for variant in variants:
                if variant not in self.variants:
                    continue
                members = len(self.zoo_seeds(variant))
                if members < 2:
                    errors.append(
                        f"config key {key}: {key.split('.')[0]} pairs need at least 2 zoo "
                        f"members, but the zoo trains {members} of {variant!r}; raise "
                        "zoo.seeds (or zoo.seeds_per_variant) or drop the variant"
                    )
                elif count(variant) > distinct_pairs(members, symmetric, share):
                    available = distinct_pairs(members, symmetric, share)
                    errors.append(
                        f"config key {count_key}: {count(variant)} pairs of {variant!r} asked "
                        f"for, but its {members} zoo members form only {available} "
                        + (
                            f"distinct pairs{' (the measures are symmetric)' if symmetric else ''}; ask "
                            "for at most that many, or raise zoo.seeds (or zoo.seeds_per_variant)"
                            if share
                            else "pairs with no member in common (independent units); ask for at most "
                            f"that many, raise zoo.seeds (or zoo.seeds_per_variant) to {2 * count(variant)}, "
                            "or set pairs_share_members: true (the claims then treat each member as a cluster)"
                        )
                    )

        def members(key, variants, count):
            for variant in variants:
                if variant in self.variants:
                    try:
                        self.members(key, variant, count)
                    except ConfigError as err:
                        errors.append(str(err))

        for name, spec in self.zoo["variants"].items():
            try:
                normalize_spec(spec)
            except ValueError as err:
                errors.append(f"config key zoo.variants.{name}: {err}")
        if errors:  # the checks below build models from the specs
            return errors

        def overrides(key, override, block):
            """Per-variant or per-method overrides: known keys, each valid as in ``block``."""
            if subset(key, override, schema_block(block)["properties"], f"the settings of {block}"):
                for name, value in override.items():
                    try:
                        jsonschema.validate(value, schema_block(block)["properties"][name])
                    except jsonschema.ValidationError as err:
                        errors.append(f"config key {key}.{name}: {err.message}")

        subset("zoo.seeds_per_variant", self.zoo["seeds_per_variant"], self.variants, "zoo.variants")
        subset("zoo.pack_size_per_variant", self.zoo["pack_size_per_variant"], self.variants, "zoo.variants")
        for variant in self.settling_variants:
            if self.pack_size(variant) > 1:
                errors.append(
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
                    errors.append(f"config key zoo.variants.{variant}: {err}")
        errors += self._image_count_errors()
        for variant in self.variants:
            gated = self.spec(variant).get("gated")
            if gated is None or gated["regime"] != "fl":
                continue
            source = gated["features_from"]
            key = f"zoo.variants.{variant}.gated.features_from"
            if source not in self.variants:
                errors.append(
                    f"config key {key}: {source!r} is not a zoo variant; name one of {self.variants}"
                )
                continue
            plain = self.spec(variant) | {"gated": None}
            if self.spec(source) != plain:
                errors.append(
                    f"config key {key}: {source!r} ({self.zoo['variants'][source]}) is not the plain form of "
                    f"{variant!r}: its feature network must be the same architecture without gated"
                )
            elif len(self.zoo_seeds(source)) < len(self.zoo_seeds(variant)):
                errors.append(
                    f"config key {key}: member s of {variant!r} takes member s of {source!r}, which trains "
                    f"{len(self.zoo_seeds(source))} seeds for {len(self.zoo_seeds(variant))}; raise "
                    f"zoo.seeds_per_variant.{source}"
                )
        if subset(
            "zoo.training_per_variant", self.zoo["training_per_variant"], self.variants, "zoo.variants"
        ):
            for variant, override in self.zoo["training_per_variant"].items():
                overrides(f"zoo.training_per_variant.{variant}", override, "zoo.training")

        if subset("rotation.variants", self.rotation["variants"], self.variants, "zoo.variants"):
            for variant in self.rotation["variants"]:
                subset(
                    "rotation.sites",
                    self.rotation["sites"],
                    self.cut_site_names(variant),
                    f"the sites of {variant}",
                )
            members("rotation.seeds", self.rotation["variants"], self.rotation["seeds"])

        stitching = self.stitching
        if subset("stitching.variants", stitching["variants"], self.variants, "zoo.variants"):
            subset(
                "stitching.pairs_per_variant",
                stitching["pairs_per_variant"],
                stitching["variants"],
                "stitching.variants",
            )
            if subset("stitching.sites", stitching["sites"], self.variants, "zoo.variants"):
                for variant, chosen in stitching["sites"].items():
                    subset(
                        f"stitching.sites.{variant}",
                        chosen,
                        self.cut_site_names(variant),
                        f"the sites of {variant}",
                    )
            subset(
                "stitching.methods_per_variant",
                stitching["methods_per_variant"],
                stitching["variants"],
                "stitching.variants",
            )
            pairable(
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
            if subset(
                f"stitching.settings_per_method.{method}", override, per_method, "the method's settings"
            ):
                overrides(f"stitching.settings_per_method.{method}", override, "stitching")

        if subset("similarity.variants", self.similarity["variants"], self.variants, "zoo.variants"):
            subset(
                "similarity.pairs_per_variant",
                self.similarity["pairs_per_variant"],
                self.similarity["variants"],
                "similarity.variants",
            )
            pairable(
                "similarity.variants",
                self.similarity["variants"],
                "similarity.procrustes_pairs"
                if self.similarity["procrustes_pairs"] >= self.similarity["cka_pairs"]
                else "similarity.cka_pairs",
                self.similarity_pair_count,
                symmetric=True,
            )

        connectivity = self.connectivity
        if subset("connectivity.variants", connectivity["variants"], self.variants, "zoo.variants"):
            subset(
                "connectivity.pairs_per_variant",
                connectivity["pairs_per_variant"],
                connectivity["variants"],
                "connectivity.variants",
            )
            pairable(
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
                    errors.append(
                        f"config key connectivity.variants: {variant!r} is a {spec['arch']}"
                        f"{' (gated)' if spec.get('gated') else ''}, which has no intertwiner action to "
                        f"align it by; choose among {', '.join(ARCHS)} (plain, or gated but a ResNet)"
                    )
                elif any(m.endswith("grelu") for m in connectivity["methods"]) and spec["activation"] not in (
                    "relu",
                    "leaky_relu",
                ):
                    errors.append(
                        f"config key connectivity.methods: G_ReLU alignment needs a positively homogeneous "
                        f"activation, but {variant!r} has {spec['activation']}; use the permutation methods "
                        "alone, or drop the variant"
                    )

        if subset("gated.variants", self.gated["variants"], self.variants, "zoo.variants"):
            members("gated.seeds", self.gated["variants"], self.gated["seeds"])
            ensembles = self.gated["ensembles"] if self.gated["variants"] else {}  # the stage off: unused
            if subset("gated.ensembles", ensembles, self.gated["variants"], "gated.variants"):
                for variant, count in ensembles.items():
                    members(f"gated.ensembles.{variant}", [variant], count)
            for variant in self.gated["variants"]:
                if self.spec(variant)["arch"] not in GATED_ARCHS:
                    errors.append(
                        f"config key gated.variants: {variant!r} is a {self.spec(variant)['arch']}; the "
                        f"gated-networks study compares {', '.join(GATED_ARCHS)} networks, plain and gated"
                    )

        pullback = self.pullback
        if subset("pullback.variants", pullback["variants"], self.variants, "zoo.variants"):
            if pullback["seeds"] is not None:
                members("pullback.seeds", pullback["variants"], pullback["seeds"])
            for variant in pullback["variants"]:
                problem = self.pullback_problem(variant)
                if problem:
                    errors.append(f"config key pullback.variants: {variant!r} {problem}")
            if pullback["pairs"]:
                pairable(
                    "pullback.variants",
                    pullback["variants"],
                    "pullback.pairs",
                    lambda v: pullback["pairs"],
                    symmetric=True,
                )
            if subset("pullback.sites", pullback["sites"], pullback["variants"], "pullback.variants"):
                for variant, chosen in pullback["sites"].items():
                    subset(
                        f"pullback.sites.{variant}",
                        chosen,
                        self.cut_site_names(variant),
                        f"the sites of {variant}",
                    )

        errors += self._deqntk_errors()

        dissection = self.dissection
        if subset("dissection.variants", dissection["variants"], self.variants, "zoo.variants"):
            for variant in dissection["variants"]:
                if self.spec(variant)["arch"] == "cct":
                    errors.append(
                        f"config key dissection.variants: {variant!r} is a transformer, whose "
                        "sites are token sequences, not the spatial maps dissection overlays on "
                        "concept masks; dissect convolutional variants"
                    )
            members("dissection.seeds", dissection["variants"], dissection["seeds"])
            if subset("dissection.sites", dissection["sites"], dissection["variants"], "dissection.variants"):
                for variant, chosen in dissection["sites"].items():
                    subset(
                        f"dissection.sites.{variant}",
                        chosen,
                        self.site_names(variant),
                        f"the sites of {variant}",
                    )
        if dissection["external"] and not dissection["probe"]["broden"]:
            errors.append(
                "config key dissection.external: ImageNet models are dissected on Broden; "
                "set dissection.probe.broden to your Broden directory (e.g. broden1_224)"
            )
        return errors

    def _image_count_errors(self) -> list[str]:
        """Image counts the data set's splits must hold, each under the key the user set: a job
        takes the first n images of a split and would otherwise take fewer without a word."""
        train_size, test_size = self.dataset_sizes()
        train_split = train_size - self.config["data"]["val_size"]
        dataset = self.config["data"]["dataset"]
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
        return [
            f"config key {key}: {n} {what} images asked for, but the {what} split of {dataset} has "
            f"{available}; ask for at most {available}"
            + (" (or null for the whole split)" if key == "similarity.samples" else "")
            + (" (data.val_size of the training images are held out)" if what == "training" else "")
            for key, n, available, what in checks
            if n is not None and n > available
        ]
