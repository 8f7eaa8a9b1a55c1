"""Theorem 4.2 of Godfrey et al. as a construction: stitch a model f into its transform f~ (f with
group elements A_i acting on its weights, Prop. 3.4) at a site l through the stitching layer
phi(A_l) itself, fixed, not trained. For ReLU, LeakyReLU and the identity phi(A) = A, and the
stitched network ``f~_{>l} ∘ phi(A_l) ∘ f_{<=l}`` is f as a function (appendix E.5:
``f~_{>l} = f_{>l} ∘ phi(A_l^-1)``) whenever every A_i is a symmetry (G_ReLU for ReLU networks).

In a residual network this holds at sites on the residual stream. At a site inside a block the
stitched network's skip path still carries f's block input, which f~'s block expects multiplied
by the stream's element, so the identity fails there unless that element is the identity (Remark
3.6: no such identity inside a block)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from .. import models
from .action import act_on_weights
from .elements import element_matrix


class ElementBridge(nn.Module):
    """A fixed stitching layer on the channels: ``x -> A x`` for one group element A (a 1x1
    convolution without bias, as the paper's stitching layers), with no trainable parameter."""

    def __init__(self, element: Any, channels: int, dtype: torch.dtype = torch.float64):
        super().__init__()
        self.register_buffer("weight", element_matrix(element, channels).to(dtype))

    def matrix(self) -> Tensor:
        return self.weight

    def forward(self, x: Tensor) -> Tensor:
        return torch.einsum("ij,nj...->ni...", self.weight.to(x.dtype), x)


def stitch_through_element(f: nn.Module, f_tilde: nn.Module, site: str, element: Any) -> models.Stitched:
    """The stitched network ``S(f, f~, site, phi(A)) = f~_{>site} ∘ A ∘ f_{<=site}`` with the
    fixed bridge ``A`` (``element``: ``(perm, scales)`` or a matrix; phi(A) = A for ReLU-like
    sites). Neither model is copied; ``f`` is frozen in eval mode (``models.Stitched``).

    Parameters
    ----------
    f : nn.Module
        The front model, run up to and including ``site``.
    f_tilde : nn.Module
        The back model, run after ``site``: f with the elements acting on its weights
        (``act_on_weights``) for the identity of Thm. 4.2, or any model of the same architecture.
    site : str
        One of ``models.cut_sites(f)``.
    element : tuple or Tensor
        The element at ``site`` (its dtype follows ``f``'s parameters).

    Returns
    -------
    models.Stitched
        The stitched network.
    """
    channels = {s.name: s.channels for s in models.sites(f)}.get(site)
    if channels is None:
        raise ValueError(f"{type(f).__name__} has no site {site!r}; its cut sites are {models.cut_sites(f)}")
    dtype = next(f.parameters()).dtype
    return models.Stitched(front=f, back=f_tilde, site=site, bridge=ElementBridge(element, channels, dtype))


def stitched_changes(model: nn.Module, x: Tensor, drawn: dict, logits: Tensor | None = None) -> dict:
    """Per cut site s: how far the stitched network ``S(f, f~, s, A_s)`` is from f, where f~ is
    ``model`` with every element of ``drawn`` acting on its weights (Thm. 4.2; the bridge is the
    element itself, fixed). The model's mode and ``requires_grad`` flags are left as they were.

    Parameters
    ----------
    model : nn.Module
        f, a model ``act_on_weights`` knows, in eval mode for the identity with batch norm.
    x : Tensor
        The (normalised) input batch.
    drawn : dict
        An element for every site (``random_elements``).
    logits : Tensor or None, default None
        ``model(x)``, when already computed.

    Returns
    -------
    dict
        Site -> ``stitched_relative_change`` (the logits' change over their norm) and
        ``stitched_agreement`` (the fraction of images on which S predicts f's class), for every
        site of ``models.cut_sites(model)``.
    """
    trainable = [p.requires_grad for p in model.parameters()]  # stitching freezes the front model
    training = model.training
    with torch.no_grad():
        logits = model(x) if logits is None else logits
        transformed = act_on_weights(model, drawn)
        changes = {}
        for site in models.cut_sites(model):
            stitched_logits = stitch_through_element(model, transformed, site, drawn[site])(x)
            changes[site] = {
                "stitched_relative_change": ((stitched_logits - logits).norm() / logits.norm()).item(),
                "stitched_agreement": (stitched_logits.argmax(1) == logits.argmax(1)).double().mean().item(),
            }
    for parameter, flag in zip(model.parameters(), trainable):
        parameter.requires_grad_(flag)
    model.train(training)
    return changes
