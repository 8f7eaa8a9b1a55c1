"""Procrustes similarities: G_ReLU (permutations times positive scalings) and orthogonal, one-shot
and streamed over batches (``ProcrustesAccumulator``)."""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor

from intertwine.measures._base import (
    DEFAULT_MAX_BYTES,
    F64,
    ArrayLike,
    ConstantRepresentationError,
    as_result,
    check_max_bytes,
    check_pair,
    constant_message,
    constant_side,
    merged_ranges,
    pow2_scale,
    rescaled_exactly,
    tracks_graph,
)
from intertwine.measures.names import too_few_samples


def normalized_cross(cross: Tensor, x_sq: Tensor, y_sq: Tensor) -> Tensor:
    """``cross[i, j] / (|x_i| |y_j|)`` from the cross-products and squared channel norms; a dead
    channel (norm 0) keeps norm 1, so its entries stay 0 rather than NaN (and so does the gradient:
    the square root never sees the zero)."""
    nx, ny = torch.where(x_sq > 0, x_sq, 1.0).sqrt(), torch.where(y_sq > 0, y_sq, 1.0).sqrt()
    return cross / (nx[:, None] * ny[None, :])


def match_channels(cross: Tensor, x_sq: Tensor, y_sq: Tensor) -> Tensor:
    """The one-to-one matching of two representations' channels that maximises the sum of the
    matched pairs' normalised correlations (Hungarian algorithm): the matching of
    ``grelu_procrustes`` and of ``ProcrustesAccumulator``.

    Parameters
    ----------
    cross : (C, C) tensor, ``cross[i, j] = <x_i, y_j>`` summed over samples and positions, x_i the
        i-th channel of X and y_j the j-th of Y.
    x_sq, y_sq : (C,) tensors, the channels' squared norms ``|x_i|^2`` and ``|y_j|^2``. A dead
        channel (norm 0) correlates 0 with every channel.

    Returns
    -------
    perm : (C,) int64 tensor on the CPU: X's channel i is matched with Y's channel ``perm[i]``.
    """
    if cross.ndim != 2 or cross.shape[0] != cross.shape[1]:
        raise ValueError(
            f"match_channels matches channels one to one, so X and Y need the same number of "
            f"channels, got a cross-product of shape {tuple(cross.shape)}"
        )
    if x_sq.shape != (cross.shape[0],) or y_sq.shape != (cross.shape[1],):
        raise ValueError(
            f"match_channels: x_sq and y_sq must hold one squared norm per channel, got shapes "
            f"{tuple(x_sq.shape)} and {tuple(y_sq.shape)} for {cross.shape[0]} channels"
        )
    normalized = normalized_cross(cross, x_sq, y_sq).detach().cpu().numpy()
    return torch.as_tensor(linear_sum_assignment(normalized, maximize=True)[1], dtype=torch.long)


# ---------------------------------------------------------------------------
# Procrustes
# ---------------------------------------------------------------------------


class ProcrustesAccumulator:
    """Sufficient statistics of both Procrustes similarities, accumulated over batches.

    ``update(x, y)`` takes paired batches (same inputs through both models) of shape
    (B, C, H, W) / (B, C', H, W) or (B, C) / (B, C') and adds, in float64, the C x C'
    cross-product M = sum_{n,h,w} x_nchw y_nc'hw and the per-channel squared norms. Whole feature
    tensors are never needed: per-channel or global normalisation over the full set is applied
    afterwards, exactly, as M_cc' / (||x_c|| ||y_c'||) or M / (||X|| ||Y||).

    Precision near 1: from M alone the distance is sqrt(2 - 2 tr), which cancels: a distance d
    comes out with an error of about 1e-8, not d * 1e-16. An optional second pass, ``refine(x, y)``
    over the same batches (any order, each once), sums the residual ||X~ - Y~ A*||^2 directly at
    the optimum A* the first pass found, which keeps every digit; once it has covered every sample
    the results use it. The one-shot functions make it when delta^2 < 1e-6 (``_REFINE_BELOW``).

    Differentiable: batches that require grad keep their graph, and ``grelu`` and ``orthogonal``
    then return 0-d tensors. The optimal permutation or rotation is held fixed (detached): the
    gradient of a minimum over A is the gradient at the minimiser (Danskin's theorem).
    """

    def __init__(self) -> None:
        self.n_samples = 0
        self.cross: Tensor | None = None
        self.x_sq: Tensor | None = None
        self.y_sq: Tensor | None = None
        self._positions: int | None = None
        self._ranges: list[Tensor] | None = None  # per-entry (min x, max x, min y, max y) over samples
        self._graph = False
        self._optimum: dict | None = None  # the minimisers, fixed by the first refine()
        self._residuals: dict[str, Tensor] = {}
        self._refined = 0
        self._refined_sq: tuple[Tensor, Tensor] | None = None  # the second pass's channel norms
        self._scales: tuple[float, float] | None = None  # each side's divisor, set by the first batch

    def _batch(self, x: ArrayLike, y: ArrayLike) -> tuple[Tensor, Tensor, bool]:
        graph = tracks_graph(x, y)
        x, y = check_pair(x, y, 1, "Procrustes", graph, rescale=False)
        # Rescale before squaring: both measures are invariant to the scale of either side, so
        # each side is divided by one power of two for every batch (the first batch's, where its
        # entries would overflow or underflow once squared; exact).
        if self._scales is None:
            self._scales = tuple(
                1.0 if rescaled_exactly(z) is z else pow2_scale(float(z.detach().abs().max())) for z in (x, y)
            )
        if self._scales != (1.0, 1.0):
            x, y = x / self._scales[0], y / self._scales[1]
        if x.shape[2] != y.shape[2]:
            raise ValueError(
                f"Procrustes pairs spatial positions, so X and Y need the same number "
                f"of them, got {x.shape[2]} and {y.shape[2]}"
            )
        if self.cross is not None and (
            self.cross.shape != (x.shape[1], y.shape[1]) or self._positions != x.shape[2]
        ):
            raise ValueError(
                f"batch shapes (C={x.shape[1]}, C'={y.shape[1]}, positions="
                f"{x.shape[2]}) differ from earlier batches ({tuple(self.cross.shape)}, "
                f"positions={self._positions})"
            )
        return x, y, graph

    def update(self, x: ArrayLike, y: ArrayLike) -> ProcrustesAccumulator:
        if self._optimum is not None:
            raise ValueError("update() after refine(): the first pass must see every batch before the second")
        x, y, graph = self._batch(x, y)
        # (C, B*P): channels as columns of the (samples x positions) by channels matrix.
        xm, ym = _channel_rows(x), _channel_rows(y)
        cross = xm @ ym.T
        x_sq, y_sq = (
            torch.linalg.vector_norm(xm, dim=1).square(),
            torch.linalg.vector_norm(ym, dim=1).square(),
        )
        self._ranges = merged_ranges(self._ranges, x, y)
        if self.cross is None:
            self.cross, self.x_sq, self.y_sq, self._positions = cross, x_sq, y_sq, x.shape[2]
        else:
            self.cross = self.cross + cross.to(self.cross.device)
            self.x_sq = self.x_sq + x_sq.to(self.x_sq.device)
            self.y_sq = self.y_sq + y_sq.to(self.y_sq.device)
        self.n_samples += x.shape[0]
        self._graph |= graph
        return self

    def constant(self) -> str | None:
        """Which of the accumulated representations is constant over the samples ("X" or "Y",
        X first), or None: the measures are undefined then (see the module docstring)."""
        return None if self.cross is None else constant_side(self._ranges, self.n_samples)

    def _state(self, measure: str) -> tuple[Tensor, Tensor, Tensor]:
        if self.cross is None:
            raise ValueError("no batches accumulated yet: call update(x, y) first")
        if too_few_samples(measure, self.n_samples, self._positions):
            raise ValueError(too_few_samples(measure, self.n_samples, self._positions))
        which = self.constant()
        if which:
            raise ConstantRepresentationError(constant_message(which, self.n_samples, measure), which)
        if 0 < self._refined < self.n_samples:
            raise ValueError(
                f"refine() has seen {self._refined} of the {self.n_samples} samples: give it every "
                "batch of the first pass once"
            )
        return self.cross, self.x_sq, self.y_sq

    def _matching(self) -> tuple[Tensor, np.ndarray, np.ndarray, Tensor, Tensor]:
        """(M~, rows, cols, per-channel norms of X and Y): the Hungarian matching of the
        normalised channels, X's channel rows[i] with Y's cols[i]."""
        M, x_sq, y_sq = self._state("grelu_procrustes")
        if M.shape[0] != M.shape[1]:
            raise ValueError(
                f"grelu_procrustes matches channels one to one, so X and Y need the "
                f"same number of channels, got {M.shape[0]} and {M.shape[1]}"
            )
        # Dead channels keep norm 1 (normalized_cross).
        nx, ny = torch.where(x_sq > 0, x_sq, 1.0).sqrt(), torch.where(y_sq > 0, y_sq, 1.0).sqrt()
        normalized = normalized_cross(M, x_sq, y_sq)
        cols = match_channels(M, x_sq, y_sq).numpy()
        return normalized, np.arange(len(cols)), cols, nx, ny

    def _rotation(self) -> Tensor:
        """The orthogonal Q minimising ||X - Y Q|| for both sides zero-padded to max(C, C')."""
        M = _pad_square(self._state("orthogonal_procrustes")[0].detach())
        U, _, Vh = torch.linalg.svd(M.T)  # Y'X = U S Vh, so tr(Q' Y'X) is largest at Q = U Vh
        return U @ Vh

    def refine(self, x: ArrayLike, y: ArrayLike) -> ProcrustesAccumulator:
        """Second pass: add this batch's residuals at the first pass's optimum (see the class)."""
        if self._optimum is None:
            self._optimum = {"rotation": self._rotation()}
            if self.cross.shape[0] == self.cross.shape[1]:
                self._optimum["matching"] = self._matching()[1:]
            self._residuals = dict.fromkeys(self._optimum, 0.0)
        x, y, _ = self._batch(x, y)
        self._refined += x.shape[0]
        if self._refined > self.n_samples:
            raise ValueError(f"refine() has seen more samples than update()'s {self.n_samples}")
        xr, yr = _channel_rows(x).T, _channel_rows(y).T  # (B*P, C): samples and positions as rows
        self._check_same_samples(xr, yr)
        width = max(xr.shape[1], yr.shape[1])
        pad = torch.nn.functional.pad
        scale_x, scale_y = self.x_sq.sum().sqrt(), self.y_sq.sum().sqrt()
        rotated = pad(yr, (0, width - yr.shape[1])) @ self._optimum["rotation"].to(yr.device)
        residual = pad(xr, (0, width - xr.shape[1])) / scale_x - rotated / scale_y
        self._residuals["rotation"] = self._residuals["rotation"] + residual.square().sum()
        if "matching" in self._optimum:
            rows, cols, nx, ny = self._optimum["matching"]
            residual = (xr / nx)[:, rows] - (yr / ny)[:, cols]
            self._residuals["matching"] = self._residuals["matching"] + residual.square().sum()
        return self

    def _check_same_samples(self, xr: Tensor, yr: Tensor) -> None:
        """Sum this batch's squared channel norms into the second pass's and, once it has seen as
        many samples as the first, compare them with the first pass's: residuals of other samples at
        the first pass's optimum would be a silently wrong distance. The norms are summed in another
        order, so they agree to rounding (rtol 1e-9), not bit for bit."""
        batch_sq = tuple(z.detach().square().sum(0) for z in (xr, yr))
        if self._refined_sq is None:
            self._refined_sq = batch_sq
        else:
            self._refined_sq = tuple(a + b.to(a.device) for a, b in zip(self._refined_sq, batch_sq))
        if self._refined < self.n_samples:
            return
        for side, first, second in zip("XY", (self.x_sq, self.y_sq), self._refined_sq):
            first = first.detach().to(second.device)
            if not torch.allclose(second, first, rtol=1e-9, atol=0.0):
                worst = float(((second - first).abs() / first.abs().clamp_min(1e-300)).max())
                raise ValueError(
                    f"refine() was given other samples than update(): {side}'s channel norms over "
                    f"its {self._refined} samples differ from the first pass's (relative "
                    f"{worst:.1e}); give refine() exactly the batches given to update(), each once "
                    "(in any order)"
                )

    def _refined_residual(self, key: str) -> Tensor | None:
        return self._residuals[key] if self._refined and self._refined == self.n_samples else None

    def _distance_sq(self, measure: str) -> tuple[Tensor, int]:
        """(delta^2, C) of ``measure``'s similarity 1 - delta / (2 sqrt(C)), C = 1 for orthogonal
        Procrustes: the refined residual once ``refine`` has seen every sample, else the closed form."""
        if measure == "grelu_procrustes":
            normalized, rows, cols, _, _ = self._matching()
            delta_sq = self._refined_residual("matching")
            if delta_sq is None:
                # ||X~||^2 + ||Y~||^2 - 2 max_P tr(M~ P): 2C - 2 max tr without dead channels.
                live = (self.x_sq > 0).sum() + (self.y_sq > 0).sum()
                delta_sq = (live - 2.0 * normalized[rows, cols].sum()).clamp_min(0.0)
            return delta_sq, normalized.shape[0]
        M, x_sq, y_sq = self._state("orthogonal_procrustes")
        delta_sq = self._refined_residual("rotation")
        if delta_sq is None:
            nuclear = torch.linalg.svdvals(M).sum() / (x_sq.sum() * y_sq.sum()).sqrt()
            delta_sq = (2.0 - 2.0 * nuclear).clamp_min(0.0)
        return delta_sq, 1

    def _similarity(self, delta_sq: Tensor, c: int) -> Tensor | float:
        return as_result((1.0 - delta_sq.sqrt() / (2.0 * math.sqrt(c))).clamp(0.0, 1.0), self._graph)

    def grelu(self) -> Tensor | float:
        """G_ReLU Procrustes similarity 1 - delta / (2 sqrt(C)); see ``grelu_procrustes``."""
        return self._similarity(*self._distance_sq("grelu_procrustes"))

    def orthogonal(self) -> Tensor | float:
        """Orthogonal Procrustes similarity 1 - sqrt(2 - 2 ||M||_*) / 2; see ``orthogonal_procrustes``."""
        return self._similarity(*self._distance_sq("orthogonal_procrustes"))


# The closed forms' delta^2 carries an absolute error of about 1e-16 times the channel count
# (rounding of the summed cross-products): above this bound that is under 1e-7 of delta, below
# it the one-shot functions make the second pass that sums the residual directly.
_REFINE_BELOW = 1e-6


def _channel_rows(x: Tensor) -> Tensor:
    """(B, C, P) -> (C, B*P) in float64, one copy (the transpose and the conversion together)."""
    if x.requires_grad:
        return x.transpose(0, 1).reshape(x.shape[1], -1).to(F64)
    rows = torch.empty((x.shape[1], x.shape[0], x.shape[2]), dtype=F64, device=x.device)
    return rows.copy_(x.transpose(0, 1)).view(x.shape[1], -1)


def _pad_square(M: Tensor) -> Tensor:
    """M zero-padded to a square matrix."""
    width = max(M.shape)
    return torch.nn.functional.pad(M, (0, width - M.shape[1], 0, width - M.shape[0]))


def _procrustes(X: Tensor, Y: Tensor, max_bytes: int, measure: str) -> Tensor | float:
    """``measure`` of X and Y accumulated over sample batches whose float64 copies stay within
    max_bytes; a second pass where the distance is small enough for the closed form to lose digits."""
    per_sample = (X[0].numel() + Y[0].numel()) * 8
    batch = max(1, check_max_bytes(max_bytes) // per_sample)
    starts = range(0, X.shape[0], batch)
    acc = ProcrustesAccumulator()
    for start in starts:
        acc.update(X[start : start + batch], Y[start : start + batch])
    delta_sq, c = acc._distance_sq(measure)  # a constant representation is an error naming measure
    if float(delta_sq.detach()) < _REFINE_BELOW:
        for start in starts:
            acc.refine(X[start : start + batch], Y[start : start + batch])
        delta_sq, c = acc._distance_sq(measure)
    return acc._similarity(delta_sq, c)


def grelu_procrustes(X: ArrayLike, Y: ArrayLike, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Tensor | float:
    """Procrustes similarity up to G_ReLU, in [0, 1] (1 iff Y = X A with A in G_ReLU).

    Each channel is divided by its norm over samples and positions (no centring); with X~, Y~ the
    (N*H*W, C) matrices, delta = min_P ||X~ - Y~ P||_F over permutation matrices P, found by the
    Hungarian algorithm on M = X~' Y~ (delta^2 = 2C - 2 max_P tr(M P)), and the similarity is
    1 - delta / (2 sqrt(C)). All-zero (dead) channels stay zero and count 0 in place of 1 in 2C.

    Invariance group: G_ReLU acting on the channels of either argument -- permutations times
    positive diagonal scalings -- i.e. f(X A, Y B) = f(X, Y) for A, B in G_ReLU. Symmetric in X, Y.
    Needs equal channel counts and equal spatial shapes; spatial positions are paired, not matched.
    Features are accumulated over sample batches of about ``max_bytes``; when delta^2 < 1e-6 a
    second pass sums the residual at the optimum, so that similarities near 1 keep their digits.

    Differentiable (almost everywhere: the matching is held fixed): with a tensor that requires
    grad it returns a float64 0-d tensor carrying the graph; otherwise a float.

    Parameters
    ----------
    X, Y : Tensor or ndarray, shape (N, C) or (N, C, *spatial)
        The same N inputs through two networks (N x positions >= 2), with equal channel counts and
        equal numbers of spatial positions.
    max_bytes : int
        The memory bound of each block of intermediates.

    Returns
    -------
    float or Tensor
        The similarity in [0, 1]; a float64 0-d tensor on the graph when an input requires grad.
    """
    graph = tracks_graph(X, Y)
    X, Y = check_pair(X, Y, 2, "grelu_procrustes", graph)
    if X.shape[1] != Y.shape[1]:
        raise ValueError(
            f"grelu_procrustes matches channels one to one, so X and Y need the same "
            f"number of channels, got {X.shape[1]} and {Y.shape[1]}"
        )
    return _procrustes(X, Y, max_bytes, "grelu_procrustes")


def orthogonal_procrustes(
    X: ArrayLike, Y: ArrayLike, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> Tensor | float:
    """Orthogonal Procrustes similarity, in [0, 1] (1 iff Y = c X Q with Q orthogonal, c > 0).

    The whole tensor is scaled to unit Frobenius norm (per-channel normalisation would not commute
    with rotations of the channels); with M = X' Y the C x C' cross-product of the (N*H*W, C)
    matrices, min_Q ||X - Y Q||_F^2 = 2 - 2 ||M||_* (nuclear norm), and the similarity is
    1 - sqrt(2 - 2 ||M||_*) / 2. Different channel counts are allowed (the narrower one is
    implicitly zero-padded).

    Invariance group: O(C) acting on the channels of either argument, times positive isotropic
    scaling. Symmetric in X, Y. Not invariant to translation (no centring).

    Accumulated over sample batches; when delta^2 < 1e-6 a second pass sums the residual
    ||X - Y Q*||^2 at the optimal Q* directly, so that similarities near 1 keep their digits
    (sqrt(2 - 2 x) would resolve delta only to about 1e-8). Differentiable: with a
    tensor that requires grad it returns a float64 0-d tensor carrying the graph; otherwise a float.

    Parameters
    ----------
    X, Y : Tensor or ndarray, shape (N, C) or (N, C, *spatial)
        The same N inputs through two networks (N x positions >= 2), with equal numbers of spatial
        positions; channel counts may differ.
    max_bytes : int
        The memory bound of each block of intermediates.

    Returns
    -------
    float or Tensor
        The similarity in [0, 1]; a float64 0-d tensor on the graph when an input requires grad.
    """
    graph = tracks_graph(X, Y)
    X, Y = check_pair(X, Y, 2, "orthogonal_procrustes", graph)
    return _procrustes(X, Y, max_bytes, "orthogonal_procrustes")


class ProcrustesAlignment:
    """Both Procrustes alignments fitted on one split and scored on another (netrep's ``fit`` /
    ``score`` convention): a similarity measured on the data its alignment was fitted to is
    optimistic, the more so the wider the representations are relative to the samples.

    ``fit(X, Y)`` finds the orthogonal Q minimising ||X - Y Q|| (each side scaled to unit norm)
    and the channel matching of G_ReLU Procrustes (channels scaled to unit norm), as the one-shot
    measures do. ``score(X, Y, measure)`` normalises the new X and Y the same way (with their own
    norms: the normalisation is part of the measure, not of the fit) and returns ``1 - ||X~ -
    Y~ A|| / 2`` with the fitted A (over 2 sqrt(C) for G_ReLU). On the fitted data itself the
    score is the one-shot measure.
    """

    def __init__(self) -> None:
        self._fitted: ProcrustesAccumulator | None = None

    def fit(self, X: ArrayLike, Y: ArrayLike) -> ProcrustesAlignment:
        X, Y = check_pair(X, Y, 2, "orthogonal_procrustes")
        self._fitted = ProcrustesAccumulator().update(X, Y)
        self._rotation = self._fitted._rotation()
        square = self._fitted.cross.shape[0] == self._fitted.cross.shape[1]
        self._matching = self._fitted._matching()[1:3] if square else None
        return self

    def score(self, X: ArrayLike, Y: ArrayLike, measure: str = "orthogonal_procrustes") -> float:
        """The ``measure`` ("orthogonal_procrustes" or "grelu_procrustes") of X and Y at the
        fitted alignment, in [0, 1]."""
        if self._fitted is None:
            raise ValueError("ProcrustesAlignment.score before fit: fit(X, Y) on the fitting split first")
        X, Y = check_pair(X, Y, 2, "orthogonal_procrustes")
        xr, yr = _channel_rows(X.reshape(*X.shape[:2], -1)).T, _channel_rows(Y.reshape(*Y.shape[:2], -1)).T
        if (xr.shape[1], yr.shape[1]) != tuple(self._fitted.cross.shape):
            raise ValueError(
                f"score takes the channels fit saw ({tuple(self._fitted.cross.shape)}), got "
                f"{xr.shape[1]} and {yr.shape[1]}"
            )
        if measure == "orthogonal_procrustes":
            width = self._rotation.shape[0]
            pad = torch.nn.functional.pad
            xn, yn = xr / xr.square().sum().sqrt(), yr / yr.square().sum().sqrt()
            residual = pad(xn, (0, width - xn.shape[1])) - pad(yn, (0, width - yn.shape[1])) @ self._rotation
            return float((1.0 - residual.square().sum().sqrt() / 2.0).clamp(0.0, 1.0))
        if measure == "grelu_procrustes":
            if self._matching is None:
                raise ValueError("grelu_procrustes matches channels one to one: X and Y need as many")
            rows, cols = self._matching
            norms = [torch.where(z > 0, z, 1.0).sqrt() for z in (xr.square().sum(0), yr.square().sum(0))]
            residual = (xr / norms[0])[:, rows] - (yr / norms[1])[:, cols]
            c = xr.shape[1]
            return float((1.0 - residual.square().sum().sqrt() / (2.0 * math.sqrt(c))).clamp(0.0, 1.0))
        raise ValueError(f"measure must be orthogonal_procrustes or grelu_procrustes, got {measure!r}")
