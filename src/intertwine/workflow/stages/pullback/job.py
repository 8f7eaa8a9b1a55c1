"""The excitation-pullback stage's jobs: a member's symmetry and faithfulness, a pair's agreement,
a variant's image grids (the mathematics is in ``intertwine.pullback.measurements`` and
``intertwine.pullback.pgd``: here, the rows)."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import torch

from intertwine.data.augment import normalize
from intertwine.pullback import measurements, per_neuron_temperatures, pgd
from intertwine.workflow.job import Job
from intertwine.workflow.stages.pullback.directions import (
    ascent_direction,
    pgd_settings,
    with_pullback_options,
)
from intertwine.workflow.stages.pullback.settings import PullbackConfig


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


def _faithfulness_row(
    model,
    settings: PullbackConfig,
    x,
    labels,
    probe,
    targets,
    stats,
    budget: dict,
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
    direction = ascent_direction(model, mode, temperature, temperatures)
    moved, by_step = pgd.pgd_success_by_step(model, direction, x, targets, *stats, **budget)
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
        "pgd_success": pgd.success_rate(probabilities, targets),
        "pgd_target_prob": probabilities[torch.arange(len(x)), targets].mean().item(),
        "pgd_success_by_step": by_step,
        "pgd_steps": budget["steps"],
        "pgd_epsilon": budget["epsilon"],
        "pgd_step_size": budget["step_size"],
    }


def _faithfulness_rows(
    job: Job, settings: PullbackConfig, model, member: tuple, x, labels, probe
) -> pd.DataFrame:
    """One member's faithfulness (:func:`_faithfulness_row`) per temperature and mode. The PGD
    targets are one draw per member, the same for every mode, so the modes are compared on the
    same images and targets."""
    variant, seed = member
    budget = pgd_settings(settings, x.shape[1:])
    targets = pgd.random_targets(
        labels,
        len(job.meta()["classes"]),
        torch.Generator().manual_seed(job.seed("pullback", variant, seed, "pgd")),
    ).to(x.device)
    stats = job.stats()
    rows = []
    for temperature, mode in [(t, mode) for t, modes in _temperatures(settings) for mode in modes]:
        row = _faithfulness_row(model, settings, x, labels, probe, targets, stats, budget, temperature, mode)
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


@with_pullback_options
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
    source's direction and what it does to the other's logits (``pgd.transfer_measures``),
    and the other's success after each step (``pgd.transfer_curve``: at the paper's full
    budget every mode saturates). One draw of targets per pair, shared by every mode and direction:
    the same images and budget."""
    targets = pgd.random_targets(
        labels,
        len(job.meta()["classes"]),
        torch.Generator().manual_seed(job.seed("pullback", variant, "pair", pair, "transfer")),
    ).to(x.device)
    budget = pgd_settings(settings, x.shape[1:])
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
                direction = ascent_direction(models[source], mode, temperature, temperatures[source])
                # the other member's success after each step: the budget grows
                moved, by_step = pgd.pgd_success_by_step(
                    models[other], direction, x, targets, mean, std, **budget
                )
                with torch.no_grad():
                    source_after, other_after = models[source](moved), models[other](moved)
                measures = pgd.transfer_measures(source_after, clean[other], other_after, targets)
                measures |= pgd.transfer_curve(by_step)
                rows.append(
                    {
                        "seed_source": metas[source]["seed"],
                        "seed_other": metas[other]["seed"],
                        "mode": mode,
                        "temperature": temperature,
                        "sweep": temperature != settings.temperature,
                        **measures,
                        "pgd_steps": budget["steps"],
                        "pgd_epsilon": budget["epsilon"],
                        "pgd_step_size": budget["step_size"],
                    }
                )
    table = pd.DataFrame(rows)
    job.log(
        f"{variant} pair {pair}: PGD transfer across seeds (other member predicts the target; its target "
        "probability gain), mean over both directions\n"
        + table.groupby(["mode", "temperature"])[
            ["source_success", "transfer_success", "transfer_success_area", "transfer_prob_gain"]
        ]
        .mean()
        .to_string()
    )
    table.insert(0, "variant", variant)
    table.insert(1, "pair", pair)
    return table


@with_pullback_options
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


@with_pullback_options
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
    targets = pgd.random_targets(labels[first], len(classes), generator).to(x.device)
    budget = pgd_settings(settings, x.shape[1:])
    mean, std = stats
    moved, predicted = {}, {}
    for mode in measurements.MODES:
        direction = ascent_direction(model, mode, settings.temperature, temperatures)
        final = pgd.pgd_toward(direction, x[first], targets, mean, std, **budget)
        with torch.no_grad():
            predicted[mode] = model(final).argmax(1).cpu().numpy()
        moved[mode] = pgd.to_zero_one(final, mean, std).cpu().numpy()
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
    from intertwine.workflow.zoo import read_checkpoint

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


# The paper's own experiment lives in its module; imported here so that the stage's code identity
# (its job module and what it imports) covers it.
from intertwine.workflow.stages.pullback.external import pullback_external  # noqa: F401
