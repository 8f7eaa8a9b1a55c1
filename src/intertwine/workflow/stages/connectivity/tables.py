"""The connectivity stage's table."""

from __future__ import annotations

import pyarrow as pa

from intertwine.workflow.tables import PROVENANCE

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

#: The tables of this stage by the name `intertwine table --schema` takes.
TABLES = {"connectivity": CONNECTIVITY}
