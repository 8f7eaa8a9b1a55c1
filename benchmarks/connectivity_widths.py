"""Linear mode connectivity against width on `shapes`: ResNet20 members trained at each width, then
the connectivity stage's job (intertwine.workflow.stages.connectivity.job) on member-disjoint pairs, as in
docs/results.md (Linear mode connectivity). Meant for a GPU (weight matching runs on the CPU):

    python benchmarks/connectivity_widths.py --epochs 30 --pairs 2 --widths 1 4 --out lmc.parquet

Prints each member's test accuracy and each pair's barriers, then the mean barrier per width,
method and split; writes every row of the job's table to --out.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pandas as pd

from intertwine.data import build_dataset, write_dataset
from intertwine.workflow.job import Job
from intertwine.workflow.settings import checked_block
from intertwine.workflow.stages.connectivity.job import connectivity_pair
from intertwine.workflow.stages.zoo.job import train_member
from intertwine.workflow.zoo import save_checkpoint

METHODS = ["unaligned", "weight_permutation", "weight_grelu", "activation_permutation"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--widths", type=float, nargs="+", default=[1, 2, 4])
    parser.add_argument("--train-size", type=int, default=9500, help="shapes images, 500 of them validation")
    parser.add_argument("--images", type=int, default=2000, help="training and test images along the line")
    parser.add_argument("--lambdas", type=int, default=11)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", default="connectivity_widths.parquet")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="connectivity_widths_"))
    block = {
        "dataset": "shapes",
        "val_size": 500,
        "shapes": {"train_size": args.train_size, "test_size": args.images, "image_size": 32},
    }
    splits, meta = build_dataset(checked_block(block, "data"), seed=0)
    write_dataset(root / "shapes", splits, meta)
    job = Job(args.device, root / "shapes", 0, lambda message: print(message, flush=True))
    training = {"epochs": args.epochs, "batch_size": 128, "lr": 0.004}
    connectivity = {
        "methods": METHODS,
        "lambdas": args.lambdas,
        "train_images": args.images,
        "test_images": args.images,
    }
    tables = []
    for width in args.widths:
        variant = f"resnet20_w{width:g}"
        spec = {"arch": "resnet20", "width_multiplier": width}
        paths = []
        for seed in range(2 * args.pairs):
            started = time.perf_counter()
            path = root / variant / f"seed{seed}.pt"
            path.parent.mkdir(parents=True, exist_ok=True)
            checkpoint, _ = train_member(job, variant, seed, spec, training, path)
            save_checkpoint(checkpoint, path)
            print(
                f"{variant} seed {seed}: test accuracy {checkpoint['test_acc']:.3f} "
                f"({time.perf_counter() - started:.0f} s)",
                flush=True,
            )
            paths.append(str(path))
        for pair in range(args.pairs):
            tables.append(connectivity_pair(job, paths[2 * pair], paths[2 * pair + 1], pair, connectivity))
            pd.concat(tables).to_parquet(args.out)
    table = pd.concat(tables)
    curves = table.groupby(["width_multiplier", "pair", "method", "split"])[
        ["barrier", "accuracy_barrier"]
    ].first()
    print(curves.groupby(["width_multiplier", "method", "split"]).mean().round(3).to_string())


if __name__ == "__main__":
    main()
