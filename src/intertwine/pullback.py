"""Excitation pullbacks (Satkiewicz, "Tapping into the Black Box"): input gradients with soft gates.

The forward pass is the model's own (BatchNorm in eval mode). The backward pass through each
activation and max-pool module is replaced by a soft one:

* ReLU: the derivative 1{z > 0} becomes ``sigmoid(z / T)``; LeakyReLU with slope a:
  ``a + (1 - a) sigmoid(z / T)``. Equivalently the pullback is the exact input gradient of the
  *gated value network*: the same weights, each ReLU(z) replaced by ``z * g`` with the gate
  ``g = sigmoid(z / T)`` computed from the model's own forward pass and held fixed (detached).
* max-pool (``nn.MaxPool2d``, ``nn.AdaptiveMaxPool2d``; a global max pool is a softmax over all
  positions): the gradient of the softmax pool ``sum_k w_k x_k``, ``w = softmax(x / T)`` over each
  window, whose forward value is replaced by the hard max (``hard.detach() + (soft - soft.detach())``,
  exactly the hard max).

The pullback of class c at image x is this modified input gradient of logit c. As T -> 0 it becomes
the plain gradient, as T -> infinity every ReLU passes half its gradient.

Temperatures
------------
``mode="global"``: one T (default 0.3) everywhere, in the units of the pre-activations. Pullbacks
are then invariant to permutations of the hidden units but not to positive scalings: G_ReLU acts on
a pre-activation z_i as d_i z_i, which changes ``sigmoid(d_i z_i / T)``.

``mode="per_neuron"``: module m's unit i gets ``T_i = T * RMS(x_i)``, x the module's input
(the pre-activation for an activation, the pooled activation for a max-pool), the RMS taken over a
probe set (:func:`per_neuron_temperatures`). Units are the channels, dim 1 of the input (Linear
outputs (N, C), conv maps (N, C, H, W), channels-first tokens (N, C, T)); the RMS runs over the
probe images *and* every other position, so a channel shares one temperature, as it shares one
G_ReLU scale. Scaling channel i by d_i > 0 then scales ``T_i`` by d_i too, which restores exact
invariance to G_ReLU (the soft pool's gradient is likewise invariant when x and T scale together).
A channel that is zero on the whole probe set has no scale and gets T_i = 0, read as the T -> 0
limit (the plain gradient) for that channel, which is invariant as well.

``mode="gradient"``: the plain input gradient (torch.autograd, nothing swapped); any model works.

Which modules are swapped
-------------------------
``SOFT_FORWARDS`` maps a module type (exact type, not subclasses, whose forward may differ) to its
soft forward ``f(module, temperature, *inputs) -> output``, with ``temperature`` a float or a
per-channel 1-D tensor (see :func:`channel_view`). :func:`soft_backward` replaces each such module's
``forward`` for the duration of a ``with`` block. A later model type, e.g. a gated network's gate
module, is supported by :func:`register_soft_forward`; its per-neuron temperature is measured on its
first input. Other non-linear activation modules (GELU, Sigmoid, ...) and unregistered max-pools are
refused with a ValueError naming the module: they have no soft counterpart here.

A functional non-linearity (``F.relu``, ``F.max_pool2d``, ``x.clamp(min=0)``, ...) is not a module
and would keep its hard gradient, so :func:`pullback` walks the autograd graph of its objective and
raises if it finds a kink or non-linearity's backward node that no swap produced (the swapped
modules detach their hard parts, so any such node is a missed one). The zoo's CCT tokenizer, for one,
uses functional ReLU and max-pool.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "MODES",
    "SOFT_FORWARDS",
    "channel_view",
    "per_neuron_temperatures",
    "pullback",
    "register_soft_forward",
    "soft_backward",
    "soft_max_pool2d",
    "swapped_modules",
]

MODES = ("global", "per_neuron", "gradient")

Temperature = float | Tensor


def channel_view(temperature: Temperature, x: Tensor) -> Temperature:
    """A per-channel temperature shaped to broadcast against ``x`` along dim 1; a float as it is."""
    if not isinstance(temperature, Tensor):
        return temperature
    if temperature.shape != (x.shape[1],):
        raise ValueError(f"{x.shape[1]} channels but {temperature.numel()} temperatures")
    return temperature.to(x.device, x.dtype).view(1, -1, *([1] * (x.dim() - 2)))


def _hard_value(hard: Tensor, soft: Tensor) -> Tensor:
    # soft - soft.detach() is exactly 0, so the value is exactly `hard`; the gradient is soft's.
    return hard.detach() + (soft - soft.detach())


def _gated(z: Tensor, hard: Tensor, gate: Tensor) -> Tensor:
    """``hard`` in value, derivative ``gate`` (detached) with respect to z."""
    return _hard_value(hard, z * gate.detach())


def _soft_step(z: Tensor, temperature: Temperature) -> Tensor:
    """``sigmoid(z / T)`` of the detached z; a channel with T = 0 (no scale, see
    :func:`per_neuron_temperatures`) gets the T -> 0 limit, the step ``1{z > 0}``."""
    z, t = z.detach(), channel_view(temperature, z)
    if not isinstance(t, Tensor):
        return torch.sigmoid(z / t)
    scaled = t > 0
    return torch.where(scaled, torch.sigmoid(z / torch.where(scaled, t, 1)), (z > 0).to(z.dtype))


def _soft_relu(module: nn.ReLU, temperature: Temperature, z: Tensor) -> Tensor:
    # Out of place even for ReLU(inplace=True): z is needed for the gate.
    return _gated(z, F.relu(z), _soft_step(z, temperature))


def _soft_leaky_relu(module: nn.LeakyReLU, temperature: Temperature, z: Tensor) -> Tensor:
    slope = module.negative_slope
    return _gated(z, F.leaky_relu(z, slope), slope + (1 - slope) * _soft_step(z, temperature))


def _softmax_pool(windows: Tensor, mask: Tensor | None, temperature: Temperature, dims: int) -> Tensor:
    """``sum_k w_k x_k`` with ``w = softmax(x / T)`` over the last ``dims`` dims of ``windows``
    (channels on dim 1); ``mask`` (False at padding) keeps padded positions out. A channel with
    T = 0 gets the T -> 0 limit: w uniform over the window's maxima, detached (the hard max's gradient)."""
    flat = windows.flatten(-dims)
    masked = flat if mask is None else flat.masked_fill(~mask.flatten(-dims), -math.inf)
    # Subtracting the (detached) window max first keeps a tiny T from overflowing x / T.
    peak = masked.detach().amax(-1, True)
    t = channel_view(temperature, flat)
    hard = isinstance(t, Tensor) and bool((t == 0).any())
    logits = (masked - peak) / (torch.where(t > 0, t, 1) if hard else t)
    weights = torch.softmax(logits, -1)
    if hard:
        ties = (masked.detach() == peak).to(flat.dtype)
        weights = torch.where(t > 0, weights, ties / ties.sum(-1, True))
    return (weights * flat).sum(-1)


def _pair(value) -> tuple[int, int]:
    return tuple(value) if isinstance(value, (tuple, list)) else (value, value)


def soft_max_pool2d(
    x: Tensor, temperature: Temperature, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False
) -> Tensor:
    """``F.max_pool2d`` in value (exactly), the softmax pool at ``temperature`` in gradient.

    ``x`` is (N, C, H, W) or (C, H, W); ``temperature`` a float or a (C,) tensor.
    """
    if x.dim() == 3:
        return soft_max_pool2d(x[None], temperature, kernel_size, stride, padding, dilation, ceil_mode)[0]
    stride = kernel_size if stride is None or stride == [] else stride
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = map(_pair, (kernel_size, stride, padding, dilation))
    hard = F.max_pool2d(x, (kh, kw), (sh, sw), (ph, pw), (dh, dw), ceil_mode)
    oh, ow = hard.shape[-2:]
    span_h, span_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    # Pad to exactly the extent the output windows cover (ceil_mode's last windows included).
    extra_h = max(0, (oh - 1) * sh + span_h - (x.shape[-2] + 2 * ph))
    extra_w = max(0, (ow - 1) * sw + span_w - (x.shape[-1] + 2 * pw))
    pad = (pw, pw + extra_w, ph, ph + extra_h)

    def windows(t: Tensor) -> Tensor:  # (N, C, oh, ow, kh, kw)
        t = t.unfold(2, span_h, sh).unfold(3, span_w, sw)[..., ::dh, ::dw]
        return t[:, :, :oh, :ow]

    mask = None
    if any(pad):
        mask = windows(F.pad(torch.ones_like(x[:1, :1], dtype=torch.bool), pad))
    return _hard_value(hard, _softmax_pool(windows(F.pad(x, pad)), mask, temperature, 2))


def _soft_max_pool(module: nn.MaxPool2d, temperature: Temperature, x: Tensor) -> Tensor:
    if module.return_indices:
        raise ValueError("pullback: a MaxPool2d with return_indices=True has no soft counterpart")
    m = module
    return soft_max_pool2d(x, temperature, m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode)


def _soft_adaptive_max_pool(module: nn.AdaptiveMaxPool2d, temperature: Temperature, x: Tensor) -> Tensor:
    if module.return_indices:
        raise ValueError("pullback: an AdaptiveMaxPool2d with return_indices=True has no soft counterpart")
    if x.dim() == 3:
        return _soft_adaptive_max_pool(module, temperature, x[None])[0]
    hard = F.adaptive_max_pool2d(x, module.output_size)
    (h, w), (oh, ow) = x.shape[-2:], hard.shape[-2:]
    # Adaptive windows differ in size, so one softmax per output cell (one for a global max pool).
    rows = []
    for i in range(oh):
        top, bottom = (i * h) // oh, -((-(i + 1) * h) // oh)
        cells = []
        for j in range(ow):
            left, right = (j * w) // ow, -((-(j + 1) * w) // ow)
            cells.append(_softmax_pool(x[:, :, top:bottom, left:right], None, temperature, 2))
        rows.append(torch.stack(cells, -1))
    return _hard_value(hard, torch.stack(rows, -2))


#: module type -> soft forward ``f(module, temperature, *inputs)``; see the module docstring.
SOFT_FORWARDS: dict[type[nn.Module], Callable[..., Tensor]] = {
    nn.ReLU: _soft_relu,
    nn.LeakyReLU: _soft_leaky_relu,
    nn.MaxPool2d: _soft_max_pool,
    nn.AdaptiveMaxPool2d: _soft_adaptive_max_pool,
}

# Smooth modules from torch.nn.modules.activation that are no gate: their gradient stays as it is.
_NOT_GATES = (nn.Softmax, nn.Softmax2d, nn.LogSoftmax, nn.Softmin, nn.MultiheadAttention, nn.Identity)


def register_soft_forward(module_type: type[nn.Module], soft_forward: Callable[..., Tensor]) -> None:
    """Swap modules of exactly ``module_type`` for ``soft_forward(module, temperature, *inputs)`` in
    pullbacks. It must return the module's own output in value (use a detach trick as
    ``hard.detach() + (soft - soft.detach())``) and detach every hard part, so that the graph check
    finds no kink; per-neuron temperatures are measured on its first input, channels on dim 1."""
    SOFT_FORWARDS[module_type] = soft_forward


def swapped_modules(model: nn.Module) -> list[str]:
    """Names of the modules whose forward :func:`soft_backward` swaps, in ``named_modules`` order."""
    return [name for name, module in model.named_modules() if type(module) in SOFT_FORWARDS]


def _refuse_unsupported(model: nn.Module) -> None:
    """ValueError naming every activation or max-pool module without a soft counterpart."""
    bad = []
    for name, module in model.named_modules():
        kind = type(module)
        if kind in SOFT_FORWARDS or isinstance(module, _NOT_GATES):
            continue
        activation = kind.__module__ == "torch.nn.modules.activation"
        max_pool = kind.__module__ == "torch.nn.modules.pooling" and "Max" in kind.__name__
        if activation or max_pool:
            bad.append(f"{name} ({kind.__name__})")
    if bad:
        raise ValueError(
            f"pullback: no soft backward for {', '.join(bad)}: excitation pullbacks are defined for "
            "ReLU, LeakyReLU and max-pools only (register others with register_soft_forward, or use "
            "mode='gradient')"
        )


# Backward nodes of kinks and non-linear activations. A swapped module leaves none (its hard part is
# detached), so one in the graph comes from a functional call the swap missed.
_MISSED = re.compile(
    r"(Relu|LeakyRelu|RreluWithNoise|PreluKernel|Threshold|Hardtanh|Clamp|ClampMin|ClampMax|Max|Amax|"
    r"Maximum|Fmax|Min|Amin|Minimum|Fmin|Cummax|Cummin|Abs|(Adaptive|Fractional)?MaxPool\dD(WithIndices)?|"
    r"Gelu|Sigmoid|LogSigmoid|Tanh|Silu|Elu|Celu|Softplus|Mish|Hardswish|Hardsigmoid)Backward\d*"
)


def _missed_nonlinearities(output: Tensor) -> list[str]:
    """Names of the flagged backward nodes in ``output``'s autograd graph."""
    found, seen, stack = [], set(), [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if _MISSED.fullmatch(type(node).__name__):
            found.append(type(node).__name__)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return sorted(set(found))


@contextlib.contextmanager
def soft_backward(model: nn.Module, temperature: float | Mapping[str, Tensor]) -> Iterator[list[str]]:
    """Within the block every module of :func:`swapped_modules` runs its soft forward at
    ``temperature``: one float > 0, or a mapping module name -> (C,) tensor >= 0 (0: the hard
    gradient for that channel) for every swapped module. Yields the swapped names; restores the
    original forwards on exit."""
    names = swapped_modules(model)
    if isinstance(temperature, Mapping):
        missing = [name for name in names if name not in temperature]
        if missing:
            raise ValueError(f"pullback: no per-neuron temperatures for modules {missing}")
    elif not temperature > 0:
        raise ValueError(f"pullback: the temperature must be positive, got {temperature!r}")
    swapped = []
    try:
        for name in names:
            module = model.get_submodule(name)
            if "forward" in vars(module):
                raise ValueError(f"pullback: module {name!r} already has its forward replaced")
            t = temperature[name] if isinstance(temperature, Mapping) else float(temperature)
            if isinstance(t, Tensor) and not (t >= 0).all():
                raise ValueError(f"pullback: per-neuron temperatures of {name!r} must be >= 0")
            # An instance attribute shadows the class's forward; deleting it restores the original.
            module.forward = functools.partial(SOFT_FORWARDS[type(module)], module, t)
            swapped.append(module)
        yield names
    finally:
        for module in swapped:
            del module.forward


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


def _indices(values, n: int, what: str, device) -> Tensor:
    """One index per image: an int for all, or a sequence/tensor of length n."""
    index = torch.as_tensor(values, device=device).long().reshape(-1)
    if index.numel() == 1:
        index = index.expand(n)
    if index.shape != (n,):
        raise ValueError(f"pullback: {n} images but {index.numel()} {what}")
    return index


def pullback(
    model: nn.Module,
    images: Tensor,
    classes: int | Sequence[int] | Tensor | None,
    temperature: float = 0.3,
    mode: str = "global",
    temperatures: Mapping[str, Tensor] | None = None,
    site: str | None = None,
    units: int | Sequence[int] | Tensor | None = None,
) -> Tensor:
    """The excitation pullback of ``classes[i]`` at ``images[i]``, shape of ``images``.

    ``images``: a normalised batch (N, ...), moved to the model's device and parameter dtype.
    ``classes``: one logit index per image (or an int for all). ``mode``: "global" (one
    ``temperature``), "per_neuron" (``temperatures`` from :func:`per_neuron_temperatures`;
    ``temperature`` is then unused, it is already in them) or "gradient" (the plain input gradient).

    With ``site`` (a module name, e.g. a site of :func:`intertwine.models.sites`) and ``units`` (one
    channel index per image, or an int) instead of ``classes``: the pullback of the sum over positions
    of channel ``units[i]`` of that module's output, the site's own soft derivative included. For a
    (N, C) output the "sum" is the unit itself.

    Each image's objective depends on that image only (eval mode), so one backward pass of the sum
    gives them all. The model is left as it was: modes, parameters, ``requires_grad``, no hooks.
    """
    if mode not in MODES:
        raise ValueError(f"pullback: unknown mode {mode!r}; expected one of {MODES}")
    if (site is None) != (units is None) or (site is not None and classes is not None):
        raise ValueError("pullback: give either classes, or site and units (with classes=None)")
    if mode == "per_neuron" and temperatures is None:
        raise ValueError("pullback: mode 'per_neuron' needs temperatures (per_neuron_temperatures)")
    parameter = next(model.parameters())
    x = images.detach().to(parameter.device, parameter.dtype).clone().requires_grad_(True)
    index = _indices(
        classes if site is None else units, len(x), "classes" if site is None else "units", x.device
    )
    if mode != "gradient":
        _refuse_unsupported(model)
    swap = {
        "global": lambda: soft_backward(model, temperature),
        "per_neuron": lambda: soft_backward(model, temperatures),
        "gradient": contextlib.nullcontext,
    }[mode]
    with _frozen_eval(model), swap(), torch.enable_grad():
        output = model(x) if site is None else _site_output(model, x, site)
        objective = output[torch.arange(len(x), device=x.device), index].reshape(len(x), -1).sum(1)
        missed = _missed_nonlinearities(objective) if mode != "gradient" else []
        if missed:
            raise ValueError(
                f"pullback: the forward pass has non-linearities that are not modules the pullback "
                f"swaps ({', '.join(missed)} in the autograd graph), e.g. a functional F.relu or "
                "F.max_pool2d; their gradients would stay hard. Use modules (nn.ReLU, nn.MaxPool2d)"
            )
        (grad,) = torch.autograd.grad(objective.sum(), x)
    return grad


@torch.no_grad()
def per_neuron_temperatures(
    model: nn.Module, probe_images: Tensor, temperature: float = 0.3, batch_size: int = 256
) -> dict[str, Tensor]:
    """``temperature`` times the per-channel RMS of each swapped module's input over ``probe_images``.

    Returns module name -> float64 CPU tensor (C,), for ``pullback(..., mode="per_neuron")``. The RMS
    runs over images and positions (every dim but 1). A channel that is exactly zero on the whole
    probe set (a dead unit, or a max-pool behind one) has no scale: it gets temperature 0, which the
    soft backwards read as the T -> 0 limit, the plain gradient, for that channel. That is invariant
    too, where any finite fallback would not be once the channel wakes up on other images. A
    module that does not run on the probe images gets an empty tensor (none of its channels ran).
    """
    if not temperature > 0:
        raise ValueError(f"per_neuron_temperatures: the temperature must be positive, got {temperature!r}")
    if len(probe_images) == 0:
        raise ValueError("per_neuron_temperatures: no probe images")
    sums: dict[str, Tensor] = {}
    counts: dict[str, int] = {}

    def record(name: str):
        def hook(_module, inputs):
            z = inputs[0].detach().to(torch.float64)
            squares = z.transpose(0, 1).reshape(z.shape[1], -1).square()
            sums[name] = sums.get(name, 0) + squares.sum(1).cpu()
            counts[name] = counts.get(name, 0) + squares.shape[1]

        return hook

    names = swapped_modules(model)
    handles = [model.get_submodule(name).register_forward_pre_hook(record(name)) for name in names]
    parameter = next(model.parameters())
    try:
        with _frozen_eval(model):
            for start in range(0, len(probe_images), batch_size):
                model(probe_images[start : start + batch_size].to(parameter.device, parameter.dtype))
    finally:
        for handle in handles:
            handle.remove()
    # A swapped module that never runs (a gated network's feature global pool: its selection is
    # computed functionally) has no channels to scale: an empty tensor, which channel_view refuses
    # should the module run after all.
    return {
        name: temperature * (sums[name] / counts[name]).sqrt()
        if name in sums
        else torch.zeros(0, dtype=torch.float64)
        for name in names
    }
