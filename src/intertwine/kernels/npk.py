"""Neural path kernels of gated ReLU networks (Lakshminarayanan & Singh, "Disentangling deep neural
networks with rectified linear units using duality"), the gate kernel of any model at one site, and
the empirical neural tangent kernel of a model on a probe set.

Path view. The output of a bias-free ReLU network is a sum over its input-to-output paths p,
``y(x) = sum_p x(p_0) A(x, p) v(p)``: the input coordinate the path starts at, the product of the
gates 1{q > 0} of the units it runs through, and the product of its weights. The neural path
feature is ``phi(x, p) = x(p_0) A(x, p)``, so ``y = <phi(x), v>``, and the neural path kernel is
``NPK(x, x') = <phi(x), phi(x')>``.

Gated networks. A feature network supplies the gates ``G_l(x)`` of layers l = 1..L, hard
``1{q_l > 0}`` or soft ``sigmoid(beta q_l)`` (:func:`gates_from_preactivations`). A value network
computes ``z_0 = x`` (``value_input="x"``) or ``ones_like(x)`` (``value_input="ones"``),
``z_l = G_l * (W_l z_{l-1})`` and the output ``head(z_L)``: a linear layer (fully connected), or
global average pooling then a linear layer (convolutional). The NPK depends on the gates and the
value input only. Counting the head, a path crosses d = L + 1 weight layers and each of its
weights once, so with i.i.d. value weights of random sign and magnitude sigma the expected NTK of
the value weights is exactly ``d sigma^(2(d-1)) NPK`` at any width.

* :func:`npk_fc`: ``NPK(x, x') = <x, x'> prod_l <G_l(x), G_l(x')>``; on a batch
  ``(X X^T) * prod_l (G_l G_l^T)``. With ``value_input="ones"``, ``<x, x'>`` becomes d_in.
* :func:`npk_conv_gap`: 3x3 convolutions (stride 1, padding 1, zero or circular), optional 2x2
  average pools between layers, global average pooling before the head. The weights of a path
  are indexed by its channels and its 3x3 offsets, and many position sequences share them, so the
  path feature of a weight path sums over its position sequences; the kernel is the exact
  recursion ``T_0(i, i') = sum_c x[c, i] x'[c, i']``, ``T_l = (G_l(x)^T G_l(x')) * L T_{l-1}``
  with ``(L T)(i, i') = sum_{k in 3x3} T(i + k, i' + k)`` (outside the image: 0 for zero padding,
  wrapped for circular), a pool averaging both indices; where the pools are is read off the
  gates' spatial sizes. **The global average pool's factor is included**: ``NPK = sum_{i, i'} T_L(i, i') / P_L^2`` (P_L the positions of the last layer), so
  that ``y = <Phi(x), v>`` for the network with GAP (and the NTK identity above holds for it).
  **Selection pools** (max-pools whose choice is made by the feature network, so the value network
  stays linear given its gates) take each pooled position's value from one position s_c(j) of
  its channel c; as the choice differs per channel, the channel sum is taken after the pool:
  ``T_pool(j, j') = sum_c G_l[c, s_c(j)] G_l'[c, s'_c(j')] (L T_{l-1})(s_c(j), s'_c(j'))``. A
  global selection (a global max pool in place of the GAP) is the same with one pooled position,
  and no 1/P^2: ``NPK = sum_c G_L[c, s_c] G_L'[c, s'_c] (L T_{L-1})(s_c, s'_c)``.
  With circular padding and no selections it is invariant to cyclic shifts of either input (by
  multiples of 2^pools) whose gates shift with it. Cost O((C_l + 4) P_l^2) per pair and layer (the
  3x3 window sum is separable), O(C_l P_out^2) gathers for a selection pool instead of the
  C_l P_l^2 gate gram: about 0.1 ms per pair at 8x8 with 32 channels and 4 layers, 1-2 ms at
  16x16, on 2 CPU cores; at 32x32 with 16 channels, 4 layers (32, 32, 16, 8) and selection pools
  after the last three and a global selection, about 15 ms per pair on 2 CPU cores (the selection
  pools take about 3 ms of it, the 32x32 window sums most of the rest). T is formed for blocks of
  pairs within ``max_bytes``; without ``y`` only the blocks on and above the diagonal are computed.
* :func:`npk_resnet_conv_gap`: the same network with identity skips around blocks of layers (the
  paper's ResNet, Section 3.1.3): the sum of its 2^b sub-networks' kernels (Lemma B.1, Theorem 3.3),
  by the recursion with ``T_stop = T_start + T_block`` (:mod:`intertwine.kernels.npk_resnet`);
  :func:`resnet_subnetworks` lists the sub-networks' layers.
* :func:`gate_kernel`: ``G G^T / units`` with ``G = 1{activation > 0}`` flattened over C*H*W: the
  fraction of units two inputs switch on together, for any model's activations at one site.
* :func:`empirical_ntk`: ``Theta(x, x') = sum_c <df_c(x)/dtheta, df_c(x')/dtheta>`` of a module.

Arrays are (N, ...) with samples first; numpy arrays are converted, tensors stay on their device
(everything moves to the device of ``x``). Kernels are accumulated and returned in float64, as
(N, N) tensors, or (N, N') with a second batch ``y``. Inputs are validated up front: a ValueError
(a TypeError for an argument of the wrong kind) names the argument, the problem and the fix. Memory: per-block intermediates stay within
``max_bytes`` (64 MiB by default, as in :mod:`intertwine.measures`); the kernel and the inputs
are held in full.

Where the code lives: the convolutional kernel (its pools, selections and blocks of pairs) is in
:mod:`intertwine.kernels.npk_conv`, the residual one in :mod:`intertwine.kernels.npk_resnet`, the input checks both kernels share in
:mod:`intertwine.kernels.npk_checks`; this module holds the rest and gathers the names.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor, nn

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
from intertwine.kernels.npk_conv import npk_conv_gap
from intertwine.kernels.npk_resnet import npk_resnet_conv_gap, resnet_subnetworks

__all__ = [
    "empirical_ntk",
    "gate_kernel",
    "gates_from_preactivations",
    "npk_conv_gap",
    "npk_fc",
    "npk_resnet_conv_gap",
    "resnet_subnetworks",
]


# ---------------------------------------------------------------------------
# Gates and gram matrices
# ---------------------------------------------------------------------------


def _gram(a: Tensor, b: Tensor, max_bytes: int) -> Tensor:
    """``a @ b.T`` in float64 for (N, D) and (M, D), converting column blocks so that the float64
    copies of wide (e.g. 0/1 or float32) inputs stay within ``max_bytes``."""
    n, m, d = a.shape[0], b.shape[0], a.shape[1]
    cols = max(1, max_bytes // (8 * (n + m)))
    out = torch.zeros((n, m), dtype=F64, device=a.device)
    for start in range(0, d, cols):
        stop = min(d, start + cols)
        out += a[:, start:stop].to(F64) @ b[:, start:stop].to(F64).T
    return out


def gates_from_preactivations(preactivations: ArrayLike, *, beta: float | None = None) -> Tensor:
    """The gates of pre-activations q, same shape: hard ``1{q > 0}`` (``beta=None``) or soft
    ``sigmoid(beta q)``, float64.

    Parameters
    ----------
    preactivations : Tensor or ndarray, any shape
        The pre-activations q of one layer, e.g. (N, C, H, W); integer and bool arrays are converted.
    beta : float, optional
        The soft gate's slope, a positive finite number; None (the default): hard gates.

    Returns
    -------
    Tensor
        The gates, float64, of the shape of ``preactivations`` and on its device.
    """
    q = as_tensor(preactivations, "preactivations").to(F64)
    if beta is None:
        return (q > 0).to(F64)
    if not (isinstance(beta, (int, float)) and math.isfinite(beta) and beta > 0):
        raise ValueError(f"beta must be a positive finite number (the soft gate's slope), got {beta!r}")
    return torch.sigmoid(beta * q)


def gate_kernel(activations: ArrayLike, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Tensor:
    """The (N, N) float64 gate kernel ``G G^T / units`` of activations (N, C, H, W) or (N, C):
    ``G = 1{activation > 0}`` flattened over all units, so entry (n, m) is the fraction of units
    that inputs n and m both switch on (1 on the diagonal for a unit always on).

    It sees the activation pattern only, so it is unchanged when the units are permuted or
    positively scaled (G_ReLU), but not under other changes of basis. Compare two with
    :func:`intertwine.measures.kernel_cka`, which raises ConstantRepresentationError when every
    input has the same gate pattern.

    Parameters
    ----------
    activations : Tensor or ndarray, shape (N, C, H, W) or (N, C)
        One site's activations on N >= 1 inputs, finite; any axes after the first are flattened.
    max_bytes : int
        The memory bound of the float64 column blocks of ``G G^T``.

    Returns
    -------
    Tensor, shape (N, N)
        The gate kernel, float64, on the device of ``activations``; entries in [0, 1].
    """
    a = as_batch(activations, "activations")
    g = (a > 0).reshape(a.shape[0], -1)
    return _gram(g, g, max_bytes) / g.shape[1]


# ---------------------------------------------------------------------------
# Fully connected NPK
# ---------------------------------------------------------------------------


def npk_fc(
    x: ArrayLike,
    gates: Sequence[ArrayLike],
    y: ArrayLike | None = None,
    gates_y: Sequence[ArrayLike] | None = None,
    *,
    value_input: Literal["x", "ones"] = "x",
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Tensor:
    """The neural path kernel of a fully connected gated network: (N, N) on ``x``, or (N, N')
    between ``x`` and ``y``, float64.

    ``NPK(x, x') = <x, x'> prod_l <G_l(x), G_l(x')>`` (``<x, x'>`` becomes d_in with
    ``value_input="ones"``). ``x`` is (N, d_in) (further axes are flattened), ``gates`` a list with
    the (N, width_l) gates of each layer (hard or soft; further axes flattened), ``gates_y`` those
    of ``y``. The order of the layers does not matter: the product is the same for any
    permutation of them.

    Parameters
    ----------
    x : Tensor or ndarray, shape (N, d_in)
        The inputs, finite; further axes are flattened.
    gates : sequence of Tensor or ndarray, each shape (N, width_l)
        The gates of each layer on ``x``, one tensor per layer.
    y : Tensor or ndarray, shape (N', d_in), optional
        A second batch; None (the default): the kernel of ``x`` with itself.
    gates_y : sequence of Tensor or ndarray, optional
        The gates of the same layers on ``y``; given exactly when ``y`` is.
    value_input : {"x", "ones"}
        What the value network is fed: the input itself, or ones of its shape.
    max_bytes : int
        The memory bound of each block of the float64 grams.

    Returns
    -------
    Tensor, shape (N, N) or (N, N')
        The neural path kernel, float64, on the device of ``x``.
    """
    check_value_input(value_input)
    xs = as_batch(x, "x")
    xs = xs.reshape(xs.shape[0], -1)
    gx = [g.reshape(g.shape[0], -1) for g in as_gate_list(gates, "gates", xs.shape[0], None, xs.device)]
    if second_batch(y, gates_y):
        ys = as_batch(y, "y", device=xs.device)
        ys = ys.reshape(ys.shape[0], -1)
        if ys.shape[1] != xs.shape[1]:
            raise ValueError(f"x has {xs.shape[1]} features but y has {ys.shape[1]}: they must match")
        gy = [
            g.reshape(g.shape[0], -1) for g in as_gate_list(gates_y, "gates_y", ys.shape[0], None, xs.device)
        ]
        check_same_layers(gx, gy)
    else:
        ys, gy = xs, gx
    if value_input == "x":
        kernel = _gram(xs, ys, max_bytes)
    else:
        kernel = torch.full((xs.shape[0], ys.shape[0]), float(xs.shape[1]), dtype=F64, device=xs.device)
    for a, b in zip(gx, gy):
        kernel *= _gram(a, b, max_bytes)
    return kernel


# ---------------------------------------------------------------------------
# Empirical NTK
# ---------------------------------------------------------------------------


def _ntk_parameters(model: nn.Module, params: Sequence[str] | None) -> list[str]:
    named = dict(model.named_parameters())
    if params is None:
        names = [k for k, p in named.items() if p.requires_grad]
        if not names:
            raise ValueError("the model has no parameters that require grad; name some in params")
        return names
    if isinstance(params, str):
        raise TypeError(f"params must be a list of parameter names, got the string {params!r}")
    names = list(params)
    unknown = [k for k in names if k not in named]
    if unknown:
        raise ValueError(f"params {unknown} are not parameters of the model; it has {list(named)}")
    if not names:
        raise ValueError("params is empty: name at least one parameter (or pass None for all)")
    if len(set(names)) != len(names):
        raise ValueError(f"params names a parameter more than once: {names}")
    return names


def empirical_ntk(
    model: nn.Module,
    x: ArrayLike,
    params: Sequence[str] | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> Tensor:
    """The empirical NTK ``Theta(x, x') = sum_c <df_c(x)/dtheta, df_c(x')/dtheta>`` of ``model`` on
    the batch ``x``, summed over every output coordinate c and over the parameters theta.

    Computed in eval mode (BatchNorm with running statistics, no dropout; the model's mode is
    restored), per sample with ``torch.func``, in the model's dtype (use a float64 model and input
    for float64 gradients), the inner products accumulated in float64. With more than one block of
    samples, two are held at a time and block j's Jacobians are recomputed for every block i < j.

    Parameters
    ----------
    model : nn.Module
        The network; its output is flattened per sample.
    x : Tensor or ndarray, shape (N, ...)
        The inputs, samples first; moved to the model's device, floating inputs cast to its dtype
        (integer inputs are passed on as they are).
    params : sequence of str, optional
        The names of theta, as in ``model.named_parameters()``; None (the default): all that require grad.
    max_bytes : int
        The memory bound of a block of samples' float64 Jacobians (one sample at least).

    Returns
    -------
    Tensor, shape (N, N)
        The empirical NTK, float64, symmetric, on the model's device.
    """
    from torch.func import functional_call, jacrev, vmap

    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    names = _ntk_parameters(model, params)
    first = next(iter(model.parameters()))
    # Integer inputs (token ids, class labels) are passed on as they are.
    xs = as_batch(x, "x", device=first.device, promote=False)
    if xs.is_floating_point() and first.is_floating_point():
        xs = xs.to(first.dtype)
    named = dict(model.named_parameters())
    theta = {k: named[k].detach() for k in names}
    # The other parameters and the buffers enter as constants.
    fixed = {k: p.detach() for k, p in named.items() if k not in theta}
    buffers = {k: b.detach() for k, b in model.named_buffers()}

    def output(weights: dict[str, Tensor], sample: Tensor) -> Tensor:
        return functional_call(model, (weights, fixed, buffers), (sample.unsqueeze(0),)).reshape(-1)

    jacobian = vmap(jacrev(output), in_dims=(None, 0))
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            outputs = output(theta, xs[0]).numel()
        per_sample = 8 * outputs * sum(t.numel() for t in theta.values())
        n = xs.shape[0]
        rows = max(1, min(n, max_bytes // (2 * per_sample)))
        starts = list(range(0, n, rows))

        def block(start: int) -> list[Tensor]:
            jac = jacobian(theta, xs[start : start + rows])
            return [j.reshape(j.shape[0], -1).to(F64) for j in jac.values()]

        kernel = torch.empty((n, n), dtype=F64, device=xs.device)
        for i in starts:
            ji = block(i)
            for j in starts[starts.index(i) :]:
                # Recomputing J_j trades time for memory: only two blocks are ever held.
                jj = ji if j == i else block(j)
                value = sum(p @ q.T for p, q in zip(ji, jj))
                if j == i:  # a block times itself need not round symmetrically; K must be symmetric
                    value = (value + value.T) / 2
                kernel[i : i + rows, j : j + rows] = value
                kernel[j : j + rows, i : i + rows] = value.T
    finally:
        model.train(was_training)
    return kernel
