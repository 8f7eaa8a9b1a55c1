"""Explicit Parquet schemas (keys first, then values, then provenance) and atomic writes.

Each schema names its key columns (``keys``): a table holds one row per key, and reading per-job
files checks each file against the schema, so a stale, foreign or half-written file is an error
that names it rather than a column of nulls or a row counted twice.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from intertwine.utils import atomic_path

PROVENANCE = [pa.field("config_hash", pa.string()), pa.field("version", pa.string())]

ZOO_EPOCHS = pa.schema(
    [
        pa.field("variant", pa.string()),
        pa.field("seed", pa.int64()),
        pa.field("epoch", pa.int64()),
        pa.field("lr", pa.float64()),
        pa.field("train_loss", pa.float64()),
        pa.field("train_acc", pa.float64()),
        pa.field("val_acc", pa.float64()),
        pa.field("test_acc", pa.float64()),  # only on the kept epoch, null elsewhere
        pa.field("kept", pa.bool_()),
        pa.field("epoch_seconds", pa.float64()),
        pa.field("n_params", pa.int64()),
        pa.field("device", pa.string()),
        pa.field("checkpoint", pa.string()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant seed epoch"},
)

ZOO = pa.schema(
    [
        pa.field("variant", pa.string()),
        pa.field("seed", pa.int64()),
        pa.field("val_acc", pa.float64()),
        pa.field("test_acc", pa.float64()),
        pa.field("n_params", pa.int64()),
        pa.field("epochs", pa.int64()),
        pa.field("best_epoch", pa.int64()),
        pa.field("train_seconds", pa.float64()),
        pa.field("device", pa.string()),
        pa.field("checkpoint", pa.string()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant seed"},
)

ROTATION = pa.schema(
    [
        pa.field("variant", pa.string()),
        pa.field("seed", pa.int64()),
        pa.field("site", pa.string()),
        pa.field("inside_residual", pa.bool_()),
        pa.field("group", pa.string()),
        pa.field("trial", pa.int64()),
        pa.field("acc_before", pa.float64()),
        pa.field("acc_transformed", pa.float64()),
        pa.field("acc_finetuned", pa.float64()),
        pa.field("penalty", pa.float64()),
        pa.field("epochs", pa.int64()),
        pa.field("finetune_seconds", pa.float64()),
        pa.field("device", pa.string()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant seed site group trial"},
)

STITCHING = pa.schema(
    [
        pa.field("variant", pa.string()),
        pa.field("pair", pa.int64()),
        pa.field("seed_a", pa.int64()),
        pa.field("seed_b", pa.int64()),
        pa.field("site", pa.string()),
        pa.field("inside_residual", pa.bool_()),
        pa.field("method", pa.string()),
        # the method's parameter: rank r, the L1 strength, the G_ReLU layer's alpha (grelu_cv: chosen)
        pa.field("rank", pa.int64()),
        pa.field("l1_lambda", pa.float64()),
        pa.field("alpha", pa.float64()),
        pa.field("acc_a", pa.float64()),
        pa.field("acc_b", pa.float64()),
        pa.field("acc_stitched", pa.float64()),
        pa.field("penalty", pa.float64()),
        # the penalty of the layer before training (its start: matched under init: match; rounded)
        pa.field("penalty_start", pa.float64()),
        pa.field("stitch_params", pa.int64()),  # dimension of the layer's parameter manifold
        pa.field("trainable_params", pa.int64()),
        pa.field("channels", pa.int64()),
        pa.field("epochs", pa.int64()),
        pa.field("train_seconds", pa.float64()),  # grelu_cv: all its runs, one per alpha
        pa.field("sparsity", pa.float64()),  # fraction of the final C x C matrix's |W_ij| <= 1e-3
        # G_ReLU layers only: the rounded layer (perm[i] = input channel feeding output channel i, and
        # the scales) and the fraction of P's mass off that permutation before rounding.
        pa.field("permutation", pa.list_(pa.int64())),
        pa.field("scales", pa.list_(pa.float64())),
        pa.field("off_permutation_mass", pa.float64()),
        pa.field("off_permutation_mass_by_epoch", pa.list_(pa.float64())),  # after each epoch of training
        # grelu_cv only: the alpha grid, each alpha's held-out accuracy, the alpha chosen
        pa.field("cv_alphas", pa.list_(pa.float64())),
        pa.field("cv_accuracies", pa.list_(pa.float64())),
        pa.field("alpha_selected", pa.float64()),
        pa.field("device", pa.string()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant pair site method"},
)

SIMILARITY = pa.schema(
    [
        pa.field("variant", pa.string()),
        pa.field("pair", pa.int64()),
        pa.field("seed_a", pa.int64()),
        pa.field("seed_b", pa.int64()),
        pa.field("site_a", pa.string()),
        pa.field("site_b", pa.string()),
        pa.field("measure", pa.string()),
        pa.field("value", pa.float64()),
        # the 95 % jackknife interval of a heatmap cell (similarity.intervals; else null)
        pa.field("low", pa.float64()),
        pa.field("high", pa.float64()),
        pa.field("n_samples", pa.int64()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant pair site_a site_b measure"},
)

CONNECTIVITY = pa.schema(
    [
        pa.field("variant", pa.string()),
        pa.field("pair", pa.int64()),
        pa.field("seed_a", pa.int64()),  # f, the reference
        pa.field("seed_b", pa.int64()),  # g, aligned to f
        pa.field("width_multiplier", pa.float64()),  # the variant's (for the barrier against width)
        pa.field("method", pa.string()),  # unaligned, weight_permutation, ..., activation_grelu
        pa.field("correction", pa.string()),  # none, reset (batch-norm statistics) or repair (REPAIR)
        pa.field("split", pa.string()),  # train (connectivity.train_images) or test
        pa.field("lam", pa.float64()),  # the weight of aligned g: 0 is f, 1 is aligned g
        pa.field("loss", pa.float64()),  # mean cross-entropy
        pa.field("accuracy", pa.float64()),
        # of the whole curve (method, correction, split), on every row of it: the largest loss minus the mean of
        # the endpoints' (Ainsworth et al.), the largest excess over the endpoints' line (Entezari
        # et al.), and the mean of the endpoints' accuracies minus the smallest along the line
        pa.field("barrier", pa.float64()),
        pa.field("barrier_line", pa.float64()),
        pa.field("accuracy_barrier", pa.float64()),
        pa.field("distance", pa.float64()),  # squared parameter distance of f and aligned g
        pa.field("sweeps", pa.int64()),  # weight matching's sweeps; 0 otherwise
        pa.field("align_seconds", pa.float64()),
        pa.field("images", pa.int64()),  # scored at each point
        pa.field("device", pa.string()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant pair method correction split lam"},
)

DISSECTION = pa.schema(
    [
        pa.field("variant", pa.string()),
        pa.field("seed", pa.int64()),
        pa.field("site", pa.string()),
        pa.field("inside_residual", pa.bool_()),
        pa.field("alpha", pa.float64()),
        pa.field("rotation_seed", pa.int64()),  # the k-th Haar draw of Q (alpha 0: the identity)
        pa.field("n_units", pa.int64()),
        pa.field("n_interpretable", pa.int64()),
        pa.field("fraction_interpretable", pa.float64()),
        pa.field("n_unique_concepts", pa.int64()),
        pa.field("n_images", pa.int64()),
        pa.field("probe", pa.string()),
        pa.field("quantile", pa.float64()),
        pa.field("iou_threshold", pa.float64()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant seed site alpha rotation_seed"},
)

DISSECTION_UNITS = pa.schema(
    [
        pa.field("variant", pa.string()),
        pa.field("seed", pa.int64()),
        pa.field("site", pa.string()),
        pa.field("alpha", pa.float64()),
        pa.field("rotation_seed", pa.int64()),
        pa.field("unit", pa.int64()),
        pa.field("concept", pa.string()),
        pa.field("category", pa.string()),
        pa.field("iou", pa.float64()),
        pa.field("threshold", pa.float64()),
        pa.field("detector", pa.bool_()),
    ],
    metadata={"keys": "variant seed site alpha rotation_seed unit"},
)

SYMMETRY = pa.schema(
    [
        pa.field("variant", pa.string()),
        pa.field("seed", pa.int64()),
        pa.field("site", pa.string()),
        pa.field("inside_residual", pa.bool_()),
        pa.field("group", pa.string()),
        pa.field("max_abs_logit_change", pa.float64()),
        pa.field("relative_change", pa.float64()),
        pa.field("representation_error", pa.float64()),
        pa.field("n_images", pa.int64()),
        pa.field("dtype", pa.string()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant seed site group"},
)


GATED = pa.schema(
    [
        pa.field("variant", pa.string()),
        pa.field("seed", pa.int64()),
        pa.field("base_arch", pa.string()),
        pa.field("base", pa.string()),  # the plain network it is built on: "myrtle w0.125", "c4gap w1"
        pa.field("width_multiplier", pa.float64()),
        pa.field("family", pa.string()),  # dnn (a plain network), dgn, dlgn, dlgn_sf
        pa.field("regime", pa.string()),  # standalone, fl, fr; null for dnn
        pa.field("value_input", pa.string()),  # x or ones
        pa.field("gate_perm", pa.string()),  # "1,0,3,2"; null for the identity
        pa.field("permuted", pa.bool_()),
        pa.field("beta", pa.float64()),  # soft gates' beta; null for hard gates and dnn
        pa.field("dataset", pa.string()),
        pa.field("test_acc", pa.float64()),
        pa.field("paper_table", pa.string()),  # I, II, III; null where the paper has no row
        pa.field("paper_row", pa.string()),
        pa.field("paper_acc", pa.float64()),
        pa.field("paper_sd", pa.float64()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant seed"},
)

# A logit ensemble of a variant's members (gated.ensembles): one row per variant; the gated table
# adds the paper's number (gated_ensembles.csv: ENSEMBLE_COLUMNS).
GATED_ENSEMBLE = pa.schema(
    [
        pa.field("variant", pa.string()),
        pa.field("members", pa.int64()),
        pa.field("seeds", pa.string()),  # "0,1,...,15"
        pa.field("test_images", pa.int64()),
        pa.field("test_acc", pa.float64()),  # the averaged logits' argmax
        pa.field("member_acc_mean", pa.float64()),
        pa.field("member_acc_min", pa.float64()),
        pa.field("member_acc_max", pa.float64()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant"},
)
ENSEMBLE_COLUMNS = (
    *GATED_ENSEMBLE.names[:8],
    "paper_row",  # e.g. "CIFAR-10 C1GAP-16-ENS (200 epochs)"; empty where the paper has none
    "paper_acc",
)

NPK = pa.schema(
    [
        pa.field("variant", pa.string()),
        pa.field("seed", pa.int64()),
        pa.field("kernel", pa.string()),  # npk (site "model") or gate
        pa.field("site", pa.string()),
        pa.field("probe_images", pa.int64()),
        pa.field("permutation_error", pa.float64()),
        pa.field("shift_error", pa.float64()),  # npk only
        pa.field("ntk_cka", pa.float64()),
        # npk of a gated member only: its value weights' NTK at +-1 draws against d NPK (Thm 2.1)
        pa.field("value_ntk_error", pa.float64()),
        pa.field("value_ntk_z", pa.float64()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant seed kernel site"},
)


# The excitation-pullback stage (intertwine.pullback_study). mode: gradient, global, per_neuron.
# Per member: cosines between its pullbacks and those of the same function with a random group
# element on its weights (group permutation, spread 0; grelu, log-normal scale spread sigma).
def at_stage_temperature(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of a pullback table at the stage's own temperature (``pullback.temperature``): those
    of a ``pullback.sweep`` temperature (``sweep`` true) left out; a table without the column as it is."""
    return table[~table["sweep"].astype(bool)] if "sweep" in table else table


PULLBACK_SYMMETRY = pa.schema(
    [
        pa.field("variant", pa.string()),
        pa.field("seed", pa.int64()),
        pa.field("group", pa.string()),
        pa.field("scale_spread", pa.float64()),
        pa.field("mode", pa.string()),
        pa.field("cos_mean", pa.float64()),  # over images
        pa.field("cos_min", pa.float64()),
        pa.field("images", pa.int64()),  # images with a cosine (neither pullback zero)
        pa.field("logit_change", pa.float64()),  # the element's change of the function: rounding
        pa.field("probe_images", pa.int64()),
        pa.field("temperature", pa.float64()),
        pa.field("sweep", pa.bool_()),  # true: a pullback.sweep temperature, not the stage's own
        pa.field("dtype", pa.string()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant seed group scale_spread mode temperature"},
)

# Per pair of members: cosines between their pullbacks of the class logit (site "logit", units -1)
# or of hidden unit unit_a of a and its Hungarian match unit_b of b at a site.
PULLBACK_AGREEMENT = pa.schema(
    [
        pa.field("variant", pa.string()),
        pa.field("pair", pa.int64()),
        pa.field("seed_a", pa.int64()),
        pa.field("seed_b", pa.int64()),
        pa.field("site", pa.string()),
        pa.field("unit_a", pa.int64()),
        pa.field("unit_b", pa.int64()),
        pa.field("match_correlation", pa.float64()),  # of the matched units' activations; null for logits
        pa.field("mode", pa.string()),
        pa.field("cos_mean", pa.float64()),
        pa.field("cos_min", pa.float64()),
        pa.field("images", pa.int64()),
        pa.field("probe_images", pa.int64()),
        pa.field("temperature", pa.float64()),
        pa.field("sweep", pa.bool_()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant pair site unit_a mode temperature"},
)

# Per pair of members (ours), direction, mode and temperature: the paper's PGD toward a random
# other class along the source member's direction (seed_source), read by the other member
# (seed_other) on the same perturbed images (intertwine.pullback_study.transfer_measures):
# fractions of images predicted as the target, the other member's target probability and the
# change of its target-minus-best-other logit margin, means over images.
PULLBACK_TRANSFER = pa.schema(
    [
        pa.field("variant", pa.string()),
        pa.field("pair", pa.int64()),
        pa.field("seed_source", pa.int64()),
        pa.field("seed_other", pa.int64()),
        pa.field("mode", pa.string()),
        pa.field("temperature", pa.float64()),
        pa.field("sweep", pa.bool_()),
        pa.field("images", pa.int64()),
        pa.field("source_success", pa.float64()),  # the source member predicts the target after PGD
        pa.field("transfer_success", pa.float64()),  # the other member does
        pa.field("transfer_already", pa.float64()),  # the other member did on the clean image
        pa.field("transfer_target_prob_before", pa.float64()),
        pa.field("transfer_target_prob", pa.float64()),
        pa.field("transfer_prob_gain", pa.float64()),
        pa.field("transfer_margin_gain", pa.float64()),  # logits: target minus best other
        pa.field("pgd_steps", pa.int64()),
        pa.field("pgd_epsilon", pa.float64()),  # L2, images in [-1, 1]
        pa.field("pgd_step_size", pa.float64()),
        pa.field("probe_images", pa.int64()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant pair seed_source mode temperature"},
)

# Hypothesis 1 (path stability), per zoo member, recorded epoch (0: initialisation) and ReLU call
# site: the agreement of the member's binary activation pattern on its probe images with the
# pattern after the last epoch (final_epoch), the agreement by chance with the units' rates, and the
# fraction of active gates (intertwine.gates.settling_rows). kept_epoch: the epoch whose
# weights the member keeps (best validation).
PULLBACK_SETTLING = pa.schema(
    [
        pa.field("variant", pa.string()),
        pa.field("seed", pa.int64()),
        pa.field("epoch", pa.int64()),
        pa.field("site", pa.string()),
        pa.field("units", pa.int64()),  # gates per image at the site (channels x positions)
        pa.field("agreement", pa.float64()),
        pa.field("chance", pa.float64()),
        pa.field("active", pa.float64()),
        pa.field("final_epoch", pa.int64()),
        pa.field("kept_epoch", pa.int64()),
        pa.field("probe_images", pa.int64()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant seed epoch site"},
)

# The paper's grids on a torchvision ImageNet model (pullback.external): per mode, image and target
# class, the model's target probability before and after the paper's PGD along that mode's
# direction (and after each step), and whether the target is predicted after the last step.
PULLBACK_EXTERNAL = pa.schema(
    [
        pa.field("name", pa.string()),
        pa.field("arch", pa.string()),
        pa.field("mode", pa.string()),
        pa.field("image", pa.string()),  # file name in its class folder
        pa.field("label", pa.int64()),  # ImageNet index of its folder
        pa.field("target", pa.int64()),
        pa.field("target_prob_before", pa.float64()),
        pa.field("target_prob", pa.float64()),
        pa.field("success", pa.bool_()),
        pa.field("target_prob_by_step", pa.list_(pa.float64())),
        pa.field("size", pa.int64()),
        pa.field("temperature", pa.float64()),
        pa.field("functional", pa.string()),
        pa.field("pgd_steps", pa.int64()),
        pa.field("pgd_epsilon", pa.float64()),
        pa.field("pgd_step_size", pa.float64()),
        *PROVENANCE,
    ],
    metadata={"keys": "name mode image target"},
)

# Per member and mode: deletion and insertion curves (mean over images at 0, 1/steps, ..., 1 of
# the pixels; the class's probability) and their areas, the mean image's probability, and the PGD
# toward a random other class (success: the target predicted after the last step).
PULLBACK_FAITHFULNESS = pa.schema(
    [
        pa.field("variant", pa.string()),
        pa.field("seed", pa.int64()),
        pa.field("mode", pa.string()),
        pa.field("images", pa.int64()),
        pa.field("deletion_auc", pa.float64()),
        pa.field("insertion_auc", pa.float64()),
        pa.field("deletion_curve", pa.list_(pa.float64())),
        pa.field("insertion_curve", pa.list_(pa.float64())),
        pa.field("mean_image_prob", pa.float64()),
        pa.field("pgd_success", pa.float64()),
        pa.field("pgd_target_prob", pa.float64()),
        pa.field("pgd_success_by_step", pa.list_(pa.float64())),
        pa.field("pgd_steps", pa.int64()),
        pa.field("pgd_epsilon", pa.float64()),  # L2, images in [-1, 1]
        pa.field("pgd_step_size", pa.float64()),
        pa.field("probe_images", pa.int64()),
        pa.field("temperature", pa.float64()),
        pa.field("sweep", pa.bool_()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant seed mode temperature"},
)

# The DEQ neural tangent kernel stage: one row per kernel regression. study "accuracy" (the
# configured training-set sizes, one fixed test set, draw 0), "depth" (the depth sweep's draws) or
# "conv" (the convolutional DEQ-NTK on a small subset);
# depth is a string, "1", "2", ... for the depth-L NTK and "deq" for the DEQ-NTK.
DEQNTK = pa.schema(
    [
        pa.field("study", pa.string()),
        pa.field("dataset", pa.string()),
        pa.field("sigma_w2", pa.float64()),
        pa.field("sigma_u2", pa.float64()),
        pa.field("sigma_b2", pa.float64()),
        pa.field("n_train", pa.int64()),
        pa.field("n_test", pa.int64()),
        pa.field("depth", pa.string()),
        pa.field("draw", pa.int64()),
        # the depth sweep's panel of the paper's Figure 1 ("w0.6_b0.4"), "" outside the panels
        pa.field("panel", pa.string()),
        pa.field("preprocessing", pa.string()),  # deqntk.preprocessing: raw, centred, standardised
        pa.field("readout", pa.string()),  # the convolutional kernel's (study "conv"): gap, flatten; else ""
        pa.field("test_acc", pa.float64()),  # NaN where the kernel system is singular
        pa.field("ridge", pa.float64()),  # the ridge used (the finite-depth NTK's: with Theta(x, x) / n's)
        pa.field("iterations", pa.int64()),  # fixed-point iterations (the most any entry took); DEQ only
        pa.field("residual", pa.float64()),  # the largest last step of those iterations; DEQ only
        # seconds of the Gram (the accuracy study: summed over the blocks read) and of the solve
        pa.field("gram_seconds", pa.float64()),
        pa.field("regression_seconds", pa.float64()),
        pa.field(
            "paper_acc", pa.float64()
        ),  # Feng & Kolter's, a fraction like test_acc, where it has one (filled by deqntk_table)
        pa.field("device", pa.string()),
        *PROVENANCE,
    ],
    metadata={"keys": "study panel sigma_w2 sigma_u2 sigma_b2 n_train n_test depth draw"},
)

KERNEL_REFERENCE = pa.schema(
    [
        pa.field("variant", pa.string()),
        pa.field("seed", pa.int64()),
        pa.field("site", pa.string()),
        pa.field("kernel", pa.string()),  # the similarity measure whose kernel of the site is compared
        pa.field("cka", pa.float64()),  # with the DEQ-NTK Gram of the same images; NaN at a constant site
        pa.field("samples", pa.int64()),
        pa.field("sigma_w2", pa.float64()),
        pa.field("sigma_u2", pa.float64()),
        pa.field("sigma_b2", pa.float64()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant seed site kernel"},
)


#: The tables the claims scorecard reads (``intertwine claims --table NAME=PATH``), by name, with
#: their schemas (gated_findings is a CSV of the gated stage's findings: its columns below).
CLAIMS_SCHEMAS = {
    "zoo": ZOO,
    "symmetry": SYMMETRY,
    "rotation": ROTATION,
    "stitching": STITCHING,
    "similarity": SIMILARITY,
    "connectivity": CONNECTIVITY,
    "dissection": DISSECTION,
    "gated_findings": None,
    "pullback_symmetry": PULLBACK_SYMMETRY,
    "pullback_settling": PULLBACK_SETTLING,
    "deqntk": DEQNTK,
}
GATED_FINDINGS_COLUMNS = ("finding", "paper", "ours", "verdict", "evidence")


def to_table(df: pd.DataFrame, schema: pa.Schema) -> pa.Table:
    """Cast ``df`` to ``schema``; a missing or extra column is an error that names it."""
    missing = [name for name in schema.names if name not in df.columns]
    extra = [name for name in df.columns if name not in schema.names]
    if missing or extra:
        raise ValueError(
            f"table does not match its schema: missing columns {missing}, unexpected columns {extra}"
        )
    return pa.Table.from_pandas(df[schema.names], schema=schema, preserve_index=False)


def write_parquet(df: pd.DataFrame, path: str | Path, schema: pa.Schema) -> None:
    table = to_table(df, schema)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def write_csv(df: pd.DataFrame, path: str | Path, **options) -> None:
    """Small summary tables for the report, written atomically."""
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False, **options)


def keys(schema: pa.Schema) -> list[str]:
    """The key columns of a table: one row per combination."""
    return schema.metadata[b"keys"].decode().split()


def _file_schema(path: str | Path) -> pa.Schema:
    try:
        return pq.read_schema(path)
    except (OSError, pa.ArrowException) as err:
        raise ValueError(
            f"{path}: not a readable Parquet file ({err}); delete it and rerun its "
            "job (Snakemake reruns a missing output)"
        ) from None


def _compatible(found: pa.DataType, expected: pa.DataType) -> bool:
    """Whether a column of type ``found`` reads as ``expected`` without losing its meaning."""
    if found.equals(expected) or pa.types.is_null(found):
        return True
    for kind in (
        (pa.types.is_string, pa.types.is_large_string),
        (pa.types.is_integer,),
        (pa.types.is_floating,),
    ):
        if any(test(found) for test in kind) and any(test(expected) for test in kind):
            return True
    if pa.types.is_list(expected) and (pa.types.is_list(found) or pa.types.is_large_list(found)):
        return _compatible(found.value_type, expected.value_type)
    return False


def check_columns(path: str | Path, schema: pa.Schema) -> None:
    """``path``'s columns and types are ``schema``'s; else an error naming the file and the columns."""
    found = _file_schema(path)
    missing = [name for name in schema.names if name not in found.names]
    mistyped = [
        f"{name} ({found.field(name).type}, expected {schema.field(name).type})"
        for name in schema.names
        if name in found.names and not _compatible(found.field(name).type, schema.field(name).type)
    ]
    if missing or mistyped:
        raise ValueError(
            f"{path}: does not have the table's columns (missing {missing}, mistyped "
            f"{mistyped}); it was written by another stage or an older version: delete "
            "it and rerun its job"
        )


def read_parquet(paths, schema: pa.Schema | None = None) -> pd.DataFrame:
    """Read and concatenate per-job Parquet files, each given once; with ``schema``, each file is
    checked against it and the rows must be one per key."""
    paths = [str(path) for path in paths]
    repeated = sorted({path for path in paths if paths.count(path) > 1})
    if repeated:
        raise ValueError(
            f"{repeated[0]} is given more than once; give each file once (a repeated "
            "file would count its rows as independent evidence)"
        )
    for path in paths:
        _file_schema(path) if schema is None else check_columns(path, schema)
    if schema is None:
        tables = [pq.read_table(path) for path in paths]
        return pa.concat_tables(tables).to_pandas() if tables else pd.DataFrame()
    tables = [pq.read_table(path, schema=schema) for path in paths]
    df = pa.concat_tables(tables).to_pandas() if tables else schema.empty_table().to_pandas()
    if schema.metadata and b"keys" in schema.metadata:
        twice = df[df.duplicated(keys(schema), keep=False)]
        if len(twice):
            row = twice.iloc[0][keys(schema)].to_dict()
            raise ValueError(
                f"two rows for the same key {row} in {len(paths)} file(s); each key once "
                "(the same job's output given twice, or two jobs writing one key)"
            )
    return df
