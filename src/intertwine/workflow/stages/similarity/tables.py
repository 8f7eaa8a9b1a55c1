"""The similarity stage's tables: the pairs' measures, and the zoo as a whole."""

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

#: The zoo as a whole (``similarity.zoo``): per variant, site and measure, the distance between every
#: two of the first K members (the whole K x K matrix, zero diagonal included), and each member's
#: distance to the zoo's Procrustes mean (``seed_b`` null) for the measures that have one.
SIMILARITY_ZOO = pa.schema(
    [
        pa.field("variant", pa.string()),
        pa.field("site", pa.string()),
        pa.field("measure", pa.string()),
        pa.field("seed_a", pa.int64()),
        # null: the zoo's Procrustes mean
        pa.field("seed_b", pa.int64()),
        # the measure's distance, intertwine.measures.DISTANCE_FORMS (a similarity s as 2 (1 - s),
        # arccos s or 1 - s)
        pa.field("distance", pa.float64()),
        pa.field("n_samples", pa.int64()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant site measure seed_a seed_b"},
)

#: The tables of this stage by the name `intertwine table --schema` takes.
TABLES = {"similarity": SIMILARITY, "similarity_zoo": SIMILARITY_ZOO}
