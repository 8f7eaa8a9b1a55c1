"""What the rotation stage's heavy jobs ask a cluster for (:mod:`intertwine.workflow.cluster`): one
function per rule, named like it, taking the plan's ``JobNeeds`` and the rule's wildcards; its
rules ask for them as ``NEEDS.<rule>`` (``NEEDS`` lists them)."""

from __future__ import annotations

from intertwine.workflow.cluster import JobNeeds, Need


def rotation_trial(needs: JobNeeds, variant: str, **_) -> Need:
    epochs = needs.plan.rotation["epochs"]
    return needs.gpu_base + needs.training(variant, 1, epochs * needs.train_images)


#: The need of each of the stage's rules that does heavy work (every other rule's is ``light``).
NEEDS = {"rotation_trial": rotation_trial}
