"""CKA measures: G_ReLU-CKA (max kernel), linear, Laplace, RBF, gate CKA, the released code's
channel-normalised linear CKA, CKA of given kernels, and linear CKA streamed over batches.

Every CKA takes ``estimator``: ``"unbiased"`` (Song et al.'s HSIC_1, the default, which the
similarity stage uses) or ``"biased"`` (HSIC_0 = tr(K H L H) / (n - 1)^2, Gretton et al. 2005; the
estimator of Kornblith et al. 2019's published numbers, positive on unrelated representations)."""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from intertwine.measures._base import (
    DEFAULT_MAX_BYTES,
    F64,
    ArrayLike,
    ConstantRepresentationError,
    as_features,
    as_result,
    channel_major,
    channel_normalize,
    check_pair,
    constant_message,
    constant_side,
    flatten_centered,
    merged_ranges,
    normalize_channels_,
    pow2_scale,
    require_variation,
    rescaled_exactly,
    rows_per_block,
    tracks_graph,
)
from intertwine.measures.hsic import as_kernel, check_estimator, cka, cka_from_hsic
from intertwine.measures.kernels import laplace_kernel, linear_gram, max_kernel_of, rbf_kernel
from intertwine.measures.names import CKA_MEASURES, too_few_samples

# ---------------------------------------------------------------------------
# CKA measures
# ---------------------------------------------------------------------------


def grelu_cka(
    X: ArrayLike, Y: ArrayLike, *, estimator: str = "unbiased", max_bytes: int = DEFAULT_MAX_BYTES
) -> float:
    """CKA with the max kernel, invariant to G_ReLU (paper, section 5).

    Each channel is centred (mean over samples and positions) and scaled to unit norm; then
    U_mnc = sum_{h,w} X_mchw X_nchw, K_mn = max_c U_mnc, likewise L from Y, and
    CKA = HSIC1(K, L) / sqrt(HSIC1(K, K) HSIC1(L, L)) with the unbiased HSIC_1. Channel counts
    may differ; N >= 4.

    Invariance group: per-channel translations and G_ReLU on the channels of either argument;
    since U is quadratic in each channel, any monomial matrix (signed permutation times nonzero
    diagonal) in fact. Symmetric in X, Y.

    Memory: see ``max_kernel``. Beside the inputs and the two N x N kernels it holds one
    normalised channel-major copy of one input at a time and a product block of at most
    ``max_bytes``.

    Parameters
    ----------
    X, Y : Tensor or ndarray, shape (N, C) or (N, C, *spatial)
        The same N >= 4 inputs through two networks; channel counts and spatial shapes may differ.
    estimator : {"unbiased", "biased"}
        The HSIC estimator: Song et al.'s HSIC_1, or Gretton et al.'s HSIC_0.
    max_bytes : int
        The memory bound of each block of intermediates.

    Returns
    -------
    float
        The CKA, at most 1 (slightly negative possible with the unbiased estimator).
    """
    X, Y = check_pair(X, Y, 4, "grelu_cka")
    require_variation(X, "X", "grelu_cka"), require_variation(Y, "Y", "grelu_cka")
    kernels = []
    for Z in (X, Y):
        # Normalised in place on the channel-major copy the blocked products need: one copy of Z.
        Zc = normalize_channels_(channel_major(Z), center=True, channel_axis=0)
        kernels.append(max_kernel_of(Zc, "auto", max_bytes))
        del Zc
    return float(cka(*kernels, max_bytes, estimator))


def _feature_cross(A: Tensor, B: Tensor, max_bytes: int) -> Tensor:
    """||A'B||_F^2 in float64, summed over column blocks of A."""
    cols = rows_per_block(B.shape[1], 8 + B.element_size(), max_bytes)
    return sum(
        (A[:, start : start + cols].T @ B).to(F64).square().sum() for start in range(0, A.shape[1], cols)
    )


def linear_hsic_features(A: Tensor, B: Tensor, max_bytes: int) -> Tensor:
    """HSIC1(A A', B B') without forming the N x N Gram matrices: O(N D D') instead of O(N^2 D).

    tr(K~ L~) = ||A'B||_F^2 - sum_i K_ii L_ii and K~ 1 = A (A' 1) - diag K, so every term of the
    unbiased estimator is a feature-space product; ||A'B||_F^2 is summed over column blocks of A.
    """
    n = A.shape[0]
    dk = torch.linalg.vector_norm(A, dim=1).to(F64).square()
    dl = torch.linalg.vector_norm(B, dim=1).to(F64).square()
    cols = rows_per_block(B.shape[1], 8 + B.element_size(), max_bytes)
    cross = sum(
        (A[:, start : start + cols].T @ B).to(F64).square().sum() for start in range(0, A.shape[1], cols)
    )
    rk = (A @ A.sum(0)).to(F64) - dk
    rl = (B @ B.sum(0)).to(F64) - dl
    trace = cross - torch.dot(dk, dl)
    value = trace + rk.sum() * rl.sum() / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * torch.dot(rk, rl)
    return value / (n * (n - 3))


def gate_indicators(X: Tensor) -> Tensor:
    return (X > 0).to(X.dtype if X.is_floating_point() else torch.float64)


def gate_cka(
    X: ArrayLike, Y: ArrayLike, *, estimator: str = "unbiased", max_bytes: int = DEFAULT_MAX_BYTES
) -> float:
    """Linear CKA of the gates ``1{X > 0}`` and ``1{Y > 0}`` flattened over channels and positions
    (unbiased HSIC_1): the CKA of the gate kernels G G^T of gated-network theory. Channel counts may
    differ; N >= 4; a site whose gates are the same for every input is a ConstantRepresentationError.

    Invariance group: G_ReLU on the channels of either argument (and any map that keeps each
    unit's sign pattern); not orthogonal maps. Symmetric in X, Y.

    Parameters
    ----------
    X, Y : Tensor or ndarray, shape (N, C) or (N, C, *spatial)
        The same N >= 4 inputs through two networks; channel counts and spatial shapes may differ.
    estimator : {"unbiased", "biased"}
        The HSIC estimator: Song et al.'s HSIC_1, or Gretton et al.'s HSIC_0.
    max_bytes : int
        The memory bound of each block of intermediates.

    Returns
    -------
    float
        The CKA of the gate patterns, at most 1.
    """
    X, Y = check_pair(X, Y, 4, "gate_cka")
    GX, GY = gate_indicators(X), gate_indicators(Y)
    require_variation(GX, "X", "gate_cka"), require_variation(GY, "Y", "gate_cka")
    return float(_linear_cka(GX, GY, "auto", max_bytes, estimator))


def _linear_cka(X: Tensor, Y: Tensor, method: str, max_bytes: int, estimator: str = "unbiased") -> Tensor:
    # Linear CKA with the unbiased HSIC is translation-invariant; centring the features first only
    # keeps the float sums small. The biased HSIC of centred features is ||A'B||_F^2 / (n - 1)^2.
    check_estimator(estimator)
    A, B = flatten_centered(X), flatten_centered(Y)
    n, d, e = A.shape[0], A.shape[1], B.shape[1]
    if method == "auto":
        method = "features" if n * (d * d + e * e + d * e) <= n * n * (d + e) else "gram"
    if method == "gram":
        return cka(linear_gram(A), linear_gram(B), max_bytes, estimator)
    if method == "features" and estimator == "biased":
        return cka_from_hsic(
            _feature_cross(A, B, max_bytes),
            _feature_cross(A, A, max_bytes),
            _feature_cross(B, B, max_bytes),
            float(torch.linalg.vector_norm(A.detach(), dim=1).max()) ** 2,
            float(torch.linalg.vector_norm(B.detach(), dim=1).max()) ** 2,
        )
    if method == "features":
        # max_i ||a_i||^2 bounds every entry of the Gram matrix A A' (Cauchy-Schwarz).
        return cka_from_hsic(
            linear_hsic_features(A, B, max_bytes),
            linear_hsic_features(A, A, max_bytes),
            linear_hsic_features(B, B, max_bytes),
            float(torch.linalg.vector_norm(A.detach(), dim=1).max()) ** 2,
            float(torch.linalg.vector_norm(B.detach(), dim=1).max()) ** 2,
        )
    raise ValueError(f"method must be 'auto', 'gram' or 'features', got {method!r}")


def linear_cka(
    X: ArrayLike,
    Y: ArrayLike,
    *,
    method: Literal["auto", "gram", "features"] = "auto",
    estimator: str = "unbiased",
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> float:
    """Linear CKA (Kornblith et al. 2019) on the flattened features (N, C*H*W), unbiased HSIC_1.

    No per-channel normalisation. ``method="gram"`` forms the N x N Gram matrices (cheaper when
    C*H*W > N), ``"features"`` works with the D x D' cross-products in column blocks (cheaper
    and N x N-free when C*H*W < N); ``"auto"`` picks the cheaper. Channel counts may differ; N >= 4.

    Invariance group: orthogonal transformations of the flattened features (in particular O(C)
    on the channels), isotropic scaling and translation, of either argument. Symmetric in X, Y.

    Differentiable: with a tensor that requires grad it returns a float64 0-d tensor carrying the
    graph (a training loss); otherwise a float.

    Parameters
    ----------
    X, Y : Tensor or ndarray, shape (N, C) or (N, C, *spatial)
        The same N >= 4 inputs through two networks; channel counts and spatial shapes may differ.
    method : {"auto", "gram", "features"}
        How the HSICs are computed (above).
    estimator : {"unbiased", "biased"}
        The HSIC estimator: Song et al.'s HSIC_1, or Gretton et al.'s HSIC_0.
    max_bytes : int
        The memory bound of each block of intermediates.

    Returns
    -------
    float or Tensor
        The CKA, at most 1; a float64 0-d tensor on the graph when an input requires grad.
    """
    graph = tracks_graph(X, Y)
    X, Y = check_pair(X, Y, 4, "linear_cka", graph)
    require_variation(X, "X", "linear_cka"), require_variation(Y, "Y", "linear_cka")
    return as_result(_linear_cka(X, Y, method, max_bytes, estimator), graph)


def channel_normalized_linear_cka(
    X: ArrayLike,
    Y: ArrayLike,
    *,
    method: Literal["auto", "gram", "features"] = "auto",
    estimator: str = "unbiased",
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> float:
    """Linear CKA after centring each channel and scaling it to unit norm, the variant the paper's
    released code reported as "linear CKA". Kept to compare with published figures.

    Invariance group: per-channel translations and G_ReLU (indeed any monomial matrix) on the
    channels, isotropic scaling; unlike ``linear_cka`` not O(C). Symmetric in X, Y.

    Parameters
    ----------
    X, Y : Tensor or ndarray, shape (N, C) or (N, C, *spatial)
        The same N >= 4 inputs through two networks; channel counts and spatial shapes may differ.
    method : {"auto", "gram", "features"}
        How the HSICs are computed, as in ``linear_cka``.
    estimator : {"unbiased", "biased"}
        The HSIC estimator: Song et al.'s HSIC_1, or Gretton et al.'s HSIC_0.
    max_bytes : int
        The memory bound of each block of intermediates.

    Returns
    -------
    float
        The CKA, at most 1.
    """
    X, Y = check_pair(X, Y, 4, "channel_normalized_linear_cka")
    for Z, which in ((X, "X"), (Y, "Y")):
        require_variation(Z, which, "channel_normalized_linear_cka")
    X, Y = channel_normalize(X, True), channel_normalize(Y, True)
    return float(_linear_cka(X, Y, method, max_bytes, estimator))


def laplace_cka(
    X: ArrayLike,
    Y: ArrayLike,
    bandwidth: float | tuple[float, float] | None = None,
    *,
    estimator: str = "unbiased",
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> float:
    """CKA with the Laplace kernel exp(-||x - y||_1 / bandwidth) on channel-normalised features.

    Each channel is centred and scaled to unit norm (over samples and positions), the features are
    flattened to (N, C*H*W) and compared by L1 distance. ``bandwidth`` is one value for both
    kernels, a pair (X's, Y's), or None for the median heuristic: the median of the pairwise
    distances d(x_i, x_j), i < j, of each representation. The kernel is positive definite (a
    product of one-dimensional Laplace kernels). Cost O(N^2 C H W) without BLAS (torch.cdist).

    Invariance group: per-channel translations and G_ReLU on the channels (the normalisation
    removes the scales, the L1 norm ignores the order of coordinates; also channel sign flips),
    of either argument. Symmetric in X, Y.

    Parameters
    ----------
    X, Y : Tensor or ndarray, shape (N, C) or (N, C, *spatial)
        The same N >= 4 inputs through two networks; channel counts and spatial shapes may differ.
    bandwidth : float or tuple of float, optional
        One bandwidth for both kernels, or (X's, Y's); None (the default): the median heuristic.
    estimator : {"unbiased", "biased"}
        The HSIC estimator: Song et al.'s HSIC_1, or Gretton et al.'s HSIC_0.
    max_bytes : int
        The memory bound of each block of intermediates.

    Returns
    -------
    float
        The CKA, at most 1.
    """
    X, Y = check_pair(X, Y, 4, "laplace_cka")
    require_variation(X, "X", "laplace_cka"), require_variation(Y, "Y", "laplace_cka")
    bx, by = bandwidth if isinstance(bandwidth, tuple) else (bandwidth, bandwidth)
    K = laplace_kernel(channel_normalize(X, True).reshape(X.shape[0], -1), bx, max_bytes)
    L = laplace_kernel(channel_normalize(Y, True).reshape(Y.shape[0], -1), by, max_bytes)
    return float(cka(K, L, max_bytes, estimator))


# Kornblith et al.'s example fraction of the median distance; also cka_kernel's for rbf_cka.
_RBF_BANDWIDTH_FRACTION = 0.5


def rbf_cka(
    X: ArrayLike,
    Y: ArrayLike,
    *,
    bandwidth_fraction: float = _RBF_BANDWIDTH_FRACTION,
    estimator: str = "unbiased",
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Tensor | float:
    """CKA with the Gaussian (RBF) kernel exp(-||x_i - x_j||^2 / (2 sigma^2)) on the flattened
    features (N, C*H*W) (Kornblith et al. 2019, section 3), unbiased HSIC_1; N >= 4.

    Bandwidth: sigma^2 = ``bandwidth_fraction``^2 times the median squared distance between
    distinct samples of that representation (pairs i < j), i.e. sigma is that fraction of the
    median distance; Kornblith et al. report fractions 0.2-0.8 and their code's example uses 0.5,
    the default here. Their code takes the median over all N^2 entries, the N zeros of the
    diagonal included, which lowers it slightly and shifts with N; here the diagonal is left out.

    Invariance group: orthogonal transformations of the flattened features, isotropic scaling (the
    bandwidth scales with the distances) and translation, of either argument. Symmetric in X, Y.

    Differentiable: with a tensor that requires grad it returns a float64 0-d tensor carrying the
    graph (the median too: it is one or two of the distances); otherwise a float.

    Parameters
    ----------
    X, Y : Tensor or ndarray, shape (N, C) or (N, C, *spatial)
        The same N >= 4 inputs through two networks; channel counts and spatial shapes may differ.
    bandwidth_fraction : float
        sigma as a fraction of the median distance, > 0.
    estimator : {"unbiased", "biased"}
        The HSIC estimator: Song et al.'s HSIC_1, or Gretton et al.'s HSIC_0.
    max_bytes : int
        The memory bound of each block of intermediates.

    Returns
    -------
    float or Tensor
        The CKA, at most 1; a float64 0-d tensor on the graph when an input requires grad.
    """
    graph = tracks_graph(X, Y)
    X, Y = check_pair(X, Y, 4, "rbf_cka", graph)
    require_variation(X, "X", "rbf_cka"), require_variation(Y, "Y", "rbf_cka")
    K = rbf_kernel(X.reshape(X.shape[0], -1), bandwidth_fraction)
    L = rbf_kernel(Y.reshape(Y.shape[0], -1), bandwidth_fraction)
    return as_result(cka(K, L, max_bytes, estimator), graph)


def cka_kernel(measure: str, X: ArrayLike, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Tensor:
    """The N x N kernel a CKA measure computes from one representation, so that
    ``kernel_cka(cka_kernel(m, X), cka_kernel(m, Y)) == m(X, Y)`` for m in ``CKA_MEASURES``.

    Comparing every site of one model with every site of another (the CKA heatmaps) then costs
    one kernel per site instead of one per site pair. ``laplace_cka`` and ``rbf_cka`` use their
    default (median) bandwidths.

    Parameters
    ----------
    measure : str
        A name of ``CKA_MEASURES``.
    X : Tensor or ndarray, shape (N, C) or (N, C, *spatial)
        One representation of N >= 4 inputs.
    max_bytes : int
        The memory bound of each block of intermediates.

    Returns
    -------
    Tensor, shape (N, N)
        The kernel, in X's floating dtype (float64 for integer input), on its device.
    """
    X = rescaled_exactly(as_features(X, "X"))
    if measure not in CKA_MEASURES:
        raise ValueError(f"unknown CKA measure {measure!r}; expected one of {CKA_MEASURES}")
    if too_few_samples(measure, X.shape[0]):
        raise ValueError(too_few_samples(measure, X.shape[0]))
    require_variation(X, "X", measure)
    if measure == "grelu_cka":
        Xc = normalize_channels_(channel_major(X), center=True, channel_axis=0)
        return max_kernel_of(Xc, "auto", max_bytes)
    if measure == "linear_cka":
        return linear_gram(flatten_centered(X))
    if measure == "channel_normalized_linear_cka":
        return linear_gram(flatten_centered(channel_normalize(X, True)))
    if measure == "gate_cka":
        G = gate_indicators(X)
        require_variation(G, "X", measure)
        return linear_gram(flatten_centered(G))
    if measure == "laplace_cka":
        return laplace_kernel(channel_normalize(X, True).reshape(X.shape[0], -1), None, max_bytes)
    if measure == "rbf_cka":
        return rbf_kernel(X.reshape(X.shape[0], -1), _RBF_BANDWIDTH_FRACTION)
    raise ValueError(f"unknown CKA measure {measure!r}; expected one of {CKA_MEASURES}")


def kernel_cka(
    K: ArrayLike, L: ArrayLike, *, estimator: str = "unbiased", max_bytes: int = DEFAULT_MAX_BYTES
) -> float:
    """CKA of two N x N kernels with the unbiased HSIC_1: HSIC1(K, L) / sqrt(HSIC1(K, K) HSIC1(L, L)).

    Differentiable: with a kernel that requires grad it returns a float64 0-d tensor carrying the
    graph; otherwise a float.

    Parameters
    ----------
    K, L : Tensor or ndarray, shape (N, N)
        The kernels of two representations of the same N >= 4 inputs, finite.
    estimator : {"unbiased", "biased"}
        The HSIC estimator: Song et al.'s HSIC_1, or Gretton et al.'s HSIC_0.
    max_bytes : int
        The memory bound of each block of intermediates.

    Returns
    -------
    float or Tensor
        The CKA, at most 1; a float64 0-d tensor on the graph when a kernel requires grad.
    """
    graph = tracks_graph(K, L)
    K, L = as_kernel(K, "K", graph), as_kernel(L, "L", graph)
    return as_result(cka(K, L.to(K.device), max_bytes, estimator), graph)


# ---------------------------------------------------------------------------
# Streaming: linear CKA accumulated over batches
# ---------------------------------------------------------------------------


class LinearCKAAccumulator:
    """Linear CKA (unbiased HSIC_1) of paired batches, accumulated exactly, in float64.

    Every term of the unbiased estimator on features a_i, b_i (flattened) is a sum over samples
    of feature-space products: tr(K~ L~) = ||A'B||^2 - sum_i |a_i|^2 |b_i|^2, and with s = sum_i a_i
    the Gram row sums are a_i . s - |a_i|^2, so sum_i r_i r'_i needs s' A'B s', A' diag|b|^2 and
    the like. The state is the D x D', D x D and D' x D' cross-products and a few vectors: memory
    8 (D + D')^2 bytes, independent of N. Batches are shifted by the first batch's means (the
    estimator ignores translations; the sums stay small).
    """

    def __init__(self) -> None:
        self.n_samples = 0
        self._shift: tuple[Tensor, Tensor] | None = None
        self._sums: dict[str, Tensor] = {}
        self._ranges: list[Tensor] = []
        self._largest = [0.0, 0.0]  # max_i |a_i|^2, max_i |b_i|^2: bounds of the Gram entries
        self._scales: tuple[float, float] | None = None  # each side's divisor, set by the first batch

    def update(self, x: ArrayLike, y: ArrayLike) -> LinearCKAAccumulator:
        x, y = check_pair(x, y, 1, "linear_cka", rescale=False)
        A, B = x.reshape(len(x), -1).to(F64), y.reshape(len(y), -1).to(F64)
        # Rescale before squaring: the sums hold fourth powers, so each side is divided by one
        # power of two for every batch (the first batch's, where those would overflow or underflow).
        if self._scales is None:
            self._scales = tuple(
                1.0 if rescaled_exactly(z, 4) is z else pow2_scale(float(z.abs().max())) for z in (A, B)
            )
        A, B = A / self._scales[0], B / self._scales[1]
        if self._shift is None:
            self._shift = A.mean(0), B.mean(0)
        elif (A.shape[1], B.shape[1]) != (len(self._shift[0]), len(self._shift[1])):
            raise ValueError(
                f"batch feature sizes ({A.shape[1]}, {B.shape[1]}) differ from earlier batches' "
                f"({len(self._shift[0])}, {len(self._shift[1])})"
            )
        A, B = A - self._shift[0], B - self._shift[1]
        da, db = A.square().sum(1), B.square().sum(1)
        terms = {
            "ab": A.T @ B, "aa": A.T @ A, "bb": B.T @ B, "a": A.sum(0), "b": B.sum(0),
            "a_da": A.T @ da, "a_db": A.T @ db, "b_da": B.T @ da, "b_db": B.T @ db,
            "da": da.sum(), "db": db.sum(), "da_db": da @ db, "da_da": da @ da, "db_db": db @ db,
        }  # fmt: skip
        for key, value in terms.items():
            self._sums[key] = self._sums[key] + value if key in self._sums else value
        self._ranges = merged_ranges(self._ranges, x, y)
        self._largest = [max(self._largest[0], float(da.max())), max(self._largest[1], float(db.max()))]
        self.n_samples += len(x)
        return self

    def _hsic(self, cross: str, a: str, b: str, a_db: str, b_da: str, da: str, db: str, da_db: str) -> Tensor:
        S, n = self._sums, self.n_samples
        trace = S[cross].square().sum() - S[da_db]
        row_a, row_b = S[a] @ S[a] - S[da], S[b] @ S[b] - S[db]
        rows = S[a] @ S[cross] @ S[b] - S[a] @ S[a_db] - S[b] @ S[b_da] + S[da_db]
        return (trace + row_a * row_b / ((n - 1) * (n - 2)) - 2.0 / (n - 2) * rows) / (n * (n - 3))

    def value(self) -> float:
        """The linear CKA of everything accumulated; see ``linear_cka``."""
        if too_few_samples("linear_cka", self.n_samples):
            raise ValueError(too_few_samples("linear_cka", self.n_samples))
        which = constant_side(self._ranges, self.n_samples)
        if which:
            raise ConstantRepresentationError(constant_message(which, self.n_samples, "linear_cka"), which)
        kl = self._hsic("ab", "a", "b", "a_db", "b_da", "da", "db", "da_db")
        kk = self._hsic("aa", "a", "a", "a_da", "a_da", "da", "da", "da_da")
        ll = self._hsic("bb", "b", "b", "b_db", "b_db", "db", "db", "db_db")
        return float(cka_from_hsic(kl, kk, ll, *self._largest))
