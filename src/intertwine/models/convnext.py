"""A small ConvNeXt (Liu et al. 2022) for CIFAR-sized inputs.

The paper's section 6 contrasts ResNets, whose residual stream passes through an activation after
every addition, with ConvNeXt, which has no activation before or after the residual add. This is a
three-stage ConvNeXt scaled down for 32x32 images:

- stem ``stem``: a 2x2 stride-2 "patchify" conv (32 -> 16 pixels), then a channels LayerNorm.
- stages ``stage1``, ``stage2``, ``stage3`` of :class:`ConvNeXtBlock`, 64/128/256 channels, 2
  blocks each; before stages 2 and 3 a downsampling layer ``down2``, ``down3`` (channels
  LayerNorm, then a 2x2 stride-2 conv).
- head: global average pool, LayerNorm, linear.

Differences from torchvision's ``convnext_tiny`` besides the size: the pointwise layers are 1x1
convs rather than ``nn.Linear`` on channels-last tensors (the same function, but the activation
site stays channels-first like every other site in the zoo), there is no stochastic depth, and the
conv and linear weights are kaiming-normal (fan-in, gain sqrt(2), as resnet20's) rather than
truncated-normal with std 0.02. Biases start at zero and the layer scale ``gamma`` at ConvNeXt's
1e-6. Measured with the default config's zoo training (4 epochs of Adam, lr 2e-3, batch 32, on the
4,000 ``shapes`` training images, one CPU thread) at ``width_multiplier`` 0.25: ConvNeXt's
truncated-normal init never leaves chance (11 % test accuracy), kaiming-normal reaches 42-45 %;
with kaiming-normal a layer scale of 1e-6 gave 42-44 % over three seeds, 0.1 gave 40-42 % and 1.0
31 %. Even so this network learns the task far more slowly than the BN networks of the zoo.

The residual output of each block is an ``nn.Identity`` named ``out``, so it is a site like a
ResNet's ``act2`` with ``residual_activation: False``.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from .resnet import scaled_widths

__all__ = ["ConvNeXt", "ConvNeXtBlock", "LayerNorm2d", "convnext"]

_LN_EPS = 1e-6  # ConvNeXt's LayerNorm epsilon


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of an (N, C, H, W) tensor: torchvision's ``LayerNorm2d``
    (same parameters), written out because importing torchvision costs every job ~3 s."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.layer_norm(x.permute(0, 2, 3, 1), self.normalized_shape, self.weight, self.bias, self.eps)
        return x.permute(0, 3, 1, 2)


class ConvNeXtBlock(nn.Module):
    """dwconv 7x7 - norm - pwconv1 (C -> 4C) - act - pwconv2 (4C -> C) - gamma, plus the input,
    then ``out`` (an identity: no activation on the residual stream)."""

    def __init__(
        self,
        channels: int,
        activation_layer: Callable[[], nn.Module],
        layer_scale: float,
    ) -> None:
        super().__init__()
        self.dwconv = nn.Conv2d(channels, channels, kernel_size=7, padding=3, groups=channels)
        self.norm = LayerNorm2d(channels, eps=_LN_EPS)
        self.pwconv1 = nn.Conv2d(channels, 4 * channels, kernel_size=1)
        self.act = activation_layer()
        self.pwconv2 = nn.Conv2d(4 * channels, channels, kernel_size=1)
        # Per-channel layer scale on the residual branch, shaped to broadcast over (N, C, H, W).
        self.gamma = nn.Parameter(torch.full((channels, 1, 1), float(layer_scale)))
        # Kept as a module so the residual output is a named site.
        self.out = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.finish(self.start(x), x)

    def start(self, x: torch.Tensor) -> torch.Tensor:
        """The residual branch up to the activation `act`."""
        return self.act(self.pwconv1(self.norm(self.dwconv(x))))

    def finish(self, inner: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The rest of the block, given `act`'s output and the block input `x` (the skip path)."""
        return self.out(x + self.gamma * self.pwconv2(inner))


class ConvNeXt(nn.Module):
    """Patchify stem, stages `stage1`, `stage2`, ... of ConvNeXtBlocks with downsampling layers
    `down2`, `down3`, ... between them, average pool, LayerNorm, linear head."""

    def __init__(
        self,
        depths: Sequence[int],
        widths: Sequence[int],
        num_classes: int = 10,
        activation_layer: Callable[[], nn.Module] = nn.GELU,
        layer_scale: float = 1e-6,
    ) -> None:
        super().__init__()
        if len(depths) != len(widths):
            raise ValueError(f"depths {tuple(depths)} and widths {tuple(widths)} differ in length")
        self.stem = nn.Sequential(
            nn.Conv2d(3, widths[0], kernel_size=2, stride=2),
            LayerNorm2d(widths[0], eps=_LN_EPS),
        )

        self.stage_names: tuple[str, ...] = tuple(f"stage{i}" for i in range(1, len(widths) + 1))
        # The layer before each stage's first block: the stem, then the downsampling layers.
        self.entry_names: tuple[str, ...] = ("stem",) + tuple(f"down{i}" for i in range(2, len(widths) + 1))
        for i, (name, depth, channels) in enumerate(zip(self.stage_names, depths, widths)):
            if i > 0:
                self.add_module(
                    self.entry_names[i],
                    nn.Sequential(
                        LayerNorm2d(widths[i - 1], eps=_LN_EPS),
                        nn.Conv2d(widths[i - 1], channels, kernel_size=2, stride=2),
                    ),
                )
            self.add_module(
                name,
                nn.Sequential(
                    *(ConvNeXtBlock(channels, activation_layer, layer_scale) for _ in range(depth))
                ),
            )

        # Adaptive, so inputs other than 32x32 work too.
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.head_norm = nn.LayerNorm(widths[-1], eps=_LN_EPS)
        self.fc = nn.Linear(widths[-1], num_classes)

        # Kaiming-normal conv and linear weights (see the module docstring), zero biases.
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(module.weight)
                nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for entry, name in zip(self.entry_names, self.stage_names):
            x = getattr(self, name)(getattr(self, entry)(x))
        return self._head(x)

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.head_norm(self.flatten(self.avgpool(x))))

    def pieces(self) -> list[tuple[str | None, Callable[..., tuple[torch.Tensor, ...]]]]:
        """The forward pass cut at each site: (site, piece) pairs, each piece mapping the state
        left by the previous one to the state at its site. Inside a block the state is
        (act output, block input), since the skip path still needs the block input; the first
        block of a stage also runs the stem or downsampling layer before it."""
        pieces: list = []
        for entry_name, name in zip(self.entry_names, self.stage_names):
            entry = getattr(self, entry_name)
            for j, block in enumerate(getattr(self, name)):
                if j == 0:

                    def start(x, b=block, entry=entry):
                        x = entry(x)
                        return b.start(x), x
                else:

                    def start(x, b=block):
                        return b.start(x), x

                pieces.append((f"{name}.{j}.act", start))
                pieces.append((f"{name}.{j}.out", lambda inner, x, b=block: (b.finish(inner, x),)))
        pieces.append((None, lambda x: (self._head(x),)))
        return pieces

    def site_layout(self) -> list[tuple[str, int, bool]]:
        """(module name, channels, inside_residual) of each activation, in forward order."""
        layout = []
        for name in self.stage_names:
            for j, block in enumerate(getattr(self, name)):
                layout.append((f"{name}.{j}.act", block.pwconv1.out_channels, True))
                layout.append((f"{name}.{j}.out", block.pwconv2.out_channels, False))
        return layout


def convnext(
    *,
    num_classes: int = 10,
    width_multiplier: float = 1.0,
    activation_layer: Callable[[], nn.Module] = nn.GELU,
) -> ConvNeXt:
    """CIFAR ConvNeXt: widths 64/128/256 (scaled by `width_multiplier`), 2 blocks per stage
    (1,596,874 parameters with the defaults; 110,458 at width 0.25, which trains the default
    zoo's 4 epochs in about 40 s on one CPU thread to about 45 % on shapes; 413,418 at 0.5, 78 s,
    48 %)."""
    return ConvNeXt(
        (2, 2, 2),
        scaled_widths((64, 128, 256), width_multiplier),
        num_classes,
        activation_layer,
        layer_scale=1e-6,
    )
