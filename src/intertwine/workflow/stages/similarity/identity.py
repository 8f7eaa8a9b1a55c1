"""Where the code identities of the similarity stage's jobs start beyond its job, figures and tables
modules (which every stage's jobs start from, through the registry): a rerun decision
(``code_hash`` in its rules; :mod:`intertwine.workflow.code_identity`). Not itself reached by any
job, so editing it reruns nothing but what its entries change."""

from __future__ import annotations

#: The zoo-as-a-whole job runs one function of the job module, by the name its rule gives
#: ``variant_code_hash``.
ENTRIES = {"similarity_zoo": [f"{__package__}.job:similarity_zoo"]}
