"""torchvision's ImageNet classifiers with weights from a local file, for network dissection.

Nothing is downloaded: the caller supplies the weights file, e.g. torchvision's own release
``torchvision.models.ResNet50_Weights.IMAGENET1K_V1.url`` fetched by hand. Use the V1 weights
(``IMAGENET1K_V1``, what ``pretrained=True`` loaded): they are the weights of the excitation-pullback
paper (Satkiewicz), whose section 6.3 finds it "harder (but still possible)" to get pullbacks of
the same quality from the V2 weights (torchvision's newer training recipe); V2 is a deviation to
state where it is used. The models
take images scaled to 0..1 and normalised with ``IMAGENET_MEAN`` and ``IMAGENET_STD``.

``DEFAULT_SITES`` names the modules whose forward output the dissection reads with forward hooks
(``model.get_submodule(name).register_forward_hook``): each stage's output on the residual
stream, then one site inside the last block.

- resnet50: ``layer1`` ... ``layer4`` (each stage's last Bottleneck output, after its ReLU), and
  ``layer4.2.bn2``. torchvision's Bottleneck calls one ``relu`` module three times, so no module's
  output is the block's inner representation on its own; ``bn2``'s output is the pre-activation
  whose ReLU is the input of ``conv3`` (the 512-channel bottleneck representation, the analogue
  of an activation site inside a residual block). ``feature_map`` applies that ReLU. (The ReLU
  is in place, so a hook that keeps ``bn2``'s output without copying it sees it rectified anyway
  once the forward pass is over; ``feature_map`` is right either way.)
- convnext_tiny: ``features.1``, ``features.3``, ``features.5``, ``features.7`` (the stages;
  ``features.0/2/4/6`` are the stem and the downsampling layers), and ``features.7.2.block.4``, the
  GELU of the last block's MLP (3072 channels). Inside a ConvNeXt block the MLP runs channels-last
  (``block.1`` permutes to ``(N, H, W, C)``, ``block.6`` back), so that output is ``(N, H, W,
  C)``; ``feature_map`` permutes it to ``(N, C, H, W)``.

Use ``feature_map`` (or ``site_activations``, which runs the hooks) to turn a hooked output into the
``(N, C, H, W)`` representation of the site.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch
from torch import Tensor, nn

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
IMAGENET_ARCHS = ("resnet50", "convnext_tiny")
#: The architectures of the excitation-pullback paper (ResNet50, VGG11_BN, DenseNet121) and
#: ResNet18: ``load_imagenet_model`` loads them too (the dissection reads IMAGENET_ARCHS only).
PULLBACK_ARCHS = ("resnet50", "vgg11_bn", "densenet121", "resnet18")
LOADABLE_ARCHS = tuple(dict.fromkeys(IMAGENET_ARCHS + PULLBACK_ARCHS))

#: Imagenette's ten classes (its folders are ImageNet's WordNet ids) and their ImageNet indices,
#: as the pullback paper's released code maps them.
IMAGENETTE_CLASSES = {
    "n01440764": 0,  # tench
    "n02102040": 217,  # English springer
    "n02979186": 482,  # cassette player
    "n03000684": 491,  # chain saw
    "n03028079": 497,  # church
    "n03394916": 566,  # French horn
    "n03417042": 569,  # garbage truck
    "n03425413": 571,  # gas pump
    "n03445777": 574,  # golf ball
    "n03888605": 701,  # parachute
}
# torchvision's DenseNet release files name a layer's parts norm.1, relu.1, conv.1 (torchvision
# renames them to norm1, ... when it loads them from its URL).
_DENSENET_OLD_KEY = re.compile(
    r"^(.*denselayer\d+\.(?:norm|relu|conv))\.((?:[12])\.(?:weight|bias|running_mean|running_var))$"
)

DEFAULT_SITES: dict[str, list[str]] = {
    "resnet50": ["layer1", "layer2", "layer3", "layer4", "layer4.2.bn2"],
    "convnext_tiny": ["features.1", "features.3", "features.5", "features.7", "features.7.2.block.4"],
}

# Hooked outputs that are not yet the representation: Bottleneck pre-activations (rectified by
# the shared ReLU) and ConvNeXt block internals between the two Permutes (channels-last).
_RESNET_PREACTIVATION = re.compile(r"^layer\d+\.\d+\.bn[12]$")
_CONVNEXT_CHANNELS_LAST = re.compile(r"^features\.\d+\.\d+\.block\.[1-5]$")


def _weights_urls(arch: str) -> str:
    from torchvision import models

    enum = {
        "resnet50": models.ResNet50_Weights,
        "convnext_tiny": models.ConvNeXt_Tiny_Weights,
        "vgg11_bn": models.VGG11_BN_Weights,
        "densenet121": models.DenseNet121_Weights,
        "resnet18": models.ResNet18_Weights,
    }[arch]
    return "; ".join(f"{w.name}: {w.url}" for w in enum)


def _check_arch(arch: str, allowed: tuple[str, ...] = IMAGENET_ARCHS) -> None:
    if arch not in allowed:
        raise ValueError(f"ImageNet arch {arch!r} is not one of {allowed}")


def build_imagenet_model(arch: str) -> nn.Module:
    """The torchvision architecture (one of ``LOADABLE_ARCHS``) with random weights (1000
    classes); downloads nothing."""
    from torchvision import models

    _check_arch(arch, LOADABLE_ARCHS)
    return getattr(models, arch)(weights=None)


def _state_dict(loaded, path: Path) -> dict[str, Tensor]:
    if isinstance(loaded, dict):
        for key in ("state_dict", "model"):
            if key in loaded and isinstance(loaded[key], dict):
                loaded = loaded[key]
                break
    if not isinstance(loaded, dict) or not all(isinstance(v, Tensor) for v in loaded.values()):
        raise ValueError(
            f"{path} is not a state dict (a dict of tensors, possibly under a "
            f"'state_dict' or 'model' key); got {type(loaded).__name__}"
        )
    keys = list(loaded)
    if keys and all(k.startswith("module.") for k in keys):  # saved from DataParallel / DDP
        loaded = {k[len("module.") :]: v for k, v in loaded.items()}
    return loaded


def load_imagenet_model(arch: str, weights_path: str | Path) -> nn.Module:
    """Build torchvision's ``arch`` (one of ``LOADABLE_ARCHS``) without weights, load the state
    dict in ``weights_path`` (plain, or under a ``"state_dict"``/``"model"`` key; a ``module.``
    prefix is stripped; DenseNet's release names ``norm.1`` read as ``norm1``), and return the
    model in eval mode on the CPU."""
    _check_arch(arch, LOADABLE_ARCHS)
    path = Path(weights_path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no such weights file for {arch}. Nothing is downloaded; "
            f"fetch torchvision's ImageNet weights yourself (IMAGENET1K_V1, the pullback paper's: "
            f"{_weights_urls(arch)}) "
            f"or point at a state dict of torchvision.models.{arch}"
        )
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure means the same to the user
        raise ValueError(
            f"{path} could not be read as a PyTorch state dict ({type(err).__name__}: "
            f"{err}); save one with torch.save(model.state_dict(), path)"
        ) from err
    state = _state_dict(loaded, path)
    if arch.startswith("densenet"):
        state = {_DENSENET_OLD_KEY.sub(r"\1\2", k): v for k, v in state.items()}
    with torch.device("meta"):  # no memory and no random initialisation: every tensor is loaded
        model = build_imagenet_model(arch)
    expected = model.state_dict()
    # Release files older than batch norm's counter (torchvision's 2017 V1 weights) lack it; it
    # counts training steps and changes nothing in eval mode.
    state = state | {
        k: torch.zeros((), dtype=torch.long)
        for k in expected
        if k.endswith(".num_batches_tracked") and k not in state
    }
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    wrong_shape = [
        f"{k}: {tuple(state[k].shape)} in the file, {tuple(v.shape)} in the model"
        for k, v in expected.items()
        if k in state and state[k].shape != v.shape
    ]
    if missing or unexpected or wrong_shape:
        raise ValueError(
            f"{path} does not hold torchvision's {arch} weights: "
            f"{len(missing)} keys missing (e.g. {missing[:5]}), "
            f"{len(unexpected)} unexpected (e.g. {unexpected[:5]}), "
            f"{len(wrong_shape)} of the wrong shape (e.g. {wrong_shape[:3]})"
        )
    model.load_state_dict({k: state[k].to(v.dtype) for k, v in expected.items()}, assign=True)
    leftover = [name for name, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if leftover:  # a tensor outside the state dict (none in these architectures)
        raise RuntimeError(f"{arch}: {leftover[:5]} were not loaded from {path}")
    return model.eval()


def feature_map(arch: str, site: str, output: Tensor) -> Tensor:
    """The ``(N, C, H, W)`` representation at ``site`` from its module's hooked forward output:
    ReLU for a resnet Bottleneck's ``bn1``/``bn2`` (the shared ReLU that follows them is not a
    module of its own), channels-last to channels-first inside a ConvNeXt block's MLP."""
    _check_arch(arch)
    if arch == "resnet50" and _RESNET_PREACTIVATION.match(site):
        output = torch.relu(output)
    elif arch == "convnext_tiny" and _CONVNEXT_CHANNELS_LAST.match(site):
        output = output.permute(0, 3, 1, 2)
    if output.ndim != 4:
        raise ValueError(
            f"{arch} site {site!r} gives a {output.ndim}-D output {tuple(output.shape)}, not a feature map"
        )
    return output


def on_residual_stream(site: str) -> bool:
    """Whether ``site`` is a stage or block output (``layer4``, ``layer4.2``, ``features.7``,
    ``features.7.2``) rather than a module inside a block."""
    return re.fullmatch(r"(layer\d+|features\.\d+)(\.\d+)?", site) is not None


def site_activations(
    model: nn.Module, arch: str, images: Tensor, sites: list[str] | None = None, batch_size: int = 64
) -> dict[str, Tensor]:
    """Each site's ``(N, C, H, W)`` representation (``DEFAULT_SITES[arch]`` by default) for uint8
    ``images``, normalised with the ImageNet statistics: ``models.site_activations`` (forward
    hooks) followed by ``feature_map``."""
    from intertwine.models import site_activations as hooked

    _check_arch(arch)
    sites = list(DEFAULT_SITES[arch] if sites is None else sites)
    device = next(model.parameters()).device
    mean, std = torch.tensor(IMAGENET_MEAN, device=device), torch.tensor(IMAGENET_STD, device=device)
    outputs = hooked(model, images, sites, mean, std, batch_size)
    return {name: feature_map(arch, name, outputs[name]) for name in sites}
