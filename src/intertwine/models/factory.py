"""Architectures of the user's own: a spec ``{arch: custom, factory: "package.module:function"}``
builds ``function(num_classes=..., **options)``, any ``nn.Module`` that maps images (N, 3, H, W) to
logits (N, classes), with the module importable (on ``PYTHONPATH``).

Its sites are modules, read by forward hooks: every module of the spec's ``activation`` class
(``nn.ReLU`` by default) in registration order, or the module names listed in ``sites``. A ReLU
called as a function (``F.relu``, ``torch.relu``, ``x.relu()``) is no module, so it cannot be read:
``check_sites`` finds such calls in one forward pass and says to make them ``nn.ReLU`` modules or to
name the modules to read in ``sites`` (an ``nn.Identity`` after the call is a module to read).

A site's channels are the width (``out_channels``, ``out_features``, ``num_features`` or
``normalized_shape``) of the last layer inside it when it is a block (torchvision's ``layer2``),
else of the nearest layer registered before it: conv-bn-relu and linear-relu stacks.
``check_sites`` compares them with the outputs of a forward pass.

A model whose class defines ``site_layout()`` (and ``pieces()``, the cut points stitching and the
rotation penalty need) declares its own sites, as the zoo's architectures do; then ``sites`` must be
left out.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch import nn

__all__ = ["FACTORY_PATTERN", "check_sites", "custom", "factory_source", "resolve_factory"]

#: ``package.module:function``: a dotted module path, a colon, a name in it.
FACTORY_PATTERN = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")

_HOW = "see docs/own-models.md"


def resolve_factory(factory: str) -> Callable[..., nn.Module]:
    """The function ``factory`` names (``package.module:function``), imported; a ValueError naming
    the spec key ``factory`` and the fix when it cannot be found."""
    if not isinstance(factory, str) or not FACTORY_PATTERN.match(factory):
        raise ValueError(
            f"model option 'factory': expected 'package.module:function' (e.g. 'mynets.cnn:small_cnn'), "
            f"got {factory!r}"
        )
    module_name, _, name = factory.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(
            f"model option 'factory': cannot import module {module_name!r} ({err}); put the folder that "
            f"holds it on PYTHONPATH (e.g. PYTHONPATH=$PWD snakemake ...), {_HOW}"
        ) from None
    function = getattr(module, name, None)
    if not callable(function):
        raise ValueError(
            f"model option 'factory': module {module_name!r} ({getattr(module, '__file__', '?')}) has no "
            f"function {name!r}"
        )
    return function


def factory_source(factory: str) -> Path | None:
    """The source file of the factory's module (an edit to it reruns the jobs of its variants), or
    None for a module without one."""
    module = inspect.getmodule(resolve_factory(factory))
    source = getattr(module, "__file__", None)
    return Path(source) if source else None


class SiteLayout:
    """A factory model's ``site_layout``: (name, channels, inside_residual) per site, fixed when the
    model is built (a plain object, so that copies of the model keep it)."""

    def __init__(self, layout: Sequence[tuple[str, int, bool]], named: bool) -> None:
        self.layout = tuple(layout)
        self.named = named  # listed in the spec's `sites`, not found by their module class

    def __call__(self) -> list[tuple[str, int, bool]]:
        return list(self.layout)


# What gives a layer its width: the attributes read, in this order.
_WIDTHS = ("out_channels", "out_features", "num_features", "normalized_shape")


def _width(module: nn.Module) -> int | None:
    for attribute in _WIDTHS:
        value = getattr(module, attribute, None)
        if isinstance(value, int):
            return value
        if isinstance(value, (tuple, list)) and value and isinstance(value[0], int):
            return int(value[0])
    return None


def _site_channels(model: nn.Module, names: list[str], factory: str) -> list[int]:
    """Each site's channels: the width of the last layer inside it (a block, e.g. torchvision's
    ``layer2``), or else of the nearest layer registered before it (an activation module)."""
    width, channels = None, {}
    for name, module in model.named_modules():
        found = _width(module)
        if found is not None:
            width = found
        if name in names and name not in channels:
            inside = [w for w in map(_width, module.modules()) if w is not None]
            if inside:
                channels[name] = inside[-1]
                continue
            if width is None:
                raise ValueError(
                    f"model option 'sites': site {name!r} of {factory} comes before any layer with a width "
                    f"({', '.join(_WIDTHS)}), so its channels are unknown; read a site after a conv or linear layer"
                )
            channels[name] = width
    return [channels[name] for name in names]


def _activation_type(activation_layer: Callable[[], nn.Module]) -> tuple[type, dict]:
    if isinstance(activation_layer, functools.partial):
        return activation_layer.func, dict(activation_layer.keywords)
    return activation_layer, {}


def _site_names(model: nn.Module, sites: list[str] | None, kind: type, factory: str) -> list[str]:
    modules = dict(model.named_modules())
    if sites is None:
        found = [name for name, module in modules.items() if isinstance(module, kind)]
        if not found:
            raise ValueError(
                f"model option 'sites': {factory} builds a {type(model).__name__} with no {kind.__name__} "
                f"module, so it has no sites to read. If it calls the activation as a function (F.relu, "
                f"torch.relu, x.relu()), make each call an nn.{kind.__name__} module of its own, or list the "
                f"modules to read in `sites` (e.g. an nn.Identity after each call); {_HOW}"
            )
        return found
    unknown = [name for name in sites if name not in modules or not name]
    if unknown:
        raise ValueError(
            f"model option 'sites': {unknown} are not modules of {factory}'s {type(model).__name__}; "
            f"its modules are {[name for name in modules if name][:20]}"
        )
    if len(set(sites)) != len(sites):
        raise ValueError(f"model option 'sites': {list(sites)} names a module twice; name each once")
    return list(sites)


def custom(
    *,
    factory: str,
    options: dict[str, Any],
    sites: list[str] | None,
    num_classes: int,
    activation_layer: Callable[[], nn.Module] = nn.ReLU,
) -> nn.Module:
    """The model ``factory(num_classes=num_classes, **options)`` with its sites declared
    (``site_layout``): the modules ``sites``, or every module of ``activation_layer``'s class.

    Parameters
    ----------
    factory : str
        ``package.module:function``; the function returns an ``nn.Module``.
    options : dict
        Keyword arguments of the factory beside ``num_classes``.
    sites : list of str or None
        Module names of the sites, in forward order; None: every module of the activation's class.
    num_classes : int
        Classes of its head, passed to the factory.
    activation_layer : callable
        The activation of the sites (``nn.ReLU``, or a partial of ``nn.LeakyReLU`` with its slope,
        which every LeakyReLU site must have).

    Returns
    -------
    nn.Module
        The factory's model, its ``site_layout`` set (unless its class declares one).
    """
    function = resolve_factory(factory)
    try:
        model = function(num_classes=num_classes, **options)
    except TypeError as err:
        raise ValueError(
            f"model option 'factory': {factory}(num_classes={num_classes}, **{options}) failed ({err}); the "
            "factory must take num_classes and the keyword arguments under the spec's `options`"
        ) from None
    if not isinstance(model, nn.Module):
        raise ValueError(
            f"model option 'factory': {factory} returned a {type(model).__name__}, not an nn.Module"
        )
    if callable(getattr(type(model), "site_layout", None)):
        if sites is not None:
            raise ValueError(
                f"model option 'sites': {type(model).__name__} declares its own sites (site_layout); "
                "remove `sites` from the spec"
            )
        return model
    kind, keywords = _activation_type(activation_layer)
    names = _site_names(model, sites, kind, factory)
    if "negative_slope" in keywords:
        for name in names:
            slope = getattr(model.get_submodule(name), "negative_slope", keywords["negative_slope"])
            if slope != keywords["negative_slope"]:
                raise ValueError(
                    f"model option 'negative_slope': {keywords['negative_slope']} but site {name!r} of "
                    f"{factory} has slope {slope}; set negative_slope: {slope}"
                )
    channels = _site_channels(model, names, factory)
    model.site_layout = SiteLayout(
        [(name, width, False) for name, width in zip(names, channels)], named=sites is not None
    )
    return model


def check_sites(model: nn.Module, images: torch.Tensor, label: str) -> None:
    """One forward pass of ``model`` on ``images``: each site runs once and outputs its declared
    channels (dim 1), and, where the sites were found by their module class, no ReLU or LeakyReLU is
    also called as a function (a site the module class missed, found by ``gates.gate_patterns``).

    Parameters
    ----------
    model : nn.Module
        A model built by ``intertwine.models.build`` (its mode is restored afterwards).
    images : Tensor
        A few normalised inputs.
    label : str
        What names the model in the errors (the workflow: ``zoo.variants.<name>``).

    Returns
    -------
    None
        A ValueError naming the site and the fix when a check fails.
    """
    from intertwine.gates import gate_patterns

    declared = [(name, channels) for name, channels, _ in model.site_layout()]
    outputs: dict[str, list[torch.Tensor]] = {name: [] for name, _ in declared}
    handles = [
        model.get_submodule(name).register_forward_hook(
            lambda _m, _i, out, name=name: outputs[name].append(out)
        )
        for name, _ in declared
    ]
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            model(images)
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    for name, channels in declared:
        runs = outputs[name]
        if len(runs) != 1:
            raise ValueError(
                f"{label}: site {name!r} runs {len(runs)} times in a forward pass, so its output is "
                "not one representation; give each call a module of its own, or list in the spec's "
                f"`sites` modules that run once; {_HOW}"
            )
        if runs[0].ndim < 2 or runs[0].shape[1] != channels:
            raise ValueError(
                f"{label}: site {name!r} outputs shape {tuple(runs[0].shape)}, not {channels} "
                "channels (dim 1), the width read from its layers (the last inside it, else the nearest before "
                "it, in registration order); register the layer "
                f"that feeds each site just before it in __init__, or read other modules (`sites`); {_HOW}"
            )
    layout = getattr(model, "site_layout", None)
    if not isinstance(layout, SiteLayout) or layout.named:
        return  # sites declared by the class or named in the spec: a functional call is left unread
    calls = gate_patterns(model, images)  # every ReLU call site, a module's or a function's
    functional = sorted({call.split("@")[0] for call in calls if call.split("@")[0].endswith("()")})
    if functional:
        raise ValueError(
            f"{label}: the model calls an activation as a function at {functional} (by the module named "
            "before the dot): such a call is no module, so it is not read as a site and the sites found "
            "by module miss it. Make each call an nn.ReLU module of its own, or list the modules to read "
            f"in the spec's `sites` (the calls are then left unread); {_HOW}"
        )
