"""Random valid elements for every site of a model (:func:`random_elements`): drawn per
residual stream, extended across option-A shortcuts, tied across a gated network's gates."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..groups import random_grelu, random_orthogonal, random_permutation
from ..models.gated import GateActivation
from .elements import POSITIVELY_HOMOGENEOUS
from .wiring import Wiring, model_wiring

#: Groups :func:`random_elements` can draw from ("monomial": signed scales at a gated network's
#: value sites, G_ReLU elsewhere).
GROUPS = ("grelu", "permutation", "orthogonal", "monomial")


def _extend_zeropad(src: Any, n_out: int, pad_before: int, draw_pad) -> Any:
    """The element ``A_src (+) D`` on the next stage: A_src on the middle block, D on the padding."""
    if isinstance(src, tuple):
        perm_in, scales_in = src
        n_in = perm_in.numel()
        pad_idx = torch.cat([torch.arange(pad_before), torch.arange(pad_before + n_in, n_out)])
        perm = torch.empty(n_out, dtype=torch.long)
        scales = torch.empty(n_out, dtype=scales_in.dtype)
        perm[pad_before : pad_before + n_in] = perm_in + pad_before
        scales[pad_before : pad_before + n_in] = scales_in
        if pad_idx.numel():
            p, s = draw_pad(pad_idx.numel())
            perm[pad_idx] = pad_idx[p]
            scales[pad_idx] = s.to(scales.dtype)
        return perm, scales
    n_in = src.shape[0]
    pad_idx = torch.cat([torch.arange(pad_before), torch.arange(pad_before + n_in, n_out)])
    out = torch.zeros(n_out, n_out, dtype=src.dtype)
    out[pad_before : pad_before + n_in, pad_before : pad_before + n_in] = src
    if pad_idx.numel():
        out[pad_idx.unsqueeze(1), pad_idx.unsqueeze(0)] = draw_pad(pad_idx.numel()).to(src.dtype)
    return out


def random_elements(
    model: nn.Module,
    group: str,
    generator: torch.Generator,
    *,
    sigma: float = 1.0,
    dtype: torch.dtype = torch.float64,
) -> dict[str, Any]:
    """A random valid element for every site of `model`, deterministic given `generator`.

    group "grelu": ``(perm, scales)`` from :func:`intertwine.groups.random_grelu` (lognormal
    scales with `sigma`); "permutation": ``(perm, ones)``, valid for any activation (GELU);
    "orthogonal": Haar-random ``(n, n)`` matrices from :func:`intertwine.groups.random_orthogonal`;
    "monomial" (gated networks only): G_ReLU, with random signs on the value sites' scales.
    In a gated network each value site takes the permutation of the feature site gating it.
    Draws follow the sites in forward order; a site tied to an earlier one by an identity shortcut
    gets a copy of its element (one draw per residual stream), and across an option-A shortcut
    the next stage's element is the previous stream's element on the middle channel block plus a
    fresh draw of the same group on the zero-padded channels. Always passes :func:`act_on_weights`'
    validation (raises ValueError for "grelu" on a model whose activations are not positively
    homogeneous).

    Parameters
    ----------
    model : nn.Module
        A model built by ``intertwine.models.build``.
    group : str
        "grelu", "permutation", "orthogonal" or "monomial" (``GROUPS``).
    generator : torch.Generator
        The source of every draw.
    sigma : float, default 1.0
        The lognormal scales' sigma ("grelu", "monomial").
    dtype : torch.dtype, default torch.float64
        The dtype of the scales and matrices.

    Returns
    -------
    dict[str, Any]
        Site name -> ``(perm, scales)`` (long (n,) and (n,) of ``dtype``) or, for "orthogonal", an
        (n, n) matrix of ``dtype``; every site, in forward order.
    """
    if group not in GROUPS:
        raise ValueError(f"unknown group {group!r}; expected one of {GROUPS}")
    wiring = model_wiring(model)
    if group == "monomial" and not wiring.gated_by:
        raise ValueError(
            "signed monomials are symmetries of a gated network's value units only; this "
            f"{type(model).__name__} has none: use group 'grelu'"
        )
    if group in ("grelu", "monomial"):
        for site in wiring.sites:
            act = model.get_submodule(site.name)
            if not isinstance(act, (*POSITIVELY_HOMOGENEOUS, GateActivation)):
                raise ValueError(
                    f"site {site.name!r}: {type(act).__name__} is not positively homogeneous, so "
                    "G_ReLU scalings are not symmetries of it; use group 'permutation'"
                )

    def draw(n: int):
        if group in ("grelu", "monomial"):
            perm, scales = random_grelu(n, generator, sigma, as_parts=True, dtype=dtype)
            return perm.long(), scales
        if group == "permutation":
            return random_permutation(n, generator).long(), torch.ones(n, dtype=dtype)
        return random_orthogonal(n, generator, dtype=dtype)

    out: dict[str, Any] = {}
    for site in wiring.sites:
        link = wiring.links.get(site.name)
        if link is None:
            out[site.name] = draw(site.channels)
        elif link.kind == "identity":
            src = out[link.source]
            out[site.name] = tuple(t.clone() for t in src) if isinstance(src, tuple) else src.clone()
        else:
            out[site.name] = _extend_zeropad(out[link.source], site.channels, link.pad_before, draw)
    if group != "orthogonal":
        _tie_gates(model, wiring, out, group, generator)
    return out


def _tie_gates(model: nn.Module, wiring: Wiring, out: dict, group: str, generator: torch.Generator) -> None:
    """Make a gated network's drawn elements valid: each value site takes the permutation of the
    feature site gating it (random signs on its scales for "monomial"); soft gates keep only the
    feature sites' permutations."""
    for value_site, feature_site in wiring.gated_by.items():
        perm, scales = out[feature_site]
        if not model.hard:
            out[feature_site] = (perm, torch.ones_like(scales))
        value_scales = out[value_site][1]
        if group == "monomial":
            signs = torch.randint(0, 2, value_scales.shape, generator=generator) * 2 - 1
            value_scales = value_scales * signs.to(value_scales.dtype)
        out[value_site] = (perm.clone(), value_scales)
