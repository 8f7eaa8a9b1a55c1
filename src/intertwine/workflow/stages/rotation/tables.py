"""The rotation penalty's table: one row per trial."""

from __future__ import annotations

import pyarrow as pa

from intertwine.workflow.tables import PROVENANCE

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

#: The tables of this stage by the name `intertwine table --schema` takes.
TABLES = {"rotation": ROTATION}
