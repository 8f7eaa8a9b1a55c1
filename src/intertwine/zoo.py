"""The model zoo: train one member per (variant, seed), save and load checkpoints."""
from __future__ import annotations

from pathlib import Path
import time
from typing import Callable

import pandas as pd
import torch

import intertwine
from intertwine import models
from intertwine.data import channel_stats, load_meta, load_split
from intertwine.training import TrainConfig, evaluate, train
from intertwine.utils import atomic_path, config_hash, derive_seed, resolve_device

CHECKPOINT_FORMAT = "intertwine-checkpoint/1"


def train_member(spec: dict, variant: str, seed: int, data_dir: str | Path, training: dict,
                 global_seed: int = 0, checkpoint_path: str = "",
                 log: Callable[[str], None] = print) -> tuple[dict, pd.DataFrame]:
    """Train one zoo member; return its checkpoint (a dict) and its per-epoch metrics.

    ``training`` is the config's ``zoo.training`` block. The same (spec, variant, seed, data,
    training, global_seed) gives bit-identical weights on the CPU.
    """
    device = resolve_device(training.get("device", "auto"))
    config = TrainConfig.from_block(training)
    spec = models.normalize_spec(spec)
    key = (global_seed, "zoo", variant, seed)
    torch.manual_seed(derive_seed(*key, "init"))
    model = models.build(spec).to(device)
    generator = torch.Generator(device=device).manual_seed(derive_seed(*key, "batches"))

    meta = load_meta(data_dir)
    if spec["num_classes"] != len(meta["classes"]):
        raise ValueError(f"variant {variant!r} has num_classes {spec['num_classes']} but the data set "
                         f"has {len(meta['classes'])} classes; set num_classes in its spec")
    mean, std = channel_stats(data_dir, device)
    train_split = load_split(data_dir, "train").to(device)
    test_split = load_split(data_dir, "test").to(device)
    select_on = training.get("select_on", "val")
    val_split = test_split if select_on == "test" else load_split(data_dir, "val").to(device)

    n_params = models.count_parameters(model)
    log(f"{variant} seed {seed}: {spec} ({n_params:,} parameters) on {device}, "
        f"{len(train_split)} training images, selecting on {select_on}")
    started = time.perf_counter()
    result = train(model, train_split, val_split, config, generator, mean, std,
                   label=f"{variant} seed {seed}", log=log)
    model.load_state_dict(result.state_dict)
    test_acc = evaluate(model, test_split, mean, std, config.eval_batch_size, config.bf16,
                        config.channels_last)
    seconds = time.perf_counter() - started
    log(f"{variant} seed {seed}: kept epoch {result.best_epoch} (val_acc {result.val_acc:.4f}), "
        f"test_acc {test_acc:.4f}, {seconds:.1f}s")

    provenance = {"config_hash": config_hash({"spec": spec, "training": training,
                                              "global_seed": global_seed, "data": meta["config_hash"]}),
                  "version": intertwine.__version__}
    checkpoint = {"format": CHECKPOINT_FORMAT, "variant": variant, "spec": spec, "seed": seed,
                  "state_dict": result.state_dict, "val_acc": result.val_acc, "test_acc": test_acc,
                  "best_epoch": result.best_epoch, "epochs": config.epochs, "n_params": n_params,
                  "train_seconds": seconds, "device": str(device), "select_on": select_on,
                  # Later stages reuse test_acc rather than re-evaluating when it is float32.
                  "test_dtype": "bfloat16" if config.bf16 and device.type == "cuda" else "float32",
                  **provenance}
    metrics = pd.DataFrame(result.history)
    metrics.insert(0, "variant", variant)
    metrics.insert(1, "seed", seed)
    metrics["kept"] = metrics["epoch"] == result.best_epoch
    metrics["test_acc"] = metrics["kept"].map({True: test_acc, False: None}).astype("float64")
    metrics = metrics.assign(n_params=n_params, device=str(device), checkpoint=str(checkpoint_path),
                             **provenance)
    return checkpoint, metrics


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
