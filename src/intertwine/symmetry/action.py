"""The weight action itself (Prop. 3.4, :func:`act_on_weights`): the elements checked against
the activations, skip connections and gates, then applied to each site's producers and consumers."""

from __future__ import annotations

import copy
import warnings
from typing import Any, Mapping

import torch
from torch import Tensor, nn

from ..models.gated import GateActivation, GatedNet
from .elements import POSITIVELY_HOMOGENEOUS, Element, element_from_parts, parse_element
from .wiring import Link, Wiring, model_wiring

_LINK_TOL = 1e-6  # relative tolerance when comparing elements tied by a skip connection


# --- validation -------------------------------------------------------------------------------


def _check_activation(name: str, act: nn.Module, el: Element) -> None:
    if not el.monomial or isinstance(act, (*POSITIVELY_HOMOGENEOUS, GateActivation)):
        return  # general matrices are the deliberate contrast; not checked against sigma
    if bool((el.scales == 1).all()):
        return  # permutations commute with every elementwise activation
    kind = type(act).__name__
    raise ValueError(
        f"site {name!r}: the activation {kind} is not positively homogeneous "
        f"({kind}(d x) != d {kind}(x) for d > 0, d != 1), so a G_ReLU element with scales other "
        "than 1 does not intertwine it and would change the function; only permutations "
        "(scales all 1) are symmetries of it. Pass scales of ones, or a matrix if a change of "
        "function is intended."
    )


def _check_link(name: str, link: Link, out: Element, src: Element) -> None:
    a_out, a_in = out.matrix, src.matrix
    n_out, n_in = a_out.shape[0], a_in.shape[0]
    if link.kind == "identity":
        lhs, rhs = a_out, a_in
    else:
        embed = torch.zeros(n_out, n_in, dtype=torch.float64)
        embed[link.pad_before + torch.arange(n_in), torch.arange(n_in)] = 1
        lhs, rhs = a_out @ embed, embed @ a_in
    scale = max(1.0, float(rhs.abs().max()) if rhs.numel() else 1.0)
    if lhs.shape == rhs.shape and float((lhs - rhs).abs().max()) <= _LINK_TOL * scale:
        return
    if link.kind == "identity":
        raise ValueError(
            f"site {name!r}: it is joined to {link.source!r} by the identity skip connection "
            f"{link.shortcut!r}, so it must carry the same element as {link.source!r} (Remark "
            "3.6; a site missing from `elements` is the identity)"
        )
    pb = link.pad_before
    raise ValueError(
        f"site {name!r}: it follows {link.source!r} through the option-A (zero-padding) shortcut "
        f"{link.shortcut!r}, so its element A must satisfy A E = E A_prev, where E embeds the "
        f"{n_in} channels of {link.source!r} at [{pb}, {pb + n_in}): A must act on that middle "
        f"block exactly as the element of {link.source!r} and map the {n_out - n_in} zero-padded "
        "channels only among themselves (a site missing from `elements` is the identity)"
    )


def _check_gate(model: GatedNet, value_site: str, feature_site: str, parsed: dict[str, Element]) -> None:
    """A value site and the feature site gating it carry the same permutation; the feature site's
    scales are positive (hard gates) or 1 (soft gates). General matrices are contrasts, unchecked."""
    n = model.get_submodule(value_site.replace(".act", ".conv")).out_channels
    identity = element_from_parts(torch.arange(n), torch.ones(n, dtype=torch.float64))
    value, feature = parsed.get(value_site, identity), parsed.get(feature_site, identity)
    if not (value.monomial and feature.monomial):
        return
    if not model.hard and not bool((feature.scales == 1).all()):
        raise ValueError(
            f"site {feature_site!r}: its gates are soft, sigmoid(beta q), which a scaling of q changes, "
            "so only permutations (scales all 1) are symmetries there"
        )
    if not torch.equal(value.perm, feature.perm):
        raise ValueError(
            f"site {value_site!r} is gated by {feature_site!r}: both must carry the same permutation "
            "(a permuted gate layer gates the value units permuted the same way; a site missing from "
            "`elements` is the identity)"
        )


def _validate(model: nn.Module, wiring: Wiring, elements: Mapping[str, Any]) -> dict[str, Element]:
    if not isinstance(elements, Mapping):
        raise TypeError(f"elements must map site names to elements, got {type(elements).__name__}")
    by_name = {s.name: s for s in wiring.sites}
    unknown = [k for k in elements if k not in by_name]
    if unknown:
        raise ValueError(f"unknown site(s) {unknown}; the model's sites are {list(by_name)}")
    parsed = {}
    for site in wiring.sites:
        if site.name in elements:
            el = parse_element(
                elements[site.name], site.channels, f"site {site.name!r}", site.name in wiring.gated_by
            )
            _check_activation(site.name, model.get_submodule(site.name), el)
            parsed[site.name] = el
    for value_site, feature_site in wiring.gated_by.items():
        _check_gate(model, value_site, feature_site, parsed)
    for site in wiring.sites:
        link = wiring.links.get(site.name)
        if link is None:
            continue
        identity_out = element_from_parts(
            torch.arange(site.channels), torch.ones(site.channels, dtype=torch.float64)
        )
        n_in = by_name[link.source].channels
        identity_in = element_from_parts(torch.arange(n_in), torch.ones(n_in, dtype=torch.float64))
        _check_link(
            site.name, link, parsed.get(site.name, identity_out), parsed.get(link.source, identity_in)
        )
    return parsed


# --- the action -------------------------------------------------------------------------------


def _is_bn(module: nn.Module) -> bool:
    return isinstance(module, nn.modules.batchnorm._BatchNorm)


def _f64(t: Tensor) -> Tensor:
    return t.detach().to("cpu", torch.float64)


def _channel_view(v: Tensor, ndim: int, dim: int) -> Tensor:
    shape = [1] * ndim
    shape[dim] = -1
    return v.view(shape)


def _act_on_outputs(conv: nn.Module, norm: nn.Module, el: Element, where: str) -> None:
    """Make the pre-activation ``norm(conv(x))`` become ``A`` times the old one."""
    bn = norm if _is_bn(norm) else None
    if not isinstance(norm, nn.Identity) and bn is None:
        raise TypeError(f"{where}: unsupported normalisation {type(norm).__name__}")
    if getattr(conv, "groups", 1) != 1:
        raise TypeError(f"{where}: grouped convolutions are not supported")
    w = _f64(conv.weight)
    b = _f64(conv.bias) if conv.bias is not None else None

    if el.monomial:
        perm, s = el.perm, el.scales
        if bn is None:
            conv.weight.copy_(w[perm] * _channel_view(s, w.dim(), 0))
            if b is not None:
                conv.bias.copy_(b[perm] * s)
            return
        conv.weight.copy_(w[perm])
        if b is not None:
            conv.bias.copy_(b[perm])
        if bn.track_running_stats and bn.running_mean is not None:
            bn.running_mean.copy_(_f64(bn.running_mean)[perm])
            bn.running_var.copy_(_f64(bn.running_var)[perm])
        if bn.affine:
            bn.weight.copy_(_f64(bn.weight)[perm] * s)
            bn.bias.copy_(_f64(bn.bias)[perm] * s)
        elif not bool((s == 1).all()):
            raise ValueError(f"{where}: BN without affine parameters cannot absorb the scales")
        return

    m = el.matrix
    if b is None:
        b = torch.zeros(w.shape[0], dtype=torch.float64)
    if bn is not None:
        if bn.running_mean is None:
            raise ValueError(f"{where}: cannot fold a BN without running statistics")
        gamma = _f64(bn.weight) if bn.affine else torch.ones_like(b)
        beta = _f64(bn.bias) if bn.affine else torch.zeros_like(b)
        a = gamma / torch.sqrt(_f64(bn.running_var) + bn.eps)
        w = w * _channel_view(a, w.dim(), 0)
        b = a * (b - _f64(bn.running_mean)) + beta
    w = torch.tensordot(m, w, dims=([1], [0]))
    b = m @ b
    conv.weight.copy_(w)
    if conv.bias is not None:
        conv.bias.copy_(b)
        rest = torch.zeros_like(b)
    else:
        rest = b
    if bn is not None:
        bn.running_mean.zero_()
        bn.running_var.fill_(1.0 - bn.eps)
        if bn.affine:
            bn.weight.fill_(1.0)
            bn.bias.copy_(rest)
        elif rest.abs().max() > 0:
            raise ValueError(f"{where}: nowhere to put the folded bias (no conv bias, no BN bias)")
    elif rest.abs().max() > 0:  # unreachable: without BN and bias, b = 0
        raise AssertionError(f"{where}: nonzero bias without a bias parameter")


def _act_on_inputs(module: nn.Module, el: Element, where: str) -> None:
    """Make ``module`` (conv or linear) read ``A x`` where it read ``x``: W -> W A^-1."""
    if not isinstance(module, (nn.Conv2d, nn.Linear)) or getattr(module, "groups", 1) != 1:
        raise TypeError(f"{where}: cannot act on the inputs of {type(module).__name__}")
    w = _f64(module.weight)
    if el.monomial:
        module.weight.copy_(w[:, el.perm] / _channel_view(el.scales, w.dim(), 1))
    else:
        inv = torch.linalg.inv(el.matrix)
        module.weight.copy_(torch.movedim(torch.tensordot(w, inv, dims=([1], [0])), -1, 1))


def act_on_weights(model: nn.Module, elements: Mapping[str, Any]) -> nn.Module:
    """A new model (deep copy; `model` is untouched) with the elements applied per Prop. 3.4.

    `elements` maps site names to ``(perm, scales)`` tuples (G_ReLU) or ``(n, n)`` matrices; sites
    not in it keep the identity. Raises ValueError for unknown sites, malformed or singular
    elements, non-positive scales, G_ReLU scales at a non-positively-homogeneous activation
    (GELU), and elements that break a skip-connection constraint (see the module docstring).

    With G_ReLU elements the result computes the same function in train and eval mode. With a
    general matrix behind a BatchNorm the BN is folded using its running statistics: use the
    result in eval mode (and don't train it further in train mode).

    Parameters
    ----------
    model : nn.Module
        A model built by ``intertwine.models.build``.
    elements : Mapping[str, Any]
        Site name -> ``(perm, scales)`` or an (n, n) matrix.

    Returns
    -------
    nn.Module
        The transformed copy.
    """
    wiring = model_wiring(model)
    parsed = {k: v for k, v in _validate(model, wiring, elements).items() if not v.is_identity}
    folds = [k for k, v in parsed.items() if not v.monomial]
    if folds and model.training:
        warnings.warn(
            "act_on_weights folds BatchNorm into the conv (running statistics) for the general "
            f"matrices at {folds}; the result matches the intended function in eval mode only",
            stacklevel=2,
        )
    new = copy.deepcopy(model)
    with torch.no_grad():
        for name, el in parsed.items():
            for conv, norm in wiring.producers[name]:
                _act_on_outputs(
                    new.get_submodule(conv), new.get_submodule(norm), el, f"site {name!r} ({conv})"
                )
        for name, el in parsed.items():
            for consumer in wiring.consumers.get(name, []):
                _act_on_inputs(new.get_submodule(consumer), el, f"site {name!r} ({consumer})")
    return new
