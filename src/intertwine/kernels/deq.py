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
  equilibrium kernel does not exist.
* ``finite_deq_ntk``: the same model at finite width N, one draw of the weights. The equilibrium
  ``f* = sqrt(sigma_w2/N) W sigma(f*) + sqrt(sigma_u2) U x + sqrt(sigma_b2) b`` is found by
  iteration from 0; by implicit differentiation ``d f* = M_x d(layer)`` with
  ``M_x = (I - sqrt(sigma_w2/N) W D_x)^-1``, ``D_x = diag(sigma'(f*(x)))``, so the NTK of f*,
  averaged over its N coordinates, is::

      (sigma_w2/N sigma(f*(x)).sigma(f*(y)) + sigma_u2 x.y + sigma_b2) * <M_x, M_y>_F / N.

  As N grows its mean over seeds tends to ``deq_ntk``; it fluctuates from seed to seed by about
  15-20 % at N = 1000 and (0.6, 0.4, 0), 3.5 % at (0.25, 0.25, 0.5) (ours).
* ``conv_deq_ntk``: the equilibrium of a zero-padded 3x3 convolutional layer map with
  standard-normal weights, for small images::

      f_p = sqrt(sigma_w2 / (C' n_p)) sum_t W_t sigma(f_{p+t}) + sqrt(sigma_u2 / n_p) sum_t U_t x_{p+t}
            + sqrt(sigma_b2) b

  where ``n_p`` (9, 6 or 4) counts the taps of p's window that fall inside the image (Feng &
  Kolter's [S]_p^2). Their eqs. (14), (18) and (20), as written, divide by [S] at each tap inside
  the window's trace, which leaves Sigma(x, x) off 1 near the border (1.36 at position (1, 1)),
  though their appendix B chooses S so that those variances are 1; this choice -- a fan-in
  normaliser per output position,
  on the weight and input terms, not on the bias -- keeps every pixel's pre-activation at unit
  variance, so the arc-cosine kernels apply without renormalising, and a 1x1 image reduces to
  the fully connected ``deq_ntk`` of its pixel. (A fixed 1/9 would shrink the border variances.)
  For one image pair, with ``T(K)(p, p') = sum_t K(p+t, p'+t) / sqrt(n_p n_p')`` (terms outside
  the image are zero), the correlations and the NTK of the equilibrium solve::

      Sigma = sigma_w2 T(kappa1(Sigma)) + sigma_u2 T(x_p . y_p') + sigma_b2
      Theta = sigma_w2 T(kappa0(Sigma) * Theta) + Sigma

  Both are sup-norm contractions with rate at most ``sigma_w2`` (T's weights sum to at most 1),
  iterated per image pair until a step is at most ``tol`` (the paper runs 20 iterations of the
  first); the second is the linear system the paper solves directly ("the sparse linear system
  eq. ( 21)"), here solved by the same iteration on the device. tests/test_kernels_deq_conv_width.py
  checks Theta against the mean NTK of sampled networks of this definition.
* ``kernel_regression``: ridgeless (by default) kernel regression on the targets ``-0.1 + e_y``.

Where the code lives: this module gathers the names; the fully connected kernels (the arc-cosine
kernels, the equilibrium and finite-depth NTK and NNGP) are in :mod:`intertwine.kernels.deq_fc`,
the input checks in :mod:`intertwine.kernels.deq_checks`, the convolutional one in
:mod:`intertwine.kernels.deq_conv`, the finite-width sample in
:mod:`intertwine.kernels.deq_finite_width` and kernel regression in
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

Steps and accuracy of ``deq_ntk``: each entry's ``delta* = 1 - rho*`` is the root of ``h(delta) =
sigma_w2 (1 - kappa1(1 - delta)) + sigma_u2 (1 - x.y) - delta``, found by Newton's method from
``sigma_u2 (1 - x.y) / (1 - sigma_w2)``, an upper bound from which the steps decrease
monotonically to the root (``h`` is concave and decreasing) and converge quadratically, relative
to ``delta*`` too. That matters where ``1 - rho*`` is small: ``Theta*`` depends on ``sqrt(delta*)``
there, and the fixed-point iteration this replaced, stopped at an absolute step of ``tol``, left
``Theta*`` off by about ``sqrt(tol)`` (3.6e-5 relative at (0.8, 0, 0.2), whose ``rho*`` is 1 for every
pair; 2e-4 at (0.99, 0.01, 0)). Against a 50-digit reference ``Theta*`` is now exact to 7e-14
relative or better for x.y from -1 to 1 - 2^-45 (tests/test_kernels_deq.py). ``iterations``
counts every Newton step, the last (the first of at most ``tol`` relative to ``delta``) included:
3 / 4 / 5 at sigma_w2 = 0.25 / 0.6 / 0.8 on correlations 0.73-0.93 like raw images (ours; the
fixed-point iteration needed 15 / 29 / 54; the paper solves the fixed point with the modified
Powell hybrid method and reports no count for this kernel; for the convolutional one it runs 20
iterations and observes "they typically converge to 10 -6 accuracy in ℓ ∞ within 15
iterations"). float32 input stops at 1.9e-6 relative. ``conv_deq_ntk`` still iterates to an
absolute step of ``tol``: its ``rho*`` is within ``tol sigma_w2 / (1 - sigma_w2)`` of the fixed
point, and its ``Theta*`` up to about 40 times that near rho = 1 at sigma_w2 = 0.8.

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
