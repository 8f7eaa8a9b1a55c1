"""Training images/s of the zoo loop (intertwine.training.train) vs the same model and optimiser
fed by a torchvision data set + per-sample transforms + DataLoader, on the same images; with
--pack, images/s per member of K members trained packed (intertwine.training.train_pack) vs the
same K members trained one at a time, side by side, and the peak GPU memory of each.

    python benchmarks/train_throughput.py [--arch myrtle] [--width-multiplier 0.25] [--n 4000]
    python benchmarks/train_throughput.py --pack 1 2 4 8 16 [--n 2000]   # Myrtle 0.25/1, ResNet20/18
    python benchmarks/train_throughput.py --memory-format [--image-size 20] [--n 1000]

``--memory-format``: images/s of ``train`` in channels-last vs the default (NCHW) format for the
default config's zoo architectures, side by side (zoo.training.channels_last).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import time

import torch

from common import baseline_loader, benchmark_data, describe_device, ratio_line, throughput
from intertwine import models
from intertwine.data import Split
from intertwine.workflow.settings import TrainConfig
from intertwine.training import train, train_pack
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


PACK_SPECS = [
    {"arch": "myrtle", "width_multiplier": 0.25},
    {"arch": "myrtle", "width_multiplier": 1.0},
    {"arch": "resnet20", "width_multiplier": 1.0},
    {"arch": "resnet18", "width_multiplier": 1.0},
]


def members_per_second(spec, k, packed, images, labels, mean, std, config, device) -> tuple[float, float]:
    """Training images/s of the k members together (k x epochs x images over the wall time; one
    at a time, that is one member's rate) and peak GPU memory (GiB; 0 on the CPU) of training k
    members of ``spec`` packed or one after another, from the same seeds."""
    split = Split(images, labels).to(device)
    tiny_val = Split(images[: config.batch_size], labels[: config.batch_size]).to(device)
    mean, std = mean.to(device), std.to(device)
    built = []
    for seed in range(k):
        torch.manual_seed(seed)
        built.append(models.build(spec).to(device))
    generators = [torch.Generator(device=device).manual_seed(seed) for seed in range(k)]
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
    started = time.perf_counter()
    if packed:
        train_pack(
            built,
            split,
            tiny_val,
            config,
            generators,
            mean,
            std,
            [f"m{i}" for i in range(k)],
            log=lambda _: None,
        )
    else:
        for model, generator in zip(built, generators):
            train(model, split, tiny_val, config, generator, mean, std, log=lambda _: None)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    memory = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else 0.0
    return config.epochs * len(labels) / (seconds / k), memory


def pack_table(specs, sizes, data, config, device) -> None:
    print(
        f"packed vs one at a time, {len(data[1])} images x {config.epochs} epochs, batch {config.batch_size}, "
        f"{describe_device(device)}; images/s per member (peak GiB)"
    )
    print(f"{'model':<28} {'K':>3} {'packed':>16} {'one at a time':>16} {'ratio':>6}")
    warm_up = (data[0][: 2 * config.batch_size], data[1][: 2 * config.batch_size], *data[2:])
    for spec in specs:
        name = f"{spec['arch']} x{spec.get('width_multiplier', 1)}"
        for packed in (True, False):  # first calls pay for kernel selection and allocation
            members_per_second(spec, 2, packed, *warm_up, config, device)
        for k in sizes:
            packed, packed_memory = members_per_second(spec, k, True, *data, config, device)
            alone, alone_memory = members_per_second(spec, k, False, *data, config, device)
            print(
                f"{name:<28} {k:>3} {packed:>9,.0f} ({packed_memory:4.1f}) {alone:>9,.0f} ({alone_memory:4.1f}) "
                f"{packed / alone:>5.2f}x",
                flush=True,
            )


# The default config's zoo architectures (config/config.yaml), one of each kind of network.
DEFAULT_ZOO_SPECS = {
    "myrtle x0.25": {"arch": "myrtle", "width_multiplier": 0.25},
    "myrtle x0.125": {"arch": "myrtle", "width_multiplier": 0.125},
    "myrtle x0.125 dgn": {
        "arch": "myrtle",
        "width_multiplier": 0.125,
        "gated": {"family": "dgn", "pools": "gated_max"},
    },
    "resnet20 x0.5": {"arch": "resnet20", "width_multiplier": 0.5},
    "cct x0.5": {"arch": "cct", "width_multiplier": 0.5, "depth": 2, "tokenizer_norm": True},
}


def _seconds_per_call(call, device, repeats: int = 50) -> float:
    call()
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(repeats):
        call()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - started) / repeats


def memory_format_table(data, config, device) -> None:
    """``train``'s images/s in channels-last against the default format, each model's first run
    a warm-up (kernel selection, torch's lazy imports)."""
    print(
        f"channels-last vs default memory format, {len(data[1])} images x {config.epochs} epochs, "
        f"batch {config.batch_size}, {data[0].shape[-1]} px, {describe_device(device)}; images/s"
    )
    x = torch.randn(config.batch_size, 32, data[0].shape[-1], data[0].shape[-1], device=device)
    seconds = {
        name: _seconds_per_call(lambda y=y: torch.nn.functional.max_pool2d(y, 2), device)
        for name, y in (("default", x), ("channels-last", x.contiguous(memory_format=torch.channels_last)))
    }
    print(
        f"a 2x2 max-pool of {tuple(x.shape)}: {1e3 * seconds['default']:.3f} ms in the default format, "
        f"{1e3 * seconds['channels-last']:.3f} ms in channels-last"
    )
    print(f"{'model':<20} {'default':>9} {'channels-last':>14} {'ratio':>6}")
    last = dataclasses.replace(config, channels_last=True)
    for name, spec in DEFAULT_ZOO_SPECS.items():
        ours(spec, *data, config, device)  # warm-up
        default, channels_last = ours(spec, *data, config, device), ours(spec, *data, last, device)
        print(
            f"{name:<20} {default:>9,.0f} {channels_last:>14,.0f} {channels_last / default:>5.2f}x",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", help="myrtle (default), or with --pack the four models of PACK_SPECS")
    parser.add_argument("--width-multiplier", type=float, default=0.25)
    parser.add_argument("--n", type=int, default=4000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--device", default="auto")
    parser.add_argument(
        "--pack",
        type=int,
        nargs="+",
        metavar="K",
        help="pack sizes to compare with one member at a time (all four models unless --arch is given)",
    )
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (CUDA only)")
    parser.add_argument(
        "--memory-format", action="store_true", help="channels-last vs default, the default config's models"
    )
    parser.add_argument("--image-size", type=int, default=32)
    args = parser.parse_args()
    device = resolve_device(args.device)
    spec = {"arch": args.arch or "myrtle", "width_multiplier": args.width_multiplier}
    config = TrainConfig(epochs=args.epochs, batch_size=args.batch_size, bf16=args.bf16)
    data = benchmark_data(args.n, image_size=args.image_size)
    if args.memory_format:
        memory_format_table(data, config, device)
        return
    if args.pack:
        pack_table(PACK_SPECS if args.arch is None else [spec], args.pack, data, config, device)
        return
    a = ours(spec, *data, config, device)
    b = baseline(spec, *data, config, device, args.workers)
    print(
        f"training {spec}, {args.n} images x {args.epochs} epochs, batch {args.batch_size}, "
        f"{describe_device(device)}, baseline with {args.workers} DataLoader workers"
    )
    print(ratio_line("training", a, b))


if __name__ == "__main__":
    main()
