"""Projected GPU wall time of a config's zoo: its members grouped by what sets their cost
(architecture, width, gated family, batch size), each group's training images counted from the
config, and each group's images/s measured on this device, one member at a time (the config's
own recipe, channels-last where it asks) and packed K at a time (zoo.pack_size), side by side.

Two steps, since the device that measures need not have Snakemake (which validates the config):

    python benchmarks/paper_scale.py plan config/paper.yaml work.json       # where the workflow is installed
    python benchmarks/paper_scale.py measure work.json --pack 4 16 [--bf16]  # on the GPU
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path


from common import benchmark_data, describe_device
from gpu_zoo import group_name
from train_throughput import members_per_second

from intertwine.workflow.settings import TrainConfig
from intertwine.utils import resolve_device

# Spec fields that change what a member computes but not what it costs to train.
COST_FREE = ("activation", "negative_slope", "residual_activation", "num_classes")
GATE_COST_FREE = ("regime", "value_input", "gate_perm", "features_from", "beta")


def cost_class(spec: dict, train: dict) -> str:
    spec = {k: v for k, v in spec.items() if k not in COST_FREE}
    if spec.get("gated"):
        spec["gated"] = {k: v for k, v in spec["gated"].items() if k not in GATE_COST_FREE}
    return json.dumps(
        {"spec": spec, "batch_size": train["batch_size"], "optimizer": train["optimizer"]}, sort_keys=True
    )


def plan(config_path: str, out: str) -> None:
    """Write the zoo's cost groups (spec, batch size, optimizer, members, training images)."""
    import yaml

    from intertwine.workflow.plan import Plan
    from intertwine.workflow.settings import validate_config

    config = yaml.safe_load(Path(config_path).read_text())
    validate_config(config)
    zoo = Plan(config)
    train_images = zoo.dataset_sizes()[0] - config["data"]["val_size"]
    groups: dict[str, dict] = defaultdict(lambda: {"variants": {}, "members": 0, "images": 0})
    for variant in zoo.variants:
        block = zoo.train_block(variant)
        group = groups[cost_class(zoo.spec(variant), block)]
        members = len(zoo.zoo_seeds(variant))
        images = members * block["epochs"] * train_images
        group["variants"][variant] = {"members": members, "images": images}
        group["members"] += members
        group["images"] += images
        group["channels_last"] = block["channels_last"]
    work = [json.loads(key) | value for key, value in groups.items()]
    work.sort(key=lambda g: -g["images"])
    Path(out).write_text(json.dumps({"config": config_path, "groups": work}, indent=1))
    total = sum(g["members"] for g in work)
    print(
        f"{config_path}: {total} members in {len(work)} cost groups, {sum(g['images'] for g in work):.2e} images"
    )


def measure(work_path: str, packs: list[int], n: int, bf16: bool, device_name: str) -> None:
    work = json.loads(Path(work_path).read_text())
    device = resolve_device(device_name)
    data = benchmark_data(n)
    warm = tuple(x[:256] for x in data[:2]) + data[2:]
    print(
        f"{work['config']}: the zoo's cost groups, {n} images x 1 epoch each, {describe_device(device)}, bf16 {bf16}"
    )
    print(
        f"{'group':<46} {'members':>7} {'images':>8}  {'alone':>7}"
        + "".join(f" {'K=' + str(k):>7}" for k in packs)
    )
    packs = sorted(packs)
    hours_alone, hours_best = 0.0, 0.0
    for group in work["groups"]:
        spec = group["spec"]
        alone_config = TrainConfig(
            epochs=1,
            batch_size=group["batch_size"],
            optimizer=group["optimizer"],
            bf16=bf16,
            channels_last=group["channels_last"],
        )
        packed_config = TrainConfig(
            epochs=1, batch_size=group["batch_size"], optimizer=group["optimizer"], bf16=bf16
        )
        members_per_second(spec, 1, False, *warm, alone_config, device)  # kernel selection, allocation
        alone = members_per_second(spec, 1, False, *data, alone_config, device)[0]
        largest = max(v["members"] for v in group["variants"].values())
        rates = {1: alone}
        for k in [k for k in packs if k <= largest]:
            members_per_second(spec, k, True, *warm, packed_config, device)
            rates[k] = members_per_second(spec, k, True, *data, packed_config, device)[0]
        hours_alone += group["images"] / alone / 3600
        # a pack holds members of one variant: each variant at its best K up to its members
        for variant in group["variants"].values():
            best = max(rate for k, rate in rates.items() if k <= variant["members"])
            hours_best += variant["images"] / best / 3600
        name = f"{group_name(group)} ({len(group['variants'])} var.)"
        print(
            f"{name:<46} {group['members']:>7} {group['images']:>8.1e}  {alone:>7,.0f}"
            + "".join(f" {rates[k]:>7,.0f}" if k in rates else f" {'-':>7}" for k in packs),
            flush=True,
        )
    print(
        f"images/s of all members together; projected zoo wall time on this device: {hours_alone:,.0f} h one "
        f"member at a time, {hours_best:,.0f} h at each variant's best K ('-': more than any variant's members)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    planning = commands.add_parser("plan", help="count the zoo's cost groups of a config (needs Snakemake)")
    planning.add_argument("config")
    planning.add_argument("out")
    measuring = commands.add_parser("measure", help="measure each group's images/s and project the wall time")
    measuring.add_argument("work")
    measuring.add_argument("--pack", type=int, nargs="+", default=[4, 16], metavar="K")
    measuring.add_argument("--n", type=int, default=4096, help="training images per measurement")
    measuring.add_argument("--bf16", action="store_true", help="bf16 autocast (CUDA only)")
    measuring.add_argument("--device", default="auto")
    args = parser.parse_args()
    if args.command == "plan":
        plan(args.config, args.out)
    else:
        measure(args.work, args.pack, args.n, args.bf16, args.device)


if __name__ == "__main__":
    sys.exit(main())
