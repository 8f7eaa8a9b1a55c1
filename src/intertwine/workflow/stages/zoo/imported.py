"""The zoo stage's job for members taken from checkpoints trained elsewhere (``zoo.checkpoints``):
import one member. Its own module, so that an edit to it reruns the imports only, not training."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pandas as pd
import torch

from intertwine import models
from intertwine.data.augment import normalize
from intertwine.models.factory import check_sites
from intertwine.training import evaluate
from intertwine.workflow.job import Job
from intertwine.workflow.zoo import CHECKPOINT_FORMAT, data_fingerprint, fit_weights, foreign_state_dict


def import_member(
    job: Job,
    variant: str,
    seed: int,
    spec: dict,
    source: str | Path,
    whole_modules: bool = False,
    checkpoint_path: str | Path = "",
    eval_batch_size: int = 1000,
) -> tuple[dict, pd.DataFrame]:
    """A zoo member taken from a checkpoint trained elsewhere (``zoo.checkpoints``), not trained:
    its weights (``zoo.foreign_state_dict``) loaded into the variant's model, which they must fit
    exactly, and tested on this data set's validation and test splits. Returns the member's
    checkpoint, as ``train_member`` writes one (epochs 0, its source file recorded), and a one-row
    metrics table (epoch 0, the kept one)."""
    key = f"zoo.checkpoints.{variant}"
    spec = models.normalize_spec(spec)
    torch.manual_seed(job.seed("zoo", variant, seed, "init"))  # buffers a state dict may lack
    model = models.build(spec).to(job.device)
    state = foreign_state_dict(source, whole_modules, key)
    fit_weights(model, state, source, f"zoo.variants.{variant} ({spec})")
    mean, std = job.stats()
    classes = len(job.meta()["classes"])
    with torch.no_grad():
        probe = normalize(job.split("test", 2).images, mean, std)
        logits = model.eval()(probe)
    if logits.ndim != 2 or logits.shape[1] != classes:
        raise ValueError(
            f"{source}: the model of zoo.variants.{variant} gives outputs of shape {tuple(logits.shape)}, "
            f"but the data set has {classes} classes; set num_classes: {classes} in its spec (and train "
            "the checkpoints on this data set's classes)"
        )
    if spec["arch"] == "custom":
        check_sites(model, probe, f"zoo.variants.{variant}")
    accuracy = {
        split: evaluate(model, job.split(split), mean, std, eval_batch_size) for split in ("val", "test")
    }
    job.log(
        f"{variant} seed {seed}: taken from {source} ({models.count_parameters(model):,} parameters), "
        f"val_acc {accuracy['val']:.4f}, test_acc {accuracy['test']:.4f}"
    )
    n_params = models.count_parameters(model)
    provenance = job.provenance({"spec": spec, "source": str(source), "data": job.meta()["config_hash"]})
    checkpoint = {
        "format": CHECKPOINT_FORMAT,
        "variant": variant,
        "spec": spec,
        "seed": seed,
        "state_dict": model.state_dict(),
        "val_acc": accuracy["val"],
        "test_acc": accuracy["test"],
        "best_epoch": 0,
        "epochs": 0,
        "n_params": n_params,
        "train_seconds": 0.0,
        "select_on": "val",
        "test_dtype": "float32",
        "data": data_fingerprint(job.meta()),
        "imported_from": str(source),
        "source_sha256": hashlib.sha256(Path(source).read_bytes()).hexdigest(),
        **provenance,
    }
    nan = float("nan")
    metrics = pd.DataFrame(
        [
            {
                "variant": variant,
                "seed": seed,
                "epoch": 0,
                "lr": nan,
                "train_loss": nan,
                "train_acc": nan,
                "val_acc": accuracy["val"],
                "test_acc": accuracy["test"],
                "kept": True,
                "epoch_seconds": 0.0,
                "n_params": n_params,
                "checkpoint": str(checkpoint_path),
                **provenance,
            }
        ]
    )
    return checkpoint, metrics
