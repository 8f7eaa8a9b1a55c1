"""The dissection stage's jobs: a zoo member, an ImageNet model, and the top-units figure."""

from __future__ import annotations

import dataclasses

import pandas as pd
from torch import Tensor

from intertwine import dissection, models
from intertwine.workflow.job import Job
from intertwine.workflow.stages.dissection import rows
from intertwine.workflow.stages.dissection.settings import DissectionConfig


def _settings(block: dict) -> dict:
    """The ``dissection`` block with the schema's defaults for the keys it lacks (nested too)."""
    return dataclasses.asdict(DissectionConfig.from_block(block, "dissection"))


def dissect_member(
    job: Job, checkpoint: str, sites: list[str], block: dict
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Network dissection of one zoo member at ``sites``, for every alpha and rotation draw of
    the ``dissection`` block: (summary, units), one row per (site, alpha, draw) and one per unit.
    Keys ``block`` lacks take the schema's defaults; the provenance hash is over ``block`` as given."""
    settings = _settings(block)
    model, meta = job.model(checkpoint)
    inside = {site.name: site.inside_residual for site in models.sites(model)}
    unknown = [site for site in sites if site not in inside]
    if unknown:
        raise ValueError(f"{checkpoint} has no sites {unknown}; its sites are {list(inside)}")
    probe = dissection.probe_concepts(settings["probe"], job.meta()["image_size"], job.global_seed)
    mean, std = job.stats()

    def read_site(site: str) -> Tensor:
        return models.site_activations(model, probe.images, [site], mean, std, settings["batch_size"])[
            site
        ].cpu()

    summary, units = rows.dissect_sites(
        read_site, sites, inside, probe, settings, meta["variant"], meta["seed"], job.global_seed, job.log
    )
    return summary.assign(**job.provenance({"dissection": block}, device=False)), units


def dissect_external(
    job: Job, name: str, arch: str, weights: str, block: dict, sites: list[str] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``dissect_member`` for a torchvision ImageNet model (``resnet50`` or ``convnext_tiny``)
    loaded from a local weights file, on the Broden directory ``block["probe"]["broden"]`` at its
    own image size: rows with variant ``name`` and seed 0."""
    from intertwine.data.broden import load_broden
    from intertwine.models import imagenet

    settings = _settings(block)
    if not settings["probe"].get("broden"):
        raise ValueError(
            f"dissection.external.{name} needs a Broden directory: set "
            "dissection.probe.broden to your copy (e.g. broden1_224)"
        )
    model = imagenet.load_imagenet_model(arch, weights).to(job.device)
    sites = list(sites or imagenet.DEFAULT_SITES[arch])
    probe = load_broden(settings["probe"]["broden"], max_images=settings["probe"]["images"])
    inside = {site: not imagenet.on_residual_stream(site) for site in sites}

    def read_site(site: str) -> Tensor:
        return imagenet.site_activations(model, arch, probe.images, [site], settings["batch_size"])[
            site
        ].cpu()

    summary, units = rows.dissect_sites(
        read_site, sites, inside, probe, settings, name, 0, job.global_seed, job.log
    )
    return summary.assign(**job.provenance({"dissection": block}, device=False)), units


def dissection_masks(
    job: Job, checkpoint: str, site: str, block: dict, units: pd.DataFrame
) -> tuple[Tensor, list[dict]]:
    """Probe images and ``dissection.top_examples`` panels of one zoo member at ``site``, for
    each alpha of ``block["masks"]`` in the basis of rotation draw 0: the units as the member's
    dissection labelled them (``units``: its units table, from ``dissect_member``)."""
    settings = _settings(block)
    masks = settings["masks"]
    missing = [alpha for alpha in masks["alphas"] if alpha not in settings["alphas"]]
    if missing:
        raise ValueError(
            f"dissection.masks.alphas {missing} are not among dissection.alphas "
            f"{settings['alphas']}: the figure shows the dissection's own units"
        )
    model, meta = job.model(checkpoint)
    probe = dissection.probe_concepts(settings["probe"], job.meta()["image_size"], job.global_seed)
    activations = models.site_activations(model, probe.images, [site], *job.stats(), settings["batch_size"])[
        site
    ].cpu()
    key = rows.rotation_key(job.global_seed, meta["variant"], meta["seed"], site)
    bases = dissection.rotated_bases(activations.shape[1], key, 0, settings["alphas"])
    panels = []
    for alpha in masks["alphas"]:
        labelled = units[
            (units["variant"] == meta["variant"])
            & (units["seed"] == meta["seed"])
            & (units["site"] == site)
            & (units["alpha"] == alpha)
            & (units["rotation_seed"] == 0)
        ]
        if len(labelled) != activations.shape[1]:
            raise ValueError(
                f"the dissection units hold {len(labelled)} units of {meta['variant']} seed "
                f"{meta['seed']} at {site}, alpha {alpha:g}, rotation 0, not its "
                f"{activations.shape[1]}: pass that member's units table (--units)"
            )
        for panel in dissection.top_examples(
            activations,
            rows.unit_labels(labelled),
            bases[alpha],
            tuple(probe.labels.shape[-2:]),
            masks["units"],
            masks["images"],
        ):
            panel["title"] = (
                f"alpha {alpha:g}, unit {panel['unit']}: {panel['concept']} "
                f"({panel['category']}), IoU {panel['iou']:.3f}"
            )
            panels.append(panel)
    return probe.images, panels
