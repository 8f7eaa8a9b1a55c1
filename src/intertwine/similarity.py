"""Deprecated: the similarity measures moved to :mod:`intertwine.measures` and the model drivers
(``compare_models``, ``site_procrustes``, ``site_cka``) to :mod:`intertwine.compare`. This module
re-exports them for one release and warns on import."""

import warnings

from intertwine.compare import compare_models, site_cka, site_procrustes
from intertwine.measures import *  # noqa: F403  (the deprecated module re-exports every measure)
from intertwine.measures import __all__ as _measures

warnings.warn(
    "intertwine.similarity is deprecated and will be removed in the next release: import the measures "
    "from intertwine.measures and compare_models, site_procrustes, site_cka from intertwine.compare",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = [*_measures, "compare_models", "site_cka", "site_procrustes"]  # noqa: PLE0604
