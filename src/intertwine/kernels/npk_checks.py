"""The input checks of the neural path kernels (:mod:`intertwine.kernels.npk` and
:mod:`intertwine.kernels.npk_conv`): arrays to detached tensors, batches with samples first, the
gates of each layer, a second batch and its layers.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

ArrayLike = Tensor | np.ndarray
F64 = torch.float64
_VALUE_INPUTS = ("x", "ones")


def as_tensor(a: ArrayLike, name: str, promote: bool = True) -> Tensor:
    """A detached real tensor (numpy arrays and lists converted), bool and integer promoted to
    float64 unless ``promote`` is false."""
    t = (a if isinstance(a, Tensor) else torch.as_tensor(np.asarray(a))).detach()
    if t.is_meta:
        raise ValueError(f"{name} is a meta tensor (a shape without data); pass the actual values")
    if t.is_complex():
        raise ValueError(f"{name} must be real, got {t.dtype}")
    if promote and not t.is_floating_point():
        t = t.to(F64)
    return t


def as_batch(a: ArrayLike, name: str, ndim: int | None = None, device=None, promote: bool = True) -> Tensor:
    """(N, ...) tensor with N >= 1 and finite entries; exactly ``ndim`` axes when given."""
    t = as_tensor(a, name, promote)
    if device is not None:
        t = t.to(device)
    if ndim is not None and t.ndim != ndim:
        layout = {2: "(N, features)", 4: "(N, C, H, W)"}.get(ndim, f"{ndim} axes")
        raise ValueError(f"{name} must have shape {layout}, got {tuple(t.shape)}")
    if t.ndim < 2:
        raise ValueError(
            f"{name} must have shape (N, ...) with samples on the first axis, got {tuple(t.shape)}; "
            "reshape a single sample to (1, ...)"
        )
    if t.shape[0] == 0 or t[0].numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(t.shape)}): a kernel needs N >= 1 nonempty samples")
    if t.is_floating_point() and not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name} contains NaN or infinite values")
    return t


def check_value_input(value_input: str) -> None:
    if value_input not in _VALUE_INPUTS:
        raise ValueError(
            f"value_input must be one of {_VALUE_INPUTS} (what the value network is fed: the input "
            f"itself, or ones of its shape), got {value_input!r}"
        )


def as_gate_list(gates, name: str, n: int, ndim: int | None, device) -> list[Tensor]:
    if isinstance(gates, (Tensor, np.ndarray)):
        raise TypeError(f"{name} must be a list with one gate tensor per layer, got a single array")
    gates = list(gates)
    if not gates:
        raise ValueError(
            f"{name} is empty: pass one gate tensor per gated layer (a network without gates is "
            "linear and its kernel is <x, x'>)"
        )
    out = [as_batch(g, f"{name}[{l}]", ndim, device) for l, g in enumerate(gates)]
    for l, g in enumerate(out):
        if g.shape[0] != n:
            raise ValueError(
                f"{name}[{l}] has {g.shape[0]} samples but its input has {n}: the gates must be those "
                "of the same inputs, in the same order"
            )
        _check_gate_range(g, f"{name}[{l}]")
    return out


def _check_gate_range(g: Tensor, name: str) -> None:
    """Gates are on/off values or their soft forms, in [0, 1]: a negative gate or one above 1
    (pre-activations or activations passed in their place) makes a kernel of no network, silently."""
    low, high = float(g.min()), float(g.max())
    if low < 0.0 or high > 1.0:
        raise ValueError(
            f"{name} has values in [{low:.4g}, {high:.4g}], but a gate is in [0, 1] (1{{q > 0}} or "
            "sigmoid(beta q) of the pre-activation q); pass gates, not pre-activations or "
            "activations: intertwine.kernels.gates_from_preactivations(q) makes them"
        )


def second_batch(y, gates_y) -> bool:
    """Whether a second batch is given; both of y and gates_y or neither."""
    if (y is None) != (gates_y is None):
        given, missing = ("y", "gates_y") if gates_y is None else ("gates_y", "y")
        raise ValueError(f"{given} is given without {missing}: pass both (a second batch) or neither")
    return y is not None


def check_same_layers(gx: list[Tensor], gy: list[Tensor]) -> None:
    if len(gx) != len(gy):
        raise ValueError(
            f"gates has {len(gx)} layers but gates_y has {len(gy)}: both batches go through the same "
            "network, so pass the gates of the same layers"
        )
    for l, (a, b) in enumerate(zip(gx, gy)):
        if a.shape[1:] != b.shape[1:]:
            raise ValueError(
                f"layer {l}: gates has units of shape {tuple(a.shape[1:])} but gates_y "
                f"{tuple(b.shape[1:])}; the gates of both batches must come from the same layers"
            )
