"""The rotation-penalty stage's job: one trial."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import torch

from intertwine import models, rotation
from intertwine.workflow.job import Job
from intertwine.workflow.stages.rotation.settings import RotationConfig
from intertwine.workflow.settings import TrainConfig
from intertwine.workflow.zoo import recorded_test_acc


def rotation_trial(
    job: Job,
    checkpoint: str,
    site: str,
    group: str,
    trial: int,
    block: dict,
    training: dict,
    eval_batch_size: int | None = None,
) -> pd.DataFrame:
    """One row of the rotation table: a zoo member, a site, a group element, fine-tuning.

    ``block`` is the ``rotation`` block, ``training`` the ``zoo.training`` block it fine-tunes with
    (keys either lacks take the schema's defaults); ``eval_batch_size`` as in ``train_member``.
    """
    settings = RotationConfig.from_block(block, "rotation")
    training_settings = TrainConfig.from_block(
        training | ({} if eval_batch_size is None else {"eval_batch_size": eval_batch_size}), "zoo.training"
    )
    model, meta = job.model(checkpoint)
    by_name = {s.name: s for s in models.sites(model)}
    if site not in by_name:
        raise ValueError(f"{checkpoint} has no site {site!r}; its sites are {list(by_name)}")
    key = ("rotation", meta["variant"], meta["seed"], site, group, trial)
    generator = torch.Generator().manual_seed(job.seed(*key, "element"))
    matrix = rotation.sample_transform(group, by_name[site].channels, generator, settings.lognormal_sigma)
    splits = job.split("train", settings.train_images), job.split("val"), job.split("test")
    config = replace(
        training_settings, epochs=settings.epochs, steps=None, lr=settings.lr or training_settings.lr
    )
    batches = torch.Generator(device=job.device).manual_seed(job.seed(*key, "batches"))
    label = f"{meta['variant']} seed {meta['seed']} {site} {group} trial {trial}"
    row = rotation.rotation_trial(
        model,
        site,
        matrix,
        *splits,
        config,
        batches,
        *job.stats(),
        label,
        job.log,
        acc_before=recorded_test_acc(meta),
    )
    job.log(
        f"{label}: accuracy {row['acc_before']:.4f} before, {row['acc_transformed']:.4f} "
        f"transformed, {row['acc_finetuned']:.4f} after fine-tuning"
    )
    return pd.DataFrame(
        [
            {
                "variant": meta["variant"],
                "seed": meta["seed"],
                "site": site,
                "inside_residual": by_name[site].inside_residual,
                "group": group,
                "trial": trial,
                **row,
                "penalty": row["acc_before"] - row["acc_finetuned"],
                "epochs": settings.epochs,
                **job.provenance({"rotation": block, "training": training}),
            }
        ]
    )
