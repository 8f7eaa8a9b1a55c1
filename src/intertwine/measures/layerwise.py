"""Many layers at once: the matrix of a measure between two lists of layers, each layer's work done
once."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial

import numpy as np
import torch
from torch import Tensor

from intertwine.measures._base import (
    DEFAULT_MAX_BYTES,
    F64,
    ArrayLike,
    ConstantRepresentationError,
    as_features,
    channel_normalize,
    flatten_centered,
    require_variation,
    rescaled_exactly,
    rows_per_block,
)
from intertwine.measures.cca import compare_pwcca, compare_svcca, prepare_pwcca, prepare_svcca
from intertwine.measures.cka import cka_kernel, gate_indicators, linear_hsic_features
from intertwine.measures.hsic import cka_from_hsic, offdiagonal_row_sums, u_centered_rows
from intertwine.measures.kernels import linear_gram
from intertwine.measures.names import CKA_MEASURES, too_few_samples
from intertwine.measures.registry import MEASURES
from intertwine.measures.shape import compare_shape_metric, prepare_shape_metric

# ---------------------------------------------------------------------------
# Many layers at once
# ---------------------------------------------------------------------------

# Measures whose CKA is linear in features after a transformation: for these a layer keeps its
# centred features (N, D) when D is at most N, its Gram matrix otherwise.
_LINEAR_TRANSFORMS: dict[str, Callable[[Tensor], Tensor]] = {
    "linear_cka": lambda X: X,
    "channel_normalized_linear_cka": lambda X: channel_normalize(X, True),
    "gate_cka": gate_indicators,
}
# pwcca takes its weights from one side; every other measure is symmetric in its arguments.
_ASYMMETRIC = ("pwcca",)


class _CKALayer:
    """One representation's share of every CKA it takes part in: its centred features A (N, D),
    or its U-centred N x N kernel (``u_centered_rows``, stored in the kernel's dtype, in place of
    the kernel); and HSIC1 with itself and a bound of the kernel's entries (``cka_from_hsic``)."""

    def __init__(self, features: Tensor | None, kernel: Tensor | None, max_bytes: int) -> None:
        self.features, self.centered = features, None
        if kernel is None:
            self.self_hsic = linear_hsic_features(features, features, max_bytes)
            self.scale = float(torch.linalg.vector_norm(features, dim=1).max()) ** 2
        else:
            self.scale = float(kernel.abs().max())
            self._center(kernel, max_bytes)

    def _center(self, kernel: Tensor, max_bytes: int) -> None:
        """U-centre ``kernel`` in place, row block by row block (a block needs only its own rows
        and the row sums), and sum HSIC1(K, K) from the float64 blocks."""
        n = len(kernel)
        rows = rows_per_block(n, 4 * 8, max_bytes)
        row_sums = offdiagonal_row_sums(kernel, rows)
        total, squares = row_sums.sum(), torch.zeros((), dtype=F64, device=kernel.device)
        for start in range(0, n, rows):
            block = u_centered_rows(kernel, start, min(n, start + rows), row_sums, total)
            squares = squares + block.square().sum()
            kernel[start : start + rows] = block
        self.centered, self.self_hsic = kernel, squares / (n * (n - 3))

    @property
    def width(self) -> int | None:
        """D of a layer that keeps its features, None for a kernel layer."""
        return None if self.features is None else self.features.shape[1]

    def use_gram(self, max_bytes: int) -> None:
        """Keep the U-centred Gram matrix of A instead of A (HSIC1 with itself is unchanged)."""
        self._center(linear_gram(self.features), max_bytes)
        self.features = None


def _u_dot(a: _CKALayer, b: _CKALayer, max_bytes: int) -> Tensor:
    """sum_ij U(K)_ij U(L)_ij of two kernel layers, in float64 over row blocks."""
    n = len(a.centered)
    rows = rows_per_block(n, 3 * 8, max_bytes)
    blocks = (
        (a.centered[start : start + rows].to(F64) * b.centered[start : start + rows].to(F64)).sum()
        for start in range(0, n, rows)
    )
    return sum(blocks, torch.zeros((), dtype=F64, device=a.centered.device))


def _u_dot_features(features: _CKALayer, kernel: _CKALayer, max_bytes: int) -> Tensor:
    """sum_ij U(A A')_ij U(L)_ij = tr(A' U(L) A): U(L) has zero row sums and diagonal, so the
    U-centring of A A' adds nothing to the product (Szekely & Rizzo 2014). O(N^2 D) for A (N, D)."""
    A, L = features.features.to(F64), kernel.centered
    n = len(L)
    rows = rows_per_block(n, 2 * 8, max_bytes)
    blocks = (
        ((L[start : start + rows].to(F64) @ A) * A[start : start + rows]).sum() for start in range(0, n, rows)
    )
    return sum(blocks, torch.zeros((), dtype=F64, device=L.device))


def _cka_of_layers(a: _CKALayer, b: _CKALayer, max_bytes: int) -> float:
    n = len(a.features if a.centered is None else a.centered)
    if a.centered is None and b.centered is None:
        cross = linear_hsic_features(a.features, b.features, max_bytes)
    elif a.centered is not None and b.centered is not None:
        cross = _u_dot(a, b, max_bytes) / (n * (n - 3))
    else:
        features, kernel = (a, b) if a.centered is None else (b, a)
        cross = _u_dot_features(features, kernel, max_bytes) / (n * (n - 3))
    return float(cka_from_hsic(cross, a.self_hsic, b.self_hsic, a.scale, b.scale))


def _pair_cost(n: int, a: int | None, b: int | None) -> int:
    """Rough operation count of one CKA pair: D x D' cross-products of features, tr(A' U(L) A)
    for features with a kernel, or a blocked pass over two N x N kernels (None: a kernel layer)."""
    if a is not None and b is not None:
        return n * a * b
    return n * n + n * n * (a or b or 0)


def _choose_grams(layers: list[_CKALayer], partners: list[list[_CKALayer]], n: int, max_bytes: int) -> None:
    """Turn into Gram layers the feature layers wider than the threshold that minimises the total
    operation count of every pair (building a Gram costs N^2 D once; see ``_pair_cost``)."""
    widths = sorted({layer.width for layer in layers if layer.width is not None})
    if not widths:
        return

    def total(threshold: int) -> int:
        width = {
            id(layer): (None if w is not None and w > threshold else w)
            for layer in layers
            for w in [layer.width]
        }
        build = sum(
            n * n * layer.width for layer in layers if layer.width is not None and layer.width > threshold
        )
        return build + sum(
            _pair_cost(n, width[id(a)], width[id(b)]) for a, others in zip(layers, partners) for b in others
        )

    best = min([0, *widths], key=total)
    for layer in layers:
        if layer.width is not None and layer.width > best:
            layer.use_gram(max_bytes)


def _prepare_cka(measure: str, X: Tensor, max_bytes: int) -> _CKALayer:
    if measure in _LINEAR_TRANSFORMS:
        Z = _LINEAR_TRANSFORMS[measure](rescaled_exactly(X))
        require_variation(Z, "X", measure)
        A = flatten_centered(Z)
        if A.shape[1] <= A.shape[0]:
            return _CKALayer(A, None, max_bytes)
        return _CKALayer(None, linear_gram(A), max_bytes)
    return _CKALayer(None, cka_kernel(measure, X, max_bytes=max_bytes), max_bytes)


def _preparer(measure: str, max_bytes: int) -> tuple[Callable, Callable]:
    """(prepare, compare) for a measure: per-representation work and the pair's."""
    if measure in CKA_MEASURES:
        return partial(_prepare_cka, measure, max_bytes=max_bytes), partial(
            _cka_of_layers, max_bytes=max_bytes
        )
    if measure in PREPARED:
        return PREPARED[measure]
    # Procrustes: the pair's cross-product is the work; nothing to share.
    return (lambda X: X), partial(MEASURES[measure], max_bytes=max_bytes)


def pairwise(
    measure: str,
    xs: Iterable[ArrayLike],
    ys: Iterable[ArrayLike] | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> np.ndarray:
    """The (len(xs), len(ys)) matrix of ``measure`` between each representation of ``xs`` and each
    of ``ys`` (``ys`` omitted: ``xs`` with itself), all on the same N samples; widths and spatial
    shapes may differ (the Procrustes measures need equal spatial shapes, and ``grelu_procrustes``
    equal widths, for each pair).

    ``xs`` and ``ys`` may be generators: each representation is prepared as it comes, and its
    activations need not outlive that. Per-layer work is done once per layer, not once per pair:
    a kernel CKA layer keeps its U-centred N x N kernel (in place of the kernel) and HSIC1(K, K),
    so that a pair is one pass over two matrices; a linear CKA layer (linear, channel-normalised,
    gate) keeps its centred features (N, D), paired through D x D' cross-products, or its U-centred
    Gram matrix, whichever makes the whole matrix cheaper (a threshold on D chosen from every
    pair's operation count; a feature layer pairs with a Gram layer as tr(A' U(L) A)); the CCA and
    shape measures keep their SVDs (``measures.cca``, ``measures.shape``). Values equal the single-pair
    measure's within rounding. Not differentiable: the entries are floats.

    Parameters
    ----------
    measure : str
        A name of ``MEASURES``.
    xs : iterable of Tensor or ndarray
        Representations, each (N, C) or (N, C, *spatial), of the same N inputs; at least one.
    ys : iterable of Tensor or ndarray, optional
        More representations of the same inputs; None (the default): ``xs`` with itself.
    max_bytes : int
        The memory bound of each block of intermediates.

    Returns
    -------
    ndarray, shape (len(xs), len(ys))
        Entry (i, j) is ``measure(xs[i], ys[j])``, float64.
    """
    if measure not in MEASURES:
        raise ValueError(f"unknown measure {measure!r}; expected one of {sorted(MEASURES)}")
    symmetric = ys is None and measure not in _ASYMMETRIC
    prepare, compare = _preparer(measure, max_bytes)
    prepared: dict[str, list] = {}
    samples: set[int] = set()
    for side, layers in ({"xs": xs} if ys is None else {"xs": xs, "ys": ys}).items():
        prepared[side] = []
        for i, layer in enumerate(layers):
            X = as_features(layer, f"{side}[{i}]")
            samples.add(len(X))
            if len(samples) > 1:
                raise ValueError(
                    f"every representation must hold the same samples, got N = {sorted(samples)}"
                )
            if too_few_samples(measure, len(X), X.shape[2]):
                raise ValueError(too_few_samples(measure, len(X), X.shape[2]))
            try:
                prepared[side].append(prepare(X))
            except ConstantRepresentationError as err:
                raise ConstantRepresentationError(f"{side}[{i}]: {err}", side, index=i) from None
        if not prepared[side]:
            raise ValueError(f"pairwise needs at least one representation in {side}")
    px, py = prepared["xs"], prepared.get("ys", prepared["xs"])
    if measure in _LINEAR_TRANSFORMS:
        # Which linear layers pair best through their Gram matrices depends on all of them.
        everyone = px if ys is None else px + py
        partners = [py] * len(px) if ys is None else [py] * len(px) + [px] * len(py)
        _choose_grams(everyone, partners, samples.pop(), max_bytes)
    matrix = np.empty((len(px), len(py)))
    for i, a in enumerate(px):
        for j, b in enumerate(py):
            if symmetric and j < i:
                matrix[i, j] = matrix[j, i]
                continue
            try:
                matrix[i, j] = compare(a, b)
            except ValueError as err:
                raise type(err)(f"xs[{i}] and {'ys' if ys is not None else 'xs'}[{j}]: {err}") from None
    return matrix


# (prepare, compare) of the CCA and shape measures: per-representation work and the pair's.
PREPARED = {
    "svcca": (prepare_svcca, compare_svcca),
    "pwcca": (prepare_pwcca, compare_pwcca),
    "shape_angular": (prepare_shape_metric, partial(compare_shape_metric, score="angular")),
    "shape_euclidean": (prepare_shape_metric, partial(compare_shape_metric, score="euclidean")),
}
