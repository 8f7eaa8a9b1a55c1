"""The zoo as a whole: one measure between every pair of K representations of the same inputs as a
K x K distance matrix, an embedding of the zoo in a few dimensions (classical multidimensional
scaling), and the zoo's Procrustes mean where the measure has one.

The distance matrix and the mean follow netrep (Williams, Kunz, Kornblith & Linderman, "Generalized
Shape Metrics on Neural Representations", NeurIPS 2021): ``pairwise_distances`` is netrep's
``pairwise_distances`` for any measure of ``MEASURES``, and ``procrustes_mean`` its
``procrustes_average``, the point that minimises the sum of squared distances to the members,
found by aligning every member to the current average and averaging again.

Every measure becomes a distance (0 for a representation with itself; ``DISTANCE_FORMS`` says how):

* the Procrustes similarities s = 1 - delta / 2 (``orthogonal_procrustes``) and
  1 - delta / (2 sqrt(C)) (``grelu_procrustes``): 2 (1 - s), the Procrustes distance delta between
  the normalised representations (over sqrt(C) for G_ReLU), in [0, 2];
* the CKAs: arccos(CKA), in [0, pi]: the unbiased HSIC_1 is the Frobenius inner product of the
  U-centred kernels (Szekely & Rizzo 2014), so CKA is the cosine of the angle between them (near
  0 the angle is sqrt(2 e) for a CKA of 1 - e: float32 activations' rounding of 1e-8 in CKA is an
  angle of 1e-4);
* SVCCA: 1 - SVCCA; PWCCA (weighted by one side): 1 - the mean of both directions;
* the shape distances (``shape_angular``, ``shape_euclidean``): themselves.

``METRICS`` are the measures whose distance satisfies the triangle inequality on representations
(modulo the measure's invariances): the angle and chord distances above, pulled back from a
sphere or a quotient of a Euclidean space by a group of isometries. SVCCA's and PWCCA's are not
metrics, and nothing here claims they are.

Arrays in, numbers out, as in the rest of ``intertwine.measures``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from intertwine.measures._base import (
    DEFAULT_MAX_BYTES,
    F64,
    ArrayLike,
    ConstantRepresentationError,
    as_features,
    constant_message,
    is_constant,
)
from intertwine.measures.layerwise import pairwise
from intertwine.measures.names import CKA_MEASURES, too_few_samples
from intertwine.measures.procrustes import match_channels
from intertwine.measures.shape import prepare_shape_metric

#: How each measure's value v becomes a distance (``as_distance``).
DISTANCE_FORMS: dict[str, str] = {
    "orthogonal_procrustes": "2 (1 - v): the Procrustes distance of the unit-norm representations",
    "grelu_procrustes": "2 (1 - v): the Procrustes distance of the channel-normalised representations over sqrt(C)",
    **{m: "arccos(v): the angle between the U-centred kernels" for m in CKA_MEASURES},
    "svcca": "1 - v (not a metric)",
    "pwcca": "1 - (v(X, Y) + v(Y, X)) / 2 (not a metric)",
    "shape_angular": "v (a distance already)",
    "shape_euclidean": "v (a distance already)",
}

#: The measures whose distance is a metric on representations modulo the measure's invariances.
METRICS = tuple(m for m in DISTANCE_FORMS if m not in ("svcca", "pwcca"))

#: The measures with a Procrustes mean: those whose distance is the chord or the angle between
#: representations aligned by a group (orthogonal maps, or permutations of normalised channels).
#: The CKAs compare kernels, and an average of kernels is no representation; CCA has no mean here.
MEAN_MEASURES = ("orthogonal_procrustes", "grelu_procrustes", "shape_euclidean", "shape_angular")


def _check_measure(measure: str) -> None:
    if measure not in DISTANCE_FORMS:
        raise ValueError(f"unknown measure {measure!r}; expected one of {sorted(DISTANCE_FORMS)}")


def as_distance(values: ArrayLike, measure: str) -> np.ndarray:
    """``measure``'s values (a similarity or a distance) as distances, by ``DISTANCE_FORMS``.

    Parameters
    ----------
    values : array
        Values of ``measure`` (any shape); for ``pwcca`` a square matrix, entry (i, j) the measure
        of representation i weighted by i against j, made symmetric by averaging both directions.
    measure : str
        A name of ``DISTANCE_FORMS`` (every measure of ``MEASURES``).

    Returns
    -------
    ndarray, float64
        The distances, the shape of ``values``.
    """
    _check_measure(measure)
    v = np.asarray(values, dtype=np.float64)
    if measure in ("orthogonal_procrustes", "grelu_procrustes"):
        return 2.0 * (1.0 - v)
    if measure in CKA_MEASURES:
        return np.arccos(np.clip(v, -1.0, 1.0))
    if measure == "svcca":
        return 1.0 - v
    if measure == "pwcca":
        if v.ndim != 2 or v.shape[0] != v.shape[1]:
            raise ValueError(
                f"pwcca's distance averages both directions: give a square matrix, got {v.shape}"
            )
        return 1.0 - (v + v.T) / 2.0
    return v.copy()


def pairwise_distances(
    representations: Sequence[ArrayLike], measure: str, *, max_bytes: int = DEFAULT_MAX_BYTES
) -> np.ndarray:
    """The K x K matrix of ``measure``'s distance (``as_distance``) between every pair of the K
    representations, each of the same N inputs: symmetric, zero on the diagonal.

    Each representation's own work (kernels, SVDs) is done once (``pairwise``), each pair once.

    Parameters
    ----------
    representations : sequence of Tensor or ndarray, each (N, C) or (N, C, *spatial)
        K >= 2 representations of the same N inputs (e.g. one site of K networks).
    measure : str
        A name of ``MEASURES``.
    max_bytes : int
        The memory bound of each block of intermediates.

    Returns
    -------
    ndarray, shape (K, K), float64
        Entry (i, j) is the distance between representations i and j.
    """
    _check_measure(measure)
    if len(representations) < 2:
        raise ValueError(
            f"a zoo's distance matrix needs at least 2 representations, got {len(representations)}"
        )
    _checked(representations, measure)  # a constant representation named by its index
    distances = as_distance(pairwise(measure, representations, max_bytes=max_bytes), measure)
    # A representation is at distance 0 from itself by definition; its computed value carries
    # rounding (1e-8 for arccos of a CKA of 1 - 1e-16).
    np.fill_diagonal(distances, 0.0)
    return np.maximum(distances, 0.0)


@dataclass(frozen=True)
class Embedding:
    """K points whose euclidean distances approximate a distance matrix (``classical_mds``).

    ``coordinates`` (K, dims): one row per representation. ``eigenvalues`` (K,): those of the
    doubly centred matrix -D^2 / 2, in decreasing order; negative ones say the distances are not
    euclidean. ``explained``: the share of the positive eigenvalues' sum the kept dimensions hold
    (1: the points reproduce the distances exactly)."""

    coordinates: np.ndarray
    eigenvalues: np.ndarray

    @property
    def explained(self) -> float:
        positive = self.eigenvalues[self.eigenvalues > 0]
        kept = np.clip(self.eigenvalues[: self.coordinates.shape[1]], 0.0, None)
        return float(kept.sum() / positive.sum()) if positive.size else 1.0


def classical_mds(distances: ArrayLike, dims: int = 2) -> Embedding:
    """Classical (Torgerson) multidimensional scaling: the coordinates whose inner products are
    B = -J D^2 J / 2 (J the centring matrix) restricted to its ``dims`` largest eigenvalues. Points
    in ``dims`` or fewer dimensions are reproduced exactly, up to a rigid motion; each axis's
    sign is fixed by making its largest coordinate in absolute value positive.

    Parameters
    ----------
    distances : array, shape (K, K)
        Symmetric, non-negative, zero on the diagonal (``pairwise_distances``).
    dims : int
        The embedding's dimensions, 1 to K.

    Returns
    -------
    Embedding
        ``coordinates`` (K, dims), centred at 0; ``eigenvalues`` of B.
    """
    D = np.asarray(distances, dtype=np.float64)
    if D.ndim != 2 or D.shape[0] != D.shape[1] or D.shape[0] < 1:
        raise ValueError(f"classical_mds needs a square distance matrix, got shape {D.shape}")
    if not np.isfinite(D).all() or (D < 0).any():
        raise ValueError("classical_mds needs finite, non-negative distances")
    scale = max(float(np.abs(D).max()), 1.0)
    if not np.allclose(D, D.T, rtol=0, atol=1e-12 * scale) or np.abs(np.diag(D)).max() > 1e-12 * scale:
        raise ValueError("classical_mds needs a symmetric distance matrix with a zero diagonal")
    k = D.shape[0]
    if isinstance(dims, bool) or not isinstance(dims, (int, np.integer)) or not 1 <= dims <= k:
        raise ValueError(f"dims must be an integer from 1 to the {k} points, got {dims!r}")
    J = np.eye(k) - 1.0 / k
    B = -0.5 * J @ (D * D) @ J
    eigenvalues, vectors = np.linalg.eigh((B + B.T) / 2)
    order = np.argsort(eigenvalues)[::-1]
    eigenvalues, vectors = eigenvalues[order], vectors[:, order]
    coordinates = vectors[:, :dims] * np.sqrt(np.clip(eigenvalues[:dims], 0.0, None))
    signs = np.sign(coordinates[np.abs(coordinates).argmax(axis=0), np.arange(dims)])
    return Embedding(coordinates * np.where(signs == 0, 1.0, signs), eigenvalues)


# ---------------------------------------------------------------------------
# The Procrustes mean
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ProcrustesMean:
    """The zoo's Procrustes mean (``procrustes_mean``).

    ``mean``: a representation (a tensor, float64) whose ``measure`` distance to member i is
    ``distances[i]``: (N, C, *spatial) for the Procrustes measures (width the widest member's), an
    (N, r) factor of its centred Gram matrix for the shape metrics (they see nothing else).
    ``objective``: the sum of the squared distances, which the mean minimises (a local minimum:
    the alternating search starts at the member with the smallest one, so it is never larger
    than any member's). ``iterations``: the alignment rounds; ``converged``: whether the last
    round improved the objective by less than the tolerance."""

    mean: Tensor
    distances: np.ndarray
    objective: float
    iterations: int
    converged: bool


@dataclass(frozen=True)
class _Space:
    """How one measure sees its representations: as (rows, width) matrices (``points``), the
    measure's group element that aligns a matrix to the mean best (``fit``) and its action
    (``act``), the distance of two aligned matrices (``distance``), the average step
    (``average``: the aligned members and the current mean to the next mean) and how a mean goes
    back into a representation's shape (``shaped``)."""

    points: list[Tensor]
    fit: Callable[[Tensor, Tensor], Tensor]
    act: Callable[[Tensor, Tensor], Tensor]
    distance: Callable[[Tensor, Tensor], float]
    average: Callable[[Iterable[Tensor], Tensor, Callable[[Tensor], float]], Tensor | None]
    shaped: Callable[[Tensor], Tensor]


def _padded(points: list[Tensor]) -> list[Tensor]:
    width = max(p.shape[1] for p in points)
    return [p if p.shape[1] == width else torch.nn.functional.pad(p, (0, width - p.shape[1])) for p in points]


def _rotation(x: Tensor, m: Tensor) -> Tensor:
    """The orthogonal map Q that brings x closest to m, x Q (Q = U V^T of the SVD of x^T m)."""
    U, _, Vh = torch.linalg.svd(x.T @ m)
    return U @ Vh


def _rotate(x: Tensor, rotation: Tensor) -> Tensor:
    return x @ rotation


def _permutation(x: Tensor, m: Tensor) -> Tensor:
    """The permutation of x's channels (columns) that matches m's best (the Hungarian matching of
    ``grelu_procrustes``; columns of unit or zero norm)."""
    cross = m.T @ x  # cross[i, j] = <m_i, x_j>
    return match_channels(cross, m.square().sum(0), x.square().sum(0)).to(x.device)


def _permute(x: Tensor, permutation: Tensor) -> Tensor:
    return x[:, permutation]


def _chord(scale: float) -> Callable[[Tensor, Tensor], float]:
    return lambda a, b: float(torch.linalg.vector_norm(a - b)) / scale


def _angle(a: Tensor, b: Tensor) -> float:
    """The angle between unit-norm a and b, 2 atan2(|a - b|, |a + b|): exact near 0."""
    return float(2 * torch.atan2(torch.linalg.vector_norm(a - b), torch.linalg.vector_norm(a + b)))


def _unit(m: Tensor) -> Tensor:
    return m / torch.linalg.vector_norm(m)


def _unit_channels(m: Tensor) -> Tensor:
    """Each column scaled to unit norm; a zero column stays zero."""
    norms = torch.linalg.vector_norm(m, dim=0)
    return m / torch.where(norms > 0, norms, torch.ones_like(norms))


def _karcher_step(
    aligned: Iterable[Tensor], m: Tensor, objective: Callable[[Tensor], float]
) -> Tensor | None:
    """One step of the intrinsic (Karcher) mean on the unit sphere: m moved along the geodesic
    towards the mean of the members' logarithms at m, the step halved until the sum of squared
    angles falls (None when no step of at least 2^-20 does)."""
    v, current, count = torch.zeros_like(m), 0.0, 0
    for x in aligned:
        theta = _angle(x, m)
        tangent = x - float((x * m).sum()) * m
        norm = float(torch.linalg.vector_norm(tangent))
        if norm > 0:
            v += tangent * (theta / norm)
        current, count = current + theta**2, count + 1
    v /= count
    length = float(torch.linalg.vector_norm(v))
    if length == 0:
        return None
    step = 1.0
    while step >= 2.0**-20:
        candidate = _unit(math.cos(step * length) * m + math.sin(step * length) * v / length)
        if objective(candidate) < current:
            return candidate
        step /= 2
    return None


def _procrustes_rows(X: Tensor) -> Tensor:
    """(N, C, P) -> the (N * P, C) matrix whose rows the Procrustes measures compare."""
    return X.transpose(1, 2).reshape(-1, X.shape[1])


def _checked(representations: Sequence[ArrayLike], measure: str) -> list[tuple[int, ...]]:
    """The representations' shapes, checked: the same N, enough of them for ``measure``, none
    constant (``ConstantRepresentationError`` naming its index)."""
    shapes = []
    for i, X in enumerate(representations):
        F = as_features(X, f"representations[{i}]")
        if is_constant(F.amin(0), F.amax(0), F.shape[0]):
            raise ConstantRepresentationError(
                constant_message(f"representations[{i}]", F.shape[0], measure), "representations", index=i
            )
        shapes.append(tuple(F.shape))
    if len({shape[0] for shape in shapes}) > 1:
        raise ValueError(
            f"every representation must hold the same samples, got N = {sorted({shape[0] for shape in shapes})}"
        )
    problem = too_few_samples(measure, shapes[0][0], shapes[0][2])
    if problem:
        raise ValueError(problem)
    return shapes


def _space(representations: Sequence[ArrayLike], measure: str) -> _Space:
    """The representations as ``measure`` sees them, one float64 copy each (made one at a time)."""
    shapes = _checked(representations, measure)
    n, positions = shapes[0][0], shapes[0][2]
    spatial = tuple(representations[0].shape[2:])

    def to_shape(m: Tensor) -> Tensor:  # (N * P, C) -> (N, C, *spatial)
        return m.reshape(n, positions, m.shape[1]).transpose(1, 2).reshape(n, m.shape[1], *spatial)

    def rows(i: int) -> Tensor:
        return _procrustes_rows(as_features(representations[i], f"representations[{i}]").to(F64))

    if measure in ("orthogonal_procrustes", "grelu_procrustes"):
        if len({shape[2] for shape in shapes}) > 1:
            raise ValueError(
                f"{measure} compares the same spatial positions: every representation needs as many"
            )
        if measure == "orthogonal_procrustes":
            points = _padded([_unit(rows(i)) for i in range(len(shapes))])
            return _Space(points, _rotation, _rotate, _chord(1.0), lambda xs, m, f: _unit(sum(xs)), to_shape)
        if len({shape[1] for shape in shapes}) > 1:
            raise ValueError(
                "grelu_procrustes matches channels one to one: every representation needs as many"
            )
        points = [_unit_channels(rows(i)) for i in range(len(shapes))]
        scale = math.sqrt(shapes[0][1])
        return _Space(
            points, _permutation, _permute, _chord(scale), lambda xs, m, f: _unit_channels(sum(xs)), to_shape
        )
    # The shape metrics see a representation only through its centred Gram matrix Xc Xc^T, so each
    # is replaced by a factor G (N x r, r <= N) with G G^T = Xc Xc^T: alignments are r x r.
    factors = []
    for i, X in enumerate(representations):
        p = prepare_shape_metric(X, 1.0, name=f"representations[{i}]")
        factors.append(p.basis.to(F64) * p.scales.to(F64) * p.unit)
    factors = _padded(factors)
    if measure == "shape_euclidean":
        return _Space(
            factors, _rotation, _rotate, _chord(1.0), lambda xs, m, f: sum(xs) / len(factors), lambda m: m
        )
    return _Space([_unit(G) for G in factors], _rotation, _rotate, _angle, _karcher_step, lambda m: m)


def procrustes_mean(
    representations: Sequence[ArrayLike],
    measure: str = "orthogonal_procrustes",
    *,
    max_iterations: int = 100,
    tol: float = 1e-6,
) -> ProcrustesMean:
    """The Procrustes mean of K representations of the same inputs under ``measure``: the
    representation M minimising sum_i d(M, X_i)^2, d the measure's distance (``as_distance``).

    Alternating, as netrep's ``procrustes_average``: every member is aligned to M by the measure's
    group, then M is replaced by the best representation for those alignments, until the objective
    falls by less than ``tol`` (relative). Each round can only lower the objective; it starts at
    the member with the smallest one, so the mean's is never larger than any member's.

    * ``orthogonal_procrustes``: the (N * positions, C) matrices at unit norm (narrower ones
      zero-padded), aligned by orthogonal maps; M is their aligned sum at unit norm (the minimiser
      of the summed squared chords on the sphere).
    * ``grelu_procrustes``: the channels at unit norm (dead ones zero), aligned by the Hungarian
      matching of channels; M is the aligned sum with each channel at unit norm.
    * ``shape_euclidean``: the centred (N, D) features (netrep's ``LinearMetric(alpha=1)``),
      aligned by orthogonal maps; M is the aligned average (netrep's Procrustes average).
    * ``shape_angular``: the same at unit norm, the distance the angle; M moves by steps of the
      intrinsic (Karcher) mean on the sphere, each halved until the objective falls.

    Parameters
    ----------
    representations : sequence of Tensor or ndarray, each (N, C) or (N, C, *spatial)
        K >= 1 representations of the same N inputs.
    measure : str
        One of ``MEAN_MEASURES``.
    max_iterations : int
        The most alignment rounds.
    tol : float
        The relative fall of the objective below which a round ends the search.

    Returns
    -------
    ProcrustesMean
        The mean, each member's distance to it, the objective, the rounds and whether it converged.
    """
    if measure not in MEAN_MEASURES:
        raise ValueError(
            f"{measure!r} has no Procrustes mean here; the measures with one are {', '.join(MEAN_MEASURES)} "
            "(a CKA compares kernels, whose average is no representation; SVCCA and PWCCA are no metrics)"
        )
    if len(representations) < 1:
        raise ValueError("procrustes_mean needs at least one representation")
    if isinstance(max_iterations, bool) or not isinstance(max_iterations, int) or max_iterations < 0:
        raise ValueError(f"max_iterations must be an integer >= 0, got {max_iterations!r}")
    if not (isinstance(tol, (int, float)) and tol >= 0):
        raise ValueError(f"tol must be a number >= 0, got {tol!r}")
    space = _space(representations, measure)

    last_fit: dict = {}

    def aligned_to(m: Tensor) -> Iterator[Tensor]:
        # A round aligns the members to the mean twice, for its objective and then for the next
        # average: the group elements of the last mean are kept (small matrices), and the aligned
        # members are made one at a time (a float64 copy of the zoo is enough).
        if last_fit.get("mean") is not m:
            last_fit.update(mean=m, elements=[space.fit(x, m) for x in space.points])
        return (space.act(x, g) for x, g in zip(space.points, last_fit["elements"]))

    def objective(m: Tensor) -> float:
        return sum(space.distance(x, m) ** 2 for x in aligned_to(m))

    mean = min(space.points, key=objective)
    value, iterations, converged = objective(mean), 0, False
    while iterations < max_iterations and value > 0:
        iterations += 1
        candidate = space.average(aligned_to(mean), mean, objective)
        new = objective(candidate) if candidate is not None else math.inf
        if new >= value:  # no progress: the current mean stands
            converged = True
            break
        improvement = value - new
        mean, value = candidate, new
        if improvement <= tol * value:
            converged = True
            break
    converged = converged or value == 0
    distances = np.array([space.distance(x, mean) for x in aligned_to(mean)])
    return ProcrustesMean(space.shaped(mean), distances, float((distances**2).sum()), iterations, converged)


__all__ = [
    "DISTANCE_FORMS",
    "MEAN_MEASURES",
    "METRICS",
    "Embedding",
    "ProcrustesMean",
    "as_distance",
    "classical_mds",
    "pairwise_distances",
    "procrustes_mean",
]
