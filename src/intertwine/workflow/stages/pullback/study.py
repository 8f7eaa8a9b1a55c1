"""The excitation-pullback stage's table summary: each measurement's rows reduced per variant,
group, temperature mode and spread (the measurements are :mod:`intertwine.pullback.measurements`,
library code); and Hypothesis 1's units for the scorecard, from the settling table's rows
(``settling_verdict_values``; the rows are :func:`intertwine.gates.settling_rows`')."""

from __future__ import annotations

import math

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


def settling_verdict_values(table: pd.DataFrame) -> pd.DataFrame:
    """Per member (variant, seed), one independent unit of Hypothesis 1 for the claims scorecard.

    The paper's criterion: the correlation of the gating tensor fields of the *early* epoch (the
    first recorded epoch after initialisation: the earliest time the record can show) and of every
    later one with the final field, ``path_rho_low`` at its lowest over the epochs from the early
    one to the last before the end (the hypothesis' "for every t > t_gamma"); with the early
    epoch's ``path_rho_positive`` and ``path_rho_mean``. Beside it, our stricter reading: the
    agreement of the gates with the final pattern at the middle of training (the first recorded
    epoch at or after half of the final epoch), averaged over ReLU call sites, with the same at
    initialisation (epoch 0) and by chance.

    Parameters
    ----------
    table : pandas.DataFrame
        ``intertwine.gates.settling_rows``' rows of every member, with ``variant`` and ``seed`` columns (a table
        recorded before the ``path_rho_*`` columns existed gives NaN there).

    Returns
    -------
    pandas.DataFrame
        One row per member, in order of first appearance: ``variant``, ``seed``, ``final_epoch``,
        ``early_epoch`` (NaN when no epoch lies strictly between initialisation and the end),
        ``path_rho_low``, ``path_rho_positive``, ``path_rho_mean``, ``epoch`` (the middle one;
        the final epoch when no recorded epoch qualifies), ``agreement``, ``chance`` and
        ``initial`` (NaN without an epoch-0 record).
    """
    rows = []
    for (variant, seed), member in table.groupby(["variant", "seed"], sort=False):
        final = int(member["final_epoch"].iloc[0])
        recorded = sorted(set(member["epoch"]))
        epochs = [e for e in recorded if 2 * e >= final and e > 0]
        middle = epochs[0] if epochs else final
        at = member[member["epoch"] == middle]
        start = member[member["epoch"] == 0]
        between = [e for e in recorded if 0 < e < final]
        early = member[member["epoch"] == between[0]] if between else member.iloc[:0]
        later = member[member["epoch"].isin(between)]

        rows.append(
            {
                "variant": variant,
                "seed": int(seed),
                "final_epoch": final,
                "early_epoch": between[0] if between else math.nan,
                "path_rho_low": _reduced(later, "path_rho_low", lambda c: c.min(skipna=False)),
                "path_rho_positive": _reduced(early, "path_rho_positive", lambda c: c.iloc[0]),
                "path_rho_mean": _reduced(early, "path_rho_mean", lambda c: c.iloc[0]),
                "epoch": middle,
                "agreement": at["agreement"].mean(),
                "chance": at["chance"].mean(),
                "initial": start["agreement"].mean() if len(start) else math.nan,
            }
        )
    return pd.DataFrame(rows, columns=VERDICT_COLUMNS)


def _reduced(part: pd.DataFrame, name: str, reduce) -> float:
    """``reduce(part[name])``; NaN for no rows or a table recorded without the column."""
    return float(reduce(part[name])) if name in part and len(part) else math.nan


VERDICT_COLUMNS = [
    "variant",
    "seed",
    "final_epoch",
    "early_epoch",
    "path_rho_low",
    "path_rho_positive",
    "path_rho_mean",
    "epoch",
    "agreement",
    "chance",
    "initial",
]
