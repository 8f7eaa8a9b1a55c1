"""Where the code identities of the zoo stage's jobs start beyond its job, figures and tables
modules (which every stage's jobs start from, through the registry): a rerun decision
(``code_hash`` in its rules; :mod:`intertwine.workflow.code_identity`). Not itself reached by any
job, so editing it reruns nothing but what its entries change."""

from __future__ import annotations

#: What its table job computes beyond collecting its jobs' rows.
TABLE_COMPUTES = [f"{__package__}.study:zoo_table"]

#: Jobs that run one function of its job module, by the name its rules give ``code_hash``: a member
#: taken from a checkpoint trained elsewhere.
ENTRIES = {"import_member": [f"{__package__}.job:import_member"]}
