"""The intertwiner-group action on a zoo model's weights (paper section 3, Prop. 3.4, Remark 3.6).

An *element* at an activation site s (a name from :func:`intertwine.models.sites`) is either

* a G_ReLU element ``(perm, scales)`` -- a **tuple** -- standing for ``A = diag(scales) @ P``
  with ``P[i, perm[i]] = 1``, i.e. ``(A x)_i = scales[i] * x[perm[i]]`` (the convention of
  :mod:`intertwine.groups`); the scales must be positive, or
* an ``(n, n)`` matrix (tensor or array), any invertible one -- e.g. a random orthogonal
  matrix, the contrast that must *change* the function. A matrix that happens to be a positive
  monomial matrix (a permutation matrix, ``grelu_matrix(...)``) is treated as ``(perm, scales)``.

:func:`act_on_weights` returns a new model where every given ``A_s`` is applied as in Prop. 3.4:
the pre-activation feeding s becomes ``A_s`` times the old one and every consumer of s's output
gets ``phi(A_s)^-1 = A_s^-1`` on its input channels (next conv, shortcut conv, or the linear head
after the global max/avg pool, which commutes with permutations and positive per-channel scales).
For ReLU, LeakyReLU (any slope) and the identity (``residual_activation: False``) phi(A) = A, so a
G_ReLU element everywhere leaves the network function unchanged and turns the representation at
every site s into ``A_s`` applied to the old one (:func:`act_on_representation`). For any other
elementwise activation (GELU) only permutations (scales all 1) are symmetries: GELU is not
positively homogeneous, and :func:`act_on_weights` refuses G_ReLU elements with other scales there.

How the pre-activation is transformed
-------------------------------------
* G_ReLU element, conv followed by BatchNorm: permute the conv's output channels (weight and bias)
  and BN's weight, bias, running_mean and running_var; multiply BN's weight and bias by the
  scales. This is exact in eval mode *and* in training mode (batch statistics permute the same way).
* G_ReLU element, no BN: permute and scale the conv's output channels (weight and bias).
* General matrix M with BN: the BN is folded into the conv with its **running statistics**, the
  folded conv is multiplied by M, and the BN is set to an exact identity (weight 1, running_mean 0,
  running_var 1 - eps, bias 0 -- or the folded bias when the conv has no bias of its own), so the
  module structure stays the same. The result computes the intended function **in eval mode only**
  (in training mode BN would normalise with batch statistics; a warning is issued when the input
  model is in training mode). Without BN the conv is simply multiplied by M.

Gated networks (:mod:`intertwine.models.gated`)
-----------------------------------------------
Value layer l of a gated network is gated by feature layer ``gate_perm[l]``, so the two sites are
tied: a permutation of one must be the same permutation of the other (with hard and soft gates
alike). At a value site the element may be a **signed** monomial ``(perm, scales)`` with any
nonzero scales, because ``G * (D q) = D (G * q)`` for every diagonal D: the value network's group
is the signed monomial matrices, larger than G_ReLU. At a feature site the scales must be positive
with hard gates (``1{d q > 0} = 1{q > 0}`` for d > 0, and a ReLU feature network is G_ReLU-
equivariant) and 1 with soft gates (``sigmoid(beta d q)`` depends on d): only permutations. A
general matrix at a feature site is the contrast, as elsewhere: in a linear feature network (dlgn)
it leaves the later feature layers unchanged but changes that layer's gates.

Residual networks (Remark 3.6)
------------------------------
A skip connection adds the stream to itself, so the weight-space action is only defined when the
elements on either side of it agree:

* identity shortcut (every block whose shape does not change): the block's ``act2`` must carry the
  same element as the site feeding the block (the stem ``act`` or the previous ``act2``). So the
  stem activation and all ``act2`` sites of a stage share one element; ``act1`` sites (inside the
  blocks) take free elements.
* option-B shortcut (resnet18: 1x1 conv + BN when the shape changes): the shortcut conv absorbs the
  change -- its in-channels get ``A_prev^-1``, its out-channels/BN get ``A_next`` -- so every stage's
  stream has its own element.
* option-A shortcut (resnet20, ``ZeroPadShortcut``: ``x -> E x[:, :, ::2, ::2]`` with E the
  ``n_out x n_in`` embedding ``E[pb + j, j] = 1``, pb = ``pad_before``): we need
  ``A_next E = E A_prev``. Writing the channels of the next stage as *middle* ``[pb, pb + n_in)``
  (the previous stream's channels) and *padded* (the rest, always zero on the shortcut), this says
  ``A_next[middle, middle] = A_prev`` and ``A_next[padded, middle] = 0``; the padded columns are
  free (subject to invertibility). For a G_ReLU element this means: ``A_next`` acts on the middle
  block exactly as ``A_prev`` (``perm[pb + j] = pb + perm_prev[j]``, ``scales[pb + j] =
  scales_prev[j]``) and only permutes/scales the padded channels among themselves (across both
  padded ends). For an orthogonal ``A_next`` orthogonality forces ``A_next[middle, padded] = 0``
  too, so ``A_next = A_prev (+) Q_pad``. The whole residual stream of resnet20 is therefore one
  linked chain: the stem element determines the middle block of every later stage.

:func:`act_on_weights` checks these constraints (sites not in ``elements`` count as the identity)
and raises ValueError naming the offending site. :func:`site_groups` lists the linked sites.
"""

from __future__ import annotations

import copy
import warnings
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Mapping

import torch
from torch import Tensor, nn

from . import models
from .groups import random_grelu, random_orthogonal, random_permutation
from .models.gated import GateActivation, GatedNet
from .models.myrtle import Myrtle
from .models.plain import ConvStack
from .models.resnet import ResNet, ZeroPadShortcut

__all__ = [
    "GROUPS",
    "act_on_representation",
    "act_on_weights",
    "element_matrix",
    "random_elements",
    "site_groups",
]

#: Groups :func:`random_elements` can draw from ("monomial": signed scales at a gated network's
#: value sites, G_ReLU elsewhere).
GROUPS = ("grelu", "permutation", "orthogonal", "monomial")

# The architectures whose wiring act_on_weights knows. (ConvNeXt has LayerNorm, whose intertwiner
# group is smaller, and no symmetry check here.)
ARCHS = ("myrtle", "resnet20", "resnet18", "resnet110", "c4gap", "c1gap", "vgg16_avg")


def acts_on(spec: dict) -> bool:
    """Whether :func:`act_on_weights` knows the model of a normalised spec: an architecture of
    ``ARCHS``, plain or gated, except a gated ResNet (``models.gated_resnet``), whose gates are
    read by hooks rather than wired layer by layer."""
    return spec["arch"] in ARCHS and not (spec.get("gated") is not None and "residual_activation" in spec)


# Activations with sigma(d x) = d sigma(x) for d > 0, hence G_ReLU-equivariant with phi(A) = A.
_POSITIVELY_HOMOGENEOUS = (nn.ReLU, nn.LeakyReLU, nn.Identity)

_LINK_TOL = 1e-6  # relative tolerance when comparing elements tied by a skip connection


# --- elements ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Element:
    """An element in canonical form: always the dense float64 matrix, plus the parts if G_ReLU."""

    matrix: Tensor  # (n, n) float64, CPU
    perm: Tensor | None = None  # long (n,) when a positive monomial matrix
    scales: Tensor | None = None  # float64 (n,)

    @property
    def monomial(self) -> bool:
        return self.perm is not None

    @property
    def is_identity(self) -> bool:
        n = self.matrix.shape[0]
        return self.monomial and bool((self.perm == torch.arange(n)).all()) and bool((self.scales == 1).all())


def _from_parts(perm: Tensor, scales: Tensor) -> _Element:
    n = perm.numel()
    matrix = torch.zeros(n, n, dtype=torch.float64)
    matrix[torch.arange(n), perm] = scales
    return _Element(matrix, perm, scales)


def _parse(element: Any, n: int, where: str, signed: bool = False) -> _Element:
    """Validate `element` for a site of width n and bring it to canonical form; ``signed`` admits
    monomials with negative scales (a gated network's value sites)."""
    if isinstance(element, tuple):
        if len(element) != 2:
            raise ValueError(
                f"{where}: a G_ReLU element is a tuple (perm, scales), got a tuple of length {len(element)}"
            )
        perm = torch.as_tensor(element[0]).detach().cpu()
        scales = torch.as_tensor(element[1]).detach().cpu()
        if perm.is_floating_point() or perm.is_complex() or perm.dtype == torch.bool:
            raise ValueError(f"{where}: perm must hold integers, got dtype {perm.dtype}")
        perm = perm.long()
        if perm.shape != (n,) or scales.shape != (n,):
            raise ValueError(
                f"{where}: the site has {n} channels, but perm has shape "
                f"{tuple(perm.shape)} and scales {tuple(scales.shape)}"
            )
        if not torch.equal(torch.sort(perm).values, torch.arange(n)):
            raise ValueError(f"{where}: perm is not a permutation of range({n})")
        scales = scales.to(torch.float64)
        if signed and not (torch.isfinite(scales).all() and (scales != 0).all()):
            raise ValueError(f"{where}: monomial scales must be finite and nonzero")
        if not signed and not (torch.isfinite(scales).all() and (scales > 0).all()):
            raise ValueError(
                f"{where}: G_ReLU scales must be finite and positive (pass a matrix for other elements; "
                "negative scales are symmetries only of a gated network's value units)"
            )
        return _from_parts(perm, scales)

    matrix = torch.as_tensor(element).detach().cpu()
    if matrix.is_complex():
        raise ValueError(f"{where}: complex matrices are not supported")
    matrix = matrix.to(torch.float64)
    if matrix.shape != (n, n):
        raise ValueError(
            f"{where}: the site has {n} channels, expected a ({n}, {n}) matrix or a "
            f"tuple (perm, scales), got shape {tuple(matrix.shape)}"
        )
    if not torch.isfinite(matrix).all():
        raise ValueError(f"{where}: the matrix has non-finite entries")
    svals = torch.linalg.svdvals(matrix)
    if n and not svals[-1] > 1e-12 * svals[0]:
        raise ValueError(f"{where}: the matrix is singular (not a group element)")
    nonzero = matrix != 0
    if (nonzero.sum(1) == 1).all() and (nonzero.sum(0) == 1).all() and (signed or (matrix >= 0).all()):
        perm = nonzero.to(torch.int8).argmax(1)
        return _Element(matrix, perm, matrix[torch.arange(n), perm])
    return _Element(matrix)


def element_matrix(element: Any, n: int | None = None) -> Tensor:
    """The dense (n, n) float64 matrix of an element: ``(perm, scales)`` or a matrix."""
    if n is None:
        n = torch.as_tensor(element[0]).numel() if isinstance(element, tuple) else len(element)
    return _parse(element, n, "element", signed=True).matrix.clone()


def act_on_representation(x: Tensor, element: Any, dim: int = 1) -> Tensor:
    """``A`` applied to the channel dimension `dim` of `x` (for ReLU-like sites, phi(A) = A)."""
    el = _parse(element, x.shape[dim], "element", signed=True)
    if el.monomial:
        perm = el.perm.to(x.device)
        shape = [1] * x.dim()
        shape[dim] = -1
        return x.index_select(dim, perm) * el.scales.to(x.device, x.dtype).view(shape)
    out = torch.tensordot(el.matrix.to(x.device, x.dtype), x, dims=([1], [dim]))
    return torch.movedim(out, 0, dim)


# --- wiring of the zoo architectures ----------------------------------------------------------


@dataclass(frozen=True)
class _Link:
    """Site `site` is tied to the earlier site `source` by a parameter-free shortcut."""

    source: str
    kind: str  # "identity" or "zeropad"
    shortcut: str  # qualified module name of the shortcut
    pad_before: int = 0


@dataclass(frozen=True)
class _Wiring:
    sites: list[models.Site]
    producers: dict[str, list[tuple[str, str]]]  # site -> (conv, norm) pairs summed before it
    consumers: dict[str, list[str]]  # site -> modules (conv / linear) reading its output
    links: dict[str, _Link]
    gated_by: dict[str, str] = None  # a gated network's value site -> the feature site gating it


def _chain_wiring(layers, prefix: str, producers: dict, consumers: dict, head: str | None) -> None:
    """A plain stack: layer l's activation feeds layer l+1's conv, the last one ``head``."""
    for i, (conv, norm, act, _) in enumerate(layers):
        producers[prefix + act] = [(prefix + conv, prefix + norm)]
        following = prefix + layers[i + 1][0] if i + 1 < len(layers) else head
        if following is not None:
            consumers[prefix + act].append(following)


def _wiring(model: nn.Module) -> _Wiring:
    producers: dict[str, list[tuple[str, str]]] = {}
    consumers: dict[str, list[str]] = defaultdict(list)
    links: dict[str, _Link] = {}
    gated_by: dict[str, str] = {}
    if isinstance(model, (Myrtle, ConvStack)):
        _chain_wiring(model.layer_names(), "", producers, consumers, "fc")
    elif isinstance(model, GatedNet):
        layers = model.value.layer_names()
        if model.family == "dlgn_sf":  # each gate layer reads the input only: no consumers
            for i in range(1, len(layers) + 1):
                producers[f"features.act{i}"] = [(f"features.conv{i}", f"features.bn{i}")]
        else:
            _chain_wiring(layers, "features.", producers, consumers, None)
        _chain_wiring(layers, "value.", producers, consumers, "value.fc")
        for layer, gate in enumerate(model.gate_perm):
            gated_by["value." + layers[layer][2]] = "features." + layers[gate][2]
    elif isinstance(model, ResNet):
        producers["act"] = [("conv1", "bn1")]
        prev = "act"
        for stage in model.stage_names:
            for j, block in enumerate(model.get_submodule(stage)):
                p = f"{stage}.{j}"
                producers[f"{p}.act1"] = [(f"{p}.conv1", f"{p}.bn1")]
                consumers[prev].append(f"{p}.conv1")
                producers[f"{p}.act2"] = [(f"{p}.conv2", f"{p}.bn2")]
                consumers[f"{p}.act1"].append(f"{p}.conv2")
                shortcut = block.shortcut
                if isinstance(shortcut, nn.Identity):
                    links[f"{p}.act2"] = _Link(prev, "identity", f"{p}.shortcut")
                elif isinstance(shortcut, ZeroPadShortcut):
                    links[f"{p}.act2"] = _Link(prev, "zeropad", f"{p}.shortcut", shortcut.pad_before)
                elif (
                    isinstance(shortcut, nn.Sequential)
                    and len(shortcut) == 2
                    and isinstance(shortcut[0], nn.Conv2d)
                ):
                    producers[f"{p}.act2"].append((f"{p}.shortcut.0", f"{p}.shortcut.1"))
                    consumers[prev].append(f"{p}.shortcut.0")
                else:
                    raise TypeError(f"unsupported shortcut {type(shortcut).__name__} in {p}")
                prev = f"{p}.act2"
        consumers[prev].append("fc")
    else:
        raise TypeError(
            "act_on_weights supports the zoo's Myrtle, ResNet, C4GAP/C1GAP/VGG and gated models, got "
            f"{type(model).__name__}"
        )
    site_list = models.sites(model)
    if [s.name for s in site_list] != list(producers):  # the architectures changed under us
        raise AssertionError(f"wiring of {type(model).__name__} out of date with its site_layout")
    return _Wiring(site_list, producers, dict(consumers), links, gated_by)


def site_groups(model: nn.Module) -> list[list[str]]:
    """Sites whose elements are tied by parameter-free skip connections, in forward order.

    Each group is a list of site names; an element given to one site of a group determines
    (identity shortcut) or constrains (option-A shortcut: the middle channel block) the others.
    A gated network's value site is grouped with the feature site that gates it. Sites inside
    residual blocks, and every Myrtle site, are singleton groups.
    """
    wiring = _wiring(model)
    root: dict[str, str] = {}
    groups: dict[str, list[str]] = {}
    for site in wiring.sites:
        link = wiring.links.get(site.name)
        source = link.source if link else wiring.gated_by.get(site.name)
        r = root[source] if source else site.name
        root[site.name] = r
        groups.setdefault(r, []).append(site.name)
    return list(groups.values())


# --- validation -------------------------------------------------------------------------------


def _check_activation(name: str, act: nn.Module, el: _Element) -> None:
    if not el.monomial or isinstance(act, (*_POSITIVELY_HOMOGENEOUS, GateActivation)):
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


def _check_link(name: str, link: _Link, out: _Element, src: _Element) -> None:
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


def _check_gate(model: GatedNet, value_site: str, feature_site: str, parsed: dict[str, _Element]) -> None:
    """A value site and the feature site gating it carry the same permutation; the feature site's
    scales are positive (hard gates) or 1 (soft gates). General matrices are contrasts, unchecked."""
    n = model.get_submodule(value_site.replace(".act", ".conv")).out_channels
    identity = _from_parts(torch.arange(n), torch.ones(n, dtype=torch.float64))
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


def _validate(model: nn.Module, wiring: _Wiring, elements: Mapping[str, Any]) -> dict[str, _Element]:
    if not isinstance(elements, Mapping):
        raise TypeError(f"elements must map site names to elements, got {type(elements).__name__}")
    by_name = {s.name: s for s in wiring.sites}
    unknown = [k for k in elements if k not in by_name]
    if unknown:
        raise ValueError(f"unknown site(s) {unknown}; the model's sites are {list(by_name)}")
    parsed = {}
    for site in wiring.sites:
        if site.name in elements:
            el = _parse(
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
        identity_out = _from_parts(
            torch.arange(site.channels), torch.ones(site.channels, dtype=torch.float64)
        )
        n_in = by_name[link.source].channels
        identity_in = _from_parts(torch.arange(n_in), torch.ones(n_in, dtype=torch.float64))
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


def _act_on_outputs(conv: nn.Module, norm: nn.Module, el: _Element, where: str) -> None:
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


def _act_on_inputs(module: nn.Module, el: _Element, where: str) -> None:
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
    """
    wiring = _wiring(model)
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


# --- random elements --------------------------------------------------------------------------


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
    """
    if group not in GROUPS:
        raise ValueError(f"unknown group {group!r}; expected one of {GROUPS}")
    wiring = _wiring(model)
    if group == "monomial" and not wiring.gated_by:
        raise ValueError(
            "signed monomials are symmetries of a gated network's value units only; this "
            f"{type(model).__name__} has none: use group 'grelu'"
        )
    if group in ("grelu", "monomial"):
        for site in wiring.sites:
            act = model.get_submodule(site.name)
            if not isinstance(act, (*_POSITIVELY_HOMOGENEOUS, GateActivation)):
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


def _tie_gates(model: nn.Module, wiring: _Wiring, out: dict, group: str, generator: torch.Generator) -> None:
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


# The workflow's self-check moved to intertwine.symmetry_study; its names stay importable from here
# for one release. (Imported by name when asked for: symmetry_study imports this module, and neither
# the import graph nor a stage's code identity should see the deprecated way back.)
_MOVED = ("check_symmetry", "checked_group", "summarize")


def __getattr__(name: str):
    if name in _MOVED:
        import importlib

        warnings.warn(
            f"intertwine.symmetry.{name} is deprecated and will be removed in the next release: "
            f"import it from intertwine.symmetry_study",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module("intertwine.symmetry_study"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
