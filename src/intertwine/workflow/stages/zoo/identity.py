"""Where the code identities of the zoo stage's jobs start beyond its job, figures and tables
modules (which every stage's jobs start from, through the registry): a rerun decision
(``code_hash`` in its rules; :mod:`intertwine.workflow.code_identity`). Not itself reached by any
job, so editing it reruns nothing but what its entries change."""

from __future__ import annotations

#: What its table job computes beyond collecting its jobs' rows.
TABLE_COMPUTES = [f"{__package__}.study:zoo_table"]

#: Jobs that run one function of its job module, by the name its rules give ``code_hash``: a member
#: trained alone, a pack of members trained together (an edit to packed training reruns the packs,
#: not the members trained alone), and a member taken from a checkpoint trained elsewhere.
ENTRIES = {
    "train_member": [f"{__package__}.job:train_member"],
    "train_pack": [f"{__package__}.job:train_pack"],
    "import_member": [f"{__package__}.job:import_member"],
}
