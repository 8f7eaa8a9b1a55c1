"""Kernels of ReLU networks, arrays in and numbers out, usable without the workflow.

* :mod:`intertwine.kernels.npk`: the neural path kernel of gated networks (Lakshminarayanan &
  Singh), fully connected and convolutional with global average pooling, the per-site gate kernel
  of any zoo model, and the empirical neural tangent kernel of a model on a probe set. Its
  convolutional kernel lives in :mod:`intertwine.kernels.npk_conv` (pools, selection pools, the
  recursion over blocks of image pairs), the input checks both share in
  :mod:`intertwine.kernels.npk_checks`.
* :mod:`intertwine.kernels.deq`: the infinite-width NTK and NNGP of deep fully connected ReLU
  networks, the NTK of deep equilibrium models (Feng & Kolter), and kernel regression; it gathers
  the names of :mod:`intertwine.kernels.deq_fc` (the arc-cosine kernels, the equilibrium and
  finite-depth NTK and NNGP of fully connected networks; the input checks the others share, from
  :mod:`intertwine.kernels.deq_checks`), :mod:`intertwine.kernels.deq_conv` (the convolutional
  DEQ-NTK),
  :mod:`intertwine.kernels.deq_finite_width` (the empirical NTK of one sampled finite-width DEQ)
  and :mod:`intertwine.kernels.regression` (kernel regression on one-hot targets).
* :mod:`intertwine.kernels.members`: a zoo member's kernels: the exact neural path kernel of a
  gated or plain ReLU network, the NTK of a gated network's value weights alone, the gate kernel
  at each site, and the logit ensemble of several members.
* :mod:`intertwine.kernels.deq_regression`: kernel regression with the DEQ-NTK on images (unit
  inputs, the Gram in blocks of rows, the depth sweep, the convolutional kernel's accuracy).
"""

from . import deq, members, npk
from .deq import *  # noqa: F403
from .members import *  # noqa: F403
from .npk import *  # noqa: F403

__all__ = [*npk.__all__, *deq.__all__, *members.__all__]
