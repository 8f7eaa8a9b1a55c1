"""Linear mode connectivity: the straight line between two networks' weights, and its barrier.

The interpolation ``(1 - lam) f + lam g`` of every parameter, with the batch-norm statistics of
each point recomputed on training images (Jordan et al., "REPAIR", ICLR 2023: the
running statistics of an interpolated network are not the interpolation of the endpoints';
Ainsworth et al. reset them the same way). The barrier of a curve is its largest excess loss over
the straight line between the endpoints' losses (Entezari et al. 2022; Ainsworth et al.).

Arrays in, numbers out: inputs are normalised float images as the models read them.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import Tensor, nn

__all__ = [
    "CurvePoint",
    "barrier",
    "interpolate",
    "interpolation_curve",
    "loss_and_accuracy",
    "reset_batch_norm",
]


@dataclass(frozen=True)
class CurvePoint:
    """One point of an interpolation curve: the weight ``lam`` of g, test loss and accuracy."""

    lam: float
    loss: float
    accuracy: float


def interpolate(f: nn.Module, g: nn.Module, lam: float) -> nn.Module:
    """A new model with every parameter and floating buffer ``(1 - lam) f + lam g`` (``f`` and
    ``g`` untouched; integer buffers, such as batch norm's batch count, are f's). At ``lam`` 0 and 1
    the result is f and g exactly."""
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"interpolate: lam must lie in [0, 1], got {lam!r}")
    out = copy.deepcopy(f)
    state_g = g.state_dict()
    with torch.no_grad():
        for name, value in out.state_dict().items():
            if value.is_floating_point():
                if lam == 1.0:
                    value.copy_(state_g[name])
                elif lam != 0.0:
                    value.copy_((1 - lam) * value + lam * state_g[name])
    return out


def reset_batch_norm(model: nn.Module, images: Tensor, batch_size: int = 250) -> nn.Module:
    """Recompute every batch norm's running statistics in place as the plain average over
    ``images`` (momentum None), in training mode without gradients; the model comes back in eval
    mode. A model without batch norm is returned unchanged."""
    norms = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if norms:
        if len(images) == 0:
            raise ValueError("reset_batch_norm: no images to recompute the batch-norm statistics on")
        momenta = [m.momentum for m in norms]
        for m in norms:
            m.reset_running_stats()
            m.momentum = None
        model.train()
        with torch.no_grad():
            for start in range(0, len(images), batch_size):
                model(images[start : start + batch_size])
        for m, momentum in zip(norms, momenta):
            m.momentum = momentum
    return model.eval()


def loss_and_accuracy(
    model: nn.Module, images: Tensor, labels: Tensor, batch_size: int = 500
) -> tuple[float, float]:
    """Mean cross-entropy and top-1 accuracy of ``model`` (as it is: put it in eval mode)."""
    if len(images) == 0:
        raise ValueError("loss_and_accuracy: no test images")
    total, correct = 0.0, 0
    with torch.no_grad():
        for start in range(0, len(images), batch_size):
            logits = model(images[start : start + batch_size])
            target = labels[start : start + batch_size]
            total += float(nn.functional.cross_entropy(logits.double(), target, reduction="sum"))
            correct += int((logits.argmax(1) == target).sum())
    return total / len(images), correct / len(images)


def interpolation_curve(
    f: nn.Module,
    g: nn.Module,
    lams: Sequence[float],
    splits: Mapping[str, tuple[Tensor, Tensor]],
    reset_images: Tensor | None = None,
    batch_size: int = 250,
) -> dict[str, list[CurvePoint]]:
    """Loss and accuracy along ``(1 - lam) f + lam g`` at each of ``lams``, on each split.

    Parameters
    ----------
    f, g : two models of one architecture (g aligned to f or not).
    lams : the weights of g, each in [0, 1]; include 0 and 1 for :func:`barrier`.
    splits : name -> (normalised images, int64 labels) where each point is scored.
    reset_images : training images on which every point's batch-norm statistics are recomputed
        (:func:`reset_batch_norm`, endpoints included, so that the curve compares like with like);
        None keeps the interpolated running statistics.

    Returns
    -------
    Per split, one :class:`CurvePoint` per lam, in the given order.
    """
    curves: dict[str, list[CurvePoint]] = {name: [] for name in splits}
    for lam in lams:
        model = interpolate(f, g, float(lam))
        if reset_images is not None:
            reset_batch_norm(model, reset_images, batch_size)
        model.eval()
        for name, (images, labels) in splits.items():
            loss, accuracy = loss_and_accuracy(model, images, labels, batch_size)
            curves[name].append(CurvePoint(float(lam), loss, accuracy))
    return curves


BARRIERS = ("endpoints_mean", "endpoints_line")


def barrier(lams: Sequence[float], values: Sequence[float], reference: str = "endpoints_mean") -> float:
    """The barrier of a curve: its largest value minus the endpoints' mean (``endpoints_mean``,
    Ainsworth et al.'s plotting code), or its largest excess over the straight line between the
    endpoints' values (``endpoints_line``, Entezari et al. 2022: ``max_lam v(lam) - ((1 -
    lam) v(0) + lam v(1))``, 0 or more). For an accuracy, pass minus the accuracy.

    Parameters
    ----------
    lams : the grid, containing 0 and 1.
    values : the curve's value at each lam.
    reference : "endpoints_mean" or "endpoints_line".
    """
    if reference not in BARRIERS:
        raise ValueError(f"barrier: unknown reference {reference!r}; expected one of {', '.join(BARRIERS)}")
    lams, values = np.asarray(lams, dtype=float), np.asarray(values, dtype=float)
    if lams.shape != values.shape or lams.ndim != 1:
        raise ValueError(f"barrier: one value per lam, got {lams.shape} lams and {values.shape} values")
    if not (np.isclose(lams, 0).any() and np.isclose(lams, 1).any()):
        raise ValueError("barrier: the grid must contain lam 0 and 1 (the endpoints)")
    start, end = values[np.isclose(lams, 0)][0], values[np.isclose(lams, 1)][0]
    if reference == "endpoints_mean":
        return float(np.max(values) - (start + end) / 2)
    return float(np.max(values - ((1 - lams) * start + lams * end)))
