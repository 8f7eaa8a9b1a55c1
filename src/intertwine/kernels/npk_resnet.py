"""The neural path kernel of a gated residual network: Lakshminarayanan & Singh's Theorem 3.3.

The paper's ResNet (Section 3.1.3) has b + 2 blocks, b of them with a skip connection: "We
consider a ResNet with" ... "skip connections between the blocks". Definition 3.1 names its 2^b
sub-networks: the J-th keeps the blocks j in J and leaves out the others. The ResNet's NPK is the
sum of theirs, NPK^RES = sum over J in 2^[b] of NPK^J (Appendix B, Lemma B.1, "Sum of Product
Kernel"), because every path runs through exactly one sub-network: "the NPF of the ResNet is a
concatenation of the NPFs of the distinct sub-FC-DNNs" (its proof; the other rendering of the text
reads NPK for NPF). Theorem 3.3 weighs the same kernels by constants beta^J in the limit of the NTK
(those weights are not computed here). The paper's blocks are fully connected "for expository
purposes, and the result continue to hold for any kind of block".

Here the blocks are :func:`intertwine.kernels.npk_conv_gap`'s: gated 3x3 convolutions (stride 1,
padding 1, zero or circular), global average pooling, a linear head; a skip (start, stop) adds the
input of layer ``start`` to the gated output of layer ``stop - 1`` (so the channels there match,
and no pool lies in between: none is allowed anywhere). :func:`npk_resnet_conv_gap` computes the
sum over the 2^b sub-networks without enumerating them: the recursion on T of ``npk_conv_gap``
(T_l(i, i') sums the path features' products over the path prefixes that reach positions i, i')
with ``T_stop = T_start + (the block's T)``, as the prefixes through the skip and through the block
are distinct path features: cost O(layers), not O(2^b layers). :func:`resnet_subnetworks` lists
the sub-networks' layers (the direct sum, with ``npk_conv_gap`` on each, is the test's reference).

Not the zoo's gated ResNet (:mod:`intertwine.models.gated_resnet`): that has a gate after each
residual sum, which gates the skip path too, and strided, zero-padding shortcuts between stages,
so its path features are not those of the theorem's sub-networks (``kernels.has_npk`` is false).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Literal

from torch import Tensor

from intertwine._memory import DEFAULT_MAX_BYTES
from intertwine.kernels.npk_checks import (
    ArrayLike,
    as_batch,
    as_gate_list,
    check_value_input,
    second_batch,
)
from intertwine.kernels.npk_conv import PADDINGS, Batch, as_y_batch, blocked_npk

__all__ = ["npk_resnet_conv_gap", "resnet_subnetworks"]


def _check_skips(skips: Sequence[tuple[int, int]], layers: int) -> list[tuple[int, int]]:
    """The skips as sorted (start, stop) pairs, checked: 0 <= start < stop <= layers, one after the
    other (a block ends before the next begins), and a layer outside every skip (the paper's first
    and last blocks), so that every sub-network has a layer."""
    pairs = [tuple(int(v) for v in skip) for skip in skips]
    if any(len(p) != 2 for p in pairs):
        raise ValueError(f"skips must be (start, stop) pairs of layer indices, got {list(skips)!r}")
    pairs = sorted(pairs)
    end = 0
    for start, stop in pairs:
        if not 0 <= start < stop <= layers:
            raise ValueError(
                f"skip ({start}, {stop}) must satisfy 0 <= start < stop <= {layers} (the number of gated layers)"
            )
        if start < end:
            raise ValueError(
                f"skip ({start}, {stop}) overlaps the one before (ending at layer {end}): the paper's "
                "skips go around consecutive blocks, one after the other"
            )
        end = stop
    if sum(stop - start for start, stop in pairs) == layers:
        raise ValueError(
            "every layer lies inside a skip: keep a layer outside them (the paper's ResNet has a "
            "first and a last block without one), so that every sub-network has a layer"
        )
    return pairs


def resnet_subnetworks(
    layers: int, skips: Sequence[tuple[int, int]]
) -> list[tuple[tuple[int, ...], list[int]]]:
    """The 2^b sub-networks of a ResNet with ``layers`` gated layers and the b ``skips``
    (Definition 3.1): for each subset J of the skips' blocks (indices into the sorted skips), the
    layers the J-th sub-network keeps, in order (a block kept, or left out for its skip).

    Parameters
    ----------
    layers : int
        The ResNet's gated layers.
    skips : sequence of (start, stop)
        Its identity skips, as :func:`npk_resnet_conv_gap` takes them (checked alike).

    Returns
    -------
    list of (J, layers)
        J a tuple of block indices (kept blocks), layers a list of layer indices; 2^b entries.
    """
    pairs = _check_skips(skips, layers)
    inside = {layer: j for j, (start, stop) in enumerate(pairs) for layer in range(start, stop)}
    out = []
    for size in range(len(pairs) + 1):
        for kept in itertools.combinations(range(len(pairs)), size):
            out.append(
                (kept, [layer for layer in range(layers) if layer not in inside or inside[layer] in kept])
            )
    return out


def npk_resnet_conv_gap(
    x: ArrayLike,
    gates: Sequence[ArrayLike],
    skips: Sequence[tuple[int, int]],
    y: ArrayLike | None = None,
    gates_y: Sequence[ArrayLike] | None = None,
    *,
    padding: Literal["zeros", "circular"] = "zeros",
    value_input: Literal["x", "ones"] = "x",
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Tensor:
    """The neural path kernel of a convolutional gated ResNet with global average pooling, the sum
    of its 2^b sub-networks' (module docstring): (N, N) on ``x``, or (N, N') with ``y``, float64.

    Parameters
    ----------
    x : Tensor or ndarray, shape (N, C_0, H, W)
        The inputs, finite.
    gates : sequence of Tensor or ndarray, each shape (N, C_l, H, W)
        The gates of each gated 3x3 convolution on ``x``, in order, hard or soft; all at the input's
        H x W (no pools).
    skips : sequence of (start, stop)
        The identity skips: the input of layer ``start`` is added to the gated output of layer
        ``stop - 1`` (their channels must match); one after the other, a layer outside them all.
    y, gates_y : optional
        A second batch and its gates; given together or not at all.
    padding : {"zeros", "circular"}
        The convolutions' padding.
    value_input : {"x", "ones"}
        What the value network is fed: the input itself, or ones of its shape.
    max_bytes : int
        The bound on a block of pairs' float64 arrays (one pair at least).

    Returns
    -------
    Tensor, shape (N, N) or (N, N')
        The neural path kernel, float64, on the device of ``x``.
    """
    check_value_input(value_input)
    if padding not in PADDINGS:
        raise ValueError(f"padding must be one of {PADDINGS}, got {padding!r}")
    xs = as_batch(x, "x", 4)
    gx = as_gate_list(gates, "gates", xs.shape[0], 4, xs.device)
    pairs = _check_skips(skips, len(gx))
    for l, g in enumerate(gx):
        if g.shape[2:] != xs.shape[2:]:
            raise ValueError(
                f"gates[{l}] is {tuple(g.shape[2:])} but the input {tuple(xs.shape[2:])}: a ResNet's "
                "layers here keep the input's size (no pools: a skip would have to pool too)"
            )
    for start, stop in pairs:
        before = xs.shape[1] if start == 0 else gx[start - 1].shape[1]
        if gx[stop - 1].shape[1] != before:
            raise ValueError(
                f"skip ({start}, {stop}) adds {before} channels to layer {stop - 1}'s {gx[stop - 1].shape[1]}: "
                "an identity skip needs the same channels at both ends"
            )
    bx = by = Batch(xs, gx, [None] * len(gx))
    symmetric = not second_batch(y, gates_y)
    if not symmetric:
        by, _ = as_y_batch(bx, [None] * len(gx), y, gates_y, None, None, None)
    sizes, pools = [None] * len(gx), [False] * len(gx)
    return blocked_npk(bx, by, symmetric, sizes, pools, padding, value_input, max_bytes, pairs)
