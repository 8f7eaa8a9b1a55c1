"""What the stitching stage's heavy jobs ask a cluster for (:mod:`intertwine.workflow.cluster`): one
function per rule, named like it, taking the plan's ``JobNeeds`` and the rule's wildcards; its
rules ask for them as ``NEEDS.<rule>`` (``NEEDS`` lists them)."""

from __future__ import annotations

from intertwine.workflow.cluster import JobNeeds, Need


def stitch_pair(needs: JobNeeds, variant: str, method: str, **_) -> Need:
    block = needs.plan.stitch_block(method)
    images = block["train_images"] or needs.train_images
    sites = len(needs.plan.config["stitching"]["sites"].get(variant) or needs.plan.cut_site_names(variant))
    fits = 1 + (
        len(block["alpha_grid"]) * block["cv_epochs"] / max(block["epochs"], 1) if method == "grelu_cv" else 0
    )
    return needs.gpu_base + needs.training(variant, 1, sites * fits * block["epochs"] * images)


#: The need of each of the stage's rules that does heavy work (every other rule's is ``light``).
NEEDS = {"stitch_pair": stitch_pair}
