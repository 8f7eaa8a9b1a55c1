"""The dissection stage's tables."""

from __future__ import annotations

import pyarrow as pa

from intertwine.workflow.tables import PROVENANCE

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

#: The tables of this stage by the name `intertwine table --schema` takes.
TABLES = {"dissection": DISSECTION, "dissection_units": DISSECTION_UNITS}
