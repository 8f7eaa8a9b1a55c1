"""The context every job of the workflow gets.

A job is one function per torch rule, named like the rule and its CLI subcommand, in its stage's
``job`` module (``intertwine.workflow.stages.stitching.job.stitch_pair``), so an edit to one
stage's jobs reruns that stage only. Each takes a :class:`Job` (the device, data directory, global
seed and log every job shares, with cached loaders) and the rule's own inputs, and returns what the
rule writes; the command writes it. The mathematics lives in the library; a job only wires it to
files and adds provenance.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor, nn

import intertwine
from intertwine.data import Split, channel_stats, load_meta, load_split
from intertwine.utils import config_hash, derive_seed, resolve_device
from intertwine.workflow.zoo import check_data, load_model


@dataclass
class Job:
    """What every job shares: where it runs, the data set it reads, the global seed its random
    draws derive from, and where it logs. Checkpoints, splits and channel statistics are loaded
    once per job and shared: copy a model before changing it."""

    device: torch.device | str = "auto"
    data_dir: str | Path | None = None
    global_seed: int = 0
    log: Callable[[str], None] = print
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        self.device = resolve_device(self.device) if isinstance(self.device, str) else self.device

    def _cached(self, key, load: Callable):
        if key not in self._cache:
            self._cache[key] = load()
        return self._cache[key]

    def _data(self) -> str | Path:
        if self.data_dir is None:
            raise ValueError("this job reads the data set but was given no data directory (--data)")
        return self.data_dir

    def seed(self, *keys) -> int:
        """The seed of a random draw keyed by ``keys`` (stage, variant, ...) under the global seed."""
        return derive_seed(self.global_seed, *keys)

    def model(self, checkpoint: str | Path) -> tuple[nn.Module, dict]:
        """A zoo member on the job's device in eval mode, and its checkpoint's metadata. With a
        data cache, the data the member was trained on must be it (``zoo.check_data``: an error
        naming both otherwise; a checkpoint that records no data is used with a logged warning)."""

        def load():
            model, meta = load_model(checkpoint, self.device)
            self.check_data(meta, checkpoint)
            # Channels-last: a CPU max-pools and convolves faster in it (a Myrtle stitching job
            # 9.5 s -> 8.4 s), as recent GPUs do; the values agree to float rounding. A model with
            # no 4-d weight is unchanged.
            return model.to(memory_format=torch.channels_last), meta

        return self._cached(("model", str(checkpoint)), load)

    def check_data(self, checkpoint: dict, path: str | Path) -> None:
        """``zoo.check_data`` of a checkpoint's contents against the job's data cache (none: nothing)."""
        if self.data_dir is None:
            return
        warning = check_data(checkpoint, path, self.meta(), self.data_dir)
        if warning:
            self.log(warning)

    def meta(self) -> dict:
        """The data set's metadata (classes, image size, ...)."""
        return self._cached("meta", lambda: load_meta(self._data()))

    def stats(self) -> tuple[Tensor, Tensor]:
        """The data set's per-channel mean and std on the job's device (``data.channel_stats``)."""
        return self._cached("stats", lambda: channel_stats(self._data(), self.device))

    def split(self, name: str, n: int | None = None) -> Split:
        """A split on the job's device; with ``n``, its first n images."""
        split = self._cached(("split", name), lambda: load_split(self._data(), name).to(self.device))
        if not n:
            return split
        return Split(
            split.images[:n], split.labels[:n], None if split.concepts is None else split.concepts[:n]
        )

    def provenance(self, blocks: dict, device: bool = True) -> dict:
        """A row's provenance columns: the device (unless its table has none), the hash of the
        config ``blocks`` it ran with (and the global seed), the package version."""
        return ({"device": str(self.device)} if device else {}) | {
            "config_hash": config_hash(blocks | {"seed": self.global_seed}),
            "version": intertwine.__version__,
        }
