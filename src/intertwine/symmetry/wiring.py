"""The wiring of the zoo architectures for the weight action: which conv and norm produce each
site, which modules read it, and which sites skip connections and gates tie together."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from torch import nn

from .. import models
from ..models.gated import GatedNet
from ..models.myrtle import Myrtle
from ..models.plain import ConvStack
from ..models.resnet import ResNet, ZeroPadShortcut

# The architectures whose wiring act_on_weights knows. (ConvNeXt has LayerNorm, whose intertwiner
# group is smaller, and no symmetry check here.)
ARCHS = ("myrtle", "resnet20", "resnet18", "resnet110", "c4gap", "c1gap", "vgg16_avg")


def acts_on(spec: dict) -> bool:
    """Whether :func:`act_on_weights` knows the model of a normalised spec: an architecture of
    ``ARCHS``, plain or gated, except a gated ResNet (``models.gated_resnet``), whose gates are
    read by hooks rather than wired layer by layer."""
    return spec["arch"] in ARCHS and not (spec.get("gated") is not None and "residual_activation" in spec)


@dataclass(frozen=True)
class Link:
    """Site `site` is tied to the earlier site `source` by a parameter-free shortcut."""

    source: str
    kind: str  # "identity" or "zeropad"
    shortcut: str  # qualified module name of the shortcut
    pad_before: int = 0


@dataclass(frozen=True)
class Wiring:
    sites: list[models.Site]
    producers: dict[str, list[tuple[str, str]]]  # site -> (conv, norm) pairs summed before it
    consumers: dict[str, list[str]]  # site -> modules (conv / linear) reading its output
    links: dict[str, Link]
    gated_by: dict[str, str] = None  # a gated network's value site -> the feature site gating it


def _chain_wiring(layers, prefix: str, producers: dict, consumers: dict, head: str | None) -> None:
    """A plain stack: layer l's activation feeds layer l+1's conv, the last one ``head``."""
    for i, (conv, norm, act, _) in enumerate(layers):
        producers[prefix + act] = [(prefix + conv, prefix + norm)]
        following = prefix + layers[i + 1][0] if i + 1 < len(layers) else head
        if following is not None:
            consumers[prefix + act].append(following)


def model_wiring(model: nn.Module) -> Wiring:
    """The sites of a model of ``ARCHS``, what produces and reads each, and the ties between them
    (shortcuts, gates): what :func:`act_on_weights` acts on."""
    producers: dict[str, list[tuple[str, str]]] = {}
    consumers: dict[str, list[str]] = defaultdict(list)
    links: dict[str, Link] = {}
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
                    links[f"{p}.act2"] = Link(prev, "identity", f"{p}.shortcut")
                elif isinstance(shortcut, ZeroPadShortcut):
                    links[f"{p}.act2"] = Link(prev, "zeropad", f"{p}.shortcut", shortcut.pad_before)
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
    return Wiring(site_list, producers, dict(consumers), links, gated_by)


def site_groups(model: nn.Module) -> list[list[str]]:
    """Sites whose elements are tied by parameter-free skip connections, in forward order.

    Each group is a list of site names; an element given to one site of a group determines
    (identity shortcut) or constrains (option-A shortcut: the middle channel block) the others.
    A gated network's value site is grouped with the feature site that gates it. Sites inside
    residual blocks, and every Myrtle site, are singleton groups.

    Parameters
    ----------
    model : nn.Module
        A model built by ``intertwine.models.build``.

    Returns
    -------
    list[list[str]]
        The groups of site names, each in forward order, ordered by their first site.
    """
    wiring = model_wiring(model)
    root: dict[str, str] = {}
    groups: dict[str, list[str]] = {}
    for site in wiring.sites:
        link = wiring.links.get(site.name)
        source = link.source if link else wiring.gated_by.get(site.name)
        r = root[source] if source else site.name
        root[site.name] = r
        groups.setdefault(r, []).append(site.name)
    return list(groups.values())
