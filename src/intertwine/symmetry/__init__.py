"""The intertwiner-group action on a zoo model's weights (paper section 3, Prop. 3.4, Remark 3.6).

An *element* at an activation site s (a name from :func:`intertwine.models.sites`) is either

* a G_ReLU element ``(perm, scales)`` -- a **tuple** -- standing for ``A = diag(scales) @ P``
  with ``P[i, perm[i]] = 1``, i.e. ``(A x)_i = scales[i] * x[perm[i]]`` (the convention of
  :mod:`intertwine.groups`); the scales must be positive, or
* an ``(n, n)`` matrix (tensor or array), any invertible one -- e.g. a random orthogonal
  matrix, the contrast that must *change* the function. A matrix that happens to be a positive
  monomial matrix (a permutation matrix, ``grelu_matrix(...)``) is treated as ``(perm, scales)``.

:func:`act_on_weights` returns a new model where every given ``A_s`` is applied as in Prop. 3.4:
the pre-activation feeding s becomes ``A_s`` times the old one and every consumer of s's output
gets ``phi(A_s)^-1 = A_s^-1`` on its input channels (next conv, shortcut conv, or the linear head
after the global max/avg pool, which commutes with permutations and positive per-channel scales).
For ReLU, LeakyReLU (any slope) and the identity (``residual_activation: False``) phi(A) = A, so a
G_ReLU element everywhere leaves the network function unchanged and turns the representation at
every site s into ``A_s`` applied to the old one (:func:`act_on_representation`). For any other
elementwise activation (GELU) only permutations (scales all 1) are symmetries: GELU is not
positively homogeneous, and :func:`act_on_weights` refuses G_ReLU elements with other scales there.

How the pre-activation is transformed
-------------------------------------
* G_ReLU element, conv followed by BatchNorm: permute the conv's output channels (weight and bias)
  and BN's weight, bias, running_mean and running_var; multiply BN's weight and bias by the
  scales. This is exact in eval mode *and* in training mode (batch statistics permute the same way).
* G_ReLU element, no BN: permute and scale the conv's output channels (weight and bias).
* General matrix M with BN: the BN is folded into the conv with its **running statistics**, the
  folded conv is multiplied by M, and the BN is set to an exact identity (weight 1, running_mean 0,
  running_var 1 - eps, bias 0 -- or the folded bias when the conv has no bias of its own), so the
  module structure stays the same. The result computes the intended function **in eval mode only**
  (in training mode BN would normalise with batch statistics; a warning is issued when the input
  model is in training mode). Without BN the conv is simply multiplied by M.

Gated networks (:mod:`intertwine.models.gated`)
-----------------------------------------------
Value layer l of a gated network is gated by feature layer ``gate_perm[l]``, so the two sites are
tied: a permutation of one must be the same permutation of the other (with hard and soft gates
alike). At a value site the element may be a **signed** monomial ``(perm, scales)`` with any
nonzero scales, because ``G * (D q) = D (G * q)`` for every diagonal D: the value network's group
is the signed monomial matrices, larger than G_ReLU. At a feature site the scales must be positive
with hard gates (``1{d q > 0} = 1{q > 0}`` for d > 0, and a ReLU feature network is G_ReLU-
equivariant) and 1 with soft gates (``sigmoid(beta d q)`` depends on d): only permutations. A
general matrix at a feature site is the contrast, as elsewhere: in a linear feature network (dlgn)
it leaves the later feature layers unchanged but changes that layer's gates.

Residual networks (Remark 3.6)
------------------------------
A skip connection adds the stream to itself, so the weight-space action is only defined when the
elements on either side of it agree:

* identity shortcut (every block whose shape does not change): the block's ``act2`` must carry the
  same element as the site feeding the block (the stem ``act`` or the previous ``act2``). So the
  stem activation and all ``act2`` sites of a stage share one element; ``act1`` sites (inside the
  blocks) take free elements.
* option-B shortcut (resnet18: 1x1 conv + BN when the shape changes): the shortcut conv absorbs the
  change -- its in-channels get ``A_prev^-1``, its out-channels/BN get ``A_next`` -- so every stage's
  stream has its own element.
* option-A shortcut (resnet20, ``ZeroPadShortcut``: ``x -> E x[:, :, ::2, ::2]`` with E the
  ``n_out x n_in`` embedding ``E[pb + j, j] = 1``, pb = ``pad_before``): we need
  ``A_next E = E A_prev``. Writing the channels of the next stage as *middle* ``[pb, pb + n_in)``
  (the previous stream's channels) and *padded* (the rest, always zero on the shortcut), this says
  ``A_next[middle, middle] = A_prev`` and ``A_next[padded, middle] = 0``; the padded columns are
  free (subject to invertibility). For a G_ReLU element this means: ``A_next`` acts on the middle
  block exactly as ``A_prev`` (``perm[pb + j] = pb + perm_prev[j]``, ``scales[pb + j] =
  scales_prev[j]``) and only permutes/scales the padded channels among themselves (across both
  padded ends). For an orthogonal ``A_next`` orthogonality forces ``A_next[middle, padded] = 0``
  too, so ``A_next = A_prev (+) Q_pad``. The whole residual stream of resnet20 is therefore one
  linked chain: the stem element determines the middle block of every later stage.

:func:`act_on_weights` checks these constraints (sites not in ``elements`` count as the identity)
and raises ValueError naming the offending site. :func:`site_groups` lists the linked sites.

The package
-----------
``elements`` (parsing elements, ``element_matrix``, ``act_on_representation``), ``wiring`` (the
architectures' wiring, ``ARCHS``, ``acts_on``, ``site_groups``), ``action`` (the checks and
``act_on_weights``), ``draws`` (``random_elements``) and ``stitched`` (Thm. 4.2: f stitched into
its transform through the exact element, ``stitch_through_element``, ``ElementBridge``,
``stitched_changes``). Every public name is importable from ``intertwine.symmetry``.
"""

# The package's public names; each module's private helpers stay in it (the modules import each
# other's public names only).
from .action import act_on_weights
from .draws import GROUPS, random_elements
from .elements import POSITIVELY_HOMOGENEOUS as POSITIVELY_HOMOGENEOUS
from .elements import act_on_representation, element_matrix
from .stitched import ElementBridge, stitch_through_element, stitched_changes
from .wiring import ARCHS as ARCHS
from .wiring import Link as Link
from .wiring import Wiring as Wiring
from .wiring import acts_on as acts_on
from .wiring import model_wiring as model_wiring
from .wiring import site_groups

#: The documented API. ``ARCHS``, ``acts_on``, ``POSITIVELY_HOMOGENEOUS``, ``model_wiring``,
#: ``Wiring`` and ``Link`` are importable too: what the workflow's checks and weight matching read.
__all__ = [
    "GROUPS",
    "ElementBridge",
    "act_on_representation",
    "act_on_weights",
    "element_matrix",
    "random_elements",
    "site_groups",
    "stitch_through_element",
    "stitched_changes",
]
