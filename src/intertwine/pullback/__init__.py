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

The package
-----------
``soft`` (the soft forwards, ``SOFT_FORWARDS``, ``register_soft_forward``, ``options``),
``call_sites`` (``CallSites``, ``soft_backward``, ``swapped_modules``) and ``excitation``
(``pullback``, ``per_neuron_temperatures``). Every public name is importable from ``intertwine.pullback``.
"""

# The package's public names; each module's private helpers stay in it (the modules import each
# other's public names only).
from intertwine.pullback.call_sites import CallSites, soft_backward, swapped_modules
from intertwine.pullback.excitation import MODES, per_neuron_temperatures, pullback
from intertwine.pullback.soft import (
    FUNCTIONAL,
    POOL_PADDING,
    SOFT_FORWARDS,
    Temperature,
    channel_view,
    options,
    register_soft_forward,
    soft_adaptive_max_pool2d,
    soft_max_pool2d,
)

__all__ = [
    "FUNCTIONAL",
    "MODES",
    "POOL_PADDING",
    "SOFT_FORWARDS",
    "CallSites",
    "Temperature",
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
