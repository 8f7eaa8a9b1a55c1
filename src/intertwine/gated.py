"""The gated-networks study (Lakshminarayanan & Singh): a zoo member's neural path kernel and gate
kernels with their invariance checks, the study's accuracy table beside the paper's Tables I-III,
and which of the paper's findings a run reproduces. (The models are
:mod:`intertwine.models.gated`; the kernels :mod:`intertwine.kernels.npk`.)
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from intertwine import models, paper, symmetry
from intertwine.kernels import npk
from intertwine.models.gated import GatedNet
from intertwine.models.myrtle import Myrtle
from intertwine.models.plain import ConvStack
from intertwine.similarity import kernel_cka

__all__ = ["findings", "has_npk", "kernel_checks", "member_npk", "npk_inputs", "study_table"]


def has_npk(model: nn.Module) -> bool:
    """Whether :func:`member_npk` knows the model's neural path kernel: a gated network, or a plain
    ReLU C4GAP/C1GAP/VGG or Myrtle (skip connections and other activations have other path
    features)."""
    if isinstance(model, GatedNet):
        return True
    plain = isinstance(model, (ConvStack, Myrtle))
    return plain and all(isinstance(model.get_submodule(s.name), nn.ReLU) for s in models.sites(model))


def npk_inputs(model: nn.Module, x: Tensor) -> dict:
    """What :func:`intertwine.kernels.npk.npk_conv_gap` needs of a model on images ``x``: the value
    network's gates in its layers' order (a gated network's ``gate_perm`` applied; a plain ReLU
    network's own 1{pre-activation > 0}), its input, and the selections of its max-pools (a gated
    network's gated max-pools; a plain network's max-pools select by its own activations)."""
    with torch.no_grad():
        if isinstance(model, GatedNet):
            gates, selections, final = model.gating(x)
            value_gates = [gates[g] for g in model.gate_perm]
            return {"gates": value_gates, "value_input": model.value_input} | _selections(selections, final)
        acts = list(models.site_activations(model, x, batch_size=len(x)).values())
        selections, h = [], None
        for (_, _, _, pool), a in zip(model.layer_names(), acts):
            module = None if pool is None else model.get_submodule(pool)
            if isinstance(module, nn.MaxPool2d):
                h, index = nn.functional.max_pool2d(a, 2, return_indices=True)
                selections.append(index)
            else:
                h = a if module is None else module(a)
                selections.append(None)
        final = None
        if isinstance(model.global_pool, nn.AdaptiveMaxPool2d):
            final = nn.functional.adaptive_max_pool2d(h, 1, return_indices=True)[1]
        gates = [(a > 0).to(x.dtype) for a in acts]
        return {"gates": gates, "value_input": "x"} | _selections(selections, final)


def _selections(selections: list, final: Tensor | None) -> dict:
    if final is None and all(s is None for s in selections):
        return {}
    return {"selections": selections, "global_selection": final}


def member_npk(model: nn.Module, x: Tensor, y: Tensor | None = None) -> Tensor:
    """The exact neural path kernel (N, N) of ``model`` (:func:`has_npk`) on normalised images
    ``x`` (or (N, M) between ``x`` and ``y``), in eval mode, by
    :func:`intertwine.kernels.npk.npk_conv_gap` on :func:`npk_inputs`."""
    if not has_npk(model):
        raise ValueError(
            "the neural path kernel is computed for gated networks and plain ReLU C4GAP/C1GAP/VGG/Myrtle "
            f"models, not a {type(model).__name__} (skip connections and other activations have other "
            "path features)"
        )
    was_training = model.training
    model.eval()
    try:
        a = npk_inputs(model, x)
        if y is None:
            return npk.npk_conv_gap(x, a.pop("gates"), **a)
        b = npk_inputs(model, y)
        extra = {f"{key}_y": b[key] for key in ("selections", "global_selection") if key in b}
        return npk.npk_conv_gap(x, a.pop("gates"), y, b["gates"], **a, **extra)
    finally:
        model.train(was_training)


def _gate_kernels(model: nn.Module, x: Tensor) -> dict[str, Tensor]:
    return {
        site: npk.gate_kernel(a) for site, a in models.site_activations(model, x, batch_size=len(x)).items()
    }


def _relative(new: Tensor, old: Tensor) -> float:
    return float((new - old).norm() / old.norm().clamp_min(1e-300))


SHIFT_IMAGES = 8


def kernel_checks(model: nn.Module, x: Tensor, generator: torch.Generator, shift: int = 1) -> list[dict]:
    """One row per kernel of a member on normalised probe images ``x``: its NPK (when
    :func:`has_npk`) and the gate kernel of every site, each with

    * ``permutation_error``: the relative change ||K' - K|| / ||K|| when random G_ReLU elements act
      on the weights (``symmetry.random_elements``, tied as a gated network needs): 0 up to rounding,
      since the gates permute with the units;
    * ``shift_error`` (NPK only): the relative change of NPK(x, x') when every x' is cyclically
      shifted by ``shift`` pixels along the width, on the first ``SHIFT_IMAGES`` images: exactly 0
      for circular padding without pools (SEEDS.md), and for the zoo's zero-padded, pooled networks
      a measure of how far the boundary and the pools break the invariance;
    * ``ntk_cka``: CKA of the kernel with the member's empirical NTK (all trainable parameters,
      every logit) on the same images.

    Computed in float64 on a copy; the model is left as it is.
    """
    model = copy.deepcopy(model).double().eval()
    x = x.double()
    ntk = npk.empirical_ntk(model, x)
    kernels = _gate_kernels(model, x)
    kinds = {site: "gate" for site in kernels}
    acted_model = symmetry.act_on_weights(model, symmetry.random_elements(model, "grelu", generator))
    acted = _gate_kernels(acted_model, x)
    shifted = {}
    if has_npk(model):
        kernels = {"model": member_npk(model, x)} | kernels
        kinds["model"] = "npk"
        acted["model"] = member_npk(acted_model, x)
        few = x[:SHIFT_IMAGES]  # the cross kernel costs as much as the whole one: a few images tell
        shifted["model"] = member_npk(model, few, torch.roll(few, shift, dims=-1))
    rows = []
    for site, kernel in kernels.items():
        rows.append(
            {
                "kernel": kinds[site],
                "site": site,
                "permutation_error": _relative(acted[site], kernel),
                "shift_error": _relative(shifted[site], kernel[: len(shifted[site]), : len(shifted[site])])
                if site in shifted
                else float("nan"),
                "ntk_cka": kernel_cka(kernel, ntk) if _varies(kernel) else float("nan"),
            }
        )
    return rows


def _varies(kernel: Tensor) -> bool:
    """A kernel that is not constant up to centring (CKA is undefined on a dead site's)."""
    centred = kernel - kernel.mean(0, keepdim=True) - kernel.mean(1, keepdim=True) + kernel.mean()
    return bool(centred.abs().max() > 1e-12 * kernel.abs().max().clamp_min(1e-300))


# --- the study's table and findings -------------------------------------------------------------


def study_table(
    zoo: pd.DataFrame, specs: dict[str, dict], dataset: str, epochs: dict[str, int]
) -> pd.DataFrame:
    """One row per member of the study's variants (``specs``: variant -> normalised spec) from the
    zoo table: its architecture, family (dnn for a plain network), regime, value input, gate
    permutation, beta, test accuracy, and the paper's table, row and accuracy where it reports
    one (``paper.reported_gated``; trained ``epochs[variant]`` epochs on ``dataset``)."""
    rows = []
    for variant, spec in specs.items():
        gated = spec.get("gated")
        perm = None if gated is None else gated["gate_perm"]
        reported = paper.reported_gated(spec, dataset, epochs[variant])
        for _, member in zoo[zoo["variant"] == variant].iterrows():
            rows.append(
                {
                    "variant": variant,
                    "seed": int(member["seed"]),
                    "base_arch": spec["arch"],
                    "base": _base(spec),
                    "width_multiplier": spec["width_multiplier"],
                    "family": "dnn" if gated is None else gated["family"],
                    "regime": None if gated is None else gated["regime"],
                    "value_input": "x" if gated is None else gated["value_input"],
                    "gate_perm": None if perm is None else ",".join(map(str, perm)),
                    "permuted": perm is not None and perm != sorted(perm),
                    "beta": None if gated is None or gated["regime"] != "standalone" else gated["beta"],
                    "dataset": dataset,
                    "test_acc": float(member["test_acc"]),
                    "paper_table": None if reported is None else reported[0],
                    "paper_row": None if reported is None else reported[1],
                    "paper_acc": None if reported is None else reported[2] / 100,
                    "paper_sd": None if reported is None else reported[3] / 100,
                    "config_hash": member["config_hash"],
                    "version": member["version"],
                }
            )
    if not rows:
        raise ValueError(f"the zoo table has no member of the gated study's variants {list(specs)}")
    return pd.DataFrame(rows)


def _base(spec: dict) -> str:
    """The plain network a study variant is built on, e.g. "myrtle w0.125" or "myrtle cw16":
    findings compare variants of one base only."""
    width = f"cw{spec['constant_width']}" if spec.get("constant_width") else f"w{spec['width_multiplier']:g}"
    return f"{spec['arch']} {width}"


def _group(table: pd.DataFrame, **where) -> np.ndarray:
    mask = np.ones(len(table), bool)
    for column, value in where.items():
        mask &= (table[column] == value).to_numpy()
    return table.loc[mask, "test_acc"].to_numpy() * 100


def _difference(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Mean difference (points) and its standard error (nan with fewer than 2 members a side)."""
    se = np.sqrt(a.var(ddof=1) / len(a) + b.var(ddof=1) / len(b)) if min(len(a), len(b)) > 1 else float("nan")
    return float(a.mean() - b.mean()), float(se)


#: How close is "barely matters", in accuracy points (the paper's differences are at most 0.8).
BARELY = 2.0


def findings(table: pd.DataFrame) -> pd.DataFrame:
    """Which of the paper's findings the study reproduces, one row each, from its own variants
    (standalone regime, per base network: architecture and width): the DLGN within 10 % of the DNN (the paper: 75.4
    vs 80.5 on C4GAP, 87.0 vs 93.6 on VGG16), the value input barely matters (|x - ones| <= 2
    points; the paper: <= 0.6), the gate permutation barely matters (<= 2 points; the paper:
    <= 1.7), and DNN >= DGN >= DLGN. Columns: finding, paper, ours, verdict (reproduced, not
    reproduced, not run), evidence (the members compared)."""
    rows = []
    base = table[(table["regime"].isna()) | (table["regime"] == "standalone")]
    for arch, group in base.groupby("base", sort=False):
        plain = ~group["permuted"]
        dnn = _group(group, family="dnn")
        dlgn = _group(group[plain], family="dlgn", value_input="x")
        dgn = _group(group[plain], family="dgn", value_input="x")
        if len(dnn) and len(dlgn):
            ratio = dlgn.mean() / dnn.mean()
            rows.append(
                _finding(
                    f"{arch}: DLGN within 10 % of the DNN",
                    "DLGN/DNN 0.94 (C4GAP), 0.93 (VGG16)",
                    f"DLGN/DNN {ratio:.3f} ({dlgn.mean():.1f} vs {dnn.mean():.1f} %)",
                    ratio >= 0.9,
                    f"{len(dlgn)} DLGN, {len(dnn)} DNN members",
                )
            )
        else:
            rows.append(
                _finding(f"{arch}: DLGN within 10 % of the DNN", "0.94, 0.93", "", None, "needs dnn and dlgn")
            )
        for family in ("dgn", "dlgn"):
            x = _group(group[plain], family=family, value_input="x")
            ones = _group(group[plain], family=family, value_input="ones")
            name = f"{arch}: the value input barely matters ({family.upper()})"
            if len(x) and len(ones):
                diff, se = _difference(x, ones)
                rows.append(
                    _finding(
                        name,
                        "|x - ones| <= 0.6 points",
                        f"x - ones {diff:+.1f} ± {se:.1f} points",
                        abs(diff) <= BARELY,
                        f"{len(x)} vs {len(ones)} members",
                    )
                )
            else:
                rows.append(_finding(name, "|x - ones| <= 0.6 points", "", None, "needs x and ones variants"))
        rows.append(_permutation_finding(arch, group, plain))
        if len(dnn) and len(dgn) and len(dlgn):
            order = dnn.mean() >= dgn.mean() >= dlgn.mean()
            rows.append(
                _finding(
                    f"{arch}: DNN >= DGN >= DLGN",
                    "80.5 >= 77.4 >= 75.4 (C4GAP); 93.6 >= 93.0 >= 87.0 (VGG16)",
                    f"{dnn.mean():.1f}, {dgn.mean():.1f}, {dlgn.mean():.1f}",
                    order,
                    "standalone, value input x, identity gates",
                )
            )
    return pd.DataFrame(rows, columns=["finding", "paper", "ours", "verdict", "evidence"])


def _permutation_finding(arch: str, group: pd.DataFrame, plain: pd.Series) -> dict:
    """Permuted gate layers against the identity, per family and value input of one base."""
    name, reported = (
        f"{arch}: the gate permutation barely matters",
        "permuted - identity within -0.1..+1.7 points (Table I)",
    )
    permuted = group[group["permuted"]]
    if not len(permuted):
        return _finding(name, reported, "", None, "no variant of this base permutes its gate layers")
    diffs = []
    for (family, value_input), members in permuted.groupby(["family", "value_input"]):
        identity = _group(group[plain], family=family, value_input=value_input)
        if len(identity):
            diffs.append(
                (f"{family} {value_input}", *_difference(members["test_acc"].to_numpy() * 100, identity))
            )
    if not diffs:
        return _finding(
            name,
            reported,
            "",
            None,
            "needs the identity-gate variant of each permuted family and value input",
        )
    worst = max(diffs, key=lambda d: abs(d[1]))
    ours = "; ".join(f"{k} {d:+.1f} ± {s:.1f}" for k, d, s in diffs)
    return _finding(name, reported, ours, abs(worst[1]) <= BARELY, f"{len(permuted)} permuted members")


def _finding(name: str, reported: str, ours: str, holds: bool | None, evidence: str) -> dict:
    verdict = "not run" if holds is None else "reproduced" if holds else "not reproduced"
    return {"finding": name, "paper": reported, "ours": ours, "verdict": verdict, "evidence": evidence}
