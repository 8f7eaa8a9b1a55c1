"""The excitation-pullback paper's own experiment on a torchvision ImageNet model (``pullback.external``):
its images drawn as its loader draws them, the raw pullbacks of its Figure 2 and the PGD grids of its
Figures 1 and 3."""

from __future__ import annotations

import pandas as pd
import torch

from intertwine.data.augment import normalize
from intertwine.pullback import measurements, per_neuron_temperatures
from intertwine.pullback.pgd import pgd_target_prob_by_step, to_zero_one
from intertwine.workflow.job import Job
from intertwine.workflow.stages.pullback.directions import (
    ascent_direction,
    pgd_settings,
    with_pullback_options,
)
from intertwine.workflow.stages.pullback.settings import PullbackConfig

#: The paper's seed of its data loader (Section 5.2), the default of ``pullback.external.<name>.draw_seed``.
PAPER_DRAW_SEED = 314


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
    """The grid's images and targets: ``per_class`` images of each of ``classes`` class folders
    spread over the sorted folders (Imagenette's 10 and 5: folders 0, 2, 4, 6, 8, the released
    code's choice), their ImageNet labels and file names, and as targets their classes then
    ``extra_targets`` random other ImageNet classes. The images: drawn with ``draw_seed`` (the
    paper's 314, ``data.image_folder.load_folder_images``), or the first by file name where it is
    None (ours). Returns (raw images, labels, files, targets)."""
    from intertwine.data.image_folder import class_folders, load_folder_images

    folders = class_folders(entry["images"])
    count = min(entry.get("classes", 5), len(folders))
    chosen = folders[:: max(1, len(folders) // count)][:count]
    classes = _imagenet_labels(chosen, entry.get("labels"), name)
    raw, owners, files = load_folder_images(
        entry["images"],
        chosen,
        entry.get("per_class", 1),
        entry.get("size", 224),
        entry.get("resize", 256),
        draw_seed=entry.get("draw_seed", PAPER_DRAW_SEED),
    )
    labels = torch.tensor([classes[chosen.index(f)] for f in owners])
    generator = torch.Generator().manual_seed(job.seed("pullback", "external", name))
    others = [c for c in torch.randperm(1000, generator=generator).tolist() if c not in classes]
    return raw, labels, files, classes + others[: entry.get("extra_targets", 1)]


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
    temperatures on these images): the rows of :func:`_external_rows` for every mode, each mode's
    moved images in [0, 1] and its raw direction at the clean image (numpy), row
    ``i * len(targets) + j`` image i toward target j."""
    name, arch = model_name
    n, t = len(x), len(targets)
    batch = x.repeat_interleave(t, 0)  # image i, target j at row i * t + j
    goal = torch.tensor(targets, device=job.device).repeat(n)
    temperatures = per_neuron_temperatures(model, x, temperature)
    with torch.no_grad():
        before = model(batch).softmax(1)[torch.arange(n * t), goal]
    rows, perturbed, pullbacks = [], {}, {}
    for mode in measurements.MODES:
        direction = ascent_direction(model, mode, temperature, temperatures)
        # the paper's Figure 2: each (image, target)'s raw pullback (gradient) at the clean image
        pullbacks[mode] = direction(batch, goal).detach().cpu().numpy()
        moved, steps = pgd_target_prob_by_step(model, direction, batch, goal, mean, std, **pgd)
        with torch.no_grad():
            predicted = model(moved).argmax(1).cpu()
        perturbed[mode] = to_zero_one(moved, mean, std).cpu().numpy()
        rows += _external_rows(name, arch, mode, files, labels, targets, before, steps, predicted)
        job.log(
            f"{name} ({arch}) {mode}: PGD toward {t} targets from {n} images, success "
            f"{(predicted == goal.cpu()).double().mean().item():.2f}"
        )
    return rows, perturbed, pullbacks


def _external_arrays(
    name: str, arch: str, entry: dict, raw, labels, targets, moved: tuple[dict, dict], pgd: dict, categories
) -> dict:
    """What the external model's figures draw: the clean images in [0, 1], class names (from
    ``categories``, ImageNet's), and each mode's perturbed images and raw pullbacks (``moved``:
    both, as :func:`_external_modes` returns them) as (image, target, ...)."""
    n, t = len(raw), len(targets)
    perturbed, pullbacks = moved
    return {
        "title": f"{name} ({arch}, {entry.get('size', 224)} px)",
        "images": (raw.float() / 255).numpy(),
        "labels": [categories[c] for c in labels.tolist()],
        "targets": [categories[c] for c in targets],
        "perturbed": {m: p.reshape(n, t, *p.shape[1:]) for m, p in perturbed.items()},
        "pullbacks": {m: p.reshape(n, t, *p.shape[1:]) for m, p in pullbacks.items()},
        "steps": pgd["steps"],
        "epsilon": pgd["epsilon"],
    }


@with_pullback_options
def pullback_external(
    job: Job, name: str, arch: str, weights: str, entry: dict, block: dict
) -> tuple[pd.DataFrame, dict]:
    """The paper's grids for a torchvision ImageNet model with local weights
    (``models.imagenet.load_imagenet_model``) on an image folder (Imagenette's layout): ``per_class``
    images of ``classes`` class folders spread over the sorted folders, drawn with ``draw_seed``
    (:func:`_external_images`), their raw pullbacks toward each target (Figure 2), each moved by the paper's PGD toward every one of their classes and
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
        per_class, draw_seed, size, resize).
    block : dict
        The ``pullback`` settings.

    Returns
    -------
    table : pandas.DataFrame
        One row per (mode, image, target).
    arrays : dict
        The arrays of the figures (:func:`_external_arrays`).
    """
    # imported first: without torchvision the job fails before it reads an image
    from torchvision.models._meta import _IMAGENET_CATEGORIES

    from intertwine.models.imagenet import IMAGENET_MEAN, IMAGENET_STD, load_imagenet_model

    settings = PullbackConfig.from_block(block, "pullback")
    raw, labels, files, targets = _external_images(job, name, entry)
    model = load_imagenet_model(arch, weights).to(job.device)
    mean = torch.tensor(IMAGENET_MEAN, device=job.device)
    std = torch.tensor(IMAGENET_STD, device=job.device)
    x = normalize(raw.to(job.device), mean, std)
    pgd = pgd_settings(settings, x.shape[1:])
    rows, perturbed, pullbacks = _external_modes(
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
        name, arch, entry, raw, labels, targets, (perturbed, pullbacks), pgd, _IMAGENET_CATEGORIES
    )
