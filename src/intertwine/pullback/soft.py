"""The soft forwards: each swapped ReLU, LeakyReLU, max-pool and gated value unit, as a module
(``SOFT_FORWARDS``) and as a functional call, computing the hard value with the soft gradient; the
``functional`` and ``pool_padding`` choices and their defaults (``options``). "The module
docstring" below is the package's, :mod:`intertwine.pullback`."""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from intertwine.models.gated import GateActivation

#: How functional ReLU and max-pool calls are treated: swapped ("soft"), or left hard as the paper's
#: released code leaves them ("hard").
FUNCTIONAL = ("soft", "hard")
#: A padded soft max-pool's padding: zeros in the softmax (the paper's Listing 2) or excluded.
POOL_PADDING = ("zeros", "excluded")


Temperature = float | Tensor

# The defaults of pullback's ``functional`` and ``pool_padding`` (see :func:`options`).
FUNCTIONAL_OPTION = contextvars.ContextVar("functional", default="soft")
POOL_PADDING_OPTION = contextvars.ContextVar("pool_padding", default="zeros")


def check_choice(value: str, choices: tuple[str, ...], what: str) -> str:
    if value not in choices:
        raise ValueError(f"pullback: {what} must be one of {choices}, got {value!r}")
    return value


@contextlib.contextmanager
def options(functional: str | None = None, pool_padding: str | None = None) -> Iterator[None]:
    """Within the block, :func:`pullback` and :func:`soft_backward` default to these ``functional``
    and ``pool_padding`` values (None: leave the current one), so that code calling pullbacks
    through other functions (the study's measurements) follows one setting.

    Parameters
    ----------
    functional : str or None, default None
        "soft" or "hard": whether functional ReLU and max-pool calls are swapped.
    pool_padding : str or None, default None
        "zeros" or "excluded": what a padded soft max-pool does with its padding.

    Returns
    -------
    contextlib.AbstractContextManager[None]
        A context manager that sets these defaults for its block and restores the previous ones on
        exit; another value is a ValueError on entry.
    """
    tokens = []
    try:
        if functional is not None:
            tokens.append(
                (FUNCTIONAL_OPTION, FUNCTIONAL_OPTION.set(check_choice(functional, FUNCTIONAL, "functional")))
            )
        if pool_padding is not None:
            tokens.append(
                (
                    POOL_PADDING_OPTION,
                    POOL_PADDING_OPTION.set(check_choice(pool_padding, POOL_PADDING, "pool_padding")),
                )
            )
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def channel_view(temperature: Temperature, x: Tensor) -> Temperature:
    """A per-channel temperature shaped to broadcast against ``x`` along dim 1; a float as it is.

    Parameters
    ----------
    temperature : float or Tensor
        A float, or a (C,) tensor of per-channel temperatures.
    x : Tensor
        The (N, C, ...) tensor it scales.

    Returns
    -------
    float or Tensor
        The float itself, or the tensor on ``x``'s device and dtype, shaped (1, C, 1, ...) as ``x``.
    """
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
    check_choice(pool_padding, POOL_PADDING, "pool_padding")
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
    ``temperature`` in gradient; x (N, C, H, W) or (C, H, W).

    Parameters
    ----------
    x : Tensor
        (N, C, H, W) or (C, H, W) input.
    temperature : float or Tensor
        A float, or a (C,) tensor (0: the hard max's gradient for that channel).
    output_size : int or tuple
        As ``F.adaptive_max_pool2d``.

    Returns
    -------
    Tensor
        The pooled tensor, equal to ``F.adaptive_max_pool2d``'s output.
    """
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
    args = (m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode, POOL_PADDING_OPTION.get())
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
    args = (kernel_size, stride, padding, dilation, ceil_mode, POOL_PADDING_OPTION.get())
    return soft_max_pool2d(input, temperature, *args)


def _functional_adaptive_max_pool2d(temperature, input, output_size, return_indices=False):
    return soft_adaptive_max_pool2d(input, temperature, output_size)


# function -> (the name of its call sites, its soft version ``f(temperature, *args, **kwargs)``)
SWAPPED_FUNCTIONS: dict[Callable, tuple[str, Callable[..., Tensor]]] = {
    **{f: ("relu", _functional_relu) for f in (F.relu, torch.relu, Tensor.relu)},
    **{f: ("relu", _functional_relu) for f in (F.relu_, torch.relu_, Tensor.relu_)},
    **{f: ("leaky_relu", _functional_leaky_relu) for f in (F.leaky_relu, F.leaky_relu_)},
    **{f: ("max_pool2d", _functional_max_pool2d) for f in (F.max_pool2d, torch.max_pool2d)},
    F.adaptive_max_pool2d: ("adaptive_max_pool2d", _functional_adaptive_max_pool2d),
}


def returns_indices(func: Callable, args: tuple, kwargs: dict) -> bool:
    """Whether a max-pool call asks for indices (``return_indices``, by keyword or position)."""
    if kwargs.get("return_indices"):
        return True
    position = {F.max_pool2d: 6, F.adaptive_max_pool2d: 2}.get(func)
    return position is not None and len(args) > position and bool(args[position])


def register_soft_forward(module_type: type[nn.Module], soft_forward: Callable[..., Tensor]) -> None:
    """Swap modules of exactly ``module_type`` for ``soft_forward(module, temperature, *inputs)`` in
    pullbacks. It must return the module's own output in value (use a detach trick as
    ``hard.detach() + (soft - soft.detach())``) and detach every hard part, so that the graph check
    finds no kink; per-neuron temperatures are measured on its first input, channels on dim 1.

    Parameters
    ----------
    module_type : type[nn.Module]
        The module class (exact type: subclasses are not swapped).
    soft_forward : Callable[..., Tensor]
        ``soft_forward(module, temperature, *inputs)`` -> the output; ``temperature`` is a float or
        a (C,) tensor.

    Returns
    -------
    None
        The entry goes into ``SOFT_FORWARDS``, for every later pullback, replacing any earlier one.
    """
    SOFT_FORWARDS[module_type] = soft_forward
