"""The training loop of the zoo: data as tensors on the device, batched augmentation (mixup and
CutMix optional), Adam, AdamW or SGD with momentum, step drops or a cosine schedule, best-validation
weights kept."""

from __future__ import annotations

import contextlib
import copy
import math
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import torch
from torch import nn

from intertwine.data import Split
from intertwine.data.augment import augment, mix, normalize

if TYPE_CHECKING:
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


def _epoch_steps(epoch: int, total_steps: int, per_epoch: int, config: TrainConfig, n_images: int):
    """(steps, images) of the (1-based) ``epoch``: a full epoch, or what is left of ``total_steps``."""
    steps = min(per_epoch, total_steps - (epoch - 1) * per_epoch)
    return steps, min(steps * config.batch_size, n_images)


def make_optimizer(params, config: TrainConfig) -> torch.optim.Optimizer:
    """Adam, AdamW or SGD with momentum (``zoo.training.optimizer``), at ``config.lr``.

    Parameters
    ----------
    params : iterable
        The parameters to optimise (or parameter groups), as torch's optimisers take them.
    config : TrainConfig
        ``optimizer`` ("sgd", "adamw"; any other value gives Adam), ``lr``, ``weight_decay`` and,
        for SGD, ``momentum``.

    Returns
    -------
    torch.optim.Optimizer
        The optimiser.
    """
    if config.optimizer == "sgd":
        return torch.optim.SGD(
            params, lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay
        )
    if config.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
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
        with _autocast(x.device, bf16):
            logits = model(x.contiguous(memory_format=memory_format))
        correct += (logits.argmax(1) == split.labels[start : start + batch_size]).sum().item()
    model.train(was_training)
    return correct / max(1, len(split))


def _schedule(optimizer: torch.optim.Optimizer, config: TrainConfig, total_steps: int):
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: lr_factor(
            step,
            total_steps,
            config.lr_drops,
            config.lr_drop_factor,
            config.lr_milestones,
            config.warmup_steps,
            config.lr_schedule,
            config.lr_min / config.lr,
        ),
    )


def _check_splits(train_split: Split, val_split: Split, label: str) -> None:
    if len(train_split) == 0 or len(val_split) == 0:
        raise ValueError(
            f"{label}: cannot train on {len(train_split)} training and {len(val_split)} "
            "validation images; both splits need at least one"
        )


def _batch(
    split: Split, order: torch.Tensor, step: int, config: TrainConfig, generator, mean, std, epoch: int
):
    """The ``step``-th batch of an epoch's ``order``: normalised, augmented with ``generator``,
    mixed (mixup or CutMix) in the first ``mixing_epochs``; its labels, and the weight ``lam`` of
    each image's own label (1 unmixed; the rest goes to the reversed batch's labels)."""
    idx = order[step * config.batch_size : (step + 1) * config.batch_size]
    x = augment(normalize(split.images[idx], mean, std), generator, config.translate, config.flip)
    if config.mixing_epochs is None or epoch <= config.mixing_epochs:
        x, lam = mix(x, generator, config.mixup_alpha, config.cutmix_alpha)
    else:
        lam = 1.0
    return x, split.labels[idx], lam


def _loss(logits: torch.Tensor, y: torch.Tensor, lam, smoothing: float) -> torch.Tensor:
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


def _train_loss(loss_sum: float, n: int, label: str, epoch: int) -> float:
    """The epoch's mean training loss; NaN or infinite is a ``DivergedError``."""
    train_loss = loss_sum / n
    if not math.isfinite(train_loss):
        raise DivergedError(
            f"{label}: training loss became {train_loss} in epoch {epoch}; "
            "lower zoo.training.lr or check the data"
        )
    return train_loss


def _end_epoch(
    result: TrainResult, row: dict, state: Callable[[], dict], label: str, epochs: int, log
) -> None:
    """Record an epoch in ``result`` and keep the weights (``state()``) when validation improved."""
    kept = row["val_acc"] > result.val_acc
    if kept:
        result.val_acc, result.best_epoch = row["val_acc"], row["epoch"]
        result.state_dict = {k: v.detach().to("cpu", copy=True) for k, v in state().items()}
    result.history.append(row)
    log(
        f"{label} epoch {row['epoch']}/{epochs} lr {row['lr']:.2e} loss {row['train_loss']:.4f} "
        f"train_acc {row['train_acc']:.4f} val_acc {row['val_acc']:.4f} "
        f"({row['epoch_seconds']:.1f}s){' *' if kept else ''}"
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
    choice (order, translations, flips) comes from ``generator``. ``each_epoch(epoch, model)``, when
    given, is called before the first epoch (epoch 0) and after each epoch; it must leave the
    model, its modes and the generator as they were (the gate recording of
    ``intertwine.gates.gate_patterns`` does: the weights come out bit-identical).

    Parameters
    ----------
    model : nn.Module
        The network, trained in place (put in ``config.channels_last``'s memory format); it ends
        with the last epoch's weights.
    train_split, val_split : Split
        The training images, and the validation images that choose the epoch kept.
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
    schedule = _schedule(optimizer, config, total_steps)

    result = TrainResult(state_dict={}, best_epoch=-1, val_acc=-1.0)
    if each_epoch is not None:
        each_epoch(0, model)
    for epoch in range(1, epochs + 1):
        start_time = time.perf_counter()
        model.train()
        lr = optimizer.param_groups[0]["lr"]
        order = torch.randperm(len(train_split), device=device, generator=generator)
        loss_sum = torch.zeros((), device=device)
        correct = torch.zeros((), device=device, dtype=torch.long)
        steps, seen = _epoch_steps(epoch, total_steps, steps_per_epoch, config, len(train_split))
        for step in range(steps):
            x, y, lam = _batch(train_split, order, step, config, generator, mean, std, epoch)
            with _autocast(device, config.bf16):
                logits = model(x.contiguous(memory_format=memory_format))
                loss = _loss(logits.float(), y, lam, config.label_smoothing).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            # Accumulated on the device: one host sync per epoch, not per step.
            loss_sum += loss.detach() * len(y)
            correct += (logits.argmax(1) == y).sum()
        train_loss = _train_loss(loss_sum.item(), seen, label, epoch)
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
        _end_epoch(result, row, model.state_dict, label, epochs, log)
        if each_epoch is not None:
            each_epoch(epoch, model)
    return result


# --- packed training: K members of a variant as one network ------------------------------------


def _batch_norm_in_float32(layer: nn.Module, inputs: tuple) -> tuple | None:
    """Under bf16 autocast a batch norm runs in its input's dtype (bf16 after a convolution), and
    on CUDA the vmapped batch norm's backward then fails ("Expected running_mean to have type
    BFloat16 but got Float"): it gets its input in float32, the dtype of its statistics."""
    x = inputs[0]
    return (x.float(), *inputs[1:]) if x.dtype in (torch.bfloat16, torch.float16) else None


class _Stack:
    """K models of one architecture as stacked tensors (member k is index k of each), run by
    ``torch.func.vmap`` over ``functional_call`` of the first model: one batched forward and
    backward for the K members. Each member's parameters, gradients, batch-norm statistics and
    (elementwise) optimiser state stay its own."""

    def __init__(self, models: list[nn.Module]):
        self.module = copy.deepcopy(models[0])  # its hooks below stay off the caller's model
        for layer in self.module.modules():
            if isinstance(layer, nn.modules.batchnorm._BatchNorm):
                layer.register_forward_pre_hook(_batch_norm_in_float32)
        self.params = {
            name: torch.stack([m.get_parameter(name).detach() for m in models]).requires_grad_(
                p.requires_grad
            )
            for name, p in self.module.named_parameters()
        }
        self.buffers = {
            name: torch.stack([m.get_buffer(name) for m in models]) for name, _ in self.module.named_buffers()
        }
        self.state_keys = list(self.module.state_dict())

    def trainable(self) -> list[torch.Tensor]:
        return [p for p in self.params.values() if p.requires_grad]

    def __call__(self, x: torch.Tensor, shared_input: bool = False) -> torch.Tensor:
        """Logits (K, B, classes) of inputs (B, K, ...), member k's batch at ``x[:, k]``, or of one
        batch (B, ...) every member sees."""

        def member(params, buffers, x):
            return torch.func.functional_call(self.module, (params, buffers), (x,))

        # Batch-major inputs: vmap runs a convolution of K members as one grouped convolution over
        # (B, K * C, H, W), a view of them, not a copy (measured 1.25x at Myrtle width 1, K = 4).
        in_dims = (0, 0, None if shared_input else 1)
        return torch.func.vmap(member, in_dims=in_dims)(self.params, self.buffers, x)

    def state_dict(self, k: int) -> dict[str, torch.Tensor]:
        """Member k's weights, keyed like ``model.state_dict()``."""
        tensors = self.params | self.buffers
        return {name: tensors[name][k] for name in self.state_keys}


def pack_problem(models: list[nn.Module], example: torch.Tensor) -> str | None:
    """Why these models cannot train packed (one forward and backward of ``example`` under
    ``vmap`` fails), or None. Runs on copies: the models are left as they were.

    Parameters
    ----------
    models : list[nn.Module]
        The pack's members.
    example : Tensor
        A normalised input batch (B, ...), which every member gets.

    Returns
    -------
    str or None
        Why (the members are not one architecture, or the error ``vmap`` raised), or None when they
        can train packed.
    """
    if len({type(m) for m in models}) != 1 or len({tuple(m.state_dict()) for m in models}) != 1:
        return "the members are not one architecture"
    stack = _Stack([copy.deepcopy(m) for m in models])
    was_training = stack.module.training
    stack.module.train()
    try:
        stack(example.unsqueeze(1).expand(-1, len(models), *example.shape[1:])).float().sum().backward()
    except Exception as err:  # noqa: BLE001 - any op vmap cannot batch; the message says which
        return f"torch.func.vmap cannot run its forward ({type(err).__name__}: {str(err).splitlines()[0]})"
    finally:
        stack.module.train(was_training)
    return None


@torch.no_grad()
def _evaluate_stack(stack: _Stack, split: Split, mean, std, batch_size: int, bf16: bool) -> list[float]:
    """Top-1 accuracy of each member, in eval mode: every member sees each batch once."""
    was_training = stack.module.training
    stack.module.eval()
    correct = torch.zeros(
        len(next(iter(stack.params.values()))), dtype=torch.long, device=split.images.device
    )
    for start in range(0, len(split), batch_size):
        x = normalize(split.images[start : start + batch_size], mean, std)
        with _autocast(x.device, bf16):
            logits = stack(x, shared_input=True)
        correct += (logits.argmax(-1) == split.labels[start : start + batch_size]).sum(1)
    stack.module.train(was_training)
    return (correct.double() / len(split)).tolist()


def _check_pack(models: list[nn.Module], generators: list[torch.Generator], labels: list[str]) -> None:
    """ValueError unless there is one generator (each its own) and one label per member and the
    members share one architecture (their parameters and buffers, by name and shape)."""
    if not models:
        raise ValueError("train_pack: no models given; a pack trains one or more members")
    if len(generators) != len(models) or len(labels) != len(models):
        raise ValueError(
            f"train_pack: {len(models)} models, {len(generators)} generators and {len(labels)} labels; "
            "give one generator and one label per member"
        )
    if len({id(g) for g in generators}) != len(generators):
        raise ValueError(
            "train_pack: one generator is given for two members, which would interleave their draws; "
            "give each member its own (seeded from the member's seed)"
        )
    shapes = [{k: tuple(v.shape) for k, v in m.state_dict().items()} for m in models]
    for k, other in enumerate(shapes[1:], 1):
        if other != shapes[0]:
            key = next(
                (key for key in shapes[0] if other.get(key) != shapes[0][key]),
                next(iter(set(other) - set(shapes[0])), None),
            )
            raise ValueError(
                f"train_pack: members {labels[0]!r} and {labels[k]!r} have different architectures ({key!r} is "
                f"{shapes[0].get(key)} in the first and {other.get(key)} in the other); a pack holds members of "
                "one variant"
            )


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
    not changed. Architectures ``vmap`` cannot run (``pack_problem``) train one after another,
    with the reason logged; so does a pack of one, which is ``train`` itself.

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
    _check_pack(models, generators, labels)
    _check_splits(train_split, val_split, labels[0])
    if len(models) == 1:
        return [
            _train_or_diverge(
                models[0], train_split, val_split, config, generators[0], mean, std, labels[0], log
            )
        ]
    problem = pack_problem(models, normalize(train_split.images[:2], mean, std))
    if problem:
        log(f"{labels[0]} ...: training the {len(models)} members one at a time: {problem}")
        return [
            _train_or_diverge(model, train_split, val_split, config, g, mean, std, label, log)
            for model, g, label in zip(models, generators, labels)
        ]
    return _train_stacked(models, train_split, val_split, config, generators, mean, std, labels, log)


def _train_stacked(
    models: list[nn.Module],
    train_split: Split,
    val_split: Split,
    config: TrainConfig,
    generators: list[torch.Generator],
    mean: torch.Tensor,
    std: torch.Tensor,
    labels: list[str],
    log: Callable[[str], None],
) -> list[TrainResult | DivergedError]:
    """``train_pack``'s members trained as one stack (``_Stack``): one optimiser over every
    member's parameters, each member's loss its own."""
    if config.channels_last:
        log(
            "packed training runs in the default memory format (zoo.training.channels_last is for one member)"
        )
    stack = _Stack(models)
    optimizer = make_optimizer(stack.trainable(), config)
    epochs, total_steps, steps_per_epoch = config.length(len(train_split))
    schedule = _schedule(optimizer, config, total_steps)
    results: list[TrainResult | DivergedError] = [TrainResult({}, -1, -1.0) for _ in models]

    for epoch in range(1, epochs + 1):
        start_time = time.perf_counter()
        stack.module.train()
        lr = optimizer.param_groups[0]["lr"]
        steps, seen = _epoch_steps(epoch, total_steps, steps_per_epoch, config, len(train_split))
        loss_sums, correct = _stacked_epoch(
            stack, optimizer, schedule, train_split, config, generators, mean, std, epoch, steps
        )
        val_accs = _evaluate_stack(stack, val_split, mean, std, config.eval_batch_size, config.bf16)
        seconds = time.perf_counter() - start_time
        _end_stacked_epoch(
            results, stack, labels, epochs, log, epoch, lr, loss_sums, correct, seen, val_accs, seconds
        )
    return results


def _stacked_epoch(
    stack: _Stack,
    optimizer: torch.optim.Optimizer,
    schedule,
    split: Split,
    config: TrainConfig,
    generators: list[torch.Generator],
    mean: torch.Tensor,
    std: torch.Tensor,
    epoch: int,
    steps: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One epoch's ``steps`` training steps of the stack. Each member draws its batch order, then
    each batch's augmentation, from its own generator, in ``train``'s order. Returns per member
    (the summed training loss, the number of correct predictions)."""
    device = split.images.device
    orders = [torch.randperm(len(split), device=device, generator=g) for g in generators]
    loss_sums = torch.zeros(len(generators), device=device)
    correct = torch.zeros(len(generators), device=device, dtype=torch.long)
    for step in range(steps):
        batches = [
            _batch(split, order, step, config, g, mean, std, epoch) for order, g in zip(orders, generators)
        ]
        losses, logits, y = _stacked_step(stack, optimizer, schedule, batches, config, device)
        loss_sums += losses.detach() * y.shape[1]
        correct += (logits.argmax(-1) == y).sum(1)
    return loss_sums, correct


def _stacked_step(
    stack: _Stack,
    optimizer: torch.optim.Optimizer,
    schedule,
    batches: list[tuple],
    config: TrainConfig,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One optimiser step of every member on its batch ``(x, y, lam)`` of ``_batch``. Returns (each
    member's mean loss, the logits (K, B, C), the labels (K, B))."""
    x = torch.stack([x for x, _, _ in batches], dim=1)
    y = torch.stack([y for _, y, _ in batches])
    lams = [lam for _, _, lam in batches]
    # Unmixed (every lam 1, as after mixing_epochs or without mixup and CutMix): no
    # partner loss to weigh in, decided here without reading back from the device.
    lam = torch.tensor(lams, device=device) if min(lams) < 1.0 else 1.0
    with _autocast(device, config.bf16):
        logits = stack(x).float()
    # Summed over members: each member's parameters get the gradient of its own mean loss.
    losses = _loss(logits, y, lam, config.label_smoothing).mean(1)
    optimizer.zero_grad(set_to_none=True)
    losses.sum().backward()
    optimizer.step()
    schedule.step()
    return losses, logits, y


def _end_stacked_epoch(
    results: list[TrainResult | DivergedError],
    stack: _Stack,
    labels: list[str],
    epochs: int,
    log: Callable[[str], None],
    epoch: int,
    lr: float,
    loss_sums: torch.Tensor,
    correct: torch.Tensor,
    seen: int,
    val_accs: list[float],
    seconds: float,
) -> None:
    """Each member's end of ``epoch``, as ``train``'s: its NaN check (a member whose loss is not
    finite stops, ``results[k]`` becomes its error), then its row of the history and its best
    weights."""
    for k, (result, label) in enumerate(zip(results, labels)):
        if isinstance(result, DivergedError):
            continue
        try:
            train_loss = _train_loss(loss_sums[k].item(), seen, label, epoch)
        except DivergedError as err:
            log(str(err))
            results[k] = err
            continue
        row = {
            "epoch": epoch,
            "lr": lr,
            "train_loss": train_loss,
            "train_acc": correct[k].item() / seen,
            "val_acc": val_accs[k],
            "epoch_seconds": seconds / len(results),  # its share of the pack's epoch
        }
        _end_epoch(result, row, lambda k=k: stack.state_dict(k), label, epochs, log)


def _train_or_diverge(model, train_split, val_split, config, generator, mean, std, label, log):
    try:
        return train(copy.deepcopy(model), train_split, val_split, config, generator, mean, std, label, log)
    except DivergedError as err:
        log(str(err))
        return err
