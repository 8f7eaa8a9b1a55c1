"""Every measure of intertwine.measures beside a straightforward implementation of the same
quantity, timed side by side in one process on the same activations; then the two max-kernel
paths (with their peak memory, each in a fresh process); then many layers at once
(``pairwise``) against a loop of per-pair calls.

    python benchmarks/similarity.py [--section all|measures|max_kernel|pairwise]
        [--n 500 2000 5000] [--channels 64 256] [--size 4] [--measures linear_cka ...]
        [--dtype float32] [--device auto] [--threads T] [--repeats 3]
        [--skip-baseline-above 10] [--pairwise-n 2000]

Table columns: ``ours s`` and ``base s`` are the minimum wall time over ``--repeats`` runs (a
function whose first run took over 2 s is run once), ``ratio`` is baseline time / ours, ``|diff|``
the absolute difference of the two values. Before timing, each function is called once on the
first 16 samples (first-call costs: scipy imports, thread pools, CUDA kernels).

Grid: every N in ``--n`` (ascending), every width in ``--channels``, 2-D features (N, C) and 4-D
features (N, C, H, W) with H = W = ``--size``. A baseline is not run -- "skipped (baseline > Xs
at N=...)" -- when the same measure, shape and width at a smaller N already took more than
``--skip-baseline-above`` seconds; nothing is extrapolated. With the defaults the whole run takes
under ~20 minutes on 2 CPU cores.

The baselines below are written from the textbook formulas with plain torch / numpy / scipy: no
intertwine code is used beyond making the activations. Their N x N kernels are formed in full and
the unbiased HSIC is evaluated by Song et al.'s formula in float64.

Peak memory (max-kernel section): each path runs in a fresh process; growth = the process's
high-water mark (ru_maxrss on CPU, torch.cuda.max_memory_allocated on GPU) minus the memory in
use once the activations exist.
"""

from __future__ import annotations

import argparse
import inspect
import math
import multiprocessing
import resource
import time
from collections.abc import Callable
from functools import partial

import numpy as np
import scipy.linalg
import torch
from common import describe_device, ratio_line
from scipy.optimize import linear_sum_assignment

from intertwine import measures
from intertwine.utils import resolve_device

MiB = 2**20
WARMUP = 16
RERUN_BELOW_S = 2.0  # a function whose first timed run took longer is not repeated


def activations(
    n: int,
    channels: int,
    size: int,
    dtype: torch.dtype,
    device: torch.device,
    seed: int = 0,
):
    """Two ReLU layers' activations on the same n inputs: X, and Y a noisy function of X.

    Shape (n, channels, size, size), or (n, channels) when size is 0. Made 256 samples at a time,
    so that the process's memory high-water mark afterwards is about X and Y themselves
    (contiguous NCHW, like a conv layer's output).
    """
    g = torch.Generator().manual_seed(seed)
    side = max(size, 1)
    mix = torch.randn(channels, channels, generator=g) / channels**0.5
    W = torch.randn(channels, channels, generator=g) / channels**0.5
    X = torch.empty(n, channels, side, side, dtype=dtype, device=device)
    Y = torch.empty_like(X)
    for start in range(0, n, 256):
        z = torch.randn(min(256, n - start), channels, side, side, generator=g)
        x = torch.einsum("nchw,cd->ndhw", z, mix).relu()
        y = (torch.einsum("nchw,cd->ndhw", x, W) + 0.5 * torch.randn(x.shape, generator=g)).relu()
        X[start : start + len(z)], Y[start : start + len(z)] = x, y
    if size == 0:
        return X.reshape(n, channels), Y.reshape(n, channels)
    return X, Y


def shape_name(size: int) -> str:
    return "2-D" if size == 0 else f"{size}x{size}"


# ---------------------------------------------------------------------------
# Straightforward baselines
# ---------------------------------------------------------------------------


def hsic1(K: torch.Tensor, L: torch.Tensor) -> float:
    """Unbiased HSIC_1 by the textbook formula (Song et al. 2012), in float64: with K~, L~ the
    kernels with zeroed diagonals, [tr(K~L~) + 1'K~1 1'L~1/((n-1)(n-2)) - 2/(n-2) 1'K~L~1]/(n(n-3))."""
    n = K.shape[0]
    K = K.to(torch.float64, copy=True).fill_diagonal_(0)
    L = L.to(torch.float64, copy=True).fill_diagonal_(0)
    trace = (K * L).sum()  # tr(K~ L~), K~ and L~ symmetric
    ones_k, ones_l = K.sum(1), L.sum(1)  # K~ 1, L~ 1
    value = (
        trace + ones_k.sum() * ones_l.sum() / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * torch.dot(ones_k, ones_l)
    )
    return float(value) / (n * (n - 3))


def cka(K: torch.Tensor, L: torch.Tensor) -> float:
    """CKA = HSIC(K, L) / sqrt(HSIC(K, K) HSIC(L, L)) with the textbook unbiased HSIC_1."""
    return hsic1(K, L) / math.sqrt(hsic1(K, K) * hsic1(L, L))


def flat(X: torch.Tensor) -> torch.Tensor:
    """(N, C, ...) -> (N, D)."""
    return X.reshape(X.shape[0], -1)


def normalize_channels(X: torch.Tensor, center: bool = True) -> torch.Tensor:
    """(N, C, ...) -> (N, C, P): each channel centred over samples and positions (optionally) and
    scaled to unit norm (all-zero channels stay zero)."""
    Z = X.reshape(X.shape[0], X.shape[1], -1)
    if center:
        Z = Z - Z.mean(dim=(0, 2), keepdim=True)
    norms = Z.square().sum(dim=(0, 2), keepdim=True).sqrt()
    return Z / torch.where(norms > 0, norms, torch.ones_like(norms))


def positions_as_samples(X: torch.Tensor) -> np.ndarray:
    """(N, C, ...) -> the (N*P, C) float64 numpy matrix: one row per sample and position."""
    Z = X.reshape(X.shape[0], X.shape[1], -1).transpose(1, 2).reshape(-1, X.shape[1])
    return Z.to(torch.float64).cpu().numpy()


def median_offdiagonal(D: torch.Tensor) -> float:
    """Median of the distances D_ij, i < j (mean of the two middle ones if their number is even)."""
    i, j = torch.triu_indices(D.shape[0], D.shape[0], 1, device=D.device)
    values = D[i, j].sort().values
    m = values.numel()
    return 0.5 * float(values[(m - 1) // 2] + values[m // 2])


def base_linear_cka(X, Y) -> float:
    """Linear CKA: Gram matrices X X' of the flattened (N, D) features, textbook unbiased CKA."""
    A, B = flat(X), flat(Y)
    return cka(A @ A.T, B @ B.T)


def base_channel_normalized_linear_cka(X, Y) -> float:
    """Each channel centred (over samples and positions) and scaled to unit norm, then linear CKA."""
    return base_linear_cka(normalize_channels(X), normalize_channels(Y))


def base_gate_cka(X, Y) -> float:
    """Linear CKA of the gates (X > 0) as float."""
    return base_linear_cka((X > 0).to(X.dtype), (Y > 0).to(Y.dtype))


def per_row_max_kernel(Z: torch.Tensor) -> torch.Tensor:
    """K[m] = max_c sum_p Z_mcp Z_ncp for one sample m at a time: einsum of row m with all
    samples, amax over channels (as the paper's released code computes it)."""
    K = torch.empty(len(Z), len(Z), dtype=Z.dtype, device=Z.device)
    for m in range(len(Z)):
        K[m] = torch.einsum("cp,ncp->nc", Z[m], Z).amax(1)
    return K


def base_grelu_cka(X, Y) -> float:
    """Channels centred and unit-normalised, max kernel computed row by row, unbiased CKA."""
    return cka(per_row_max_kernel(normalize_channels(X)), per_row_max_kernel(normalize_channels(Y)))


def base_laplace_cka(X, Y) -> float:
    """Channel-normalised features, torch.cdist(p=1) on the whole (N, D) matrix, bandwidth the
    median off-diagonal distance, K = exp(-D / bandwidth), unbiased CKA."""

    def kernel(Z):
        Z = flat(normalize_channels(Z))
        D = torch.cdist(Z, Z, p=1)
        return torch.exp(-D / median_offdiagonal(D))

    return cka(kernel(X), kernel(Y))


def base_rbf_cka(X, Y, bandwidth_fraction: float | None = None) -> float:
    """RBF-kernel CKA (Kornblith et al. 2019) on the flattened features: torch.cdist(p=2),
    sigma = bandwidth_fraction * median pairwise distance, K = exp(-d^2 / (2 sigma^2)),
    unbiased CKA."""
    fraction = (
        _library_default("rbf_cka", "bandwidth_fraction", 1.0)
        if bandwidth_fraction is None
        else bandwidth_fraction
    )

    def kernel(Z):
        Z = flat(Z)
        D = torch.cdist(Z, Z, p=2)
        sigma = fraction * median_offdiagonal(D)
        return torch.exp(-D.square() / (2 * sigma**2))

    return cka(kernel(X), kernel(Y))


def base_grelu_procrustes(X, Y) -> float:
    """Per-channel unit norm (no centring) of the (N*P, C) matrices, M = X~'Y~, Hungarian
    assignment (scipy linear_sum_assignment, maximize), 1 - sqrt(2C - 2 tr) / (2 sqrt C)."""
    A, B = positions_as_samples(X), positions_as_samples(Y)
    A = A / np.where((na := np.linalg.norm(A, axis=0)) > 0, na, 1.0)
    B = B / np.where((nb := np.linalg.norm(B, axis=0)) > 0, nb, 1.0)
    M = A.T @ B
    rows, cols = linear_sum_assignment(M, maximize=True)
    c = M.shape[0]
    return 1.0 - math.sqrt(max(0.0, 2 * c - 2 * M[rows, cols].sum())) / (2 * math.sqrt(c))


def base_orthogonal_procrustes(X, Y) -> float:
    """Both tensors scaled to unit Frobenius norm, scipy.linalg.orthogonal_procrustes on the
    (N*P, C) matrices, 1 - ||X - Y R||_F / 2."""
    A, B = positions_as_samples(X), positions_as_samples(Y)
    A, B = A / np.linalg.norm(A), B / np.linalg.norm(B)
    R, _ = scipy.linalg.orthogonal_procrustes(B, A)
    return 1.0 - np.linalg.norm(A - B @ R) / 2.0


# Google's svcca repository (cca_core.py, pwcca.py) holds activations as (neurons, datapoints):
# here the flattened (N, D) features transposed, D = C * H * W, as intertwine.measures.cca flattens.


def flat_numpy(X: torch.Tensor) -> np.ndarray:
    """(N, C, ...) -> the (N, D) float64 numpy matrix."""
    return flat(X).to(torch.float64).cpu().numpy()


def _invsqrt(sigma: np.ndarray) -> tuple[np.ndarray, int]:
    """cca_core's pinv then positivedef_matrix_sqrt, in one eigh: the inverse square root of a
    covariance on its range (eigenvalues below max * size * eps count as zero), and the rank."""
    w, v = np.linalg.eigh(sigma)
    keep = w > w.max() * len(w) * np.finfo(np.float64).eps
    return (v[:, keep] / np.sqrt(w[keep])) @ v[:, keep].T, int(keep.sum())


def cca_core(acts1: np.ndarray, acts2: np.ndarray, epsilon: float = 0.0) -> dict:
    """numpy transcription of Google's cca_core.get_cca_similarity (no directions) on
    (neurons, datapoints) activations: np.cov, rescaling by the largest variance, neurons of
    variance below epsilon removed, epsilon added to the diagonals, inverse square roots of the
    covariances, SVD of invsqrt_xx sigma_xy invsqrt_yy. The correlations are cut to the smaller
    covariance rank (cca_core's pinv keeps spurious ones when neurons outnumber datapoints)."""
    numx = acts1.shape[0]
    covariance = np.cov(acts1, acts2)
    sxx, sxy = covariance[:numx, :numx], covariance[:numx, numx:]
    syy = covariance[numx:, numx:]
    xmax, ymax = np.max(np.abs(sxx)), np.max(np.abs(syy))
    sxx, syy, sxy = sxx / xmax, syy / ymax, sxy / np.sqrt(xmax * ymax)
    x_idxs = np.abs(np.diagonal(sxx)) >= epsilon
    y_idxs = np.abs(np.diagonal(syy)) >= epsilon
    sxx, syy, sxy = sxx[x_idxs][:, x_idxs], syy[y_idxs][:, y_idxs], sxy[x_idxs][:, y_idxs]
    (invsqrt_xx, rank_x), (invsqrt_yy, rank_y) = (
        _invsqrt(sxx + epsilon * np.eye(len(sxx))),
        _invsqrt(syy + epsilon * np.eye(len(syy))),
    )
    u, s, v = np.linalg.svd(invsqrt_xx @ sxy @ invsqrt_yy)
    r = min(rank_x, rank_y)
    return {
        "coef_x": u.T[:r],
        "coef_y": v[:r],
        "invsqrt_xx": invsqrt_xx,
        "invsqrt_yy": invsqrt_yy,
        "cca_coef1": np.abs(s[:r]),
        "x_idxs": x_idxs,
        "y_idxs": y_idxs,
        "rank_x": rank_x,
        "rank_y": rank_y,
    }


def _library_default(measure: str, parameter: str, fallback: float) -> float:
    """The default of a keyword of a registered measure (``fallback`` if it has none)."""
    fn = measures.MEASURES.get(measure)
    if fn is None:
        return fallback
    p = inspect.signature(fn).parameters.get(parameter)
    if p is None or p.default is inspect.Parameter.empty:
        return fallback
    return float(p.default)


def _svd_reduce(acts: np.ndarray, keep: float) -> np.ndarray:
    """SVCCA's SV step: centre the (neurons, datapoints) activations and keep the fewest top
    singular directions explaining ``keep`` of the variance, as (dims, datapoints)."""
    acts = acts - acts.mean(axis=1, keepdims=True)
    _, s, Vt = np.linalg.svd(acts, full_matrices=False)
    explained = np.cumsum(s**2) / np.sum(s**2)
    k = min(int(np.searchsorted(explained, keep - 1e-12)) + 1, len(s))
    return s[:k, None] * Vt[:k]


def base_svcca(X, Y) -> float:
    """SVCCA (Raghu et al. 2017) as in Google's tutorial: SVD of each flattened representation
    keeping 99% of the variance (the library's default), then cca_core (epsilon 1e-10); the mean
    canonical correlation."""
    keep = _library_default("svcca", "variance", 0.99)
    a1, a2 = (_svd_reduce(flat_numpy(Z).T, keep) for Z in (X, Y))
    return float(np.mean(cca_core(a1, a2, epsilon=1e-10)["cca_coef1"]))


def base_pwcca(X, Y) -> float:
    """PWCCA (Morcos et al. 2018) after Google's pwcca.compute_pwcca: cca_core on the flattened
    representations, then on the side with fewer dimensions (X on a tie) the canonical variates
    h_i = Xc' invsqrt_xx u_i (unit norm), weights sum_j |<h_i, x_j>| over the centred neurons x_j,
    normalised; the weighted sum of the canonical correlations. Like intertwine (see its
    docstring), and unlike compute_pwcca's code, the variates include invsqrt_xx and everything
    is centred."""
    acts1, acts2 = flat_numpy(X).T, flat_numpy(Y).T
    r = cca_core(acts1, acts2)
    if r["rank_x"] <= r["rank_y"]:
        acts, idxs, coef, invsqrt = acts1, r["x_idxs"], r["coef_x"], r["invsqrt_xx"]
    else:
        acts, idxs, coef, invsqrt = acts2, r["y_idxs"], r["coef_y"], r["invsqrt_yy"]
    centred = acts[idxs] - acts[idxs].mean(axis=1, keepdims=True)
    variates = (coef @ invsqrt) @ centred  # (r, datapoints)
    variates /= np.linalg.norm(variates, axis=1, keepdims=True)
    weights = np.abs(variates @ centred.T).sum(axis=1)
    weights = weights / weights.sum()
    return float(np.sum(weights * r["cca_coef1"]))


def _netrep_aligned(X, Y, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """netrep's LinearMetric(alpha, center_columns=True, zero_pad=True).fit then transform:
    centre the columns, zero-pad the narrower, partial whitening (netrep.utils.whiten with
    preserve_variance), rotate both by the SVD of Xw' Yw."""
    A, B = flat_numpy(X), flat_numpy(Y)
    width = max(A.shape[1], B.shape[1])
    A = np.pad(A, ((0, 0), (0, width - A.shape[1])))
    B = np.pad(B, ((0, 0), (0, width - B.shape[1])))

    def whiten(Z, eigval_tol=1e-7):
        if alpha > 1 - eigval_tol:
            return Z, np.eye(Z.shape[1])
        lam, V = np.linalg.eigh(Z.T @ Z)
        lam = np.maximum(lam, eigval_tol)
        d = alpha + (1 - alpha) * lam ** (-1 / 2)
        new_var = np.sum(alpha**2 * lam + 2 * alpha * (1 - alpha) * lam**0.5 + (1 - alpha) ** 2)
        d *= np.sqrt(np.sum(lam) / new_var)
        W = (V * d[None, :]) @ V.T
        return Z @ W, W

    A, B = A - A.mean(axis=0), B - B.mean(axis=0)
    (Aw, Wa), (Bw, Wb) = whiten(A), whiten(B)
    U, _, Vt = np.linalg.svd(Aw.T @ Bw)
    return A @ (Wa @ U), B @ (Wb @ Vt.T)


def base_shape_angular(X, Y) -> float:
    """Angular shape metric (Williams et al. 2021), netrep LinearMetric(score_method="angular"):
    arccos of the normalised inner product of the aligned representations."""
    A, B = _netrep_aligned(X, Y, _library_default("shape_angular", "alpha", 1.0))
    corr = np.dot(A.ravel(), B.ravel()) / (np.linalg.norm(A) * np.linalg.norm(B))
    return float(np.arccos(np.clip(corr, -1.0, 1.0)))


def base_shape_euclidean(X, Y) -> float:
    """Euclidean shape metric, netrep LinearMetric(score_method="euclidean"): the Frobenius
    distance of the aligned representations."""
    A, B = _netrep_aligned(X, Y, _library_default("shape_euclidean", "alpha", 1.0))
    return float(np.linalg.norm(A - B))


BASELINES: dict[str, Callable[..., float]] = {
    "linear_cka": base_linear_cka,
    "channel_normalized_linear_cka": base_channel_normalized_linear_cka,
    "gate_cka": base_gate_cka,
    "grelu_cka": base_grelu_cka,
    "laplace_cka": base_laplace_cka,
    "rbf_cka": base_rbf_cka,
    "grelu_procrustes": base_grelu_procrustes,
    "orthogonal_procrustes": base_orthogonal_procrustes,
    "svcca": base_svcca,
    "pwcca": base_pwcca,
    "shape_angular": base_shape_angular,
    "shape_euclidean": base_shape_euclidean,
}


def check_baselines() -> None:
    missing = [name for name in measures.MEASURES if name not in BASELINES]
    if missing:
        raise ValueError(
            f"intertwine.measures.MEASURES holds {', '.join(missing)} without a baseline in "
            "benchmarks/similarity.py: add one to BASELINES"
        )


# ---------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], object], repeats: int, device: torch.device) -> tuple[float, object]:
    """(minimum seconds over up to ``repeats`` runs, value of the last run); a first run longer
    than RERUN_BELOW_S is not repeated."""
    best = math.inf
    for _ in range(max(1, repeats)):
        _sync(device)
        started = time.perf_counter()
        value = fn()
        _sync(device)
        best = min(best, time.perf_counter() - started)
        if best > RERUN_BELOW_S:
            break
    return best, value


def measures_section(args, device: torch.device) -> None:
    check_baselines()
    names = [m for m in args.measures if m in measures.MEASURES]
    absent = [m for m in args.measures if m not in measures.MEASURES]
    dtype = getattr(torch, args.dtype)
    print(
        f"\n== measures: intertwine vs straightforward baseline, {args.dtype}, "
        f"{describe_device(device)}, repeats {args.repeats} (min), "
        f"baseline skipped above {args.skip_baseline_above:g} s at a smaller N"
    )
    if absent:
        print(f"   not in intertwine.measures.MEASURES (skipped): {', '.join(absent)}")
    header = (
        f"{'measure':31s} {'shape':>5s} {'N':>6s} {'C':>5s} {'ours s':>9s} {'base s':>9s} "
        f"{'ratio':>8s} {'|diff|':>9s}"
    )
    print(header + "\n" + "-" * len(header), flush=True)
    slow: dict[tuple[str, int, int], tuple[float, int]] = {}  # baseline > limit at (time, N)
    started = time.perf_counter()
    for name in names:
        ours_fn, base_fn = measures.MEASURES[name], BASELINES[name]
        for size in (0, args.size):
            for channels in args.channels:
                for n in sorted(args.n):
                    X, Y = activations(n, channels, size, dtype, device)
                    ours_fn(X[:WARMUP], Y[:WARMUP])
                    t_ours, v_ours = timed(partial(ours_fn, X, Y), args.repeats, device)
                    key = (name, size, channels)
                    row = f"{name:31s} {shape_name(size):>5s} {n:6d} {channels:5d} {t_ours:9.3f}"
                    if key in slow:
                        t_slow, n_slow = slow[key]
                        print(
                            f"{row} skipped (baseline > {args.skip_baseline_above:g}s at "
                            f"N={n_slow}: {t_slow:.1f}s)",
                            flush=True,
                        )
                        continue
                    base_fn(X[:WARMUP], Y[:WARMUP])
                    t_base, v_base = timed(partial(base_fn, X, Y), args.repeats, device)
                    if t_base > args.skip_baseline_above:
                        slow[key] = (t_base, n)
                    print(
                        f"{row} {t_base:9.3f} {t_base / t_ours:7.1f}x {abs(float(v_ours) - float(v_base)):9.1e}",
                        flush=True,
                    )
                    del X, Y
    print(f"(measures section: {time.perf_counter() - started:.0f} s)")


# ---------------------------------------------------------------------------
# Max kernel paths, each in a fresh process for its peak memory
# ---------------------------------------------------------------------------

MAX_KERNEL_METHODS = ("blocked", "per_channel")


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
    method: str, n: int, channels: int, size: int, dtype: str, device: str, threads: int, repeats: int
) -> tuple[float, int, bytes]:
    """(seconds, peak memory growth in bytes, K's bytes) of max_kernel(X, method=...); meant for a
    fresh process. The warm-up on 16 samples happens before the memory marker."""
    torch.set_num_threads(threads)
    device = resolve_device(device)
    X, _ = activations(n, channels, size, getattr(torch, dtype), device)
    measures.max_kernel(X[:WARMUP], method=method)
    marker = _peak_marker(device)
    K = None

    def run():
        nonlocal K
        K = None  # the previous result is freed before the next run
        K = measures.max_kernel(X, method=method)
        return 0.0

    seconds, _ = timed(run, repeats, device)
    return seconds, _peak_growth(device, marker), K.cpu().numpy().tobytes()


def max_kernel_section(args, device: torch.device) -> None:
    context = multiprocessing.get_context("spawn")
    print(
        f"\n== max_kernel(X, method=...): blocked vs per_channel, {args.dtype}, "
        f"{describe_device(device)}; each run in a fresh process, peak = memory growth"
    )
    header = (
        f"{'shape':>5s} {'N':>6s} {'C':>5s} {'blocked s':>10s} {'peak MiB':>9s} "
        f"{'per_ch s':>10s} {'peak MiB':>9s} {'ratio':>8s} {'|diff|':>9s}"
    )
    print(header + "\n" + "-" * len(header), flush=True)
    np_dtype = np.dtype(args.dtype)
    for size in (0, args.size):
        for channels in args.channels:
            for n in sorted(args.n):
                results = {}
                for method in MAX_KERNEL_METHODS:
                    job = (method, n, channels, size, args.dtype, args.device)
                    job += (torch.get_num_threads(), args.repeats)
                    with context.Pool(1) as pool:
                        results[method] = pool.apply(timed_in_process, job)
                (t_b, p_b, k_b), (t_c, p_c, k_c) = (results[m] for m in MAX_KERNEL_METHODS)
                K_b, K_c = (np.frombuffer(k, dtype=np_dtype) for k in (k_b, k_c))
                diff = float(np.max(np.abs(K_b.astype(np.float64) - K_c)))
                print(
                    f"{shape_name(size):>5s} {n:6d} {channels:5d} {t_b:10.3f} {p_b / MiB:9.0f} "
                    f"{t_c:10.3f} {p_c / MiB:9.0f} {t_b / t_c:7.1f}x {diff:9.1e}",
                    flush=True,
                )
    print("ratio = blocked time / per_channel time (method='auto' is per_channel)")


# ---------------------------------------------------------------------------
# Many layers at once
# ---------------------------------------------------------------------------

PAIRWISE_CHANNELS = (16, 32, 64, 64, 128, 128)
PAIRWISE_MEASURES = ("linear_cka", "grelu_cka")


def pair_loop(measure: Callable[..., float], xs: list, ys: list) -> np.ndarray:
    """The L_x x L_y matrix by one call of ``measure`` per pair of layers."""
    return np.array([[float(measure(x, y)) for y in ys] for x in xs])


def pairwise_section(args, device: torch.device) -> None:
    dtype = getattr(torch, args.dtype)
    n = args.pairwise_n
    layers = len(PAIRWISE_CHANNELS)
    print(
        f"\n== pairwise(measure, xs, ys) vs a loop of per-pair calls: {layers} x {layers} layers "
        f"of {', '.join(map(str, PAIRWISE_CHANNELS))} channels, N={n}, {args.dtype}, "
        f"{describe_device(device)}"
    )
    header = (
        f"{'measure':31s} {'shape':>5s} {'pairwise s':>11s} {'loop s':>9s} {'ratio':>8s} {'max|diff|':>10s}"
    )
    print(header + "\n" + "-" * len(header), flush=True)
    for name in PAIRWISE_MEASURES:
        if name not in measures.MEASURES:
            print(f"{name:31s} not in MEASURES: skipped")
            continue
        measure = measures.MEASURES[name]
        for size in (0, args.size):
            pairs = [
                activations(n, c, size, dtype, device, seed=seed) for seed, c in enumerate(PAIRWISE_CHANNELS)
            ]
            xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
            small_x, small_y = [x[:WARMUP] for x in xs], [y[:WARMUP] for y in ys]
            measures.pairwise(name, small_x, small_y)
            pair_loop(measure, small_x, small_y)
            t_pair, grid = timed(partial(measures.pairwise, name, xs, ys), args.repeats, device)
            t_loop, looped = timed(partial(pair_loop, measure, xs, ys), args.repeats, device)
            diff = float(np.max(np.abs(np.asarray(grid, dtype=np.float64) - looped)))
            print(
                f"{name:31s} {shape_name(size):>5s} {t_pair:11.3f} {t_loop:9.3f} "
                f"{t_loop / t_pair:7.1f}x {diff:10.1e}",
                flush=True,
            )
            done = len(xs) * len(ys)
            print("  " + ratio_line(name, done / t_pair, done / t_loop, unit="layer pairs/s"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument(
        "--section",
        default="all",
        choices=["all", "measures", "max_kernel", "pairwise"],
        help="which part to run (default: all three)",
    )
    parser.add_argument("--n", type=int, nargs="+", default=[500, 2000, 5000], help="samples")
    parser.add_argument("--channels", type=int, nargs="+", default=[64, 256], help="widths")
    parser.add_argument("--size", type=int, default=4, help="height = width of the 4-D features")
    parser.add_argument(
        "--measures",
        nargs="+",
        default=list(BASELINES),
        choices=list(BASELINES),
        help="subset of the measures (default: every one in MEASURES)",
    )
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's choice)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs; the minimum is kept")
    parser.add_argument(
        "--skip-baseline-above",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="do not run a baseline whose run at a smaller N (same measure, shape, width) took "
        "longer than this",
    )
    parser.add_argument("--pairwise-n", type=int, default=2000, help="samples in the pairwise section")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.size < 1:
        parser.error("--size must be at least 1")
    device = resolve_device(args.device)
    check_baselines()
    started = time.perf_counter()
    if args.section in ("all", "measures"):
        measures_section(args, device)
    if args.section in ("all", "max_kernel"):
        max_kernel_section(args, device)
    if args.section in ("all", "pairwise"):
        pairwise_section(args, device)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
