"""Myrtle CNN: the paper's 5-layer CIFAR network (4 conv layers, then a linear head)."""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import nn

__all__ = ["Myrtle", "myrtle", "BASE_WIDTHS", "PAPER_LAYER_INDEX"]

BASE_WIDTHS = (64, 128, 256, 512)

# The paper numbers Myrtle's activation layers by their 1-based position in the flat module list
# conv, bn, relu, conv, bn, relu, pool, ...; tables may quote these next to our site names.
PAPER_LAYER_INDEX = {"act1": 3, "act2": 6, "act3": 10, "act4": 14}


def _norm(channels: int, batch_norm: bool) -> nn.Module:
    # An Identity keeps the module names the same with and without BN.
    return nn.BatchNorm2d(channels) if batch_norm else nn.Identity()


class Myrtle(nn.Module):
    """conv-bn-act, then three conv-bn-act-maxpool stages, a global max pool and a linear head."""

    def __init__(
        self,
        widths: Sequence[int] = BASE_WIDTHS,
        num_classes: int = 10,
        activation_layer: Callable[[], nn.Module] = nn.ReLU,
        batch_norm: bool = True,
    ) -> None:
        super().__init__()
        w1, w2, w3, w4 = widths
        # The convs keep their bias even before BN, as in the paper's released code; the reference
        # parameter count (1,558,026) includes those biases.
        self.conv1 = nn.Conv2d(3, w1, kernel_size=3, padding=1)
        self.bn1 = _norm(w1, batch_norm)
        self.act1 = activation_layer()

        self.conv2 = nn.Conv2d(w1, w2, kernel_size=3, padding=1)
        self.bn2 = _norm(w2, batch_norm)
        self.act2 = activation_layer()
        self.pool2 = nn.MaxPool2d(2)

        self.conv3 = nn.Conv2d(w2, w3, kernel_size=3, padding=1)
        self.bn3 = _norm(w3, batch_norm)
        self.act3 = activation_layer()
        self.pool3 = nn.MaxPool2d(2)

        self.conv4 = nn.Conv2d(w3, w4, kernel_size=3, padding=1)
        self.bn4 = _norm(w4, batch_norm)
        self.act4 = activation_layer()
        self.pool4 = nn.MaxPool2d(2)

        # Adaptive, so inputs smaller than 32x32 (down to 8x8) work too.
        self.global_pool = nn.AdaptiveMaxPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(w4, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act1(self.bn1(self.conv1(x)))
        x = self.pool2(self.act2(self.bn2(self.conv2(x))))
        x = self.pool3(self.act3(self.bn3(self.conv3(x))))
        x = self.pool4(self.act4(self.bn4(self.conv4(x))))
        return self.fc(self.flatten(self.global_pool(x)))

    def layer_names(self) -> list[tuple[str, str, str, str | None]]:
        """(conv, norm, activation, pool after it or None) module names per layer, in forward order."""
        return [("conv1", "bn1", "act1", None)] + [
            (f"conv{i}", f"bn{i}", f"act{i}", f"pool{i}") for i in (2, 3, 4)
        ]

    def pieces(self) -> list[tuple[str | None, Callable[..., tuple[torch.Tensor, ...]]]]:
        """The forward pass cut at each site: (site, piece) pairs, each piece mapping the state
        left by the previous one to the state at its site (a 1-tuple here; None names the head)."""
        return [
            ("act1", lambda x: (self.act1(self.bn1(self.conv1(x))),)),
            ("act2", lambda x: (self.act2(self.bn2(self.conv2(x))),)),
            ("act3", lambda x: (self.act3(self.bn3(self.conv3(self.pool2(x)))),)),
            ("act4", lambda x: (self.act4(self.bn4(self.conv4(self.pool3(x)))),)),
            (None, lambda x: (self.fc(self.flatten(self.global_pool(self.pool4(x)))),)),
        ]

    def site_layout(self) -> list[tuple[str, int, bool]]:
        """(module name, channels, inside_residual) of each activation, in forward order."""
        convs = (self.conv1, self.conv2, self.conv3, self.conv4)
        return [(f"act{i}", conv.out_channels, False) for i, conv in enumerate(convs, start=1)]


def myrtle(
    *,
    num_classes: int = 10,
    width_multiplier: float = 1.0,
    constant_width: int | None = None,
    activation_layer: Callable[[], nn.Module] = nn.ReLU,
    batch_norm: bool = True,
) -> Myrtle:
    """Myrtle with widths 64/128/256/512, or `constant_width` everywhere, scaled by `width_multiplier`."""
    base = BASE_WIDTHS if constant_width is None else (constant_width,) * len(BASE_WIDTHS)
    widths = [max(1, round(w * width_multiplier)) for w in base]
    return Myrtle(widths, num_classes, activation_layer, batch_norm)
