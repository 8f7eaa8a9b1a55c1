"""The stitching stage's table."""

from __future__ import annotations

import pyarrow as pa

from intertwine.workflow.tables import PROVENANCE

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

#: The tables of this stage by the name `intertwine table --schema` takes.
TABLES = {"stitching": STITCHING}
