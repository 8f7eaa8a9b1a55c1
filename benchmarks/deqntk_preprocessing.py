"""What `deqntk.preprocessing` does to the DEQ-NTK's kernel regression on a cached data set.

    .venv/bin/python benchmarks/deqntk_preprocessing.py --data results/data/cifar10 \
        --n-train 2000 --n-test 1000

For each preprocessing (raw, centred, standardised) and each of the paper's three variance
settings: the test accuracy of ridge-free kernel regression with the DEQ-NTK on the first n_train
images of one seeded permutation of the training pool (train and val splits, as the stage draws
them) and the first n_test test images; the mean off-diagonal correlation of the unit rows, and the
fixed-point iterations. `--data` is a data directory written by the workflow's data stage
(`intertwine prepare-data`; CIFAR-10 from `data.cifar10.root`).
"""

from __future__ import annotations

import argparse
import time

import torch

from intertwine.data import channel_stats, load_split
from intertwine.kernels import deq, deq_regression
from intertwine.workflow.settings import variances_name

SETTINGS = [(0.25, 0.25, 0.5), (0.6, 0.4, 0.0), (0.8, 0.2, 0.0)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a data directory of the workflow's data stage")
    parser.add_argument("--n-train", type=int, default=2000)
    parser.add_argument("--n-test", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    train, val, test = (load_split(args.data, s) for s in ("train", "val", "test"))
    pool_images = torch.cat([train.images, val.images])
    pool_labels = torch.cat([train.labels, val.labels])
    order = deq_regression.draw(args.n_train, len(pool_images), torch.Generator().manual_seed(args.seed))
    mean, std = channel_stats(args.data)
    classes = int(max(pool_labels.max(), test.labels.max())) + 1
    y_train, y_test = pool_labels[order], test.labels[: args.n_test]
    print(f"{args.data}: {args.n_train} training / {args.n_test} test images, {classes} classes")
    print("| preprocessing | mean correlation | " + " | ".join(variances_name(v) for v in SETTINGS) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in SETTINGS) + " |")
    for choice in deq_regression.PREPROCESSING:
        x_train = deq_regression.unit_rows(pool_images[order], choice, mean, std)
        x_test = deq_regression.unit_rows(test.images[: args.n_test], choice, mean, std)
        inner = x_train @ x_train.T
        off = inner[~torch.eye(len(inner), dtype=torch.bool)]
        cells = []
        for w, u, b in SETTINGS:
            started = time.perf_counter()
            K = deq.deq_ntk(x_train, sigma_w2=w, sigma_u2=u, sigma_b2=b)
            K_test = deq.deq_ntk(x_test, x_train, sigma_w2=w, sigma_u2=u, sigma_b2=b)
            acc = deq_regression.regression_accuracy(K.gram, y_train, K_test.gram, y_test, classes)
            cells.append(
                f"{100 * acc:.2f} % ({max(K.iterations, K_test.iterations)} it, "
                f"{time.perf_counter() - started:.0f} s)"
            )
        print(f"| {choice} | {float(off.mean()):.2f} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
