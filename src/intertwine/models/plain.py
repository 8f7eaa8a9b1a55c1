"""Plain convolutional stacks of the gated-networks paper (Lakshminarayanan & Singh): C4GAP, C1GAP
and VGG-16 with average pools.

Every layer is a 3x3 convolution (stride 1, padding 1), batch norm and the activation; some layers
are followed by a 2x2 average pool; a global average pool and a linear head end the network.

- ``c4gap``: four layers of width 128 (the paper's Table I; 512 in Table III), no pooling between
  them, so every layer has the same shape (the gate-permutation study needs that).
- ``c1gap``: one layer of width 512 (Table III).
- ``vgg16_avg``: VGG-16 with batch norm (13 layers, 64-64-128-128-256x3-512x3-512x3) whose five
  max-pools are average pools, and one linear head after the global average pool (the CIFAR form
  of VGG: at 32x32 the last pool leaves 1x1).

Modules are named like Myrtle's (``conv1, bn1, act1, pool1, ..., global_pool, fc``), so the
weight-space action, the gated form (:mod:`intertwine.models.gated`) and every stage treat the
two alike; ``pool{i}`` is an ``nn.Identity`` where no pool follows layer i.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import nn

__all__ = ["ConvStack", "c1gap", "c4gap", "vgg16_avg", "VGG16_LAYERS"]

# (width, followed by a 2x2 pool) per layer of VGG-16 ("D" configuration).
VGG16_LAYERS = (
    (64, False),
    (64, True),
    (128, False),
    (128, True),
    (256, False),
    (256, False),
    (256, True),
    (512, False),
    (512, False),
    (512, True),
    (512, False),
    (512, False),
    (512, True),
)


class ConvStack(nn.Module):
    """[conv3x3 - bn - act (- avgpool 2)] per layer, a global average pool and a linear head."""

    def __init__(
        self,
        widths: Sequence[int],
        pooled: Sequence[bool],
        num_classes: int = 10,
        activation_layer: Callable[[], nn.Module] = nn.ReLU,
        batch_norm: bool = True,
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        self.depth = len(widths)
        for i, (width, pool) in enumerate(zip(widths, pooled, strict=True), start=1):
            self.add_module(f"conv{i}", nn.Conv2d(in_channels, width, kernel_size=3, padding=1))
            self.add_module(f"bn{i}", nn.BatchNorm2d(width) if batch_norm else nn.Identity())
            self.add_module(f"act{i}", activation_layer())
            self.add_module(f"pool{i}", nn.AvgPool2d(2) if pool else nn.Identity())
            in_channels = width
        self.global_pool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(in_channels, num_classes)

    def layer_names(self) -> list[tuple[str, str, str, str]]:
        """(conv, norm, activation, pool after it) module names per layer, in forward order."""
        return [(f"conv{i}", f"bn{i}", f"act{i}", f"pool{i}") for i in range(1, self.depth + 1)]

    def _layer(self, i: int, x: torch.Tensor) -> torch.Tensor:
        conv, norm, act, _ = (self.get_submodule(name) for name in self.layer_names()[i])
        return act(norm(conv(x)))

    def _pool(self, i: int, x: torch.Tensor) -> torch.Tensor:
        return self.get_submodule(self.layer_names()[i][3])(x)

    def _head(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.flatten(self.global_pool(x)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(self.depth):
            x = self._pool(i, self._layer(i, x))
        return self._head(x)

    def pieces(self) -> list[tuple[str | None, Callable[..., tuple[torch.Tensor, ...]]]]:
        """The forward pass cut at each site (see ``Myrtle.pieces``): a pool runs at the start of
        the next piece, so that each site's state is its activation."""
        pieces: list = [("act1", lambda x: (self._layer(0, x),))]
        pieces += [
            (f"act{i + 1}", lambda x, i=i: (self._layer(i, self._pool(i - 1, x)),))
            for i in range(1, self.depth)
        ]
        pieces.append((None, lambda x: (self._head(self._pool(self.depth - 1, x)),)))
        return pieces

    def site_layout(self) -> list[tuple[str, int, bool]]:
        """(module name, channels, inside_residual) of each activation, in forward order."""
        return [(act, self.get_submodule(conv).out_channels, False) for conv, _, act, _ in self.layer_names()]


def _scaled(widths: Sequence[int], multiplier: float) -> list[int]:
    return [max(1, round(w * multiplier)) for w in widths]


def c4gap(
    *,
    num_classes: int = 10,
    width_multiplier: float = 1.0,
    activation_layer: Callable[[], nn.Module] = nn.ReLU,
    batch_norm: bool = True,
) -> ConvStack:
    """Four 3x3 conv layers of width 128 (scaled), no pooling between them, GAP, linear head."""
    return ConvStack(
        _scaled((128,) * 4, width_multiplier), (False,) * 4, num_classes, activation_layer, batch_norm
    )


def c1gap(
    *,
    num_classes: int = 10,
    width_multiplier: float = 1.0,
    activation_layer: Callable[[], nn.Module] = nn.ReLU,
    batch_norm: bool = True,
) -> ConvStack:
    """One 3x3 conv layer of width 512 (scaled), GAP, linear head."""
    return ConvStack(_scaled((512,), width_multiplier), (False,), num_classes, activation_layer, batch_norm)


def vgg16_avg(
    *,
    num_classes: int = 10,
    width_multiplier: float = 1.0,
    activation_layer: Callable[[], nn.Module] = nn.ReLU,
    batch_norm: bool = True,
) -> ConvStack:
    """VGG-16 with batch norm and average pools (see the module docstring)."""
    widths, pooled = zip(*VGG16_LAYERS)
    return ConvStack(_scaled(widths, width_multiplier), pooled, num_classes, activation_layer, batch_norm)
