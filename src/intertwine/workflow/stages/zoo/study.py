"""The zoo stage's table: one row per member, its kept epoch's accuracies and its training's cost."""

from __future__ import annotations

import pandas as pd


def zoo_table(epoch_tables: list[pd.DataFrame]) -> pd.DataFrame:
    """One row per zoo member from the per-epoch metrics (the kept epoch's accuracies)."""
    epochs = pd.concat(epoch_tables, ignore_index=True)
    grouped = epochs.groupby(["variant", "seed"], sort=True)
    summary = grouped.agg(epochs=("epoch", "max"), train_seconds=("epoch_seconds", "sum"))
    kept = epochs[epochs["kept"]].set_index(["variant", "seed"])
    columns = ["val_acc", "test_acc", "n_params", "device", "checkpoint", "config_hash", "version"]
    table = kept[columns].join(summary).rename_axis(["variant", "seed"]).reset_index()
    return table.assign(best_epoch=kept["epoch"].to_numpy())
