"""Where the code identities of the deqntk stage's jobs start beyond its job, figures and tables
modules (which every stage's jobs start from, through the registry): a rerun decision
(``code_hash`` in its rules; :mod:`intertwine.workflow.code_identity`). Not itself reached by any
job, so editing it reruns nothing but what its entries change."""

from __future__ import annotations

#: What its table job computes beyond collecting its jobs' rows: the table holds the paper's
#: accuracies beside ours.
TABLE_COMPUTES = ["intertwine.workflow.paper"]

#: Jobs that run one function of its job module, by the name its rules give ``code_hash``.
ENTRIES = {
    "deqntk_gram": [f"{__package__}.job:deqntk_gram"],
    "deqntk_regression": [f"{__package__}.job:deqntk_regression"],
    "deqntk_depth": [f"{__package__}.job:deqntk_depth"],
    "deqntk_conv": [f"{__package__}.job:deqntk_conv"],
    "kernel_reference": [f"{__package__}.job:kernel_reference_member"],
}
