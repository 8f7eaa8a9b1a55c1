"""The model zoo: save and load checkpoints, and the zoo table. (A member trains in
``intertwine.jobs.zoo.train_member``.)"""

from __future__ import annotations

import pickle
from pathlib import Path

import pandas as pd
import torch

from intertwine import models
from intertwine.utils import atomic_path

CHECKPOINT_FORMAT = "intertwine-checkpoint/1"


def refuse_overwrite(path: str | Path) -> None:
    if Path(path).exists():
        raise FileExistsError(
            f"{path} exists; a trained checkpoint is never overwritten. "
            "Delete it (chmod u+w first: the workflow write-protects it) to retrain."
        )


def save_checkpoint(checkpoint: dict, path: str | Path) -> None:
    """Write atomically; an existing checkpoint is never overwritten (delete it to retrain)."""
    refuse_overwrite(path)
    with atomic_path(path) as tmp:
        torch.save(checkpoint, tmp)


# What every checkpoint holds (``jobs.zoo.train_member`` writes more).
CHECKPOINT_KEYS = ("format", "variant", "spec", "seed", "state_dict")


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read; the message names it and says how to recover."""


def _recover(path: str | Path) -> str:
    return (
        f"Delete it (rm -f {path}: the workflow write-protects checkpoints) and rerun its job: snakemake "
        "retrains that member (train_member), and every job that read it reruns after"
    )


def read_checkpoint(path: str | Path, map_location: str | torch.device = "cpu") -> dict:
    """A checkpoint's contents, loaded with torch's weights-only unpickler. A file that is not one
    (truncated by an interrupted copy or a full disk, or another kind of file) is a
    ``CheckpointError`` naming it and saying how to recover; a missing one a FileNotFoundError."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint; train it first (snakemake {path})")
    try:
        checkpoint = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # noqa: BLE001 - torch raises OSError, RuntimeError, EOFError, KeyError, ...
        if isinstance(err, pickle.UnpicklingError) and "weights_only" in str(err):
            what = (
                "it holds Python objects that are neither tensors nor plain data, which a checkpoint "
                "never does, so it is not loaded"
            )
        else:
            what = (
                f"it is truncated or damaged ({type(err).__name__}: "
                f"{(str(err).splitlines() or [''])[0][:120]})"
            )
        raise CheckpointError(
            f"{path} is not a readable intertwine checkpoint: {what}. {_recover(path)}"
        ) from None
    if not isinstance(checkpoint, dict) or checkpoint.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"{path} is not an intertwine checkpoint ({CHECKPOINT_FORMAT}: a dict with "
            f"format {CHECKPOINT_FORMAT!r}). {_recover(path)}"
        )
    missing = [key for key in CHECKPOINT_KEYS if key not in checkpoint]
    if missing or not isinstance(checkpoint["state_dict"], dict):
        raise CheckpointError(
            f"{path} is an incomplete checkpoint (it lacks {missing or ['a state_dict']}). {_recover(path)}"
        )
    return checkpoint


def load_weights(model: torch.nn.Module, path: str | Path, spec: dict | None = None) -> dict:
    """Load a checkpoint's weights into ``model``; a different architecture is an error naming both."""
    checkpoint = read_checkpoint(path, next(model.parameters()).device)
    try:
        model.load_state_dict(checkpoint["state_dict"])
    except RuntimeError as err:
        wanted = spec or type(model).__name__
        raise ValueError(
            f"{path} holds a {checkpoint['spec']} (variant {checkpoint['variant']!r}) "
            f"but it is being loaded into a {wanted}: the architectures differ "
            f"({str(err).splitlines()[0]})"
        ) from err
    return checkpoint


def recorded_test_acc(meta: dict) -> float | None:
    """The member's test accuracy from its checkpoint when it was evaluated in float32, as every
    later stage evaluates (then re-evaluating would give the same number); None otherwise, e.g.
    for a zoo evaluated under bf16 autocast or a checkpoint that predates the record."""
    return meta["test_acc"] if meta.get("test_dtype") == "float32" else None


def load_model(path: str | Path, device: str | torch.device = "cpu") -> tuple[torch.nn.Module, dict]:
    """Rebuild a zoo member from its checkpoint: ``(model in eval mode, checkpoint metadata)``."""
    checkpoint = read_checkpoint(path, device)
    try:
        model = models.build(checkpoint["spec"]).to(device)
        model.load_state_dict(checkpoint.pop("state_dict"))
    except (TypeError, ValueError, RuntimeError) as err:  # a spec or weights that do not fit
        raise CheckpointError(
            f"{path} holds weights that do not fit its own spec {checkpoint['spec']} "
            f"({(str(err).splitlines() or [''])[0][:200]}). {_recover(path)}"
        ) from None
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
