"""The training loop of the zoo: data as tensors on the device, batched augmentation (mixup and
CutMix optional), Adam, AdamW or SGD with momentum, step drops or a cosine schedule, best-validation
weights kept. ``train`` trains one model, ``train_pack`` K members of a variant at once (the stacked
network is in ``intertwine.packed_training``); the pieces of a step and an epoch both use are in
``intertwine.training_steps``. Their public names are importable from here."""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING, Callable

import torch
from torch import nn

from intertwine.data import Split
from intertwine.data.augment import normalize
from intertwine.packed_training import check_pack, pack_network, pack_problem, train_stacked
from intertwine.training_steps import (
    EpochDraws,
    TrainResult,
    bf16_autocast,
    checked_train_loss,
    end_epoch,
    epoch_steps,
    lr_factor,
    lr_scheduler,
    make_optimizer,
    member_batches,
    mixed_loss,
)

if TYPE_CHECKING:
    from intertwine.training_config import TrainConfig


from intertwine.utils import DivergedError  # noqa: E402  (re-exported: raised by train)

__all__ = [
    "DivergedError",
    "TrainResult",
    "evaluate",
    "lr_factor",
    "make_optimizer",
    "pack_problem",
    "train",
    "train_pack",
]


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
    empty split or a batch size below 1 is an error (an empty split has no accuracy, not 0).

    Parameters
    ----------
    model : nn.Module
        The classifier, run under ``torch.inference_mode`` (its mode restored afterwards).
    split : Split
        The uint8 images and their labels, on the model's device.
    mean, std : Tensor
        The per-channel input normalisation (0..1 units).
    batch_size : int, default 1000
        Images per forward pass, at least 1.
    bf16 : bool, default False
        Whether the forward runs under bfloat16 autocast (on CUDA only).
    channels_last : bool, default False
        Whether the inputs are passed in the channels-last memory format.

    Returns
    -------
    float
        The fraction of images whose largest logit is their label's.
    """
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
        with bf16_autocast(x.device, bf16):
            logits = model(x.contiguous(memory_format=memory_format))
        correct += (logits.argmax(1) == split.labels[start : start + batch_size]).sum().item()
    model.train(was_training)
    return correct / max(1, len(split))


def _check_splits(train_split: Split, val_split: Split, label: str) -> None:
    if len(train_split) == 0 or len(val_split) == 0:
        raise ValueError(
            f"{label}: cannot train on {len(train_split)} training and {len(val_split)} "
            "validation images; both splits need at least one"
        )


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
    each_epoch: Callable[[int, nn.Module], None] | None = None,
) -> TrainResult:
    """Train ``model`` in place and return its best-validation weights.

    Splits, ``mean``/``std`` and ``generator`` must live on the model's device; every random
    choice (order, translations, flips, mixing) comes from ``generator``. ``each_epoch(epoch,
    model)``, when given, is called before the first epoch (epoch 0) and after each epoch; it must
    leave the model, its modes and the generator as they were (the gate recording of
    ``intertwine.gates.gate_patterns`` does: the weights come out bit-identical).

    Parameters
    ----------
    model : nn.Module
        The network, trained in place (put in ``config.channels_last``'s memory format); it ends
        with the last epoch's weights.
    train_split, val_split : Split
        The training images, and the validation images that choose the epoch kept; neither empty
        (a ValueError).
    config : TrainConfig
        The recipe (``zoo.training``): length, optimiser, schedule, augmentation, mixing, bf16, ...
    generator : torch.Generator
        The source of every random draw.
    mean, std : Tensor
        The per-channel input normalisation (0..1 units).
    label : str, default "model"
        What the log's lines (and a ``DivergedError``'s message) start with.
    log : Callable[[str], None], default print
        Where one line per epoch goes.
    each_epoch : Callable[[int, nn.Module], None] or None, default None
        Called with (epoch, model) before the first epoch and after each one (see above).

    Returns
    -------
    TrainResult
        ``state_dict``, the best-validation weights (on the CPU), their ``best_epoch`` and
        ``val_acc``, and the ``history``: one dict per epoch (``epoch``, ``lr``, ``train_loss``,
        ``train_acc``, ``val_acc``, ``epoch_seconds``).

    Raises
    ------
    DivergedError
        When an epoch's mean training loss is NaN or infinite.
    """
    _check_splits(train_split, val_split, label)
    device = train_split.images.device
    memory_format = torch.channels_last if config.channels_last else torch.contiguous_format
    model.to(memory_format=memory_format)
    optimizer = make_optimizer(model.parameters(), config)
    epochs, total_steps, steps_per_epoch = config.length(len(train_split))
    schedule = lr_scheduler(optimizer, config, total_steps)

    result = TrainResult(state_dict={}, best_epoch=-1, val_acc=-1.0)
    if each_epoch is not None:
        each_epoch(0, model)
    for epoch in range(1, epochs + 1):
        start_time = time.perf_counter()
        model.train()
        lr = optimizer.param_groups[0]["lr"]
        draws = EpochDraws.stack([EpochDraws.draw(len(train_split), generator, config)])
        loss_sum = torch.zeros((), device=device)
        correct = torch.zeros((), device=device, dtype=torch.long)
        steps, seen = epoch_steps(epoch, total_steps, steps_per_epoch, config, len(train_split))
        for step in range(steps):
            xs, ys, lams = member_batches(train_split, draws, step, config, [generator], mean, std, epoch)
            x, y, lam = xs[0], ys[0], lams[0]
            with bf16_autocast(device, config.bf16):
                logits = model(x.contiguous(memory_format=memory_format))
                loss = mixed_loss(logits.float(), y, lam, config.label_smoothing).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            # Accumulated on the device: one host sync per epoch, not per step.
            loss_sum += loss.detach() * len(y)
            correct += (logits.argmax(1) == y).sum()
        train_loss = checked_train_loss(loss_sum.item(), seen, label, epoch)
        val_acc = evaluate(
            model, val_split, mean, std, config.eval_batch_size, config.bf16, config.channels_last
        )
        row = {
            "epoch": epoch,
            "lr": lr,
            "train_loss": train_loss,
            "train_acc": correct.item() / seen,
            "val_acc": val_acc,
            "epoch_seconds": time.perf_counter() - start_time,
        }
        end_epoch(result, row, model.state_dict, label, epochs, log)
        if each_epoch is not None:
            each_epoch(epoch, model)
    return result


# --- packed training: K members of a variant as one network ------------------------------------


def train_pack(
    models: list[nn.Module],
    train_split: Split,
    val_split: Split,
    config: TrainConfig,
    generators: list[torch.Generator],
    mean: torch.Tensor,
    std: torch.Tensor,
    labels: list[str],
    log: Callable[[str], None] = print,
) -> list[TrainResult | DivergedError]:
    """Train K members of one architecture together; member k's result, or the ``DivergedError``
    that stopped it (the others go on).

    Member k draws its batch order and augmentations from ``generators[k]`` in the order
    ``train`` does, starts from ``models[k]``'s weights, and has its own optimiser state,
    schedule, NaN check and best-epoch selection: it ends with the weights ``train`` gives it
    alone, up to float rounding (a batched convolution sums in another order). The models are
    not changed. The pack runs as one wide network where the architecture widens, else under
    ``vmap``; architectures neither runs (``pack_network``) train one after another, with the
    reasons logged, as does a pack of one, which is ``train`` itself. With ``config.pack_mode``
    "streams" each member is its own network, on its own CUDA stream on a GPU (on a CPU: exactly
    ``train``'s weights).

    Parameters
    ----------
    models : the K members' initial models, of one architecture.
    train_split, val_split : the training and validation images (on the device).
    config : the training recipe, the same for every member.
    generators : one per member, its batch orders and augmentations.
    mean, std : the per-channel normalisation.
    labels : one per member, what its lines of the log start with.
    log : where the log's lines go.

    Returns
    -------
    Per member, its ``TrainResult`` or the ``DivergedError`` that stopped it.
    """
    check_pack(models, generators, labels)
    _check_splits(train_split, val_split, labels[0])
    if len(models) == 1:
        return [
            _train_or_diverge(
                models[0], train_split, val_split, config, generators[0], mean, std, labels[0], log
            )
        ]
    example = normalize(train_split.images[:2], mean, std)
    network = pack_network(models, example, labels[0], log, config.pack_mode, config.channels_last)
    if network is None:
        return [
            _train_or_diverge(model, train_split, val_split, config, g, mean, std, label, log)
            for model, g, label in zip(models, generators, labels)
        ]
    return train_stacked(network, train_split, val_split, config, generators, mean, std, labels, log)


def _train_or_diverge(model, train_split, val_split, config, generator, mean, std, label, log):
    try:
        return train(copy.deepcopy(model), train_split, val_split, config, generator, mean, std, label, log)
    except DivergedError as err:
        log(str(err))
        return err
