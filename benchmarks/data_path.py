"""Images/s of the zoo's input pipeline (uint8 tensors on the device, batched augmentation) vs a
torchvision data set with per-sample transforms behind a DataLoader, on the same images.

    python benchmarks/data_path.py [--n 10000] [--batch-size 32] [--workers 0] [--device auto]
"""

from __future__ import annotations

import argparse
import time

import torch

from common import baseline_loader, benchmark_data, describe_device, ratio_line, throughput
from intertwine.data.augment import augment, normalize
from intertwine.utils import resolve_device


def ours(images, labels, mean, std, batch_size, device) -> float:
    images, labels, mean, std = (t.to(device) for t in (images, labels, mean, std))
    generator = torch.Generator(device=device).manual_seed(0)
    order = torch.randperm(len(labels), device=device, generator=generator)
    started = time.perf_counter()
    seen = 0
    for start in range(0, len(labels) - batch_size + 1, batch_size):
        idx = order[start : start + batch_size]
        augment(normalize(images[idx], mean, std), generator)  # the batch a training step takes
        seen += len(labels[idx])
    if device.type == "cuda":
        torch.cuda.synchronize()
    return seen / (time.perf_counter() - started)


def baseline(images, labels, mean, std, batch_size, device, workers) -> float:
    loader = baseline_loader(images, labels, mean, std, batch_size, workers)
    return throughput(loader, lambda x, y: None, device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers of the baseline")
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    device = resolve_device(args.device)
    data = benchmark_data(args.n)
    ours(*data, args.batch_size, device)  # warm-up
    a = ours(*data, args.batch_size, device)
    b = baseline(*data, args.batch_size, device, args.workers)
    print(
        f"data path, {args.n} images 32x32, batch {args.batch_size}, {describe_device(device)}, "
        f"baseline with {args.workers} DataLoader workers"
    )
    print(ratio_line("augmented batches", a, b))


if __name__ == "__main__":
    main()
