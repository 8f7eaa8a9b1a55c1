"""The similarity stage's table."""

from __future__ import annotations

import pyarrow as pa

from intertwine.workflow.tables import PROVENANCE

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
        # why a row has no value (a measure that does not apply to the variant); null otherwise
        pa.field("note", pa.string()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant pair site_a site_b measure"},
)

#: The tables of this stage by the name `intertwine table --schema` takes.
TABLES = {"similarity": SIMILARITY}
