"""The DEQ-NTK stage's tables."""

from __future__ import annotations

import pyarrow as pa

from intertwine.workflow.tables import PROVENANCE

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

#: The tables of this stage by the name `intertwine table --schema` takes.
TABLES = {"deqntk": DEQNTK, "kernel_reference": KERNEL_REFERENCE}
