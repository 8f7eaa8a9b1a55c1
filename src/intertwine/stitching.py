"""Model stitching (paper section 4, appendix D.2): how well do two networks' representations at a
site match up to a class of stitching layers?

The stitched network ``S(f, g, l, phi) = g_{>l} ∘ phi ∘ f_{<=l}`` runs model f up to the activation
at site l, maps the channels there by a 1x1 convolution phi (no bias, no BN), and runs model g
from there on. f and g stay frozen; only phi trains. The penalty is
``(acc f + acc g) / 2 - acc S`` on the test set. Layers:

- ``full``: any C x C matrix.
- ``rank``: C -> r -> C, rank at most r (a manifold of dimension 2Cr - r^2).
- ``grelu``: an element P D of the intertwiner group of ReLU (dimension C: the scales). P is kept
  on the Birkhoff polytope of doubly stochastic matrices by projected gradient descent (ReLU and
  Sinkhorn after each step, a -alpha ||P||_F term pulling it toward a vertex), D >= 0 by ReLU, D
  held at I for the first part of training. At evaluation P is rounded to the nearest
  permutation (Hungarian algorithm).

The appendix's variations (D.2.2, D.5, D.6), each a method of its own:

- ``softsort``: the same group, P parameterised by SoftSort (a row-stochastic relaxation of
  the permutation sorting a score vector; temperature tau, 1/C by default) and D = diag(exp(lambda)).
  Rounded by the Hungarian algorithm too: a row argmax of P need not be a permutation.
- ``monomial``: P D with D of either sign, the group of a gated network's value units
  (:mod:`intertwine.models.gated`); trained as ``grelu``, matched by ``match_monomial``.
- ``grelu_cv``: the G_ReLU layer with alpha chosen by cross-validation: one short run per alpha of
  ``alpha_grid`` on a random 80 % of the training images, scored on the disjoint 20 % (not
  augmented); the best alpha's layer, its learned scales in place, is the one measured.
- ``l1_<lambda>`` (e.g. ``l1_0.01``): the full layer with ``lambda * sum |W_ij|`` added to the loss;
  its sparsity (the fraction of ``|W_ij| <= 1e-3``) is recorded for every method.

``init: random`` starts each layer as the paper does (Kaiming-uniform matrices; P at the centre of
the polytope, D = I). ``init: match`` (our addition) starts it from the layer of its class that
best maps f's activations onto g's on a few training images: least squares (full), reduced-rank
regression (rank r), the Hungarian match of normalised channels with least-squares scales
(G_ReLU, ``match_grelu``). Same layer classes, same training; far fewer steps to a good layer.

Before measuring, one no-gradient pass over the training data refreshes g's batch-norm running
statistics for the final layer (the paper does this after rounding the G_ReLU layer; we do it for
every method so that no method is measured with statistics that lag behind its layer).
"""

from __future__ import annotations

import copy
import math
import numbers
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable

import torch
from torch import nn

from intertwine import groups, models
from intertwine.data import Split
from intertwine.data.augment import augment, normalize
from intertwine.stitch_methods import G_RELU_METHODS, parse_method
from intertwine.training import evaluate
from intertwine.utils import derive_seed

if TYPE_CHECKING:
    from intertwine.settings import StitchConfig

__all__ = [
    "FullStitch",
    "RankStitch",
    "GReLULayer",
    "MonomialStitch",
    "match_monomial",
    "GReLUStitch",
    "SoftSortStitch",
    "build_layer",
    "method_dimension",
    "sparsity",
    "cv_split",
    "match_grelu",
    "stitch",
    "fit",
    "select_alpha",
    "refresh_batch_norm",
    "stitch_site",
]


def _channel_map(x: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
    """``matrix @ x`` on the channel dimension of (N, C, ...) activations: a 1x1 convolution."""
    return torch.einsum("ij,nj...->ni...", matrix, x)


def _channels_by_positions(x: torch.Tensor) -> torch.Tensor:
    """(N, C, ...) activations as a (C, N * positions) float64 matrix."""
    return x.transpose(0, 1).reshape(x.shape[1], -1).double()


def least_squares_map(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The C x C matrix W minimising ||W x - y||^2 over every sample and position (a tiny ridge,
    1e-6 of the mean channel energy, keeps dead channels from making it singular)."""
    X, Y = _channels_by_positions(x), _channels_by_positions(y)
    gram = X @ X.T
    ridge = 1e-6 * gram.trace() / len(gram) + 1e-12
    return torch.linalg.solve(
        gram + ridge * torch.eye(len(gram), dtype=gram.dtype, device=gram.device), X @ Y.T
    ).T


class FullStitch(nn.Module):
    """Any linear map of the channels. Initialised like a 1x1 ``nn.Conv2d`` (Kaiming uniform).
    With ``l1_lambda`` > 0 training adds ``l1_lambda * sum |W_ij|`` to the loss (appendix D.6)."""

    def __init__(self, channels: int, generator: torch.Generator | None = None, l1_lambda: float = 0.0):
        super().__init__()
        bound = 1 / math.sqrt(channels)
        self.weight = nn.Parameter((torch.rand(channels, channels, generator=generator) * 2 - 1) * bound)
        self.l1_lambda = l1_lambda

    def matrix(self) -> torch.Tensor:
        return self.weight

    def regularizer(self) -> torch.Tensor | None:
        return self.l1_lambda * self.weight.abs().sum() if self.l1_lambda else None

    @torch.no_grad()
    def match(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """Start from the least-squares map of activations x onto y."""
        self.weight.copy_(least_squares_map(x, y))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _channel_map(x, self.matrix())


class RankStitch(nn.Module):
    """C -> r -> C: a linear map of rank at most r."""

    def __init__(self, channels: int, rank: int, generator: torch.Generator | None = None):
        super().__init__()
        if not 1 <= rank <= channels:
            raise ValueError(f"stitching rank {rank} must lie between 1 and the {channels} channels")
        self.down = nn.Parameter(
            (torch.rand(rank, channels, generator=generator) * 2 - 1) / math.sqrt(channels)
        )
        self.up = nn.Parameter((torch.rand(channels, rank, generator=generator) * 2 - 1) / math.sqrt(rank))

    def matrix(self) -> torch.Tensor:
        return self.up @ self.down

    def regularizer(self) -> None:
        return None

    @torch.no_grad()
    def match(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """Start from the reduced-rank regression of y on x: the least-squares map projected onto
        the top principal directions of its fitted values."""
        W = least_squares_map(x, y)
        fitted = W @ _channels_by_positions(x)
        directions = torch.linalg.eigh(fitted @ fitted.T).eigenvectors[:, -self.down.shape[0] :]
        self.up.copy_(directions)
        self.down.copy_(directions.T @ W)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _channel_map(_channel_map(x, self.down), self.up)


class GReLULayer(nn.Module):
    """What the two layers in the intertwiner group of ReLU share: ``P diag(d)`` with P a soft
    permutation (``soft_permutation()``) and d >= 0 the column scales (``column_scales()``),
    rounded before evaluation to the permutation nearest P (Hungarian algorithm). Subclasses
    give the parameterisation: ``GReLUStitch`` (P on the Birkhoff polytope) and
    ``SoftSortStitch`` (P by SoftSort). ``isinstance(layer, GReLULayer)`` means "either".
    """

    def __init__(self):
        super().__init__()
        self.register_buffer("permutation", torch.empty(0, dtype=torch.long))  # set by round()
        self._nearest: tuple[torch.Tensor, torch.Tensor] | None = None  # (P, its nearest permutation)

    def soft_permutation(self) -> torch.Tensor:
        raise NotImplementedError

    def column_scales(self) -> torch.Tensor:
        raise NotImplementedError

    def scale_parameter(self) -> nn.Parameter:
        """The parameter of D, held fixed for the first ``scales_frozen_fraction`` of training."""
        raise NotImplementedError

    def regularizer(self) -> torch.Tensor | None:
        return None

    def optimized_parameters(self) -> list[nn.Parameter]:
        """The parameters the optimiser steps (all by default; ``GReLUStitch`` steps P itself)."""
        return list(self.parameters())

    def anneal(self, progress: float) -> None:
        """Told the fraction of training done (0 to 1) before each step (nothing by default)."""

    def project(self) -> None:
        """Back onto the constraint set after an optimiser step (nothing to do by default)."""

    def start_at(self, perm: torch.Tensor, output_scales: torch.Tensor) -> None:
        """Start from the G_ReLU element ``diag(output_scales) Q`` (``Q[i, perm[i]] = 1``)."""
        raise NotImplementedError

    @property
    def rounded(self) -> bool:
        return self.permutation.numel() > 0

    def matrix(self) -> torch.Tensor:
        scales = self.column_scales()
        P = (
            groups.permutation_matrix(self.permutation).to(scales)
            if self.rounded
            else self.soft_permutation()
        )
        return P * scales  # P @ diag(scales)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _channel_map(x, self.matrix())

    def match(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """Start from the G_ReLU element that best maps activations x onto y (``match_grelu``)."""
        self.start_at(*match_grelu(x, y))

    @torch.no_grad()
    def nearest_permutation(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(P, the permutation closest to P): the Hungarian algorithm on tr(P Qᵀ), run once per
        value of P, so ``off_permutation_mass()`` and ``round()`` in turn share one run."""
        P = self.soft_permutation()
        cached = self._nearest
        if cached is None or not (
            cached[0].shape == P.shape
            and cached[0].dtype == P.dtype
            and cached[0].device == P.device
            and torch.equal(cached[0], P)
        ):
            cached = self._nearest = (P.detach().clone(), groups.round_to_permutation(P))
        return P, cached[1]

    @torch.no_grad()
    def round(self) -> float:
        """Replace P by the permutation closest to it (Hungarian algorithm on tr(P Qᵀ)); returns
        how far P was from it (``off_permutation_mass()`` before rounding)."""
        P, perm = self.nearest_permutation()
        self.permutation = perm.to(self.permutation.device, copy=True)
        return _off_permutation_mass(P, perm)

    @torch.no_grad()
    def off_permutation_mass(self) -> float:
        """How far P was from the permutation it rounds to: the fraction of P's mass (which is n)
        outside that permutation's entries; 0 exactly when P is that permutation."""
        return _off_permutation_mass(*self.nearest_permutation())

    def rounded_layer(self) -> tuple[list[int], list[float]]:
        """The rounded layer as the element diag(scales) Q of intertwine.groups (Q[i, perm[i]] = 1):
        (perm, scales), what the table stores."""
        return self.permutation.tolist(), self.column_scales().detach()[self.permutation].cpu().tolist()


#: How the Birkhoff G_ReLU layer's P moves (``stitching.permutation_update``; ``GReLUStitch``).
PERMUTATION_UPDATES = ("paper", "mirror")

# Under ``init: match``, the fraction of each row of P off the matched permutation at the start.
MATCH_OFF_MASS = 0.01


def _off_permutation_mass(P: torch.Tensor, perm: torch.Tensor) -> float:
    return float(1 - P.gather(1, perm.to(P.device)[:, None]).sum() / P.shape[0])


class GReLUStitch(GReLULayer):
    """``P diag(scales)`` with P doubly stochastic (a permutation once rounded) and scales >= 0.

    P starts near the centre of the Birkhoff polytope (uniform plus a little seeded noise to break
    the symmetry), the scales at 1. How P moves is ``update``:

    - ``"paper"`` (appendix D.2.1: "after each gradient descent step we project P back onto B by
      P <- ReLU(P) followed by P <- sink(P)"): the optimiser steps P with the scales, then
      ``project()`` applies ReLU and Sinkhorn.
    - ``"mirror"`` (ours): the optimiser steps the scales only; P takes a mirror-descent step of
      its own (``step_permutation``): ``P <- Sinkhorn(P * exp(-step * grad / max|grad|))``.

    A multiplicative step is the natural one on the polytope: its size is relative to each entry,
    so an entry near 0 stays near 0 unless the gradient keeps favouring it, and the iterates
    approach a vertex instead of diffusing to the centre, as additive steps of a fixed size (Adam's,
    about ``lr`` per entry whatever the gradient) do once ReLU and Sinkhorn turn them into
    noise. Normalising by the largest gradient entry makes the step independent of the loss's
    scale and of the optimiser chosen for the rest. Call ``project()`` after every optimiser step
    and ``round()`` before evaluation.
    """

    def __init__(
        self,
        channels: int,
        generator: torch.Generator | None = None,
        sinkhorn_iters: int = 16,
        alpha: float = 0.1,
        step: float = 0.1,
        init_noise: float = 0.01,
        update: str = "paper",
    ):
        super().__init__()
        if channels < 1:
            raise ValueError(f"a G_ReLU layer needs at least one channel, got {channels}")
        if update not in PERMUTATION_UPDATES:
            raise ValueError(
                f"stitching.permutation_update: {update!r} is not one of {', '.join(PERMUTATION_UPDATES)}"
            )
        self.update = update
        noise = torch.rand(channels, channels, generator=generator) * init_noise
        self.sinkhorn_iters = sinkhorn_iters
        self.alpha = alpha
        self.step = step
        self.P = nn.Parameter(
            groups.sinkhorn(torch.full((channels, channels), 1 / channels) + noise / channels, sinkhorn_iters)
        )
        self.scales = nn.Parameter(torch.ones(channels))

    def soft_permutation(self) -> torch.Tensor:
        return self.P

    def column_scales(self) -> torch.Tensor:
        return self.scales

    def scale_parameter(self) -> nn.Parameter:
        return self.scales

    def optimized_parameters(self) -> list[nn.Parameter]:
        return [self.P, self.scales] if self.update == "paper" else [self.scales]

    def regularizer(self) -> torch.Tensor | None:
        """``-alpha ||P||_F``: largest at the vertices of the polytope (the permutations)."""
        return -self.alpha * self.P.norm() if self.alpha else None

    @torch.no_grad()
    def start_at(self, perm: torch.Tensor, output_scales: torch.Tensor) -> None:
        """Start from the G_ReLU element ``diag(output_scales) Q`` (``Q[i, perm[i]] = 1``)
        instead of the centre of the polytope: P is Q with ``MATCH_OFF_MASS`` of each row's mass
        spread over the other entries, so that training can still move it (a multiplicative step
        never moves an entry that is exactly 0)."""
        n = len(perm)
        Q = groups.permutation_matrix(perm).to(self.P)
        self.P.copy_((1 - MATCH_OFF_MASS) * Q + MATCH_OFF_MASS / n if n > 1 else Q)
        self.scales.zero_().index_copy_(0, perm.to(self.scales.device), output_scales.to(self.scales))

    @torch.no_grad()
    def step_permutation(self) -> None:
        """P back onto the polytope after the last backward (see the class): ``paper``, the
        optimiser has stepped it and ReLU and Sinkhorn project it; ``mirror``, its own
        multiplicative step from its gradient, then Sinkhorn."""
        if self.update == "paper":
            self.P.copy_(groups.sinkhorn(self.P, self.sinkhorn_iters))  # ReLU, then Sinkhorn
            return
        grad, self.P.grad = self.P.grad, None
        if grad is not None and self.step:
            largest = grad.abs().max()
            if largest > 0:
                self.P.mul_(torch.exp(-self.step * grad / largest))
        self.P.copy_(groups.sinkhorn(self.P, self.sinkhorn_iters))

    @torch.no_grad()
    def project(self) -> None:
        """Back onto the constraint set: P by its own step (``step_permutation``), scales >= 0."""
        self.step_permutation()
        self.scales.clamp_(min=0)


class MonomialStitch(GReLUStitch):
    """``P diag(scales)`` with scales of any sign: a signed monomial layer, the group of a gated
    network's value units (``G * (D q) = D (G * q)`` for every diagonal D). Trained as
    ``GReLUStitch``, without the scales' projection onto D >= 0; matched by ``match_monomial``."""

    @torch.no_grad()
    def project(self) -> None:
        self.step_permutation()

    def match(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.start_at(*match_monomial(x, y))


class SoftSortStitch(GReLULayer):
    """The G_ReLU layer parameterised by SoftSort (Prillo & Eisenschlos 2020; the paper's D.2.2):
    ``P = softmax_rows(-|sort(s) 1ᵀ - 1 sᵀ| / tau)`` for a score vector s (sorted descending, so row
    i puts its mass on the input of the i-th largest score) and ``D = diag(exp(lambda))``. P is
    row-stochastic by construction and tends to a permutation as tau -> 0; no projection is needed.
    Scores start uniform in [0, 1), so tau = 1/C (the default) makes neighbours in the sort share
    mass; lambda starts at 0 (D = I).

    At a fixed tau, P stays as soft as its scores' spacing allows (about half its mass off the
    permutation at spacing tau), and rounding it at the end throws that away. So training can harden
    it (ours, ``hardening=0.1``): the temperature falls geometrically from tau to ``hardening * tau``
    (``anneal``), and the layer trained last is nearly the permutation it rounds to.
    ``hardening=1``, the default, keeps tau fixed as the paper does.
    """

    def __init__(
        self,
        channels: int,
        generator: torch.Generator | None = None,
        tau: float | None = None,
        hardening: float = 1.0,
    ):
        super().__init__()
        if channels < 1:
            raise ValueError(f"a SoftSort layer needs at least one channel, got {channels}")
        self.tau = tau if tau else 1 / channels
        self.hardening = hardening
        self.temperature = self.tau
        self.scores = nn.Parameter(torch.rand(channels, generator=generator))
        self.log_scales = nn.Parameter(torch.zeros(channels))

    def anneal(self, progress: float) -> None:
        self.temperature = self.tau * self.hardening ** min(max(progress, 0.0), 1.0)

    def scale_parameter(self) -> nn.Parameter:
        return self.log_scales

    def soft_permutation(self) -> torch.Tensor:
        ordered = self.scores.sort(descending=True).values
        return torch.softmax(-(ordered[:, None] - self.scores[None, :]).abs() / self.temperature, dim=1)

    def column_scales(self) -> torch.Tensor:
        return self.log_scales.exp()

    @torch.no_grad()
    def start_at(self, perm: torch.Tensor, output_scales: torch.Tensor) -> None:
        """Scores that sort into ``perm`` (input perm[i] gets the i-th largest score, spaced 1/C
        as the random start is) and log scales of ``output_scales`` (zero scales become 1e-6)."""
        n = len(perm)
        perm = perm.to(self.scores.device)
        self.scores.index_copy_(
            0, perm, torch.arange(n, 0, -1, dtype=self.scores.dtype, device=perm.device) / n
        )
        self.log_scales.index_copy_(0, perm, output_scales.to(self.log_scales).clamp_min(1e-6).log())


def match_grelu(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The G_ReLU element that best maps activations ``x`` onto ``y`` (both (N, C, ...)): for each
    output channel i the input channel perm[i] of highest normalised correlation, one to one
    (Hungarian algorithm), then the least-squares nonnegative scale. Exact when y = A x for A in
    G_ReLU and x has no two proportional channels. Returns (perm, scales): y_i ≈ scales[i] x_perm[i].

    Computed in float64; the scales come back in x's floating dtype (the default dtype for integer
    activations). x and y must have one shape with N >= 1 and C >= 1, and finite values.
    """
    _check_activations(x, y, "match_grelu")
    xs = x.transpose(0, 1).reshape(x.shape[1], -1).double()
    ys = y.transpose(0, 1).reshape(y.shape[1], -1).double()
    x_norm, y_norm = xs.norm(dim=1).clamp_min(1e-12), ys.norm(dim=1).clamp_min(1e-12)
    correlation = (ys @ xs.T) / (y_norm[:, None] * x_norm[None, :])  # (out, in)
    perm = groups.round_to_permutation(correlation).to(x.device)
    scales = ((ys * xs[perm]).sum(1) / x_norm[perm] ** 2).clamp_min(0)
    return perm, scales.to(x.dtype if x.is_floating_point() else torch.get_default_dtype())


def match_monomial(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """As ``match_grelu`` for a signed monomial layer: channels matched by the absolute normalised
    correlation, then the least-squares scale of either sign. Exact when y = A x for a signed
    monomial A and x has no two proportional channels."""
    _check_activations(x, y, "match_monomial")
    xs = x.transpose(0, 1).reshape(x.shape[1], -1).double()
    ys = y.transpose(0, 1).reshape(y.shape[1], -1).double()
    x_norm, y_norm = xs.norm(dim=1).clamp_min(1e-12), ys.norm(dim=1).clamp_min(1e-12)
    correlation = (ys @ xs.T).abs() / (y_norm[:, None] * x_norm[None, :])
    perm = groups.round_to_permutation(correlation).to(x.device)
    scales = (ys * xs[perm]).sum(1) / x_norm[perm] ** 2
    return perm, scales.to(x.dtype if x.is_floating_point() else torch.get_default_dtype())


def _check_activations(x: torch.Tensor, y: torch.Tensor, what: str) -> None:
    """Paired activations f -> g at one site: tensors of one shape (N, C, ...), N >= 1 and
    C >= 1, real and finite."""
    for name, t in (("x", x), ("y", y)):
        if not isinstance(t, torch.Tensor) or t.ndim < 2 or t.is_complex() or t.dtype == torch.bool:
            raise ValueError(
                f"{what}: {name} must be a real tensor of activations (N, C, ...), got "
                f"{type(t).__name__ if not isinstance(t, torch.Tensor) else (t.dtype, tuple(t.shape))}"
            )
    if x.shape != y.shape:
        raise ValueError(
            f"{what}: x and y must be activations of the same N inputs at one site, of one "
            f"shape (N, C, ...), got {tuple(x.shape)} and {tuple(y.shape)}"
        )
    if x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(
            f"{what}: needs at least one sample and one channel, got shape {tuple(x.shape)} "
            "(e.g. stitching.match_images is 0, or the training split is empty)"
        )
    for name, t in (("x", x), ("y", y)):
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise ValueError(f"{what}: {name} contains NaN or infinite values")


def _check_channels(channels) -> int:
    if isinstance(channels, bool) or not isinstance(channels, numbers.Integral) or channels < 1:
        raise ValueError(
            f"a stitching layer needs channels >= 1 (the site's channel count, "
            f"models.Site.channels), got {channels!r}"
        )
    return int(channels)


def method_dimension(method: str, channels: int) -> int:
    """Dimension of the layer's parameter manifold: C^2 (full, L1), 2Cr - r^2 (rank r, r <= C),
    C (the G_ReLU layers: the scales; the permutation is discrete)."""
    kind, rank = parse_method(method)
    channels = _check_channels(channels)
    if kind in ("full", "l1"):
        return channels * channels
    if kind in G_RELU_METHODS:
        return channels
    r = min(rank, channels)
    return 2 * channels * r - r * r


def build_layer(
    method: str,
    channels: int,
    generator: torch.Generator | None = None,
    sinkhorn_iters: int = 16,
    alpha: float = 0.1,
    softsort_tau: float | None = None,
    permutation_step: float = 0.1,
    softsort_hardening: float = 1.0,
    permutation_update: str = "paper",
) -> nn.Module:
    """A fresh stitching layer of ``method`` for ``channels`` channels (grelu_cv builds one
    G_ReLU layer per alpha; this is the layer at ``alpha``). ``channels`` must be at least 1; a
    rank above it gives a layer of full rank."""
    kind, param = parse_method(method)
    channels = _check_channels(channels)
    if kind in ("full", "l1"):
        return FullStitch(channels, generator, l1_lambda=param or 0.0)
    if kind == "rank":
        return RankStitch(channels, min(param, channels), generator)
    if kind == "softsort":
        return SoftSortStitch(channels, generator, softsort_tau, softsort_hardening)
    if kind == "monomial":
        return MonomialStitch(
            channels, generator, sinkhorn_iters, alpha, permutation_step, update=permutation_update
        )
    return GReLUStitch(
        channels, generator, sinkhorn_iters, alpha, permutation_step, update=permutation_update
    )


def sparsity(matrix: torch.Tensor, tolerance: float = 1e-3) -> float:
    """The fraction of entries with ``|W_ij| <= tolerance`` (the paper's D.6; a scaled permutation
    of n channels has 1 - 1/n)."""
    return float((matrix.detach().abs() <= tolerance).double().mean())


def cv_split(n: int, held_out: float, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Disjoint (fit, held-out) index sets covering ``range(n)``: a random ``held_out`` fraction
    (at least one image) is held out."""
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
    is an error naming both (``models.Stitched``)."""
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
    layer's P as ``stitching.permutation_update`` says), and its scales stay at their initial values (1, or
    matched) for the first ``scales_frozen_fraction`` of the epochs.
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
    (the first of equal scores) in ``stitched.bridge`` and returns what the table records."""
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
    the per-batch statistics (batch norm's cumulative mode), not a momentum-weighted one."""
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

    With ``accuracy`` (a stitched network -> its test accuracy), the layer before training is
    measured too (``acc_start``: rounded, batch norm refreshed), so a table shows what training
    added. Returns the stitched network, ready to evaluate, and its layer's columns of the table.
    """
    kind = parse_method(method)[0]
    device = train_split.images.device
    init_generator = torch.Generator().manual_seed(derive_seed(*key, "init"))
    start = init_generator.get_state()  # every alpha of grelu_cv starts from the same layer
    matched = None
    if config.init == "match":
        images = train_split.images[: config.match_images]
        matched = [
            models.site_activations(model, images, [site.name], mean, std, len(images))[site.name]
            for model in (f, g)
        ]

    def make_layer(alpha: float = config.alpha) -> nn.Module:
        init_generator.set_state(start)
        layer = build_layer(
            method,
            site.channels,
            init_generator,
            config.sinkhorn_iters,
            alpha,
            config.softsort_tau,
            config.permutation_step,
            config.softsort_hardening,
            config.permutation_update,
        ).to(device)
        if matched is not None:
            layer.match(*matched)
        return layer

    stitched = stitch(f, copy.deepcopy(g), site.name, make_layer())
    columns = {
        "alpha": config.alpha if kind == "grelu" else None,
        "alpha_selected": None,
        "cv_alphas": None,
        "cv_accuracies": None,
        "acc_start": None,
    }
    if accuracy is not None:  # the layer before training, measured as the trained one will be
        before = stitch(
            f, copy.deepcopy(stitched.back), site.name, copy.deepcopy(stitched.bridge)
        )  # f is shared
        if isinstance(before.bridge, GReLULayer):
            before.bridge.round()
        if refreshes_batch_norm(before.bridge, config):
            refresh_batch_norm(before, train_split, mean, std, config.eval_batch_size)
        columns["acc_start"] = accuracy(before)
        del before
    batches = torch.Generator(device=device).manual_seed(derive_seed(*key, "batches"))
    columns |= {
        "permutation": None,
        "scales": None,
        "off_permutation_mass": None,
        "off_permutation_mass_by_epoch": None,
    }
    if kind == "grelu_cv":
        chosen = select_alpha(make_layer, stitched, train_split, config, batches, mean, std, label, log)
        seconds = chosen.pop("seconds")
        columns |= chosen | {"alpha": chosen["alpha_selected"]}
    else:
        run = fit(stitched, train_split, config, batches, mean, std, label, log)
        seconds = run.seconds
        if run.off_permutation_mass:
            columns["off_permutation_mass_by_epoch"] = run.off_permutation_mass
    layer = stitched.bridge
    if isinstance(layer, GReLULayer):
        if not layer.rounded:
            columns["off_permutation_mass"] = layer.round()
        columns["permutation"], columns["scales"] = layer.rounded_layer()
    if refreshes_batch_norm(layer, config):
        refresh_batch_norm(stitched, train_split, mean, std, config.eval_batch_size)
    return stitched, columns | {
        "train_seconds": seconds,
        "sparsity": sparsity(layer.matrix()),
        "trainable_params": sum(p.numel() for p in layer.parameters()),
    }
