"""Training images/s of the zoo loop (intertwine.training.train) vs the same model and optimiser
fed by a torchvision data set + per-sample transforms + DataLoader, on the same images.

    python benchmarks/train_throughput.py [--arch myrtle] [--width-multiplier 0.25] [--n 4000]
"""

from __future__ import annotations

import argparse
import itertools
import time

import torch

from common import baseline_loader, benchmark_data, describe_device, ratio_line, throughput
from intertwine import models
from intertwine.data import Split
from intertwine.settings import TrainConfig
from intertwine.training import train
from intertwine.utils import resolve_device


def ours(spec, images, labels, mean, std, config, device) -> float:
    torch.manual_seed(0)
    model = models.build(spec).to(device)
    split = Split(images, labels).to(device)
    tiny_val = Split(images[: config.batch_size], labels[: config.batch_size]).to(device)
    generator = torch.Generator(device=device).manual_seed(0)
    started = time.perf_counter()
    train(model, split, tiny_val, config, generator, mean.to(device), std.to(device), log=lambda _: None)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return config.epochs * len(labels) / (time.perf_counter() - started)


def baseline(spec, images, labels, mean, std, config, device, workers) -> float:
    torch.manual_seed(0)
    model = models.build(spec).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(x, y):
        loss = loss_fn(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    batches = itertools.chain.from_iterable(
        baseline_loader(images, labels, mean, std, config.batch_size, workers, seed=epoch)
        for epoch in range(config.epochs)
    )
    return throughput(batches, step, device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="myrtle")
    parser.add_argument("--width-multiplier", type=float, default=0.25)
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    device = resolve_device(args.device)
    spec = {"arch": args.arch, "width_multiplier": args.width_multiplier}
    config = TrainConfig(epochs=args.epochs, batch_size=args.batch_size)
    data = benchmark_data(args.n)
    a = ours(spec, *data, config, device)
    b = baseline(spec, *data, config, device, args.workers)
    print(
        f"training {spec}, {args.n} images x {args.epochs} epochs, batch {args.batch_size}, "
        f"{describe_device(device)}, baseline with {args.workers} DataLoader workers"
    )
    print(ratio_line("training", a, b))


if __name__ == "__main__":
    main()
