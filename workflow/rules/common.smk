# Helpers only: config validation, the fan-out of the config, and per-stage code hashes.
import hashlib
import json
import os
from pathlib import Path

import jsonschema
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

import intertwine
from intertwine.config import describe_validation_error
from intertwine import symmetry
from intertwine.dissection import default_sites
from intertwine.models import build, imagenet, normalize_spec, sites
from intertwine.stitching import draw_pairs, l1_method, parse_method

try:
    validate(config, schema="../schemas/config.schema.yaml", set_default=True)
except WorkflowError as err:
    if not isinstance(err.__context__, jsonschema.ValidationError):
        raise
    raise WorkflowError(describe_validation_error(err.__context__)) from None

for _name, _spec in config["zoo"]["variants"].items():
    try:
        normalize_spec(_spec)
    except ValueError as err:
        raise WorkflowError(f"config key zoo.variants.{_name}: {err}") from None

# Every rule runs in the project's one environment (used with --software-deployment-method conda).
CONDA_ENV = "../../environment.yml"

DATASET = config["data"]["dataset"]
DATA_DIR = f"results/data/{DATASET}"
DATA_FILES = multiext(f"{DATA_DIR}/", "train.npz", "val.npz", "test.npz", "meta.json")
VARIANTS = list(config["zoo"]["variants"])


def zoo_seeds(variant):
    """The seeds the zoo trains for a variant: zoo.seeds, or its zoo.seeds_per_variant entry."""
    return range(config["zoo"]["seeds_per_variant"].get(variant, config["zoo"]["seeds"]))


# The library files each stage runs; a change to them reruns that stage (and its dependents) only.
STAGE_CODE = {
    "data": ["data/__init__.py", "data/shapes.py", "data/cifar10.py"],
    "zoo": ["models", "data/augment.py", "training.py", "zoo.py"],
    "rotation": ["rotation.py", "groups.py"],
    "symmetry": ["symmetry.py", "groups.py"],
    "stitching": ["stitching.py", "groups.py"],
    "similarity": ["similarity.py"],
    "dissection": ["dissection.py", "data/concepts.py", "data/broden.py", "data/shapes.py",
                   "models/__init__.py", "models/imagenet.py", "groups.py"],
    "tables": ["tables.py"],
    "figures": ["figures.py", "paper.py"],
}
_PACKAGE = Path(intertwine.__file__).parent


def code_hash(stage):
    digest = hashlib.sha256()
    for entry in STAGE_CODE[stage]:
        path = _PACKAGE / entry
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(file.relative_to(_PACKAGE).as_posix().encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:12]


def as_json(block):
    """A config block as one JSON string: what a rule's params carry and its shell command passes."""
    return json.dumps(block, sort_keys=True)


def zoo_outputs(pattern):
    return [pattern.format(variant=v, seed=s) for v in VARIANTS for s in zoo_seeds(v)]


ZOO_TABLES = ["results/tables/zoo.parquet", "results/tables/zoo_epochs.parquet"]


def extra_formats(stem):
    """A figure's files besides its .png (which the report shows), one per configured format."""
    return [f"{stem}.{ext}" for ext in config["figures"]["formats"] if ext != "png"]


ZOO_FIGURES = ["results/figures/zoo_accuracy.png", "results/tables/zoo_summary.csv"]
ZOO_FIGURES += extra_formats("results/figures/zoo_accuracy")


def variant_sites(variant):
    """Site names of a variant, in forward order (from a freshly built model: same for every seed)."""
    return [site.name for site in sites(build(config["zoo"]["variants"][variant]))]


def check_subset(key, chosen, available):
    unknown = sorted(set(chosen) - set(available))
    if unknown:
        raise WorkflowError(f"config key {key}: {unknown} not among {list(available)}")


check_subset("zoo.seeds_per_variant", config["zoo"]["seeds_per_variant"], VARIANTS)
check_subset("zoo.training_per_variant", config["zoo"]["training_per_variant"], VARIANTS)
for _variant, _override in config["zoo"]["training_per_variant"].items():
    check_subset(f"zoo.training_per_variant.{_variant}", _override, config["zoo"]["training"])


def zoo_training(variant):
    """The training block of a variant's members: zoo.training with its per-variant overrides."""
    return config["zoo"]["training"] | config["zoo"]["training_per_variant"].get(variant, {})

ROTATION = config["rotation"]
check_subset("rotation.variants", ROTATION["variants"], VARIANTS)


def rotation_sites(variant):
    available = variant_sites(variant)
    check_subset("rotation.sites", ROTATION["sites"], available)
    return ROTATION["sites"] or available


def members(key, variant, count):
    """Seeds 0 .. count-1 of a variant, which the zoo must have trained."""
    if count > len(zoo_seeds(variant)):
        raise WorkflowError(f"config key {key}: {count} seeds of {variant!r} asked for, but the "
                            f"zoo trains {len(zoo_seeds(variant))}")
    return range(count)


ROTATION_TRIALS = [
    f"results/rotation/{variant}/seed{seed}/{site}/{group}/trial{trial}.parquet"
    for variant, groups in ROTATION["variants"].items()
    for seed in members("rotation.seeds", variant, ROTATION["seeds"])
    for site in rotation_sites(variant)
    for group in groups
    for trial in range(ROTATION["trials"])
]
ROTATION_OUTPUTS = (
    ["results/tables/rotation.parquet", "results/figures/rotation_penalty.png"]
    + extra_formats("results/figures/rotation_penalty")
    if ROTATION_TRIALS
    else []
)

SYMMETRY = config["symmetry"]
SYMMETRY_CHECKS = [
    f"results/symmetry/{variant}/seed{seed}.parquet"
    for variant in VARIANTS
    if config["zoo"]["variants"][variant]["arch"] in symmetry.ARCHS
    for seed in range(min(SYMMETRY["seeds"], len(zoo_seeds(variant))))
]
SYMMETRY_OUTPUTS = (
    ["results/tables/symmetry.parquet", "results/tables/symmetry_summary.csv"]
    if SYMMETRY_CHECKS
    else []
)

STITCHING = config["stitching"]
check_subset("stitching.variants", STITCHING["variants"], VARIANTS)
check_subset("stitching.pairs_per_variant", STITCHING["pairs_per_variant"], STITCHING["variants"])
check_subset("stitching.sites", STITCHING["sites"], VARIANTS)
for _variant, _chosen in STITCHING["sites"].items():
    check_subset(f"stitching.sites.{_variant}", _chosen, variant_sites(_variant))
check_subset("stitching.methods_per_variant", STITCHING["methods_per_variant"], STITCHING["variants"])


def stitch_methods(variant):
    """The variant's stitching methods as job names: `rank` becomes rank<r> per entry of ranks,
    `l1` becomes l1_<lambda> per entry of l1_lambdas."""
    expanded = []
    for method in STITCHING["methods_per_variant"].get(variant, STITCHING["methods"]):
        if method == "rank":
            expanded += [f"rank{r}" for r in STITCHING["ranks"]]
        elif method == "l1":
            expanded += [l1_method(strength) for strength in STITCHING["l1_lambdas"]]
        else:
            expanded.append(method)
    return expanded


# The settings only some methods read: a change to them reruns those methods' jobs only.
METHOD_ONLY = {
    "grelu": ("alpha", "scales_frozen_fraction", "sinkhorn_iters"),
    "grelu_cv": ("alpha_grid", "cv_held_out", "cv_epochs", "sinkhorn_iters"),
    "softsort": ("softsort_tau", "scales_frozen_fraction"),
}
NOT_PER_JOB = ("variants", "pairs", "pairs_per_variant", "pairs_per_method", "sites", "methods",
               "methods_per_variant", "ranks", "l1_lambdas", "settings_per_method")
for _method, _override in STITCHING["settings_per_method"].items():
    check_subset(f"stitching.settings_per_method.{_method}", _override,
                 [k for k in STITCHING if k not in NOT_PER_JOB])


def stitch_block(method):
    """The stitching settings a job of this method uses, with the method's own overrides, as
    JSON (its params)."""
    kind = parse_method(method)[0]
    skip = set(NOT_PER_JOB) | {k for keys in METHOD_ONLY.values() for k in keys} - set(METHOD_ONLY.get(kind, ()))
    block = {k: v for k, v in STITCHING.items() if k not in skip}
    return as_json(block | STITCHING["settings_per_method"].get(kind, {}))


def check_pairable(key, variants):
    for variant in variants:
        if len(zoo_seeds(variant)) < 2:
            raise WorkflowError(f"config key {key}: {key.split('.')[0]} pairs need at least 2 zoo "
                                f"members, but the zoo trains {len(zoo_seeds(variant))} of {variant!r}; "
                                "raise zoo.seeds (or zoo.seeds_per_variant) or drop the variant")


check_pairable("stitching.variants", STITCHING["variants"])


def stitch_pairs(variant):
    """The variant's (seed_a, seed_b) pairs, drawn from the global seed (see draw_pairs)."""
    count = STITCHING["pairs_per_variant"].get(variant, STITCHING["pairs"])
    return draw_pairs(len(zoo_seeds(variant)), count, config["seed"], "stitching", variant)


def stitch_member(which):
    """Input function: the checkpoint of member a or b of the job's pair."""
    index = {"a": 0, "b": 1}[which]
    return lambda wc: f"results/zoo/{wc.variant}/seed{stitch_pairs(wc.variant)[int(wc.pair)][index]}.pt"


def method_pairs(variant, method):
    """How many of the variant's pairs a method runs on: the first pairs_per_method of them."""
    pairs = len(stitch_pairs(variant))
    return min(pairs, STITCHING["pairs_per_method"].get(parse_method(method)[0], pairs))


STITCH_JOBS = [
    f"results/stitching/{variant}/pair{pair}/{method}.parquet"
    for variant in STITCHING["variants"]
    for method in stitch_methods(variant)
    for pair in range(method_pairs(variant, method))
]


def spec_option(variant, key):
    return normalize_spec(config["zoo"]["variants"][variant])[key]


# The appendix's stitching studies, each drawn when the config asks for it:
# - LeakyReLU sweep (D.3): G_ReLU stitching of variants that differ only in the activation's
#   negative slope (a ReLU variant counts as slope 0), when two or more slopes are stitched.
def _sweep_key(variant):
    spec = normalize_spec(config["zoo"]["variants"][variant])
    return as_json({k: v for k, v in spec.items() if k not in ("activation", "negative_slope")})


_LEAKY = [v for v in STITCHING["variants"] if "grelu" in stitch_methods(v)
          and spec_option(v, "activation") in ("relu", "leaky_relu")]
_LEAKY_BASE = next((_sweep_key(v) for v in _LEAKY if spec_option(v, "activation") == "leaky_relu"), None)
LEAKY_SLOPES = {v: spec_option(v, "negative_slope") if spec_option(v, "activation") == "leaky_relu" else 0.0
                for v in _LEAKY if _sweep_key(v) == _LEAKY_BASE}
if len(set(LEAKY_SLOPES.values())) < 2:
    LEAKY_SLOPES = {}
# - Transformers (D.4): the CCT variants stitched.
TRANSFORMERS = [v for v in STITCHING["variants"] if spec_option(v, "arch") == "cct"]
_KINDS = {parse_method(m)[0] for v in STITCHING["variants"] for m in stitch_methods(v)}
STUDY_FIGURES = {
    flag: f"results/figures/stitching_{name}.png"
    for flag, name, wanted in [
        ("leaky-relu", "leaky_relu", bool(LEAKY_SLOPES)),
        ("alpha-cv", "alpha_cv", "grelu_cv" in _KINDS),
        ("l1", "l1_sparsity", "l1" in _KINDS),
        ("softsort", "softsort", "softsort" in _KINDS),
        ("transformer", "transformer", bool(TRANSFORMERS)),
    ]
    if wanted
}
STUDY_OUTPUTS = list(STUDY_FIGURES.values()) + (["results/tables/leaky_relu_accuracy.csv"] if LEAKY_SLOPES else [])
STITCHING_OUTPUTS = (
    ["results/tables/stitching.parquet", "results/tables/stitching_summary.csv",
     "results/figures/stitching_penalty.png", "results/figures/stitching_dimension.png"]
    + extra_formats("results/figures/stitching_penalty")
    + extra_formats("results/figures/stitching_dimension")
    + STUDY_OUTPUTS
    + [other for png in STUDY_FIGURES.values() for other in extra_formats(png[:-4])]
    if STITCH_JOBS
    else []
)

SIMILARITY = config["similarity"]
check_subset("similarity.variants", SIMILARITY["variants"], VARIANTS)
check_pairable("similarity.variants", SIMILARITY["variants"])
SIMILARITY_PAIRS = max(SIMILARITY["procrustes_pairs"], SIMILARITY["cka_pairs"])


def similarity_pairs(variant):
    return draw_pairs(len(zoo_seeds(variant)), SIMILARITY_PAIRS, config["seed"], "similarity", variant)


def similarity_member(which):
    index = {"a": 0, "b": 1}[which]
    return lambda wc: f"results/zoo/{wc.variant}/seed{similarity_pairs(wc.variant)[int(wc.pair)][index]}.pt"


def similarity_parts(pair):
    """Which measures pair k computes: Procrustes for the first procrustes_pairs, CKA for the first cka_pairs."""
    return (" --procrustes" if pair < SIMILARITY["procrustes_pairs"] else "") + (
        " --cka" if pair < SIMILARITY["cka_pairs"] else "")


SIMILARITY_JOBS = [
    f"results/similarity/{variant}/pair{pair}.parquet"
    for variant in SIMILARITY["variants"]
    for pair in range(SIMILARITY_PAIRS)
]
SIMILARITY_FIGURES = (["results/figures/similarity_procrustes.png"] if SIMILARITY["procrustes_pairs"] else []) + (
    ["results/figures/similarity_cka.png"] if SIMILARITY["cka_pairs"] else [])
SIMILARITY_OUTPUTS = (
    ["results/tables/similarity.parquet", "results/tables/similarity_summary.csv"]
    + SIMILARITY_FIGURES
    + [other for png in SIMILARITY_FIGURES for other in extra_formats(png[:-4])]
    if SIMILARITY_JOBS
    else []
)

DISSECTION = config["dissection"]
check_subset("dissection.variants", DISSECTION["variants"], VARIANTS)
for _variant in DISSECTION["variants"]:
    if spec_option(_variant, "arch") == "cct":
        raise WorkflowError(f"config key dissection.variants: {_variant!r} is a transformer, whose sites "
                            "are token sequences, not the spatial maps dissection overlays on concept "
                            "masks; dissect convolutional variants")
check_subset("dissection.sites", DISSECTION["sites"], DISSECTION["variants"])


def dissection_sites(variant):
    """The variant's configured sites, or default_sites: each stage's output and one inside a block."""
    model_sites = sites(build(config["zoo"]["variants"][variant]))
    chosen = DISSECTION["sites"].get(variant)
    if chosen is None:
        return default_sites(model_sites)
    check_subset(f"dissection.sites.{variant}", chosen, [site.name for site in model_sites])
    return chosen


def mask_site(variant):
    """The top-units figure's site: the variant's last dissected site on the residual stream."""
    inside = {site.name: site.inside_residual for site in sites(build(config["zoo"]["variants"][variant]))}
    chosen = dissection_sites(variant)
    return ([site for site in chosen if not inside[site]] or chosen)[-1]


# The stage's settings a job reads (the fan-out keys pick jobs; the masks figure has its own rule).
DISSECTION_BLOCK = {k: v for k, v in DISSECTION.items() if k not in ("variants", "seeds", "sites", "external", "masks")}
DISSECTION_BLOCK["probe"] = DISSECTION["probe"] | {
    "shapes": {k: v for k, v in config["data"]["shapes"].items() if k not in ("train_size", "test_size", "image_size")}}
DISSECTION_JOBS = [
    f"results/dissection/{variant}/seed{seed}.parquet"
    for variant in DISSECTION["variants"]
    for seed in members("dissection.seeds", variant, DISSECTION["seeds"])
] + [f"results/dissection/external/{name}.parquet" for name in DISSECTION["external"]]
if DISSECTION["external"] and not DISSECTION["probe"]["broden"]:
    raise WorkflowError("config key dissection.external: ImageNet models are dissected on Broden; "
                        "set dissection.probe.broden to your Broden directory (e.g. broden1_224)")


def external_sites(name):
    model = DISSECTION["external"][name]
    return model.get("sites") or imagenet.DEFAULT_SITES[model["arch"]]


# The category figure's site per model: the masks figure's site, or an ImageNet model's last
# residual-stream site.
CATEGORY_SITES = {variant: mask_site(variant) for variant in DISSECTION["variants"]} | {
    name: ([s for s in external_sites(name) if imagenet.on_residual_stream(s)] or external_sites(name))[-1]
    for name in DISSECTION["external"]}
DISSECTION_MASKS = [f"results/figures/dissection_masks_{variant}.png" for variant in DISSECTION["variants"]]
DISSECTION_FIGURES = ["results/figures/dissection_fraction.png", "results/figures/dissection_categories.png"]
DISSECTION_OUTPUTS = (
    ["results/tables/dissection.parquet", "results/tables/dissection_units.parquet",
     "results/tables/dissection_summary.csv"]
    + DISSECTION_FIGURES + DISSECTION_MASKS
    + [other for png in DISSECTION_FIGURES + DISSECTION_MASKS for other in extra_formats(png[:-4])]
    if DISSECTION_JOBS
    else []
)
