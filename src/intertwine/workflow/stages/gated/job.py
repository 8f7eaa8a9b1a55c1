"""The gated-networks stage's jobs: a member's neural path kernel and gate kernels, checked; a
logit ensemble of a variant's members."""

from __future__ import annotations

import pandas as pd
import torch

from intertwine import kernels
from intertwine.workflow.stages.gated import study as gated
from intertwine.data.augment import normalize
from intertwine.workflow.job import Job
from intertwine.workflow.stages.gated.settings import GatedConfig


def gated_ensemble(job: Job, checkpoints: list[str], eval_batch_size: int = 500) -> pd.DataFrame:
    """``kernels.logit_ensemble`` of zoo members (one variant's) on the whole test split: one row with
    the ensemble's test accuracy and its members' (mean, lowest, highest)."""
    members, metas = zip(*(job.model(path) for path in checkpoints))
    variants = {meta["variant"] for meta in metas}
    if len(variants) != 1:
        raise ValueError(f"an ensemble's members are of one variant; these are of {sorted(variants)}")
    test = job.split("test")
    x, y = normalize(test.images, *job.stats()).to(job.device), test.labels.to(job.device)
    mean, each = kernels.logit_ensemble([m.to(job.device) for m in members], x, eval_batch_size)
    accuracy = float((mean.argmax(1) == y).double().mean())
    alone = (each.argmax(2) == y).double().mean(1)
    seeds = [int(meta["seed"]) for meta in metas]
    job.log(
        f"{variants.pop()}: {len(members)} members' logits averaged: {100 * accuracy:.2f} % on {len(y)} test "
        f"images (members {100 * float(alone.min()):.2f}-{100 * float(alone.max()):.2f} %)"
    )
    row = {
        "variant": metas[0]["variant"],
        "members": len(members),
        "seeds": ",".join(map(str, seeds)),
        "test_images": len(y),
        "test_acc": accuracy,
        "member_acc_mean": float(alone.mean()),
        "member_acc_min": float(alone.min()),
        "member_acc_max": float(alone.max()),
    }
    return pd.DataFrame([row]).assign(**job.provenance({}, device=False))


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
