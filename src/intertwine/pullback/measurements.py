"""Measurements with excitation pullbacks (Satkiewicz, "Tapping into the Black Box"), on top of
:mod:`intertwine.pullback`: tensors in, numbers out (the workflow's pullback stage runs them).

* **symmetry** (:func:`symmetry_cosines`): the cosine between a model's pullbacks and those of the
  same model with a random group element acting on its weights (:func:`intertwine.symmetry.
  act_on_weights`, the same function), per group (permutations; G_ReLU with log-normal scales of
  spread sigma) and temperature mode. The plain gradient of an unchanged function is unchanged; a
  global temperature is not scale-invariant (``sigmoid(d z / T)`` depends on d), per-neuron
  temperatures recomputed on the transformed model's probe set are (``T_i`` scales with ``d_i``).
* **agreement across seeds** (:func:`agreement_rows`): cosines between two members' pullbacks of
  the class logit, and of hidden units matched one to one by the Hungarian algorithm
  (:func:`intertwine.stitching.match_grelu`).
* **faithfulness**: deletion and insertion curves (:func:`deletion_insertion`; our extension: the
  paper shows its pullbacks qualitatively) and the paper's projected gradient ascent toward a
  target class with the pullback as the ascent direction (:func:`pgd_toward`).

Cosines are computed in float64; a pair in which either vector is exactly zero has no cosine
(NaN), and the summaries (:func:`summarize_cosines`) count and skip such images.

Gated networks (:mod:`intertwine.models.gated`): a value unit ``pre * gate`` (``GateActivation``)
is linear given its gate, and the gated max-pool is a gather at positions the feature network
chooses. :mod:`intertwine.pullback` holds the gate fixed (detached), exactly as the pullback holds a
ReLU's soft gate fixed: a gated network's pullback is its value network's input gradient with the
feature network's gates (soft or hard) held fixed, the same at every temperature (the swapped ReLUs
and max-pools of the feature network are off its path). Our extension: the paper treats ReLU
networks only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

from intertwine import pullback as pb

__all__ = [
    "GROUPS",
    "MODES",
    "PAPER_IMAGE_DIMS",
    "agreement_rows",
    "attributions",
    "cosines",
    "curve_area",
    "deletion_insertion",
    "from_unit_range",
    "matched_units",
    "pgd_toward",
    "random_targets",
    "saliency",
    "scaled_to_image",
    "summarize_cosines",
    "symmetry_cosines",
    "to_unit_range",
    "transfer_curve",
    "transfer_measures",
]

#: The stage's temperature modes: the plain gradient, one global T, per-neuron T.
MODES = ("gradient", "global", "per_neuron")
#: The groups acting on the weights: permutations, and G_ReLU (positive per-channel scales too).
GROUPS = ("permutation", "grelu")
#: The paper's ImageNet inputs: values in [-1, 1], 224 x 224 x 3 of them (the crop of its released
#: code; its text gives no size); its PGD radius and step are L2 norms there (epsilon 100, step 20).
PAPER_IMAGE_DIMS = 224 * 224 * 3


# --- pullbacks and cosines -----------------------------------------------------------------------


def attributions(
    model: nn.Module,
    images: Tensor,
    classes,
    mode: str,
    temperature: float,
    probe: Tensor | None = None,
    temperatures: dict[str, Tensor] | None = None,
    **target,
) -> Tensor:
    """``pullback(model, images, classes, ...)`` in ``mode`` (one of :data:`MODES`); per-neuron
    temperatures are ``temperatures`` or, without them, measured on ``probe`` for this very model.
    ``target``: ``site=`` and ``units=`` instead of classes (pass ``classes=None``)."""
    if mode == "per_neuron" and temperatures is None:
        if probe is None:
            raise ValueError("attributions: mode 'per_neuron' needs probe images or temperatures")
        temperatures = pb.per_neuron_temperatures(model, probe, temperature)
    return pb.pullback(model, images, classes, temperature, mode, temperatures, **target)


def cosines(a: Tensor, b: Tensor) -> Tensor:
    """Per-row cosine of ``a`` and ``b`` (N, ...) flattened, in float64; NaN where either is zero."""
    a, b = a.detach().flatten(1).double(), b.detach().flatten(1).double()
    norms = a.norm(dim=1) * b.norm(dim=1)
    return torch.where(norms > 0, (a * b).sum(1) / torch.where(norms > 0, norms, 1), math.nan)


def summarize_cosines(values: Tensor) -> dict:
    """Mean and minimum over images of per-image cosines, NaNs (no cosine) skipped; ``images``
    counts those with one."""
    valid = values[~values.isnan()]
    if not len(valid):
        return {"cos_mean": math.nan, "cos_min": math.nan, "images": 0}
    return {"cos_mean": valid.mean().item(), "cos_min": valid.min().item(), "images": len(valid)}


# --- symmetry --------------------------------------------------------------------------------------


def symmetry_cosines(
    model: nn.Module,
    images: Tensor,
    classes,
    probe: Tensor,
    temperature: float,
    spreads: Sequence[float],
    generator: torch.Generator,
    groups: Sequence[str] = GROUPS,
    modes: Sequence[str] = MODES,
) -> list[dict]:
    """One row per (group, scale spread, mode): the cosines between ``model``'s pullbacks and those
    of ``act_on_weights(model, random_elements(...))``, the same function, mean and minimum over
    ``images``. "permutation" (spread 0) draws permutations; "grelu" draws a G_ReLU element per
    spread sigma in ``spreads`` (log-normal scales, ``random_elements(..., sigma=sigma)``). Per-neuron
    temperatures are measured on ``probe`` for each model (the original and each transformed one).
    ``logit_change`` is the largest change of a logit relative to the largest logit: the element is
    a symmetry when it is at rounding level. Run it on a float64 model."""
    from intertwine.symmetry import act_on_weights, random_elements

    unknown = sorted(set(groups) - set(GROUPS))
    if unknown:
        raise ValueError(f"symmetry_cosines: unknown groups {unknown}; expected among {GROUPS}")
    parameter = next(model.parameters())
    images = images.to(parameter.device, parameter.dtype)
    probe = probe.to(parameter.device, parameter.dtype)
    with torch.no_grad():
        logits = model.eval()(images)
    base = {mode: attributions(model, images, classes, mode, temperature, probe) for mode in modes}
    rows = []
    for group in groups:
        for spread in [0.0] if group == "permutation" else spreads:
            elements = random_elements(model, group, generator, sigma=spread, dtype=parameter.dtype)
            moved = act_on_weights(model, elements).eval()
            with torch.no_grad():
                change = ((moved(images) - logits).abs().max() / logits.abs().max()).item()
            for mode in modes:
                values = cosines(base[mode], attributions(moved, images, classes, mode, temperature, probe))
                rows.append(
                    {
                        "group": group,
                        "scale_spread": float(spread),
                        "mode": mode,
                        **summarize_cosines(values),
                        "logit_change": change,
                    }
                )
    return rows


# --- agreement across seeds --------------------------------------------------------------------------


def matched_units(acts_a: Tensor, acts_b: Tensor) -> tuple[Tensor, Tensor]:
    """For activations (N, C, ...) of two members at one site: ``perm`` matching channel u of a to
    channel ``perm[u]`` of b (``measures.match_channels``: Hungarian on normalised correlations), and
    each match's normalised correlation (NaN where either channel is zero on every input)."""
    from intertwine.measures import match_channels

    if acts_a.shape != acts_b.shape or acts_a.ndim < 2:
        raise ValueError(
            "matched_units: the two members' activations must be of one shape (N, C, ...), got "
            f"{tuple(acts_a.shape)} and {tuple(acts_b.shape)}"
        )
    a = acts_a.transpose(0, 1).reshape(acts_a.shape[1], -1).double()
    b = acts_b.transpose(0, 1).reshape(acts_b.shape[1], -1).double()
    perm = match_channels(a @ b.T, a.square().sum(1), b.square().sum(1))  # a_u ~ b_perm[u]
    return perm, cosines(a, b[perm.to(b.device)]).cpu()


def agreement_rows(
    model_a: nn.Module,
    model_b: nn.Module,
    images: Tensor,
    classes,
    probe: Tensor,
    temperature: float,
    sites: Sequence[str],
    units: int,
    generator: torch.Generator,
    modes: Sequence[str] = MODES,
) -> list[dict]:
    """The agreement of two members' pullbacks on ``images``, per mode: of the class logit
    (``site`` "logit", ``classes`` one per image), and at each of ``sites`` of ``units`` hidden units
    of a drawn at random among those whose match is alive (nonzero on the probe set in both), each
    against its matched unit of b (:func:`matched_units` on the probe set's activations). A unit's
    pullback is that of its output summed over positions. Per-neuron temperatures are measured on
    ``probe`` for each member."""
    from intertwine.models import site_activations

    parameter = next(model_a.parameters())
    images = images.to(parameter.device, parameter.dtype)
    probe = probe.to(parameter.device, parameter.dtype)
    temperatures = {
        "a": pb.per_neuron_temperatures(model_a, probe, temperature) if "per_neuron" in modes else None,
        "b": pb.per_neuron_temperatures(model_b, probe, temperature) if "per_neuron" in modes else None,
    }

    def attribution(which, x, mode, classes=None, **target):
        model = model_a if which == "a" else model_b
        return attributions(model, x, classes, mode, temperature, temperatures=temperatures[which], **target)

    rows = []
    for mode in modes:
        values = cosines(attribution("a", images, mode, classes), attribution("b", images, mode, classes))
        rows.append(
            {"site": "logit", "unit_a": -1, "unit_b": -1, "match_correlation": math.nan, "mode": mode}
            | summarize_cosines(values)
        )
    n = len(images)
    for site in sites:
        acts_a = site_activations(model_a, probe, [site])[site]
        acts_b = site_activations(model_b, probe, [site])[site]
        perm, correlation = matched_units(acts_a, acts_b)
        alive = (~correlation.isnan()).nonzero().flatten()
        chosen = alive[torch.randperm(len(alive), generator=generator)[:units]].sort().values
        if not len(chosen):
            continue
        # every chosen unit at every image in one batch: unit k's images are rows k*n .. (k+1)*n-1
        batch = images.repeat(len(chosen), *([1] * (images.dim() - 1)))
        units_a, units_b = chosen.repeat_interleave(n), perm[chosen].repeat_interleave(n)
        for mode in modes:
            got_a = attribution("a", batch, mode, site=site, units=units_a).view(len(chosen), n, -1)
            got_b = attribution("b", batch, mode, site=site, units=units_b).view(len(chosen), n, -1)
            for k, unit in enumerate(chosen.tolist()):
                rows.append(
                    {
                        "site": site,
                        "unit_a": unit,
                        "unit_b": int(perm[unit]),
                        "match_correlation": correlation[unit].item(),
                        "mode": mode,
                    }
                    | summarize_cosines(cosines(got_a[k], got_b[k]))
                )
    return rows


# --- faithfulness ------------------------------------------------------------------------------------


def saliency(attribution: Tensor) -> Tensor:
    """A pixel's importance: ``|v|`` summed over channels, (N, C, H, W) -> (N, H, W)."""
    return attribution.abs().sum(1)


@torch.no_grad()
def deletion_insertion(
    model: nn.Module, images: Tensor, classes, attribution: Tensor, steps: int = 20, batch_size: int = 500
) -> tuple[Tensor, Tensor]:
    """Deletion and insertion curves (N, steps + 1): the softmax probability of each image's class
    when the fraction k / steps (k = 0 .. steps) of its pixels ranked first by :func:`saliency` is
    replaced by 0 (deletion: the data mean, for normalised images), or when only those pixels are
    put into the all-zero image (insertion, from the mean image). Ties keep pixel order. At 0 %
    deleted the curve is the image's own prediction, at 100 % the mean image's."""
    if steps < 1:
        raise ValueError(f"deletion_insertion: steps must be at least 1, got {steps}")
    if attribution.shape != images.shape:
        raise ValueError(f"attribution {tuple(attribution.shape)} for images {tuple(images.shape)}")
    parameter = next(model.parameters())
    images = images.to(parameter.device, parameter.dtype)
    n, _, h, w = images.shape
    classes = torch.as_tensor(classes, device=images.device).long().reshape(-1).expand(n)
    order = torch.sort(saliency(attribution).flatten(1), dim=1, descending=True, stable=True).indices
    order = order.to(images.device)
    rank = torch.empty_like(order).scatter_(1, order, torch.arange(h * w, device=images.device).expand(n, -1))
    counts = [round(k * h * w / steps) for k in range(steps + 1)]
    model.eval()
    curves = []
    for inserting in (False, True):
        probabilities = []
        for count in counts:
            top = (rank < count).view(n, 1, h, w)
            x = torch.where(top, images, 0) if inserting else torch.where(top, 0, images)
            out = torch.cat([model(x[i : i + batch_size]) for i in range(0, n, batch_size)])
            probabilities.append(out.softmax(1)[torch.arange(n), classes])
        curves.append(torch.stack(probabilities, 1))
    return curves[0], curves[1]


def curve_area(curve: Tensor) -> Tensor:
    """The area under curves (..., steps + 1) over the fractions 0 .. 1 (trapezoids); in [0, 1]
    for probabilities."""
    return torch.trapezoid(curve, dx=1.0 / (curve.shape[-1] - 1), dim=-1)


def to_unit_range(z: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """Normalised images ``(p - mean) / std`` (p in [0, 1]) as images in [-1, 1]: ``2 p - 1``."""
    return 2 * (z * std.view(1, -1, 1, 1) + mean.view(1, -1, 1, 1)) - 1


def from_unit_range(u: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """Images in [-1, 1] as the model's normalised inputs (the inverse of :func:`to_unit_range`)."""
    return ((u + 1) / 2 - mean.view(1, -1, 1, 1)) / std.view(1, -1, 1, 1)


def scaled_to_image(norm: float, dims: int) -> float:
    """An L2 norm for the paper's 224 x 224 x 3 images, for images of ``dims`` values: the same
    root-mean-square change per value (``norm * sqrt(dims / 150528)``; 32 x 32 x 3: 100 -> 14.29)."""
    return norm * math.sqrt(dims / PAPER_IMAGE_DIMS)


def random_targets(labels: Tensor, classes: int, generator: torch.Generator) -> Tensor:
    """A target class per image, uniform among the classes other than its label."""
    shift = torch.randint(1, classes, (len(labels),), generator=generator)
    return (labels.cpu().long() + shift) % classes


def pgd_toward(
    direction: Callable[[Tensor, Tensor], Tensor],
    images: Tensor,
    targets: Tensor,
    mean: Tensor,
    std: Tensor,
    steps: int = 10,
    epsilon: float = 14.29,
    step_size: float = 2.86,
    each_step: Callable[[Tensor], None] | None = None,
) -> Tensor:
    """The paper's projected gradient ascent toward ``targets``, in the space of images in [-1, 1]:
    ``steps`` times ``u <- clip(project(u + step_size * d / |d|))``, ``d`` the ascent direction at u,
    the projection onto the L2 ball of radius ``epsilon`` around the start, the clip to [-1, 1].
    ``direction(z, targets)`` gives it for normalised inputs z (a pullback or the gradient of the
    target logit); since ``z = ((u + 1) / 2 - mean) / std``, ``d = direction / (2 std)`` per channel
    (the chain rule, exact for a pullback too: it is the gradient of the gated value network, which
    the affine map composes with). Returns the final normalised images; ``each_step`` is called
    with them after every step."""
    start = to_unit_range(images, mean, std)
    u = start.clone()
    dz_du = 1 / (2 * std.view(1, -1, 1, 1))
    for _ in range(steps):
        d = direction(from_unit_range(u, mean, std), targets) * dz_du
        u = u + step_size * d / d.flatten(1).norm(dim=1).clamp_min(1e-30).view(-1, 1, 1, 1)
        delta = u - start
        shrink = (epsilon / delta.flatten(1).norm(dim=1).clamp_min(1e-30)).clamp(max=1).view(-1, 1, 1, 1)
        u = (start + delta * shrink).clamp(-1, 1)  # the clip moves toward the start: still in the ball
        if each_step is not None:
            each_step(from_unit_range(u, mean, std))
    return from_unit_range(u, mean, std)


# --- transfer across seeds (ours) ---------------------------------------------------------------------


def transfer_measures(
    source_after: Tensor, other_before: Tensor, other_after: Tensor, targets: Tensor
) -> dict[str, float]:
    """Whether a PGD perturbation made along one member's direction moves *another* member toward
    the target class (our measure; the paper shows PGD on one model only).

    Parameters
    ----------
    source_after : (N, K) logits of the member whose pullback (or gradient) steered the PGD, on the
        perturbed images.
    other_before, other_after : (N, K) logits of another member (a different seed) on the clean and
        on the same perturbed images.
    targets : (N,) the target classes.

    Returns
    -------
    ``images``; ``source_success`` (fraction of images the source member predicts as the target
    after PGD); ``transfer_success`` (the same for the other member); ``transfer_already`` (the
    other member predicted the target on the clean image: the floor of ``transfer_success``);
    ``transfer_target_prob_before`` and ``transfer_target_prob`` (the other member's softmax
    probability of the target, mean over images); ``transfer_prob_gain`` (their difference) and
    ``transfer_margin_gain`` (the mean change of the other member's target logit minus its largest
    other logit). All in float64.
    """
    if not (source_after.shape == other_before.shape == other_after.shape) or source_after.dim() != 2:
        raise ValueError(
            f"transfer_measures: logits of shapes {tuple(source_after.shape)}, {tuple(other_before.shape)}, "
            f"{tuple(other_after.shape)}; expected three (N, K) tensors of one shape"
        )
    targets = torch.as_tensor(targets, device=source_after.device).long().reshape(-1)
    if len(targets) != len(source_after):
        raise ValueError(f"transfer_measures: {len(targets)} targets for {len(source_after)} images")
    rows = torch.arange(len(targets), device=targets.device)

    def margin(logits: Tensor) -> Tensor:
        logits = logits.double()
        others = logits.clone()
        others[rows, targets] = -math.inf
        return logits[rows, targets] - others.max(1).values

    before = other_before.double().softmax(1)[rows, targets]
    after = other_after.double().softmax(1)[rows, targets]
    return {
        "images": len(targets),
        "source_success": (source_after.argmax(1) == targets).double().mean().item(),
        "transfer_success": (other_after.argmax(1) == targets).double().mean().item(),
        "transfer_already": (other_before.argmax(1) == targets).double().mean().item(),
        "transfer_target_prob_before": before.mean().item(),
        "transfer_target_prob": after.mean().item(),
        "transfer_prob_gain": (after - before).mean().item(),
        "transfer_margin_gain": (margin(other_after) - margin(other_before)).mean().item(),
    }


def transfer_curve(success_by_step: Sequence[float]) -> dict:
    """The transfer across seeds as the PGD budget grows (ours): the other member's success after
    each step, its first step (the smallest budget, one ``step_size``) and its mean over the steps
    (the area under the curve, in [0, 1]; higher: the perturbation reads as the target to the
    other seed sooner). At the paper's full budget (10 steps, epsilon 100 at 224 x 224 x 3) every
    mode moves almost every image, so the final success does not tell the modes apart; the curve
    does where one mode gets there with less.

    Parameters
    ----------
    success_by_step : the fraction of images the other member predicts as the target after each
        step, in order (``pgd_toward``'s ``each_step``).

    Returns
    -------
    ``transfer_success_by_step`` (the list), ``transfer_success_first_step`` and
    ``transfer_success_area``.
    """
    steps = [float(v) for v in success_by_step]
    if not steps:
        raise ValueError("transfer_curve: no step recorded (pgd.steps must be at least 1)")
    return {
        "transfer_success_by_step": steps,
        "transfer_success_first_step": steps[0],
        "transfer_success_area": sum(steps) / len(steps),
    }


# --- the stage's summary -----------------------------------------------------------------------------
