"""Deprecated: SVCCA and PWCCA moved to :mod:`intertwine.measures.cca`, the shape metrics to
:mod:`intertwine.measures.shape`, ``PREPARED`` to :mod:`intertwine.measures.layerwise`. This module
re-exports them for one release and warns on import."""

import warnings

from intertwine.measures.cca import (
    PreparedPWCCA,
    PreparedSVCCA,
    compare_pwcca,
    compare_svcca,
    prepare_pwcca,
    prepare_svcca,
    pwcca,
    svcca,
)
from intertwine.measures.layerwise import PREPARED
from intertwine.measures.shape import (
    PreparedShape,
    compare_shape_metric,
    prepare_shape_metric,
    shape_angular,
    shape_euclidean,
    shape_metric,
)

warnings.warn(
    "intertwine.alignment is deprecated and will be removed in the next release: import SVCCA and PWCCA "
    "from intertwine.measures.cca and the shape metrics from intertwine.measures.shape",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = [
    "PREPARED",
    "PreparedPWCCA",
    "PreparedSVCCA",
    "PreparedShape",
    "compare_pwcca",
    "compare_shape_metric",
    "compare_svcca",
    "prepare_pwcca",
    "prepare_shape_metric",
    "prepare_svcca",
    "pwcca",
    "shape_angular",
    "shape_euclidean",
    "shape_metric",
    "svcca",
]
