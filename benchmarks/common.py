"""The baseline input pipeline the benchmarks compare against: a torchvision-style data set of PIL
images with per-sample transforms, batched by a DataLoader (the usual CIFAR-10 recipe)."""

from __future__ import annotations

import time
from typing import Callable, Iterable

import torch
from PIL import Image
from torchvision import transforms
from torchvision.datasets import VisionDataset

from intertwine.data.shapes import generate_shapes


def benchmark_data(n: int, image_size: int = 32, seed: int = 0):
    """uint8 images (N, 3, H, W), int64 labels, per-channel mean and std in [0, 1] units."""
    split = generate_shapes(n, seed, image_size=image_size)
    images = torch.from_numpy(split["images"])
    pixels = images.double().div(255).transpose(0, 1).reshape(3, -1)
    return images, torch.from_numpy(split["labels"]), pixels.mean(1).float(), pixels.std(1).float()


class ArrayDataset(VisionDataset):
    """What torchvision.datasets.CIFAR10 does per item: array -> PIL image -> transforms."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, transform):
        super().__init__(root="", transform=transform)
        self.data = images.permute(0, 2, 3, 1).numpy()
        self.targets = labels.tolist()

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int):
        return self.transform(Image.fromarray(self.data[index])), self.targets[index]


def baseline_loader(images, labels, mean, std, batch_size, workers=0, seed=0):
    fill = tuple(int(round(255 * m)) for m in mean.tolist())
    transform = transforms.Compose(
        [
            transforms.RandomCrop(images.shape[-1], padding=2, fill=fill),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(mean.tolist(), std.tolist()),
        ]
    )
    return torch.utils.data.DataLoader(
        ArrayDataset(images, labels, transform),
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        generator=torch.Generator().manual_seed(seed),
        drop_last=True,
    )


def throughput(batches: Iterable, step: Callable, device: torch.device) -> float:
    """Images/s of moving every (x, y) of ``batches`` to ``device`` and calling ``step(x, y)``."""
    started = time.perf_counter()
    seen = 0
    for x, y in batches:
        step(x.to(device, non_blocking=True), y.to(device, non_blocking=True))
        seen += len(y)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return seen / (time.perf_counter() - started)


def describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU, {torch.get_num_threads()} torch threads"


def ratio_line(name: str, ours: float, baseline: float, unit: str = "images/s") -> str:
    return f"{name}: intertwine {ours:,.0f} {unit}, baseline {baseline:,.0f} {unit}, ratio {ours / baseline:.1f}x"
