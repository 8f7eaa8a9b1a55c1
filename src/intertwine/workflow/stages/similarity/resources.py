"""What the similarity stage's heavy jobs ask a cluster for (:mod:`intertwine.workflow.cluster`): one
function per rule, named like it, taking the plan's ``JobNeeds`` and the rule's wildcards; its
rules ask for them as ``NEEDS.<rule>`` (``NEEDS`` lists them)."""

from __future__ import annotations

import copy
import functools

from intertwine.workflow.cluster import JobNeeds, Need
from intertwine.workflow.planning import as_json, spec_model


def similarity_pair(needs: JobNeeds, **_) -> Need:
    # N x N float64 kernels for each measure and site of both members.
    samples = needs.plan.similarity["samples"] or needs.test_images  # null: the whole test set
    return needs.gpu_base + Need(20 * samples * samples * 8 / 1e6, 60)


# The largest model whose site sizes come from a CPU pass (400 MB of float32 weights; a ResNet18 has
# 11 million): wider ones take the meta device.
MATERIALISED_PARAMETERS = 10**8


@functools.cache
def site_features(spec_json: str, side: int) -> dict[str, int]:
    """The features (channels x positions) of each site of a model spec on one side x side RGB
    image, from a forward pass of one image: on the CPU with the weights' memory left
    uninitialised (``Module.to_empty``) for a model of at most ``MATERIALISED_PARAMETERS``, else on
    the meta device (shapes without data: no memory). The CPU pass is for speed: on the meta
    device batch norm runs torch's Python decomposition, whose first call imports its compiler
    (torch._dynamo, 1.2 CPU-seconds that every Snakemake parse of the workflow paid)."""
    import torch

    from intertwine.models import count_parameters, sites

    model = spec_model(spec_json)  # shared (cached): a copy is materialised, never it
    device = "cpu" if count_parameters(model) <= MATERIALISED_PARAMETERS else "meta"
    model = (copy.deepcopy(model).to_empty(device=device) if device == "cpu" else model).eval()
    modules = dict(model.named_modules())
    features: dict[str, int] = {}

    def record(name):
        def hook(module, inputs, output):
            features[name] = output[0].numel()

        return hook

    handles = [modules[site.name].register_forward_hook(record(site.name)) for site in sites(model)]
    try:
        with torch.no_grad():
            model(torch.zeros((1, 3, side, side), device=device))
    finally:
        for handle in handles:
            handle.remove()
    return features


def similarity_zoo(needs: JobNeeds, variant: str, **_) -> Need:
    """K members' activations at the widest viewed site on the zoo view's images, float32 as the
    models give them, and the Procrustes mean's float64 copy of them (8 bytes an entry more); an
    hour for the forward passes and the measures, as a heavy job."""
    plan = needs.plan
    features = site_features(as_json(plan.zoo["variants"][variant]), needs.image_side)
    widest = max(features[site] for site in plan.similarity_zoo_sites(variant))
    entries = len(plan.similarity_zoo_members(variant)) * plan.similarity["zoo"]["samples"] * widest
    return needs.gpu_base + Need(entries * (4 + 8) / 1e6, 60)


#: The need of each of the stage's rules that does heavy work (every other rule's is ``light``).
NEEDS = {"similarity_pair": similarity_pair, "similarity_zoo": similarity_zoo}
