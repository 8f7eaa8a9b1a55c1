"""What a training step and an epoch are made of, shared by the one-model loop (``training.train``)
and packed training (``intertwine.packed_training``): the learning-rate schedule, the optimiser,
bfloat16 autocast, an augmented and mixed batch, the loss, and an epoch's bookkeeping (its steps, its
NaN check, the best-validation weights kept in a ``TrainResult``). ``intertwine.training`` re-exports
the public names (``__all__``); the others are the seams the two loops share."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import nn

from intertwine.data import Split
from intertwine.data.augment import apply_augmentation, draw_augmentation, mix, normalize
from intertwine.utils import DivergedError

if TYPE_CHECKING:
    from intertwine.training_config import TrainConfig


#: The API (documented, re-exported by ``intertwine.training``); the loops' shared steps below are
#: public names too, the seams between ``training`` and ``packed_training``.
__all__ = ["TrainResult", "lr_factor", "make_optimizer"]


@dataclass
class TrainResult:
    state_dict: dict[str, torch.Tensor]  # the kept (best validation) weights, on the CPU
    best_epoch: int
    val_acc: float
    history: list[dict] = field(default_factory=list)  # one dict per epoch


def lr_factor(
    step: int,
    total_steps: int,
    drops: int,
    factor: float,
    milestones: list[float] | None = None,
    warmup_steps: int = 0,
    schedule: str = "step",
    min_factor: float = 0.0,
) -> float:
    """The learning rate at ``step`` as a multiple of the base rate.

    ``schedule`` "step": ``factor ** k`` after the k-th of ``drops`` evenly spaced drops (at
    1/(drops+1), 2/(drops+1), ...), or after the k-th of ``milestones`` (fractions of training)
    when given; 0.1 during the first ``warmup_steps`` steps. "cosine": rising linearly from
    ``min_factor`` to 1 over the warm-up, then ``min_factor + (1 - min_factor) (1 + cos(pi step /
    total_steps)) / 2`` (timm's cosine schedule, whose cosine counts from step 0).

    Parameters
    ----------
    step : int
        The optimiser step, counted from 0.
    total_steps : int
        The optimiser steps of the whole training.
    drops : int
        The number of evenly spaced drops ("step" without ``milestones``).
    factor : float
        The factor of each drop ("step").
    milestones : list[float] or None, default None
        Fractions of training where the rate drops instead ("step").
    warmup_steps : int, default 0
        The length of the warm-up, in steps.
    schedule : str, default "step"
        "step" or "cosine" (any other value is taken as "step").
    min_factor : float, default 0.0
        The cosine schedule's floor and warm-up start.

    Returns
    -------
    float
        The factor the base learning rate is multiplied by.
    """
    if schedule == "cosine":
        if step < warmup_steps:
            return min_factor + (1 - min_factor) * step / warmup_steps
        return (
            min_factor + (1 - min_factor) * (1 + math.cos(math.pi * min(step, total_steps) / total_steps)) / 2
        )
    if step < warmup_steps:
        return 0.1
    if milestones:
        return factor ** sum(step >= m * total_steps for m in milestones)
    return factor ** min(drops, (drops + 1) * step // total_steps)


def epoch_steps(epoch: int, total_steps: int, per_epoch: int, config: TrainConfig, n_images: int):
    """(steps, images) of the (1-based) ``epoch``: a full epoch, or what is left of ``total_steps``."""
    steps = min(per_epoch, total_steps - (epoch - 1) * per_epoch)
    return steps, min(steps * config.batch_size, n_images)


def make_optimizer(
    params, config: TrainConfig, fused: bool = False, capturable: bool = False
) -> torch.optim.Optimizer:
    """Adam, AdamW or SGD with momentum (``zoo.training.optimizer``), at ``config.lr``.

    Parameters
    ----------
    params : iterable
        The parameters to optimise (or parameter groups), as torch's optimisers take them.
    config : TrainConfig
        ``optimizer`` ("sgd", "adamw"; any other value gives Adam), ``lr``, ``weight_decay`` and,
        for SGD, ``momentum``.
    fused : bool, default False
        One fused kernel updates every parameter (on a GPU; a pack's step).
    capturable : bool, default False
        For a CUDA graph: the learning rate is a tensor on the parameters' device, which the
        graph reads (change it in place), and Adam's step counts stay on the device.

    Returns
    -------
    torch.optim.Optimizer
        The optimiser.
    """
    params = list(params)
    if capturable:
        first = params[0]
        if isinstance(first, dict):  # parameter groups: the device of the first group's first
            first["params"] = list(first["params"])
            first = first["params"][0]
        lr = torch.tensor(config.lr, device=first.device)
    else:
        lr = config.lr
    # Only options that are set are passed: an explicit fused=False would also turn off the
    # foreach kernels torch chooses by default on a GPU.
    options = {"fused": True} if fused else {}
    if config.optimizer == "sgd":
        return torch.optim.SGD(
            params, lr=lr, momentum=config.momentum, weight_decay=config.weight_decay, **options
        )
    if capturable:
        options["capturable"] = True
    optimizer_class = torch.optim.AdamW if config.optimizer == "adamw" else torch.optim.Adam
    return optimizer_class(params, lr=lr, weight_decay=config.weight_decay, **options)


def bf16_autocast(device: torch.device, bf16: bool):
    """bfloat16 autocast on a GPU when ``bf16`` (``zoo.training.bf16``); no change otherwise.
    Without autocast's weight cache: a training step uses each weight once, and a cached cast
    would outlive a captured CUDA graph's step (PyTorch's advice for graph capture)."""
    if bf16 and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False)
    return contextlib.nullcontext()


def schedule_factor(config: TrainConfig, step: int, total_steps: int) -> float:
    """:func:`lr_factor` at optimiser ``step`` with ``config``'s schedule (``zoo.training``)."""
    return lr_factor(
        step,
        total_steps,
        config.lr_drops,
        config.lr_drop_factor,
        config.lr_milestones,
        config.warmup_steps,
        config.lr_schedule,
        config.lr_min / config.lr,
    )


def lr_scheduler(optimizer: torch.optim.Optimizer, config: TrainConfig, total_steps: int):
    """The optimiser's learning rate step by step: ``config.lr`` times :func:`schedule_factor`."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: schedule_factor(config, step, total_steps)
    )


@dataclass
class EpochDraws:
    """A member's random draws for one epoch, made at its start from the member's generator: the
    order of the training images, then each position's translation and flip (rows of
    :func:`~intertwine.data.augment.draw_augmentation`). Drawn at once, they are the same whether
    the member trains alone or in a pack, and a pack's batches are built without a step per member."""

    order: torch.Tensor  # (N,) image indices
    shifts: torch.Tensor | None  # (2, N), or None without translations
    flips: torch.Tensor | None  # (N,), or None without flips

    @classmethod
    def draw(cls, n_images: int, generator: torch.Generator, config: TrainConfig) -> EpochDraws:
        order = torch.randperm(n_images, device=generator.device, generator=generator)
        return cls(order, *draw_augmentation(n_images, generator, config.translate, config.flip))

    @classmethod
    def stack(cls, draws: list[EpochDraws]) -> EpochDraws:
        """A pack's draws as one: orders (K, N), shifts (2, K, N), flips (K, N), stacked once an
        epoch so that a step takes its columns instead of K slices."""
        first = draws[0]
        return cls(
            torch.stack([d.order for d in draws]),
            None if first.shifts is None else torch.stack([d.shifts for d in draws], dim=1),
            None if first.flips is None else torch.stack([d.flips for d in draws]),
        )


def mixing_epoch(config: TrainConfig, epoch: int) -> bool:
    """Whether the (1-based) ``epoch`` mixes its batches (mixup or CutMix, when an alpha is set)."""
    mixes = config.mixup_alpha > 0 or config.cutmix_alpha > 0
    return mixes and (config.mixing_epochs is None or epoch <= config.mixing_epochs)


def member_batches(
    split: Split,
    draws: EpochDraws,
    step: int,
    config: TrainConfig,
    generators: list[torch.Generator],
    mean: torch.Tensor,
    std: torch.Tensor,
    epoch: int,
) -> tuple[torch.Tensor, torch.Tensor, list[float]]:
    """Each member's ``step``-th batch of its epoch's draws (``EpochDraws.stack`` of the K
    members' own; K = 1 for a model trained alone): normalised, augmented, and mixed (mixup or
    CutMix, drawn now from the member's generator) in the first ``mixing_epochs``. Returns inputs
    (K, B, C, H, W), labels (K, B) and each member's weight ``lam`` of an image's own label (1.0
    unmixed; the rest goes to the reversed batch's labels). A member's batch is the same in a pack
    as alone: the gather, normalisation and augmentation act on each image alone, and a member's
    mixing draws from its own generator."""
    positions = slice(step * config.batch_size, (step + 1) * config.batch_size)
    idx = draws.order[:, positions]  # (K, B)
    members, batch = idx.shape
    x = apply_augmentation(
        normalize(split.images[idx.flatten()], mean, std),
        None if draws.shifts is None else draws.shifts[:, :, positions].flatten(1),
        None if draws.flips is None else draws.flips[:, positions].flatten(),
        config.translate,
    ).unflatten(0, (members, batch))
    lams = [1.0] * members
    if mixing_epoch(config, epoch):
        mixed = [mix(x[k], g, config.mixup_alpha, config.cutmix_alpha) for k, g in enumerate(generators)]
        x = torch.stack([m for m, _ in mixed])
        lams = [lam for _, lam in mixed]
    return x, split.labels[idx], lams


def mixed_loss(logits: torch.Tensor, y: torch.Tensor, lam, smoothing: float) -> torch.Tensor:
    """Per-sample cross-entropy with label smoothing, of a batch mixed with weight ``lam`` (a
    number, or one per member of a pack: ``logits`` (K, B, C), ``y`` (K, B)) with its reverse. A
    number 1 (no member mixed) skips the reverse's cross-entropy, which would be weighed by 0."""

    def ce(labels):
        return nn.functional.cross_entropy(
            logits.flatten(0, -2), labels.flatten(), label_smoothing=smoothing, reduction="none"
        ).view(labels.shape)

    loss = ce(y)
    if isinstance(lam, torch.Tensor) or lam < 1.0:
        lam = lam.view(-1, *[1] * (y.ndim - 1)) if isinstance(lam, torch.Tensor) else lam
        loss = lam * loss + (1 - lam) * ce(y.flip(-1))
    return loss


def checked_train_loss(loss_sum: float, n: int, label: str, epoch: int) -> float:
    """The epoch's mean training loss; NaN or infinite is a ``DivergedError``."""
    train_loss = loss_sum / n
    if not math.isfinite(train_loss):
        raise DivergedError(
            f"{label}: training loss became {train_loss} in epoch {epoch}; "
            "lower zoo.training.lr or check the data"
        )
    return train_loss


def end_epoch(
    result: TrainResult, row: dict, state: Callable[[], dict], label: str, epochs: int, log
) -> None:
    """Record an epoch in ``result`` and keep the weights (``state()``) when validation improved."""
    kept = row["val_acc"] > result.val_acc
    if kept:
        result.val_acc, result.best_epoch = row["val_acc"], row["epoch"]
        # In the default memory format whatever the training's: a checkpoint's weights read the same
        # to any code that views them.
        result.state_dict = {
            k: v.detach().to("cpu", copy=True, memory_format=torch.contiguous_format)
            for k, v in state().items()
        }
    result.history.append(row)
    log(
        f"{label} epoch {row['epoch']}/{epochs} lr {row['lr']:.2e} loss {row['train_loss']:.4f} "
        f"train_acc {row['train_acc']:.4f} val_acc {row['val_acc']:.4f} "
        f"({row['epoch_seconds']:.1f}s){' *' if kept else ''}"
    )
