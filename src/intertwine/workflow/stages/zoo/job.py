"""The zoo stage's jobs: train one member, or a pack of members; take one from a checkpoint trained
elsewhere (``zoo.checkpoints``)."""

from __future__ import annotations

import hashlib
import math
import time
from pathlib import Path

import pandas as pd
import torch

from intertwine import models
from intertwine.data.augment import normalize
from intertwine.models.factory import check_sites
from intertwine.workflow.job import Job
from intertwine.workflow.settings import TrainConfig
from intertwine.training import evaluate, train, train_pack as train_models_packed
from intertwine.utils import DivergedError
from intertwine.workflow.zoo import (
    CHECKPOINT_FORMAT,
    data_fingerprint,
    fit_weights,
    foreign_state_dict,
    read_checkpoint,
)


def train_member(
    job: Job,
    variant: str,
    seed: int,
    spec: dict,
    training: dict,
    checkpoint_path: str | Path = "",
    eval_batch_size: int | None = None,
    features: str | Path | None = None,
) -> tuple[dict, pd.DataFrame]:
    """Train one zoo member; return its checkpoint (a dict) and its per-epoch metrics.

    ``training`` is the variant's ``zoo.training`` block (keys it lacks take the schema's
    defaults); ``eval_batch_size``, when given, replaces its ``eval_batch_size``, which changes the
    speed only (the workflow passes it apart, so that it is not in the provenance hash, which is
    over ``training`` as given). A gated variant in the FL regime takes its frozen feature network
    from ``features``, the checkpoint of a trained member of the plain architecture. The same
    (variant, seed, spec, data, training, global seed, features) gives bit-identical weights on the
    CPU.
    """
    config, spec = _settings(job, variant, spec, training, {"eval_batch_size": eval_batch_size})
    model, generator = _member(job, variant, seed, spec, features)
    train_split, val_split = job.split("train"), job.split(config.select_on)
    patterns, record = _gate_recorder(job, config)
    started = time.perf_counter()
    result = train(
        model,
        train_split,
        val_split,
        config,
        generator,
        *job.stats(),
        label=f"{variant} seed {seed}",
        log=job.log,
        each_epoch=record,
    )
    diverged = _diverged(result, variant, seed, spec["num_classes"])
    if diverged is not None:
        raise diverged
    checkpoint, metrics = _outputs(
        job,
        variant,
        seed,
        spec,
        training,
        config,
        model,
        result,
        time.perf_counter() - started,
        checkpoint_path,
    )
    if record is not None:
        checkpoint["gate_settling"] = _settling(job, patterns, config, f"{variant} seed {seed}")
    return checkpoint, metrics


def _gate_recorder(job: Job, config: TrainConfig):
    """With ``gate_probe_images`` set: a list that fills with (epoch, gate patterns) and the
    ``each_epoch`` callback of ``train`` that fills it (``gates.gate_patterns`` on the first
    training images, normalised without augmentation). Without: ([], None)."""
    if not config.gate_probe_images:
        return [], None
    from intertwine.data.augment import normalize
    from intertwine.gates import gate_patterns

    probe = normalize(job.split("train", config.gate_probe_images).images, *job.stats())
    patterns = []
    return patterns, lambda epoch, model: patterns.append((epoch, gate_patterns(model, probe)))


def _settling(job: Job, patterns: list, config: TrainConfig, label: str) -> list[dict]:
    """The checkpoint's record of Hypothesis 1: ``gates.settling_rows`` with the probe size."""
    from intertwine.gates import settling_rows

    rows = settling_rows(patterns)
    final = patterns[-1][0]
    first = [r for r in rows if r["epoch"] == 0]
    job.log(
        f"{label}: gate patterns at {len(first)} ReLU call sites on {config.gate_probe_images} images; "
        "agreement with epoch "
        f"{final}'s per epoch (mean over sites): "
        + ", ".join(
            f"{epoch}: {sum(r['agreement'] for r in rows if r['epoch'] == epoch) / max(len(first), 1):.3f}"
            for epoch, _ in patterns
        )
    )
    return [row | {"probe_images": config.gate_probe_images} for row in rows]


def train_pack(
    job: Job,
    variant: str,
    seeds: list[int],
    spec: dict,
    training: dict,
    checkpoint_paths: list[str | Path],
    eval_batch_size: int | None = None,
    features: list[str | Path] | None = None,
    cuda_graphs: bool | None = None,
    compile_mode: str | None = None,
    pack_mode: str | None = None,
) -> list[tuple[dict, pd.DataFrame] | DivergedError]:
    """Train the members ``seeds`` of a variant together (``training.train_pack``); per member, what
    ``train_member`` returns for it (the same weights up to float rounding), or the
    ``DivergedError`` that stopped it. ``checkpoint_paths`` are where the members' checkpoints will
    be (their metrics record it); ``features`` one checkpoint per seed for an FL variant.
    ``eval_batch_size``, ``cuda_graphs``, ``pack_mode`` and ``compile_mode``
    (``zoo.training.compile``), when given, replace the block's: they change the speed only, so the
    workflow passes them apart."""
    speed = {
        "eval_batch_size": eval_batch_size,
        "cuda_graphs": cuda_graphs,
        "pack_mode": pack_mode,
        "compile": compile_mode,
    }
    config, spec = _settings(job, variant, spec, training, speed)
    if config.gate_probe_images:
        raise ValueError(
            f"variant {variant!r}: zoo.training.gate_probe_images is {config.gate_probe_images}, but its members "
            "train as a pack, which records no gate patterns; set its zoo.pack_size to 1 or its "
            "gate_probe_images to 0 (zoo.training_per_variant)"
        )
    members = [
        _member(job, variant, seed, spec, f) for seed, f in zip(seeds, features or [None] * len(seeds))
    ]
    train_split, val_split = job.split("train"), job.split(config.select_on)
    job.log(f"{variant}: training seeds {', '.join(map(str, seeds))} as one pack")
    started = time.perf_counter()
    results = train_models_packed(
        [model for model, _ in members],
        train_split,
        val_split,
        config,
        [generator for _, generator in members],
        *job.stats(),
        labels=[f"{variant} seed {seed}" for seed in seeds],
        log=job.log,
    )
    # The pack's wall time, shared evenly: what each member cost.
    seconds = (time.perf_counter() - started) / len(seeds)
    results = [
        result
        if isinstance(result, DivergedError)
        else _diverged(result, variant, seed, spec["num_classes"]) or result
        for seed, result in zip(seeds, results)
    ]
    return [
        result
        if isinstance(result, DivergedError)
        else _outputs(job, variant, seed, spec, training, config, model, result, seconds, path)
        for seed, (model, _), result, path in zip(seeds, members, results, checkpoint_paths)
    ]


# A member whose last epoch's mean training loss is above this many times the loss of chance
# (ln of the number of classes, that of uniform predictions) has diverged: ours. A member that
# learns ends below chance; one that stalls stays near it; 10 times is beyond any mixing or label
# smoothing (whose losses stay below ln C at chance), while a blown-up one reads 1e12 and more.
DIVERGED_OVER_CHANCE = 10.0


def _diverged(result, variant: str, seed: int, num_classes: int) -> DivergedError | None:
    """The ``DivergedError`` of a member whose final training loss is far above chance (a finite
    loss that blew up: the NaN check of ``train`` does not see it), else None."""
    loss = result.history[-1]["train_loss"]
    chance = math.log(num_classes)
    if math.isfinite(loss) and loss <= DIVERGED_OVER_CHANCE * chance:
        return None
    return DivergedError(
        f"{variant} seed {seed}: training diverged: its last epoch's mean training loss is {loss:.3g}, above "
        f"{DIVERGED_OVER_CHANCE:g} x the loss of chance (ln {num_classes} = {chance:.3f}), so its weights "
        f"are no trained model; lower zoo.training.lr (or zoo.training_per_variant.{variant}.lr), or "
        "warm it up (zoo.training.warmup_steps)"
    )


def _settings(job: Job, variant: str, spec: dict, training: dict, speed: dict):
    """The member's TrainConfig: ``training`` with the settings that change the speed only
    (``Plan.train_run``'s, which the workflow passes apart) given in ``speed``, and its spec."""
    given = {key: value for key, value in speed.items() if value is not None}
    config = TrainConfig.from_block(training | given, "zoo.training")
    spec = models.normalize_spec(spec)
    classes = len(job.meta()["classes"])
    if spec["num_classes"] != classes:
        raise ValueError(
            f"variant {variant!r} has num_classes {spec['num_classes']} but the data set "
            f"has {classes} classes; set num_classes in its spec"
        )
    return config, spec


def _member(job: Job, variant: str, seed: int, spec: dict, features: str | Path | None):
    """A member's initial model and its batch generator, from its own seeds."""
    torch.manual_seed(job.seed("zoo", variant, seed, "init"))
    model = models.build(spec).to(job.device)
    if spec["arch"] == "custom":  # its sites read as they are declared, before any training
        check_sites(model, normalize(job.split("train", 2).images, *job.stats()), f"zoo.variants.{variant}")
    _load_features(job, model, spec, features, variant)
    generator = torch.Generator(device=job.device).manual_seed(job.seed("zoo", variant, seed, "batches"))
    job.log(
        f"{variant} seed {seed}: {spec} ({models.count_parameters(model):,} parameters) on {job.device}, "
        f"{len(job.split('train'))} training images"
    )
    return model, generator


def _outputs(job, variant, seed, spec, training, config, model, result, seconds, checkpoint_path):
    """A trained member's checkpoint and per-epoch metrics: its kept weights, tested."""
    model.load_state_dict(result.state_dict)
    mean, std = job.stats()
    test_acc = evaluate(
        model, job.split("test"), mean, std, config.eval_batch_size, config.bf16, config.channels_last
    )
    job.log(
        f"{variant} seed {seed}: kept epoch {result.best_epoch} (val_acc {result.val_acc:.4f} on "
        f"{config.select_on}), test_acc {test_acc:.4f}, {seconds:.1f}s"
    )
    n_params = models.count_parameters(model)
    provenance = job.provenance({"spec": spec, "training": training, "data": job.meta()["config_hash"]})
    checkpoint = {
        "format": CHECKPOINT_FORMAT,
        "variant": variant,
        "spec": spec,
        "seed": seed,
        "state_dict": result.state_dict,
        "val_acc": result.val_acc,
        "test_acc": test_acc,
        "best_epoch": result.best_epoch,
        "epochs": len(result.history),
        "n_params": n_params,
        "train_seconds": seconds,
        "select_on": config.select_on,
        # Later stages reuse test_acc rather than re-evaluating when it is float32.
        "test_dtype": "bfloat16" if config.bf16 and job.device.type == "cuda" else "float32",
        # What it was trained on: jobs that read it with a data cache check that it is this one.
        "data": data_fingerprint(job.meta()),
        **provenance,
    }
    metrics = pd.DataFrame(result.history)
    metrics.insert(0, "variant", variant)
    metrics.insert(1, "seed", seed)
    metrics["kept"] = metrics["epoch"] == result.best_epoch
    metrics["test_acc"] = metrics["kept"].map({True: test_acc, False: None}).astype("float64")
    return checkpoint, metrics.assign(n_params=n_params, checkpoint=str(checkpoint_path), **provenance)


def _load_features(
    job: Job, model: torch.nn.Module, spec: dict, features: str | Path | None, variant: str
) -> None:
    """An FL variant's feature network: the weights of a trained plain member of its architecture
    (its head dropped: F gives gates only)."""
    gated = spec.get("gated")
    fl = gated is not None and gated["regime"] == "fl"
    if not fl:
        if features is not None:
            raise ValueError(f"variant {variant!r} is not a gated FL variant, so it takes no feature network")
        return
    if features is None:
        raise ValueError(
            f"variant {variant!r} (gated, regime fl) needs the checkpoint of a trained "
            f"{gated['features_from']!r} member for its feature network (--features)"
        )
    source = read_checkpoint(features, next(model.parameters()).device)
    job.check_data(source, features)
    plain = models.normalize_spec({key: value for key, value in spec.items() if key != "gated"})
    if source["spec"] != plain:
        raise ValueError(
            f"variant {variant!r} takes its feature network from {features} (variant "
            f"{source['variant']!r}), whose spec {source['spec']} is not the plain form of its own, {plain}: "
            "gated.features_from must name a variant of the same architecture without gated"
        )
    weights = {key: value for key, value in source["state_dict"].items() if not key.startswith("fc.")}
    model.features.load_state_dict(weights)


def import_member(
    job: Job,
    variant: str,
    seed: int,
    spec: dict,
    source: str | Path,
    whole_modules: bool = False,
    checkpoint_path: str | Path = "",
    eval_batch_size: int = 1000,
) -> tuple[dict, pd.DataFrame]:
    """A zoo member taken from a checkpoint trained elsewhere (``zoo.checkpoints``), not trained:
    its weights (``zoo.foreign_state_dict``) loaded into the variant's model, which they must fit
    exactly, and tested on this data set's validation and test splits. Returns the member's
    checkpoint, as ``train_member`` writes one (epochs 0, its source file recorded), and a one-row
    metrics table (epoch 0, the kept one)."""
    key = f"zoo.checkpoints.{variant}"
    spec = models.normalize_spec(spec)
    torch.manual_seed(job.seed("zoo", variant, seed, "init"))  # buffers a state dict may lack
    model = models.build(spec).to(job.device)
    state = foreign_state_dict(source, whole_modules, key)
    fit_weights(model, state, source, f"zoo.variants.{variant} ({spec})")
    mean, std = job.stats()
    classes = len(job.meta()["classes"])
    with torch.no_grad():
        probe = normalize(job.split("test", 2).images, mean, std)
        logits = model.eval()(probe)
    if logits.ndim != 2 or logits.shape[1] != classes:
        raise ValueError(
            f"{source}: the model of zoo.variants.{variant} gives outputs of shape {tuple(logits.shape)}, "
            f"but the data set has {classes} classes; set num_classes: {classes} in its spec (and train "
            "the checkpoints on this data set's classes)"
        )
    if spec["arch"] == "custom":
        check_sites(model, probe, f"zoo.variants.{variant}")
    accuracy = {
        split: evaluate(model, job.split(split), mean, std, eval_batch_size) for split in ("val", "test")
    }
    job.log(
        f"{variant} seed {seed}: taken from {source} ({models.count_parameters(model):,} parameters), "
        f"val_acc {accuracy['val']:.4f}, test_acc {accuracy['test']:.4f}"
    )
    n_params = models.count_parameters(model)
    provenance = job.provenance({"spec": spec, "source": str(source), "data": job.meta()["config_hash"]})
    checkpoint = {
        "format": CHECKPOINT_FORMAT,
        "variant": variant,
        "spec": spec,
        "seed": seed,
        "state_dict": model.state_dict(),
        "val_acc": accuracy["val"],
        "test_acc": accuracy["test"],
        "best_epoch": 0,
        "epochs": 0,
        "n_params": n_params,
        "train_seconds": 0.0,
        "select_on": "val",
        "test_dtype": "float32",
        "data": data_fingerprint(job.meta()),
        "imported_from": str(source),
        "source_sha256": hashlib.sha256(Path(source).read_bytes()).hexdigest(),
        **provenance,
    }
    nan = float("nan")
    metrics = pd.DataFrame(
        [
            {
                "variant": variant,
                "seed": seed,
                "epoch": 0,
                "lr": nan,
                "train_loss": nan,
                "train_acc": nan,
                "val_acc": accuracy["val"],
                "test_acc": accuracy["test"],
                "kept": True,
                "epoch_seconds": 0.0,
                "n_params": n_params,
                "checkpoint": str(checkpoint_path),
                **provenance,
            }
        ]
    )
    return checkpoint, metrics
