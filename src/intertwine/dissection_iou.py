"""Network dissection's per-unit statistics, tensors in and numbers out: each unit's activation
threshold over a probe set and its IoU with each concept's mask (``intertwine.dissection`` labels
the units with them and exports these names too).

Thresholds follow NetDissect: quantiles of the raw (not upsampled) activations. They are exact,
``numpy.quantile(values, 1 - quantile)`` with linear interpolation, computed in a stream from a
running top-k per unit (k is about ``quantile`` of the values), so memory stays bounded by the
batch, not the probe set.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["DEFAULT_QUANTILE", "unit_iou", "unit_thresholds"]

DEFAULT_QUANTILE = 0.005
# Elements of float32 scratch per batch (64 MiB): bounds the memory of both passes.
_BATCH_ELEMENTS = 16 * 2**20


def _mixed(activations: Tensor, start: int, stop: int, basis: Tensor | None) -> Tensor:
    """Float32 activations of images ``start:stop``, channels mixed by ``basis`` if given."""
    a = activations[start:stop].float()
    return a if basis is None else torch.einsum("ij,njhw->nihw", basis.to(a), a)


def unit_thresholds(
    activations: Tensor, quantile: float = DEFAULT_QUANTILE, basis: Tensor | None = None
) -> Tensor:
    """Per unit, the value its top ``quantile`` of activations (over images and positions) exceed.

    ``activations``: (N, C, h, w). Equals ``numpy.quantile(unit_values, 1 - quantile)`` (linear
    interpolation) exactly: only the top ``k = M - floor((1 - quantile)(M - 1))`` of the M values
    per unit matter, and they are kept in a running top-k over batches.

    Parameters
    ----------
    activations : Tensor
        (N, C, h, w) activations of the probe set at one site (read as float32).
    quantile : float, default DEFAULT_QUANTILE (0.005)
        The fraction of each unit's values that lie above its threshold, in [0, 1).
    basis : Tensor or None, default None
        A (C, C) matrix mixing the channels first (unit i reads ``sum_j basis[i, j] a_j``).

    Returns
    -------
    Tensor
        (C,) float32 thresholds, one per unit.
    """
    if not 0 <= quantile < 1:
        raise ValueError(f"quantile must be in [0, 1), got {quantile}")
    n, c, h, w = activations.shape
    m = n * h * w
    position = (1 - quantile) * (m - 1)
    low = math.floor(position)
    fraction = position - low
    k = m - low  # ascending ranks low .. m - 1, i.e. the k largest values
    top = None
    step = max(1, _BATCH_ELEMENTS // (c * h * w))
    for start in range(0, n, step):
        values = _mixed(activations, start, start + step, basis)
        values = values.transpose(0, 1).reshape(c, -1)
        candidates = values if top is None else torch.cat([top, values], dim=1)
        top = candidates.topk(min(k, candidates.shape[1]), dim=1).values
    value_low = top[:, k - 1].double()
    value_high = top[:, max(k - 2, 0)].double()
    return (value_low + fraction * (value_high - value_low)).float()


def unit_iou(
    activations: Tensor, labels: Tensor, n_concepts: int, thresholds: Tensor, basis: Tensor | None = None
) -> Tensor:
    """(C, n_concepts) IoU of each unit's thresholded, upsampled maps with each concept's mask,
    over the whole probe set.

    ``labels``: (N, layers, H, W) label maps (0 none, k > 0 concept k - 1); a concept's mask is
    its pixels in any layer. Activation maps are upsampled (bilinear) to (H, W).

    Parameters
    ----------
    activations : Tensor
        (N, C, h, w) activations of the N probe images at one site.
    labels : Tensor
        (N, layers, H, W) integer label maps (see above).
    n_concepts : int
        The number of concepts.
    thresholds : Tensor
        (C,) per-unit thresholds (``unit_thresholds``, in the same basis).
    basis : Tensor or None, default None
        A (C, C) matrix mixing the channels first.

    Returns
    -------
    Tensor
        (C, n_concepts) float32 IoU of each unit with each concept.
    """
    n, c = activations.shape[:2]
    size = tuple(labels.shape[-2:])
    bins = n_concepts + 1
    concept_area = torch.bincount(labels.reshape(-1).long(), minlength=bins)[:bins]
    intersection = torch.zeros(c * bins, dtype=torch.long)
    unit_area = torch.zeros(c, dtype=torch.long)
    step = max(1, _BATCH_ELEMENTS // (c * size[0] * size[1]))
    for start in range(0, n, step):
        mixed = _mixed(activations, start, start + step, basis)
        # A bilinear value is a convex combination of raw values, so a map whose raw maximum
        # stays at or below its unit's threshold cannot fire anywhere: upsample only the others
        # (about a tenth of them, since only the top `quantile` of each unit's values lie above).
        live = (mixed.amax(dim=(2, 3)) > thresholds.view(1, -1)).nonzero(as_tuple=True)
        maps = F.interpolate(mixed[live].unsqueeze(1), size=size, mode="bilinear", align_corners=False)
        fired = maps.squeeze(1) > thresholds[live[1]].view(-1, 1, 1)
        unit_area += torch.bincount(live[1], weights=fired.sum(dim=(1, 2)).double(), minlength=c).long()
        which, y, x = fired.nonzero(as_tuple=True)
        image, unit = live[0][which] + start, live[1][which]
        for layer in range(labels.shape[1]):
            hit = labels[image, layer, y, x].long()
            intersection += torch.bincount(unit * bins + hit, minlength=c * bins)
    intersection = intersection.view(c, bins)[:, 1:]
    union = unit_area[:, None] + concept_area[None, 1:] - intersection
    return intersection.double().div(union.clamp_min(1).double()).float()
