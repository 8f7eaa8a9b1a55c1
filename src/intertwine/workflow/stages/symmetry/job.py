"""The symmetry stage's job: the weight-space action checked on one zoo member."""

from __future__ import annotations

import copy

import pandas as pd
import torch

from intertwine import models
from intertwine.workflow.stages.symmetry import study as symmetry_study
from intertwine.data.augment import normalize
from intertwine.workflow.job import Job
from intertwine.workflow.stages.symmetry.settings import SymmetryConfig


def symmetry_check(job: Job, checkpoint: str, block: dict) -> pd.DataFrame:
    """The symmetry self-check of one zoo member: ``symmetry_study.check_symmetry`` for every
    configured group, on the first ``block["images"]`` test images (keys ``block`` lacks take the
    schema's defaults)."""
    settings = SymmetryConfig.from_block(block, "symmetry")
    dtype = torch.float64 if settings.float64 else torch.float32
    model, meta = job.model(checkpoint)
    model = copy.deepcopy(model).to(dtype)  # the loaded model stays as it is
    x = normalize(job.split("test", settings.images).images, *job.stats()).to(dtype)
    rows = []
    for group in settings.groups:
        group = symmetry_study.checked_group(model, group)
        generator = torch.Generator().manual_seed(job.seed("symmetry", meta["variant"], meta["seed"], group))
        rows += symmetry_study.check_symmetry(model, x, group, generator, settings.lognormal_sigma)
    table = pd.DataFrame(rows).drop_duplicates(["site", "group"])
    table.insert(0, "variant", meta["variant"])
    table.insert(1, "seed", meta["seed"])
    table.insert(
        3, "inside_residual", table["site"].map({s.name: s.inside_residual for s in models.sites(model)})
    )
    return table.assign(
        n_images=len(x),
        dtype=str(dtype).removeprefix("torch."),
        **job.provenance({"symmetry": block}, device=False),
    )
