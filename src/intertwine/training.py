"""The training loop of the zoo: data as tensors on the device, batched augmentation, Adam (or SGD
with momentum) with step drops, best-validation weights kept."""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from intertwine.data import Split
from intertwine.data.augment import augment, normalize
from intertwine.settings import TrainConfig


from intertwine.utils import DivergedError  # noqa: E402  (re-exported: raised by train)


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
) -> float:
    """``factor ** k`` after the k-th of ``drops`` evenly spaced drops (at 1/(drops+1), 2/(drops+1), ...),
    or after the k-th of ``milestones`` (fractions of training) when given; 0.1 during the first
    ``warmup_steps`` steps."""
    if step < warmup_steps:
        return 0.1
    if milestones:
        return factor ** sum(step >= m * total_steps for m in milestones)
    return factor ** min(drops, (drops + 1) * step // total_steps)


def make_optimizer(params, config: TrainConfig) -> torch.optim.Optimizer:
    """Adam, or SGD with momentum (``zoo.training.optimizer``), at ``config.lr``."""
    if config.optimizer == "sgd":
        return torch.optim.SGD(
            params, lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay
        )
    return torch.optim.Adam(params, lr=config.lr, weight_decay=config.weight_decay)


def _autocast(device: torch.device, bf16: bool):
    if bf16 and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


@torch.inference_mode()
def evaluate(
    model: nn.Module,
    split: Split,
    mean: torch.Tensor,
    std: torch.Tensor,
    batch_size: int = 1000,
    bf16: bool = False,
    channels_last: bool = False,
) -> float:
    """Top-1 accuracy of ``model`` (in eval mode) on a split that lives on the model's device; an
    empty split or a batch size below 1 is an error (an empty split has no accuracy, not 0)."""
    if len(split) == 0:
        raise ValueError("evaluate: the split is empty, so it has no accuracy")
    if batch_size < 1:
        raise ValueError(f"evaluate: batch size must be at least 1, got {batch_size}")
    was_training = model.training
    model.eval()
    correct = 0
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    for start in range(0, len(split), batch_size):
        x = normalize(split.images[start : start + batch_size], mean, std)
        with _autocast(x.device, bf16):
            logits = model(x.contiguous(memory_format=memory_format))
        correct += (logits.argmax(1) == split.labels[start : start + batch_size]).sum().item()
    model.train(was_training)
    return correct / max(1, len(split))


def train(
    model: nn.Module,
    train_split: Split,
    val_split: Split,
    config: TrainConfig,
    generator: torch.Generator,
    mean: torch.Tensor,
    std: torch.Tensor,
    label: str = "model",
    log: Callable[[str], None] = print,
) -> TrainResult:
    """Train ``model`` in place and return its best-validation weights.

    Splits, ``mean``/``std`` and ``generator`` must live on the model's device; every random
    choice (order, translations, flips) comes from ``generator``.
    """
    if len(train_split) == 0 or len(val_split) == 0:
        raise ValueError(
            f"{label}: cannot train on {len(train_split)} training and {len(val_split)} "
            "validation images; both splits need at least one"
        )
    device = train_split.images.device
    memory_format = torch.channels_last if config.channels_last else torch.contiguous_format
    model.to(memory_format=memory_format)
    optimizer = make_optimizer(model.parameters(), config)
    steps_per_epoch = math.ceil(len(train_split) / config.batch_size)
    total_steps = config.epochs * steps_per_epoch
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: lr_factor(
            step,
            total_steps,
            config.lr_drops,
            config.lr_drop_factor,
            config.lr_milestones,
            config.warmup_steps,
        ),
    )
    loss_fn = nn.CrossEntropyLoss()

    best = TrainResult(state_dict={}, best_epoch=-1, val_acc=-1.0)
    for epoch in range(1, config.epochs + 1):
        start_time = time.perf_counter()
        model.train()
        lr = optimizer.param_groups[0]["lr"]
        order = torch.randperm(len(train_split), device=device, generator=generator)
        loss_sum = torch.zeros((), device=device)
        correct = torch.zeros((), device=device, dtype=torch.long)
        for step in range(steps_per_epoch):
            idx = order[step * config.batch_size : (step + 1) * config.batch_size]
            x = normalize(train_split.images[idx], mean, std)
            x = augment(x, generator, config.translate, config.flip)
            y = train_split.labels[idx]
            with _autocast(device, config.bf16):
                logits = model(x.contiguous(memory_format=memory_format))
                loss = loss_fn(logits.float(), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            # Accumulated on the device: one host sync per epoch, not per step.
            loss_sum += loss.detach() * len(y)
            correct += (logits.argmax(1) == y).sum()
        train_loss = loss_sum.item() / len(train_split)
        if not math.isfinite(train_loss):
            raise DivergedError(
                f"{label}: training loss became {train_loss} in epoch {epoch}; "
                "lower zoo.training.lr or check the data"
            )
        val_acc = evaluate(
            model, val_split, mean, std, config.eval_batch_size, config.bf16, config.channels_last
        )
        seconds = time.perf_counter() - start_time
        kept = val_acc > best.val_acc
        if kept:
            best.val_acc, best.best_epoch = val_acc, epoch
            best.state_dict = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        best.history.append(
            {
                "epoch": epoch,
                "lr": lr,
                "train_loss": train_loss,
                "train_acc": correct.item() / len(train_split),
                "val_acc": val_acc,
                "epoch_seconds": seconds,
            }
        )
        log(
            f"{label} epoch {epoch}/{config.epochs} lr {lr:.2e} loss {train_loss:.4f} "
            f"train_acc {best.history[-1]['train_acc']:.4f} val_acc {val_acc:.4f} "
            f"({seconds:.1f}s){' *' if kept else ''}"
        )
    return best
