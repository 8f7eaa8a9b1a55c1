"""A zoo member's kernels, models in and tensors out: the exact neural path kernel of a gated network
or a plain ReLU network (:func:`member_npk`, on :func:`npk_inputs`), the NTK of a gated network's
value weights alone (:func:`value_weight_ntk`, the quantity of Lakshminarayanan & Singh's Thm 2.1),
and the logit ensemble of several members (:func:`logit_ensemble`). The kernels themselves are
:mod:`intertwine.kernels.npk`'s; the models :mod:`intertwine.models`.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import Tensor, nn

from intertwine import models
from intertwine.kernels import npk
from intertwine.models.gated import GatedNet
from intertwine.models.myrtle import Myrtle
from intertwine.models.plain import ConvStack

__all__ = [
    "has_npk",
    "logit_ensemble",
    "member_npk",
    "npk_inputs",
    "site_gate_kernels",
    "value_weight_ntk",
    "value_weight_ntk_factor",
]


def has_npk(model: nn.Module) -> bool:
    """Whether :func:`member_npk` knows the model's neural path kernel: a gated network, or a plain
    ReLU C4GAP/C1GAP/VGG or Myrtle (other activations have other path features). Not a gated
    ResNet: the paper's ResNet kernel (Theorem 3.3, :func:`intertwine.kernels.npk_resnet_conv_gap`)
    is that of identity skips around blocks of gated convolutions, whereas the zoo's ResNet gates
    each residual sum (so the skip path too) and has strided, zero-padding shortcuts between
    stages, whose path features are not the theorem's sub-networks'.

    Parameters
    ----------
    model : nn.Module
        Any model.

    Returns
    -------
    bool
        True for a ``GatedNet``, and for a ``ConvStack`` or ``Myrtle`` whose every site is an
        ``nn.ReLU``.
    """
    if isinstance(model, GatedNet):
        return True
    plain = isinstance(model, (ConvStack, Myrtle))
    return plain and all(isinstance(model.get_submodule(s.name), nn.ReLU) for s in models.sites(model))


def npk_inputs(model: nn.Module, x: Tensor) -> dict:
    """What :func:`intertwine.kernels.npk.npk_conv_gap` needs of a model on images ``x``: the value
    network's gates in its layers' order (a gated network's ``gate_perm`` applied; a plain ReLU
    network's own 1{pre-activation > 0}), its input, and the selections of its max-pools (a gated
    network's gated max-pools; a plain network's max-pools select by its own activations).

    Parameters
    ----------
    model : nn.Module
        A gated network, or a plain ReLU network of :func:`has_npk`.
    x : Tensor, shape (N, C, H, W)
        Normalised images.

    Returns
    -------
    dict
        Keyword arguments of :func:`intertwine.kernels.npk.npk_conv_gap`: ``gates`` (a list of
        (N, C_l, H_l, W_l) tensors), ``value_input`` ("x" or "ones"), and, where the model has max
        pools, ``selections`` (one tensor or None per layer) and ``global_selection`` (a tensor or
        None).
    """
    models.check_input(model, x, "npk_inputs")
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
    :func:`intertwine.kernels.npk.npk_conv_gap` on :func:`npk_inputs`.

    Parameters
    ----------
    model : nn.Module
        A model of :func:`has_npk` (ValueError otherwise); its training mode is restored.
    x : Tensor, shape (N, C, H, W)
        Normalised images.
    y : Tensor, shape (M, C, H, W), optional
        A second batch of images; None (the default): ``x`` with itself.

    Returns
    -------
    Tensor, shape (N, N) or (N, M)
        The neural path kernel, float64, on the device of ``x``.
    """
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


def logit_ensemble(members: list[nn.Module], x: Tensor, batch_size: int = 500) -> tuple[Tensor, Tensor]:
    """The paper's C1GAP-16-ENS evaluation: the logits of several trained networks averaged.

    Parameters
    ----------
    members : trained models with the same outputs (evaluated in eval mode, left as they were).
    x : (N, C, H, W) normalised images.
    batch_size : images per forward pass.

    Returns
    -------
    (mean logits (N, classes), each member's logits (members, N, classes)), float32 on x's device.
    """
    if len(members) < 2:
        raise ValueError(f"an ensemble needs at least 2 members, got {len(members)}")
    logits = []
    for model in members:
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                logits.append(torch.cat([model(x[i : i + batch_size]) for i in range(0, len(x), batch_size)]))
        finally:
            model.train(was_training)
    if len({tuple(t.shape) for t in logits}) != 1:
        raise ValueError(f"ensemble members disagree on their outputs: {[tuple(t.shape) for t in logits]}")
    stacked = torch.stack(logits)
    return stacked.mean(0), stacked


def value_weight_ntk_factor(model: GatedNet, sigma: float = 1.0) -> float:
    """``d sigma^(2(d-1))``: the factor between the neural path kernel and the expected NTK of the
    value weights at a +-sigma initialisation (the paper's Thm 2.1), d the value network's weight
    layers counting the head.

    Parameters
    ----------
    model : GatedNet
        The gated network (its value network's depth is read).
    sigma : float
        The magnitude of the value weights.

    Returns
    -------
    float
        ``d sigma^(2(d-1))``.
    """
    d = len(model.value.layer_names()) + 1
    return d * sigma ** (2 * (d - 1))


def value_weight_ntk(
    model: GatedNet, x: Tensor, *, sigma: float = 1.0, draws: int = 32, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """The paper's quantity (Thm 2.1): the NTK of a gated network's value weights alone, with its
    gates as they are (trained or not), at an initialisation of every value weight to +-sigma with
    random signs, averaged over ``draws`` such initialisations, per output (the sum over the
    outputs divided by their number).

    The value network is idealised as the theorem's is: its convolutions and head without biases
    and its batch norms left out (the member's own value weights, biases and normalisation play
    no part). Its expectation is ``value_weight_ntk_factor(model, sigma) * member_npk(model, x)``
    exactly, at any width, convolutional layers and pools included (``intertwine.kernels.npk``).

    Parameters
    ----------
    model : a ``GatedNet`` (its gates do not depend on the value weights).
    x : (N, C, H, W) normalised images.
    sigma, draws, generator : the magnitude of the value weights, how many initialisations, and
        the generator of their signs.

    Returns
    -------
    (mean, standard error), each an (N, N) float64 tensor: the mean over draws and its standard
    error (the standard deviation over draws divided by sqrt(draws)).
    """
    if not isinstance(model, GatedNet):
        raise ValueError(
            f"the value-weight NTK is a gated network's (its gates fixed, its value weights drawn), not a "
            f"{type(model).__name__}'s: a plain network's gates move with its weights"
        )
    if not isinstance(draws, int) or isinstance(draws, bool) or draws < 2:
        raise ValueError(f"draws must be an integer >= 2 (a standard error needs two), got {draws!r}")
    if not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be a finite number > 0, got {sigma!r}")
    ideal = copy.deepcopy(model).double().eval()
    value = ideal.value
    names = []
    for conv, norm, _, _ in value.layer_names():
        value.get_submodule(conv).register_parameter("bias", None)
        setattr(value, norm, nn.Identity())
        names.append(f"value.{conv}.weight")
    value.fc.register_parameter("bias", None)
    names.append("value.fc.weight")
    weights = dict(ideal.named_parameters())
    outputs = value.fc.out_features
    x = x.double()
    samples = []
    for _ in range(draws):
        with torch.no_grad():
            for name in names:
                signs = torch.randint(0, 2, weights[name].shape, generator=generator, dtype=torch.float64)
                weights[name].copy_(sigma * (2 * signs - 1))
        samples.append(npk.empirical_ntk(ideal, x, params=names) / outputs)
    stacked = torch.stack(samples)
    return stacked.mean(0), stacked.std(0) / math.sqrt(draws)


def site_gate_kernels(model: nn.Module, x: Tensor) -> dict[str, Tensor]:
    """The gate kernel (:func:`intertwine.kernels.npk.gate_kernel`, (N, N) float64) of ``model`` at
    each of its sites on images ``x``: {site name: kernel}, in the model's site order.

    Parameters
    ----------
    model : nn.Module
        A zoo model (its sites, ``models.sites``).
    x : Tensor, shape (N, C, H, W)
        Normalised images.

    Returns
    -------
    dict of str to Tensor
        Site name to its (N, N) float64 gate kernel.
    """
    return {
        site: npk.gate_kernel(a) for site, a in models.site_activations(model, x, batch_size=len(x)).items()
    }
