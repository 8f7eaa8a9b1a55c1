"""The gated stage's tables."""

from __future__ import annotations

import pyarrow as pa

from intertwine.workflow.tables import PROVENANCE

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

#: The tables of this stage by the name `intertwine table --schema` takes.
TABLES = {"gated": GATED, "gated_ensemble": GATED_ENSEMBLE, "npk": NPK}

#: The columns the stage's findings must have (a CSV the claims scorecard reads as ``gated_findings``).
FINDINGS_COLUMNS = ("finding", "paper", "ours", "verdict", "evidence")
