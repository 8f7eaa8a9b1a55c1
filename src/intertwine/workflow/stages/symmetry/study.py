"""The symmetry stage's self-check (paper Prop. 3.4, Remark 3.6, Thm. 4.2), on top of
:mod:`intertwine.symmetry`: random elements of a group act on a model's weights, one group of tied
sites at a time, and the changes of the network function and of the representations are measured
(:func:`check_symmetry`, with Thm. 4.2's stitched network from
:func:`intertwine.symmetry.stitched_changes`); :func:`checked_group` picks the group a model is checked with and
:func:`summarize` reduces the stage's table per variant and group.
"""

from __future__ import annotations

from math import nan

import pandas as pd
import torch
from torch import Tensor, nn

from intertwine import models
from intertwine.models.gated import GateActivation, GatedNet
from intertwine.symmetry import (
    POSITIVELY_HOMOGENEOUS,
    act_on_representation,
    act_on_weights,
    random_elements,
    site_groups,
    stitched_changes,
)

__all__ = ["check_symmetry", "checked_group", "summarize"]


def check_symmetry(
    model: nn.Module, x: Tensor, group: str, generator: torch.Generator, sigma: float = 1.0
) -> list[dict]:
    """Act with random elements of `group` on each group of tied sites in turn (identity elsewhere)
    and measure how the network function and the representations change.

    One dict per site: ``max_abs_logit_change`` and ``relative_change`` (Frobenius norm of the
    logit change over that of the logits) of the action on the site's tied group, and
    ``representation_error``: ``||R'_s - A_s R_s|| / ||A_s R_s||`` for the new representation
    R'_s and the old one R_s. A symmetry (G_ReLU for ReLU networks) gives zeros up to rounding;
    a random orthogonal element gives neither.

    Thm. 4.2 (``stitched_changes``): with the elements acting at every site at once (f~), the
    stitched network ``f~_{>s} ∘ A_s ∘ f_{<=s}`` against f at each site s where the model can be
    cut: ``stitched_relative_change`` (as ``relative_change``) and ``stitched_agreement`` (the
    fraction of images whose predicted class is f's, so 1 means the same accuracy); NaN at a
    site the model cannot be cut at (a gated network's feature sites).
    """
    model = model.eval()
    names = [site.name for site in models.sites(model)]
    logits = model(x).detach()
    representations = models.site_activations(model, x, batch_size=len(x))
    drawn = random_elements(model, group, generator, sigma=sigma, dtype=x.dtype)
    rows = []
    for tied in site_groups(model):
        acted = act_on_weights(model, {name: drawn[name] for name in tied})
        new_logits = acted(x).detach()
        new_representations = models.site_activations(acted, x, tied, batch_size=len(x))
        change = new_logits - logits
        for name in tied:
            expected = act_on_representation(representations[name], drawn[name])
            error = (new_representations[name] - expected).norm() / expected.norm().clamp_min(1e-30)
            rows.append(
                {
                    "site": name,
                    "group": group,
                    "max_abs_logit_change": change.abs().max().item(),
                    "relative_change": (change.norm() / logits.norm()).item(),
                    "representation_error": error.item(),
                }
            )
    stitched = stitched_changes(model, x, drawn, logits)
    for row in rows:
        row.update(stitched.get(row["site"], {"stitched_relative_change": nan, "stitched_agreement": nan}))
    return sorted(rows, key=lambda row: names.index(row["site"]))


def checked_group(model: nn.Module, group: str) -> str:
    """The group the self-check draws from for the config's ``group``: permutations instead of
    G_ReLU when an activation is not positively homogeneous (the scalings are no symmetry of,
    e.g., a sigmoid network)."""
    homogeneous = all(
        isinstance(model.get_submodule(site.name), (*POSITIVELY_HOMOGENEOUS, GateActivation))
        for site in models.sites(model)
    )
    if group == "monomial" and not isinstance(model, GatedNet):
        group = "grelu"  # a plain ReLU network's largest group
    return "permutation" if group in ("grelu", "monomial") and not homogeneous else group


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """Per variant and group: the largest function change and representation error over sites
    and seeds -- near zero for a symmetry, order one otherwise; the stitched network of Thm. 4.2
    over the sites on the residual stream (inside a block it is not f, Remark 3.6)."""
    inside = (
        table["inside_residual"].fillna(False).astype(bool)
        if "inside_residual" in table
        else pd.Series(False, index=table.index)
    )
    table = table.assign(
        stitched_relative_change=table["stitched_relative_change"].mask(inside),
        stitched_agreement=table["stitched_agreement"].mask(inside),
    )
    grouped = table.groupby(["variant", "group"], sort=False)
    return grouped.agg(
        seeds=("seed", "nunique"),
        sites=("site", "nunique"),
        max_relative_change=("relative_change", "max"),
        max_abs_logit_change=("max_abs_logit_change", "max"),
        max_representation_error=("representation_error", "max"),
        max_stitched_relative_change=("stitched_relative_change", "max"),
        min_stitched_agreement=("stitched_agreement", "min"),
    ).reset_index()
