"""The neural path kernel of a convolutional gated network with global average pooling (or a global
selection), ``npk_conv_gap`` (re-exported by :mod:`intertwine.kernels.npk`, whose docstring gives
the recursion): where the average pools are, the selection pools' indices and their checks, and
the recursion on T for blocks of pairs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, NamedTuple

import numpy as np
import torch
from torch import Tensor

from intertwine._memory import DEFAULT_MAX_BYTES
from intertwine.kernels.npk_checks import (
    F64,
    ArrayLike,
    as_batch,
    as_gate_list,
    as_tensor,
    check_same_layers,
    check_value_input,
    second_batch,
)

__all__ = ["npk_conv_gap"]

PADDINGS = ("zeros", "circular")

# T for a block of bn x bm pairs is held as (bn, H, W, bm, H, W): the gate gram is then one matmul
# with no transposed copy, and the shifts of L act on axes (1, 2) and (4, 5) together.


def _derive_pools(
    x_shape: tuple[int, ...], gates: list[Tensor], sizes: list[tuple[int, int] | None]
) -> list[bool]:
    """Whether a 2x2 average pool precedes each layer, read off the spatial sizes: the same size
    as the map before (the input, the layer before, or the selection pool after it) means no pool,
    floor-halved means a pool."""
    pools, (h, w) = [], x_shape[2:]
    for l, g in enumerate(gates):
        gh, gw = g.shape[2:]
        if (gh, gw) == (h, w):
            pools.append(False)
        elif (gh, gw) == (h // 2, w // 2) and gh > 0 and gw > 0:
            pools.append(True)
        else:
            if l == 0:
                before = "the input"
            elif sizes[l - 1] is not None:
                before = f"the selection pool after gates[{l - 1}]"
            else:
                before = f"gates[{l - 1}]"
            raise ValueError(
                f"gates[{l}] is {gh}x{gw} but {before} is {h}x{w}: a layer keeps the size of the map "
                f"before (3x3 convolutions with padding 1) or halves it after a 2x2 average pool "
                f"({h // 2}x{w // 2})"
            )
        h, w = sizes[l] if sizes[l] is not None else (gh, gw)
    return pools


def _as_index(a, name: str, device) -> Tensor:
    """An int64 index tensor on ``device``; booleans and floats are refused."""
    t = as_tensor(a, name, promote=False)
    if t.dtype == torch.bool or t.is_floating_point():
        raise ValueError(
            f"{name} must hold integer indices (as max_pool2d(..., return_indices=True) returns them), "
            f"got {t.dtype}"
        )
    return t.to(device=device, dtype=torch.int64)


def _check_range(t: Tensor, name: str, size: int, what: str) -> None:
    low, high = int(t.min()), int(t.max())
    if low < 0 or high >= size:
        raise ValueError(
            f"{name} has indices from {low} to {high} but they must lie in [0, {size}): flat indices "
            f"(row * width + column) into {what}"
        )


def _as_selections(
    selections, name: str, gates: list[Tensor], device
) -> tuple[list[Tensor | None], list[tuple[int, int] | None]]:
    """Per layer, the (N, C_l, P_out) flat source indices of the selection pool after it (or None)
    and its (H_out, W_out)."""
    if selections is None:
        return [None] * len(gates), [None] * len(gates)
    if isinstance(selections, (Tensor, np.ndarray)):
        raise TypeError(
            f"{name} must be a list with one entry per layer (None, or the index tensor of the "
            "selection pool after that layer), got a single array"
        )
    selections = list(selections)
    if len(selections) != len(gates):
        raise ValueError(
            f"{name} has {len(selections)} entries but there are {len(gates)} layers: pass one entry "
            "per layer, None where no selection pool follows it"
        )
    indices, sizes = [], []
    for l, (s, g) in enumerate(zip(selections, gates)):
        if s is None:
            indices.append(None)
            sizes.append(None)
            continue
        t = _as_index(s, f"{name}[{l}]", device)
        n, c, h, w = g.shape
        if t.ndim != 4 or t.shape[:2] != (n, c) or t.shape[2] == 0 or t.shape[3] == 0:
            raise ValueError(
                f"{name}[{l}] must have shape (N, C, H_out, W_out) = ({n}, {c}, H_out, W_out) for gates "
                f"of shape {tuple(g.shape)}: per sample and channel, the flat index into the layer's "
                f"{h}x{w} positions that each pooled position takes its value from "
                f"(max_pool2d(..., return_indices=True)[1]); got {tuple(t.shape)}"
            )
        _check_range(t, f"{name}[{l}]", h * w, f"the {h}x{w} positions of the layer's gates")
        indices.append(t.flatten(2))
        sizes.append((t.shape[2], t.shape[3]))
    return indices, sizes


def _add_global_selection(
    selection, name: str, gates: list[Tensor], indices: list[Tensor | None], sizes: list, device
) -> None:
    """Fold a global selection (N, C, 1, 1) or (N, C) into the last layer's selection pool (in
    place): a 1x1 selection pool, composed with the 2x2 one if the last layer has one."""
    n, c, h, w = gates[-1].shape
    t = _as_index(selection, name, device)
    if t.ndim == 4 and t.shape[2:] == (1, 1):
        t = t.reshape(t.shape[:2])
    if tuple(t.shape) != (n, c):
        raise ValueError(
            f"{name} must have shape (N, C, 1, 1) = ({n}, {c}, 1, 1) "
            "(adaptive_max_pool2d(..., 1, return_indices=True)[1]) or (N, C), for last gates of shape "
            f"{tuple(gates[-1].shape)}; got {tuple(t.shape)}"
        )
    if indices[-1] is None:
        h_in, w_in, what = h, w, "the last layer's gates"
    else:
        (h_in, w_in), what = sizes[-1], f"the output of the selection pool after gates[{len(gates) - 1}]"
    _check_range(t, name, h_in * w_in, f"the {h_in}x{w_in} positions of {what}")
    t = t[:, :, None]
    indices[-1] = t if indices[-1] is None else indices[-1].gather(2, t)
    sizes[-1] = (1, 1)


def _check_same_selections(sx: list, sy: list, sizes_x: list, sizes_y: list, global_x, global_y) -> None:
    """Both batches have selection pools after the same layers, to the same sizes, and a global
    selection or neither."""
    for l, (a, b, size_a, size_b) in enumerate(zip(sx, sy, sizes_x, sizes_y)):
        if (a is None) != (b is None):
            given, missing = ("selections", "selections_y") if b is None else ("selections_y", "selections")
            raise ValueError(
                f"{given} has a selection pool after layer {l} but {missing} has none: both batches go "
                "through the same network, so pass the selections of x as selections and those of y "
                "as selections_y"
            )
        if size_a != size_b:
            raise ValueError(
                f"layer {l}: selections pools to {size_a[0]}x{size_a[1]} but selections_y to "
                f"{size_b[0]}x{size_b[1]}; both batches go through the same network"
            )
    if (global_x is None) != (global_y is None):
        given, missing = (
            ("global_selection", "global_selection_y")
            if global_y is None
            else ("global_selection_y", "global_selection")
        )
        raise ValueError(
            f"{given} is given without {missing}: both batches go through the same network, so pass "
            "the global selections of both (or neither, for global average pooling)"
        )


def _position_gram(a: Tensor, b: Tensor) -> Tensor:
    """(bn, C, H, W), (bm, C, H, W) -> (bn, H, W, bm, H, W): sum_c a[n, c, i] b[m, c, i'], float64."""
    bn, c, h, w = a.shape
    bm = b.shape[0]
    left = a.to(F64).permute(0, 2, 3, 1).reshape(bn * h * w, c)
    right = b.to(F64).transpose(0, 1).reshape(c, bm * h * w)
    return (left @ right).view(bn, h, w, bm, h, w)


def _selection_pool(u: Tensor, a: Tensor, b: Tensor, sa: Tensor, sb: Tensor, size: tuple[int, int]) -> Tensor:
    """``T(j, j') = sum_c a[c, s_c(j)] b[c, s'_c(j')] u(s_c(j), s'_c(j'))`` for u = L T_{l-1} of
    shape (bn, H, W, bm, H, W), gates a (bn, C, H, W) and b (bm, C, H, W), flat source indices sa
    (bn, C, P_out) and sb (bm, C, P_out): (bn, H_out, W_out, bm, H_out, W_out). Channels are
    gathered in chunks of at most P^2 / 2 entries per pair."""
    bn, h, w, bm = u.shape[:4]
    p = h * w
    c, p_out = sa.shape[1:]
    flat = u.reshape(-1)
    ga = a.reshape(bn, c, p).to(F64).gather(2, sa)
    gb = b.reshape(bm, c, p).to(F64).gather(2, sb).transpose(0, 1)
    # Flat offsets into u viewed as (bn, P, bm, P): rows (n, i) and columns (m, i').
    rows = sa * (bm * p) + torch.arange(bn, device=u.device)[:, None, None] * (p * bm * p)
    cols = (sb + torch.arange(bm, device=u.device)[:, None, None] * p).transpose(0, 1)
    out = torch.zeros((bn, p_out, bm, p_out), dtype=F64, device=u.device)
    step = max(1, min(c, p * p // (2 * p_out * p_out)))
    for start in range(0, c, step):
        k = slice(start, start + step)
        values = flat.take(rows[:, k, :, None, None] + cols[None, k, None])  # (bn, k, P_out, bm, P_out)
        values *= ga[:, k, :, None, None]
        values *= gb[None, k, None]
        out += values.sum(1)
    return out.view(bn, *size, bm, *size)


def _average_pool(t: Tensor) -> Tensor:
    """A 2x2 average pool (floor mode, as nn.AvgPool2d(2)) on both position indices of T."""
    bn, h, w, bm = t.shape[:4]
    h2, w2 = h // 2, w // 2
    t = t[:, : 2 * h2, : 2 * w2, :, : 2 * h2, : 2 * w2]
    return t.reshape(bn, h2, 2, w2, 2, bm, h2, 2, w2, 2).mean(dim=(2, 4, 7, 9))


def _window_sum(t: Tensor, circular: bool) -> Tensor:
    """(L T)(i, i') = sum over the 3x3 offsets k of T(i + k, i' + k), the same k on both indices
    (both paths cross the same weight); outside the image 0 (zero padding) or wrapped (circular).

    The 3x3 window is the product of a 3-row and a 3-column one, and a term vanishes exactly when
    its row or its column leaves the image, so L is a sum over rows then over columns: 4 shifted
    additions instead of 8.
    """
    return _line_sum(_line_sum(t, 1, 4, circular), 2, 5, circular)


def _line_sum(t: Tensor, a: int, b: int, circular: bool) -> Tensor:
    """out(i, i') = sum_{k in -1, 0, 1} t(i + k, i' + k) along axes a and b (one spatial axis of
    each index)."""
    out = t.clone()
    size = t.shape[a]
    for k in (-1, 1):
        if circular:
            out += t.roll(shifts=(-k, -k), dims=(a, b))
            continue
        # out[i] += t[i + k] where both i and i + k lie inside the image.
        target, source = [slice(None)] * t.ndim, [slice(None)] * t.ndim
        target[a] = target[b] = slice(max(0, -k), size - max(0, k))
        source[a] = source[b] = slice(max(0, k), size + min(0, k))
        out[tuple(target)] += t[tuple(source)]
    return out


def _conv_block(
    x: Tensor,
    y: Tensor,
    gx: list[Tensor],
    gy: list[Tensor],
    sx: list[Tensor | None],
    sy: list[Tensor | None],
    sizes: list[tuple[int, int] | None],
    pools: list[bool],
    circular: bool,
    ones: bool,
    skips: Sequence[tuple[int, int]] = (),
) -> Tensor:
    """The (bn, bm) NPK of one block of pairs (see npk_conv_gap). ``skips``: identity skip
    connections (start, stop), each adding the input of layer ``start`` to the gated output of
    layer ``stop - 1`` (``intertwine.kernels.npk_resnet``; no pools or selections then): the paths
    through a skip and through its block are distinct path features, so their T add."""
    bn, c0, h, w = x.shape
    bm = y.shape[0]
    if ones:
        t = torch.full((bn, h, w, bm, h, w), float(c0), dtype=F64, device=x.device)
    else:
        t = _position_gram(x, y)
    starts, stops = {start: stop for start, stop in skips}, {stop: start for start, stop in skips}
    saved = {}
    for layer, (pool, a, b, sa, sb, size) in enumerate(zip(pools, gx, gy, sx, sy, sizes)):
        if layer in starts:
            saved[layer] = t
        if pool:
            t = _average_pool(t)
        t = _window_sum(t, circular)
        if sa is None:
            t *= _position_gram(a, b)
        else:
            t = _selection_pool(t, a, b, sa, sb, size)
        if layer + 1 in stops:
            t += saved.pop(stops[layer + 1])
    # The global average pool's 1/P per path feature, squared (1 after a global selection).
    return t.mean(dim=(1, 2, 4, 5))


def npk_conv_gap(
    x: ArrayLike,
    gates: Sequence[ArrayLike],
    y: ArrayLike | None = None,
    gates_y: Sequence[ArrayLike] | None = None,
    *,
    padding: Literal["zeros", "circular"] = "zeros",
    value_input: Literal["x", "ones"] = "x",
    selections: Sequence[ArrayLike | None] | None = None,
    selections_y: Sequence[ArrayLike | None] | None = None,
    global_selection: ArrayLike | None = None,
    global_selection_y: ArrayLike | None = None,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Tensor:
    """The neural path kernel of a convolutional gated network with global average pooling (or a
    global selection): (N, N) on ``x``, or (N, N') between ``x`` and ``y``, float64.

    The value network: 3x3 convolutions (stride 1, padding 1), each followed by its gates, 2x2
    average pools (floor mode) or selection pools between some, then global average pooling (its
    1/P_L^2 included) or a global selection, and a linear head (the recursion, its cost and its
    invariance are in :mod:`intertwine.kernels.npk`). A layer's gates place the average pool before
    it: the size of the map before (the input, the previous layer, or the selection pool after that
    layer) means none, half that (floor) means one; any other size is a ValueError.

    Parameters
    ----------
    x : Tensor or ndarray, shape (N, C_0, H, W)
        The inputs, finite.
    gates : sequence of Tensor or ndarray, each shape (N, C_l, H_l, W_l)
        The gates of each layer on ``x``, hard or soft; their sizes place the average pools.
    y : Tensor or ndarray, shape (N', C_0, H, W), optional
        A second batch; None (the default): the kernel of ``x`` with itself.
    gates_y : sequence of Tensor or ndarray, optional
        The gates of the same layers on ``y``; given exactly when ``y`` is.
    padding : {"zeros", "circular"}
        The convolutions' padding.
    value_input : {"x", "ones"}
        What the value network is fed: the input itself, or ones of its shape.
    selections : sequence of Tensor, ndarray or None, optional
        Per layer, None (no selection pool after it) or integer indices (N, C_l, H_out, W_out): per
        sample, channel and pooled position, the flat index ``row * W_l + column`` into the layer's
        H_l x W_l positions it takes its value from (``F.max_pool2d(f, 2, return_indices=True)[1]``
        of the deciding feature map f; any pooled size is accepted); the next layer's gates are
        then H_out x W_out (or half that). None (the default): no selection pools.
    selections_y : sequence of Tensor, ndarray or None, optional
        The selections on ``y``; given with ``y`` exactly when ``selections`` is.
    global_selection : Tensor or ndarray, shape (N, C_L, 1, 1) or (N, C_L), optional
        Flat indices of a global max pool in place of the GAP (no 1/P^2) into the last layer's map,
        after its selection pool if any (``F.adaptive_max_pool2d(f, 1, return_indices=True)[1]``);
        None (the default): the GAP.
    global_selection_y : Tensor or ndarray, optional
        The global selection on ``y``; given with ``y`` exactly when ``global_selection`` is.
    max_bytes : int
        The bound on a block of pairs' float64 arrays (about four (P_l, P_l) per pair; one pair at least).

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
    sx, sizes = _as_selections(selections, "selections", gx, xs.device)
    bx = by = Batch(xs, gx, sx)
    symmetric = not second_batch(y, gates_y)
    if symmetric:
        _check_no_second_selections(selections_y, global_selection_y)
    else:
        by, sizes_y = as_y_batch(bx, sizes, y, gates_y, selections_y, global_selection, global_selection_y)
    pools = _derive_pools(tuple(xs.shape), gx, sizes)
    if global_selection is not None:
        _add_global_selection(global_selection, "global_selection", gx, sx, sizes, xs.device)
        if not symmetric:  # sy and sizes_y are separate lists, still without the global selection
            gy, sy = by.gates, by.selections
            _add_global_selection(global_selection_y, "global_selection_y", gy, sy, sizes_y, xs.device)
    return blocked_npk(bx, by, symmetric, sizes, pools, padding, value_input, max_bytes)


class Batch(NamedTuple):
    """A batch as the value network sees it: images (N, C_0, H, W), the gates of each layer and the
    flat source indices of the selection pool after each layer (None where there is none)."""

    images: Tensor
    gates: list[Tensor]
    selections: list[Tensor | None]

    def rows(self, part: slice) -> Batch:
        """The samples ``part`` of the batch."""
        return Batch(
            self.images[part],
            [g[part] for g in self.gates],
            [None if s is None else s[part] for s in self.selections],
        )


def _check_no_second_selections(selections_y, global_selection_y) -> None:
    """ValueError unless both are None (they belong to a second batch, and none is given)."""
    for given, value in (("selections_y", selections_y), ("global_selection_y", global_selection_y)):
        if value is not None:
            raise ValueError(
                f"{given} is given without y: the selections of a second batch go with y and gates_y"
            )


def as_y_batch(
    bx: Batch, sizes: list, y, gates_y, selections_y, global_selection, global_selection_y
) -> tuple[Batch, list]:
    """The second batch ``y`` with its gates and selections, on the device of ``bx``, checked to go
    through the same network as ``bx`` (whose selection pools' sizes are ``sizes``); and the sizes
    of its own selection pools."""
    device = bx.images.device
    ys = as_batch(y, "y", 4, device)
    if ys.shape[1:] != bx.images.shape[1:]:
        raise ValueError(
            f"x has samples of shape {tuple(bx.images.shape[1:])} but y {tuple(ys.shape[1:])}: both "
            "batches go into the same network"
        )
    gy = as_gate_list(gates_y, "gates_y", ys.shape[0], 4, device)
    check_same_layers(bx.gates, gy)
    sy, sizes_y = _as_selections(selections_y, "selections_y", gy, device)
    _check_same_selections(bx.selections, sy, sizes, sizes_y, global_selection, global_selection_y)
    return Batch(ys, gy, sy), sizes_y


def _block_shape(bx: Batch, m: int, symmetric: bool, max_bytes: int) -> tuple[int, int]:
    """(rows, columns) of a block of pairs between ``bx`` and m samples whose arrays T stay within
    ``max_bytes`` (at least one pair); square blocks for a symmetric kernel."""
    n = bx.images.shape[0]
    positions = bx.images.shape[2] * bx.images.shape[3]
    for g, s in zip(bx.gates, bx.selections):
        positions = max(positions, g.shape[2] * g.shape[3], 0 if s is None else s.shape[2])
    # T, its window sum, a rolled copy and the gate gram, in float64.
    pairs = max(1, max_bytes // (4 * 8 * positions**2))
    rows = max(1, min(n, math.isqrt(pairs)))
    cols = max(1, min(m, pairs // rows))
    return rows, rows if symmetric else cols


def blocked_npk(
    bx: Batch,
    by: Batch,
    symmetric: bool,
    sizes: list,
    pools: list[bool],
    padding: str,
    value_input: str,
    max_bytes: int,
    skips: Sequence[tuple[int, int]] = (),
) -> Tensor:
    """The (N, N') NPK between ``bx`` and ``by``, one block of pairs at a time (``_conv_block``,
    with its ``skips``); with ``symmetric`` (``by`` is ``bx``) only the blocks on and above the
    diagonal, mirrored."""
    n, m = bx.images.shape[0], by.images.shape[0]
    rows, cols = _block_shape(bx, m, symmetric, max_bytes)
    kernel = torch.empty((n, m), dtype=F64, device=bx.images.device)
    ones, circular = value_input == "ones", padding == "circular"
    for i in range(0, n, rows):
        ri = slice(i, min(n, i + rows))
        for j in range(i if symmetric else 0, m, cols):
            rj = slice(j, min(m, j + cols))
            a, b = bx.rows(ri), by.rows(rj)
            block = _conv_block(
                a.images,
                b.images,
                a.gates,
                b.gates,
                a.selections,
                b.selections,
                sizes,
                pools,
                circular,
                ones,
                skips,
            )
            kernel[ri, rj] = block
            if symmetric and j != i:
                kernel[rj, ri] = block.T
    return kernel
