"""Training a stitching layer between two frozen models: the stitched network, the training
loop, alpha's cross-validation, the batch-norm refresh, and one site's whole run (``stitch_site``)."""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable

import torch
from torch import nn

from intertwine import models
from intertwine.data import Split
from intertwine.data.augment import augment, normalize
from intertwine.stitch_methods import parse_method
from intertwine.stitching.layers import GReLULayer, GReLUStitch, build_layer, sparsity
from intertwine.training import evaluate
from intertwine.utils import derive_seed

if TYPE_CHECKING:
    from intertwine.training_config import StitchConfig


def cv_split(n: int, held_out: float, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Disjoint (fit, held-out) index sets covering ``range(n)``: a random ``held_out`` fraction
    (at least one image) is held out.

    Parameters
    ----------
    n : int
        The number of training images.
    held_out : float
        The fraction held out, strictly between 0 and 1 (rounded; at least one image, fewer than n).
    generator : torch.Generator
        The source of the draw.

    Returns
    -------
    fit : Tensor
        The indices the layer fits on, sorted (long).
    held : Tensor
        The held-out indices, sorted (long).
    """
    if not 0 < held_out < 1:
        raise ValueError(f"stitching.cv_held_out must lie strictly between 0 and 1, got {held_out}")
    n_held = max(1, round(held_out * n))
    if n_held >= n:
        raise ValueError(
            f"cannot hold out {n_held} of {n} training images for alpha's cross-validation; "
            "raise stitching.train_images"
        )
    order = torch.randperm(n, generator=generator)
    return order[n_held:].sort().values, order[:n_held].sort().values


def stitch(f: nn.Module, g: nn.Module, site: str, layer: nn.Module) -> models.Stitched:
    """The stitched network g_{>site} ∘ layer ∘ f_{<=site}. f and g are frozen (f runs in eval
    mode without autograd; g keeps its mode, so its batch norm uses batch statistics while the
    layer trains); only ``layer`` trains. A layer built for another channel count than the site's
    is an error naming both (``models.Stitched``).

    Parameters
    ----------
    f : nn.Module
        The front model, run up to and including ``site``.
    g : nn.Module
        The back model, run after ``site``; its parameters stop requiring gradients (in place).
    site : str
        Where the two are joined (``models.cut_sites``).
    layer : nn.Module
        The stitching layer on the site's channels (``build_layer``).

    Returns
    -------
    models.Stitched
        The stitched network: ``front`` f, ``back`` g and ``bridge`` ``layer``, none of them copied.
    """
    stitched = models.Stitched(front=f, back=g, site=site, bridge=layer)  # checks before changing g
    g.requires_grad_(False)
    return stitched


def _optimizer(params, config: StitchConfig) -> torch.optim.Optimizer:
    if config.optimizer == "sgd":
        return torch.optim.SGD(params, lr=config.lr, momentum=config.momentum)
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.lr)
    raise ValueError(f"stitching optimizer {config.optimizer!r}: expected sgd or adam")


@dataclass
class Fit:
    """What ``fit`` reports: its seconds, and a G_ReLU layer's off-permutation mass after each epoch."""

    seconds: float
    off_permutation_mass: list[float] = field(default_factory=list)


def fit(
    stitched: models.Stitched,
    train_split: Split,
    config: StitchConfig,
    generator: torch.Generator,
    mean: torch.Tensor,
    std: torch.Tensor,
    label: str = "stitch",
    log: Callable[[str], None] = print,
) -> Fit:
    """Train the stitching layer (only it) with cross-entropy plus the layer's regularizer (G_ReLU:
    ``-alpha ||P||_F``; L1: ``lambda sum |W|``).

    A G_ReLU layer is projected back onto its constraint set after every step (the Birkhoff
    layer's P as ``stitching.permutation_update`` says), and its scales stay at their initial
    values (1, or matched) for the first ``scales_frozen_fraction`` of the epochs.

    Parameters
    ----------
    stitched : models.Stitched
        The stitched network (``stitch``); its ``bridge`` is the layer trained.
    train_split : Split
        The training images and labels, on the network's and ``generator``'s device.
    config : StitchConfig
        The recipe: ``epochs``, ``batch_size``, ``optimizer`` ("sgd" or "adam"), ``lr``,
        ``momentum``, the augmentation (``translate``, ``flip``) and ``scales_frozen_fraction``.
    generator : torch.Generator
        The source of every random draw: the batch orders and the augmentations.
    mean, std : Tensor
        The per-channel input normalisation (0..1 units).
    label : str, default "stitch"
        What the log's lines (and the ValueError of a NaN or infinite loss) start with.
    log : Callable[[str], None], default print
        Where one line per epoch goes.

    Returns
    -------
    Fit
        The training's ``seconds`` and, for a G_ReLU layer, its off-permutation mass after each epoch.
    """
    layer = stitched.bridge
    grelu = isinstance(layer, GReLULayer)
    optimizer = _optimizer(layer.optimized_parameters() if grelu else list(layer.parameters()), config)
    loss_fn = nn.CrossEntropyLoss()
    device = train_split.images.device
    steps = math.ceil(len(train_split) / config.batch_size)
    frozen_epochs = round(config.scales_frozen_fraction * config.epochs) if grelu else 0
    result = Fit(0.0)
    started = time.perf_counter()
    stitched.train()
    for epoch in range(1, config.epochs + 1):
        if grelu:
            layer.scale_parameter().requires_grad_(epoch > frozen_epochs)
        order = torch.randperm(len(train_split), device=device, generator=generator)
        loss_sum = torch.zeros((), device=device)
        for step in range(steps):
            if grelu:
                layer.anneal(((epoch - 1) * steps + step) / (config.epochs * steps))
            idx = order[step * config.batch_size : (step + 1) * config.batch_size]
            x = augment(
                normalize(train_split.images[idx], mean, std), generator, config.translate, config.flip
            )
            loss = loss_fn(stitched(x), train_split.labels[idx])
            penalty = layer.regularizer()
            if penalty is not None:
                loss = loss + penalty
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if grelu:
                layer.project()
            loss_sum += loss.detach() * len(idx)
        train_loss = loss_sum.item() / len(train_split)
        if not math.isfinite(train_loss):
            raise ValueError(
                f"{label}: stitching loss became {train_loss} in epoch {epoch}; lower stitching.lr"
            )
        mass = ""
        if grelu:
            layer.anneal(epoch / config.epochs)  # at the last epoch: the layer rounding compares against
            result.off_permutation_mass.append(layer.off_permutation_mass())
            mass = f", off-permutation mass {result.off_permutation_mass[-1]:.3f}"
        log(f"{label} epoch {epoch}/{config.epochs} loss {train_loss:.4f}{mass}")
    result.seconds = time.perf_counter() - started
    return result


def select_alpha(
    make_layer: Callable[[float], GReLUStitch],
    stitched: models.Stitched,
    train_split: Split,
    config: StitchConfig,
    generator: torch.Generator,
    mean: torch.Tensor,
    std: torch.Tensor,
    label: str = "stitch",
    log: Callable[[str], None] = print,
) -> dict:
    """Alpha of the G_ReLU layer by cross-validation (the paper's D.5): a disjoint split of
    ``train_split`` (``cv_held_out`` of it held out), one run of ``cv_epochs`` per alpha of
    ``alpha_grid`` on the rest, each from the same start (``make_layer(alpha)``) and without the
    scales' head start; each run's rounded layer is scored on the held-out images (no
    augmentation, batch-norm statistics refreshed on the fit part). Leaves the best alpha's layer
    (the first of equal scores) in ``stitched.bridge`` and returns what the table records.

    Parameters
    ----------
    make_layer : Callable[[float], GReLUStitch]
        alpha -> a fresh G_ReLU layer, from the same start for every alpha.
    stitched : models.Stitched
        The stitched network: its ``bridge`` is replaced, and its back model's state is restored
        after each run and at the end.
    train_split : Split
        The training images and labels, split into the fit and held-out parts.
    config : StitchConfig
        ``fit``'s recipe, with ``alpha_grid``, ``cv_held_out``, ``cv_epochs`` (None or 0: ``epochs``)
        and ``eval_batch_size``.
    generator : torch.Generator
        The source of every random draw: the split, the batch orders and the augmentations.
    mean, std : Tensor
        The per-channel input normalisation (0..1 units).
    label : str, default "stitch"
        What the log's lines start with.
    log : Callable[[str], None], default print
        Where the log's lines go.

    Returns
    -------
    dict
        ``alpha_selected``, ``cv_alphas`` (the grid), ``cv_accuracies`` (the held-out accuracy of
        each alpha), ``seconds`` (the runs' training time, summed), ``off_permutation_mass`` (the
        chosen layer's, at rounding) and ``off_permutation_mass_by_epoch`` (its run's, per epoch).
    """
    fit_idx, held_idx = cv_split(len(train_split), config.cv_held_out, generator)
    fit_part = Split(train_split.images[fit_idx], train_split.labels[fit_idx])
    held_part = Split(train_split.images[held_idx], train_split.labels[held_idx])
    run_config = replace(config, epochs=config.cv_epochs or config.epochs, scales_frozen_fraction=0.0)
    back = copy.deepcopy(stitched.back.state_dict())
    scores, layers, fits, masses = [], [], [], []
    for alpha in config.alpha_grid:
        stitched.back.load_state_dict(back)
        stitched.bridge = make_layer(alpha)
        fits.append(
            fit(stitched, fit_part, run_config, generator, mean, std, f"{label} alpha {alpha:g}", log)
        )
        masses.append(stitched.bridge.round())
        refresh_batch_norm(stitched, fit_part, mean, std, config.eval_batch_size)
        scores.append(evaluate(stitched, held_part, mean, std, config.eval_batch_size))
        layers.append(stitched.bridge)
        log(f"{label} alpha {alpha:g}: held-out accuracy {scores[-1]:.4f}")
    best = max(range(len(scores)), key=lambda i: (scores[i], -i))
    stitched.bridge = layers[best]
    stitched.back.load_state_dict(back)
    return {
        "alpha_selected": config.alpha_grid[best],
        "cv_alphas": list(config.alpha_grid),
        "cv_accuracies": scores,
        "seconds": sum(run.seconds for run in fits),
        "off_permutation_mass": masses[best],
        "off_permutation_mass_by_epoch": fits[best].off_permutation_mass,
    }


@torch.no_grad()
def refresh_batch_norm(
    stitched: models.Stitched,
    train_split: Split,
    mean: torch.Tensor,
    std: torch.Tensor,
    batch_size: int = 1000,
) -> None:
    """Recompute the running statistics of the back model's batch norms over one pass of the
    (unaugmented) training data through the stitched network: each becomes the plain average of
    the per-batch statistics (batch norm's cumulative mode), not a momentum-weighted one.

    Parameters
    ----------
    stitched : models.Stitched
        The stitched network; only its back model's batch-norm statistics change.
    train_split : Split
        The training images (uint8, on the network's device), in order, unaugmented.
    mean, std : Tensor
        The per-channel input normalisation (0..1 units).
    batch_size : int, default 1000
        Images per batch of the pass.

    Returns
    -------
    None
        The network is left in eval mode (untouched when the back model has no batch norm).
    """
    norms = [m for m in stitched.back.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    momenta = [m.momentum for m in norms]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average over the pass
    stitched.train()
    for start in range(0, len(train_split), batch_size):
        stitched(normalize(train_split.images[start : start + batch_size], mean, std))
    for m, momentum in zip(norms, momenta):
        m.momentum = momentum
    stitched.eval()


def refreshes_batch_norm(layer: nn.Module, config: StitchConfig) -> bool:
    """Whether g's batch-norm statistics are recomputed for this trained layer
    (``stitching.batch_norm_refresh``): the paper does it for the G_ReLU layer, whose rounded P
    differs from the P it trained with (appendix D.2.1); ours, for every method."""
    return config.batch_norm_refresh == "every_method" or isinstance(layer, GReLULayer)


def stitch_site(
    f: nn.Module,
    g: nn.Module,
    site: models.Site,
    method: str,
    config: StitchConfig,
    train_split: Split,
    mean: torch.Tensor,
    std: torch.Tensor,
    key: tuple,
    label: str = "stitch",
    log: Callable[[str], None] = print,
    accuracy: Callable[[models.Stitched], float] | None = None,
) -> tuple[models.Stitched, dict]:
    """Stitch f into a copy of g at ``site`` with a fresh layer of ``method`` and train it; every
    random draw comes from generators seeded from ``key`` (the layer's start, the batches).
    A G_ReLU layer is rounded, and g's batch-norm statistics are refreshed for the final layer
    (``refreshes_batch_norm``).

    Parameters
    ----------
    f, g : the front and back models (frozen; g is copied, never changed).
    site : the site stitched at (its name and channel count).
    method : the layer's method (``stitch_methods.parse_method``: "full", "rank4", "grelu", ...).
    config : how the layer starts and trains.
    train_split : the training images (on the device), and ``mean``, ``std`` to normalise them.
    key : the seeds' key: the layer's start from ``(*key, "init")``, the batches from
        ``(*key, "batches")``.
    label, log : what the training log's lines start with, and where they go.
    accuracy : a stitched network -> its test accuracy. With it, the layer before training is
        measured too (``acc_start``: rounded, batch norm refreshed), so a table shows what
        training added.

    Returns
    -------
    The stitched network, ready to evaluate, and its layer's columns of the table.
    """
    kind = parse_method(method)[0]
    device = train_split.images.device
    init_generator = torch.Generator().manual_seed(derive_seed(*key, "init"))
    matched = _activations_to_match(f, g, site.name, config, train_split, mean, std)
    make_layer = _layer_maker(method, site.channels, config, device, init_generator, matched)
    stitched = stitch(f, copy.deepcopy(g), site.name, make_layer())
    columns = _empty_columns(kind, config)
    if accuracy is not None:
        columns["acc_start"] = _start_accuracy(
            f, stitched, site.name, config, train_split, mean, std, accuracy
        )
    batches = torch.Generator(device=device).manual_seed(derive_seed(*key, "batches"))
    seconds, trained = _train_layer(
        kind, make_layer, stitched, train_split, config, batches, mean, std, label, log
    )
    columns |= trained
    columns |= _round_and_refresh(stitched, config, train_split, mean, std)
    layer = stitched.bridge
    return stitched, columns | {
        "train_seconds": seconds,
        "sparsity": sparsity(layer.matrix()),
        "trainable_params": sum(p.numel() for p in layer.parameters()),
    }


def _activations_to_match(
    f: nn.Module,
    g: nn.Module,
    site: str,
    config: StitchConfig,
    train_split: Split,
    mean: torch.Tensor,
    std: torch.Tensor,
) -> list[torch.Tensor] | None:
    """f's and g's activations at ``site`` on the first ``match_images`` training images, which
    an ``init: match`` layer starts from; None for ``init: random``."""
    if config.init != "match":
        return None
    images = train_split.images[: config.match_images]
    return [models.site_activations(model, images, [site], mean, std, len(images))[site] for model in (f, g)]


def _layer_maker(
    method: str,
    channels: int,
    config: StitchConfig,
    device: torch.device,
    init_generator: torch.Generator,
    matched: list[torch.Tensor] | None,
) -> Callable[..., nn.Module]:
    """``make_layer(alpha=config.alpha)``: a fresh layer of ``method`` on ``device``, matched to
    ``matched`` when given. The generator is rewound to its present state each time, so every
    alpha of grelu_cv starts from the same layer."""
    start = init_generator.get_state()

    def make_layer(alpha: float = config.alpha) -> nn.Module:
        init_generator.set_state(start)
        layer = build_layer(
            method,
            channels,
            init_generator,
            config.sinkhorn_iters,
            alpha,
            config.softsort_tau,
            config.permutation_step,
            config.softsort_hardening,
            config.permutation_update,
            config.softsort_rounding,
            config.grelu_start,
        ).to(device)
        if matched is not None:
            layer.match(*matched)
        return layer

    return make_layer


def _empty_columns(kind: str, config: StitchConfig) -> dict:
    """The layer's columns of the table, in the table's order, before anything is measured."""
    return {
        "alpha": config.alpha if kind == "grelu" else None,
        "alpha_selected": None,
        "cv_alphas": None,
        "cv_accuracies": None,
        "acc_start": None,
        "permutation": None,
        "scales": None,
        "off_permutation_mass": None,
        "off_permutation_mass_by_epoch": None,
    }


def _start_accuracy(
    f: nn.Module,
    stitched: models.Stitched,
    site: str,
    config: StitchConfig,
    train_split: Split,
    mean: torch.Tensor,
    std: torch.Tensor,
    accuracy: Callable[[models.Stitched], float],
) -> float:
    """The untrained layer's accuracy, measured as the trained one will be (rounded, batch norm
    refreshed), on copies of the layer and of g so that training starts from them untouched."""
    before = stitch(f, copy.deepcopy(stitched.back), site, copy.deepcopy(stitched.bridge))  # f is shared
    if isinstance(before.bridge, GReLULayer):
        before.bridge.round()
    if refreshes_batch_norm(before.bridge, config):
        refresh_batch_norm(before, train_split, mean, std, config.eval_batch_size)
    return accuracy(before)


def _train_layer(
    kind: str,
    make_layer: Callable[..., nn.Module],
    stitched: models.Stitched,
    train_split: Split,
    config: StitchConfig,
    batches: torch.Generator,
    mean: torch.Tensor,
    std: torch.Tensor,
    label: str,
    log: Callable[[str], None],
) -> tuple[float, dict]:
    """Train the layer in ``stitched``: grelu_cv chooses alpha by cross-validation (and leaves the
    chosen layer, already rounded), every other method fits once. Returns (seconds, the columns
    training fills)."""
    if kind == "grelu_cv":
        chosen = select_alpha(make_layer, stitched, train_split, config, batches, mean, std, label, log)
        seconds = chosen.pop("seconds")
        return seconds, chosen | {"alpha": chosen["alpha_selected"]}
    run = fit(stitched, train_split, config, batches, mean, std, label, log)
    columns = {}
    if run.off_permutation_mass:
        columns["off_permutation_mass_by_epoch"] = run.off_permutation_mass
    return run.seconds, columns


def _round_and_refresh(
    stitched: models.Stitched,
    config: StitchConfig,
    train_split: Split,
    mean: torch.Tensor,
    std: torch.Tensor,
) -> dict:
    """The trained layer made ready to evaluate: a G_ReLU layer rounded (unless grelu_cv's
    cross-validation has), then g's batch norm refreshed for it (``refreshes_batch_norm``).
    Returns the columns of the rounded element."""
    layer = stitched.bridge
    columns = {}
    if isinstance(layer, GReLULayer):
        if not layer.rounded:
            columns["off_permutation_mass"] = layer.round()
        columns["permutation"], columns["scales"] = layer.rounded_layer()
    if refreshes_batch_norm(layer, config):
        refresh_batch_norm(stitched, train_split, mean, std, config.eval_batch_size)
    return columns
