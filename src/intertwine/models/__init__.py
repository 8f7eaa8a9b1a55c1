"""Model registry: build a model from a config spec and list its activation sites.

A spec is a dict such as ``{"arch": "resnet20", "activation": "leaky_relu", "negative_slope": 0.1}``.
Options every architecture takes:

- ``activation``: "relu" (default; "gelu" for convnext and cct), "leaky_relu", "gelu" or "sigmoid"
  (whose intertwiner group is the permutations only).
- ``negative_slope``: LeakyReLU slope, default 0.01. Only meaningful with "leaky_relu"; with another
  activation any value other than the default is rejected, since it is most likely a config that
  forgot ``activation: leaky_relu``.
- ``width_multiplier``: default 1.0; every width becomes ``max(1, round(width * multiplier))``.
- ``batch_norm`` (all but convnext and cct, which use LayerNorm): default True. Without it BN layers
  become ``nn.Identity`` (names unchanged).
- ``num_classes``: default 10.

Plus ``gated`` (myrtle, c4gap, c1gap, vgg16_avg; default null, a plain network): a mapping that
makes the model a gated network of that architecture, ``{family: dgn | dlgn | dlgn_sf, regime:
standalone | fl | fr, beta: 10, value_input: x | ones, gate_perm: null | [..], features_from: null |
variant}`` (see :mod:`intertwine.models.gated`; it needs ``activation: relu``). And ``constant_width`` (myrtle: every conv gets that many channels, still scaled by
``width_multiplier``) and ``residual_activation`` (resnets: False replaces the activation after
each residual addition by ``nn.Identity``, which stays a site). convnext (a small ConvNeXt, see
:mod:`intertwine.models.convnext`) never has an activation on the residual stream: each block's
output is an ``nn.Identity`` site ``stageS.J.out``, next to the inner activation ``stageS.J.act``.
cct (a Compact Convolutional Transformer, see :mod:`intertwine.models.cct`) likewise, with sites
``blocks.K.act`` (the MLP activation) and ``blocks.K.out`` (the block output), channels-first
(N, channels, tokens); its ``depth`` option (default 2) is the number of encoder blocks, and
``tokenizer_norm`` (default False, as in CCT) adds an instance norm after each tokenizer layer;
``positional`` (default "learnable") is its positional embedding, or "sinusoidal" (fixed sine-cosine
encodings, as the paper's appendix D.4 names them).

``custom`` is the user's own architecture (:mod:`intertwine.models.factory`): ``factory``
("package.module:function", called with ``num_classes`` and the mapping ``options``), ``sites``
(module names; default every module of ``activation``'s class), ``activation`` (what its sites are,
default "relu"), ``negative_slope`` and ``num_classes``; no ``width_multiplier`` or ``batch_norm``.
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping

import torch
from torch import nn

from .cct import POSITIONAL, cct
from .convnext import convnext
from .factory import FACTORY_PATTERN, custom
from .gated import GatedNet, check_gated
from .gated_resnet import GatedResNet
from .myrtle import myrtle
from .plain import c1gap, c4gap, vgg16_avg
from .resnet import resnet18, resnet20, resnet110

__all__ = [
    "ACTIVATIONS",
    "ARCHITECTURES",
    "Architecture",
    "Site",
    "Stitched",
    "build",
    "count_parameters",
    "cut_sites",
    "forward_from",
    "forward_to",
    "normalize_spec",
    "site_activations",
    "sites",
]

ACTIVATIONS: Mapping[str, type[nn.Module]] = MappingProxyType(
    {"relu": nn.ReLU, "leaky_relu": nn.LeakyReLU, "gelu": nn.GELU, "sigmoid": nn.Sigmoid}
)


@dataclass(frozen=True)
class Site:
    """An activation layer, where representations are read or stitched."""

    name: str  # qualified module name: model.get_submodule(name) is the activation module
    channels: int
    inside_residual: bool  # inside a residual block, i.e. not on the residual stream


@dataclass(frozen=True)
class Architecture:
    """A registry entry: the builder function and the spec options it takes, with defaults."""

    builder: Callable[..., nn.Module]
    options: Mapping[str, Any]


_COMMON_OPTIONS = {
    "activation": "relu",
    "negative_slope": 0.01,
    "width_multiplier": 1.0,
    "batch_norm": True,
    "num_classes": 10,
}

ARCHITECTURES: Mapping[str, Architecture] = MappingProxyType(
    {
        "myrtle": Architecture(
            myrtle, MappingProxyType({**_COMMON_OPTIONS, "constant_width": None, "gated": None})
        ),
        # The gated-networks paper's plain stacks (intertwine.models.plain)
        "c4gap": Architecture(c4gap, MappingProxyType({**_COMMON_OPTIONS, "gated": None})),
        "c1gap": Architecture(c1gap, MappingProxyType({**_COMMON_OPTIONS, "gated": None})),
        "vgg16_avg": Architecture(vgg16_avg, MappingProxyType({**_COMMON_OPTIONS, "gated": None})),
        "resnet20": Architecture(
            resnet20, MappingProxyType({**_COMMON_OPTIONS, "residual_activation": True})
        ),
        "resnet18": Architecture(
            resnet18, MappingProxyType({**_COMMON_OPTIONS, "residual_activation": True})
        ),
        # He et al.'s CIFAR ResNet-110; gated (intertwine.models.gated_resnet) for the gated-networks
        # paper's Table II
        "resnet110": Architecture(
            resnet110,
            MappingProxyType({**_COMMON_OPTIONS, "residual_activation": True, "gated": None}),
        ),
        # LayerNorm throughout, so no batch_norm option; GELU by default, as in ConvNeXt.
        "convnext": Architecture(
            convnext,
            MappingProxyType(
                {key: value for key, value in _COMMON_OPTIONS.items() if key != "batch_norm"}
                | {"activation": "gelu"}
            ),
        ),
        # A transformer: no batch norm either (LayerNorm, and the tokenizer's optional instance
        # norm); GELU by default too.
        "cct": Architecture(
            cct,
            MappingProxyType(
                {key: value for key, value in _COMMON_OPTIONS.items() if key != "batch_norm"}
                | {"activation": "gelu", "depth": 2, "tokenizer_norm": False, "positional": "learnable"}
            ),
        ),
        # The user's own (intertwine.models.factory): factory(num_classes=..., **options), its sites
        # the modules of `activation`'s class or those named in `sites`.
        "custom": Architecture(
            custom,
            MappingProxyType(
                {"factory": None, "options": {}, "sites": None, "activation": "relu", "negative_slope": 0.01}
                | {"num_classes": 10}
            ),
        ),
    }
)


def _check_value(key: str, value: Any) -> Any:
    """The option's value in canonical form (floats as float), or a ValueError naming the key."""

    def fail(expected: str) -> ValueError:
        return ValueError(f"model option {key!r}: expected {expected}, got {value!r}")

    is_int = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    is_real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    if key == "activation":
        if value not in ACTIVATIONS:
            raise fail("one of " + ", ".join(map(repr, ACTIVATIONS)))
        return value
    if key in ("batch_norm", "residual_activation", "tokenizer_norm"):
        if not isinstance(value, bool):
            raise fail("true or false")
        return value
    if key in ("num_classes", "depth"):
        if not is_int or value < 1:
            raise fail("a positive integer")
        return int(value)
    if key == "gated":
        return check_gated(value)
    if key == "factory":
        if value is None:
            return None  # normalize_spec says what arch custom needs
        if not isinstance(value, str) or not FACTORY_PATTERN.match(value):
            raise fail("'package.module:function' naming a function that returns an nn.Module")
        return value
    if key == "options":
        if not isinstance(value, Mapping) or not all(isinstance(name, str) for name in value):
            raise fail("a mapping of the factory's keyword arguments")
        return dict(value)
    if key == "sites":
        if value is None:
            return None
        if (
            isinstance(value, str)
            or not isinstance(value, (list, tuple))
            or not value
            or not all(isinstance(name, str) and name for name in value)
        ):
            raise fail("a non-empty list of module names, or null (every module of the activation's class)")
        return list(value)
    if key == "positional":
        if value not in POSITIONAL:
            raise fail("one of " + ", ".join(map(repr, POSITIONAL)))
        return value
    if key == "constant_width":
        if value is None:
            return None
        if not is_int or value < 1:
            raise fail("a positive integer or null")
        return int(value)
    if key == "width_multiplier":
        if not is_real or not 0 < value < float("inf"):
            raise fail("a positive finite number")
        return float(value)
    if key == "negative_slope":
        if not is_real or not abs(value) < float("inf"):
            raise fail("a finite number")
        return float(value)
    raise AssertionError(f"no check for option {key!r}")  # a registry option without a check


def normalize_spec(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The validated spec with every option filled in: ``arch`` first, then options in registry order.

    Idempotent, so two specs describe the same model exactly when their normalised forms are equal.

    Parameters
    ----------
    spec : Mapping[str, Any]
        A model spec: ``arch`` and any of its options (see the module docstring).

    Returns
    -------
    dict[str, Any]
        ``arch``, then every option of the architecture in registry order, defaults filled in and
        values in canonical form.
    """
    if not isinstance(spec, Mapping):
        raise TypeError(f"a model spec must be a mapping with an 'arch' key, got {spec!r}")
    known = ", ".join(ARCHITECTURES)
    if "arch" not in spec:
        raise ValueError(f"model spec has no 'arch'; known architectures: {known}")
    arch = spec["arch"]
    if arch not in ARCHITECTURES:
        raise ValueError(f"unknown model arch {arch!r}; known architectures: {known}")
    defaults = ARCHITECTURES[arch].options

    for key in spec:
        if key == "arch" or key in defaults:
            continue
        owners = [name for name, entry in ARCHITECTURES.items() if key in entry.options]
        where = f" (it applies only to {', '.join(owners)})" if owners else ""
        raise ValueError(
            f"unknown model option {key!r} for arch {arch!r}{where}; "
            f"allowed options for {arch!r}: arch, {', '.join(defaults)}"
        )

    normalized: dict[str, Any] = {"arch": arch}
    for key, default in defaults.items():
        normalized[key] = _check_value(key, spec.get(key, default))

    if arch == "custom" and normalized["factory"] is None:
        raise ValueError(
            "model option 'factory': arch 'custom' needs factory: 'package.module:function' (a function "
            "taking num_classes that returns an nn.Module; see docs/own-models.md)"
        )
    if (
        normalized["activation"] != "leaky_relu"
        and normalized["negative_slope"] != defaults["negative_slope"]
    ):
        raise ValueError(
            f"model option 'negative_slope' applies only with activation 'leaky_relu' "
            f"(this spec has activation {normalized['activation']!r}); "
            "set activation: leaky_relu or remove negative_slope"
        )
    if normalized.get("gated") is not None and normalized.get("residual_activation") is False:
        raise ValueError(
            "model option 'gated': every activation of a gated ResNet is a gate, the one on the residual "
            "output included; remove residual_activation or gated"
        )
    if normalized.get("gated") is not None and normalized["activation"] != "relu":
        raise ValueError(
            f"model option 'gated': a gated network's gates are those of ReLU, but this spec has "
            f"activation {normalized['activation']!r}; remove activation or gated"
        )
    return normalized


def build(spec: Mapping[str, Any]) -> nn.Module:
    """A freshly initialised model (from torch's global RNG) for `spec`; see the module docstring.

    Parameters
    ----------
    spec : Mapping[str, Any]
        A model spec, checked by ``normalize_spec``.

    Returns
    -------
    nn.Module
        The model: a ``GatedNet`` or ``GatedResNet`` when ``gated`` is set.
    """
    options = normalize_spec(spec)
    entry = ARCHITECTURES[options.pop("arch")]
    activation = options.pop("activation")
    negative_slope = options.pop("negative_slope")
    if activation == "leaky_relu":
        activation_layer = functools.partial(nn.LeakyReLU, negative_slope=negative_slope)
    else:
        activation_layer = ACTIVATIONS[activation]
    gated = options.pop("gated", None)
    if gated is None:
        return entry.builder(activation_layer=activation_layer, **options)
    if "residual_activation" in options:
        return GatedResNet(
            lambda: entry.builder(activation_layer=activation_layer, **options),
            **gated,
            batch_norm=options.get("batch_norm", True),
        )
    return GatedNet(
        lambda: entry.builder(activation_layer=activation_layer, **options),
        **gated,
        batch_norm=options.get("batch_norm", True),
    )


def sites(model: nn.Module) -> list[Site]:
    """The model's activation sites in forward order (the same for every seed of a spec).

    Parameters
    ----------
    model : nn.Module
        A model built by ``build`` (one with a ``site_layout`` method; others are a TypeError).

    Returns
    -------
    list[Site]
        Each site's ``name``, ``channels`` and ``inside_residual``.
    """
    layout = getattr(model, "site_layout", None)
    if layout is None:
        raise TypeError(
            f"{type(model).__name__} does not declare its activation sites (no site_layout "
            "method); build models with intertwine.models.build"
        )
    return [Site(name, int(channels), bool(inside)) for name, channels, inside in layout()]


def cut_sites(model: nn.Module) -> list[str]:
    """The sites where ``forward_to``/``forward_from`` (stitching, the rotation penalty) can cut the
    model: every site, except a gated network's feature sites (``uncut_sites_reason``).

    Parameters
    ----------
    model : nn.Module
        A model built by ``build``.

    Returns
    -------
    list[str]
        The names of the sites it can be cut at, in forward order.
    """
    names = {name for name, _ in model.pieces()}
    return [site.name for site in sites(model) if site.name in names]


def _pieces(model: nn.Module, site: str) -> tuple[list, int]:
    pieces = model.pieces()
    names = [name for name, _ in pieces]
    if site not in names:
        reason = getattr(model, "uncut_sites_reason", "")
        if reason and any(s.name == site for s in sites(model)):
            raise ValueError(f"{type(model).__name__} cannot be cut at site {site!r}: {reason}")
        raise ValueError(
            f"{type(model).__name__} has no site {site!r}; its sites are "
            f"{[name for name in names if name is not None]}"
        )
    return pieces, names.index(site)


def forward_to(model: nn.Module, x: torch.Tensor, site: str) -> tuple[torch.Tensor, ...]:
    """Run ``model`` on ``x`` up to and including the activation at ``site``.

    Returns the state there: the site's output first, then what later layers still need from
    before it (inside a residual block: the block input, which the skip path carries).
    ``forward_from(model, forward_to(model, x, site), site)`` equals ``model(x)``.

    Parameters
    ----------
    model : nn.Module
        A model built by ``build``.
    x : Tensor
        The (normalised) input batch.
    site : str
        One of ``cut_sites(model)``.

    Returns
    -------
    tuple[Tensor, ...]
        The state at ``site``: its output first, then what later layers need.
    """
    pieces, stop = _pieces(model, site)
    state: tuple[torch.Tensor, ...] = (x,)
    for _, piece in pieces[: stop + 1]:
        state = piece(*state)
    return state


def forward_from(model: nn.Module, state: tuple[torch.Tensor, ...], site: str) -> torch.Tensor:
    """The logits of ``model`` from the state at ``site`` (see ``forward_to``); the state may come
    from another model of the same variant, which is what stitching does.

    Parameters
    ----------
    model : nn.Module
        A model built by ``build``.
    state : tuple[Tensor, ...]
        The state at ``site``, as ``forward_to`` gives it.
    site : str
        One of ``cut_sites(model)``.

    Returns
    -------
    Tensor
        The logits (N, classes).
    """
    pieces, start = _pieces(model, site)
    for _, piece in pieces[start + 1 :]:
        state = piece(*state)
    return state[0]


class Stitched(nn.Module):
    """``back`` after ``site`` fed by ``front`` up to ``site``, through ``bridge`` on the channels:
    the stitched network g_{>l} ∘ bridge ∘ f_{<=l} (Bansal et al.; the paper's section 4).

    ``front`` is frozen: its parameters never train and it always runs in eval mode without
    autograd, so its time and memory go to inference only. ``bridge`` and ``back`` train as their
    own ``requires_grad`` flags say (stitching trains the bridge; the rotation penalty fine-tunes
    the back). Inside a residual block the skip path carries ``front``'s block input.
    """

    def __init__(self, front: nn.Module, back: nn.Module, site: str, bridge: nn.Module | None = None):
        super().__init__()
        _pieces(front, site), _pieces(back, site)  # both must have the site
        _check_bridge(front, back, site, bridge)
        self.front, self.back, self.site = front, back, site
        self.bridge = bridge if bridge is not None else nn.Identity()
        self.front.requires_grad_(False)
        self.front.eval()

    def train(self, mode: bool = True) -> "Stitched":
        super().train(mode)
        self.front.eval()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            state = forward_to(self.front, x, self.site)
        return forward_from(self.back, (self.bridge(state[0]), *state[1:]), self.site)


def _site_channels(model: nn.Module, site: str) -> int | None:
    return (
        next((s.channels for s in sites(model) if s.name == site), None)
        if hasattr(model, "site_layout")
        else None
    )


def _bridge_shape(bridge: nn.Module | None) -> tuple[int, int] | None:
    """(channels out, channels in) of a bridge on the channels, when its modules say it: a layer
    with a ``matrix()`` (the stitching layers) or a convolution; None when unknown (nn.Identity
    maps any width to itself)."""
    if bridge is None or isinstance(bridge, nn.Identity):
        return None
    if callable(getattr(bridge, "matrix", None)):
        with torch.no_grad():
            matrix = bridge.matrix()
        if isinstance(matrix, torch.Tensor) and matrix.ndim == 2:
            return tuple(matrix.shape)
    if isinstance(bridge, nn.modules.conv._ConvNd):
        return bridge.out_channels, bridge.in_channels
    return None


def _check_bridge(front: nn.Module, back: nn.Module, site: str, bridge: nn.Module | None) -> None:
    """The channels at ``site`` agree: front's output, the bridge's input and output, back's input."""
    c_front, c_back = _site_channels(front, site), _site_channels(back, site)
    shape = _bridge_shape(bridge)
    if shape is None:
        if c_front is not None and c_back is not None and c_front != c_back:
            raise ValueError(
                f"site {site!r} has {c_front} channels in front (the model run up to it) but "
                f"{c_back} in back (the model run after it): a bridge of {c_front} -> {c_back} "
                "channels is needed between them"
            )
        return
    out_channels, in_channels = shape
    if (c_front is not None and in_channels != c_front) or (c_back is not None and out_channels != c_back):
        fix = (
            f"build it for the site's {c_front} channels: stitching.build_layer(method, {c_front})"
            if c_front == c_back
            else f"it must map {c_front} channels to {c_back}"
        )
        raise ValueError(
            f"the stitching layer maps {in_channels} channels to {out_channels}, but site {site!r} "
            f"has {c_front} channels in front (f, run up to it) and {c_back} in back (g, run after "
            f"it): {fix}"
        )


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters.

    Parameters
    ----------
    model : nn.Module
        Any module.

    Returns
    -------
    int
        The number of elements of its parameters that require gradients.
    """
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


class _SitesRead(Exception):
    """Raised by site_activations' hooks once every requested site has its output: the rest of
    the forward pass is not needed."""


def site_activations(
    model: nn.Module,
    images: torch.Tensor,
    names=None,
    mean: torch.Tensor | None = None,
    std: torch.Tensor | None = None,
    batch_size: int = 250,
) -> dict[str, torch.Tensor]:
    """The outputs of the modules ``names`` (sites, or any module names; every site by default)
    for uint8 ``images`` normalised with ``mean``/``std`` (or, without them, for ``images`` as
    they are: inputs already normalised), in batches, in eval mode without autograd.

    Read by forward hooks, so any ``nn.Module`` works (torchvision's too). For the zoo's models,
    whose sites run once per pass by construction, the pass stops once the last of them has run;
    for others it runs to the end, so that a module run twice is caught (its output would be
    ambiguous: a ValueError, as are no images and a module that did not run). Each output is
    copied (a later in-place activation must not change it) and concatenated over batches on the
    model's device.

    Parameters
    ----------
    model : nn.Module
        The network (its mode restored afterwards).
    images : Tensor
        The (N, ...) inputs: uint8 images when ``mean`` and ``std`` are given, else the model's inputs
        as they are (already normalised); moved batch by batch to the model's device.
    names : iterable of str or None, default None
        The module names to read (sites or any modules; None: every site, ``sites(model)``).
    mean, std : Tensor or None, default None
        The per-channel normalisation (0..1 units) of uint8 images; None: none.
    batch_size : int, default 250
        Images per forward pass: an integer of at least 1, else a ValueError.

    Returns
    -------
    dict[str, Tensor]
        Module name -> its outputs (N, ...), concatenated over batches, on the model's device.
    """
    from intertwine.data.augment import normalize

    if len(images) == 0:
        raise ValueError("site_activations: no images given (an empty batch has no activations)")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"site_activations: batch size must be at least 1, got {batch_size!r} (an integer)")
    names = [site.name for site in sites(model)] if names is None else list(names)
    seen: dict[str, list[torch.Tensor]] = {name: [] for name in names}
    batch = 0
    stop_early = hasattr(model, "site_layout")

    def hook(name: str):
        def read(_module, _inputs, output):
            if len(seen[name]) == batch:  # e.g. torchvision's Bottleneck runs one ReLU three times
                raise ValueError(
                    f"module {name!r} runs more than once per forward pass, so its "
                    "output is ambiguous; name a module that runs once"
                )
            seen[name].append(output.detach().clone())
            if stop_early and all(len(outputs) == batch for outputs in seen.values()):
                raise _SitesRead

        return read

    check_input(model, images if mean is None else normalize(images[:1], mean, std), "site_activations")
    handles = [model.get_submodule(name).register_forward_hook(hook(name)) for name in names]
    was_training = model.training
    model.eval()
    device = next(model.parameters(), images).device
    try:
        with torch.inference_mode():
            for start in range(0, len(images), batch_size):
                batch += 1
                try:
                    x = images[start : start + batch_size].to(device)
                    model(x if mean is None else normalize(x, mean, std))
                except _SitesRead:
                    pass
                missing = [name for name in names if len(seen[name]) != batch]
                if missing:
                    raise ValueError(f"modules {missing} did not run in the forward pass")
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    return {name: torch.cat(outputs) for name, outputs in seen.items()}


def model_device(model: nn.Module, what: str) -> torch.device:
    """The device of a model's first parameter (or buffer); a model with neither is a ValueError
    naming ``what`` needed it (rather than a bare StopIteration)."""
    tensor = next(model.parameters(), None)
    if tensor is None:
        tensor = next(model.buffers(), None)
    if tensor is None:
        raise ValueError(
            f"{what}: the model ({type(model).__name__}) has no parameters or buffers, so it has no "
            "device or weights to work with; pass a network with weights"
        )
    return tensor.device


def check_input(model: nn.Module, x: torch.Tensor, what: str) -> None:
    """ValueError naming ``what`` when floating inputs ``x`` and the model's floating parameters
    differ in dtype (torch would raise "Input type (double) and bias type (float) ..."), or when
    either is a meta tensor (a shape without data)."""
    parameter = next((p for p in model.parameters() if p.is_floating_point()), None)
    if x.is_meta or (parameter is not None and parameter.is_meta):
        raise ValueError(
            f"{what}: the {'inputs are' if x.is_meta else 'model is'} on the meta device (shapes without "
            "data); materialise it first (load weights with to_empty and load_state_dict, or pass real inputs)"
        )
    if parameter is not None and x.is_floating_point() and x.dtype != parameter.dtype:
        raise ValueError(
            f"{what}: the inputs are {x.dtype} but the model's parameters are {parameter.dtype}; convert "
            f"one to the other (x.to({parameter.dtype}) or model.to({x.dtype}))"
        )
