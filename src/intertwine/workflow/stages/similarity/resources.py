"""What the similarity stage's heavy jobs ask a cluster for (:mod:`intertwine.workflow.cluster`): one
function per rule, named like it, taking the plan's ``JobNeeds`` and the rule's wildcards; its
rules ask for them as ``NEEDS.<rule>`` (``NEEDS`` lists them)."""

from __future__ import annotations

from intertwine.workflow.cluster import JobNeeds, Need


def similarity_pair(needs: JobNeeds, **_) -> Need:
    # N x N float64 kernels for each measure and site of both members.
    samples = needs.plan.similarity["samples"] or needs.test_images  # null: the whole test set
    return needs.gpu_base + Need(20 * samples * samples * 8 / 1e6, 60)


#: The need of each of the stage's rules that does heavy work (every other rule's is ``light``).
NEEDS = {"similarity_pair": similarity_pair}
