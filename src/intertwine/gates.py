"""Binary activation patterns (the gates of a ReLU network) on a probe set, for the
excitation-pullback paper's path stability hypothesis (Hypothesis 1): recorded while the zoo trains,
so kept apart from :mod:`intertwine.pullback`, whose soft backward passes the zoo never runs (the
zoo's code identity reaches this module only).

A *call site* is named as :mod:`intertwine.pullback` names it: a ReLU or LeakyReLU module by its
name, its k-th call in one forward pass ``name@k`` (torchvision's Bottleneck calls one ``relu``
three times); a functional ``F.relu`` / ``torch.relu`` / ``Tensor.relu`` / ``F.leaky_relu`` call by
the module whose forward makes it, ``owner.relu()`` (``relu()`` at the root). A module's own
functional call is its call, not a second site.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

__all__ = ["gate_patterns"]

_GATE_MODULES = (nn.ReLU, nn.LeakyReLU)
_GATE_FUNCTIONS = {
    **{f: "relu" for f in (F.relu, torch.relu, Tensor.relu, F.relu_, torch.relu_, Tensor.relu_)},
    **{f: "leaky_relu" for f in (F.leaky_relu, F.leaky_relu_)},
}


class _Recorder(TorchFunctionMode):
    """Calls ``record(site, pre_activation)`` at every ReLU-like call of ``model``'s forward passes."""

    def __init__(self, model: nn.Module, record) -> None:
        super().__init__()
        self.model, self.record = model, record
        self.calls: Counter = Counter()
        self.running: list[str] = []
        self.inside = 0  # > 0 while a gate module runs: its own functional call is its call

    def site(self, base: str) -> str:
        self.calls[base] += 1
        return base if self.calls[base] == 1 else f"{base}@{self.calls[base]}"

    def __torch_function__(self, func, types, args=(), kwargs=None):
        label = _GATE_FUNCTIONS.get(func)
        if label is not None and not self.inside and args:
            owner = self.running[-1] if self.running else ""
            self.record(self.site(f"{owner}.{label}()" if owner else f"{label}()"), args[0])
        return func(*args, **(kwargs or {}))

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        handles = []

        def enter(name, gate):
            def hook(_module, inputs):
                if not name:  # the root: a new forward pass
                    self.calls.clear()
                    self.running.clear()
                self.running.append(name)
                if gate:
                    self.record(self.site(name), inputs[0])
                    self.inside += 1

            return hook

        def leave(gate):
            def hook(_module, _inputs, _output):
                if self.running:
                    self.running.pop()
                if gate:
                    self.inside -= 1

            return hook

        try:
            for name, module in self.model.named_modules():
                gate = isinstance(module, _GATE_MODULES)
                handles.append(module.register_forward_pre_hook(enter(name, gate)))
                handles.append(module.register_forward_hook(leave(gate), always_call=True))
            with self:
                yield
        finally:
            for handle in handles:
                handle.remove()


@torch.no_grad()
def gate_patterns(model: nn.Module, images: Tensor, batch_size: int = 256) -> dict[str, Tensor]:
    """The binary activation pattern of ``model`` on ``images``: at every ReLU or LeakyReLU call
    site (module docstring), whether each pre-activation is positive.

    Parameters
    ----------
    model : the network, run in eval mode (every module's mode restored afterwards; nothing else
        changes, and no random number is drawn).
    images : (N, ...) inputs, moved to the model's first parameter's device and dtype.
    batch_size : images per forward pass.

    Returns
    -------
    Call site name -> CPU bool tensor (N, ...) of the pre-activation's shape, in call order;
    max-pools are not gates. A model without a ReLU call gives an empty dict.
    """
    parameter = next(model.parameters())
    parts: dict[str, list[Tensor]] = {}

    def record(site: str, z: Tensor) -> None:
        parts.setdefault(site, []).append((z.detach() > 0).cpu())

    modes = [(module, module.training) for module in model.modules()]
    try:
        model.eval()
        with _Recorder(model, record).installed():
            for start in range(0, len(images), batch_size):
                model(images[start : start + batch_size].to(parameter.device, parameter.dtype))
    finally:
        for module, training in modes:
            module.training = training
    return {site: torch.cat(chunks) for site, chunks in parts.items()}
