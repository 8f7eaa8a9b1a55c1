"""Packed training: K members of a variant as one network, stacked and run by ``torch.func.vmap``
(one forward and backward for the K), each member with its own batches, optimiser state, NaN check
and best epoch. ``training.train_pack`` is the entry point (``intertwine.training`` re-exports
``pack_problem``); the pieces of a step and an epoch come from ``intertwine.training_steps``."""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING, Callable

import torch
from torch import nn

from intertwine.data import Split
from intertwine.data.augment import normalize
from intertwine.training_steps import (
    TrainResult,
    bf16_autocast,
    checked_train_loss,
    end_epoch,
    epoch_steps,
    lr_scheduler,
    make_optimizer,
    mixed_loss,
    training_batch,
)
from intertwine.utils import DivergedError

if TYPE_CHECKING:
    from intertwine.training_config import TrainConfig


#: The API (re-exported by ``intertwine.training``); ``check_pack`` and ``train_stacked`` are the
#: seams ``training.train_pack`` calls.
__all__ = ["pack_problem"]


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
        with bf16_autocast(x.device, bf16):
            logits = stack(x, shared_input=True)
        correct += (logits.argmax(-1) == split.labels[start : start + batch_size]).sum(1)
    stack.module.train(was_training)
    return (correct.double() / len(split)).tolist()


def check_pack(models: list[nn.Module], generators: list[torch.Generator], labels: list[str]) -> None:
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


def train_stacked(
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
    schedule = lr_scheduler(optimizer, config, total_steps)
    results: list[TrainResult | DivergedError] = [TrainResult({}, -1, -1.0) for _ in models]

    for epoch in range(1, epochs + 1):
        start_time = time.perf_counter()
        stack.module.train()
        lr = optimizer.param_groups[0]["lr"]
        steps, seen = epoch_steps(epoch, total_steps, steps_per_epoch, config, len(train_split))
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
            training_batch(split, order, step, config, g, mean, std, epoch)
            for order, g in zip(orders, generators)
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
    """One optimiser step of every member on its batch ``(x, y, lam)`` of ``training_batch``. Returns (each
    member's mean loss, the logits (K, B, C), the labels (K, B))."""
    x = torch.stack([x for x, _, _ in batches], dim=1)
    y = torch.stack([y for _, y, _ in batches])
    lams = [lam for _, _, lam in batches]
    # Unmixed (every lam 1, as after mixing_epochs or without mixup and CutMix): no
    # partner loss to weigh in, decided here without reading back from the device.
    lam = torch.tensor(lams, device=device) if min(lams) < 1.0 else 1.0
    with bf16_autocast(device, config.bf16):
        logits = stack(x).float()
    # Summed over members: each member's parameters get the gradient of its own mean loss.
    losses = mixed_loss(logits, y, lam, config.label_smoothing).mean(1)
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
            train_loss = checked_train_loss(loss_sums[k].item(), seen, label, epoch)
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
        end_epoch(result, row, lambda k=k: stack.state_dict(k), label, epochs, log)
