"""Your own architecture for intertwine: a factory that takes ``num_classes`` (and any options of
its own) and returns an ``nn.Module``. Its sites are its ``nn.ReLU`` modules, read in registration
order; zoo variant ``{arch: custom, factory: "mynets:small_cnn", options: {width: 8}}``."""

from torch import nn


def small_cnn(num_classes: int, width: int = 8) -> nn.Module:
    """Two conv-bn-relu layers, a max pool between them, global average pooling and a linear head."""
    return nn.Sequential(
        nn.Conv2d(3, width, 3, padding=1),
        nn.BatchNorm2d(width),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, 3, padding=1),
        nn.BatchNorm2d(2 * width),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(2 * width, num_classes),
    )
