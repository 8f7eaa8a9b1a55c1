"""The excitation-pullback stage's table summary: each measurement's rows reduced per variant,
group, temperature mode and spread (the measurements are :mod:`intertwine.pullback.measurements`,
library code)."""

from __future__ import annotations

import pandas as pd

from intertwine.pullback.measurements import MODES
from intertwine.workflow.stages.pullback.tables import at_stage_temperature


def _spread_label(spread: float) -> str:
    return "permutation" if spread == 0 else f"G_ReLU sigma {spread:g}"


def summarize(
    symmetry: pd.DataFrame,
    agreement: pd.DataFrame,
    faithfulness: pd.DataFrame,
    transfer: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The stage in one table, a column per mode: per variant the smallest cosine under each group
    element (over members and images), the mean agreement across seeds (class logit; matched
    hidden units), the mean deletion and insertion areas and the PGD success rate over members,
    and (``transfer`` given) the transfer of PGD across seeds (ours, :func:`transfer_measures`:
    the other member's success and target-probability gain, mean over pairs and both directions),
    at the stage's temperature (:func:`at_stage_temperature`)."""
    symmetry, agreement, faithfulness = map(at_stage_temperature, (symmetry, agreement, faithfulness))
    transfer = at_stage_temperature(transfer) if transfer is not None else None
    rows = []
    for variant in dict.fromkeys(symmetry["variant"]):
        part = symmetry[symmetry["variant"] == variant]
        for spread in sorted(set(part["scale_spread"])):
            cell = part[part["scale_spread"] == spread].groupby("mode")["cos_min"].min()
            rows.append({"variant": variant, "measure": f"min cosine, {_spread_label(spread)}", **cell})
        pairs = agreement[agreement["variant"] == variant]
        for label, rows_ in (
            ("class logit", pairs["site"] == "logit"),
            ("matched units", pairs["site"] != "logit"),
        ):
            if rows_.any():
                cell = pairs[rows_].groupby("mode")["cos_mean"].mean()
                rows.append({"variant": variant, "measure": f"agreement across seeds, {label}", **cell})
        members = faithfulness[faithfulness["variant"] == variant]
        for column, label in (
            ("deletion_auc", "deletion area (lower: more faithful)"),
            ("insertion_auc", "insertion area (higher: more faithful)"),
            ("pgd_success", "PGD success toward a target class"),
        ):
            rows.append({"variant": variant, "measure": label, **members.groupby("mode")[column].mean()})
        moved = transfer[transfer["variant"] == variant] if transfer is not None else []
        if len(moved):
            for column, label in (
                ("transfer_success", "PGD transfer across seeds (ours): other member predicts the target"),
                (
                    "transfer_success_first_step",
                    "PGD transfer across seeds (ours): the same after the first step",
                ),
                (
                    "transfer_success_area",
                    "PGD transfer across seeds (ours): the same, mean over the steps",
                ),
                (
                    "transfer_prob_gain",
                    "PGD transfer across seeds (ours): other member's target probability gain",
                ),
            ):
                if column in moved:  # a table written before the per-step curve lacks it
                    rows.append(
                        {"variant": variant, "measure": label, **moved.groupby("mode")[column].mean()}
                    )
    table = pd.DataFrame(rows)
    return table[["variant", "measure", *(m for m in MODES if m in table.columns)]]
