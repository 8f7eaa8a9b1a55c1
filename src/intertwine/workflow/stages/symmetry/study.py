"""The symmetry stage's self-check (paper Prop. 3.4, Remark 3.6), on top of
:mod:`intertwine.symmetry`: random elements of a group act on a model's weights, one group of tied
sites at a time, and the changes of the network function and of the representations are measured
(:func:`check_symmetry`); :func:`checked_group` picks the group a model is checked with and
:func:`summarize` reduces the stage's table per variant and group.
"""

from __future__ import annotations

import pandas as pd
import torch
from torch import Tensor, nn

from intertwine import models
from intertwine.models.gated import GateActivation, GatedNet
from intertwine.symmetry import (
    _POSITIVELY_HOMOGENEOUS,
    act_on_representation,
    act_on_weights,
    random_elements,
    site_groups,
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
    return sorted(rows, key=lambda row: names.index(row["site"]))


def checked_group(model: nn.Module, group: str) -> str:
    """The group the self-check draws from for the config's ``group``: permutations instead of
    G_ReLU when an activation is not positively homogeneous (the scalings are no symmetry of,
    e.g., a sigmoid network)."""
    homogeneous = all(
        isinstance(model.get_submodule(site.name), (*_POSITIVELY_HOMOGENEOUS, GateActivation))
        for site in models.sites(model)
    )
    if group == "monomial" and not isinstance(model, GatedNet):
        group = "grelu"  # a plain ReLU network's largest group
    return "permutation" if group in ("grelu", "monomial") and not homogeneous else group


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """Per variant and group: the largest function change and representation error over sites
    and seeds -- near zero for a symmetry, order one otherwise."""
    grouped = table.groupby(["variant", "group"], sort=False)
    return grouped.agg(
        seeds=("seed", "nunique"),
        sites=("site", "nunique"),
        max_relative_change=("relative_change", "max"),
        max_abs_logit_change=("max_abs_logit_change", "max"),
        max_representation_error=("representation_error", "max"),
    ).reset_index()
