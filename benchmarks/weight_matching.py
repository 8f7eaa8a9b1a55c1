"""Seconds of weight matching (intertwine.network_alignment.weight_matching) between two
independently initialised networks, over permutations and over G_ReLU, against the plain baseline
of one forward pass of the same model on a batch of 500 images (a yardstick of the machine):

    python benchmarks/weight_matching.py [--repeats 3]

Measured (2 CPU cores, AMD EPYC, float64, while a `make run` shared them): ResNet20 x1 1.6 s
(permutations) and 2.2 s (G_ReLU), Myrtle x0.5 1.0 and 2.1 s, ResNet18 x0.25 2.7 and 3.8 s.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch

from common import describe_device
from intertwine import models
from intertwine.network_alignment import weight_matching

SPECS = {
    "resnet20 x1": {"arch": "resnet20"},
    "myrtle x0.5": {"arch": "myrtle", "width_multiplier": 0.5},
    "resnet18 x0.25": {"arch": "resnet18", "width_multiplier": 0.25},
}


def member(spec: dict, seed: int) -> torch.nn.Module:
    """A network with random batch norms (at initialisation every channel's is alike)."""
    torch.manual_seed(seed)
    model = models.build(spec).double().eval()
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                module.weight.uniform_(0.5, 1.5)
                module.bias.normal_(0.0, 0.3)
    return model


def seconds(run, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(f"weight matching on {describe_device(torch.device('cpu'))}, best of {args.repeats}")
    x = torch.randn(500, 3, 32, 32, dtype=torch.float64)
    for name, spec in SPECS.items():
        f, g = member(spec, 0), member(spec, 1)
        with torch.no_grad():
            forward = seconds(lambda: f(x), args.repeats)
        line = f"{name:<16} forward of 500 images {forward:6.2f} s"
        for group in ("permutation", "grelu"):
            taken = seconds(lambda: weight_matching(f, copy.deepcopy(g), group), args.repeats)
            line += f" | {group} {taken:6.2f} s ({taken / forward:4.1f}x the forward pass)"
        print(line, flush=True)


if __name__ == "__main__":
    main()
