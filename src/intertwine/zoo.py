"""The model zoo: save and load checkpoints, and the zoo table. (A member trains in
``intertwine.jobs.zoo.train_member``.)"""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from intertwine import models
from intertwine.utils import atomic_path

CHECKPOINT_FORMAT = "intertwine-checkpoint/1"


def refuse_overwrite(path: str | Path) -> None:
    if Path(path).exists():
        raise FileExistsError(f"{path} exists; a trained checkpoint is never overwritten. "
                              "Delete it (chmod u+w first: the workflow write-protects it) to retrain.")


def save_checkpoint(checkpoint: dict, path: str | Path) -> None:
    """Write atomically; an existing checkpoint is never overwritten (delete it to retrain)."""
    refuse_overwrite(path)
    with atomic_path(path) as tmp:
        torch.save(checkpoint, tmp)


def read_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != CHECKPOINT_FORMAT:
        raise ValueError(f"{path} is not an intertwine checkpoint ({CHECKPOINT_FORMAT})")
    return checkpoint


def load_weights(model: torch.nn.Module, path: str | Path, spec: dict | None = None) -> dict:
    """Load a checkpoint's weights into ``model``; a different architecture is an error naming both."""
    checkpoint = read_checkpoint(path, next(model.parameters()).device)
    try:
        model.load_state_dict(checkpoint["state_dict"])
    except RuntimeError as err:
        wanted = spec or type(model).__name__
        raise ValueError(f"{path} holds a {checkpoint['spec']} (variant {checkpoint['variant']!r}) "
                         f"but it is being loaded into a {wanted}: the architectures differ "
                         f"({str(err).splitlines()[0]})") from err
    return checkpoint


def recorded_test_acc(meta: dict) -> float | None:
    """The member's test accuracy from its checkpoint when it was evaluated in float32, as every
    later stage evaluates (then re-evaluating would give the same number); None otherwise, e.g.
    for a zoo evaluated under bf16 autocast or a checkpoint that predates the record."""
    return meta["test_acc"] if meta.get("test_dtype") == "float32" else None


def load_model(path: str | Path, device: str | torch.device = "cpu") -> tuple[torch.nn.Module, dict]:
    """Rebuild a zoo member from its checkpoint: ``(model in eval mode, checkpoint metadata)``."""
    checkpoint = read_checkpoint(path, device)
    model = models.build(checkpoint["spec"]).to(device)
    model.load_state_dict(checkpoint.pop("state_dict"))
    return model.eval(), checkpoint


def zoo_table(epoch_tables: list[pd.DataFrame]) -> pd.DataFrame:
    """One row per zoo member from the per-epoch metrics (the kept epoch's accuracies)."""
    epochs = pd.concat(epoch_tables, ignore_index=True)
    grouped = epochs.groupby(["variant", "seed"], sort=True)
    summary = grouped.agg(epochs=("epoch", "max"), train_seconds=("epoch_seconds", "sum"))
    kept = epochs[epochs["kept"]].set_index(["variant", "seed"])
    columns = ["val_acc", "test_acc", "n_params", "device", "checkpoint", "config_hash", "version"]
    table = kept[columns].join(summary).rename_axis(["variant", "seed"]).reset_index()
    return table.assign(best_epoch=kept["epoch"].to_numpy())
