"""Every measure by name: ``MEASURES[name](X, Y)``."""

from __future__ import annotations

from collections.abc import Callable

from intertwine.measures.cca import pwcca, svcca
from intertwine.measures.cka import (
    channel_normalized_linear_cka,
    gate_cka,
    grelu_cka,
    laplace_cka,
    linear_cka,
    rbf_cka,
)
from intertwine.measures.procrustes import grelu_procrustes, orthogonal_procrustes
from intertwine.measures.shape import shape_angular, shape_euclidean

MEASURES: dict[str, Callable[..., float]] = {
    "grelu_procrustes": grelu_procrustes,
    "orthogonal_procrustes": orthogonal_procrustes,
    "grelu_cka": grelu_cka,
    "linear_cka": linear_cka,
    "laplace_cka": laplace_cka,
    "channel_normalized_linear_cka": channel_normalized_linear_cka,
    "gate_cka": gate_cka,
    "rbf_cka": rbf_cka,
    "svcca": svcca,
    "pwcca": pwcca,
    "shape_angular": shape_angular,
    "shape_euclidean": shape_euclidean,
}
