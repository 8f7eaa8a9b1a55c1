"""Aligning a whole network g to a network f of the same architecture by its intertwiner groups.

One group element per activation site, applied through :func:`intertwine.symmetry.act_on_weights`,
so the aligned g computes exactly the function g computes. Two ways to find the elements:

* :func:`activation_matching`: per site, the element that maps g's activations on probe images
  closest to f's (least squares; the Hungarian assignment over channels), as in Ainsworth,
  Hayase & Srinivasa ("Git Re-Basin", ICLR 2023);
* :func:`weight_matching`: Ainsworth et al.'s coordinate descent (as their published weight_matching):
  one site's element at a time, the others fixed, minimising the squared distance between f's
  parameters and the aligned g's, which for one site is a linear assignment problem; sweeps in a
  random order until a sweep changes nothing.

Each for the group ``"permutation"`` or ``"grelu"`` (permutations and positive per-channel scales).

Sites are not free: a residual stream's sites carry one element (identity shortcut), an option-A
shortcut carries the previous stream's element on its middle channels, and a gated network's value
site carries the permutation of the feature site gating it (Remark 3.6; ``intertwine.symmetry``).
The free parameters are therefore **variables**: a permutation of ``size`` coordinates, each
coordinate a channel at every site the variable reaches (:func:`alignment_variables`). Scales are
tied wherever elements are (a stream's sites share them), except across a gate: a value site and
its feature site share the permutation only, and a soft gate's feature site keeps scales 1
(``sigmoid(beta q)`` is not scale-invariant). Where the activation is not positively homogeneous
(GELU) the scales stay 1 too.

What the scales do with batch norm: a G_ReLU element scales the BN's weight and bias (its running
statistics only permute), and divides the next layer's input weights; weight matching chooses each
channel's scale to bring both sides closest to f's, activation matching to bring the activations
closest.

Arrays in, elements out: no file I/O here (the stage's job is ``intertwine.workflow.stages.connectivity.job``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor, nn

from . import models
from .models.gated import GateActivation
from .symmetry import act_on_weights
from .symmetry import model_wiring as wiring  # the sites, their producers, consumers and ties

__all__ = [
    "ALIGNMENT_GROUPS",
    "Alignment",
    "Variable",
    "activation_matching",
    "alignment_variables",
    "parameter_distance",
    "weight_matching",
]

ALIGNMENT_GROUPS = ("permutation", "grelu")

# Activations with sigma(d x) = d sigma(x) for d > 0: G_ReLU scales are symmetries of them.
_HOMOGENEOUS = (nn.ReLU, nn.LeakyReLU, nn.Identity, GateActivation)

# Weight matching searches each scale on this log-spaced grid, then refines it by Newton steps.
_SCALE_GRID = torch.logspace(-3, 3, 121, dtype=torch.float64)


@dataclass(frozen=True)
class Variable:
    """A free permutation of ``size`` coordinates; coordinate a is channel ``at[site][a]`` of every
    site in ``at``. ``scale_class[site]`` names the sites sharing that site's scales (its stream's
    first site), None where the scales must stay 1."""

    size: int
    at: Mapping[str, Tensor]
    scale_class: Mapping[str, str | None]


@dataclass
class Alignment:
    """The elements that align g to f, site -> ``(perm, scales)`` (``act_on_weights``' convention:
    the aligned g's channel i is ``scales[i]`` times g's channel ``perm[i]``), and for weight matching
    the squared parameter distance after every variable's step (``objective``, first the start)."""

    elements: dict[str, tuple[Tensor, Tensor]]
    objective: list[float] = field(default_factory=list)
    sweeps: int = 0

    def apply(self, g: nn.Module) -> nn.Module:
        """The aligned copy of ``g`` (the same function; ``g`` is untouched)."""
        return act_on_weights(g, self.elements)


def alignment_variables(model: nn.Module, group: str = "grelu") -> list[Variable]:
    """The free permutations of ``model``'s sites under the skip-connection and gate ties.

    Parameters
    ----------
    model : a zoo model with an intertwiner action (``intertwine.symmetry.ARCHS``, gated included).
    group : "permutation" (every scale class None) or "grelu".

    Returns
    -------
    The variables in forward order of their first site.
    """
    _check_group(group)
    wired = wiring(model)
    variables: list[dict] = []
    touching: dict[str, list[tuple[int, Tensor]]] = {}  # site -> (variable, channels)
    stream_of: dict[str, str] = {}
    for site in wired.sites:
        link, gate = wired.links.get(site.name), wired.gated_by.get(site.name)
        stream_of[site.name] = stream_of[link.source] if link else site.name
        touching[site.name] = []
        if link is None and gate is None:
            variables.append({site.name: torch.arange(site.channels)})
            touching[site.name].append((len(variables) - 1, torch.arange(site.channels)))
            continue
        source = link.source if link else gate
        shift = link.pad_before if link is not None and link.kind == "zeropad" else 0
        for index, channels in touching[source]:
            variables[index][site.name] = channels + shift
            touching[site.name].append((index, channels + shift))
        if link is not None and link.kind == "zeropad":
            n_in = next(s.channels for s in wired.sites if s.name == link.source)
            padded = torch.cat(
                [torch.arange(link.pad_before), torch.arange(link.pad_before + n_in, site.channels)]
            )
            if padded.numel():
                variables.append({site.name: padded})
                touching[site.name].append((len(variables) - 1, padded))

    def scale_class(site: str) -> str | None:
        act = model.get_submodule(site)
        soft_gate = site in wired.gated_by.values() and not getattr(model, "hard", True)
        if group == "permutation" or soft_gate or not isinstance(act, _HOMOGENEOUS):
            return None
        if any(not getattr(model.get_submodule(norm), "affine", True) for _, norm in wired.producers[site]):
            return None  # a BN without weight and bias has nowhere to put a scale
        return stream_of[site]

    return [
        Variable(
            len(next(iter(at.values()))),
            dict(at),
            {site: scale_class(site) for site in at},
        )
        for at in variables
    ]


def parameter_distance(f: nn.Module, g: nn.Module, fold_batch_norm: bool = False, *, wired=None) -> float:
    """The squared Euclidean distance between two models' parameters (not their buffers); with
    ``fold_batch_norm``, each conv and the batch norm after it count as their folded affine map
    (weight and bias per channel, from the running statistics) instead of their four parameters.
    ``wired``: the architecture's wiring (``symmetry``'s, which pairs each conv with its batch
    norm), when the caller has it already: weight matching measures the distance at every step.

    Parameters
    ----------
    f, g : nn.Module
        Two models of one architecture (their parameters are paired in order).
    fold_batch_norm : bool
        Compare each conv and its batch norm as one folded affine map.
    wired : object, optional
        The architecture's wiring, used with ``fold_batch_norm``; None (the default): g's, computed here.

    Returns
    -------
    float
        The squared distance, summed in float64.
    """
    if fold_batch_norm:
        return _folded_distance(f, g, wired or wiring(g))
    with torch.no_grad():
        return float(
            sum(
                (a.detach().double() - b.detach().double()).pow(2).sum()
                for a, b in zip(f.parameters(), g.parameters(), strict=True)
            )
        )


def _folded_distance(f: nn.Module, g: nn.Module, wired) -> float:
    covered, total = set(), 0.0
    for producers in wired.producers.values():
        for conv, norm in producers:
            if isinstance(g.get_submodule(norm), nn.modules.batchnorm._BatchNorm):
                for a, b in zip(
                    _folded(f.get_submodule(conv), f.get_submodule(norm)),
                    _folded(g.get_submodule(conv), g.get_submodule(norm)),
                ):
                    total += float((a - b).pow(2).sum())
                covered |= {f"{conv}.weight", f"{conv}.bias", f"{norm}.weight", f"{norm}.bias"}
    for (name, a), b in zip(f.named_parameters(), g.parameters(), strict=True):
        if name not in covered:
            total += float((_f64(a) - _f64(b)).pow(2).sum())
    return total


def elements_of(
    variables: list[Variable], perms: list[Tensor], scales: list[dict[str, Tensor]], model: nn.Module
) -> dict[str, tuple[Tensor, Tensor]]:
    """Each site's ``(perm, scales)`` from the variables' permutations and per-class scales."""
    out = {}
    for site in models.sites(model):
        out[site.name] = (torch.arange(site.channels), torch.ones(site.channels, dtype=torch.float64))
    for variable, perm, scale in zip(variables, perms, scales):
        for site, channels in variable.at.items():
            site_perm, site_scales = out[site]
            site_perm[channels] = channels[perm]
            cls = variable.scale_class[site]
            if cls is not None:
                site_scales[channels] = scale[cls]
    return out


# --- weight matching ----------------------------------------------------------------------------


def _rows(t: Tensor, dim: int) -> Tensor:
    """``t`` as one row per index along ``dim`` (float64, CPU)."""
    return t.detach().to("cpu", torch.float64).movedim(dim, 0).reshape(t.shape[dim], -1)


def _folded(conv: nn.Module, norm: nn.Module) -> tuple[Tensor, Tensor]:
    """The affine map ``norm(conv(x))`` of a conv and its batch norm in eval mode, as one weight and
    bias per output channel (float64): what the channel computes, whatever the conv's own scale."""
    a = _f64(norm.weight if norm.affine else torch.ones_like(norm.running_var)) / torch.sqrt(
        _f64(norm.running_var) + norm.eps
    )
    bias = _f64(conv.bias) if conv.bias is not None else torch.zeros_like(a)
    shift = _f64(norm.bias) if norm.affine else torch.zeros_like(a)
    return _rows(conv.weight, 0) * a[:, None], (bias - _f64(norm.running_mean)) * a + shift


def _f64(t: Tensor) -> Tensor:
    return t.detach().to("cpu", torch.float64)


def _site_terms(f: nn.Module, g: nn.Module, site: str, wired, fold: bool = False) -> dict[str, Tensor]:
    """For channels i of f and j of g at ``site`` (g's other sites already aligned): the inner
    products of the parameters a scale s of the pair leaves alone (``fixed``), multiplies (``up``:
    the pre-activation's last affine map) and divides (``down``: the consumers' input weights), and
    g's squared norms of the last two: the distance is const - 2 fixed + s^2 up_g - 2 s up + down_g
    / s^2 - 2 down / s. With ``fold`` a conv and its batch norm count as their folded affine map
    (:func:`_folded`), all of it multiplied by the scale."""
    terms = {"fixed": 0.0, "up": 0.0, "down": 0.0, "up_g": 0.0, "down_g": 0.0}

    def add(kind: str, a: Tensor, b: Tensor) -> None:
        a, b = _rows(a, 0), _rows(b, 0)
        terms[kind] = terms[kind] + a @ b.T
        if kind != "fixed":
            terms[kind + "_g"] = terms[kind + "_g"] + b.pow(2).sum(1)

    for conv_name, norm_name in wired.producers[site]:
        conv_f, conv_g = f.get_submodule(conv_name), g.get_submodule(conv_name)
        norm_f, norm_g = f.get_submodule(norm_name), g.get_submodule(norm_name)
        has_bn = isinstance(norm_f, nn.modules.batchnorm._BatchNorm)
        if has_bn and fold:
            (weight_f, bias_f), (weight_g, bias_g) = _folded(conv_f, norm_f), _folded(conv_g, norm_g)
            add("up", torch.cat([weight_f, bias_f[:, None]], 1), torch.cat([weight_g, bias_g[:, None]], 1))
            continue
        kind = "fixed" if has_bn else "up"
        add(kind, conv_f.weight, conv_g.weight)
        if conv_f.bias is not None:
            add(kind, conv_f.bias[:, None], conv_g.bias[:, None])
        if has_bn and norm_f.affine:
            add(
                "up",
                torch.stack([norm_f.weight, norm_f.bias], 1),
                torch.stack([norm_g.weight, norm_g.bias], 1),
            )
    for consumer in wired.consumers.get(site, []):
        add("down", _rows(f.get_submodule(consumer).weight, 1), _rows(g.get_submodule(consumer).weight, 1))
    return terms


def _best_scales(up: Tensor, up_g: Tensor, down: Tensor, down_g: Tensor) -> tuple[Tensor, Tensor]:
    """Per pair (i, j), the scale s > 0 minimising ``s^2 up_g[j] - 2 s up[i, j] + down_g[j] / s^2
    - 2 down[i, j] / s`` and that minimum: the best of a log-spaced grid, then Newton steps."""
    up_g, down_g = up_g.expand_as(up), down_g.expand_as(down)  # g's norms: one per column j

    def h(s):
        return s * s * up_g - 2 * s * up + down_g / (s * s) - 2 * down / s

    best_s = torch.ones_like(up)
    best_h = h(best_s)
    for s in _SCALE_GRID:  # one grid point at a time: an (n, n) array, whatever n
        value = h(s)
        better = value < best_h
        best_s, best_h = torch.where(better, s, best_s), torch.where(better, value, best_h)
    # Newton steps from the grid's best: taken whatever they do to h, since near the minimum h
    # cannot tell scales apart closer than sqrt(machine epsilon); a result worse than the grid's
    # (beyond rounding) falls back to it.
    s = best_s
    for _ in range(20):
        grad = 2 * s * up_g - 2 * up - 2 * down_g / s**3 + 2 * down / s**2
        curve = 2 * up_g + 6 * down_g / s**4 - 4 * down / s**3
        step = torch.where(curve > 0, grad / curve.clamp_min(1e-300), torch.zeros_like(grad))
        s = torch.minimum(torch.maximum(s - step, s / 4), s * 4)
    value = h(s)
    better = value <= best_h + 1e-12 * best_h.abs()
    best_s, best_h = torch.where(better, s, best_s), torch.where(better, value, best_h)
    return best_s, best_h


def _solve_variable(
    f, g_rest, variable: Variable, wired, fold: bool = False
) -> tuple[Tensor, dict[str, Tensor], Tensor]:
    """The permutation and scales of one variable minimising the parameter distance with every
    other variable fixed (already applied in ``g_rest``): its cost matrix, then the Hungarian
    assignment. Returns (perm, scales per class, cost matrix)."""
    size = variable.size
    by_class: dict[str | None, dict[str, Tensor]] = {}
    for site, channels in variable.at.items():
        terms = _site_terms(f, g_rest, site, wired, fold)
        block = by_class.setdefault(variable.scale_class[site], {})
        for kind, value in terms.items():
            if not torch.is_tensor(value):
                continue
            value = value[channels][:, channels] if value.dim() == 2 else value[channels]
            block[kind] = block.get(kind, 0.0) + value
    cost = torch.zeros(size, size, dtype=torch.float64)
    scales: dict[str, Tensor] = {}
    chosen: dict[str | None, Tensor] = {}
    for cls, block in by_class.items():
        zero_matrix, zero_vector = (
            torch.zeros(size, size, dtype=torch.float64),
            torch.zeros(size, dtype=torch.float64),
        )
        fixed = block.get("fixed", zero_matrix)
        up, up_g = block.get("up", zero_matrix), block.get("up_g", zero_vector)
        down, down_g = block.get("down", zero_matrix), block.get("down_g", zero_vector)
        if cls is None:
            best_s = torch.ones_like(cost)
            best_h = up_g[None, :] - 2 * up + down_g[None, :] - 2 * down
        else:
            best_s, best_h = _best_scales(up, up_g, down, down_g)
        cost += best_h - 2 * fixed
        chosen[cls] = best_s
    _, perm = linear_sum_assignment(cost.numpy())
    perm = torch.as_tensor(perm, dtype=torch.long)
    for cls, best_s in chosen.items():
        if cls is not None:
            scales[cls] = best_s[torch.arange(size), perm]
    return perm, scales, cost


def weight_matching(
    f: nn.Module,
    g: nn.Module,
    group: str = "permutation",
    *,
    max_sweeps: int = 100,
    generator: torch.Generator | None = None,
    fold_batch_norm: bool = False,
) -> Alignment:
    """Align ``g`` to ``f`` by their weights: Ainsworth et al.'s coordinate descent over the
    variables (:func:`alignment_variables`), each step the exact minimiser of the squared parameter
    distance over one variable (for G_ReLU: its permutation and its scales, each pair's scale the
    minimiser of a one-dimensional function), kept only when it lowers the distance.

    Parameters
    ----------
    f, g : two models of one architecture and width (eval mode is not needed: only weights are read).
    group : "permutation" or "grelu".
    max_sweeps : sweeps over every variable at most; it stops earlier after a sweep that changed
        no permutation and lowered the distance by less than 1e-12 of it. For G_ReLU (without
        ``fold_batch_norm``) a sweep that changed no permutation is followed by solving every
        scale at once with the permutations fixed (``intertwine.alignment_scales``), which
        coordinate descent approaches only slowly where neighbouring scales are coupled (no batch
        norm); kept when it lowers the distance.
    generator : the random order of the variables in each sweep (a fixed order without it).
    fold_batch_norm : compare each conv and its batch norm as their folded affine map (weight and
        bias per channel, from the running statistics) instead of their raw parameters [ours]:
        batch norm makes a conv's own scale arbitrary, so raw conv weights of two networks can
        differ in scale channel by channel where their functions agree. False is Ainsworth et
        al.'s objective (their ResNet normalises with LayerNorm, whose parameters they match raw).

    Returns
    -------
    :class:`Alignment`, with ``objective`` the distance at the start and after every step (never
    increasing).
    """
    _check_group(group)
    _check_same_architecture(f, g)
    wired = wiring(g)
    variables = alignment_variables(g, group)
    perms = [torch.arange(v.size) for v in variables]
    scales = [
        {
            cls: torch.ones(v.size, dtype=torch.float64)
            for cls in set(v.scale_class.values())
            if cls is not None
        }
        for v in variables
    ]
    objective = [parameter_distance(f, g, fold_batch_norm, wired=wired)]
    aligned, sweeps = g, 0
    for sweeps in range(1, max_sweeps + 1):
        order = (
            torch.randperm(len(variables), generator=generator).tolist()
            if generator is not None
            else list(range(len(variables)))
        )
        changed, start = False, objective[-1]
        for index in order:
            # The best element of this variable on top of the current one, the others fixed: the
            # same problem as solving for it afresh (the group acts on the aligned g), one copy
            # of the model per step instead of two.
            variable = variables[index]
            step_perm, step_scales, _ = _solve_variable(f, aligned, variable, wired, fold_batch_norm)
            candidate = act_on_weights(aligned, elements_of([variable], [step_perm], [step_scales], g))
            distance = parameter_distance(f, candidate, fold_batch_norm, wired=wired)
            if distance < objective[-1]:
                changed |= not torch.equal(step_perm, torch.arange(variable.size))
                perms[index] = perms[index][step_perm]
                scales[index] = {cls: step_scales[cls] * s[step_perm] for cls, s in scales[index].items()}
                aligned = candidate
                objective.append(distance)
            else:
                objective.append(objective[-1])
        if not changed and start - objective[-1] <= 1e-12 * max(start, 1e-300):
            break
        if not changed and group == "grelu" and not fold_batch_norm:
            aligned = _scales_solved(f, g, aligned, variables, perms, scales, wired, objective)
    return Alignment(elements_of(variables, perms, scales, g), objective, sweeps)


def _scales_solved(f, g, aligned, variables, perms, scales, wired, objective):
    """After a sweep that changed no permutation: every scale at once (``alignment_scales``), kept
    when it lowers the distance (``scales`` and ``objective`` updated in place); the aligned g."""
    from .alignment_scales import refine_scales

    corrections = refine_scales(f, aligned, variables, wired, models.sites(g))
    if corrections is None:
        return aligned
    refined = [dict(s) for s in scales]
    for (index, cls), factor in corrections.items():
        refined[index][cls] = refined[index][cls] * factor
    candidate = act_on_weights(g, elements_of(variables, perms, refined, g))
    distance = parameter_distance(f, candidate, wired=wired)
    if distance >= objective[-1]:
        return aligned
    scales[:] = refined
    objective.append(distance)
    return candidate


# --- activation matching ------------------------------------------------------------------------


def activation_matching(
    f: nn.Module,
    g: nn.Module,
    images: Tensor,
    group: str = "permutation",
    *,
    batch_size: int = 250,
) -> Alignment:
    """Align ``g`` to ``f`` by their activations on ``images`` (already normalised, as the models
    read them): per variable, the permutation (and for G_ReLU the nonnegative least-squares scale of
    each pair) minimising the squared distance between f's activations and the aligned g's, summed
    over every site the variable reaches and every image and position (the Hungarian assignment).

    Parameters
    ----------
    f, g : two models of one architecture and width, in eval mode (they are read as they are).
    images : (N, C, H, W) float inputs; N >= 1.
    group : "permutation" or "grelu".
    batch_size : images per forward pass.

    Returns
    -------
    :class:`Alignment` (``objective`` empty: there is no iteration).
    """
    _check_group(group)
    _check_same_architecture(f, g)
    if len(images) == 0:
        raise ValueError("activation_matching: no images given; pass at least one probe image")
    variables = alignment_variables(g, group)
    names = [site.name for site in models.sites(g)]
    cross = {name: 0.0 for name in names}
    norms_f = {name: 0.0 for name in names}
    norms_g = {name: 0.0 for name in names}
    for start in range(0, len(images), batch_size):
        batch = images[start : start + batch_size]
        acts_f = models.site_activations(f, batch, names, batch_size=batch_size)
        acts_g = models.site_activations(g, batch, names, batch_size=batch_size)
        for name in names:
            a, b = _rows(acts_f[name], 1), _rows(acts_g[name], 1)
            cross[name] = cross[name] + a @ b.T
            norms_f[name] = norms_f[name] + a.pow(2).sum(1)
            norms_g[name] = norms_g[name] + b.pow(2).sum(1)
    perms, scales = [], []
    for variable in variables:
        cost = torch.zeros(variable.size, variable.size, dtype=torch.float64)
        by_class: dict[str | None, list[Tensor]] = {}
        for site, channels in variable.at.items():
            block = by_class.setdefault(variable.scale_class[site], [0.0, 0.0, 0.0])
            block[0] = block[0] + cross[site][channels][:, channels]
            block[1] = block[1] + norms_f[site][channels]
            block[2] = block[2] + norms_g[site][channels]
        best = {}
        for cls, (fg, ff, gg) in by_class.items():
            if cls is None:
                best[cls] = torch.ones_like(fg)
                cost += ff[:, None] + gg[None, :] - 2 * fg
            else:
                s = fg.clamp_min(0) / gg.clamp_min(1e-300)[None, :]
                best[cls] = torch.where(s > 0, s, torch.ones_like(s))
                cost += ff[:, None] - fg.clamp_min(0) ** 2 / gg.clamp_min(1e-300)[None, :]
        _, perm = linear_sum_assignment(cost.numpy())
        perm = torch.as_tensor(perm, dtype=torch.long)
        perms.append(perm)
        scales.append(
            {cls: s[torch.arange(variable.size), perm] for cls, s in best.items() if cls is not None}
        )
    return Alignment(elements_of(variables, perms, scales, g))


# --- checks ---------------------------------------------------------------------------------------


def _check_group(group: str) -> None:
    if group not in ALIGNMENT_GROUPS:
        raise ValueError(f"unknown alignment group {group!r}; expected one of {', '.join(ALIGNMENT_GROUPS)}")


def _check_same_architecture(f: nn.Module, g: nn.Module) -> None:
    """ValueError unless f and g have the same parameter names and shapes."""
    shapes_f = {name: tuple(p.shape) for name, p in f.named_parameters()}
    shapes_g = {name: tuple(p.shape) for name, p in g.named_parameters()}
    if shapes_f != shapes_g:
        differing = sorted(k for k in shapes_f.keys() | shapes_g.keys() if shapes_f.get(k) != shapes_g.get(k))
        raise ValueError(
            "f and g must be the same architecture at the same width to be aligned; their parameters "
            f"differ at {differing[:5]}"
        )
