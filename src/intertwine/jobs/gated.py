"""The gated-networks stage's job: a member's neural path kernel and gate kernels, checked."""

from __future__ import annotations

import pandas as pd
import torch

from intertwine import gated
from intertwine.data.augment import normalize
from intertwine.jobs import Job
from intertwine.settings import GatedConfig


def npk_member(job: Job, checkpoint: str, block: dict) -> pd.DataFrame:
    """``gated.kernel_checks`` of one zoo member on the first ``block["probe_images"]`` test
    images: one row per kernel (its NPK where defined, the gate kernel of every site)."""
    settings = GatedConfig.from_block(block, "gated")
    model, meta = job.model(checkpoint)
    x = normalize(job.split("test", settings.probe_images).images, *job.stats())
    generator = torch.Generator().manual_seed(job.seed("gated", meta["variant"], meta["seed"]))
    rows = gated.kernel_checks(model, x, generator, value_ntk_draws=settings.value_ntk_draws)
    theorem = next((r for r in rows if r["value_ntk_error"] == r["value_ntk_error"]), None)
    job.log(
        f"{meta['variant']} seed {meta['seed']}: {len(rows)} kernels on {len(x)} images; largest "
        f"permutation error {max(r['permutation_error'] for r in rows):.2e}"
        + (
            ""
            if theorem is None
            else f"; value-weight NTK over {settings.value_ntk_draws} draws against d NPK: relative "
            f"distance {theorem['value_ntk_error']:.3f}, largest {theorem['value_ntk_z']:.1f} standard errors"
        )
    )
    table = pd.DataFrame(rows)
    table.insert(0, "variant", meta["variant"])
    table.insert(1, "seed", meta["seed"])
    return table.assign(probe_images=len(x), **job.provenance({"gated": block}, device=False))
