"""CIFAR ResNets.

- resnet20, resnet110 (:func:`cifar_resnet` with n = 3, 18): He et al. 2016, section 4.2, as in
  akamaster/pytorch_resnet_cifar10: 16/32/64 planes, n blocks per stage, option-A
  (parameter-free) shortcuts, kaiming-normal initialisation.
- resnet18: the CIFAR adaptation of kuangliu/pytorch-cifar: 3x3 stride-1 stem without max pool,
  64/128/256/512 planes, option-B (1x1 conv + BN) shortcuts, PyTorch default initialisation.

Without batch norm every BN becomes an nn.Identity (module names unchanged) and every conv gets a
bias, so the layer still has an offset.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["BasicBlock", "ResNet", "ZeroPadShortcut", "cifar_resnet", "resnet18", "resnet20", "resnet110"]


def _norm(channels: int, batch_norm: bool) -> nn.Module:
    return nn.BatchNorm2d(channels) if batch_norm else nn.Identity()


def _conv3x3(in_planes: int, planes: int, stride: int, bias: bool) -> nn.Conv2d:
    return nn.Conv2d(in_planes, planes, kernel_size=3, stride=stride, padding=1, bias=bias)


class ZeroPadShortcut(nn.Module):
    """Option-A shortcut: subsample by `stride`, zero-pad the extra channels (no parameters)."""

    def __init__(self, in_planes: int, planes: int, stride: int) -> None:
        super().__init__()
        if planes < in_planes:
            raise ValueError(f"cannot zero-pad {in_planes} channels down to {planes}")
        self.stride = stride
        # Split the padding between both ends, as akamaster does (planes // 4 on each side).
        self.pad_before = (planes - in_planes) // 2
        self.pad_after = planes - in_planes - self.pad_before

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, :, :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, self.pad_before, self.pad_after))

    def extra_repr(self) -> str:
        return f"stride={self.stride}, pad=({self.pad_before}, {self.pad_after})"


class BasicBlock(nn.Module):
    """conv-bn-act1-conv-bn, plus the shortcut, then act2 on the sum (the residual stream)."""

    def __init__(
        self,
        in_planes: int,
        planes: int,
        stride: int,
        shortcut: str,
        activation_layer: Callable[[], nn.Module],
        batch_norm: bool,
        residual_activation: bool,
    ) -> None:
        super().__init__()
        self.conv1 = _conv3x3(in_planes, planes, stride, bias=not batch_norm)
        self.bn1 = _norm(planes, batch_norm)
        self.act1 = activation_layer()
        self.conv2 = _conv3x3(planes, planes, 1, bias=not batch_norm)
        self.bn2 = _norm(planes, batch_norm)

        if stride == 1 and in_planes == planes:
            self.shortcut: nn.Module = nn.Identity()
        elif shortcut == "A":
            self.shortcut = ZeroPadShortcut(in_planes, planes, stride)
        elif shortcut == "B":
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, kernel_size=1, stride=stride, bias=not batch_norm),
                _norm(planes, batch_norm),
            )
        else:
            raise ValueError(f"shortcut must be 'A' or 'B', got {shortcut!r}")

        # Kept as a module (an Identity when switched off) so the site keeps its name.
        self.act2 = activation_layer() if residual_activation else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.finish(self.start(x), x)

    def start(self, x: torch.Tensor) -> torch.Tensor:
        """The residual branch up to the inner activation `act1`."""
        return self.act1(self.bn1(self.conv1(x)))

    def finish(self, inner: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The rest of the block, given `act1`'s output and the block input `x` (the skip path)."""
        return self.act2(self.bn2(self.conv2(inner)) + self.shortcut(x))


class ResNet(nn.Module):
    """Stem conv-bn-act, stages `layer1`, `layer2`, ... of BasicBlocks, average pool, linear head."""

    def __init__(
        self,
        blocks_per_stage: Sequence[int],
        widths: Sequence[int],
        shortcut: str,
        num_classes: int = 10,
        activation_layer: Callable[[], nn.Module] = nn.ReLU,
        batch_norm: bool = True,
        residual_activation: bool = True,
        kaiming_init: bool = False,
    ) -> None:
        super().__init__()
        self.conv1 = _conv3x3(3, widths[0], 1, bias=not batch_norm)
        self.bn1 = _norm(widths[0], batch_norm)
        self.act = activation_layer()

        self.stage_names: tuple[str, ...] = tuple(f"layer{i}" for i in range(1, len(widths) + 1))
        in_planes = widths[0]
        for i, (name, n_blocks, planes) in enumerate(zip(self.stage_names, blocks_per_stage, widths)):
            first_stride = 1 if i == 0 else 2
            blocks = []
            for j in range(n_blocks):
                blocks.append(
                    BasicBlock(
                        in_planes,
                        planes,
                        first_stride if j == 0 else 1,
                        shortcut,
                        activation_layer,
                        batch_norm,
                        residual_activation,
                    )
                )
                in_planes = planes
            self.add_module(name, nn.Sequential(*blocks))

        # Adaptive, so inputs other than 32x32 work too.
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(in_planes, num_classes)

        if kaiming_init:
            # akamaster's _weights_init: kaiming-normal conv and linear weights, biases untouched.
            for module in self.modules():
                if isinstance(module, (nn.Conv2d, nn.Linear)):
                    nn.init.kaiming_normal_(module.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.bn1(self.conv1(x)))
        for name in self.stage_names:
            x = getattr(self, name)(x)
        return self.fc(self.flatten(self.avgpool(x)))

    def pieces(self) -> list[tuple[str | None, Callable[..., tuple[torch.Tensor, ...]]]]:
        """The forward pass cut at each site: (site, piece) pairs, each piece mapping the state
        left by the previous one to the state at its site. Inside a block the state is
        (act1 output, block input), since the skip path still needs the block input."""
        pieces: list = [("act", lambda x: (self.act(self.bn1(self.conv1(x))),))]
        for name in self.stage_names:
            for j, block in enumerate(getattr(self, name)):
                pieces.append((f"{name}.{j}.act1", lambda x, b=block: (b.start(x), x)))
                pieces.append((f"{name}.{j}.act2", lambda inner, x, b=block: (b.finish(inner, x),)))
        pieces.append((None, lambda x: (self.fc(self.flatten(self.avgpool(x))),)))
        return pieces

    def site_layout(self) -> list[tuple[str, int, bool]]:
        """(module name, channels, inside_residual) of each activation, in forward order."""
        layout = [("act", self.conv1.out_channels, False)]
        for name in self.stage_names:
            for j, block in enumerate(getattr(self, name)):
                layout.append((f"{name}.{j}.act1", block.conv1.out_channels, True))
                layout.append((f"{name}.{j}.act2", block.conv2.out_channels, False))
        return layout


def scaled_widths(widths: Sequence[int], multiplier: float) -> list[int]:
    return [max(1, round(w * multiplier)) for w in widths]


def cifar_resnet(
    n: int,
    *,
    num_classes: int = 10,
    width_multiplier: float = 1.0,
    activation_layer: Callable[[], nn.Module] = nn.ReLU,
    batch_norm: bool = True,
    residual_activation: bool = True,
) -> ResNet:
    """He et al.'s CIFAR ResNet of depth 6n + 2 (section 4.2): a 16-channel stem, three stages of
    n BasicBlocks at 16/32/64 planes, option-A shortcuts, kaiming-normal initialisation."""
    return ResNet(
        (n, n, n),
        scaled_widths((16, 32, 64), width_multiplier),
        "A",
        num_classes,
        activation_layer,
        batch_norm,
        residual_activation,
        kaiming_init=True,
    )


def resnet20(**options) -> ResNet:
    """CIFAR ResNet20 (n = 3; 269,722 parameters with the defaults). Options as
    :func:`cifar_resnet`."""
    return cifar_resnet(3, **options)


def resnet110(**options) -> ResNet:
    """CIFAR ResNet-110 (He et al. 2016, section 4.2: 6n + 2 layers with n = 18, option-A
    shortcuts; 1,727,962 parameters with the defaults), the second base of Lakshminarayanan &
    Singh's Table II. Options as :func:`cifar_resnet`."""
    return cifar_resnet(18, **options)


def resnet18(
    *,
    num_classes: int = 10,
    width_multiplier: float = 1.0,
    activation_layer: Callable[[], nn.Module] = nn.ReLU,
    batch_norm: bool = True,
    residual_activation: bool = True,
) -> ResNet:
    """CIFAR-adapted ResNet18 (11,173,962 parameters with the defaults)."""
    return ResNet(
        (2, 2, 2, 2),
        scaled_widths((64, 128, 256, 512), width_multiplier),
        "B",
        num_classes,
        activation_layer,
        batch_norm,
        residual_activation,
        kaiming_init=False,
    )
