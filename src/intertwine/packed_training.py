"""Packed training: K members of a variant trained as one network, each member with its own
batches, augmentation draws, optimiser state, NaN check and best epoch. ``training.train_pack`` is the
entry point (``intertwine.training`` re-exports ``pack_problem``); the pieces of a step and an epoch
come from ``intertwine.training_steps``.

The K members run as one wide network of grouped convolutions (``intertwine.wide_pack``) where their
architecture widens, else stacked under ``torch.func.vmap``; or, with ``zoo.training.pack_mode:
streams``, side by side as K networks on K CUDA streams. Each epoch every member draws its order
and augmentations at once, and a step builds the K batches with one gather; on a GPU the step (forward,
backward, fused optimiser step) is captured once as a CUDA graph and replayed, so that the host
launches one graph per step instead of hundreds of kernels (``zoo.training.cuda_graphs``); a wide
pack's forward and backward can also run through ``torch.compile`` (``zoo.training.compile``).
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import nn

from intertwine.data import Split
from intertwine.data.augment import normalize
from intertwine.training_steps import (
    EpochDraws,
    TrainResult,
    bf16_autocast,
    checked_train_loss,
    end_epoch,
    epoch_steps,
    make_optimizer,
    member_batches,
    mixed_loss,
    schedule_factor,
)
from intertwine.utils import DivergedError
from intertwine.wide_pack import member_state, widen, widen_problem

if TYPE_CHECKING:
    from intertwine.training_config import TrainConfig


#: The API (re-exported by ``intertwine.training``); ``check_pack``, ``pack_network`` and
#: ``train_stacked`` are the seams ``training.train_pack`` calls.
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
    backward for the K members, for architectures that do not widen. Each member's parameters,
    gradients, batch-norm statistics and (elementwise) optimiser state stay its own."""

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
        self.members = len(models)

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
        return torch.func.vmap(member, in_dims=in_dims)(self.params, self.buffers, x.contiguous())

    def state_dict(self, k: int) -> dict[str, torch.Tensor]:
        """Member k's weights, keyed like ``model.state_dict()``."""
        tensors = self.params | self.buffers
        return {name: tensors[name][k] for name in self.state_keys}


class _Wide:
    """K models of one architecture as one wide network (``wide_pack.widen``): its inputs (B, K,
    C, H, W) become (B, K C, H, W)."""

    def __init__(self, models: list[nn.Module]):
        self.members = len(models)
        self.module = widen(models)
        self.compiled: Callable | None = None

    def compile(self, mode: str) -> None:
        """Train through ``torch.compile(mode=mode)`` (``zoo.training.compile``). Evaluation stays
        eager: a few batches an epoch in eval mode would not repay a second compilation."""
        self.compiled = torch.compile(self.module, mode=mode)

    def trainable(self) -> list[torch.Tensor]:
        return [p for p in self.module.parameters() if p.requires_grad]

    def __call__(self, x: torch.Tensor, shared_input: bool = False) -> torch.Tensor:
        """Logits (K, B, classes) of inputs (B, K, C, H, W), or of one batch (B, C, H, W) every
        member sees."""
        if shared_input:
            x = x.unsqueeze(1).expand(-1, self.members, *x.shape[1:])
        forward = self.compiled if self.compiled is not None and self.module.training else self.module
        return forward(x.flatten(1, 2)).unflatten(1, (self.members, -1)).transpose(0, 1)

    def state_dict(self, k: int) -> dict[str, torch.Tensor]:
        return member_state(self.module, k, self.members)


class _Streams:
    """K models of one architecture side by side, each its own network (a copy of the member):
    member k's forward, and so its backward, runs on CUDA stream k, so the members' dense
    (ungrouped) kernels run at once where the GPU has room, inside the one CUDA graph of the step
    (``zoo.training.pack_mode: streams``). Every architecture runs so. On a CPU the members run
    one after another, each exactly as alone."""

    def __init__(self, models: list[nn.Module], device: torch.device, channels_last: bool):
        self.members = len(models)
        self.memory_format = torch.channels_last if channels_last else torch.contiguous_format
        self.module = nn.ModuleList(copy.deepcopy(m) for m in models).to(memory_format=self.memory_format)
        self.streams = [torch.cuda.Stream(device) for _ in models] if device.type == "cuda" else None

    def trainable(self) -> list[torch.Tensor]:
        return [p for p in self.module.parameters() if p.requires_grad]

    def __call__(self, x: torch.Tensor, shared_input: bool = False) -> torch.Tensor:
        """Logits (K, B, classes) of inputs (B, K, ...), member k's batch at ``x[:, k]``, or of one
        batch (B, ...) every member sees."""
        batches = [
            (x if shared_input else x[:, k]).contiguous(memory_format=self.memory_format)
            for k in range(self.members)
        ]
        if self.streams is None:
            return torch.stack([model(batch) for model, batch in zip(self.module, batches)])
        current = torch.cuda.current_stream()
        logits = []
        for model, batch, stream in zip(self.module, batches, self.streams):
            stream.wait_stream(current)  # fork: the batches are made on the current stream
            with torch.cuda.stream(stream):
                logits.append(model(batch))
        for stream in self.streams:
            current.wait_stream(stream)  # join, as a CUDA graph's capture requires
        return torch.stack(logits)

    def state_dict(self, k: int) -> dict[str, torch.Tensor]:
        return self.module[k].state_dict()


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


def pack_network(
    models: list[nn.Module],
    example: torch.Tensor,
    label: str,
    log: Callable[[str], None],
    mode: str = "wide",
    channels_last: bool = False,
) -> _Wide | _Stack | _Streams | None:
    """With ``mode`` "streams" (``zoo.training.pack_mode``), the members side by side on CUDA
    streams (``_Streams``, in ``channels_last``'s memory format). With "wide", the members as one
    wide network where it computes what they do (``widen_problem``), else their ``vmap`` stack
    where ``vmap`` runs them (``pack_problem``), else None: the members train one at a time. Each
    fallback is logged with its reason, the line starting with ``label``. ``example`` is a
    normalised input batch (B, C, H, W) on the pack's device."""
    if mode == "streams":
        return _Streams(models, example.device, channels_last)
    not_wide = widen_problem(models, example)
    if not_wide is None:
        return _Wide(models)
    not_stacked = pack_problem(models, example)
    if not_stacked is None:
        log(f"{label} ...: the pack runs under torch.func.vmap: {not_wide}")
        return _Stack(models)
    log(f"{label} ...: training the {len(models)} members one at a time: {not_stacked}; {not_wide}")
    return None


@torch.no_grad()
def _evaluate_stack(
    stack: _Wide | _Stack | _Streams, split: Split, mean, std, batch_size: int, bf16: bool
) -> list[float]:
    """Top-1 accuracy of each member, in eval mode: every member sees each batch once."""
    was_training = stack.module.training
    stack.module.eval()
    correct = torch.zeros(stack.members, dtype=torch.long, device=split.images.device)
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
    network: _Wide | _Stack | _Streams,
    train_split: Split,
    val_split: Split,
    config: TrainConfig,
    generators: list[torch.Generator],
    mean: torch.Tensor,
    std: torch.Tensor,
    labels: list[str],
    log: Callable[[str], None],
) -> list[TrainResult | DivergedError]:
    """``train_pack``'s members trained as one network (``pack_network``'s): one optimiser over
    every member's parameters, each member's loss its own."""
    device = train_split.images.device
    if config.channels_last and not isinstance(network, _Streams):
        # Measured on an H200 (benchmarks/gpu_zoo.py, Myrtle x1, 32 members): a wide pack in
        # channels-last trained at 8,843 images/s, in the default format at 29,498.
        log("a pack trains in the default memory format (zoo.training.channels_last is for one member)")
    if config.compile != "none":
        if isinstance(network, _Wide):
            network.compile(config.compile)
        else:
            log(f"{labels[0]} ...: the pack trains eagerly (zoo.training.compile is for a pack that widens)")
    use_graph = config.cuda_graphs and device.type == "cuda"
    optimizer = make_optimizer(network.trainable(), config, fused=device.type == "cuda", capturable=use_graph)
    epochs, total_steps, steps_per_epoch = config.length(len(train_split))
    results: list[TrainResult | DivergedError] = [TrainResult({}, -1, -1.0) for _ in labels]
    step_runner = _StepRunner(network, optimizer, config, device, use_graph, log)

    with _cudnn_autotuned(device):
        for epoch in range(1, epochs + 1):
            start_time = time.perf_counter()
            network.module.train()
            lr = config.lr * schedule_factor(config, (epoch - 1) * steps_per_epoch, total_steps)
            steps, seen = epoch_steps(epoch, total_steps, steps_per_epoch, config, len(train_split))
            draws = EpochDraws.stack([EpochDraws.draw(len(train_split), g, config) for g in generators])
            step_runner.start_epoch()
            for step in range(steps):
                x, y, lams = member_batches(train_split, draws, step, config, generators, mean, std, epoch)
                # Unmixed (every lam 1): no partner loss to weigh in, decided without reading the device.
                lam = torch.tensor(lams, device=device) if min(lams) < 1.0 else 1.0
                optimizer_step = (epoch - 1) * steps_per_epoch + step
                step_runner(
                    (x.transpose(0, 1), y, lam),
                    config.lr * schedule_factor(config, optimizer_step, total_steps),
                )
            val_accs = _evaluate_stack(network, val_split, mean, std, config.eval_batch_size, config.bf16)
            seconds = time.perf_counter() - start_time
            _end_stacked_epoch(
                results,
                network,
                labels,
                epochs,
                log,
                epoch,
                lr,
                step_runner.loss_sums,
                step_runner.correct,
                seen,
                val_accs,
                seconds,
            )
    return results


def _set_lr(optimizer: torch.optim.Optimizer, value: float) -> None:
    for group in optimizer.param_groups:
        if isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(value)
        else:
            group["lr"] = value


@contextlib.contextmanager
def _cudnn_autotuned(device: torch.device):
    """cuDNN's benchmark mode on a GPU: a pack's grouped convolutions are shapes cuDNN's
    heuristics choose poorly for, and a training run repeats them thousands of times."""
    if device.type != "cuda":
        yield
        return
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = before


class _StepRunner:
    """Runs a pack's optimiser steps and sums each member's loss and correct predictions over an
    epoch, on the device. With ``use_graph`` (on a GPU) the unmixed full-batch step is captured
    as a CUDA graph after three eager steps (which warm up the kernels and allocations, as
    capture requires) and replayed from then on; a mixed or short batch, or a failed capture
    (logged), runs eagerly on the same tensors."""

    WARMUP_STEPS = 3

    def __init__(self, stack, optimizer, config: TrainConfig, device, use_graph: bool, log):
        self.stack, self.optimizer, self.config, self.log = stack, optimizer, config, log
        self.use_graph = use_graph
        self.loss_sums = torch.zeros(stack.members, device=device)
        self.correct = torch.zeros(stack.members, device=device, dtype=torch.long)
        self.eager_steps = 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static: tuple[torch.Tensor, torch.Tensor] | None = None

    def start_epoch(self) -> None:
        self.loss_sums.zero_()
        self.correct.zero_()

    def __call__(self, batch, lr: float) -> None:
        x, y, lam = batch
        _set_lr(self.optimizer, lr)
        unmixed = isinstance(lam, float)
        if self.graph is not None and unmixed and self.static[0].shape == x.shape:
            self.static[0].copy_(x)
            self.static[1].copy_(y)
            self.graph.replay()
            return
        warmed_up = self.eager_steps >= self.WARMUP_STEPS
        if self.use_graph and self.graph is None and unmixed and warmed_up and self._capture(x, y):
            self.graph.replay()
            return
        if self.use_graph:  # warm-up steps run on a side stream, as capture requires
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                self._step(x, y, lam)
            torch.cuda.current_stream().wait_stream(side)
        else:
            self._step(x, y, lam)
        self.eager_steps += 1

    def _step(self, x, y, lam) -> None:
        """One optimiser step of every member on its batch."""
        with bf16_autocast(x.device, self.config.bf16):
            logits = self.stack(x).float()
        # Summed over members: each member's parameters get the gradient of its own mean loss.
        losses = mixed_loss(logits, y, lam, self.config.label_smoothing).mean(1)
        self.optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()
        self.optimizer.step()
        # Accumulated on the device: one host sync per epoch, not per step.
        self.loss_sums += losses.detach() * y.shape[1]
        self.correct += (logits.argmax(-1) == y).sum(1)

    def _capture(self, x, y) -> bool:
        """Capture ``_step`` on static copies of (x, y); False (logged, and no graph is tried
        again) when capture fails."""
        self.use_graph = False
        self.static = (x.clone(), y.clone())
        self.optimizer.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        try:
            torch.cuda.synchronize()
            with torch.cuda.graph(graph):
                self._step(*self.static, 1.0)
        except Exception as err:  # noqa: BLE001 - any op that cannot be captured; eager steps go on
            self.log(f"the pack's training step runs without a CUDA graph: {type(err).__name__}: {err}")
            torch.cuda.synchronize()
            return False
        self.graph = graph
        return True


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
