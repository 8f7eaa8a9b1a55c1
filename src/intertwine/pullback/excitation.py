"""The excitation pullback itself (``pullback``) and the per-neuron temperatures it can run at
(``per_neuron_temperatures``), with their input checks and the autograd graph's check for
non-linearities no swap handled. "The module docstring" below is the package's,
:mod:`intertwine.pullback`."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping, Sequence

import torch
from torch import Tensor, nn

from intertwine.pullback.call_sites import (
    CallSites,
    Intercept,
    global_temperature,
    refuse_unsupported,
    soft_backward,
)

MODES = ("global", "per_neuron", "gradient")


# Backward nodes of kinks and non-linear activations. A swapped call leaves none (its hard part is
# detached), so one in the graph comes from a call the swap missed (or one left hard on purpose).
_MISSED = re.compile(
    r"(Relu|LeakyRelu|RreluWithNoise|PreluKernel|Threshold|Hardtanh|Clamp|ClampMin|ClampMax|Max|Amax|"
    r"Maximum|Fmax|Min|Amin|Minimum|Fmin|Cummax|Cummin|Abs|(Adaptive|Fractional)?MaxPool\dD(WithIndices)?|"
    r"Gelu|Sigmoid|LogSigmoid|Tanh|Silu|Elu|Celu|Softplus|Mish|Hardswish|Hardsigmoid)Backward\d*"
)


def _missed_nonlinearities(output: Tensor, exempt: set = frozenset()) -> list[str]:
    """Names of the flagged backward nodes in ``output``'s autograd graph, nodes in ``exempt``
    (calls left hard on purpose) not counted."""
    found, seen, stack = [], set(), [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if node not in exempt and _MISSED.fullmatch(type(node).__name__):
            found.append(type(node).__name__)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return sorted(set(found))


@contextlib.contextmanager
def _frozen_eval(model: nn.Module) -> Iterator[None]:
    """Eval mode and frozen parameters for the block; every module's mode and flag restored after."""
    modes = [(module, module.training) for module in model.modules()]
    flags = [(p, p.requires_grad) for p in model.parameters()]
    try:
        model.eval()
        # Only the input gradient is wanted: no weight gradients computed or kept.
        for p, _ in flags:
            p.requires_grad_(False)
        yield
    finally:
        for p, flag in flags:
            p.requires_grad_(flag)
        for module, training in modes:
            module.training = training


class _SiteReached(Exception):
    """Raised once the site's output is captured: the rest of the forward pass is not needed."""


def _site_output(model: nn.Module, x: Tensor, site: str) -> Tensor:
    """The output of module ``site`` in a forward pass of ``x`` (with autograd)."""
    captured = []

    def capture(_module, _inputs, output):
        captured.append(output)
        raise _SiteReached

    handle = model.get_submodule(site).register_forward_hook(capture)
    try:
        model(x)
    except _SiteReached:
        pass
    finally:
        handle.remove()
    if not captured:
        raise ValueError(f"pullback: module {site!r} did not run in the forward pass")
    return captured[0]


def _first_parameter(model: nn.Module, who: str) -> Tensor:
    parameter = next(model.parameters(), None)
    if parameter is None:
        raise ValueError(f"{who}: the model has no parameters (nothing to pull back through)")
    return parameter


def _refuse_non_finite(model: nn.Module, tensors: Mapping[str, Tensor], who: str) -> None:
    """ValueError naming the first NaN or infinite weight of ``model`` and the first input tensor
    of ``tensors`` (name -> tensor) with NaN or infinite values."""
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        if t.is_floating_point() and not torch.isfinite(t).all():
            kind = "NaN" if t.isnan().any() else "infinite"
            raise ValueError(
                f"{who}: the model has {kind} weights ({int((~torch.isfinite(t)).sum())} of "
                f"{t.numel()} values of {name!r}); a model with {kind} weights has no pullback: "
                "retrain it or load a finite checkpoint"
            )
    for what, t in tensors.items():
        bad = ~torch.isfinite(t.detach()).flatten(1).all(1)
        if bad.any():
            raise ValueError(
                f"{who}: {int(bad.sum())} of the {len(t)} {what} have NaN or infinite values (the "
                f"first: index {int(bad.nonzero()[0])}); remove or repair them"
            )


def _indices(values, n: int, what: str, device) -> Tensor:
    """One integer index per image: an int for all, or a sequence/tensor of length n."""
    index = torch.as_tensor(values, device=device)
    if index.dtype == torch.bool or index.is_floating_point() or index.is_complex():
        shown = values if index.numel() <= 8 else f"{index.numel()} values"
        raise ValueError(f"pullback: {what} must be integers, got {shown!r} ({index.dtype})")
    index = index.long().reshape(-1)
    if index.numel() == 1:
        index = index.expand(n)
    if index.shape != (n,):
        raise ValueError(f"pullback: {n} images but {index.numel()} {what}")
    return index


def _check_range(index: Tensor, size: int, what: str, where: str) -> None:
    bad = (index < 0) | (index >= size)
    if bad.any():
        raise ValueError(
            f"pullback: {what} must be integers in [0, {size}) ({where} has {size}); got "
            f"{index[bad].unique().tolist()} (negative indices are not read from the end)"
        )


def pullback(
    model: nn.Module,
    images: Tensor,
    classes: int | Sequence[int] | Tensor | None,
    temperature: float = 0.3,
    mode: str = "global",
    temperatures: Mapping[str, Tensor] | None = None,
    site: str | None = None,
    units: int | Sequence[int] | Tensor | None = None,
    functional: str | None = None,
    pool_padding: str | None = None,
) -> Tensor:
    """The excitation pullback of ``classes[i]`` at ``images[i]``, shape of ``images``.

    Parameters
    ----------
    model : the network (left as it was: modes, parameters, ``requires_grad``, no hooks).
    images : a normalised batch (N, ...), moved to the model's device and parameter dtype; finite.
    classes : one logit index per image (or an int for all), integers in [0, logits).
    temperature : the global T (mode "global").
    mode : "global" (one ``temperature``), "per_neuron" (``temperatures`` from
        :func:`per_neuron_temperatures`; ``temperature`` is then unused, it is already in them) or
        "gradient" (the plain input gradient).
    site, units : instead of ``classes`` (pass ``classes=None``): a module name (e.g. a site of
        :func:`intertwine.models.sites`) and one channel index per image (or an int); the pullback
        of the sum over positions of channel ``units[i]`` of that module's output, the site's own
        soft derivative included. For a (N, C) output the "sum" is the unit itself.
    functional : "soft" or "hard", the treatment of functional ReLU and max-pool calls (module
        docstring); None: :func:`options`' (default "soft").
    pool_padding : "zeros" (the paper's Listing 2) or "excluded"; None: :func:`options`' ("zeros").

    Returns
    -------
    The pullbacks, a tensor shaped as ``images``. Each image's objective depends on that image only
    (eval mode), so one backward pass of the sum gives them all.
    """
    if mode not in MODES:
        raise ValueError(f"pullback: unknown mode {mode!r}; expected one of {MODES}")
    if (site is None) != (units is None) or (site is not None and classes is not None):
        raise ValueError("pullback: give either classes, or site and units (with classes=None)")
    if mode == "per_neuron" and temperatures is None:
        raise ValueError("pullback: mode 'per_neuron' needs temperatures (per_neuron_temperatures)")
    parameter = _first_parameter(model, "pullback")
    _refuse_non_finite(model, {"images": images}, "pullback")
    x = images.detach().to(parameter.device, parameter.dtype).clone().requires_grad_(True)
    what = "classes" if site is None else "units"
    index = _indices(classes if site is None else units, len(x), what, x.device)
    if mode != "gradient":
        refuse_unsupported(model)
    swap = {
        "global": lambda: soft_backward(model, temperature, functional, pool_padding),
        "per_neuron": lambda: soft_backward(model, temperatures, functional, pool_padding),
        "gradient": contextlib.nullcontext,
    }[mode]
    with _frozen_eval(model), swap() as sites, torch.enable_grad():
        output = model(x) if site is None else _site_output(model, x, site)
        _check_range(index, output.shape[1], what, "the model's output" if site is None else f"{site!r}")
        objective = output[torch.arange(len(x), device=x.device), index].reshape(len(x), -1).sum(1)
        if mode != "gradient":
            _refuse_plain_gradient(model, objective, sites)
        (grad,) = torch.autograd.grad(objective.sum(), x)
    return grad


def _refuse_plain_gradient(model: nn.Module, objective: Tensor, sites: CallSites) -> None:
    """ValueError where a soft pullback would silently be (partly) a plain gradient: a kink the
    swaps missed in the objective's graph, or no call site swapped at all."""
    missed = _missed_nonlinearities(objective, sites.hard_nodes)
    if missed:
        raise ValueError(
            f"pullback: the forward pass has non-linearities that no swap handles ({', '.join(missed)} "
            "in the autograd graph), e.g. x.clamp(min=0), torch.maximum or a functional GELU; their "
            "gradients would stay hard. Write them as nn.ReLU / F.relu / nn.MaxPool2d, or use "
            "mode='gradient'"
        )
    if not sites.soft:
        left = f" ({len(sites.hard)} functional calls left hard by functional='hard')" if sites.hard else ""
        raise ValueError(
            f"pullback: no ReLU, LeakyReLU or max-pool call was found in the forward pass of "
            f"{type(model).__name__}{left}, so the pullback would be the plain gradient. Gates written "
            "as torch.where(z > 0, z, 0) or z * (z > 0) are not detected: write them with nn.ReLU or "
            "F.relu, or ask for mode='gradient'"
        )


@torch.no_grad()
def per_neuron_temperatures(
    model: nn.Module, probe_images: Tensor, temperature: float = 0.3, batch_size: int = 256
) -> dict[str, Tensor]:
    """``temperature`` times the per-channel RMS of each call site's input over ``probe_images``.

    Parameters
    ----------
    model : the network; every call site of its forward pass (module docstring) is measured,
        functional ones included (used where ``functional="soft"``).
    probe_images : (N, ...) finite images, N >= 1.
    temperature : T > 0.
    batch_size : images per forward pass.

    Returns
    -------
    Call site name -> float64 CPU tensor (C,), in call order, for ``pullback(...,
    mode="per_neuron")``. The RMS runs over images and positions (every dim but 1). A channel that
    is exactly zero on the whole probe set (a dead unit, or a max-pool behind one) has no scale: it
    gets temperature 0, which the soft backwards read as the T -> 0 limit, the plain gradient, for
    that channel. That is invariant too, where any finite fallback would not be once the channel
    wakes up on other images. A call site that does not run on the probe images has no entry.
    """
    temperature = global_temperature(temperature, "per_neuron_temperatures")
    if len(probe_images) == 0:
        raise ValueError("per_neuron_temperatures: no probe images")
    parameter = _first_parameter(model, "per_neuron_temperatures")
    _refuse_non_finite(model, {"probe images": probe_images}, "per_neuron_temperatures")
    sums: dict[str, Tensor] = {}
    counts: dict[str, int] = {}

    def record(site: str, _soft, hard, first_input: Tensor, _functional: bool) -> Tensor:
        z = first_input.detach().to(torch.float64)
        squares = z.transpose(0, 1).reshape(z.shape[1], -1).square()
        if site in sums and sums[site].shape != squares.shape[:1]:
            raise ValueError(
                f"per_neuron_temperatures: call site {site!r} has {squares.shape[0]} channels here and "
                f"{sums[site].shape[0]} in an earlier batch: its forward pass differs between batches"
            )
        sums[site] = sums.get(site, 0) + squares.sum(1).cpu()
        counts[site] = counts.get(site, 0) + squares.shape[1]
        return hard()

    with _frozen_eval(model), Intercept(model, record).installed():
        for start in range(0, len(probe_images), batch_size):
            model(probe_images[start : start + batch_size].to(parameter.device, parameter.dtype))
    return {site: temperature * (sums[site] / counts[site]).sqrt() for site in sums}
