"""The symmetry stage's table."""

from __future__ import annotations

import pyarrow as pa

from intertwine.workflow.tables import PROVENANCE

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
        # Thm. 4.2: f stitched at the site into f~ (every site's element acting at once) through
        # the site's element itself: the logits' relative change against f, and the fraction of
        # images with f's predicted class (NaN where the model cannot be cut at the site)
        pa.field("stitched_relative_change", pa.float64()),
        pa.field("stitched_agreement", pa.float64()),
        pa.field("n_images", pa.int64()),
        pa.field("dtype", pa.string()),
        *PROVENANCE,
    ],
    metadata={"keys": "variant seed site group"},
)

#: The tables of this stage by the name `intertwine table --schema` takes.
TABLES = {"symmetry": SYMMETRY}
