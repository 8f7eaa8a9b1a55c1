"""Linear mode connectivity: the straight line between two networks' weights, and its barrier.

The interpolation ``(1 - lam) f + lam g`` of every parameter, corrected at each point in one of
three ways (:data:`CORRECTIONS`): ``none`` keeps the interpolated batch-norm statistics; ``reset``
recomputes them on training images (Ainsworth et al.; the running statistics of an interpolated
network are not the interpolation of the endpoints'); ``repair`` is Jordan et al.'s REPAIR
("REPAIR: REnormalizing Permuted Activations for Interpolation Repair", ICLR 2023), which gives
every channel of the interpolated network the interpolation of the endpoints' mean and standard
deviation, and so also corrects networks without batch norm. The barrier of a curve is its largest
value minus the endpoints' mean (Ainsworth et al.) or its largest excess over the straight line
between the endpoints (Entezari et al. 2022).

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
    "CORRECTIONS",
    "CurvePoint",
    "RepairGoal",
    "barrier",
    "channel_statistics",
    "correct",
    "interpolate",
    "interpolation_curve",
    "loss_and_accuracy",
    "repair",
    "repaired_layers",
    "reset_batch_norm",
]

#: How each point of a line is corrected before it is scored (see the module docstring).
CORRECTIONS = ("none", "reset", "repair")


@dataclass(frozen=True)
class CurvePoint:
    """One point of an interpolation curve: the weight ``lam`` of g, test loss and accuracy."""

    lam: float
    loss: float
    accuracy: float


def interpolate(f: nn.Module, g: nn.Module, lam: float) -> nn.Module:
    """A new model with every parameter and floating buffer ``(1 - lam) f + lam g`` (``f`` and
    ``g`` untouched; integer buffers, such as batch norm's batch count, are f's). At ``lam`` 0 and 1
    the result is f and g exactly.

    Parameters
    ----------
    f, g : nn.Module
        Two models of one architecture (the same state-dict keys).
    lam : float
        The weight of g, in [0, 1].

    Returns
    -------
    nn.Module
        The interpolated model, a deep copy of f.
    """
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
    mode. A model without batch norm is returned unchanged.

    Parameters
    ----------
    model : nn.Module
        The network, changed in place.
    images : Tensor, shape (N, C, H, W)
        Normalised training images, at least one where the model has batch norm.
    batch_size : int
        Images per forward pass.

    Returns
    -------
    nn.Module
        ``model``, in eval mode.
    """
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
    """Mean cross-entropy and top-1 accuracy of ``model`` (as it is: put it in eval mode).

    Parameters
    ----------
    model : nn.Module
        The network, run without gradients.
    images : Tensor, shape (N, C, H, W)
        Normalised test images, at least one.
    labels : Tensor, shape (N,)
        Their int64 class labels.
    batch_size : int
        Images per forward pass.

    Returns
    -------
    loss : float
        The mean cross-entropy (summed in float64).
    accuracy : float
        The fraction of images whose largest logit is their label's.
    """
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


class _Reached(Exception):
    """Raised by a statistics hook once the last layer it needs has run: the rest of the forward
    pass would be wasted."""


def repaired_layers(model: nn.Module, images: Tensor) -> list[str]:
    """The layers REPAIR corrects, in the order the forward pass first calls them: every batch
    norm with affine parameters, and every convolution or linear layer with a bias, except the
    last convolution or linear layer called (the logits, which Jordan et al.'s code leaves alone).
    A convolution without a bias feeds a batch norm, which is corrected in its place.

    Parameters
    ----------
    model : the network (one forward pass on ``images[:2]`` finds the order).
    images : a batch of its inputs.

    Returns
    -------
    list of str
        The module names of the layers, in forward order.
    """
    candidates = {
        name: module
        for name, module in model.named_modules()
        if isinstance(module, (nn.Conv2d, nn.Linear, nn.modules.batchnorm._BatchNorm))
    }
    order: list[str] = []

    def record(name):
        def hook(module, args, output):
            if name not in order:
                order.append(name)

        return hook

    handles = [module.register_forward_hook(record(name)) for name, module in candidates.items()]
    try:
        with torch.no_grad():
            model.eval()(images[:2])
    finally:
        for handle in handles:
            handle.remove()
    logits = [name for name in order if not isinstance(candidates[name], nn.modules.batchnorm._BatchNorm)][
        -1:
    ]
    return [
        name
        for name in order
        if name not in logits
        and getattr(candidates[name], "bias", None) is not None
        and getattr(candidates[name], "weight", None) is not None
    ]


def channel_statistics(
    model: nn.Module, images: Tensor, layers: Sequence[str], batch_size: int = 250
) -> dict[str, tuple[Tensor, Tensor]]:
    """Per layer of ``layers`` (module names), the mean and standard deviation of each output
    channel over ``images`` (and over positions, for a convolution's (N, C, H, W) output), with
    ``model`` in eval mode; accumulated in float64.

    Parameters
    ----------
    model : nn.Module
        The network, put in eval mode, run without gradients; each pass stops once ``layers[-1]`` has run.
    images : Tensor, shape (N, C, H, W)
        Normalised images, at least one.
    layers : sequence of str
        Module names whose outputs are (N, C) or (N, C, H, W).
    batch_size : int
        Images per forward pass.

    Returns
    -------
    name -> (mean, std), each of shape (channels,), in the model's dtype.
    """
    if len(images) == 0:
        raise ValueError("channel_statistics: no images")
    modules = dict(model.named_modules())
    sums: dict[str, list] = {}
    last = list(layers)[-1] if layers else None

    def track(name):
        def hook(module, args, output):
            if output.ndim not in (2, 4):
                raise ValueError(
                    f"channel_statistics: {name} returns a {output.ndim}-D output; REPAIR corrects "
                    "(N, C) and (N, C, H, W) outputs only"
                )
            values = output.detach().double().transpose(0, 1).reshape(output.shape[1], -1)
            total = sums.setdefault(name, [0, 0.0, 0.0])
            total[0] += values.shape[1]
            total[1] = total[1] + values.sum(1)
            total[2] = total[2] + values.square().sum(1)
            if name == last:
                raise _Reached

        return hook

    handles = [modules[name].register_forward_hook(track(name)) for name in layers]
    model.eval()
    try:
        with torch.no_grad():
            for start in range(0, len(images), batch_size):
                try:
                    model(images[start : start + batch_size])
                except _Reached:
                    pass
    finally:
        for handle in handles:
            handle.remove()
    dtype = next(model.parameters()).dtype
    stats = {}
    for name in layers:
        count, total, squares = sums[name]
        mean = total / count
        std = (squares / count - mean.square()).clamp_min(0).sqrt()
        stats[name] = (mean.to(dtype), std.to(dtype))
    return stats


@dataclass(frozen=True)
class RepairGoal:
    """What REPAIR aims at along one line, whatever the lam: the layers it corrects
    (:func:`repaired_layers`) and the endpoints' channel statistics there
    (:func:`channel_statistics` of f and of g on the training images). Measured once per curve by
    :meth:`measure` and passed to :func:`repair` at each lam."""

    layers: tuple[str, ...]
    f: dict[str, tuple[Tensor, Tensor]]
    g: dict[str, tuple[Tensor, Tensor]]

    @classmethod
    def measure(cls, f: nn.Module, g: nn.Module, images: Tensor, batch_size: int = 250) -> RepairGoal:
        """The goal of the line from ``f`` to ``g`` (one architecture, in eval mode) on ``images``."""
        layers = tuple(repaired_layers(f, images))
        return cls(
            layers,
            channel_statistics(f, images, layers, batch_size),
            channel_statistics(g, images, layers, batch_size),
        )


def repair(
    model: nn.Module,
    f: nn.Module,
    g: nn.Module,
    lam: float,
    images: Tensor,
    batch_size: int = 250,
    goal: RepairGoal | None = None,
) -> nn.Module:
    """Jordan et al.'s REPAIR, in place: each layer of :func:`repaired_layers`, in forward order,
    is rescaled per output channel so that its channels' mean and standard deviation on ``images``
    are ``(1 - lam)`` f's plus ``lam`` g's, the rescaling fused into the layer's weight and bias
    (the architecture is unchanged). Exact layer by layer: each layer is measured after the layers
    before it are corrected (Jordan et al. estimate all layers in one pass of batch statistics).

    Parameters
    ----------
    model : the interpolated network ``(1 - lam) f + lam g``, corrected in place.
    f, g : the endpoints, in eval mode with their own statistics.
    lam : the weight of g.
    images : training images, normalised.
    goal : f's and g's statistics on ``images`` (:meth:`RepairGoal.measure`), which do not depend
        on lam: measured here when not given.

    Returns
    -------
    ``model``, in eval mode.
    """
    if goal is None:
        goal = RepairGoal.measure(f, g, images, batch_size)
    goal_f, goal_g = goal.f, goal.g
    modules = dict(model.named_modules())
    for name in goal.layers:
        mean, std = channel_statistics(model, images, [name], batch_size)[name]
        goal_mean = (1 - lam) * goal_f[name][0] + lam * goal_g[name][0]
        goal_std = (1 - lam) * goal_f[name][1] + lam * goal_g[name][1]
        # A channel that is constant on the images keeps its scale: only its mean can be set.
        scale = torch.where(std > 0, goal_std / std.clamp_min(torch.finfo(std.dtype).tiny), 1.0)
        layer = modules[name]
        with torch.no_grad():
            layer.weight.mul_(scale.view(-1, *[1] * (layer.weight.ndim - 1)))
            layer.bias.mul_(scale).add_(goal_mean - scale * mean)
    return model.eval()


def correct(
    model: nn.Module,
    correction: str,
    f: nn.Module,
    g: nn.Module,
    lam: float,
    images: Tensor | None,
    batch_size: int = 250,
    goal: RepairGoal | None = None,
) -> nn.Module:
    """The interpolated ``model`` at ``lam`` corrected by ``correction`` (:data:`CORRECTIONS`), in
    place, in eval mode. ``reset`` recomputes the batch-norm statistics at every lam, endpoints
    included, so that the curve compares like with like; ``repair`` leaves the endpoints as they
    are (its goal there is the endpoint's own statistics). ``goal``, for ``repair``: the line's
    :class:`RepairGoal`, measured once by a caller that corrects several points of one line.

    Parameters
    ----------
    model : nn.Module
        The interpolated network, corrected in place.
    correction : str
        One of ``CORRECTIONS``: "none", "reset" or "repair".
    f, g : nn.Module
        The endpoints, for ``repair``.
    lam : float
        The weight of g.
    images : Tensor, shape (N, C, H, W), optional
        Normalised training images; None only for "none".
    batch_size : int
        Images per forward pass.
    goal : RepairGoal, optional
        The line's goal, for ``repair``; None (the default): measured here when needed.

    Returns
    -------
    nn.Module
        ``model``, in eval mode.
    """
    if correction not in CORRECTIONS:
        raise ValueError(
            f"correct: unknown correction {correction!r}; expected one of {', '.join(CORRECTIONS)}"
        )
    if correction != "none" and images is None:
        raise ValueError(f"correct: the {correction!r} correction needs training images")
    if correction == "reset":
        reset_batch_norm(model, images, batch_size)
    elif correction == "repair" and 0.0 < lam < 1.0:
        repair(model, f, g, lam, images, batch_size, goal)
    return model.eval()


def interpolation_curve(
    f: nn.Module,
    g: nn.Module,
    lams: Sequence[float],
    splits: Mapping[str, tuple[Tensor, Tensor]],
    correction: str = "reset",
    train_images: Tensor | None = None,
    batch_size: int = 250,
    known: Mapping[float, Mapping[str, CurvePoint]] | None = None,
) -> dict[str, list[CurvePoint]]:
    """Loss and accuracy along ``(1 - lam) f + lam g`` at each of ``lams``, on each split.

    Parameters
    ----------
    f, g : two models of one architecture (g aligned to f or not).
    lams : the weights of g, each in [0, 1]; include 0 and 1 for :func:`barrier`.
    splits : name -> (normalised images, int64 labels) where each point is scored.
    correction : how each point is corrected before it is scored (:func:`correct`).
    train_images : the training images the correction measures on (not needed for ``none``).
    known : points already scored, lam -> split -> point: f's own point at lam 0 is the same for
        every g it is paired with, so a caller comparing several alignments scores it once.

    Returns
    -------
    Per split, one :class:`CurvePoint` per lam, in the given order. For ``repair``, f's and g's
    statistics (:class:`RepairGoal`) are measured once, before the first point that needs them.
    """
    known = known or {}
    curves: dict[str, list[CurvePoint]] = {name: [] for name in splits}
    goal = None
    for lam in lams:
        lam = float(lam)
        if lam in known:
            for name in splits:
                curves[name].append(known[lam][name])
            continue
        if correction == "repair" and 0.0 < lam < 1.0 and goal is None and train_images is not None:
            goal = RepairGoal.measure(f, g, train_images, batch_size)
        model = correct(interpolate(f, g, lam), correction, f, g, lam, train_images, batch_size, goal)
        for name, (images, labels) in splits.items():
            loss, accuracy = loss_and_accuracy(model, images, labels, batch_size)
            curves[name].append(CurvePoint(lam, loss, accuracy))
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

    Returns
    -------
    float
        The barrier, 0 or more (both references lie at or below the curve's largest value), in the
        units of ``values``.
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
