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
  target class with the pullback as the ascent direction (:mod:`intertwine.pullback.pgd`).

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
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from intertwine import pullback as pb

__all__ = [
    "GROUPS",
    "MODES",
    "agreement_rows",
    "attributions",
    "cosines",
    "curve_area",
    "deletion_insertion",
    "matched_units",
    "saliency",
    "summarize_cosines",
    "symmetry_cosines",
]

#: The stage's temperature modes: the plain gradient, one global T, per-neuron T.
MODES = ("gradient", "global", "per_neuron")
#: The groups acting on the weights: permutations, and G_ReLU (positive per-channel scales too).
GROUPS = ("permutation", "grelu")


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
            got_a = attribution("a", batch, mode, site=site, units=units_a).reshape(len(chosen), n, -1)
            got_b = attribution("b", batch, mode, site=site, units=units_b).reshape(len(chosen), n, -1)
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
