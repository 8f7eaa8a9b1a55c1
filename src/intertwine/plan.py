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

A stage adds: its job list and outputs here, a rule file, a CLI command, a library module.
Cross-checks of the config that the schema cannot express are in `Plan.errors()`: each names the
config key and the fix. Methods that build models cache them (`variant_sites`).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re

import jsonschema

from intertwine.settings import (
    ConnectivityConfig,
    DeqntkConfig,
    DissectionConfig,
    GatedConfig,
    PullbackConfig,
    RotationConfig,
    SimilarityConfig,
    StitchConfig,
    SymmetryConfig,
    TrainConfig,
    expand_methods,
    method_kind,
    schema_block,
    variances_name,
)

ZOO_TABLES = ["results/tables/zoo.parquet", "results/tables/zoo_epochs.parquet"]


# The architectures that have a gated form (spec key `gated`).
GATED_ARCHS = ("myrtle", "c4gap", "c1gap", "vgg16_avg", "resnet110")


class ConfigError(ValueError):
    """A config the schema accepts but the plan cannot run; the message names the key."""


def as_json(block) -> str:
    """A config block as one JSON string: what a rule's params carry and its shell command passes."""
    return json.dumps(block, sort_keys=True)


@functools.cache
def _sites(spec_json: str) -> tuple:
    """The sites of a model spec, from a freshly built model (the same for every seed)."""
    from intertwine.models import build, sites  # torch: only when sites are asked for

    return tuple(sites(build(json.loads(spec_json))))


@functools.cache
def _cut_sites(spec_json: str) -> tuple:
    from intertwine.models import build, cut_sites

    return tuple(cut_sites(build(json.loads(spec_json))))


def gram_layout(n_train: int, n_test: int, block_rows: int) -> list[tuple[str, int, int]]:
    """The DEQ-NTK accuracy study's Gram, rows [train; test], cut into jobs: (part, start, stop)
    for the training rows, then the test rows, each every ``block_rows`` rows."""
    if isinstance(block_rows, bool) or not isinstance(block_rows, int) or block_rows < 1:
        raise ValueError(f"block_rows must be an integer of at least 1, got {block_rows!r}")
    return [
        (part, start, min(start + block_rows, n))
        for part, n in (("train", n_train), ("test", n_test))
        for start in range(0, n, block_rows)
    ]


def distinct_pairs(n_members: int, symmetric: bool, share_members: bool = True) -> int:
    """How many pairs ``n_members`` members form: with ``share_members`` every distinct pair,
    n(n-1), or n(n-1)/2 for a symmetric measure; without, n // 2 pairs with no member in common."""
    if not share_members:
        return n_members // 2
    return n_members * (n_members - 1) // (2 if symmetric else 1)


def draw_pairs(
    n_members: int, n_pairs: int, *key, symmetric: bool = False, share_members: bool = False
) -> list[tuple[int, int]]:
    """``n_pairs`` ordered pairs of distinct zoo members of ``range(n_members)``, drawn by a
    generator seeded from ``key`` (e.g. the global seed, the stage and the variant), so every run
    draws the same pairs.

    By default no member is in two pairs (a random matching: a shuffle of the members, paired off
    in order), so the pairs are independent units of evidence; 2k members give k such pairs.
    With ``share_members`` the pairs are drawn uniformly with replacement as in the paper's code,
    the two members distinct and no pair (or, when ``symmetric``, its reverse) twice; pairs then
    share members, and an analysis must treat each member as a cluster."""
    import torch

    from intertwine.utils import derive_seed

    if n_members < 2:
        raise ValueError(f"pairs need at least 2 zoo members per variant, got {n_members}")
    available = distinct_pairs(n_members, symmetric, share_members)
    if n_pairs > available:
        kind = "distinct " + ("unordered " if symmetric else "") if share_members else "member-disjoint "
        raise ValueError(
            f"{n_pairs} pairs asked for, but {n_members} members form only {available} {kind}pairs"
        )
    generator = torch.Generator().manual_seed(derive_seed(*key))
    if not share_members:
        order = torch.randperm(n_members, generator=generator).tolist()
        return [(order[2 * i], order[2 * i + 1]) for i in range(n_pairs)]
    pairs: list[tuple[int, int]] = []
    while len(pairs) < n_pairs:
        a, b = torch.randint(n_members, (2,), generator=generator).tolist()
        if a != b and (a, b) not in pairs and not (symmetric and (b, a) in pairs):
            pairs.append((a, b))
    return pairs


class Plan:
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
        return list(_sites(as_json(self.zoo["variants"][variant])))

    def site_names(self, variant: str) -> list[str]:
        return [site.name for site in self.variant_sites(variant)]

    def cut_site_names(self, variant: str) -> list[str]:
        """The sites stitching and the rotation penalty can cut the variant at (``models.cut_sites``)."""
        return list(_cut_sites(as_json(self.zoo["variants"][variant])))

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

    def zoo_seeds(self, variant: str) -> range:
        """The seeds the zoo trains for a variant: zoo.seeds, or its zoo.seeds_per_variant entry."""
        return range(self.zoo["seeds_per_variant"].get(variant, self.zoo["seeds"]))

    def zoo_outputs(self, pattern: str) -> list[str]:
        return [pattern.format(variant=v, seed=s) for v in self.variants for s in self.zoo_seeds(v)]

    def pack_size(self, variant: str) -> int:
        """Members of the variant one job trains (zoo.pack_size, or its zoo.pack_size_per_variant entry)."""
        return self.zoo["pack_size_per_variant"].get(variant, self.zoo["pack_size"])

    def packs(self, variant: str) -> list[range]:
        """The variant's packs: consecutive runs of pack_size seeds (the last may be shorter). With
        a pack size of 1 there are none: each member is its own train_member job."""
        size, seeds = self.pack_size(variant), self.zoo_seeds(variant)
        return [] if size == 1 else [seeds[i : i + size] for i in range(0, len(seeds), size)]

    @staticmethod
    def pack_dir(variant: str, pack: range) -> str:
        return f"results/zoo/{variant}/packs/seeds{pack[0]}-{pack[-1]}"

    def member_pack(self, variant: str, seed: int) -> str:
        """The directory of the pack that trains this member."""
        return next(self.pack_dir(variant, pack) for pack in self.packs(variant) if seed in pack)

    def packed_variants(self, packed: bool = True) -> str:
        """A regex matching the variants that train in packs (``packed``) or one member per job:
        the two rules that make a member's checkpoint are told apart by it."""
        names = [v for v in self.variants if (self.pack_size(v) > 1) == packed]
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

    def members(self, key: str, variant: str, count: int) -> range:
        """Seeds 0 .. count-1 of a variant, which the zoo must have trained."""
        if count > len(self.zoo_seeds(variant)):
            raise ConfigError(
                f"config key {key}: {count} seeds of {variant!r} asked for, but the "
                f"zoo trains {len(self.zoo_seeds(variant))}"
            )
        return range(count)

    # --- symmetry -----------------------------------------------------------------------------

    @functools.cached_property
    def symmetry_checks(self) -> list[str]:
        from intertwine.symmetry import acts_on  # the models whose weight action it knows

        return [
            f"results/symmetry/{variant}/seed{seed}.parquet"
            for variant in self.variants
            if acts_on(self.spec(variant))
            for seed in range(min(self.symmetry["seeds"], len(self.zoo_seeds(variant))))
        ]

    @property
    def symmetry_block(self) -> dict:
        return SymmetryConfig.job_block({"symmetry": self.symmetry})

    @property
    def symmetry_outputs(self) -> list[str]:
        if not self.symmetry_checks:
            return []
        return ["results/tables/symmetry.parquet", "results/tables/symmetry_summary.csv"]

    # --- rotation -----------------------------------------------------------------------------

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

    # --- stitching ----------------------------------------------------------------------------

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
        """The appendix's stitching studies the config asks for: {CLI flag: figure}."""
        kinds = {method_kind(m) for v in self.stitching["variants"] for m in self.stitch_methods(v)}
        studies = [
            ("leaky-relu", "leaky_relu", bool(self.leaky_slopes)),
            ("alpha-cv", "alpha_cv", "grelu_cv" in kinds),
            ("l1", "l1_sparsity", "l1" in kinds),
            ("softsort", "softsort", "softsort" in kinds),
            ("transformer", "transformer", bool(self.transformers)),
        ]
        return {flag: f"results/figures/stitching_{name}.png" for flag, name, wanted in studies if wanted}

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

    # --- similarity ---------------------------------------------------------------------------

    def similarity_pair_count(self, variant: str) -> int:
        """How many pairs of ``variant`` the stage compares: the larger of procrustes_pairs and
        cka_pairs, at most its pairs_per_variant."""
        count = max(self.similarity["procrustes_pairs"], self.similarity["cka_pairs"])
        return min(count, self.similarity["pairs_per_variant"].get(variant, count))

    def similarity_pairs(self, variant: str) -> list[tuple[int, int]]:
        """The variant's pairs; the measures are symmetric, so (a, b) and (b, a) are one pair."""
        return self._pairs("similarity", variant, self.similarity_pair_count(variant), symmetric=True)

    def similarity_parts(self, pair: int) -> str:
        """Which measures pair k computes, as CLI flags: Procrustes for the first procrustes_pairs,
        CKA for the first cka_pairs."""
        return (" --procrustes" if pair < self.similarity["procrustes_pairs"] else "") + (
            " --cka" if pair < self.similarity["cka_pairs"] else ""
        )

    @property
    def similarity_block(self) -> dict:
        return SimilarityConfig.job_block({"similarity": self.similarity, "gated": self.gated})

    @functools.cached_property
    def similarity_jobs(self) -> list[str]:
        return [
            f"results/similarity/{variant}/pair{pair}.parquet"
            for variant in self.similarity["variants"]
            for pair in range(self.similarity_pair_count(variant))
        ]

    @property
    def similarity_figures(self) -> list[str]:
        return (
            ["results/figures/similarity_procrustes.png"] if self.similarity["procrustes_pairs"] else []
        ) + (["results/figures/similarity_cka.png"] if self.similarity["cka_pairs"] else [])

    @property
    def similarity_outputs(self) -> list[str]:
        if not self.similarity_jobs:
            return []
        return [
            "results/tables/similarity.parquet",
            "results/tables/similarity_summary.csv",
        ] + self.figure_files(self.similarity_figures)

    # --- linear mode connectivity ---------------------------------------------------------------

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

    # --- dissection ---------------------------------------------------------------------------

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

    # --- gated networks -----------------------------------------------------------------------

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

    @functools.cached_property
    def npk_jobs(self) -> list[str]:
        from intertwine.symmetry import acts_on  # the kernels' invariance checks act on the weights

        # A gated ResNet's accuracy is the study's (from the zoo table); its kernels are not measured.
        return [
            f"results/gated/{variant}/seed{seed}.parquet"
            for variant in self.gated["variants"]
            if acts_on(self.spec(variant))
            for seed in self.members("gated.seeds", variant, self.gated["seeds"])
        ]

    @functools.cached_property
    def gated_ensembles(self) -> list[str]:
        """The logit ensembles' tables (``gated.ensembles``), when the study runs."""
        if not self.npk_jobs:
            return []
        return [f"results/gated/{variant}/ensemble.parquet" for variant in self.gated["ensembles"]]

    def ensemble_checkpoints(self, variant: str) -> list[str]:
        """The members whose logits an ensemble averages: the variant's first k (``gated.ensembles``)."""
        count = self.gated["ensembles"][variant]
        return [
            f"results/zoo/{variant}/seed{seed}.pt"
            for seed in self.members(f"gated.ensembles.{variant}", variant, count)
        ]

    @property
    def gated_block(self) -> dict:
        return GatedConfig.job_block({"gated": self.gated})

    @functools.cached_property
    def gated_permuted(self) -> bool:
        """Whether the study has a variant with a permuted gate layer (the permutation figure)."""
        perms = [(self.spec(v).get("gated") or {}).get("gate_perm") for v in self.gated["variants"]]
        return any(perm is not None and perm != sorted(perm) for perm in perms)

    @property
    def gated_figures(self) -> list[str]:
        return [
            "results/figures/gated_accuracy.png",
            *(["results/figures/gated_permutations.png"] if self.gated_permuted else []),
            "results/figures/gated_kernels.png",
        ]

    @property
    def gated_similarity(self) -> list[str]:
        """The similarity table, when it compares a variant of the gated study (the kernels
        figure shows its gate, linear and G_ReLU CKAs)."""
        if set(self.gated["variants"]) & set(self.similarity["variants"]) and self.similarity_jobs:
            return ["results/tables/similarity.parquet"]
        return []

    @property
    def gated_outputs(self) -> list[str]:
        if not self.npk_jobs:
            return []
        return [
            "results/tables/gated.parquet",
            "results/tables/npk.parquet",
            "results/tables/gated_findings.csv",
            "results/tables/gated_ensembles.csv",
        ] + self.figure_files(self.gated_figures)

    # --- DEQ neural tangent kernel ----------------------------------------------------------

    def dataset_sizes(self) -> tuple[int, int]:
        """(training images, validation split included; test images) of the configured data set."""
        data = self.config["data"]
        if data["dataset"] == "shapes":
            return data["shapes"]["train_size"], data["shapes"]["test_size"]
        if data["dataset"] == "mnist":
            return 60_000, 10_000
        return 50_000, 10_000  # CIFAR-10 and CIFAR-100

    @property
    def deqntk_variances(self) -> dict[str, list[float]]:
        """The accuracy study's variance settings by name ('w0.25_u0.25_b0.5'); none when it is off."""
        if not self.deqntk["n_train"]:
            return {}
        return {variances_name(v): v for v in self.deqntk["settings"]}

    @property
    def deqntk_train_rows(self) -> int:
        """The Gram's training rows: the largest training-set size (the smaller are its first rows)."""
        return max(self.deqntk["n_train"], default=0)

    @functools.cached_property
    def deqntk_layout(self) -> list[tuple[str, int, int]]:
        if not self.deqntk_variances:
            return []
        return gram_layout(self.deqntk_train_rows, self.deqntk["n_test"], self.deqntk["block_rows"])

    @staticmethod
    def deqntk_block_file(name: str, part: str, start: int) -> str:
        return f"results/deqntk/gram/{name}/{part}{start}.npz"

    @functools.cached_property
    def deqntk_gram_jobs(self) -> list[str]:
        return [
            self.deqntk_block_file(name, part, start)
            for name in self.deqntk_variances
            for part, start, _ in self.deqntk_layout
        ]

    def deqntk_stop(self, part: str, start: int) -> int:
        """The end of the Gram block starting at row ``start`` of ``part``."""
        return next(stop for p, a, stop in self.deqntk_layout if (p, a) == (part, start))

    def deqntk_blocks(self, name: str, n_train: int) -> list[str]:
        """The blocks a regression on the first ``n_train`` training images reads: every test
        block and the training blocks that start below ``n_train``."""
        return [
            self.deqntk_block_file(name, part, start)
            for part, start, _ in self.deqntk_layout
            if part == "test" or start < n_train
        ]

    @functools.cached_property
    def deqntk_regression_jobs(self) -> list[str]:
        return [
            f"results/deqntk/accuracy/{name}/n{n}.parquet"
            for name in self.deqntk_variances
            for n in self.deqntk["n_train"]
        ]

    @functools.cached_property
    def deqntk_depth_jobs(self) -> list[str]:
        return [f"results/deqntk/depth/draw{draw}.parquet" for draw in range(self.deqntk["depth"]["draws"])]

    @functools.cached_property
    def kernel_reference_jobs(self) -> list[str]:
        reference = self.deqntk["reference"]
        return [
            f"results/deqntk/reference/{variant}/seed{seed}.parquet"
            for variant in reference["variants"]
            for seed in self.members("deqntk.reference.seeds", variant, reference["seeds"])
        ]

    def deqntk_block(self, kind: str) -> dict:
        """The settings a job of ``kind`` (gram, regression, depth, reference) reads; the
        reference's null samples are the similarity stage's."""
        sources = {
            "deqntk": self.deqntk,
            "deqntk.depth": self.deqntk["depth"],
            "deqntk.reference": self.deqntk["reference"],
            "deqntk.conv": self.deqntk["conv"],
        }
        block = DeqntkConfig.job_block(sources, kind)
        if kind == "reference" and block["reference_samples"] is None:
            block["reference_samples"] = self.similarity["samples"]
        return block

    @property
    def deqntk_conv_jobs(self) -> list[str]:
        """The convolutional DEQ-NTK's one job, when ``deqntk.conv.n_train`` asks for it."""
        return ["results/deqntk/conv.parquet"] if self.deqntk["conv"]["n_train"] else []

    @property
    def deqntk_parts(self) -> list[str]:
        """The per-job rows of results/tables/deqntk.parquet: the regressions, the depth draws,
        the convolutional kernel's."""
        return self.deqntk_regression_jobs + self.deqntk_depth_jobs + self.deqntk_conv_jobs

    @property
    def deqntk_tables(self) -> list[str]:
        return ["results/tables/deqntk.parquet"] if self.deqntk_parts else []

    @property
    def kernel_reference_tables(self) -> list[str]:
        return ["results/tables/kernel_reference.parquet"] if self.kernel_reference_jobs else []

    @property
    def deqntk_figures(self) -> list[str]:
        return (
            (["results/figures/deqntk_accuracy.png"] if self.deqntk_regression_jobs else [])
            + (["results/figures/deqntk_depth.png"] if self.deqntk_depth_jobs else [])
            + (["results/figures/deqntk_reference.png"] if self.kernel_reference_jobs else [])
        )

    @property
    def deqntk_outputs(self) -> list[str]:
        return self.deqntk_tables + self.kernel_reference_tables + self.figure_files(self.deqntk_figures)

    # --- excitation pullbacks ------------------------------------------------------------------

    def pullback_seeds(self, variant: str) -> range:
        """The variant's measured members: the first pullback.seeds, or every member (null)."""
        seeds = self.pullback["seeds"]
        return self.zoo_seeds(variant) if seeds is None else self.members("pullback.seeds", variant, seeds)

    @functools.cached_property
    def pullback_member_jobs(self) -> list[str]:
        """Per member, its symmetry rows; its faithfulness rows are ``pullback_faithfulness_parts``."""
        return [
            f"results/pullback/symmetry/{variant}/seed{seed}.parquet"
            for variant in self.pullback["variants"]
            for seed in self.pullback_seeds(variant)
        ]

    @property
    def pullback_faithfulness_parts(self) -> list[str]:
        return [path.replace("/symmetry/", "/faithfulness/") for path in self.pullback_member_jobs]

    def pullback_pairs(self, variant: str) -> list[tuple[int, int]]:
        """The variant's pairs: the similarity stage's draw (its first pullback.pairs; one draw, so
        the two stages compare the same members)."""
        return self._pairs("similarity", variant, self.pullback["pairs"], symmetric=True)

    @functools.cached_property
    def pullback_pair_jobs(self) -> list[str]:
        return [
            f"results/pullback/agreement/{variant}/pair{pair}.parquet"
            for variant in self.pullback["variants"]
            for pair in range(self.pullback["pairs"])
        ]

    @property
    def pullback_transfer_parts(self) -> list[str]:
        """Per pair, its PGD transfer rows (written by the pair's job beside its agreement)."""
        return [path.replace("/agreement/", "/transfer/") for path in self.pullback_pair_jobs]

    def pullback_sites(self, variant: str) -> list[str]:
        """The sites of the hidden-unit agreement: pullback.sites of the variant, or unit_sites of
        its cut sites on the residual stream, evenly spaced, the first and the last included."""
        chosen = self.pullback["sites"].get(variant)
        if chosen is not None:
            return list(chosen)
        inside = {site.name: site.inside_residual for site in self.variant_sites(variant)}
        stream = [site for site in self.cut_site_names(variant) if not inside[site]]
        count = min(self.pullback["unit_sites"], len(stream))
        if count <= 1:
            return stream[len(stream) - count :]
        return [stream[round(i * (len(stream) - 1) / (count - 1))] for i in range(count)]

    def pullback_block(self, kind: str) -> dict:
        """The settings a pullback job of ``kind`` (member, pair, images) reads."""
        return PullbackConfig.job_block({"pullback": self.pullback}, kind)

    def pullback_grids(self, variant: str | None = None) -> list[str]:
        """A variant's image grids (from seed 0), every variant's without ``variant``."""
        variants = self.pullback["variants"] if variant is None else [variant]
        return [f"results/figures/pullback_{kind}_{v}.png" for v in variants for kind in ("grid", "pgd")]

    @property
    def pullback_tables(self) -> list[str]:
        if not self.pullback_member_jobs:
            return []
        return [
            "results/tables/pullback_symmetry.parquet",
            "results/tables/pullback_faithfulness.parquet",
            "results/tables/pullback_agreement.parquet",
            "results/tables/pullback_transfer.parquet",
            "results/tables/pullback_summary.csv",
        ]

    @property
    def pullback_figures(self) -> list[str]:
        if not self.pullback_member_jobs:
            return []
        return [
            "results/figures/pullback_symmetry.png",
            *(["results/figures/pullback_agreement.png"] if self.pullback_pair_jobs else []),
            *(["results/figures/pullback_transfer.png"] if self.pullback_pair_jobs else []),
            "results/figures/pullback_faithfulness.png",
            *(["results/figures/pullback_temperature.png"] if self.pullback.get("sweep") else []),
        ]

    @property
    def pullback_outputs(self) -> list[str]:
        extra = self.settling_outputs + self.pullback_external_outputs
        if not self.pullback_member_jobs:
            return extra
        return self.pullback_tables + self.figure_files(self.pullback_figures + self.pullback_grids()) + extra

    def pullback_external_figures(self, name: str) -> list[str]:
        return [
            f"results/figures/pullback_external_{name}.png",
            f"results/figures/pullback_external_{name}_perturbed.png",
        ]

    @property
    def pullback_external_outputs(self) -> list[str]:
        """Per pullback.external model: its table and grids (the paper's own experiment)."""
        return [
            path
            for name in self.pullback["external"]
            for path in [
                f"results/tables/pullback_external_{name}.parquet",
                *self.figure_files(self.pullback_external_figures(name)),
            ]
        ]

    # Hypothesis 1 (path stability): gate patterns recorded while the zoo trains
    @property
    def settling_variants(self) -> list[str]:
        """The variants whose members record gate patterns (zoo.training.gate_probe_images > 0,
        usually set per variant in zoo.training_per_variant)."""
        return [v for v in self.variants if self.train_block(v).get("gate_probe_images", 0) > 0]

    @property
    def settling_checkpoints(self) -> list[str]:
        """Every member of the settling variants: each an independent unit of the claim."""
        return [
            f"results/zoo/{variant}/seed{seed}.pt"
            for variant in self.settling_variants
            for seed in self.zoo_seeds(variant)
        ]

    @property
    def settling_outputs(self) -> list[str]:
        if not self.settling_variants:
            return []
        return ["results/tables/pullback_settling.parquet"] + self.figure_files(
            ["results/figures/pullback_settling.png"]
        )

    def pullback_problem(self, variant: str) -> str | None:
        """Why a variant has no pullbacks to measure here (None: it has)."""
        from intertwine.symmetry import ARCHS, acts_on  # the models whose weight action it knows

        spec = self.spec(variant)
        if not acts_on(spec):
            return (
                f"is a {spec['arch']}{' (gated)' if spec.get('gated') else ''}; the stage acts on the "
                f"weights of {', '.join(ARCHS)} networks, not gated ResNets (intertwine.symmetry)"
            )
        if spec["activation"] not in ("relu", "leaky_relu"):
            return (
                f"has {spec['activation']} activations; excitation pullbacks soften ReLU and LeakyReLU "
                "gates only (use the plain gradient elsewhere)"
            )
        return None

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
        from intertwine.claims import PAPER_EPOCHS, PAPER_MEMBERS, PAPER_STITCH_EPOCHS

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
        return (
            ZOO_TABLES
            + self.zoo_figures
            + self.symmetry_outputs
            + self.rotation_outputs
            + self.stitching_outputs
            + self.similarity_outputs
            + self.connectivity_outputs
            + self.dissection_outputs
            + self.gated_outputs
            + self.deqntk_outputs
            + self.pullback_outputs
        )

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

    def _deqntk_errors(self) -> list[str]:
        """The DEQ-NTK stage's cross-checks: variance settings that sum to 1 (sigma_w2 < 1 for the
        equilibrium), image counts the data set has, reference variants the zoo trains."""
        deqntk, errors = self.deqntk, []

        def variances(key, values, equilibrium=True):
            w, u, b = values
            if abs(w + u + b - 1) > 1e-9:
                errors.append(
                    f"config key {key}: {values} sums to {w + u + b:g}; sigma_w2 + sigma_u2 + sigma_b2 "
                    "must be 1 (unit inputs then keep unit-variance pre-activations, which the kernels assume)"
                )
            elif equilibrium and w >= 1:
                errors.append(
                    f"config key {key}: sigma_w2 = {w:g}; the equilibrium needs sigma_w2 < 1 (its fixed-point "
                    "map is then a contraction; at 1 the depth-L NTK grows without bound)"
                )

        train_size, test_size = self.dataset_sizes()
        dataset = self.config["data"]["dataset"]

        def images(key, n, available, what):
            if n > available:
                errors.append(
                    f"config key {key}: {n} {what} images asked for, but {dataset} has {available}"
                    + (" (train and val splits together)" if what == "training" else "")
                )

        if deqntk["n_train"]:
            for i, values in enumerate(deqntk["settings"]):
                variances(f"deqntk.settings.{i}", values)
            if not deqntk["settings"]:
                errors.append(
                    "config key deqntk.settings: empty, but deqntk.n_train asks for the accuracy study"
                )
            images("deqntk.n_train", self.deqntk_train_rows, train_size, "training")
            images("deqntk.n_test", deqntk["n_test"], test_size, "test")
        depth = deqntk["depth"]
        if depth["draws"]:
            if depth["variances"] is not None:
                variances("deqntk.depth.variances", depth["variances"])
            for i, values in enumerate(depth["finite"]):
                variances(f"deqntk.depth.finite.{i}", values, equilibrium=False)
            for i, (w, b) in enumerate(depth["panels"]):
                if b < depth["deq_sigma_b2"]:
                    errors.append(
                        f"config key deqntk.depth.panels.{i}: sigma_b2 = {b:g} is below deqntk.depth.deq_sigma_b2 "
                        f"= {depth['deq_sigma_b2']:g}, so the panel's DEQ would have sigma_u2 < 0; raise the "
                        "panel's sigma_b2 or lower deq_sigma_b2"
                    )
                else:
                    variances(f"deqntk.depth.panels.{i}", [w, 0.0, b])
            if depth["variances"] is None and not depth["finite"] and not depth["panels"]:
                errors.append(
                    "config key deqntk.depth: draws asks for the depth sweep, but it has no kernel "
                    "(variances null, finite and panels empty); give one, or set draws to 0"
                )
            images("deqntk.depth.n_train", depth["n_train"], train_size, "training")
            images("deqntk.depth.n_test", depth["n_test"], test_size, "test")
        conv = deqntk["conv"]
        if conv["n_train"]:
            for i, values in enumerate(conv["settings"]):
                variances(f"deqntk.conv.settings.{i}", values)
            images("deqntk.conv.n_train", conv["n_train"], train_size, "training")
            images("deqntk.conv.n_test", conv["n_test"], test_size, "test")
        reference = deqntk["reference"]
        unknown = sorted(set(reference["variants"]) - set(self.variants))
        if unknown:
            errors.append(
                f"config key deqntk.reference.variants: {unknown} must be among zoo.variants: {self.variants}"
            )
        elif reference["variants"]:
            variances("deqntk.reference.variances", reference["variances"])
            for variant in reference["variants"]:
                try:
                    self.members("deqntk.reference.seeds", variant, reference["seeds"])
                except ConfigError as err:
                    errors.append(str(err))
            # Only as set: a null takes similarity.samples, which is checked under its own key.
            samples = reference["samples"]
            if samples is not None:
                images("deqntk.reference.samples", samples, test_size, "test")
        return errors
