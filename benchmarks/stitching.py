"""Steps/s of G_ReLU stitching (projected gradient descent: ReLU + Sinkhorn after every step) vs
full stitching on the same pair of models, site and data, through intertwine.stitching.fit; and
of the SoftSort parameterisation of the same layer (the paper's D.2.2 found it >10x slower than
the Birkhoff layer).

    python benchmarks/stitching.py [--arch myrtle] [--width-multiplier 0.25] [--site act2] [--n 2000]

Also times the stitched network with its frozen front run with autograd (a plain nn.Sequential
of f's and g's modules, everything requiring grad except that only the layer is optimised),
the usual way of writing it, against ours (front in inference, no graph); and G_ReLU stitching
with both members in channels-last, as a workflow job loads them (`Job.model`), against the
default memory format.
"""

from __future__ import annotations

import argparse
import copy
import time

import torch

from common import benchmark_data, describe_device
from intertwine import models
from intertwine.data import Split
from intertwine.workflow.settings import StitchConfig
from intertwine.stitching import build_layer, fit, stitch
from intertwine.utils import resolve_device


def steps_per_second(method, f, g, site, channels, split, mean, std, config, device) -> float:
    layer = build_layer(method, channels, torch.Generator().manual_seed(0)).to(device)
    stitched = stitch(f, copy.deepcopy(g), site, layer)
    fitted = fit(
        stitched, split, config, torch.Generator(device=device).manual_seed(0), mean, std, log=lambda _: None
    )
    return config.epochs * -(-len(split) // config.batch_size) / fitted.seconds


class FrontWithGraph(torch.nn.Module):
    """The baseline stitched network: f's front runs with autograd like any module."""

    def __init__(self, f, g, site, layer):
        super().__init__()
        self.f, self.g, self.site, self.layer = f, g, site, layer

    def forward(self, x):
        state = models.forward_to(self.f, x, self.site)
        return models.forward_from(self.g, (self.layer(state[0]), *state[1:]), self.site)


def frozen_front_speedup(f, g, site, channels, split, mean, std, config, device) -> tuple[float, float]:
    ours_model = stitch(f, copy.deepcopy(g), site, build_layer("full", channels).to(device))
    f_graph, g_graph = copy.deepcopy(f).requires_grad_(True), copy.deepcopy(g).requires_grad_(True)
    baseline = FrontWithGraph(f_graph.eval(), g_graph, site, build_layer("full", channels).to(device))
    rates = []
    for model in (ours_model, baseline):
        layer = model.bridge if model is ours_model else model.layer
        optimizer = torch.optim.SGD(layer.parameters(), lr=config.lr)
        x = ((split.images[: config.batch_size].float() / 255) - mean.view(1, -1, 1, 1)) / std.view(
            1, -1, 1, 1
        )
        y = split.labels[: config.batch_size]
        steps = 30
        for warm in (True, False):
            started = time.perf_counter()
            for _ in range(3 if warm else steps):
                loss = torch.nn.functional.cross_entropy(model(x), y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            if device.type == "cuda":
                torch.cuda.synchronize()
        rates.append(steps / (time.perf_counter() - started))
    return rates[0], rates[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="myrtle")
    parser.add_argument("--width-multiplier", type=float, default=0.25)
    parser.add_argument("--site", default="act2")
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()
    device = resolve_device(args.device)
    spec = {"arch": args.arch, "width_multiplier": args.width_multiplier}
    torch.manual_seed(0)
    f, g = models.build(spec).to(device), models.build(spec).to(device)
    channels = {s.name: s.channels for s in models.sites(f)}[args.site]
    images, labels, mean, std = benchmark_data(args.n)
    split = Split(images, labels).to(device)
    mean, std = mean.to(device), std.to(device)
    config = StitchConfig(epochs=1, batch_size=args.batch_size)
    full = steps_per_second("full", f, g, args.site, channels, split, mean, std, config, device)
    grelu = steps_per_second("grelu", f, g, args.site, channels, split, mean, std, config, device)
    softsort = steps_per_second("softsort", f, g, args.site, channels, split, mean, std, config, device)
    print(
        f"stitching {spec} at {args.site} ({channels} channels), {args.n} images, batch "
        f"{args.batch_size}, {describe_device(device)}"
    )
    print(
        f"full {full:.1f} steps/s, G_ReLU {grelu:.1f} steps/s: G_ReLU costs {full / grelu:.2f}x "
        "full stitching per step"
    )
    print(
        f"SoftSort {softsort:.1f} steps/s: the Birkhoff G_ReLU layer is {grelu / softsort:.2f}x faster per step"
    )
    f_last, g_last = (copy.deepcopy(m).to(memory_format=torch.channels_last) for m in (f, g))
    grelu_last = steps_per_second(
        "grelu", f_last, g_last, args.site, channels, split, mean, std, config, device
    )
    print(
        f"members in channels-last {grelu_last:.1f} steps/s vs the default format {grelu:.1f} steps/s: "
        f"{grelu_last / grelu:.2f}x"
    )
    ours, baseline = frozen_front_speedup(f, g, args.site, channels, split, mean, std, config, device)
    print(
        f"frozen front without autograd {ours:.1f} steps/s vs with autograd {baseline:.1f} steps/s: "
        f"{ours / baseline:.2f}x"
    )


if __name__ == "__main__":
    main()
