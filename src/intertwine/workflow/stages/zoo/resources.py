"""What the zoo stage's heavy jobs ask a cluster for (:mod:`intertwine.workflow.cluster`): one
function per rule, named like it, taking the plan's ``JobNeeds`` and the rule's wildcards; its
rules ask for them as ``NEEDS.<rule>`` (``NEEDS`` lists them)."""

from __future__ import annotations

from intertwine.workflow.cluster import JobNeeds, Need


def member_images(needs: JobNeeds, variant: str) -> float:
    return needs.plan.member_epochs(variant) * needs.train_images


def train_member(needs: JobNeeds, variant: str, **_) -> Need:
    return needs.gpu_base + needs.training(variant, 1, member_images(needs, variant))


def train_pack(needs: JobNeeds, variant: str, first: str, last: str, **_) -> Need:
    members = int(last) - int(first) + 1
    # Each member's weights, gradients and optimiser state stay small beside the data; the
    # activations of K members grow with K: a measured 32-ResNet18 pack peaked near 10 GB.
    return (
        needs.gpu_base
        + Need(300 * members, 0)
        + needs.training(variant, members, member_images(needs, variant))
    )


#: The need of each of the stage's rules that does heavy work (every other rule's is ``light``).
NEEDS = {"train_member": train_member, "train_pack": train_pack}
