"""The excitation-pullback stage's jobs: a member's symmetry and faithfulness, a pair's agreement,
a variant's image grids (the mathematics is in ``intertwine.pullback.measurements``)."""

from __future__ import annotations

import copy
import functools
import inspect

import numpy as np
import pandas as pd
import torch

from intertwine.pullback import measurements
from intertwine.data.augment import normalize
from intertwine.workflow.job import Job
from intertwine.pullback import options, per_neuron_temperatures
from intertwine.workflow.stages.pullback.settings import PullbackConfig


def _with_pullback_options(job_function):
    """Runs a job with ``pullback.functional`` and ``pullback.pool_padding`` of its ``block`` as
    every pullback's setting (the study's functions take them from :func:`intertwine.pullback.options`)."""

    @functools.wraps(job_function)
    def run(*args, **kwargs):
        block = inspect.signature(job_function).bind(*args, **kwargs).arguments["block"]
        settings = PullbackConfig.from_block(block, "pullback")
        with options(functional=settings.functional, pool_padding=settings.pool_padding):
            return job_function(*args, **kwargs)

    return run


def _inputs(job: Job, settings: PullbackConfig, images: int):
    """The first ``images`` test images and their labels, the first probe_images training images,
    normalised with the data set's statistics."""
    test = job.split("test", images)
    stats = job.stats()
    probe = normalize(job.split("train", settings.probe_images).images, *stats)
    return normalize(test.images, *stats), test.labels, probe


def _temperatures(settings: PullbackConfig) -> list[tuple[float, tuple[str, ...]]]:
    """(T, modes) to measure: the stage's temperature with every mode, then each ``sweep``
    temperature with the soft modes only (the plain gradient does not depend on T)."""
    soft = tuple(mode for mode in measurements.MODES if mode != "gradient")
    sweep = [t for t in dict.fromkeys(settings.sweep) if t != settings.temperature]
    return [(settings.temperature, measurements.MODES), *((t, soft) for t in sweep)]


def _pgd_settings(settings: PullbackConfig, image_shape) -> dict:
    """The PGD radius and step for these images: the paper's, scaled to their size."""
    dims = int(np.prod(image_shape))
    pgd = settings.pgd
    return {
        "steps": pgd["steps"],
        "epsilon": measurements.scaled_to_image(pgd["epsilon"], dims),
        "step_size": measurements.scaled_to_image(pgd["step_size"], dims),
    }


def _direction(model, mode: str, temperature: float, temperatures):
    """The PGD ascent direction of a mode: the pullback (or gradient) of the target's logit."""
    return lambda z, targets: measurements.attributions(
        model, z, targets, mode, temperature, temperatures=temperatures
    ).to(z.dtype)


def _symmetry_rows(
    job: Job, settings: PullbackConfig, model, member: tuple, x, labels, probe
) -> pd.DataFrame:
    """The symmetry cosines of one member (``measurements.symmetry_cosines`` in float64) at every
    temperature of :func:`_temperatures`, one row per group, spread and mode."""
    variant, seed = member
    parts = []
    for temperature, modes in _temperatures(settings):
        # the same group elements at every temperature: one seed, drawn again
        generator = torch.Generator().manual_seed(job.seed("pullback", variant, seed, "symmetry"))
        rows = measurements.symmetry_cosines(
            copy.deepcopy(model).double(),  # the loaded model stays as it is
            x.double(),
            labels,
            probe.double(),
            temperature,
            settings.spreads,
            generator,
            modes=modes,
        )
        parts.append(
            pd.DataFrame(rows).assign(temperature=temperature, sweep=temperature != settings.temperature)
        )
    return pd.concat(parts, ignore_index=True)


def _pgd_success(model, direction, x, targets, mean, std, pgd: dict):
    """PGD toward ``targets`` along ``direction``: the moved images, and after each step the
    fraction of images the model puts in their target class."""
    by_step = []

    def record(z):
        with torch.no_grad():
            by_step.append((model(z).argmax(1) == targets).double().mean().item())

    moved = measurements.pgd_toward(direction, x, targets, mean, std, **pgd, each_step=record)
    return moved, by_step


def _faithfulness_row(
    model,
    settings: PullbackConfig,
    x,
    labels,
    probe,
    targets,
    stats,
    pgd: dict,
    temperature: float,
    mode: str,
) -> dict:
    """One mode's faithfulness at one temperature: the deletion and insertion curves of its
    attributions and their areas, and the success of PGD along its direction toward ``targets``."""
    temperatures = per_neuron_temperatures(model, probe, temperature) if mode == "per_neuron" else None
    attribution = measurements.attributions(model, x, labels, mode, temperature, temperatures=temperatures)
    deletion, insertion = measurements.deletion_insertion(
        model, x, labels, attribution, settings.deletion_steps
    )
    direction = _direction(model, mode, temperature, temperatures)
    moved, by_step = _pgd_success(model, direction, x, targets, *stats, pgd)
    with torch.no_grad():
        probabilities = model(moved).softmax(1)
    return {
        "mode": mode,
        "temperature": temperature,
        "sweep": temperature != settings.temperature,
        "images": len(x),
        "deletion_auc": measurements.curve_area(deletion).mean().item(),
        "insertion_auc": measurements.curve_area(insertion).mean().item(),
        "deletion_curve": deletion.mean(0).tolist(),
        "insertion_curve": insertion.mean(0).tolist(),
        "mean_image_prob": deletion[:, -1].mean().item(),
        "pgd_success": (probabilities.argmax(1) == targets).double().mean().item(),
        "pgd_target_prob": probabilities[torch.arange(len(x)), targets].mean().item(),
        "pgd_success_by_step": by_step,
        "pgd_steps": pgd["steps"],
        "pgd_epsilon": pgd["epsilon"],
        "pgd_step_size": pgd["step_size"],
    }


def _faithfulness_rows(
    job: Job, settings: PullbackConfig, model, member: tuple, x, labels, probe
) -> pd.DataFrame:
    """One member's faithfulness (:func:`_faithfulness_row`) per temperature and mode. The PGD
    targets are one draw per member, the same for every mode, so the modes are compared on the
    same images and targets."""
    variant, seed = member
    pgd = _pgd_settings(settings, x.shape[1:])
    targets = measurements.random_targets(
        labels,
        len(job.meta()["classes"]),
        torch.Generator().manual_seed(job.seed("pullback", variant, seed, "pgd")),
    ).to(x.device)
    stats = job.stats()
    rows = []
    for temperature, mode in [(t, mode) for t, modes in _temperatures(settings) for mode in modes]:
        row = _faithfulness_row(model, settings, x, labels, probe, targets, stats, pgd, temperature, mode)
        rows.append(row)
        job.log(
            f"{variant} seed {seed} {mode} (T {temperature:g}): deletion area {row['deletion_auc']:.3f}, insertion "
            f"area {row['insertion_auc']:.3f}, PGD success {row['pgd_success']:.2f} (by step: "
            f"{', '.join(f'{v:.2f}' for v in row['pgd_success_by_step'])})"
        )
    return pd.DataFrame(rows)


def _with_member(table: pd.DataFrame, variant: str, seed: int) -> pd.DataFrame:
    """``table`` with the member's variant and seed as its first columns."""
    table.insert(0, "variant", variant)
    table.insert(1, "seed", seed)
    return table


@_with_pullback_options
def pullback_member(job: Job, checkpoint: str, block: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A zoo member's symmetry and faithfulness rows on the first ``block["images"]`` test images,
    with their labels as the classes.

    Parameters
    ----------
    job : Job
        The job's device, data set, seed and log.
    checkpoint : str
        The member's checkpoint.
    block : dict
        The member job's ``pullback`` settings (``PullbackConfig``).

    Returns
    -------
    symmetry : pandas.DataFrame
        ``measurements.symmetry_cosines`` in float64, one row per group, spread, mode and
        temperature.
    faithfulness : pandas.DataFrame
        One row per mode and temperature: deletion and insertion curves and areas, PGD success
        toward a random other class.
    """
    settings = PullbackConfig.from_block(block, "pullback")
    model, meta = job.model(checkpoint)
    variant, seed = meta["variant"], meta["seed"]
    x, labels, probe = _inputs(job, settings, settings.images)
    symmetry = _symmetry_rows(job, settings, model, (variant, seed), x, labels, probe)
    worst = symmetry.groupby(["group", "scale_spread", "mode", "temperature"])["cos_min"].min()
    job.log(f"{variant} seed {seed}: smallest cosine per group, spread, mode and T\n{worst.to_string()}")
    provenance = job.provenance({"pullback": block}, device=False)
    symmetry = _with_member(symmetry, variant, seed).assign(
        probe_images=len(probe), dtype="float64", **provenance
    )
    faithfulness = _faithfulness_rows(job, settings, model, (variant, seed), x, labels, probe)
    return symmetry, _with_member(faithfulness, variant, seed).assign(probe_images=len(probe), **provenance)


def _transfer_rows(
    job: Job, settings, models: dict, metas: dict, x, labels, probe, variant, pair
) -> pd.DataFrame:
    """PGD transfer across seeds (ours): per direction (a's pullback moving images that b reads, and
    b's read by a), temperature and mode, the paper's PGD toward a random other class along the
    source's direction and what it does to the other's logits (``measurements.transfer_measures``).
    One draw of targets per pair, shared by every mode and direction: the same images and budget."""
    targets = measurements.random_targets(
        labels,
        len(job.meta()["classes"]),
        torch.Generator().manual_seed(job.seed("pullback", variant, "pair", pair, "transfer")),
    ).to(x.device)
    pgd = _pgd_settings(settings, x.shape[1:])
    mean, std = job.stats()
    with torch.no_grad():
        clean = {k: model.eval()(x) for k, model in models.items()}
    rows = []
    for temperature, modes in _temperatures(settings):
        temperatures = {
            k: per_neuron_temperatures(model, probe, temperature) if "per_neuron" in modes else None
            for k, model in models.items()
        }
        for source, other in (("a", "b"), ("b", "a")):
            for mode in modes:
                direction = _direction(models[source], mode, temperature, temperatures[source])
                moved = measurements.pgd_toward(direction, x, targets, mean, std, **pgd)
                with torch.no_grad():
                    source_after, other_after = models[source](moved), models[other](moved)
                measures = measurements.transfer_measures(source_after, clean[other], other_after, targets)
                rows.append(
                    {
                        "seed_source": metas[source]["seed"],
                        "seed_other": metas[other]["seed"],
                        "mode": mode,
                        "temperature": temperature,
                        "sweep": temperature != settings.temperature,
                        **measures,
                        "pgd_steps": pgd["steps"],
                        "pgd_epsilon": pgd["epsilon"],
                        "pgd_step_size": pgd["step_size"],
                    }
                )
    table = pd.DataFrame(rows)
    job.log(
        f"{variant} pair {pair}: PGD transfer across seeds (other member predicts the target; its target "
        "probability gain), mean over both directions\n"
        + table.groupby(["mode", "temperature"])[["source_success", "transfer_success", "transfer_prob_gain"]]
        .mean()
        .to_string()
    )
    table.insert(0, "variant", variant)
    table.insert(1, "pair", pair)
    return table


@_with_pullback_options
def pullback_pair(
    job: Job, a: str, b: str, pair: int, block: dict, sites: list[str]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The agreement of zoo members a and b (``measurements.agreement_rows``): per mode, the
    cosines of their pullbacks of the true class's logit, and of ``block["units"]`` hidden units
    at each of ``sites`` against their Hungarian matches, on the first ``block["images"]`` test
    images; and the transfer of PGD across the two seeds (:func:`_transfer_rows`, ours) on the
    same images. Returns (agreement rows, transfer rows)."""
    settings = PullbackConfig.from_block(block, "pullback")
    model_a, meta_a = job.model(a)
    model_b, meta_b = job.model(b)
    if meta_a["variant"] != meta_b["variant"]:
        raise ValueError(f"{a} and {b} belong to different variants")
    variant = meta_a["variant"]
    x, labels, probe = _inputs(job, settings, settings.images)
    parts = []
    for temperature, modes in _temperatures(settings):
        # the same units at every temperature: one seed, drawn again
        generator = torch.Generator().manual_seed(job.seed("pullback", variant, "pair", pair))
        rows = measurements.agreement_rows(
            model_a, model_b, x, labels, probe, temperature, sites, settings.units, generator, modes
        )
        parts.append(
            pd.DataFrame(rows).assign(temperature=temperature, sweep=temperature != settings.temperature)
        )
    table = pd.concat(parts, ignore_index=True)
    summary = table.assign(kind=np.where(table["site"] == "logit", "logit", "units"))
    job.log(
        f"{variant} pair {pair} (seeds {meta_a['seed']}, {meta_b['seed']}): mean cosine\n"
        f"{summary.groupby(['kind', 'mode', 'temperature'])['cos_mean'].mean().to_string()}"
    )
    base = {"variant": variant, "pair": pair, "seed_a": meta_a["seed"], "seed_b": meta_b["seed"]}
    for k, (column, value) in enumerate(base.items()):
        table.insert(k, column, value)
    provenance = job.provenance({"pullback": block}, device=False)
    transfer = _transfer_rows(
        job,
        settings,
        {"a": model_a, "b": model_b},
        {"a": meta_a, "b": meta_b},
        x,
        labels,
        probe,
        variant,
        pair,
    )
    return (
        table.assign(probe_images=len(probe), **provenance),
        transfer.assign(probe_images=len(probe), **provenance),
    )


@_with_pullback_options
def pullback_images(job: Job, checkpoint: str, block: dict) -> dict:
    """What a variant's image grids show, from one member: ``block["grid_images"]`` test images per
    class with their gradient and pullbacks (global and per-neuron T); one image per class moved by
    PGD toward a random other class along each mode's direction. Arrays (numpy) and labels."""
    settings = PullbackConfig.from_block(block, "pullback")
    model, meta = job.model(checkpoint)
    classes = job.meta()["classes"]
    test = job.split("test")
    picks = [
        index
        for c in range(len(classes))
        for index in (test.labels == c).nonzero().flatten()[: settings.grid_images].tolist()
    ]
    picks = sorted(picks, key=lambda i: (int(test.labels[i]), i))
    stats = job.stats()
    x = normalize(test.images[picks], *stats)
    labels = test.labels[picks]
    probe = normalize(job.split("train", settings.probe_images).images, *stats)
    temperatures = per_neuron_temperatures(model, probe, settings.temperature)
    attributions = {
        mode: measurements.attributions(
            model, x, labels, mode, settings.temperature, temperatures=temperatures
        )
        .cpu()
        .numpy()
        for mode in measurements.MODES
    }
    # PGD: the first pick of each class
    first = [i for i, label in enumerate(labels.tolist()) if i == 0 or labels[i - 1] != label]
    generator = torch.Generator().manual_seed(job.seed("pullback", meta["variant"], meta["seed"], "pgd-grid"))
    targets = measurements.random_targets(labels[first], len(classes), generator).to(x.device)
    pgd = _pgd_settings(settings, x.shape[1:])
    mean, std = stats
    moved, predicted = {}, {}
    for mode in measurements.MODES:
        direction = _direction(model, mode, settings.temperature, temperatures)
        final = measurements.pgd_toward(direction, x[first], targets, mean, std, **pgd)
        with torch.no_grad():
            predicted[mode] = model(final).argmax(1).cpu().numpy()
        moved[mode] = ((measurements.to_unit_range(final, mean, std) + 1) / 2).clamp(0, 1).cpu().numpy()
    job.log(f"{meta['variant']} seed {meta['seed']}: grids of {len(picks)} and {len(first)} images")
    return {
        "title": f"{meta['variant']} seed {meta['seed']}",
        "classes": classes,
        "images": test.images[picks].cpu().numpy(),
        "labels": labels.cpu().numpy(),
        "attributions": attributions,
        "pgd_images": test.images[picks][first].cpu().numpy(),
        "pgd_labels": labels[first].cpu().numpy(),
        "pgd_targets": targets.cpu().numpy(),
        "pgd_moved": moved,
        "pgd_predicted": predicted,
    }


def pullback_settling(checkpoints: list[str]) -> pd.DataFrame:
    """Hypothesis 1's table (``tables.PULLBACK_SETTLING``) from the gate records zoo members keep in
    their checkpoints (``zoo.training.gate_probe_images``): one row per member, recorded epoch and
    ReLU call site (NaN path_rho_* in a record made before them: H1 reads "not run"). A checkpoint
    without a record is an error naming it and the setting."""
    from intertwine.gates import PATH_COLUMNS
    from intertwine.zoo import read_checkpoint

    parts = []
    for path in checkpoints:
        checkpoint = read_checkpoint(path)
        rows = checkpoint.get("gate_settling")
        if not rows:
            raise ValueError(
                f"{path} has no gate record: its variant {checkpoint['variant']!r} trained without "
                "zoo.training.gate_probe_images; set it (zoo.training_per_variant) and retrain the member"
            )
        part = pd.DataFrame(rows).reindex(columns=list(dict.fromkeys([*rows[0], *PATH_COLUMNS])))
        part.insert(0, "variant", checkpoint["variant"])
        part.insert(1, "seed", checkpoint["seed"])
        parts.append(
            part.assign(
                kept_epoch=checkpoint["best_epoch"],
                config_hash=checkpoint.get("config_hash", ""),
                version=checkpoint.get("version", ""),
            )
        )
    return pd.concat(parts, ignore_index=True)


def _imagenet_labels(folders: list[str], labels: dict | None, name: str) -> list[int]:
    """Each folder's ImageNet class index: ``labels`` (folder -> index), else Imagenette's WordNet
    ids, else a folder named by its index."""
    from intertwine.models.imagenet import IMAGENETTE_CLASSES

    table = labels if labels is not None else IMAGENETTE_CLASSES
    out = []
    for folder in folders:
        if folder in table:
            out.append(int(table[folder]))
        elif folder.isdigit() and int(folder) < 1000:
            out.append(int(folder))
        else:
            raise ValueError(
                f"pullback.external.{name}: folder {folder!r} is not one of Imagenette's WordNet ids nor a class "
                "index; map it in pullback.external." + name + ".labels (folder: ImageNet index)"
            )
    return out


def _external_images(job: Job, name: str, entry: dict):
    """The grid's images and targets: the first ``per_class`` images of ``classes`` class folders
    spread over the sorted folders (Imagenette's 10 and 5: folders 0, 2, 4, 6, 8, the released
    code's choice), their ImageNet labels and file names, and as targets their classes then
    ``extra_targets`` random other ImageNet classes. Returns (raw images, labels, files, targets)."""
    from intertwine.data.image_folder import class_folders, load_folder_images

    folders = class_folders(entry["images"])
    count = min(entry.get("classes", 5), len(folders))
    chosen = folders[:: max(1, len(folders) // count)][:count]
    classes = _imagenet_labels(chosen, entry.get("labels"), name)
    raw, owners, files = load_folder_images(
        entry["images"], chosen, entry.get("per_class", 1), entry.get("size", 224), entry.get("resize", 256)
    )
    labels = torch.tensor([classes[chosen.index(f)] for f in owners])
    generator = torch.Generator().manual_seed(job.seed("pullback", "external", name))
    others = [c for c in torch.randperm(1000, generator=generator).tolist() if c not in classes]
    return raw, labels, files, classes + others[: entry.get("extra_targets", 1)]


def _target_pgd(model, direction, batch, goal, mean, std, pgd: dict):
    """PGD of every (image, target) row toward its target: the moved rows, and each row's target
    probability after each step (rows by steps, on the CPU)."""
    rows = torch.arange(len(batch))
    by_step = []

    def record(z):
        with torch.no_grad():
            by_step.append(model(z).softmax(1)[rows, goal].cpu())

    moved = measurements.pgd_toward(direction, batch, goal, mean, std, **pgd, each_step=record)
    return moved, torch.stack(by_step, 1)


def _external_rows(
    name: str, arch: str, mode: str, files, labels, targets, before, steps, predicted
) -> list[dict]:
    """One row per (image, target) of a mode's PGD, row ``i * len(targets) + j`` being image i
    moved toward target j."""
    t = len(targets)
    rows = []
    for k in range(len(before)):
        i, j = divmod(k, t)
        rows.append(
            {
                "name": name,
                "arch": arch,
                "mode": mode,
                "image": files[i],
                "label": int(labels[i]),
                "target": targets[j],
                "target_prob_before": before[k].item(),
                "target_prob": steps[k, -1].item(),
                "success": bool(predicted[k] == targets[j]),
                "target_prob_by_step": steps[k].tolist(),
            }
        )
    return rows


def _external_modes(
    job: Job, model, model_name: tuple, x, files, labels, targets, mean, std, pgd: dict, temperature: float
) -> tuple[list[dict], dict]:
    """PGD of every image toward every target along each mode's direction (per-neuron
    temperatures on these images): the rows of :func:`_external_rows` for every mode, and each
    mode's moved images in [0, 1] (numpy), row ``i * len(targets) + j`` image i toward target j."""
    name, arch = model_name
    n, t = len(x), len(targets)
    batch = x.repeat_interleave(t, 0)  # image i, target j at row i * t + j
    goal = torch.tensor(targets, device=job.device).repeat(n)
    temperatures = per_neuron_temperatures(model, x, temperature)
    with torch.no_grad():
        before = model(batch).softmax(1)[torch.arange(n * t), goal]
    rows, perturbed = [], {}
    for mode in measurements.MODES:
        direction = _direction(model, mode, temperature, temperatures)
        moved, steps = _target_pgd(model, direction, batch, goal, mean, std, pgd)
        with torch.no_grad():
            predicted = model(moved).argmax(1).cpu()
        perturbed[mode] = ((measurements.to_unit_range(moved, mean, std) + 1) / 2).clamp(0, 1).cpu().numpy()
        rows += _external_rows(name, arch, mode, files, labels, targets, before, steps, predicted)
        job.log(
            f"{name} ({arch}) {mode}: PGD toward {t} targets from {n} images, success "
            f"{(predicted == goal.cpu()).double().mean().item():.2f}"
        )
    return rows, perturbed


def _external_arrays(
    name: str, arch: str, entry: dict, raw, labels, targets, perturbed: dict, pgd: dict, categories: list[str]
) -> dict:
    """What the external model's figures draw: the clean images in [0, 1], class names (from
    ``categories``, ImageNet's), and each mode's perturbed images as (image, target, ...)."""
    n, t = len(raw), len(targets)
    return {
        "title": f"{name} ({arch}, {entry.get('size', 224)} px)",
        "images": (raw.float() / 255).numpy(),
        "labels": [categories[c] for c in labels.tolist()],
        "targets": [categories[c] for c in targets],
        "perturbed": {m: p.reshape(n, t, *p.shape[1:]) for m, p in perturbed.items()},
        "steps": pgd["steps"],
        "epsilon": pgd["epsilon"],
    }


@_with_pullback_options
def pullback_external(
    job: Job, name: str, arch: str, weights: str, entry: dict, block: dict
) -> tuple[pd.DataFrame, dict]:
    """The paper's grids for a torchvision ImageNet model with local weights
    (``models.imagenet.load_imagenet_model``) on an image folder (Imagenette's layout): the first
    ``per_class`` images of ``classes`` class folders spread over the sorted folders
    (:func:`_external_images`), each moved by the paper's PGD toward every one of their classes and
    ``extra_targets`` random other ImageNet classes (the grid's columns), along the plain gradient,
    the global-T and the per-neuron-T pullback (per-neuron temperatures on the grid's own images).

    Parameters
    ----------
    job : Job
        The job's device, seed and log.
    name : str
        The model's name under ``pullback.external``.
    arch : str
        The torchvision architecture.
    weights : str
        The local weights file.
    entry : dict
        The model's ``pullback.external`` entry (images, labels, classes, extra_targets,
        per_class, size, resize).
    block : dict
        The ``pullback`` settings.

    Returns
    -------
    table : pandas.DataFrame
        One row per (mode, image, target).
    arrays : dict
        The arrays of the figures (:func:`_external_arrays`).
    """
    from intertwine.models.imagenet import IMAGENET_MEAN, IMAGENET_STD, load_imagenet_model

    # imported first: without torchvision the job fails before it reads an image
    from torchvision.models._meta import _IMAGENET_CATEGORIES

    settings = PullbackConfig.from_block(block, "pullback")
    raw, labels, files, targets = _external_images(job, name, entry)
    model = load_imagenet_model(arch, weights).to(job.device)
    mean = torch.tensor(IMAGENET_MEAN, device=job.device)
    std = torch.tensor(IMAGENET_STD, device=job.device)
    x = normalize(raw.to(job.device), mean, std)
    pgd = _pgd_settings(settings, x.shape[1:])
    rows, perturbed = _external_modes(
        job, model, (name, arch), x, files, labels, targets, mean, std, pgd, settings.temperature
    )
    table = pd.DataFrame(rows).assign(
        size=x.shape[-1],
        temperature=settings.temperature,
        functional=settings.functional,
        pgd_steps=pgd["steps"],
        pgd_epsilon=pgd["epsilon"],
        pgd_step_size=pgd["step_size"],
        **job.provenance({"pullback": block, "external": entry}, device=False),
    )
    return table, _external_arrays(
        name, arch, entry, raw, labels, targets, perturbed, pgd, _IMAGENET_CATEGORIES
    )
