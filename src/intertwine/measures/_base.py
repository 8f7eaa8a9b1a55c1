"""Input handling shared by the measures: features as tensors, the scale guard, constant
representations, per-channel normalisation, memory blocking."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from intertwine._memory import DEFAULT_MAX_BYTES  # noqa: F401  (the measures import it from here)
from intertwine.measures.names import too_few_samples

ArrayLike = Tensor | np.ndarray
F64 = torch.float64


# ---------------------------------------------------------------------------
# Input handling
# ---------------------------------------------------------------------------


def tracks_graph(*arrays: ArrayLike) -> bool:
    """Whether a differentiable measure should return a tensor carrying the autograd graph."""
    return torch.is_grad_enabled() and any(isinstance(a, Tensor) and a.requires_grad for a in arrays)


def as_result(value: Tensor, graph: bool) -> Tensor | float:
    """A 0-d tensor on the graph for a differentiable call, a float otherwise."""
    return value if graph else float(value)


def as_features(X: ArrayLike, name: str, graph: bool = False) -> Tensor:
    """Floating tensor of shape (N, C, P), P the number of spatial positions (1 if none); detached
    unless ``graph``."""
    X = X if isinstance(X, Tensor) else torch.as_tensor(np.asarray(X))
    if X.is_meta:
        raise ValueError(f"{name} is a meta tensor (a shape without data); pass the actual activations")
    X = X if graph else X.detach()
    if X.ndim < 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(
            f"{name} must have shape (N, C) or (N, C, H, W) with N, C >= 1, got {tuple(X.shape)}"
        )
    if X.is_complex():
        raise ValueError(f"{name} must be real, got {X.dtype}")
    if not X.is_floating_point():
        X = X.to(F64)
    elif X.dtype in (torch.float16, torch.bfloat16):
        # Half precision cannot hold kernel sums over thousands of terms.
        X = X.to(torch.float32)
    # A finite sum proves every entry finite without an N*C*H*W mask; check entries only if not.
    if not bool(torch.isfinite(X.sum())) and not bool(torch.isfinite(X).all()):
        raise ValueError(f"{name} contains NaN or infinite values")
    return X.reshape(X.shape[0], X.shape[1], -1)


class ConstantRepresentationError(ValueError):
    """A representation is the same for every sample (or all zero): no similarity is defined.
    ``which`` names the argument or model ("X"/"Y", "a"/"b", or "xs"/"ys" with ``index``, the
    position in that list, from ``pairwise``), ``site`` the site when known."""

    def __init__(
        self, message: str, which: str | None = None, site: str | None = None, index: int | None = None
    ):
        super().__init__(message)
        self.which, self.site, self.index = which, site, index


def constant_message(which: str, n: int, measure: str) -> str:
    """Why ``measure`` is undefined for a representation the same for each of its samples: the
    text of a ``ConstantRepresentationError``.

    Parameters
    ----------
    which : str
        What is constant (e.g. "its representation", "X").
    n : int
        How many samples it has.
    measure : str
        The measure that is undefined.

    Returns
    -------
    str
        The sentence, naming both.
    """
    return (
        f"{which} is the same for each of its {n} samples (zero variance over the inputs, e.g. "
        f"a layer whose units are all dead on them), so {measure} is undefined: a similarity "
        "compares how two representations vary across inputs"
    )


def is_constant(lowest: Tensor, highest: Tensor, n: int) -> bool:
    """Whether features whose per-entry minimum and maximum over the samples are ``lowest`` and
    ``highest`` are constant: the same for every sample, or (one sample) all zero."""
    if n > 1:
        return bool(torch.equal(lowest, highest))
    return not bool(highest.any())


def require_variation(X: Tensor, which: str, measure: str) -> None:
    """``ConstantRepresentationError`` if (N, C, P) features ``X`` are constant (see the module)."""
    if is_constant(X.amin(0), X.amax(0), X.shape[0]):
        raise ConstantRepresentationError(constant_message(which, X.shape[0], measure), which)


def pow2_scale(top: float) -> float:
    """A power of two near ``top`` (> 0): dividing by it is exact."""
    return 2.0 ** math.floor(math.log2(top)) if top >= 2.0**-1000 else 2.0**-1000


def _safe_bound(dtype: torch.dtype, degree: int) -> float:
    """Entries within [1 / bound, bound] keep sums of products of ``degree`` of them finite and
    nonzero in ``dtype`` (a margin for sums over many terms)."""
    return 2.0 ** (math.ceil(math.log2(torch.finfo(dtype).max)) // (2 * degree))


def rescaled_exactly(X: Tensor, degree: int = 2) -> Tensor:
    """X divided by a power of two near its largest |entry| when that lies outside the range
    where products of ``degree`` entries neither overflow nor underflow (beyond about 1e+-77 for
    squares in float64, 1e+-9 in float32); X itself otherwise. Exact (a power of two), so a
    measure invariant to the scale of a representation is unchanged; used by every measure before
    it squares anything ("rescale before squaring")."""
    top = float(X.detach().abs().max()) if X.numel() else 0.0
    bound = _safe_bound(X.dtype, degree)
    if top == 0 or not math.isfinite(top) or 1 / bound <= top <= bound:
        return X
    scale = pow2_scale(top)
    return X * (1 / math.sqrt(scale)) * (1 / math.sqrt(scale)) if scale < 2.0**-1000 else X / scale


def check_pair(
    X: ArrayLike, Y: ArrayLike, min_samples: int, measure: str, graph: bool = False, rescale: bool = True
) -> tuple[Tensor, Tensor]:
    """X and Y as (N, C, P) features of one dtype and device, checked: the same N, at least
    ``MIN_SAMPLES[measure]`` of them (unchecked with ``min_samples`` 1: an accumulator's batch); each rescaled by a power of two when its entries
    would overflow or underflow once squared (``rescaled_exactly``; not with ``rescale=False``, for
    accumulators, which keep one scale over their batches)."""
    X, Y = as_features(X, "X", graph), as_features(Y, "Y", graph)
    if X.shape[0] != Y.shape[0]:
        raise ValueError(
            f"X and Y must hold the same samples (first axis), got N = {X.shape[0]} and N = {Y.shape[0]}"
        )
    if min_samples > 1 and too_few_samples(measure, X.shape[0], X.shape[2]):
        raise ValueError(too_few_samples(measure, X.shape[0], X.shape[2]))
    if X.device != Y.device:
        raise ValueError(f"X and Y must be on the same device, got {X.device} and {Y.device}")
    dtype = torch.promote_types(X.dtype, Y.dtype)
    X, Y = X.to(dtype), Y.to(dtype)
    if rescale:
        X, Y = rescaled_exactly(X), rescaled_exactly(Y)
    return X, Y


def normalize_channels_(X: Tensor, center: bool, channel_axis: int = 1) -> Tensor:
    """In place on X, (N, C, P) or, with channel_axis=0, (C, N, P): each channel optionally
    centred, then scaled to unit norm over samples and positions.

    All-zero channels (dead ReLUs) stay zero instead of becoming NaN.
    """
    sample_axis = 1 - channel_axis
    count = X.shape[sample_axis] * X.shape[2]
    shape = [1, 1, 1]
    shape[channel_axis] = -1
    # Reduce over the contiguous positions in X's dtype, then over samples in float64: a float32
    # reduction along the strided sample axis accumulates naively and loses ~N*eps (1e-4 relative
    # at N = 1000, enough to move CKA by 1e-5). No float64 copy of X is made.
    if center:
        mean = X.sum(2).to(F64).sum(sample_axis) / count
        X.sub_(mean.to(X.dtype).view(shape))
    norms = torch.linalg.vector_norm(X, dim=2).to(F64).square().sum(sample_axis).sqrt()
    norms = torch.where(norms > 0, norms, torch.ones_like(norms))
    return X.div_(norms.to(X.dtype).view(shape))


def channel_normalize(X: Tensor, center: bool) -> Tensor:
    """(N, C, P) -> a normalised copy (see ``normalize_channels_``)."""
    return normalize_channels_(X.clone(), center)


def channel_major(X: Tensor) -> Tensor:
    """(N, C, P) -> a new contiguous (C, N, P) tensor (never a view of X, so safe to modify)."""
    out = torch.empty((X.shape[1], X.shape[0], X.shape[2]), dtype=X.dtype, device=X.device)
    return out.copy_(X.transpose(0, 1))


def flatten_centered(X: Tensor) -> Tensor:
    """(N, C, P) -> (N, C*P) with every feature centred over the samples.

    Only for smaller sums: the unbiased HSIC ignores translations, so the float32 mean's rounding
    (unlike in ``channel_normalize``) does not reach the result.
    """
    X = X.reshape(X.shape[0], -1)
    return X - X.mean(dim=0, keepdim=True)


def merged_ranges(ranges: list[Tensor] | None, x: Tensor, y: Tensor) -> list[Tensor]:
    """Per-entry (min x, max x, min y, max y) over the samples so far, ``ranges``, and this batch."""
    new = [r.detach() for r in (x.amin(0), x.amax(0), y.amin(0), y.amax(0))]
    if not ranges:
        return new
    return [
        (torch.minimum if i % 2 == 0 else torch.maximum)(old, batch.to(old.device, old.dtype))
        for i, (old, batch) in enumerate(zip(ranges, new))
    ]


def constant_side(ranges: list[Tensor], n: int) -> str | None:
    """Which representation, "X" or "Y" (X first), is constant over its n samples, or None."""
    low_x, high_x, low_y, high_y = ranges
    if is_constant(low_x, high_x, n):
        return "X"
    return "Y" if is_constant(low_y, high_y, n) else None


def check_max_bytes(max_bytes) -> int:
    """``max_bytes``, a memory budget: an integer >= 1 (a ValueError otherwise)."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, (int, np.integer)) or max_bytes < 1:
        raise ValueError(f"max_bytes must be an integer number of bytes >= 1, got {max_bytes!r}")
    return int(max_bytes)


def rows_per_block(n_cols: int, bytes_per_entry: int, max_bytes: int) -> int:
    return max(1, check_max_bytes(max_bytes) // max(1, n_cols * bytes_per_entry))
