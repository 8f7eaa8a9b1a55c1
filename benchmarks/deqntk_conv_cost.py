"""What the convolutional DEQ-NTK (`kernels.deq.conv_deq_ntk`) costs per image pair.

    .venv/bin/python benchmarks/deqntk_conv_cost.py --size 8 --images 12 --threads 1

Times the symmetric Gram of `--images` random 3-channel images of `--size` x `--size` pixels
(each pixel's channel vector a unit vector, correlated like centred natural images: a shared
part and a per-image part) at each of the paper's CIFAR-10 variance settings and each readout,
and prints the seconds per image pair (the Gram's upper triangle, its diagonal included) and the
iterations. A pair holds (H W)^2 position pairs, so the cost grows as (H W)^2 times the
iterations: 16 times from 8 x 8 to 16 x 16, 256 times from 8 x 8 to 32 x 32.
"""

from __future__ import annotations

import argparse
import time

import torch

from intertwine.kernels import deq
from intertwine.workflow.settings import variances_name

SETTINGS = [(0.25, 0.25, 0.5), (0.6, 0.4, 0.0), (0.8, 0.2, 0.0)]


def images(n: int, size: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    shared = torch.randn(1, 3, size, size, generator=generator, dtype=torch.float64)
    x = shared + torch.randn(n, 3, size, size, generator=generator, dtype=torch.float64)
    return x / x.norm(dim=1, keepdim=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=8, help="image height and width (pixels)")
    parser.add_argument("--images", type=int, default=12)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--readouts", nargs="+", default=["gap", "trace"])
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    x = images(args.images, args.size, args.seed)
    pairs = args.images * (args.images + 1) // 2
    print(f"{args.images} images of 3 x {args.size} x {args.size}, {pairs} pairs, {args.threads} thread(s)")
    for w, u, b in SETTINGS:
        for readout in args.readouts:
            started = time.perf_counter()
            result = deq.conv_deq_ntk(x, sigma_w2=w, sigma_u2=u, sigma_b2=b, pooling=readout)
            seconds = time.perf_counter() - started
            print(
                f"{variances_name((w, u, b))} {readout}: {seconds / pairs:.3g} s per pair, "
                f"{result.iterations} iterations (Sigma and Theta together)"
            )


if __name__ == "__main__":
    main()
