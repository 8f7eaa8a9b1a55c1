"""The zoo's tables: one row per member and epoch, one per member."""

from __future__ import annotations

import pyarrow as pa

from intertwine.workflow.tables import PROVENANCE

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

#: The tables of this stage by the name `intertwine table --schema` takes.
TABLES = {"zoo_epochs": ZOO_EPOCHS, "zoo": ZOO}
