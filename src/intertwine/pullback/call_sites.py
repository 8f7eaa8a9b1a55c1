"""Finding and swapping the call sites of a forward pass: the module and function interception
(``Intercept``), ``soft_backward`` and the checks of what it swaps. "The module docstring" below
is the package's, :mod:`intertwine.pullback`."""

from __future__ import annotations

import contextlib
import math
import numbers
from collections import Counter
from collections.abc import Callable, Iterator, Mapping

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from intertwine.pullback.soft import (
    FUNCTIONAL,
    FUNCTIONAL_OPTION,
    POOL_PADDING,
    POOL_PADDING_OPTION,
    SOFT_FORWARDS,
    SWAPPED_FUNCTIONS,
    check_choice,
    returns_indices,
)


class CallSites:
    """The call sites of the latest forward pass under :func:`soft_backward` (names in call
    order): ``soft`` were swapped, ``hard`` are functional calls left hard (``functional="hard"``)."""

    def __init__(self) -> None:
        self.soft: list[str] = []
        self.hard: list[str] = []
        self.hard_nodes: set = set()  # autograd nodes of the calls left hard


class Intercept(TorchFunctionMode):
    """Runs ``on_call(site, soft, hard, first_input, functional)`` for every call of a swapped module and every
    functional call of :data:`SWAPPED_FUNCTIONS` in ``model``'s forward passes: ``soft(temperature)``
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
        entry = SWAPPED_FUNCTIONS.get(func)
        if entry is None or self.inside or not args or returns_indices(func, args, kwargs):
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


def swapped_modules(model: nn.Module) -> list[str]:
    """Names of the modules whose forward :func:`soft_backward` swaps, in ``named_modules`` order
    (a module called k times gives k call sites, see the module docstring).

    Parameters
    ----------
    model : nn.Module
        Any network.

    Returns
    -------
    list[str]
        The names of its modules whose exact type is in ``SOFT_FORWARDS``.
    """
    return [name for name, module in model.named_modules() if type(module) in SOFT_FORWARDS]


# Smooth modules from torch.nn.modules.activation that are no gate: their gradient stays as it is.
_NOT_GATES = (nn.Softmax, nn.Softmax2d, nn.LogSoftmax, nn.Softmin, nn.MultiheadAttention, nn.Identity)


def refuse_unsupported(model: nn.Module) -> None:
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


def global_temperature(temperature, caller: str) -> float:
    """The one temperature T as a float: a TypeError names what is not one real number (a string,
    None, a tensor of several values), a ValueError a T that is not finite and > 0."""
    if isinstance(temperature, Tensor) and temperature.numel() == 1 and not temperature.is_meta:
        temperature = temperature.item()
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real):
        raise TypeError(
            f"{caller}: temperature must be one number > 0, got {temperature!r} "
            f"({type(temperature).__name__}); write it as a float (e.g. 0.3). One temperature per "
            "channel is mode='per_neuron' with temperatures=per_neuron_temperatures(...)"
        )
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"{caller}: the temperature must be positive and finite, got {temperature!r}")
    return float(temperature)


def _check_temperatures(temperature: float | Mapping[str, Tensor]) -> None:
    """TypeError or ValueError for a global T that is not one number > 0 (``global_temperature``),
    or a per-neuron temperature that is not a vector of numbers, NaN or < 0."""
    if not isinstance(temperature, Mapping):
        global_temperature(temperature, "pullback")
        return
    for site, t in temperature.items():
        if isinstance(t, numbers.Real) and not isinstance(t, bool):
            t = torch.tensor(float(t))  # one number: every channel of the call site at that T
        elif not isinstance(t, Tensor) or t.dim() != 1 or t.dtype == torch.bool or t.is_complex():
            raise TypeError(
                f"pullback: temperatures[{site!r}] must be a 1-d tensor of real numbers, one per "
                f"channel of the call site (or one number for all), got {_describe(t)}; measure them with per_neuron_temperatures"
            )
        if t.isnan().any():
            raise ValueError(
                f"pullback: the per-neuron temperatures of call site {site!r} are NaN: they were "
                "measured on a model or probe images with NaN values; measure them again on "
                "finite ones (per_neuron_temperatures)"
            )
        if not (t >= 0).all():
            raise ValueError(f"pullback: per-neuron temperatures of call site {site!r} must be >= 0")


def _describe(value) -> str:
    if isinstance(value, Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return f"{value!r} ({type(value).__name__})"


def _check_width(site: str, t: Tensor, first_input: Tensor) -> None:
    """ValueError for per-neuron temperatures of another width than the call site's channels."""
    channels = first_input.shape[1] if first_input.dim() > 1 else None
    if channels is None or t.shape != (channels,):
        raise ValueError(
            f"pullback: temperatures[{site!r}] has {t.numel()} values but call site {site!r} has "
            f"{channels} channels (its input is {tuple(first_input.shape)}): the temperatures were "
            "measured on another model; measure them on this one with per_neuron_temperatures"
        )


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
    :class:`CallSites` of the latest forward pass; restores the model on exit.

    Parameters
    ----------
    model : nn.Module
        The network; its swapped forwards and hooks are removed on exit.
    temperature : float or Mapping[str, Tensor]
        One temperature > 0, or call site -> (C,) tensor >= 0.
    functional : str or None, default None
        "soft" (functional ReLU and max-pool calls are swapped too) or "hard" (they are left hard);
        None: the :func:`options` default.
    pool_padding : str or None, default None
        "zeros" or "excluded"; None: the :func:`options` default.

    Returns
    -------
    contextlib.AbstractContextManager[CallSites]
        A context manager: ``with soft_backward(...) as sites`` binds the :class:`CallSites` that
        each forward pass in the block fills anew.
    """
    functional = check_choice(functional or FUNCTIONAL_OPTION.get(), FUNCTIONAL, "functional")
    pool_padding = check_choice(pool_padding or POOL_PADDING_OPTION.get(), POOL_PADDING, "pool_padding")
    _check_temperatures(temperature)
    sites = CallSites()

    def on_call(site: str, soft, hard, first_input: Tensor, functional_call: bool) -> Tensor:
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
            if isinstance(t, Tensor):
                _check_width(site, t, first_input)
        else:
            t = float(temperature)
        sites.soft.append(site)
        return soft(t)

    intercept = Intercept(model, on_call)
    # A new forward pass starts new lists: the root's pre-hook clears the call counts.
    model_hook = model.register_forward_pre_hook(lambda *_: _restart(sites))
    token = POOL_PADDING_OPTION.set(pool_padding)
    try:
        with intercept.installed():
            yield sites
    finally:
        POOL_PADDING_OPTION.reset(token)
        model_hook.remove()


def _restart(sites: CallSites) -> None:
    sites.soft.clear()
    sites.hard.clear()
    sites.hard_nodes.clear()
