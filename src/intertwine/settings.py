"""Every setting's one definition, and the stitching method names.

`config.schema.yaml` beside this file is the one source of every config key: its type, its
default and its description. The workflow validates a config against it (filling the defaults),
and the dataclasses below, which the library's functions take, read their defaults from it, so
`StitchConfig()` is the schema's `stitching` block. Their `from_block` refuses unknown keys.

A per-job block is built from a dataclass's fields (`job_block`): a setting a job does not read
is not in its params, so changing it reruns nothing. Settings only some stitching methods read
are marked on their field (`only_for=`), so a change to them reruns those methods' jobs only.
Settings that cannot change a result, only how fast it comes (`affects_results=False`, e.g.
`zoo.training.eval_batch_size`), are left out of the block too: `run_block` gives them, and the
workflow passes them to the job beside its params (a `resources:` entry), so changing them reruns
nothing either.

Torch-free: the workflow imports it at parse time.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from pathlib import Path
from typing import Any

import yaml

from intertwine.stitch_methods import G_RELU_METHODS, METHODS, parse_method  # noqa: F401 (re-exported)

SCHEMA_PATH = Path(__file__).with_name("config.schema.yaml")


@functools.cache
def schema() -> dict:
    return yaml.safe_load(SCHEMA_PATH.read_text())


def schema_block(key: str) -> dict:
    """The schema of a config block by its dotted key, e.g. ``"zoo.training"``."""
    node = schema()
    for part in key.split("."):
        node = node["properties"][part]
    return node


def default(node: dict) -> Any:
    """The default a validated config holds for a schema node (an object's nested defaults too)."""
    value = node.get("default")
    if isinstance(value, dict) and "properties" in node:
        value = {k: default(sub) for k, sub in node["properties"].items() if "default" in sub} | value
    return value


def fill_defaults(value: Any, node: dict) -> Any:
    """``value`` with the schema node's defaults for the keys it lacks, at every depth (what
    validation with ``set_default`` does to a config); other values are returned as they are."""
    if not isinstance(value, dict) or "properties" not in node:
        return value
    filled = {k: default(sub) for k, sub in node["properties"].items() if k not in value and "default" in sub}
    return filled | {
        k: fill_defaults(v, node["properties"][k]) if k in node["properties"] else v for k, v in value.items()
    }


def checked_block(block: Any, key: str) -> dict:
    """The config block ``key`` (e.g. ``"data"``) as given, its missing keys filled with the
    schema's defaults and the whole checked against the schema: a ValueError names the config key
    of the first value that does not fit."""
    import jsonschema

    node = schema_block(key)
    if not isinstance(block, dict):
        raise ValueError(f"config block {key}: expected a mapping of settings, got {block!r}")
    block = fill_defaults(block, node)
    try:
        jsonschema.validate(block, node)
    except jsonschema.ValidationError as err:
        path = "".join(f".{part}" for part in err.absolute_path)
        raise ValueError(f"config key {key}{path}: {err.message}") from None
    return block


def _setting(
    key: str,
    only_for: tuple[str, ...] | None = None,
    affects_results: bool = True,
    read_when: str | None = None,
) -> Any:
    """A dataclass field whose default is the schema's default of config key ``key``; ``only_for``
    names the kinds of job that read it (stitching methods; `masks`); ``affects_results=False``
    marks a setting that changes only how fast a job runs, never what it computes; ``read_when``
    names a boolean setting of the same dataclass without which no job reads this one."""
    block, name = key.rsplit(".", 1)
    default_value = default(schema_block(block)["properties"][name])
    metadata = (
        {"key": key}
        | ({"only_for": only_for} if only_for else {})
        | ({} if affects_results else {"affects_results": False})
        | ({"read_when": read_when} if read_when else {})
    )
    if isinstance(default_value, (list, dict)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default_value), metadata=metadata)
    return dataclasses.field(default=default_value, metadata=metadata)


class _Settings:
    """``from_block``, ``job_block`` and the field list shared by the settings dataclasses."""

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_block(cls, block: dict, where: str = ""):
        """The settings in ``block`` (a dict of config keys), the schema's defaults for the keys it
        lacks (nested ones too, e.g. ``dissection.probe.images``). A key not among the settings,
        or a value of the wrong type or range, is an error naming the config key."""
        import jsonschema  # here: the workflow imports this module at parse time

        where = where or cls.__name__
        if not isinstance(block, dict):
            raise ValueError(f"config block {where}: expected a mapping of settings, got {block!r}")
        unknown = sorted(set(block) - set(cls.names()))
        if unknown:
            raise ValueError(
                f"config key {where}.{unknown[0]}: not a setting of "
                f"{cls.__name__}; its settings are {', '.join(cls.names())}"
            )
        values = {}
        for f in dataclasses.fields(cls):
            if f.name not in block:
                continue
            source, name = f.metadata["key"].rsplit(".", 1)
            node = schema_block(source)["properties"][name]
            value = block[f.name]
            if isinstance(value, dict) and "properties" in node:
                # Nested defaults filled; keys the plan adds (dissection.probe.shapes) pass unchecked.
                value = fill_defaults(value, node)
                checked = {k: v for k, v in value.items() if k in node["properties"]}
            else:
                checked = value
            try:
                jsonschema.validate(checked, node)
            except jsonschema.ValidationError as err:
                path = "".join(f".{part}" for part in err.absolute_path)
                raise ValueError(f"config key {where}.{f.name}{path}: {err.message}") from None
            values[f.name] = value
        return cls(**values)

    @classmethod
    def _fields_from(cls, sources: dict[str, dict], kind: str | None, affects_results: bool) -> dict:
        fields = {f.name: f for f in dataclasses.fields(cls)}

        def value(name: str):
            source, key = fields[name].metadata["key"].rsplit(".", 1)
            return sources[source][key]

        block = {}
        for f in fields.values():
            if kind not in f.metadata.get("only_for", (kind,)):
                continue
            if f.metadata.get("affects_results", True) != affects_results:
                continue
            if "read_when" in f.metadata and not value(f.metadata["read_when"]):
                continue  # no job reads it now: left out, changing it reruns nothing
            block[f.name] = value(f.name)
        return block

    @classmethod
    def job_block(cls, sources: dict[str, dict], kind: str | None = None) -> dict:
        """The settings a job of ``kind`` reads, from the validated config blocks ``sources``
        (keyed by dotted block key, e.g. ``{"stitching": ..., "zoo.training": ...}``); a field
        marked ``only_for`` other kinds is left out, and so is one that cannot change a result
        (``affects_results=False``: see ``run_block``)."""
        return cls._fields_from(sources, kind, affects_results=True)

    @classmethod
    def run_block(cls, sources: dict[str, dict], kind: str | None = None) -> dict:
        """The settings of a job of ``kind`` that cannot change its result, only its speed
        (``affects_results=False``): not in ``job_block``, so not in the rule's params, and
        passed to the job beside them (``job_block | run_block`` is every setting it reads)."""
        return cls._fields_from(sources, kind, affects_results=False)


@dataclasses.dataclass(frozen=True)
class TrainConfig(_Settings):
    """How a zoo member trains (config ``zoo.training``; the rotation stage fine-tunes with it)."""

    epochs: int = _setting("zoo.training.epochs")
    steps: int | None = _setting("zoo.training.steps")
    batch_size: int = _setting("zoo.training.batch_size")
    lr: float = _setting("zoo.training.lr")
    weight_decay: float = _setting("zoo.training.weight_decay")
    lr_drops: int = _setting("zoo.training.lr_drops")
    lr_drop_factor: float = _setting("zoo.training.lr_drop_factor")
    lr_milestones: list[float] = _setting("zoo.training.lr_milestones")
    warmup_steps: int = _setting("zoo.training.warmup_steps")
    lr_schedule: str = _setting("zoo.training.lr_schedule")
    lr_min: float = _setting("zoo.training.lr_min")
    optimizer: str = _setting("zoo.training.optimizer")
    label_smoothing: float = _setting("zoo.training.label_smoothing")
    mixup_alpha: float = _setting("zoo.training.mixup_alpha")
    cutmix_alpha: float = _setting("zoo.training.cutmix_alpha")
    mixing_epochs: int | None = _setting("zoo.training.mixing_epochs")
    momentum: float = _setting("zoo.training.momentum")
    translate: int = _setting("zoo.training.translate")
    flip: bool = _setting("zoo.training.flip")
    select_on: str = _setting("zoo.training.select_on")
    bf16: bool = _setting("zoo.training.bf16")
    channels_last: bool = _setting("zoo.training.channels_last")
    # Gate patterns recorded per epoch on this many training images (0: none); the weights are
    # the same either way (tests/test_zoo.py), only the checkpoint gains the record.
    gate_probe_images: int = _setting("zoo.training.gate_probe_images")
    # Evaluation runs in eval mode, one image at a time as far as the result goes: the batch size
    # changes the speed and memory only (checked: bit-identical weights and accuracies).
    eval_batch_size: int = _setting("zoo.training.eval_batch_size", affects_results=False)

    def length(self, n_images: int) -> tuple[int, int, int]:
        """(epochs, optimiser steps in all, steps per full epoch) of training on ``n_images``:
        ``steps`` when set (the last epoch cut short), else ``epochs`` full epochs."""
        per_epoch = math.ceil(n_images / self.batch_size)
        if self.steps is None:
            return self.epochs, self.epochs * per_epoch, per_epoch
        return math.ceil(self.steps / per_epoch), self.steps, per_epoch


@dataclasses.dataclass(frozen=True)
class StitchConfig(_Settings):
    """How a stitching layer trains (config ``stitching``, with the zoo's augmentation)."""

    epochs: int = _setting("stitching.epochs")
    batch_size: int = _setting("stitching.batch_size")
    lr: float = _setting("stitching.lr")
    optimizer: str = _setting("stitching.optimizer")
    momentum: float = _setting("stitching.momentum")
    init: str = _setting("stitching.init")
    match_images: int = _setting("stitching.match_images")
    train_images: int | None = _setting("stitching.train_images")
    # Not affects_results=False, unlike zoo.training's: it is also the batch of the pass that
    # refreshes g's batch-norm statistics (`refresh_batch_norm`, an average of per-batch
    # statistics), so it changes the stitched accuracy.
    eval_batch_size: int = _setting("stitching.eval_batch_size")
    batch_norm_refresh: str = _setting("stitching.batch_norm_refresh")
    translate: int = _setting("zoo.training.translate")
    flip: bool = _setting("zoo.training.flip")
    alpha: float = _setting("stitching.alpha", only_for=("grelu", "monomial"))
    scales_frozen_fraction: float = _setting(
        "stitching.scales_frozen_fraction", only_for=("grelu", "softsort", "monomial")
    )
    sinkhorn_iters: int = _setting("stitching.sinkhorn_iters", only_for=("grelu", "grelu_cv", "monomial"))
    permutation_step: float = _setting(
        "stitching.permutation_step", only_for=("grelu", "grelu_cv", "monomial")
    )
    permutation_update: str = _setting(
        "stitching.permutation_update", only_for=("grelu", "grelu_cv", "monomial")
    )
    softsort_tau: float | None = _setting("stitching.softsort_tau", only_for=("softsort",))
    softsort_hardening: float = _setting("stitching.softsort_hardening", only_for=("softsort",))
    alpha_grid: list[float] = _setting("stitching.alpha_grid", only_for=("grelu_cv",))
    cv_held_out: float = _setting("stitching.cv_held_out", only_for=("grelu_cv",))
    cv_epochs: int | None = _setting("stitching.cv_epochs", only_for=("grelu_cv",))


@dataclasses.dataclass(frozen=True)
class RotationConfig(_Settings):
    """A rotation-penalty trial's fine-tuning (config ``rotation``; the rest is ``zoo.training``'s)."""

    epochs: int = _setting("rotation.epochs")
    lr: float | None = _setting("rotation.lr")
    train_images: int | None = _setting("rotation.train_images")
    lognormal_sigma: float = _setting("rotation.lognormal_sigma")


@dataclasses.dataclass(frozen=True)
class SymmetryConfig(_Settings):
    """The weight-space symmetry check on a trained member (config ``symmetry``)."""

    groups: list[str] = _setting("symmetry.groups")
    images: int = _setting("symmetry.images")
    float64: bool = _setting("symmetry.float64")
    lognormal_sigma: float = _setting("symmetry.lognormal_sigma")


@dataclasses.dataclass(frozen=True)
class SimilarityConfig(_Settings):
    """The similarity measures of a pair (config ``similarity``)."""

    procrustes_measures: list[str] = _setting("similarity.procrustes_measures")
    cka_measures: list[str] = _setting("similarity.cka_measures")
    samples: int | None = _setting("similarity.samples")
    intervals: bool = _setting("similarity.intervals")
    jackknife_groups: int = _setting("similarity.jackknife_groups", read_when="intervals")
    npk_images: int = _setting("gated.probe_images")  # npk_cka's images (the exact NPK is costly)
    batch_size: int = _setting("similarity.batch_size")


@dataclasses.dataclass(frozen=True)
class ConnectivityConfig(_Settings):
    """The alignment and interpolation of a pair (config ``connectivity``)."""

    methods: list[str] = _setting("connectivity.methods")
    lambdas: int = _setting("connectivity.lambdas")
    corrections: list[str] = _setting("connectivity.corrections")
    train_images: int = _setting("connectivity.train_images")
    test_images: int | None = _setting("connectivity.test_images")
    fold_batch_norm: bool = _setting("connectivity.fold_batch_norm")
    max_sweeps: int = _setting("connectivity.max_sweeps")
    batch_size: int = _setting("connectivity.batch_size")


@dataclasses.dataclass(frozen=True)
class DissectionConfig(_Settings):
    """Network dissection of a member (config ``dissection``; ``masks`` for the masks figure only)."""

    alphas: list[float] = _setting("dissection.alphas")
    rotations: int = _setting("dissection.rotations")
    quantile: float = _setting("dissection.quantile")
    iou_threshold: float = _setting("dissection.iou_threshold")
    batch_size: int = _setting("dissection.batch_size")
    probe: dict = _setting("dissection.probe")
    masks: dict = _setting("dissection.masks", only_for=("masks",))


@dataclasses.dataclass(frozen=True)
class GatedConfig(_Settings):
    """The kernels of a gated-networks study member (config ``gated``)."""

    probe_images: int = _setting("gated.probe_images")
    value_ntk_draws: int = _setting("gated.value_ntk_draws")


@dataclasses.dataclass(frozen=True)
class PullbackConfig(_Settings):
    """The excitation-pullback stage's jobs (config ``pullback``). Job kinds: ``member`` (symmetry
    and faithfulness of one zoo member), ``pair`` (agreement of two members), ``images`` (a
    variant's image grids), ``external`` (the paper's grids of a torchvision ImageNet model). Which jobs run (``variants``, ``seeds``, ``pairs``) and at which sites
    (``sites``, ``unit_sites``) is the plan's."""

    images: int = _setting("pullback.images", only_for=("member", "pair"))
    probe_images: int = _setting("pullback.probe_images", only_for=("member", "pair", "images"))
    temperature: float = _setting("pullback.temperature")
    sweep: list[float] = _setting("pullback.sweep", only_for=("member", "pair"))
    functional: str = _setting("pullback.functional")
    pool_padding: str = _setting("pullback.pool_padding")
    spreads: list[float] = _setting("pullback.spreads", only_for=("member",))
    deletion_steps: int = _setting("pullback.deletion_steps", only_for=("member",))
    pgd: dict = _setting("pullback.pgd", only_for=("member", "images", "external"))
    units: int = _setting("pullback.units", only_for=("pair",))
    grid_images: int = _setting("pullback.grid_images", only_for=("images",))


@dataclasses.dataclass(frozen=True)
class DeqntkConfig(_Settings):
    """The DEQ neural tangent kernel stage's jobs (config ``deqntk``). Job kinds: ``gram`` (a block
    of the accuracy study's Gram), ``regression`` (one variance setting and training-set size),
    ``depth`` (one draw of the depth sweep), ``reference`` (one zoo member's CKAs with the kernel).
    Which jobs run (``n_train``, ``settings``, ``block_rows``, ``depth.draws``,
    ``reference.variants``, ``reference.seeds``) is the plan's; each job gets its own values."""

    n_test: int = _setting("deqntk.n_test", only_for=("gram", "regression"))
    preprocessing: str = _setting(
        "deqntk.preprocessing", only_for=("gram", "regression", "depth", "reference")
    )
    ridge: float = _setting("deqntk.ridge", only_for=("regression", "depth", "conv"))
    tol: float = _setting("deqntk.tol", only_for=("gram", "depth", "reference", "conv"))
    depths: list[int] = _setting("deqntk.depth.depths", only_for=("depth",))
    depth_n_train: int = _setting("deqntk.depth.n_train", only_for=("depth",))
    depth_n_test: int = _setting("deqntk.depth.n_test", only_for=("depth",))
    depth_variances: list[float] | None = _setting("deqntk.depth.variances", only_for=("depth",))
    finite_variances: list[list[float]] = _setting("deqntk.depth.finite", only_for=("depth",))
    panels: list[list[float]] = _setting("deqntk.depth.panels", only_for=("depth",))
    deq_sigma_b2: float = _setting("deqntk.depth.deq_sigma_b2", only_for=("depth",))
    frozen_ridge: float = _setting("deqntk.depth.frozen_ridge", only_for=("depth",))
    conv_n_train: int = _setting("deqntk.conv.n_train", only_for=("conv",))
    conv_n_test: int = _setting("deqntk.conv.n_test", only_for=("conv",))
    conv_settings: list[list[float]] = _setting("deqntk.conv.settings", only_for=("conv",))
    conv_readout: str = _setting("deqntk.conv.readout", only_for=("conv",))
    conv_preprocessing: str = _setting("deqntk.conv.preprocessing", only_for=("conv",))
    reference_samples: int | None = _setting("deqntk.reference.samples", only_for=("reference",))
    reference_measures: list[str] = _setting("deqntk.reference.measures", only_for=("reference",))
    reference_variances: list[float] = _setting("deqntk.reference.variances", only_for=("reference",))


# --- Stitching method names (their grammar: intertwine.stitch_methods).


def method_kind(method: str) -> str:
    """The config's name of a job's method: 'rank4' -> 'rank', 'l1_0.01' -> 'l1'."""
    return parse_method(method)[0]


def l1_method(strength: float) -> str:
    """The method name of full stitching with L1 strength ``strength`` (0.01 -> 'l1_0.01')."""
    return f"l1_{strength:g}"


def expand_methods(methods: list[str], ranks: list[int], l1_lambdas: list[float]) -> list[str]:
    """The config's methods as job names: `rank` becomes rank<r> per rank, `l1` l1_<lambda> per
    strength."""
    expanded = []
    for method in methods:
        if method == "rank":
            expanded += [f"rank{r}" for r in ranks]
        elif method == "l1":
            expanded += [l1_method(strength) for strength in l1_lambdas]
        else:
            expanded.append(method)
    return expanded


# --- DEQ-NTK variance settings' names: the one grammar of the plan's files, the CLI and the jobs.


def variances_name(variances) -> str:
    """The name of a variance setting (sigma_w2, sigma_u2, sigma_b2) in file paths and on the
    command line: [0.25, 0.25, 0.5] -> 'w0.25_u0.25_b0.5'."""
    w, u, b = (float(v) for v in variances)
    return f"w{w:g}_u{u:g}_b{b:g}"


def parse_variances(name: str) -> tuple[float, float, float]:
    """'w0.25_u0.25_b0.5' -> (0.25, 0.25, 0.5), the inverse of ``variances_name``."""
    parts = name.split("_")
    try:
        if len(parts) != 3 or [p[:1] for p in parts] != ["w", "u", "b"]:
            raise ValueError
        return tuple(float(p[1:]) for p in parts)
    except ValueError:
        raise ValueError(
            f"not a variance setting's name w<sigma_w2>_u<sigma_u2>_b<sigma_b2> (e.g. w0.25_u0.25_b0.5): {name!r}"
        ) from None
