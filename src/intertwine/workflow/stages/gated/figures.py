"""The gated networks' figures (Lakshminarayanan & Singh)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from intertwine.workflow.plotting import FIGURE_WIDTH, MEASURE_LABELS, SMALL, wrapped


FAMILY_ORDER = ("dnn", "dgn", "dlgn", "dlgn_sf")


def _gated_columns(table: pd.DataFrame) -> list[tuple[str, str]]:
    """(family, value input) columns of the study's standalone, identity-gate members, in order."""
    present = set(zip(table["family"], table["value_input"]))
    return [(f, v) for f in FAMILY_ORDER for v in ("x", "ones") if (f, v) in present]


def _paper_reference(rows: pd.DataFrame) -> tuple[float, float, str] | None:
    """(mean %, sd %, "Table T: row") of the paper's number for a group of the gated table's
    members (``paper.reported_gated``: the data set, base, gates and training budget they have),
    or None where the paper reports none."""
    reported = rows.dropna(subset=["paper_acc"])
    if reported.empty:
        return None
    first = reported.iloc[0]
    return (
        100 * first["paper_acc"],
        100 * first["paper_sd"],
        f"Table {first['paper_table']}: {first['paper_row']}",
    )


def gated_accuracy(table: pd.DataFrame) -> plt.Figure:
    """Test accuracy per family x value input (standalone regime, identity gates; mean and sd over
    seeds, members as dots) per base architecture, each beside the paper's number for those members
    where it reports one (grey bar: the table row that matches their data set, base and training
    budget, ``paper.reported_gated``) and, in a second panel, the FL and FR regimes."""
    from intertwine.workflow.paper import gated_label

    standalone = table[(table["regime"].isna() | (table["regime"] == "standalone")) & ~table["permuted"]]
    regimes = table[table["regime"].isin(["fl", "fr"]) & ~table["permuted"]]
    # the standalone members over the FL and FR regimes, each the report's width
    fig, axes = plt.subplots(
        2, 1, figsize=(FIGURE_WIDTH, 7.0), layout="constrained", height_ratios=[3.8, 3.0]
    )
    ax = axes[0]
    columns = _gated_columns(standalone)
    archs = list(dict.fromkeys(standalone["base"]))
    width = 0.8 / (2 * len(archs))
    sources = []
    for k, arch in enumerate(archs):
        for i, (family, value_input) in enumerate(columns):
            where = dict(base=arch, family=family, value_input=value_input)
            acc = _group_acc(standalone, **where)
            if not len(acc):
                continue
            x = i + (2 * k - len(archs)) * width
            ax.bar(
                x,
                acc.mean(),
                width,
                yerr=acc.std(ddof=1) if len(acc) > 1 else 0,
                color=f"C{k}",
                label=f"ours: {arch}" if i == 0 else None,
            )
            ax.scatter(np.full(len(acc), x), acc, s=8, color="k", zorder=3)
            reference = _paper_reference(_group_rows(standalone, **where))
            if reference is not None:
                mean, sd, source = reference
                ax.bar(x + width, mean, width, yerr=sd, color="0.7", label=None if sources else "the paper's")
                sources.append(source.split(",")[0])
    ax.set_xticks(
        range(len(columns)),
        [gated_label("dnn" if f == "dnn" else f"{f} {v}") for f, v in columns],
        fontsize=SMALL if len(columns) > 6 else None,
    )
    ax.set_ylabel("test accuracy (%)")
    reference_note = "; ".join(dict.fromkeys(sources)) if sources else "no paper number at this budget"
    ax.set_title(wrapped(f"standalone: family x value input (grey: {reference_note})", 90), fontsize=9)
    ax.legend(fontsize=SMALL, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax = axes[1]
    if len(regimes):
        groups = list(dict.fromkeys(zip(regimes["variant"], regimes["regime"], regimes["family"])))
        for i, (variant, regime, family) in enumerate(groups):
            acc = regimes.loc[regimes["variant"] == variant, "test_acc"].to_numpy() * 100
            ax.bar(i, acc.mean(), 0.6, color="C2" if regime == "fl" else "C4")
            ax.scatter(np.full(len(acc), i), acc, s=8, color="k", zorder=3)
        ax.set_xticks(
            range(len(groups)), [f"{r.upper()} {f.upper()}\n{v}" for v, r, f in groups], fontsize=SMALL
        )
        ax.set_ylabel("test accuracy (%)")
        ax.set_title("feature network learned (FL) or random (FR)", fontsize=9)
    else:
        ax.text(0.5, 0.5, "no FL / FR variants", ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    return fig


def _group_rows(table: pd.DataFrame, **where) -> pd.DataFrame:
    """The rows whose columns equal ``where``'s values."""
    mask = np.ones(len(table), bool)
    for column, value in where.items():
        mask &= (table[column] == value).to_numpy()
    return table[mask]


def _group_acc(table: pd.DataFrame, **where) -> np.ndarray:
    return _group_rows(table, **where)["test_acc"].to_numpy() * 100


def gated_permutations(table: pd.DataFrame) -> plt.Figure:
    """Test accuracy per gate-layer permutation (identity first) for each family x value input that
    has permuted members, beside the paper's mean over the 23 permutations where it reports one for
    those members (Table I's permuted row of their data set, ``paper.reported_gated``)."""
    from intertwine.workflow.paper import gated_label

    rows = table[table["family"] != "dnn"].copy()
    rows["perm"] = rows["gate_perm"].fillna("identity")
    keys = [
        k
        for k in dict.fromkeys(zip(rows["base"], rows["family"], rows["value_input"]))
        if rows[(rows["base"] == k[0]) & (rows["family"] == k[1]) & (rows["value_input"] == k[2])][
            "permuted"
        ].any()
    ]
    n_perms = len(rows["perm"].unique())
    fig, ax = plt.subplots(figsize=(min(FIGURE_WIDTH, max(5, 0.9 * n_perms + 2)), 3.8), layout="constrained")
    perms = ["identity"] + sorted(p for p in rows["perm"].unique() if p != "identity")
    for k, (arch, family, value_input) in enumerate(keys):
        part = rows[
            (rows["base"] == arch) & (rows["family"] == family) & (rows["value_input"] == value_input)
        ]
        xs, means = [], []
        for i, perm in enumerate(perms):
            acc = part.loc[part["perm"] == perm, "test_acc"].to_numpy() * 100
            if len(acc):
                ax.scatter(np.full(len(acc), i), acc, s=10, color=f"C{k}", alpha=0.6)
                xs.append(i), means.append(acc.mean())
        key = f"{family} {value_input}"
        ax.plot(xs, means, "-o", color=f"C{k}", label=f"{arch} {gated_label(key)}")
        reference = _paper_reference(part[part["permuted"]])
        if reference is not None:
            ax.axhline(reference[0], color=f"C{k}", ls=":", lw=1)
    ax.set_xticks(range(len(perms)), perms, rotation=30 if n_perms <= 8 else 90, fontsize=SMALL)
    ax.set_xlabel("gate layer of each value layer (gate_perm)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(
        wrapped("gate-layer permutations (dotted: the paper's mean over 23, Table I of the data set)", 60),
        fontsize=9,
    )
    ax.legend(fontsize=SMALL, loc="best")
    return fig


def gated_kernels(npk: pd.DataFrame, similarity: pd.DataFrame | None) -> plt.Figure:
    """Left: across seeds, CKA at each site with the same site of the other member: gate CKA beside
    linear and G_ReLU CKA (the similarity stage's heatmap diagonals; study variants only). Right:
    each kernel's CKA with the member's empirical NTK (NPK and per-site gate kernels)."""
    # the CKAs across seeds over the CKAs with the NTK, each the report's width
    fig, axes = plt.subplots(2, 1, figsize=(FIGURE_WIDTH, 7.6), layout="constrained")
    ax = axes[0]
    variants = list(dict.fromkeys(npk["variant"]))
    if similarity is not None:
        same = similarity[
            (similarity["site_a"] == similarity["site_b"]) & similarity["variant"].isin(variants)
        ]
        measures = [m for m in ("gate_cka", "linear_cka", "grelu_cka") if m in set(same["measure"])]
        styles = {"gate_cka": "-", "linear_cka": "--", "grelu_cka": ":"}
        for k, variant in enumerate(v for v in variants if v in set(same["variant"])):
            for measure in measures:
                part = same[
                    (same["variant"] == variant) & (same["measure"] == measure) & (same["site_a"] != "model")
                ]
                means = part.groupby("site_a", sort=False)["value"].mean()
                ax.plot(
                    range(len(means)),
                    means.to_numpy(),
                    styles[measure],
                    marker="o",
                    ms=3,
                    color=f"C{k}",
                    label=f"{variant}: {MEASURE_LABELS[measure]}",
                )
                ax.set_xticks(range(len(means)), means.index, rotation=45, ha="right", fontsize=SMALL)
        ax.set_ylabel("CKA across seeds (same site)")
        ax.legend(fontsize=SMALL, loc="upper left", bbox_to_anchor=(1.01, 1))
    else:
        ax.text(
            0.5,
            0.5,
            "the similarity stage compares\nno variant of the study",
            ha="center",
            va="center",
            transform=ax.transAxes,
        )
        ax.set_axis_off()
    ax = axes[1]
    for k, variant in enumerate(variants):
        part = npk[npk["variant"] == variant]
        gates = part[part["kernel"] == "gate"].groupby("site", sort=False)["ntk_cka"].mean()
        ax.plot(range(len(gates)), gates.to_numpy(), "-o", ms=3, color=f"C{k}", label=variant)
        model = part.loc[part["kernel"] == "npk", "ntk_cka"]
        if len(model):
            ax.axhline(model.mean(), color=f"C{k}", ls="--", lw=1)
    ax.set_xlabel("site (gate kernel); dashed: the value network's NPK")
    ax.set_ylabel("CKA with the empirical NTK")
    ax.legend(fontsize=SMALL, loc="upper left", bbox_to_anchor=(1.01, 1))
    return fig
