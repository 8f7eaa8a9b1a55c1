"""The rotation-penalty stage's job: one trial."""
from __future__ import annotations

import pandas as pd
import torch

from intertwine import models, rotation
from intertwine.jobs import Job
from intertwine.settings import TrainConfig
from intertwine.zoo import recorded_test_acc


def rotation_trial(job: Job, checkpoint: str, site: str, group: str, trial: int, block: dict,
                   training: dict) -> pd.DataFrame:
    """One row of the rotation table: a zoo member, a site, a group element, fine-tuning.

    ``block`` is the ``rotation`` block, ``training`` the ``zoo.training`` block it fine-tunes with.
    """
    model, meta = job.model(checkpoint)
    by_name = {s.name: s for s in models.sites(model)}
    if site not in by_name:
        raise ValueError(f"{checkpoint} has no site {site!r}; its sites are {list(by_name)}")
    key = ("rotation", meta["variant"], meta["seed"], site, group, trial)
    generator = torch.Generator().manual_seed(job.seed(*key, "element"))
    matrix = rotation.sample_transform(group, by_name[site].channels, generator, block["lognormal_sigma"])
    splits = job.split("train", block["train_images"]), job.split("val"), job.split("test")
    config = TrainConfig.from_block(training | {"epochs": block["epochs"], "lr": block["lr"] or training["lr"]},
                                    "zoo.training")
    batches = torch.Generator(device=job.device).manual_seed(job.seed(*key, "batches"))
    label = f"{meta['variant']} seed {meta['seed']} {site} {group} trial {trial}"
    row = rotation.rotation_trial(model, site, matrix, *splits, config, batches, *job.stats(), label, job.log,
                                  acc_before=recorded_test_acc(meta))
    job.log(f"{label}: accuracy {row['acc_before']:.4f} before, {row['acc_transformed']:.4f} "
            f"transformed, {row['acc_finetuned']:.4f} after fine-tuning")
    return pd.DataFrame([{
        "variant": meta["variant"], "seed": meta["seed"], "site": site,
        "inside_residual": by_name[site].inside_residual, "group": group, "trial": trial, **row,
        "penalty": row["acc_before"] - row["acc_finetuned"], "epochs": block["epochs"],
        **job.provenance({"rotation": block, "training": training}),
    }])
