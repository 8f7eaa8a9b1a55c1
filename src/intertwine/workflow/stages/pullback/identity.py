"""Where the code identities of the pullback stage's jobs start beyond its job, figures and tables
modules (which every stage's jobs start from, through the registry): a rerun decision
(``code_hash`` in its rules; :mod:`intertwine.workflow.code_identity`). Not itself reached by any
job, so editing it reruns nothing but what its entries change."""

from __future__ import annotations

#: What its table job computes beyond collecting its jobs' rows.
TABLE_COMPUTES = [f"{__package__}.study:summarize"]

#: Jobs that run one function of its job module (and of its figures), by the name its rules give
#: ``code_hash``.
ENTRIES = {
    "pullback_settling": [f"{__package__}.job:pullback_settling", f"{__package__}.figures:pullback_settling"],
}
