"""Excitation pullbacks (Satkiewicz, "Tapping into the Black Box"): input gradients with soft gates.

The forward pass is the model's own (BatchNorm in eval mode). The backward pass through each ReLU
and max-pool *call* is replaced by a soft one:

* ReLU: the derivative 1{z > 0} becomes ``sigmoid(z / T)``; LeakyReLU with slope a:
  ``a + (1 - a) sigmoid(z / T)``. Equivalently the pullback is the exact input gradient of the
  *gated value network*: the same weights, each ReLU(z) replaced by ``z * g`` with the gate
  ``g = sigmoid(z / T)`` computed from the model's own forward pass and held fixed (detached).
* max-pool (``nn.MaxPool2d``, ``nn.AdaptiveMaxPool2d``, ``F.max_pool2d``, ...; a global max pool is
  a softmax over all positions): the gradient of the softmax pool ``sum_k w_k x_k``,
  ``w = softmax(x / T)`` over each window, whose forward value is replaced by the hard max
  (``hard.detach() + (soft - soft.detach())``, exactly the hard max). ``pool_padding="zeros"`` (the
  default) is the paper's Listing 2 (its released ``SoftMaxPool2d``): a padded pool's softmax runs
  over ``F.unfold``'s zero-padded windows, so the padded cells take part as zeros;
  ``pool_padding="excluded"`` keeps them out, as the hard max-pool's implicit -inf padding does.
  Cells that ``ceil_mode`` adds beyond the declared padding are always excluded (Listing 2 has no
  ceil mode).
* a gated network's value unit (:class:`intertwine.models.gated.GateActivation`, ``pre * gate``)
  holds its gate fixed (detached): its pullback is the value network's input gradient with the
  feature network's gates held fixed, the same at every temperature (our extension: the paper
  treats ReLU networks only).

The pullback of class c at image x is this modified input gradient of logit c. As T -> 0 it becomes
the plain gradient, as T -> infinity every ReLU passes half its gradient.

Call sites
----------
A module can run more than once in a forward pass (torchvision's ``Bottleneck`` calls one
``nn.ReLU`` three times, ``BasicBlock`` twice), and a forward may call ``F.relu``, ``torch.relu``,
``Tensor.relu``, ``F.leaky_relu``, ``F.max_pool2d``, ``torch.max_pool2d`` or
``F.adaptive_max_pool2d`` directly (DenseNet's last ReLU, the CCT's tokenizer). Every such *call*
is a call site with its own name, and its own temperature in per-neuron mode:

* a swapped module's first call is its module name (``layer1.0.relu``), its k-th call (k >= 2)
  ``layer1.0.relu@k``;
* a functional call is named after the innermost module whose forward makes it and the function,
  ``features.relu()`` (``relu()`` in the root module's forward), again ``@k`` from the second call.

Functional calls are caught by a torch function mode (:class:`torch.overrides.TorchFunctionMode`)
while the pullback's forward runs. ``functional="soft"`` (the default) swaps them like modules;
``functional="hard"`` leaves them with their hard gradient, as the paper's released code does (it
replaces ``nn.ReLU`` and ``nn.MaxPool2d`` modules only, so DenseNet's functional last ReLU stays hard).
In-place functional calls (``F.relu(x, inplace=True)``, ``x.relu_()``) are computed out of place
when swapped: code that relies on the mutation rather than the returned tensor is not supported.
A max-pool call with ``return_indices=True`` is no call site (a gated network's selections are
indices); its values, if they reach the objective, are refused by the graph check below.

Temperatures
------------
``mode="global"``: one T (default 0.3) everywhere, in the units of the pre-activations. Pullbacks
are then invariant to permutations of the hidden units but not to positive scalings: G_ReLU acts on
a pre-activation z_i as d_i z_i, which changes ``sigmoid(d_i z_i / T)``.

``mode="per_neuron"``: call site s's unit i gets ``T_i = T * RMS(x_i)``, x the call's input (the
pre-activation for an activation, the pooled activation for a max-pool), the RMS taken over a probe
set (:func:`per_neuron_temperatures`). Units are the channels, dim 1 of the input (Linear outputs
(N, C), conv maps (N, C, H, W), channels-first tokens (N, C, T)); the RMS runs over the probe images
*and* every other position, so a channel shares one temperature, as it shares one G_ReLU scale.
Scaling channel i by d_i > 0 then scales ``T_i`` by d_i too, which restores exact invariance to
G_ReLU (the soft pool's gradient is likewise invariant when x and T scale together, zero padding
included). One temperature per *call*, not per module: the calls of a reused ReLU see different
tensors (of different widths in a Bottleneck), which G_ReLU scales independently. A channel that is
zero on the whole probe set has no scale and gets T_i = 0, read as the T -> 0 limit (the plain
gradient) for that channel, which is invariant as well.

``mode="gradient"``: the plain input gradient (torch.autograd, nothing swapped); any model works.

What is refused
---------------
``SOFT_FORWARDS`` maps a module type (exact type, not subclasses, whose forward may differ) to its
soft forward ``f(module, temperature, *inputs) -> output``, with ``temperature`` a float or a
per-channel 1-D tensor (see :func:`channel_view`). A later module type is supported by
:func:`register_soft_forward`; its per-neuron temperature is measured on its first input. An
unregistered subclass of ``nn.ReLU`` that calls ``F.relu`` is caught as a functional call. Other
non-linear activation modules (GELU, Sigmoid, ...) and unregistered max-pool modules are refused
with a ValueError naming the module: they have no soft counterpart here.

A non-linearity that is neither a swapped module nor one of the functions above (``x.clamp(min=0)``,
``torch.maximum``, ``F.gelu``, ...) would keep its hard gradient, so :func:`pullback` walks the
autograd graph of its objective and raises if it finds a kink or non-linearity's backward node
that no swap produced (the swaps detach their hard parts, so any such node is a missed one). A gate
written without a differentiable kink (``torch.where(z > 0, z, 0)``, ``z * (z > 0)``) leaves no
such node and is not detected: such a gate keeps its hard gradient. :func:`pullback` refuses a
model in which no call site ran at all (its "pullback" would be the plain gradient); a model that
mixes detected ReLUs with such hand-written gates is the caller's responsibility.

Inputs are checked: NaN or infinite images, weights or per-neuron temperatures, classes or units
that are not integers in [0, outputs), are refused with an error naming them.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from intertwine.models.gated import GateActivation

__all__ = [
    "FUNCTIONAL",
    "MODES",
    "POOL_PADDING",
    "SOFT_FORWARDS",
    "CallSites",
    "channel_view",
    "options",
    "per_neuron_temperatures",
    "pullback",
    "register_soft_forward",
    "soft_adaptive_max_pool2d",
    "soft_backward",
    "soft_max_pool2d",
    "swapped_modules",
]

MODES = ("global", "per_neuron", "gradient")
#: How functional ReLU and max-pool calls are treated: swapped ("soft"), or left hard as the paper's
#: released code leaves them ("hard").
FUNCTIONAL = ("soft", "hard")
#: A padded soft max-pool's padding: zeros in the softmax (the paper's Listing 2) or excluded.
POOL_PADDING = ("zeros", "excluded")

Temperature = float | Tensor

# The defaults of pullback's ``functional`` and ``pool_padding`` (see :func:`options`).
_FUNCTIONAL = contextvars.ContextVar("functional", default="soft")
_POOL_PADDING = contextvars.ContextVar("pool_padding", default="zeros")


def _check_choice(value: str, choices: tuple[str, ...], what: str) -> str:
    if value not in choices:
        raise ValueError(f"pullback: {what} must be one of {choices}, got {value!r}")
    return value


@contextlib.contextmanager
def options(functional: str | None = None, pool_padding: str | None = None) -> Iterator[None]:
    """Within the block, :func:`pullback` and :func:`soft_backward` default to these ``functional``
    and ``pool_padding`` values (None: leave the current one), so that code calling pullbacks
    through other functions (the study's measurements) follows one setting."""
    tokens = []
    try:
        if functional is not None:
            tokens.append((_FUNCTIONAL, _FUNCTIONAL.set(_check_choice(functional, FUNCTIONAL, "functional"))))
        if pool_padding is not None:
            tokens.append(
                (_POOL_PADDING, _POOL_PADDING.set(_check_choice(pool_padding, POOL_PADDING, "pool_padding")))
            )
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


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


def _soft_relu_of(z: Tensor, temperature: Temperature) -> Tensor:
    # Out of place even for an in-place ReLU: z is needed for the gate.
    return _gated(z, F.relu(z), _soft_step(z, temperature))


def _soft_leaky_relu_of(z: Tensor, temperature: Temperature, slope: float) -> Tensor:
    return _gated(z, F.leaky_relu(z, slope), slope + (1 - slope) * _soft_step(z, temperature))


def _soft_relu(module: nn.ReLU, temperature: Temperature, z: Tensor) -> Tensor:
    return _soft_relu_of(z, temperature)


def _soft_leaky_relu(module: nn.LeakyReLU, temperature: Temperature, z: Tensor) -> Tensor:
    return _soft_leaky_relu_of(z, temperature, module.negative_slope)


def _softmax_pool(windows: Tensor, mask: Tensor | None, temperature: Temperature, dims: int) -> Tensor:
    """``sum_k w_k x_k`` with ``w = softmax(x / T)`` over the last ``dims`` dims of ``windows``
    (channels on dim 1); ``mask`` (False where a cell takes no part) keeps such cells out. A channel
    with T = 0 gets the T -> 0 limit: w uniform over the window's maxima, detached (the hard max's
    gradient)."""
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
    x: Tensor,
    temperature: Temperature,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode=False,
    pool_padding: str = "zeros",
) -> Tensor:
    """``F.max_pool2d`` in value (exactly), the softmax pool at ``temperature`` in gradient.

    Parameters
    ----------
    x : (N, C, H, W) or (C, H, W) tensor.
    temperature : a float, or a (C,) tensor (0: the hard max's gradient for that channel).
    kernel_size, stride, padding, dilation, ceil_mode : as ``F.max_pool2d``.
    pool_padding : "zeros" (the paper's Listing 2: the ``padding`` cells take part in the softmax
        as zeros) or "excluded" (they take no part). Cells that ``ceil_mode`` adds beyond
        ``padding`` never take part.

    Returns
    -------
    The pooled tensor, equal to ``F.max_pool2d``'s output.
    """
    _check_choice(pool_padding, POOL_PADDING, "pool_padding")
    if x.dim() == 3:
        args = (kernel_size, stride, padding, dilation, ceil_mode, pool_padding)
        return soft_max_pool2d(x[None], temperature, *args)[0]
    stride = kernel_size if stride is None or stride == [] else stride
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = map(_pair, (kernel_size, stride, padding, dilation))
    hard = F.max_pool2d(x, (kh, kw), (sh, sw), (ph, pw), (dh, dw), ceil_mode)
    oh, ow = hard.shape[-2:]
    span_h, span_w = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    # Pad to exactly the extent the output windows cover (ceil_mode's last windows included).
    extra_h = max(0, (oh - 1) * sh + span_h - (x.shape[-2] + 2 * ph))
    extra_w = max(0, (ow - 1) * sw + span_w - (x.shape[-1] + 2 * pw))

    def windows(t: Tensor) -> Tensor:  # (N, C, oh, ow, kh, kw)
        t = t.unfold(2, span_h, sh).unfold(3, span_w, sw)[..., ::dh, ::dw]
        return t[:, :, :oh, :ow]

    mask = None
    if ph or pw or extra_h or extra_w:
        taking_part = torch.ones_like(x[:1, :1], dtype=torch.bool)
        # The declared padding takes part (as zeros) in Listing 2; ceil_mode's extra cells never do.
        taking_part = F.pad(taking_part, (pw, pw, ph, ph), value=pool_padding == "zeros")
        mask = windows(F.pad(taking_part, (0, extra_w, 0, extra_h), value=False))
    padded = F.pad(x, (pw, pw + extra_w, ph, ph + extra_h))
    return _hard_value(hard, _softmax_pool(windows(padded), mask, temperature, 2))


def soft_adaptive_max_pool2d(x: Tensor, temperature: Temperature, output_size) -> Tensor:
    """``F.adaptive_max_pool2d`` in value (exactly), one softmax pool per output cell at
    ``temperature`` in gradient; x (N, C, H, W) or (C, H, W)."""
    if x.dim() == 3:
        return soft_adaptive_max_pool2d(x[None], temperature, output_size)[0]
    hard = F.adaptive_max_pool2d(x, output_size)
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


def _soft_max_pool(module: nn.MaxPool2d, temperature: Temperature, x: Tensor) -> Tensor:
    if module.return_indices:
        raise ValueError("pullback: a MaxPool2d with return_indices=True has no soft counterpart")
    m = module
    args = (m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode, _POOL_PADDING.get())
    return soft_max_pool2d(x, temperature, *args)


def _soft_adaptive_max_pool(module: nn.AdaptiveMaxPool2d, temperature: Temperature, x: Tensor) -> Tensor:
    if module.return_indices:
        raise ValueError("pullback: an AdaptiveMaxPool2d with return_indices=True has no soft counterpart")
    return soft_adaptive_max_pool2d(x, temperature, module.output_size)


def _held_gate(module: GateActivation, temperature: Temperature, pre: Tensor, gate: Tensor) -> Tensor:
    """A gated network's value unit ``pre * gate`` with the gate held fixed: the value is exactly
    the module's, the derivative with respect to pre is the gate, at every temperature."""
    return pre * gate.detach()


#: module type -> soft forward ``f(module, temperature, *inputs)``; see the module docstring.
SOFT_FORWARDS: dict[type[nn.Module], Callable[..., Tensor]] = {
    nn.ReLU: _soft_relu,
    nn.LeakyReLU: _soft_leaky_relu,
    nn.MaxPool2d: _soft_max_pool,
    nn.AdaptiveMaxPool2d: _soft_adaptive_max_pool,
    GateActivation: _held_gate,
}


# --- functional calls ------------------------------------------------------------------------------


def _functional_relu(temperature, input, inplace=False):
    return _soft_relu_of(input, temperature)


def _functional_leaky_relu(temperature, input, negative_slope=0.01, inplace=False):
    return _soft_leaky_relu_of(input, temperature, negative_slope)


def _functional_max_pool2d(
    temperature, input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False
):
    args = (kernel_size, stride, padding, dilation, ceil_mode, _POOL_PADDING.get())
    return soft_max_pool2d(input, temperature, *args)


def _functional_adaptive_max_pool2d(temperature, input, output_size, return_indices=False):
    return soft_adaptive_max_pool2d(input, temperature, output_size)


# function -> (the name of its call sites, its soft version ``f(temperature, *args, **kwargs)``)
_FUNCTIONS: dict[Callable, tuple[str, Callable[..., Tensor]]] = {
    **{f: ("relu", _functional_relu) for f in (F.relu, torch.relu, Tensor.relu)},
    **{f: ("relu", _functional_relu) for f in (F.relu_, torch.relu_, Tensor.relu_)},
    **{f: ("leaky_relu", _functional_leaky_relu) for f in (F.leaky_relu, F.leaky_relu_)},
    **{f: ("max_pool2d", _functional_max_pool2d) for f in (F.max_pool2d, torch.max_pool2d)},
    F.adaptive_max_pool2d: ("adaptive_max_pool2d", _functional_adaptive_max_pool2d),
}


def _returns_indices(func: Callable, args: tuple, kwargs: dict) -> bool:
    """Whether a max-pool call asks for indices (``return_indices``, by keyword or position)."""
    if kwargs.get("return_indices"):
        return True
    position = {F.max_pool2d: 6, F.adaptive_max_pool2d: 2}.get(func)
    return position is not None and len(args) > position and bool(args[position])


class CallSites:
    """The call sites of the latest forward pass under :func:`soft_backward` (names in call
    order): ``soft`` were swapped, ``hard`` are functional calls left hard (``functional="hard"``)."""

    def __init__(self) -> None:
        self.soft: list[str] = []
        self.hard: list[str] = []
        self.hard_nodes: set = set()  # autograd nodes of the calls left hard


class _Intercept(TorchFunctionMode):
    """Runs ``on_call(site, soft, hard, first_input, functional)`` for every call of a swapped module and every
    functional call of :data:`_FUNCTIONS` in ``model``'s forward passes: ``soft(temperature)``
    computes the soft version, ``hard()`` the original. Call sites are named as in the module
    docstring; the count restarts at each forward pass of the root module."""

    def __init__(self, model: nn.Module, on_call: Callable) -> None:
        super().__init__()
        self.model, self.on_call = model, on_call
        self.calls: Counter = Counter()
        self.running: list[str] = []  # names of the modules whose forward is running, outermost first
        self.inside = 0  # > 0 while a swapped module runs: its own functional calls are its own

    def site(self, base: str) -> str:
        self.calls[base] += 1
        k = self.calls[base]
        return base if k == 1 else f"{base}@{k}"

    def module_call(self, name: str, module: nn.Module, *inputs) -> Tensor:
        site = self.site(name)
        self.inside += 1
        try:
            return self.on_call(
                site,
                lambda t: SOFT_FORWARDS[type(module)](module, t, *inputs),
                lambda: type(module).forward(module, *inputs),
                inputs[0],
                False,
            )
        finally:
            self.inside -= 1

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        entry = _FUNCTIONS.get(func)
        if entry is None or self.inside or not args or _returns_indices(func, args, kwargs):
            return func(*args, **kwargs)
        label, soft = entry
        owner = self.running[-1] if self.running else ""
        site = self.site(f"{owner}.{label}()" if owner else f"{label}()")
        return self.on_call(
            site, lambda t: soft(t, *args, **kwargs), lambda: func(*args, **kwargs), args[0], True
        )

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Swapped forwards, the module-stack hooks and the function mode, all removed on exit."""
        handles, swapped = [], []

        def enter(name):
            def hook(_module, _inputs):
                if not name:  # the root: a new forward pass
                    self.calls.clear()
                    self.running.clear()
                self.running.append(name)

            return hook

        def leave(_module, _inputs, _output):
            if self.running:
                self.running.pop()

        try:
            for name, module in self.model.named_modules():
                handles.append(module.register_forward_pre_hook(enter(name)))
                handles.append(module.register_forward_hook(leave, always_call=True))
                if type(module) in SOFT_FORWARDS:
                    if "forward" in vars(module):
                        raise ValueError(f"pullback: module {name!r} already has its forward replaced")
                    # An instance attribute shadows the class's forward; deleting it restores it.
                    module.forward = lambda *inputs, name=name, module=module: self.module_call(
                        name, module, *inputs
                    )
                    swapped.append(module)
            with self:
                yield
        finally:
            for module in swapped:
                del module.forward
            for handle in handles:
                handle.remove()


def register_soft_forward(module_type: type[nn.Module], soft_forward: Callable[..., Tensor]) -> None:
    """Swap modules of exactly ``module_type`` for ``soft_forward(module, temperature, *inputs)`` in
    pullbacks. It must return the module's own output in value (use a detach trick as
    ``hard.detach() + (soft - soft.detach())``) and detach every hard part, so that the graph check
    finds no kink; per-neuron temperatures are measured on its first input, channels on dim 1."""
    SOFT_FORWARDS[module_type] = soft_forward


def swapped_modules(model: nn.Module) -> list[str]:
    """Names of the modules whose forward :func:`soft_backward` swaps, in ``named_modules`` order
    (a module called k times gives k call sites, see the module docstring)."""
    return [name for name, module in model.named_modules() if type(module) in SOFT_FORWARDS]


# Smooth modules from torch.nn.modules.activation that are no gate: their gradient stays as it is.
_NOT_GATES = (nn.Softmax, nn.Softmax2d, nn.LogSoftmax, nn.Softmin, nn.MultiheadAttention, nn.Identity)


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


def _check_temperatures(temperature: float | Mapping[str, Tensor]) -> None:
    """ValueError for a global T that is not > 0, or a per-neuron temperature that is NaN or < 0."""
    if not isinstance(temperature, Mapping):
        if not temperature > 0:
            raise ValueError(f"pullback: the temperature must be positive, got {temperature!r}")
        return
    for site, t in temperature.items():
        t = torch.as_tensor(t)
        if t.isnan().any():
            raise ValueError(
                f"pullback: the per-neuron temperatures of call site {site!r} are NaN: they were "
                "measured on a model or probe images with NaN values; measure them again on "
                "finite ones (per_neuron_temperatures)"
            )
        if not (t >= 0).all():
            raise ValueError(f"pullback: per-neuron temperatures of call site {site!r} must be >= 0")


@contextlib.contextmanager
def soft_backward(
    model: nn.Module,
    temperature: float | Mapping[str, Tensor],
    functional: str | None = None,
    pool_padding: str | None = None,
) -> Iterator[CallSites]:
    """Within the block every call site (see the module docstring) runs its soft forward at
    ``temperature``: one float > 0, or a mapping call site -> (C,) tensor >= 0 (0: the hard
    gradient for that channel) for every call site that runs. ``functional`` ("soft" or "hard")
    and ``pool_padding`` ("zeros" or "excluded") default to :func:`options`'. Yields the
    :class:`CallSites` of the latest forward pass; restores the model on exit."""
    functional = _check_choice(functional or _FUNCTIONAL.get(), FUNCTIONAL, "functional")
    pool_padding = _check_choice(pool_padding or _POOL_PADDING.get(), POOL_PADDING, "pool_padding")
    _check_temperatures(temperature)
    sites = CallSites()

    def on_call(site: str, soft, hard, _first_input: Tensor, functional_call: bool) -> Tensor:
        if functional_call and functional == "hard":
            output = hard()
            sites.hard.append(site)
            sites.hard_nodes.add(output.grad_fn)
            return output
        if isinstance(temperature, Mapping):
            if site not in temperature:
                raise ValueError(
                    f"pullback: no per-neuron temperatures for call site {site!r} (they cover "
                    f"{len(temperature)} call sites); measure them on this model with "
                    "per_neuron_temperatures"
                )
            t = temperature[site]
        else:
            t = float(temperature)
        sites.soft.append(site)
        return soft(t)

    intercept = _Intercept(model, on_call)
    # A new forward pass starts new lists: the root's pre-hook clears the call counts.
    model_hook = model.register_forward_pre_hook(lambda *_: _restart(sites))
    token = _POOL_PADDING.set(pool_padding)
    try:
        with intercept.installed():
            yield sites
    finally:
        _POOL_PADDING.reset(token)
        model_hook.remove()


def _restart(sites: CallSites) -> None:
    sites.soft.clear()
    sites.hard.clear()
    sites.hard_nodes.clear()


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
        _refuse_unsupported(model)
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
    if not temperature > 0:
        raise ValueError(f"per_neuron_temperatures: the temperature must be positive, got {temperature!r}")
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

    with _frozen_eval(model), _Intercept(model, record).installed():
        for start in range(0, len(probe_images), batch_size):
            model(probe_images[start : start + batch_size].to(parameter.device, parameter.dtype))
    return {site: temperature * (sums[site] / counts[site]).sqrt() for site in sums}
