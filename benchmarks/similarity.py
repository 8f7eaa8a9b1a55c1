"""Time of grelu_cka (max kernel in row blocks of batched matrix products) vs the max kernel computed
one row at a time, as the paper's released code does, on the same activations; or, with
--all-measures, the time of every measure of intertwine.similarity on one layer.

    python benchmarks/similarity.py [--n 2000] [--channels 32] [--size 16] [--threads 1]
    python benchmarks/similarity.py --all-measures [--n 10000] [--channels 32] [--size 16]

Default layer: 32 channels at 16x16, act2 of the default config's quarter-width Myrtle after its
2x2 max pool (CIFAR-10 sized inputs). The comparison defaults to N = 2000 -- a 64-channel 16x16
layer would be twice the work, and the per-row baseline alone then takes over 2 minutes on one
core -- and --all-measures to N = 10,000 (laplace_cka dominates there: O(N^2 C H W) without BLAS,
many minutes on a CPU). Each side of the comparison runs in a fresh process so that its peak
memory can be read: the process's high-water mark (ru_maxrss on CPU,
torch.cuda.max_memory_allocated on GPU) minus the memory in use once the activations exist.
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import time

import torch

from common import describe_device, ratio_line
from intertwine.similarity import (
    DEFAULT_MAX_BYTES,
    MEASURES,
    _channel_normalize,
    _max_kernel_blocks,
    grelu_cka,
    unbiased_hsic,
)
from intertwine.utils import resolve_device

MiB = 2**20


def activations(n: int, channels: int, size: int, dtype: torch.dtype, device: torch.device):
    """Two ReLU layers' activations on the same n inputs: X, and Y a noisy function of X.

    Made 256 samples at a time, so that the process's memory high-water mark afterwards is about
    X and Y themselves (contiguous NCHW, like a conv layer's output).
    """
    g = torch.Generator().manual_seed(0)
    mix = torch.randn(channels, channels, generator=g) / channels**0.5
    W = torch.randn(channels, channels, generator=g) / channels**0.5
    X = torch.empty(n, channels, size, size, dtype=dtype, device=device)
    Y = torch.empty_like(X)
    for start in range(0, n, 256):
        z = torch.randn(min(256, n - start), channels, size, size, generator=g)
        x = torch.einsum("nchw,cd->ndhw", z, mix).relu()
        y = (torch.einsum("nchw,cd->ndhw", x, W) + 0.5 * torch.randn(x.shape, generator=g)).relu()
        X[start : start + len(z)], Y[start : start + len(z)] = x, y
    return X, Y


def per_row_max_kernel(X: torch.Tensor) -> torch.Tensor:
    """Baseline: K[m] = max_c <x_mc, x_nc> for one sample m at a time (a matrix-vector product)."""
    Z = X.flatten(2)  # (N, C, H*W)
    K = torch.empty(len(Z), len(Z), dtype=Z.dtype, device=Z.device)
    for m in range(len(Z)):
        K[m] = torch.einsum("cp,ncp->nc", Z[m], Z).amax(1)
    return K


def baseline_cka(X: torch.Tensor, Y: torch.Tensor) -> float:
    """The same CKA with the per-row kernel; normalisation and HSIC are intertwine's, so only the
    kernel differs."""
    K = per_row_max_kernel(_channel_normalize(X.flatten(2), center=True))
    L = per_row_max_kernel(_channel_normalize(Y.flatten(2), center=True))
    return unbiased_hsic(K, L) / (unbiased_hsic(K, K) * unbiased_hsic(L, L)) ** 0.5


def _peak_marker(device: torch.device) -> int:
    """Memory in use now: current RSS (CPU) or allocated bytes (GPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device)
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def _peak_growth(device: torch.device, marker: int) -> int:
    """High-water mark since the marker, minus the marker: ru_maxrss (CPU) or max allocated (GPU)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) - marker
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - marker  # Linux: KiB


def timed_in_process(
    method: str, n: int, channels: int, size: int, dtype: str, device: str, threads: int
) -> tuple[float, float, int]:
    """(seconds, CKA, peak memory growth in bytes) of one method; meant for a fresh process."""
    torch.set_num_threads(threads)
    device = resolve_device(device)
    X, Y = activations(n, channels, size, getattr(torch, dtype), device)
    marker = _peak_marker(device)
    started = time.perf_counter()
    value = grelu_cka(X, Y) if method == "blocked" else baseline_cka(X, Y)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started, value, _peak_growth(device, marker)


def compare(args, device: torch.device) -> None:
    context = multiprocessing.get_context("spawn")
    shape = (args.n, args.channels, args.size, args.dtype, args.device, torch.get_num_threads())
    print(
        f"grelu_cka, N={args.n}, {args.channels} channels {args.size}x{args.size}, {args.dtype}, "
        f"{describe_device(device)}",
        flush=True,
    )
    results = {}
    for method in ("blocked", "per-row"):
        with context.Pool(1) as pool:
            seconds, value, peak = results[method] = pool.apply(timed_in_process, (method, *shape))
        print(
            f"  {method:8s} {seconds:7.2f} s   CKA {value:.9f}   peak memory growth {peak / MiB:.0f} MiB",
            flush=True,
        )
    (t_ours, v_ours, _), (t_base, v_base, _) = results["blocked"], results["per-row"]
    print(
        ratio_line("max-kernel CKA", args.n / t_ours, args.n / t_base, unit="samples/s")
        + f"; |CKA difference| {abs(v_ours - v_base):.1e}"
    )
    itemsize = torch.empty(0, dtype=getattr(torch, args.dtype)).element_size()
    rows, chans = _max_kernel_blocks(args.n, args.channels, itemsize, DEFAULT_MAX_BYTES)
    print(
        f"  largest intermediate (analytic): blocked ({chans}, {rows}, {args.n}) block "
        f"{chans * rows * args.n * itemsize / MiB:.1f} MiB, per-row ({args.n}, {args.channels}) "
        f"row {args.n * args.channels * itemsize / MiB:.2f} MiB; both hold "
        f"normalised copies of X and Y and two {args.n}x{args.n} kernels "
        f"({2 * args.n**2 * itemsize / MiB:.0f} MiB)"
    )


def all_measures(args, device: torch.device) -> None:
    X, Y = activations(args.n, args.channels, args.size, getattr(torch, args.dtype), device)
    print(
        f"all measures, N={args.n}, {args.channels} channels {args.size}x{args.size}, "
        f"{args.dtype}, {describe_device(device)}"
    )
    for name in args.measures:
        measure = MEASURES[name]
        measure(X[:16], Y[:16])  # warm-up: first-call costs (scipy import, thread pools) not timed
        started = time.perf_counter()
        value = measure(X, Y)
        if device.type == "cuda":
            torch.cuda.synchronize()
        print(f"  {name:31s} {time.perf_counter() - started:8.2f} s   value {value:.6f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--all-measures",
        action="store_true",
        help="time every measure instead of comparing grelu_cka with the baseline",
    )
    parser.add_argument(
        "--measures",
        nargs="+",
        default=list(MEASURES),
        choices=list(MEASURES),
        help="with --all-measures: which to time (laplace_cka takes ~30 min at N=10000 on a CPU)",
    )
    parser.add_argument("--n", type=int, help="samples (default 2000; 10000 with --all-measures)")
    parser.add_argument("--channels", type=int, help="channels (default 32)")
    parser.add_argument("--size", type=int, help="height = width (default 16)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    defaults = (10000, 32, 16) if args.all_measures else (2000, 32, 16)
    args.n, args.channels, args.size = (
        v if v is not None else d for v, d in zip((args.n, args.channels, args.size), defaults)
    )
    device = resolve_device(args.device)
    if args.all_measures:
        all_measures(args, device)
    else:
        compare(args, device)


if __name__ == "__main__":
    main()
