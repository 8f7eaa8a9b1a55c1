"""Infinite-width kernels of deep and of equilibrium ReLU networks (Feng & Kolter, "On the Neural
Tangent Kernel of Equilibrium Models"), and kernel regression with them.

Model and conventions
---------------------
The layer map, with standard-normal entries in ``W`` (N x N), ``U`` (N x d) and ``b`` (N), is::

    f = sqrt(sigma_w2 / N) W sigma(f_prev) + sqrt(sigma_u2) U x + sqrt(sigma_b2) b,
    sigma(u) = sqrt(2) max(0, u).

Inputs are unit vectors (``||x|| = 1``) and the variances sum to one, ``sigma_w2 + sigma_u2 +
sigma_b2 = 1``, so every pre-activation has unit variance and every kernel entry below is a
correlation to which the arc-cosine kernels apply directly::

    kappa1(rho) = (sqrt(1 - rho^2) + (pi - arccos rho) rho) / pi     (E[sigma(u) sigma(v)])
    kappa0(rho) = (pi - arccos rho) / pi                              (E[sigma'(u) sigma'(v)])

* ``nngp`` / ``ntk``: a network of ``depth`` L hidden layers (L applications of the layer map,
  weights *not* tied), from ``Sigma^(0) = Theta^(0) = x.y``::

      Sigma^(h)  = sigma_w2 kappa1(Sigma^(h-1)) + sigma_u2 x.y + sigma_b2
      dSigma^(h) = sigma_w2 kappa0(Sigma^(h-1))
      Theta^(h)  = dSigma^(h) Theta^(h-1) + Sigma^(h)

  ``Theta^(L)`` is the NTK of one coordinate of the L-th pre-activation with respect to all
  weights and biases; ``Sigma^(L)`` its NNGP.
* ``deq_nngp`` / ``deq_ntk``: the weight-tied equilibrium ``f* = layer(f*)``. The correlation
  ``rho*`` solves ``rho = sigma_w2 kappa1(rho) + sigma_u2 x.y + sigma_b2`` (a contraction with
  rate at most ``sigma_w2``, so ``0 <= sigma_w2 < 1`` is required) and::

      Theta* = rho* / (1 - sigma_w2 kappa0(rho*)),    diagonal: 1 / (1 - sigma_w2).

  For unit inputs and ``sigma_w2 < 1`` the depth-L NTK tends to ``Theta*`` (geometrically, rate
  at most ``sigma_w2``); at ``sigma_w2 = 1`` it grows without bound (diagonal ``L + 1``) and the
  equilibrium kernel does not exist. ``finite_deq_ntk`` samples the same model at finite width.
* ``conv_deq_ntk``: the equilibrium of a 3x3, zero-padded convolutional layer map, for small
  images (see its docstring for the per-position normaliser).
* ``kernel_regression``: ridgeless (by default) kernel regression on the targets ``-0.1 + e_y``.

Where the code lives: this module gathers the names; the fully connected kernels (the arc-cosine
kernels, the equilibrium and finite-depth NTK and NNGP, the input checks) are in
:mod:`intertwine.kernels.deq_fc`, the convolutional one in :mod:`intertwine.kernels.deq_conv`, the
finite-width sample in :mod:`intertwine.kernels.deq_finite_width` and kernel regression in
:mod:`intertwine.kernels.regression`.

Numerics
--------
Every iteration runs on ``delta = 1 - rho`` rather than on ``rho``: the constant ``sigma_b2``
drops out (it is ``1 - sigma_w2 - sigma_u2``), equal unit inputs give ``delta = 0`` exactly, and
``arccos(1 - delta) = 2 asin(sqrt(delta / 2))`` keeps full accuracy near ``rho = 1``. That
matters: ``kappa0`` has a square-root singularity at ``rho = 1``, so a ``rho`` one rounding below
1 (1.1e-16) would move ``kappa0`` by 5e-9 and the diagonal of ``Theta*`` by 2e-8 at
``sigma_w2 = 0.6``. ``delta`` is clipped into [0, 2] (``rho`` into [-1, 1]) before the arc
functions: by Cauchy-Schwarz and because the map sends [-1, 1] into itself the exact values lie
there, and the clip only removes rounding (``x.y`` of unit vectors can come out as
``1 + 2e-16``, or ``1 + 1e-7`` in float32) that would otherwise give NaN.

Arrays in, tensors out: numpy arrays and torch tensors keep their floating dtype (float32 is
allowed, e.g. on a GPU; integer input becomes float64, half precision float32), tensors their device, and
all arithmetic stays on that device. Gram matrices are computed in blocks of rows (entries do not
interact), so beyond the (n, m) result only a few (block_rows, m) blocks are ever held; with
``Y=None`` only the upper triangle is computed and mirrored, so the result is exactly symmetric.
"""

from __future__ import annotations

# The constants and types beside __all__'s names stay importable from here, as before the split.
from intertwine.kernels.deq_conv import DEFAULT_CONV_BLOCK_BYTES, conv_deq_ntk  # noqa: F401
from intertwine.kernels.deq_fc import (  # noqa: F401
    DEFAULT_BLOCK_ENTRIES,
    VARIANCE_SUM_TOL,
    ArrayLike,
    ConvPooling,
    KernelResult,
    check_variances,
    deq_nngp,
    deq_ntk,
    deq_ntk_from_inner,
    kappa0,
    kappa1,
    nngp,
    ntk,
)
from intertwine.kernels.deq_finite_width import finite_deq_ntk
from intertwine.kernels.regression import (  # noqa: F401
    TARGET_OFF,
    TARGET_ON,
    RegressionResult,
    SingularKernelError,
    kernel_regression,
    regression_targets,
    symmetry_error,
)

__all__ = [
    "ConvPooling",
    "check_variances",
    "KernelResult",
    "RegressionResult",
    "SingularKernelError",
    "conv_deq_ntk",
    "deq_nngp",
    "deq_ntk",
    "deq_ntk_from_inner",
    "finite_deq_ntk",
    "kappa0",
    "kappa1",
    "kernel_regression",
    "nngp",
    "ntk",
    "regression_targets",
]
