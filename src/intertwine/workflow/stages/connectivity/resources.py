"""What the connectivity stage's heavy jobs ask a cluster for (:mod:`intertwine.workflow.cluster`): one
function per rule, named like it, taking the plan's ``JobNeeds`` and the rule's wildcards; its
rules ask for them as ``NEEDS.<rule>`` (``NEEDS`` lists them)."""

from __future__ import annotations

from intertwine.workflow.cluster import JobNeeds, Need


def connectivity_pair(needs: JobNeeds, variant: str, **_) -> Need:
    # Per method and lambda: the batch-norm statistics on the training images, then both
    # splits scored; a forward pass costs about a third of a training step. Weight matching
    # runs on the CPU, seconds for a ResNet20.
    block = needs.plan.connectivity
    test = block["test_images"] or needs.test_images
    passes = len(block["methods"]) * block["lambdas"] * (2 * block["train_images"] + test)
    return needs.gpu_base + Need(0, 2) + needs.training(variant, 1, passes / 3)


#: The need of each of the stage's rules that does heavy work (every other rule's is ``light``).
NEEDS = {"connectivity_pair": connectivity_pair}
