"""What the pullback stage's heavy jobs ask a cluster for (:mod:`intertwine.workflow.cluster`): one
function per rule, named like it, taking the plan's ``JobNeeds`` and the rule's wildcards; its
rules ask for them as ``NEEDS.<rule>`` (``NEEDS`` lists them)."""

from __future__ import annotations

from intertwine.workflow.cluster import JobNeeds, Need


def pullback_external(needs: JobNeeds, name: str, **_) -> Need:
    """The paper's PGD grids on a 224 px ImageNet model: every (image, target) pair in one
    batch through forward and backward passes, three modes of ``steps`` steps."""
    entry = needs.plan.pullback["external"][name]
    classes = entry.get("classes", 5)
    pairs = classes * entry.get("per_class", 1) * (classes + entry.get("extra_targets", 1))
    # ResNet50 and DenseNet121 keep about 100 MB of activations per 224 px image for a backward pass.
    activations_mb = pairs * 100 * (entry.get("size", 224) / 224) ** 2
    return needs.gpu_base + Need(600 + 2 * activations_mb, 30)


#: The need of each of the stage's rules that does heavy work (every other rule's is ``light``).
NEEDS = {"pullback_external": pullback_external}
