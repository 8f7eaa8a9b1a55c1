"""The DEQ-NTK's learning curve on a cached data set, up to the paper's full CIFAR-10 regression.

    .venv/bin/python benchmarks/deqntk_learning_curve.py --data results/data/cifar10 \
        --sizes 1000 2000 5000 10000 20000 50000 --n-test 10000 --device cuda --out curve.csv
    .venv/bin/python benchmarks/deqntk_learning_curve.py --plot curve.csv --figure curve.png

For each input preprocessing (`deqntk.preprocessing`) and each of the paper's three variance
settings: ridge-free kernel regression with the fully connected DEQ-NTK on the first n training
images of one seeded permutation of the training pool (train and val splits, drawn as the stage
draws them: the sizes are nested), tested on the first `--n-test` test images. The Gram of the
largest size is computed once per setting (float64, in blocks of rows) and the smaller sizes solve
its leading blocks. Each row records the solver (Cholesky, or LU where the kernel is not
numerically positive definite), the solve's relative residual ||K w - T|| / ||T||, the fixed-point
iterations and the seconds. `--data` is a data directory written by the workflow's data stage
(`intertwine prepare-data`; CIFAR-10 from `data.cifar10.root`). Memory: the largest Gram, its
Cholesky factor and the test Gram, in the chosen dtype (50,000 training and 10,000 test images in
float64: 44 GB, a GPU's work; 20,000: 8 GB).
"""

from __future__ import annotations

import argparse
import csv
import time

import torch

from intertwine.data import channel_stats, load_split
from intertwine.kernels import deq, deq_regression
from intertwine.workflow.paper import reported_deqntk

SETTINGS = [(0.25, 0.25, 0.5), (0.6, 0.4, 0.0), (0.8, 0.2, 0.0)]
COLUMNS = [
    "preprocessing", "sigma_w2", "sigma_u2", "sigma_b2", "n_train", "n_test", "test_acc", "paper_acc",
    "solver", "residual", "iterations", "dtype", "device", "gram_seconds", "solve_seconds",
]  # fmt: skip


def learning_curve(args) -> list[dict]:
    torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    train, val, test = (load_split(args.data, s) for s in ("train", "val", "test"))
    pool_images = torch.cat([train.images, val.images])
    pool_labels = torch.cat([train.labels, val.labels])
    sizes = sorted(args.sizes)
    if sizes[-1] > len(pool_images) or args.n_test > len(test.images):
        raise SystemExit(
            f"--sizes up to {sizes[-1]} and --n-test {args.n_test}: the data has {len(pool_images)} "
            f"training and {len(test.images)} test images"
        )
    order = deq_regression.draw(sizes[-1], len(pool_images), torch.Generator().manual_seed(args.seed))
    mean, std = channel_stats(args.data)
    classes = int(max(pool_labels.max(), test.labels.max())) + 1
    y_train, y_test = pool_labels[order], test.labels[: args.n_test]
    rows = []
    for choice in args.preprocessing:
        x_train = deq_regression.unit_rows(pool_images[order], choice, mean, std).to(args.device, dtype)
        x_test = deq_regression.unit_rows(test.images[: args.n_test], choice, mean, std).to(
            args.device, dtype
        )
        for w, u, b in SETTINGS:
            started = time.perf_counter()
            K = deq.deq_ntk(x_train, sigma_w2=w, sigma_u2=u, sigma_b2=b, block_rows=args.block_rows)
            K_test = deq.deq_ntk(
                x_test, x_train, sigma_w2=w, sigma_u2=u, sigma_b2=b, block_rows=args.block_rows
            )
            _synchronize(args.device)
            gram_seconds = time.perf_counter() - started
            for n in sizes:
                started = time.perf_counter()
                fit = deq.kernel_regression(
                    K.gram[:n, :n], y_train[:n], K_test.gram[:, :n], num_classes=classes
                )
                accuracy = float((fit.predictions.cpu() == y_test).double().mean())
                _synchronize(args.device)
                paper = reported_deqntk(args.dataset, (w, u, b), n, args.n_test)
                row = dict(
                    preprocessing=choice, sigma_w2=w, sigma_u2=u, sigma_b2=b, n_train=n, n_test=args.n_test,
                    test_acc=accuracy, paper_acc=None if paper is None else paper / 100, solver=fit.solver, residual=fit.residual,
                    iterations=max(K.iterations, K_test.iterations), dtype=args.dtype,
                    device=_device_name(args.device), gram_seconds=round(gram_seconds, 1),
                    solve_seconds=round(time.perf_counter() - started, 1),
                )  # fmt: skip
                print(
                    f"{choice} ({w:g},{u:g},{b:g}) n={n}: {100 * accuracy:.2f} % ({fit.solver}, residual "
                    f"{fit.residual:.1e}, Gram {gram_seconds:.0f} s, solve {row['solve_seconds']:.0f} s)",
                    flush=True,
                )
                rows.append(row)
            del K, K_test
    return rows


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _device_name(device: str) -> str:
    return torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"


def plot(csv_path: str, figure_path: str) -> None:
    """Accuracy against training images per setting, one panel per preprocessing, with the paper's
    accuracies at 50,000 marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(csv_path) as f:
        rows = list(csv.DictReader(f))
    choices = list(dict.fromkeys(r["preprocessing"] for r in rows))
    fig, axes = plt.subplots(1, len(choices), figsize=(5.2 * len(choices), 4), sharey=True, squeeze=False)
    for ax, choice in zip(axes[0], choices):
        for (w, u, b), colour in zip(SETTINGS, ("C0", "C1", "C2")):
            mine = [
                r for r in rows
                if r["preprocessing"] == choice and (float(r["sigma_w2"]), float(r["sigma_u2"])) == (w, u)
            ]  # fmt: skip
            n = [int(r["n_train"]) for r in mine]
            ax.plot(n, [100 * float(r["test_acc"]) for r in mine], "o-", color=colour,
                    label=f"ours ({w:g}, {u:g}, {b:g})")  # fmt: skip
            paper = reported_deqntk("cifar10", (w, u, b))
            ax.plot([50_000], [paper], "*", color=colour, markersize=13, markeredgecolor="black",
                    label=f"paper {paper:.2f} %")  # fmt: skip
        ax.set_xscale("log")
        ax.set_xlabel("training images")
        ax.set_title(f"inputs: {choice}, then unit norm")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"test accuracy, % ({rows[0]['n_test']} test images)")
    axes[0][-1].legend(fontsize=8, loc="lower right")
    fig.suptitle("DEQ-NTK kernel regression on CIFAR-10 (ridge-free); stars: Feng & Kolter's table")
    fig.tight_layout()
    fig.savefig(figure_path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a data directory of the workflow's data stage")
    parser.add_argument(
        "--dataset", default="cifar10", help="whose paper accuracies apply (paper.py's names)"
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 5000])
    parser.add_argument("--n-test", type=int, default=10000)
    parser.add_argument(
        "--preprocessing", nargs="+", default=["raw", "centred"], choices=deq_regression.PREPROCESSING
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    parser.add_argument("--block-rows", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", help="the CSV to write (one row per preprocessing, setting and size)")
    parser.add_argument("--plot", metavar="CSV", help="draw the figure of a CSV written before, and stop")
    parser.add_argument("--figure", default="deqntk_learning_curve.png")
    args = parser.parse_args()
    if args.plot:
        plot(args.plot, args.figure)
        return
    if not args.data or not args.out:
        parser.error("--data and --out are needed (or --plot CSV)")
    rows = learning_curve(args)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


if __name__ == "__main__":
    main()
