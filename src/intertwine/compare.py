"""Two models compared site by site on the same inputs: every site's activations read by forward
hooks over a data set, the Procrustes measures and linear CKA streamed through exact accumulators."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from intertwine.measures import DEFAULT_MAX_BYTES, ConstantRepresentationError, constant_message
from intertwine.measures.cka import LinearCKAAccumulator
from intertwine.measures.layerwise import pairwise
from intertwine.measures.names import PROCRUSTES_MEASURES
from intertwine.measures.procrustes import ProcrustesAccumulator
from intertwine.measures.registry import MEASURES

__all__ = ["SiteMatrix", "compare_models", "site_procrustes", "site_cka", "site_cka_intervals"]


@dataclass(frozen=True)
class SiteMatrix:
    """One measure between every site of model a (``rows``) and every site of model b
    (``columns``): ``values[i, j]`` is the measure between ``rows[i]`` and ``columns[j]`` (NaN where
    it is undefined). ``numpy.asarray`` gives ``values``; ``matrix["layer1", "layer2"]`` one cell.
    (A labelled table: ``pandas.DataFrame(m.values, index=m.rows, columns=m.columns)``.)"""

    values: np.ndarray
    rows: list[str]
    columns: list[str]

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        return self.values if dtype is None else self.values.astype(dtype)

    def __getitem__(self, sites: tuple[str, str]) -> float:
        row, column = sites
        return float(self.values[self.rows.index(row), self.columns.index(column)])


def _batches(data, batch_size: int) -> tuple[Iterable, int | None]:
    """(iterable of input batches, their number if known) from a tensor of inputs, a map-style
    Dataset of (input, ...) items, or any iterable of batches (a DataLoader): a batch is a tensor
    or a tuple/list whose first element is the inputs."""
    from torch.utils.data import DataLoader, Dataset, IterableDataset

    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer of at least 1, got {batch_size!r}")
    if isinstance(data, Tensor):
        batches = data.split(batch_size)
    elif isinstance(data, Dataset) and not isinstance(data, IterableDataset):
        batches = DataLoader(data, batch_size=batch_size)
    else:
        batches = data
    count = len(batches) if hasattr(batches, "__len__") else None
    return (batch[0] if isinstance(batch, (tuple, list)) else batch for batch in batches), count


def _positions(X: Tensor) -> int:
    return X[0, 0].numel()


def compare_models(
    model_a: torch.nn.Module,
    model_b: torch.nn.Module,
    data,
    measures: Sequence[str],
    sites_a: Sequence[str] | None = None,
    sites_b: Sequence[str] | None = None,
    *,
    batch_size: int = 256,
    progress: bool = True,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_accumulator_bytes: int = 2**30,
) -> dict[str, SiteMatrix]:
    """Each of ``measures`` between every site of model a and every site of model b on the same
    inputs: {measure: SiteMatrix (sites_a x sites_b)}.

    ``sites_a``/``sites_b`` are module names (default: the zoo model's sites, ``models.sites``);
    forward hooks read them, so any ``nn.Module`` works. ``data`` is a tensor of model inputs, a
    map-style Dataset of (input, ...) items (batched by ``batch_size``) or an iterable of batches
    such as a DataLoader; inputs go to each model's device, so the whole computation runs where the
    models are (CPU or GPU), in eval mode without autograd, with a progress bar over batches.

    Streamed with exact accumulation, nothing kept per sample: the Procrustes measures (the
    cross-products of ``ProcrustesAccumulator``, for the site pairs with equal spatial shapes, and
    for ``grelu_procrustes`` equal widths; NaN for the others, where they are undefined) and
    ``linear_cka`` (``LinearCKAAccumulator``) while its site pairs' cross-products fit in
    ``max_accumulator_bytes``. Every other measure (and linear CKA between wider sites) keeps every
    site's activations on the models' device and computes its matrix with ``pairwise`` at the end.
    The Procrustes values here come from one pass (close to 1 they resolve about 1e-8; the
    one-shot functions make a second pass).

    Parameters
    ----------
    model_a, model_b : the two models.
    data : the inputs: a tensor, a map-style Dataset or an iterable of batches (see above).
    measures : names of ``measures.MEASURES``.
    sites_a, sites_b : module names of each model (None: its ``models.sites``).
    batch_size : inputs per batch, for a tensor or Dataset.
    progress : whether to show a progress bar over the batches.
    max_bytes : the memory bound of the measures computed at the end (``pairwise``).
    max_accumulator_bytes : the most linear CKA's streamed cross-products may take.

    Returns
    -------
    {measure: SiteMatrix}, rows model a's sites, columns model b's.
    """
    from tqdm.auto import tqdm

    unknown = [m for m in measures if m not in MEASURES]
    if unknown:
        raise ValueError(f"unknown measures {unknown}; expected some of {sorted(MEASURES)}")
    names = _site_names((model_a, model_b), (sites_a, sites_b))
    streams: _Streams | None = None  # decided at the first batch, from its shapes
    batches, count = _batches(data, batch_size)
    for inputs in tqdm(batches, total=count, disable=not progress, desc="compare_models", unit="batch"):
        xs, ys = _batch_activations((model_a, model_b), names, inputs)
        if streams is None:
            streams = _Streams.plan(xs, ys, measures, max_accumulator_bytes)
        streams.update(xs, ys)
    if streams is None:
        raise ValueError("compare_models: data gave no batches")
    full = streams.full()
    return {measure: _measure_frame(measure, streams, full, names, max_bytes) for measure in measures}


def _site_names(
    models: tuple[torch.nn.Module, torch.nn.Module], chosen: tuple[Sequence[str] | None, ...]
) -> list[list[str]]:
    """Each model's site names: those chosen, or its zoo sites (``models.sites``)."""
    from intertwine.models import sites

    return [
        [s.name for s in sites(model)] if names is None else list(names)
        for model, names in zip(models, chosen)
    ]


def _batch_activations(
    models: tuple[torch.nn.Module, torch.nn.Module], names: list[list[str]], inputs: Tensor
) -> tuple[list[Tensor], list[Tensor]]:
    """(model a's activations at its sites, model b's at its sites) on one batch, b's moved to
    a's device."""
    from intertwine.models import site_activations

    if not (isinstance(inputs, Tensor) and (inputs.is_floating_point() or inputs.is_complex())):
        what = f"{inputs.dtype} tensors" if isinstance(inputs, Tensor) else type(inputs).__name__
        raise TypeError(
            f"compare_models: data gives {what}, but the models take floating-point inputs (their "
            "weights are); pass the images as the models were trained on them, e.g. "
            "intertwine.data.augment.normalize(images, mean, std) for uint8 images of 0..255"
        )
    acts = [
        site_activations(model, inputs, chosen, batch_size=len(inputs))
        for model, chosen in zip(models, names)
    ]
    return (
        [acts[0][s] for s in names[0]],
        [acts[1][s].to(acts[0][names[0][0]].device) for s in names[1]],
    )


@dataclass
class _Streams:
    """What ``compare_models`` keeps over the batches: the Procrustes and linear CKA accumulators
    per site pair (i, j), and per model every site's activations (site index -> batches), None
    where no measure needs them."""

    procrustes: dict[tuple[int, int], ProcrustesAccumulator]
    linear: dict[tuple[int, int], LinearCKAAccumulator]
    kept: list[dict[int, list[Tensor]] | None]

    @classmethod
    def plan(
        cls, xs: list[Tensor], ys: list[Tensor], measures: Sequence[str], max_accumulator_bytes: int
    ) -> _Streams:
        """What to stream and what to keep, from the first batch's activations: the Procrustes
        measures for the pairs of equal spatial shapes, linear CKA while its cross-products fit in
        ``max_accumulator_bytes``; every site's activations where another measure needs them."""
        pairs = [(i, j) for i in range(len(xs)) for j in range(len(ys))]
        procrustes, linear = {}, {}
        if any(m in PROCRUSTES_MEASURES for m in measures):
            procrustes = {
                (i, j): ProcrustesAccumulator() for i, j in pairs if _positions(xs[i]) == _positions(ys[j])
            }
        width = [[x[0].numel() for x in xs], [y[0].numel() for y in ys]]
        state = sum(8 * (width[0][i] + width[1][j]) ** 2 for i, j in pairs)
        if "linear_cka" in measures and state <= max_accumulator_bytes:
            linear = {pair: LinearCKAAccumulator() for pair in pairs}
        collected = [
            m for m in measures if m not in PROCRUSTES_MEASURES and not (m == "linear_cka" and linear)
        ]
        return cls(procrustes, linear, [{} for _ in range(2)] if collected else [None, None])

    def update(self, xs: list[Tensor], ys: list[Tensor]) -> None:
        """One batch into every accumulator, and into the kept activations."""
        for (i, j), acc in self.procrustes.items():
            acc.update(xs[i], ys[j])
        for (i, j), acc in self.linear.items():
            acc.update(xs[i], ys[j])
        if self.kept[0] is not None:
            for side, layers in zip(self.kept, (xs, ys)):
                for k, layer in enumerate(layers):
                    side.setdefault(k, []).append(layer)

    def full(self) -> list[list[Tensor] | None]:
        """Per model, every site's kept activations over all the batches (None: none kept)."""
        return [None if side is None else [torch.cat(side[k]) for k in sorted(side)] for side in self.kept]


def _measure_frame(
    measure: str,
    streams: _Streams,
    full: list[list[Tensor] | None],
    names: list[list[str]],
    max_bytes: int,
) -> SiteMatrix:
    """One measure's SiteMatrix in ``compare_models``; a constant representation is named by its
    model and site."""
    try:
        matrix = _streamed_matrix(
            measure, streams.procrustes, streams.linear, full, len(names[0]), len(names[1]), max_bytes
        )
    except ConstantRepresentationError as err:
        model = {"X": "a", "xs": "a", "Y": "b", "ys": "b"}[err.which]
        site = names[0 if model == "a" else 1][err.index]
        raise ConstantRepresentationError(
            f"{measure}: model {model} at site {site}: {err}", model, site
        ) from None
    return SiteMatrix(np.asarray(matrix), list(names[0]), list(names[1]))


def _streamed_matrix(
    measure: str,
    procrustes: dict[tuple[int, int], ProcrustesAccumulator],
    linear: dict[tuple[int, int], LinearCKAAccumulator],
    full: list[list[Tensor] | None],
    rows: int,
    cols: int,
    max_bytes: int,
) -> np.ndarray:
    """One measure's matrix in ``compare_models`` from its accumulators or kept activations; a
    ConstantRepresentationError carries the site's position in ``index``."""
    if measure in PROCRUSTES_MEASURES or (measure == "linear_cka" and linear):
        matrix = np.full((rows, cols), np.nan)
        accumulators = procrustes if measure in PROCRUSTES_MEASURES else linear
        for (i, j), acc in accumulators.items():
            if measure == "grelu_procrustes" and acc.cross.shape[0] != acc.cross.shape[1]:
                continue
            read = {"grelu_procrustes": "grelu", "orthogonal_procrustes": "orthogonal", "linear_cka": "value"}
            try:
                matrix[i, j] = getattr(acc, read[measure])()
            except ConstantRepresentationError as err:
                err.index = i if err.which == "X" else j
                raise
        return matrix
    return pairwise(measure, full[0], full[1], max_bytes=max_bytes)


# ---------------------------------------------------------------------------
# Between two models: every site's activations on the same images
# ---------------------------------------------------------------------------


def site_procrustes(
    model_a: torch.nn.Module,
    model_b: torch.nn.Module,
    images: Tensor,
    sites: list[str],
    mean: Tensor,
    std: Tensor,
    batch_size: int,
) -> dict[str, ProcrustesAccumulator]:
    """Procrustes statistics of the two models' activations at each of ``sites`` (the same site in
    both) on uint8 ``images``, accumulated over batches: one forward pass per model and batch
    gives every site's activations.

    Parameters
    ----------
    model_a, model_b : nn.Module
        The two models; each has a module named by every site.
    images : Tensor, shape (N, C, H, W)
        uint8 images, normalised with ``mean`` and ``std`` before they enter the models.
    sites : list of str
        Module names, read in both models.
    mean, std : Tensor, shape (C,)
        The per-channel statistics the images are normalised with (pixels scaled to [0, 1]).
    batch_size : int
        Images per forward pass.

    Returns
    -------
    dict of str to ProcrustesAccumulator
        Per site, the accumulated statistics (``grelu()``, ``orthogonal()``).
    """
    from intertwine.models import site_activations

    accumulators = {site: ProcrustesAccumulator() for site in sites}
    for start in range(0, len(images), batch_size):
        reps_a, reps_b = (
            site_activations(model, images[start : start + batch_size], sites, mean, std, batch_size)
            for model in (model_a, model_b)
        )
        for site in sites:
            accumulators[site].update(reps_a[site], reps_b[site])
    for site, acc in accumulators.items():
        which = acc.constant()
        if which:
            model = {"X": "a", "Y": "b"}[which]
            raise ConstantRepresentationError(
                f"model {model} at site {site}: "
                + constant_message("its representation", acc.n_samples, "every Procrustes measure"),
                model,
                site,
            )
    return accumulators


def site_cka(
    measure: str,
    model_a: torch.nn.Module,
    model_b: torch.nn.Module,
    images: Tensor,
    sites: list[str],
    mean: Tensor,
    std: Tensor,
    batch_size: int,
) -> dict[tuple[str, str], float]:
    """The CKA ``measure`` between model a at each of ``sites`` and model b at each of ``sites``
    (every pair, for the heatmaps) on uint8 ``images``, by ``pairwise``: one site's activations at
    a time are read and prepared (an N x N kernel, or centred features where narrower).

    Parameters
    ----------
    measure : str
        A name of ``measures.MEASURES`` (a CKA, for the heatmaps).
    model_a, model_b : nn.Module
        The two models; each has a module named by every site.
    images : Tensor, shape (N, C, H, W)
        uint8 images, normalised with ``mean`` and ``std`` before they enter the models.
    sites : list of str
        Module names, read in both models.
    mean, std : Tensor, shape (C,)
        The per-channel statistics the images are normalised with (pixels scaled to [0, 1]).
    batch_size : int
        Images per forward pass.

    Returns
    -------
    dict of (str, str) to float
        ``(site of a, site of b)`` to the measure, for every pair of sites.
    """
    from intertwine.models import site_activations

    def layers(model: torch.nn.Module):
        for site in sites:
            yield site_activations(model, images, [site], mean, std, batch_size)[site]

    with _naming_the_site(measure, sites, len(images)):
        matrix = pairwise(measure, layers(model_a), layers(model_b))
    return {(a, b): float(matrix[i, j]) for i, a in enumerate(sites) for j, b in enumerate(sites)}


def site_cka_intervals(
    measure: str,
    model_a: torch.nn.Module,
    model_b: torch.nn.Module,
    images: Tensor,
    sites: list[str],
    mean: Tensor,
    std: Tensor,
    batch_size: int,
    groups: int,
    seed: int = 0,
) -> dict[tuple[str, str], tuple[float, float, float]]:
    """``site_cka`` with a 95 % delete-a-group jackknife interval per pair of sites (``groups``
    groups of the images, the same left out of every site: ``measures.pairwise_jackknife``):
    {(site a, site b): (value, low, high)}. Holds every site's activations of both models.

    Parameters
    ----------
    measure : str
        A name of ``measures.MEASURES`` (a CKA, for the heatmaps).
    model_a, model_b : nn.Module
        The two models; each has a module named by every site.
    images : Tensor, shape (N, C, H, W)
        uint8 images, normalised with ``mean`` and ``std`` before they enter the models.
    sites : list of str
        Module names, read in both models.
    mean, std : Tensor, shape (C,)
        The per-channel statistics the images are normalised with (pixels scaled to [0, 1]).
    batch_size : int
        Images per forward pass.
    groups : int
        The jackknife's groups, 2 to N.
    seed : int
        The seed of the shuffle into groups.

    Returns
    -------
    dict of (str, str) to tuple of float
        ``(site of a, site of b)`` to ``(value, low, high)``, for every pair of sites.
    """
    from intertwine.measures.statistics import pairwise_jackknife
    from intertwine.models import site_activations

    def layers(model: torch.nn.Module) -> list[Tensor]:
        return [site_activations(model, images, [site], mean, std, batch_size)[site] for site in sites]

    with _naming_the_site(measure, sites, len(images)):
        found = pairwise_jackknife(measure, layers(model_a), layers(model_b), groups=groups, seed=seed)
    return {
        (a, b): (float(found.value[i, j]), float(found.low[i, j]), float(found.high[i, j]))
        for i, a in enumerate(sites)
        for j, b in enumerate(sites)
    }


@contextmanager
def _naming_the_site(measure: str, sites: list[str], n_images: int):
    """A constant representation named by its model and site instead of its place in a list."""
    try:
        yield
    except ConstantRepresentationError as err:
        name, site = {"xs": "a", "ys": "b"}[err.which], sites[err.index]
        raise ConstantRepresentationError(
            f"model {name} at site {site}: " + constant_message("its representation", n_images, measure),
            name,
            site,
        ) from None
