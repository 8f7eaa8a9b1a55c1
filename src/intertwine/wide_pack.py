"""K members of one architecture as one wide network: every convolution a grouped convolution over
the members' channels side by side, every batch norm one batch norm over all of them, every linear
layer a batched matrix product. Member k's image b sits at batch index b, channels k C .. (k+1) C, so
each member sees only its own channels, its own weights and its own batch-norm statistics (a batch
norm normalises each channel over the batch, and member k's channels hold member k's batch alone).

The wide network is a plain ``nn.Module`` of plain parameters: the optimiser is one fused step over
it, it runs channels-last and in bf16, and a CUDA graph can capture its training step. ``widen``
builds it layer by layer; a layer it cannot widen, or a forward that mixes the members' channels (a
concatenation, a channel shuffle), is refused with the reason, and the pack is run by
``torch.func.vmap`` instead (``intertwine.packed_training``). Each wide network is checked against
its members on random inputs before it is used.
"""

from __future__ import annotations

import contextlib
import copy

import torch
import torch.nn.functional as F
from torch import nn

from intertwine.models.gated import GateActivation, GatedMaxPool
from intertwine.models.resnet import ZeroPadShortcut

__all__ = ["WideLinear", "WideZeroPad", "member_state", "widen", "widen_problem"]


class WideLinear(nn.Module):
    """K linear layers side by side: input (B, K in_features) to output (B, K out_features). The
    weight is the members' weights stacked, (K out_features, in_features), like a grouped
    convolution's."""

    def __init__(self, members: list[nn.Linear]) -> None:
        super().__init__()
        self.k, self.out_features = len(members), members[0].out_features
        self.weight = nn.Parameter(torch.cat([m.weight.detach() for m in members]))
        self.bias = (
            nn.Parameter(torch.cat([m.bias.detach() for m in members]))
            if members[0].bias is not None
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch = x.shape[0]
        per_member = x.reshape(batch, self.k, -1).transpose(0, 1)  # (K, B, in)
        weight = self.weight.view(self.k, self.out_features, -1).transpose(1, 2)  # (K, in, out)
        if self.bias is None:
            out = torch.bmm(per_member, weight)
        else:
            out = torch.baddbmm(self.bias.view(self.k, 1, -1), per_member, weight)
        return out.transpose(0, 1).reshape(batch, -1)


class WideZeroPad(nn.Module):
    """K option-A shortcuts side by side (``models.resnet.ZeroPadShortcut``): each member's channels
    subsampled and zero-padded within its own block of channels."""

    def __init__(self, member: nn.Module, k: int) -> None:
        super().__init__()
        self.k, self.stride = k, member.stride
        self.pad_before, self.pad_after = member.pad_before, member.pad_after

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, :, :: self.stride, :: self.stride]
        batch, channels, h, w = x.shape
        padded = F.pad(
            x.reshape(batch, self.k, channels // self.k, h, w), (0, 0, 0, 0, self.pad_before, self.pad_after)
        )
        return padded.reshape(batch, -1, h, w)


# Modules with no parameters whose output at a channel depends on that channel alone (or that are
# containers, whose children are widened one by one): they run on the wide tensor as they are.
_CHANNELWISE = (
    nn.Identity,
    nn.ReLU,
    nn.LeakyReLU,
    nn.GELU,
    nn.SiLU,
    nn.Tanh,
    nn.Sigmoid,
    nn.Softplus,
    nn.ELU,
    nn.MaxPool2d,
    nn.AvgPool2d,
    nn.AdaptiveMaxPool2d,
    nn.AdaptiveAvgPool2d,
    nn.Flatten,
    GateActivation,  # a product with a gate of the same shape
    GatedMaxPool,  # a gather within each channel
)


def _wide_conv(members: list[nn.Conv2d]) -> nn.Conv2d:
    first = members[0]
    if first.padding_mode != "zeros":
        raise ValueError(f"a convolution with padding_mode {first.padding_mode!r}")
    k = len(members)
    wide = nn.Conv2d(
        k * first.in_channels,
        k * first.out_channels,
        first.kernel_size,
        stride=first.stride,
        padding=first.padding,
        dilation=first.dilation,
        groups=k * first.groups,
        bias=first.bias is not None,
        device=first.weight.device,
        dtype=first.weight.dtype,
    )
    with torch.no_grad():
        wide.weight.copy_(torch.cat([m.weight for m in members]))
        if first.bias is not None:
            wide.bias.copy_(torch.cat([m.bias for m in members]))
    return wide


def _wide_batch_norm(members: list[nn.BatchNorm2d]) -> nn.BatchNorm2d:
    first = members[0]
    if not first.track_running_stats:
        raise ValueError("a batch norm without running statistics")
    counts = {int(m.num_batches_tracked) for m in members}
    if len(counts) != 1:
        raise ValueError(f"batch norms that have seen different numbers of batches ({sorted(counts)})")
    wide = nn.BatchNorm2d(
        len(members) * first.num_features,
        eps=first.eps,
        momentum=first.momentum,
        affine=first.affine,
        device=first.running_mean.device,
        dtype=first.running_mean.dtype,
    )
    with torch.no_grad():
        for name in ("running_mean", "running_var") + (("weight", "bias") if first.affine else ()):
            getattr(wide, name).copy_(torch.cat([getattr(m, name) for m in members]))
        wide.num_batches_tracked.fill_(counts.pop())
    return wide


def _widen_module(members: list[nn.Module]) -> nn.Module:
    """The wide form of one module of the K members (a ValueError naming what cannot be widened)."""
    first = members[0]
    if isinstance(first, nn.Conv2d):
        return _same_requires_grad(_wide_conv(members), first)
    if isinstance(first, nn.BatchNorm2d):
        return _same_requires_grad(_wide_batch_norm(members), first)
    if isinstance(first, nn.Linear):
        return _same_requires_grad(WideLinear(members), first)
    if isinstance(first, ZeroPadShortcut):
        return WideZeroPad(first, len(members))
    own = list(first.named_parameters(recurse=False)) + list(first.named_buffers(recurse=False))
    if own:
        raise ValueError(f"{type(first).__name__} holds its own tensors ({own[0][0]!r})")
    if isinstance(first, _CHANNELWISE):
        return _shell(first)
    if not list(first.children()) and type(first).forward is not nn.Module.forward:
        raise ValueError(f"{type(first).__name__} is not known to act on each channel alone")
    wide = _shell(first)
    for name in first._modules:
        wide._modules[name] = _widen_module([m.get_submodule(name) for m in members])
    return wide


def _shell(module: nn.Module) -> nn.Module:
    """A copy of ``module`` that shares its attributes but none of its dictionaries (children,
    hooks), so that filling it with wide children leaves the member as it was."""
    shell = copy.copy(module)
    shell.__dict__ = {
        name: value.copy() if isinstance(value, dict) else value for name, value in module.__dict__.items()
    }
    return shell


def _same_requires_grad(wide: nn.Module, member: nn.Module) -> nn.Module:
    """A frozen member layer (a gated network's feature network) stays frozen when widened."""
    for name, parameter in wide.named_parameters():
        parameter.requires_grad_(member.get_parameter(name).requires_grad)
    return wide


def widen(models: list[nn.Module]) -> nn.Module:
    """One wide network holding the K ``models`` (one architecture) side by side; see the module
    docstring. Its input is (B, K C, H, W), member k's batch in channels k C .. (k+1) C; its output
    (B, K classes). Parameters and buffers keep the members' names, stacked along their first
    dimension (``member_state`` takes member k's back out). The models are not changed.

    Raises ValueError naming the first module that cannot be widened; ``widen_problem`` also
    checks the forward."""
    wide = _widen_module(models)
    wide.train(models[0].training)
    return wide


def member_state(wide: nn.Module, k: int, n_members: int) -> dict[str, torch.Tensor]:
    """Member k's weights, keyed like its own ``state_dict()``: views into the wide network's."""
    return {
        name: tensor if tensor.ndim == 0 else tensor.unflatten(0, (n_members, -1))[k]
        for name, tensor in wide.state_dict().items()
    }


def widen_problem(models: list[nn.Module], example: torch.Tensor) -> str | None:
    """Why the ``models`` cannot run as one wide network, or None: a module ``widen`` refuses, or
    a wide forward (train and eval mode, on a different input per member) that differs from the
    members' own. Runs on copies: the models are left as they were.

    Parameters
    ----------
    models : list[nn.Module]
        The pack's members, of one architecture.
    example : Tensor
        A normalised input batch (B, C, H, W); member k gets it shifted by k / 10.

    Returns
    -------
    str or None
        The reason, or None when the wide network computes what its members do.
    """
    models = [copy.deepcopy(m).float() for m in models]
    try:
        wide = widen(models)
    except ValueError as err:
        return f"it cannot be widened: {err}"
    inputs = [example.float() + k / 10 for k in range(len(models))]
    stacked = torch.stack(inputs, dim=1).flatten(1, 2)  # (B, K C, H, W)
    for training in (True, False):
        for module in [wide, *models]:
            module.train(training)
        # Full float32 on a GPU too (TensorFloat-32 would round grouped and single convolutions
        # apart by about 1e-3): a channel mixed up is off by the output's own size.
        with torch.no_grad(), torch.backends.cudnn.flags(enabled=True, allow_tf32=False), _no_tf32_matmul():
            try:
                out = wide(stacked).unflatten(1, (len(models), -1)).transpose(0, 1)
            except Exception as err:  # noqa: BLE001 - any forward that assumes its own channels
                return (
                    f"its forward fails on the wide tensor ({type(err).__name__}: {str(err).splitlines()[0]})"
                )
            alone = torch.stack([m(x) for m, x in zip(models, inputs)])
        # A member whose weights are not finite (one that diverged) gives NaN in its own outputs only.
        scale = alone.nan_to_num(0.0, 0.0, 0.0).abs().max().item()
        close = out.shape == alone.shape and torch.allclose(
            out, alone, rtol=1e-4, atol=1e-4 * max(scale, 1.0), equal_nan=True
        )
        if not close:
            return "its forward mixes the members' channels (the wide output differs from the members')"
    return None


@contextlib.contextmanager
def _no_tf32_matmul():
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
