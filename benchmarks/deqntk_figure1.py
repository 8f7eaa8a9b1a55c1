"""The paper's Figure 1 panels at a few depths, with and without the finite-depth kernels'
regulariser Theta(x, x) / n, on a cached data set.

    .venv/bin/python benchmarks/deqntk_figure1.py --data results/data/cifar10

Per draw (1,000 training images of the pool and 100 test images, each draw its own seed) and per
panel (sigma_w2, sigma_b2): the test accuracy (%) of the depth-L NTK at (sigma_w2, 0, sigma_b2),
of the DEQ-NTK's finite-depth iteration and of the DEQ-NTK at (sigma_w2, sigma_b2 - 0.1, 0.1)
(`deq_regression.depth_sweep`), once with `frozen_ridge` 1 (the NTK's only) and once with 0; then
the mean over draws, a row per panel and finite-depth kernel (the DEQ-NTK's column the same in both). `--data` is a data directory written by
the workflow's data stage.
"""

from __future__ import annotations

import argparse

import torch

from intertwine.data import load_split
from intertwine.kernels import deq_regression

PANELS = [[0.25, 0.75], [0.6, 0.4], [0.8, 0.2]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a data directory of the workflow's data stage")
    parser.add_argument("--draws", type=int, default=3)
    parser.add_argument("--n-train", type=int, default=1000)
    parser.add_argument("--n-test", type=int, default=100)
    parser.add_argument("--depths", type=int, nargs="+", default=[1, 4, 16, 32])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    train, val, test = (load_split(args.data, s) for s in ("train", "val", "test"))
    pool_x, pool_y = torch.cat([train.images, val.images]), torch.cat([train.labels, val.labels])
    classes = int(max(pool_y.max(), test.labels.max())) + 1
    panels = deq_regression.panel_curves(PANELS, 0.1)
    columns = [str(d) for d in args.depths] + [deq_regression.DEQ]
    print(f"{args.data}: {args.n_train} training / {args.n_test} test images, {args.draws} draws")
    print(
        "| frozen_ridge | panel | kernel | "
        + " | ".join(f"L = {c}" if c != "deq" else "DEQ-NTK" for c in columns)
        + " |"
    )
    print("| --- | --- | --- | " + " | ".join("---" for _ in columns) + " |")
    for scale in (1.0, 0.0):
        accuracy: dict[tuple[str, str], list[float]] = {}
        for draw in range(args.draws):
            generator = torch.Generator().manual_seed(100 + draw)
            tr = deq_regression.draw(args.n_train, len(pool_x), generator)
            te = deq_regression.draw(args.n_test, len(test.images), generator)
            rows = deq_regression.depth_sweep(
                deq_regression.unit_rows(pool_x[tr]),
                pool_y[tr],
                deq_regression.unit_rows(test.images[te]),
                test.labels[te],
                classes,
                args.depths,
                [],
                None,
                panels=panels,
                frozen_scale=scale,
            )
            for r in rows:
                # the NTK has no input injection, the DEQ-NTK's iteration (and fixed point) has
                kernel = "iterated DEQ-NTK" if r["sigma_u2"] > 0 else "NTK"
                key = (
                    (r["panel"], r["depth"])
                    if r["depth"] == deq_regression.DEQ
                    else (r["panel"], kernel, r["depth"])
                )
                accuracy.setdefault(key, []).append(100 * r["test_acc"])
        for name, _, _ in panels:
            for kernel in ("NTK", "iterated DEQ-NTK"):
                keys = [(name, c) if c == deq_regression.DEQ else (name, kernel, c) for c in columns]
                cells = [sum(accuracy[k]) / len(accuracy[k]) for k in keys]
                print(
                    f"| {scale:g} | {name} | {kernel} | " + " | ".join(f"{v:.1f}" for v in cells) + " |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
