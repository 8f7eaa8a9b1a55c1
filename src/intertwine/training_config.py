"""The settings the library's training takes: ``TrainConfig`` (how a network trains:
:mod:`intertwine.training`, :mod:`intertwine.packed_training`, :mod:`intertwine.rotation`'s
fine-tuning) and ``StitchConfig`` (how a stitching layer trains: :mod:`intertwine.stitching`).

Plain frozen dataclasses: every field is given. The workflow builds them from a run's config
(``intertwine.workflow.settings.TrainConfig`` and ``StitchConfig`` are these classes with the
config schema's defaults); library code never reads a config. Torch-free: the workflow imports it
when it parses the Snakefile.
"""

from __future__ import annotations

import dataclasses
import math

__all__ = ["StitchConfig", "TrainConfig"]


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """How a network trains (config ``zoo.training``; the rotation stage fine-tunes with it)."""

    epochs: int
    steps: int | None
    batch_size: int
    lr: float
    weight_decay: float
    lr_drops: int
    lr_drop_factor: float
    lr_milestones: list[float]
    warmup_steps: int
    lr_schedule: str
    lr_min: float
    optimizer: str
    label_smoothing: float
    mixup_alpha: float
    cutmix_alpha: float
    mixing_epochs: int | None
    momentum: float
    translate: int
    flip: bool
    select_on: str
    bf16: bool
    channels_last: bool
    # A packed step captured once as a CUDA graph and replayed (on a GPU): the same kernels on the
    # same tensors, so the weights differ from eager steps by rounding only (the learning rate is
    # a float32 tensor the graph reads).
    cuda_graphs: bool
    # How a pack runs its members: "wide" (grouped convolutions, or vmap) or "streams" (each member
    # its own network on its own CUDA stream); the same arithmetic either way, up to rounding.
    pack_mode: str
    # torch.compile's mode for a wide pack's training step ("none": eager): fused kernels, the
    # same arithmetic rounded differently.
    compile: str
    # Gate patterns recorded per epoch on this many training images (0: none); the weights are
    # the same either way (tests/test_zoo.py), only the checkpoint gains the record.
    gate_probe_images: int
    # Evaluation runs in eval mode, one image at a time as far as the result goes: the batch size
    # changes the speed and memory only (checked: bit-identical weights and accuracies).
    eval_batch_size: int

    def length(self, n_images: int) -> tuple[int, int, int]:
        """(epochs, optimiser steps in all, steps per full epoch) of training on ``n_images``:
        ``steps`` when set (the last epoch cut short), else ``epochs`` full epochs."""
        per_epoch = math.ceil(n_images / self.batch_size)
        if self.steps is None:
            return self.epochs, self.epochs * per_epoch, per_epoch
        return math.ceil(self.steps / per_epoch), self.steps, per_epoch


@dataclasses.dataclass(frozen=True)
class StitchConfig:
    """How a stitching layer trains (config ``stitching``, with the zoo's augmentation:
    ``translate`` and ``flip``)."""

    epochs: int
    batch_size: int
    lr: float
    optimizer: str
    momentum: float
    init: str
    match_images: int
    train_images: int | None
    # Also the batch of the pass that refreshes g's batch-norm statistics (`refresh_batch_norm`,
    # an average of per-batch statistics), so it changes the stitched accuracy.
    eval_batch_size: int
    batch_norm_refresh: str
    translate: int
    flip: bool
    alpha: float
    scales_frozen_fraction: float
    sinkhorn_iters: int
    permutation_step: float
    permutation_update: str
    softsort_tau: float | None
    softsort_hardening: float
    softsort_rounding: str
    grelu_start: str
    alpha_grid: list[float]
    cv_held_out: float
    cv_epochs: int | None
