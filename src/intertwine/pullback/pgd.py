"""The paper's projected gradient ascent toward a target class (Satkiewicz, "Tapping into the
Black Box"): a pullback (or the plain gradient) as the ascent direction, steps of fixed L2 length
in the space of images in [-1, 1], projected onto an L2 ball around the start. Tensors in, numbers
out; the faithfulness of :mod:`intertwine.pullback.measurements`' modes is measured by it, and the
transfer of a perturbation across seeds (ours) on top of it.

* the image spaces: :func:`to_unit_range`, :func:`from_unit_range`, :func:`to_zero_one`; the
  paper's norms at another image size: :func:`scaled_to_image`;
* the ascent: :func:`random_targets`, :func:`pgd_toward`; what it achieves after each step:
  :func:`success_rate`, :func:`pgd_success_by_step`, :func:`pgd_target_prob_by_step`;
* the transfer across seeds (ours): :func:`transfer_measures`, :func:`transfer_curve`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn

__all__ = [
    "PAPER_IMAGE_DIMS",
    "from_unit_range",
    "pgd_success_by_step",
    "pgd_target_prob_by_step",
    "pgd_toward",
    "random_targets",
    "scaled_to_image",
    "success_rate",
    "to_unit_range",
    "to_zero_one",
    "transfer_curve",
    "transfer_measures",
]

#: The paper's ImageNet inputs: values in [-1, 1], 224 x 224 x 3 of them (the crop of its released
#: code; its text gives no size); its PGD radius and step are L2 norms there (epsilon 100, step 20).
PAPER_IMAGE_DIMS = 224 * 224 * 3


# --- image spaces ------------------------------------------------------------------------------------


def to_unit_range(z: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """Normalised images ``(p - mean) / std`` (p in [0, 1]) as images in [-1, 1]: ``2 p - 1``."""
    return 2 * (z * std.view(1, -1, 1, 1) + mean.view(1, -1, 1, 1)) - 1


def from_unit_range(u: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """Images in [-1, 1] as the model's normalised inputs (the inverse of :func:`to_unit_range`)."""
    return ((u + 1) / 2 - mean.view(1, -1, 1, 1)) / std.view(1, -1, 1, 1)


def to_zero_one(z: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """Normalised images as pixels in [0, 1] to show (clamped: a moved image stays in range up to
    rounding)."""
    return ((to_unit_range(z, mean, std) + 1) / 2).clamp(0, 1)


def scaled_to_image(norm: float, dims: int) -> float:
    """An L2 norm for the paper's 224 x 224 x 3 images, for images of ``dims`` values: the same
    root-mean-square change per value (``norm * sqrt(dims / 150528)``; 32 x 32 x 3: 100 -> 14.29)."""
    return norm * math.sqrt(dims / PAPER_IMAGE_DIMS)


# --- the ascent ------------------------------------------------------------------------------------


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


def success_rate(scores: Tensor, targets: Tensor) -> float:
    """The fraction of images whose top class is their target.

    Parameters
    ----------
    scores : Tensor
        (N, K) logits or probabilities (their argmax is the prediction).
    targets : Tensor
        (N,) the target classes.

    Returns
    -------
    float
        The fraction, in float64 arithmetic.
    """
    return (scores.argmax(1) == targets).double().mean().item()


def pgd_success_by_step(
    reader: nn.Module,
    direction: Callable[[Tensor, Tensor], Tensor],
    images: Tensor,
    targets: Tensor,
    mean: Tensor,
    std: Tensor,
    steps: int = 10,
    epsilon: float = 14.29,
    step_size: float = 2.86,
) -> tuple[Tensor, list[float]]:
    """:func:`pgd_toward` along ``direction``, with the success of ``reader`` after each step: the
    budget grows one ``step_size`` a step. ``reader`` is the model whose direction it is (the
    paper's success) or another one (the transfer across seeds, ours).

    Parameters
    ----------
    reader : nn.Module
        The model whose predictions on the moved images are counted, without autograd.
    direction, images, targets, mean, std, steps, epsilon, step_size
        As :func:`pgd_toward` takes them.

    Returns
    -------
    moved : Tensor
        The final normalised images (:func:`pgd_toward`'s).
    success_by_step : list[float]
        After each step, the fraction of images ``reader`` puts in their target class
        (:func:`success_rate`); the last is the moved images'.
    """
    by_step = []

    def record(z: Tensor) -> None:
        with torch.no_grad():
            by_step.append(success_rate(reader(z), targets))

    moved = pgd_toward(direction, images, targets, mean, std, steps, epsilon, step_size, each_step=record)
    return moved, by_step


def pgd_target_prob_by_step(
    model: nn.Module,
    direction: Callable[[Tensor, Tensor], Tensor],
    images: Tensor,
    targets: Tensor,
    mean: Tensor,
    std: Tensor,
    steps: int = 10,
    epsilon: float = 14.29,
    step_size: float = 2.86,
) -> tuple[Tensor, Tensor]:
    """:func:`pgd_toward` along ``direction``, with each image's softmax probability of its target
    under ``model`` after each step (the paper's Figure 2 reads the final one).

    Parameters
    ----------
    model : nn.Module
        The model whose probabilities are read, without autograd.
    direction, images, targets, mean, std, steps, epsilon, step_size
        As :func:`pgd_toward` takes them.

    Returns
    -------
    moved : Tensor
        The final normalised images (:func:`pgd_toward`'s).
    target_prob_by_step : Tensor
        (N, steps) on the CPU, in the model's dtype: image i's target probability after each step.
    """
    rows = torch.arange(len(images))
    by_step = []

    def record(z: Tensor) -> None:
        with torch.no_grad():
            by_step.append(model(z).softmax(1)[rows, targets].cpu())

    moved = pgd_toward(direction, images, targets, mean, std, steps, epsilon, step_size, each_step=record)
    return moved, torch.stack(by_step, 1)


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
