"""The stitching layers (full, rank r, G_ReLU by Birkhoff projection or SoftSort, signed
monomial), built by method name, and the dimension of each method's parameter manifold."""

from __future__ import annotations

import math
import numbers

import torch
from torch import nn

from intertwine import groups
from intertwine.stitch_methods import G_RELU_METHODS, parse_method
from intertwine.stitching.matching import (
    channels_by_positions,
    least_squares_map,
    match_grelu,
    match_monomial,
)


def _channel_map(x: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
    """``matrix @ x`` on the channel dimension of (N, C, ...) activations: a 1x1 convolution."""
    return torch.einsum("ij,nj...->ni...", matrix, x)


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
        fitted = W @ channels_by_positions(x)
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
#: Where a Birkhoff layer's P starts (``stitching.grelu_start``) and how SoftSort's P is rounded
#: (``stitching.softsort_rounding``).
GRELU_STARTS = ("centre", "random")
SOFTSORT_ROUNDINGS = ("hungarian", "argmax")

# Under ``init: match``, the fraction of each row of P off the matched permutation at the start.
MATCH_OFF_MASS = 0.01


def _off_permutation_mass(P: torch.Tensor, perm: torch.Tensor) -> float:
    return float(1 - P.gather(1, perm.to(P.device)[:, None]).sum() / P.shape[0])


class GReLUStitch(GReLULayer):
    """``P diag(scales)`` with P doubly stochastic (a permutation once rounded) and scales >= 0.

    P starts near the centre of the Birkhoff polytope (uniform plus a little seeded noise to break
    the symmetry; ``start="centre"``, ours) or at a random doubly stochastic matrix (``start="random"``,
    the released code's start: here Sinkhorn iterations of a matrix of uniform [0, 1) entries), the
    scales at 1. How P moves is ``update``:

    - ``"paper"`` (appendix D.2.1: "after each gradient descent step we project P back onto B by
      the operation P ← ReLU(P) followed by P ← sink(P)"): the optimiser steps P with the scales, then
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
        start: str = "centre",
    ):
        super().__init__()
        if channels < 1:
            raise ValueError(f"a G_ReLU layer needs at least one channel, got {channels}")
        if start not in GRELU_STARTS:
            raise ValueError(f"stitching.grelu_start: {start!r} is not one of {', '.join(GRELU_STARTS)}")
        if update not in PERMUTATION_UPDATES:
            raise ValueError(
                f"stitching.permutation_update: {update!r} is not one of {', '.join(PERMUTATION_UPDATES)}"
            )
        self.update = update
        noise = torch.rand(channels, channels, generator=generator) * init_noise
        self.sinkhorn_iters = sinkhorn_iters
        self.alpha = alpha
        self.step = step
        centre = torch.full((channels, channels), 1 / channels) + noise / channels
        if start == "random":
            centre = torch.rand(channels, channels, generator=generator)
        self.P = nn.Parameter(groups.sinkhorn(centre, sinkhorn_iters))
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
        rounding: str = "hungarian",
    ):
        super().__init__()
        if channels < 1:
            raise ValueError(f"a SoftSort layer needs at least one channel, got {channels}")
        if rounding not in SOFTSORT_ROUNDINGS:
            raise ValueError(
                f"stitching.softsort_rounding: {rounding!r} is not one of {', '.join(SOFTSORT_ROUNDINGS)}"
            )
        self.rounding = rounding
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
    def nearest_permutation(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(P, the permutation it rounds to): the Hungarian algorithm (``rounding="hungarian"``) or
        the argmax over each row (``"argmax"``, the paper's D.2.2: "At validation time, we
        threshold P to an actual permutation matrix by applying arg max over rows as in [PE20]").
        Row i of SoftSort peaks where the score is the i-th largest, so with distinct scores the
        row argmax is the sorting permutation and both agree; tied scores make it no permutation."""
        if self.rounding == "hungarian":
            return super().nearest_permutation()
        P = self.soft_permutation()
        perm = P.argmax(dim=1)
        if len(perm.unique()) != len(perm):
            raise ValueError(
                "stitching.softsort_rounding: argmax: the row argmax of this SoftSort layer's P is not a "
                "permutation (tied scores); use hungarian"
            )
        return P, perm

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


def _check_channels(channels) -> int:
    if isinstance(channels, bool) or not isinstance(channels, numbers.Integral) or channels < 1:
        raise ValueError(
            f"a stitching layer needs channels >= 1 (the site's channel count, "
            f"models.Site.channels), got {channels!r}"
        )
    return int(channels)


def method_dimension(method: str, channels: int) -> int:
    """Dimension of the layer's parameter manifold: C^2 (full, L1), 2Cr - r^2 (rank r, r <= C),
    C (the G_ReLU layers: the scales; the permutation is discrete).

    Parameters
    ----------
    method : str
        A stitching method (``stitch_methods.parse_method``): "full", "rank<r>", "l1_<lambda>",
        "grelu", "grelu_cv", "softsort" or "monomial".
    channels : int
        The site's channel count C, at least 1.

    Returns
    -------
    int
        The dimension.
    """
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
    softsort_rounding: str = "hungarian",
    grelu_start: str = "centre",
) -> nn.Module:
    """A fresh stitching layer of ``method`` for ``channels`` channels (grelu_cv builds one
    G_ReLU layer per alpha; this is the layer at ``alpha``). ``channels`` must be at least 1; a
    rank above it gives a layer of full rank.

    Parameters
    ----------
    method : str
        A stitching method (``stitch_methods.parse_method``): "full", "rank<r>", "l1_<lambda>",
        "grelu", "grelu_cv", "softsort" or "monomial".
    channels : int
        The site's channel count C.
    generator : torch.Generator or None, default None
        The source of the layer's random start (None: torch's global RNG).
    sinkhorn_iters : int, default 16
        Sinkhorn iterations per projection of P (grelu, grelu_cv, monomial).
    alpha : float, default 0.1
        The weight of the ``-alpha ||P||_F`` regularizer (grelu, grelu_cv, monomial).
    softsort_tau : float or None, default None
        SoftSort's temperature (None or 0: 1/C).
    permutation_step : float, default 0.1
        The size of P's mirror-descent step (``permutation_update="mirror"``).
    softsort_hardening : float, default 1.0
        The factor SoftSort's temperature falls by over training (1: fixed).
    permutation_update : str, default "paper"
        How the Birkhoff layer's P moves: "paper" or "mirror" (``GReLUStitch``).
    softsort_rounding : str, default "hungarian"
        How SoftSort's P is rounded: "hungarian" or "argmax" over rows (``SoftSortStitch``).
    grelu_start : str, default "centre"
        Where the Birkhoff layer's P starts: "centre" or "random" (``GReLUStitch``).

    Returns
    -------
    nn.Module
        A ``FullStitch`` (full, l1), ``RankStitch`` (rank), ``SoftSortStitch``, ``MonomialStitch``
        or ``GReLUStitch`` (grelu, grelu_cv).
    """
    kind, param = parse_method(method)
    channels = _check_channels(channels)
    if kind in ("full", "l1"):
        return FullStitch(channels, generator, l1_lambda=param or 0.0)
    if kind == "rank":
        return RankStitch(channels, min(param, channels), generator)
    if kind == "softsort":
        return SoftSortStitch(channels, generator, softsort_tau, softsort_hardening, softsort_rounding)
    birkhoff = MonomialStitch if kind == "monomial" else GReLUStitch
    return birkhoff(
        channels,
        generator,
        sinkhorn_iters,
        alpha,
        permutation_step,
        update=permutation_update,
        start=grelu_start,
    )


def sparsity(matrix: torch.Tensor, tolerance: float = 1e-3) -> float:
    """The fraction of entries with ``|W_ij| <= tolerance`` (the paper's D.6; a scaled permutation
    of n channels has 1 - 1/n).

    Parameters
    ----------
    matrix : Tensor
        The layer's matrix (detached first).
    tolerance : float, default 1e-3
        Entries of absolute value at most this count as zero.

    Returns
    -------
    float
        The fraction, in [0, 1].
    """
    return float((matrix.detach().abs() <= tolerance).double().mean())
