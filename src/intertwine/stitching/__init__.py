"""Model stitching (paper section 4, appendix D.2): how well do two networks' representations at a
site match up to a class of stitching layers?

The stitched network ``S(f, g, l, phi) = g_{>l} ∘ phi ∘ f_{<=l}`` runs model f up to the activation
at site l, maps the channels there by a 1x1 convolution phi (no bias, no BN), and runs model g
from there on. f and g stay frozen; only phi trains. The penalty is
``(acc f + acc g) / 2 - acc S`` on the test set. Layers:

- ``full``: any C x C matrix.
- ``rank``: C -> r -> C, rank at most r (a manifold of dimension 2Cr - r^2).
- ``grelu``: an element P D of the intertwiner group of ReLU (dimension C: the scales). P is kept
  on the Birkhoff polytope of doubly stochastic matrices by projected gradient descent (ReLU and
  Sinkhorn after each step, a -alpha ||P||_F term pulling it toward a vertex), D >= 0 by ReLU, D
  held at I for the first part of training. At evaluation P is rounded to the nearest
  permutation (Hungarian algorithm).

The appendix's variations (D.2.2, D.5, D.6), each a method of its own:

- ``softsort``: the same group, P parameterised by SoftSort (a row-stochastic relaxation of
  the permutation sorting a score vector; temperature tau, 1/C by default) and D = diag(exp(lambda)).
  Rounded by the argmax over each row of P (``stitching.softsort_rounding: argmax``, the paper's
  D.2.2) or the Hungarian algorithm (``hungarian``); row i of SoftSort peaks at the input with the
  i-th largest score, so with distinct scores both give the sorting permutation.
- ``monomial``: P D with D of either sign, the group of a gated network's value units
  (:mod:`intertwine.models.gated`); trained as ``grelu``, matched by ``match_monomial``.
- ``grelu_cv``: the G_ReLU layer with alpha chosen by cross-validation: one short run per alpha of
  ``alpha_grid`` on a random 80 % of the training images, scored on the disjoint 20 % (not
  augmented); the best alpha's layer, its learned scales in place, is the one measured.
- ``l1_<lambda>`` (e.g. ``l1_0.01``): the full layer with ``lambda * sum |W_ij|`` added to the loss;
  its sparsity (the fraction of ``|W_ij| <= 1e-3``) is recorded for every method.

``init: random`` starts each layer at random (Kaiming-uniform matrices; P at the centre of the
polytope, or a random doubly stochastic matrix as the released code with ``grelu_start: random``;
D = I): the text does not say how the layers start. ``init: match`` (our addition) starts it from the layer of its class that
best maps f's activations onto g's on a few training images: least squares (full), reduced-rank
regression (rank r), the Hungarian match of normalised channels with least-squares scales
(G_ReLU, ``match_grelu``). Same layer classes, same training; far fewer steps to a good layer.

Before measuring, one no-gradient pass over the training data refreshes g's batch-norm running
statistics for the final layer (the paper does this after rounding the G_ReLU layer; we do it for
every method so that no method is measured with statistics that lag behind its layer).

The package: ``layers`` (the layer classes, ``build_layer``, ``method_dimension``, ``sparsity``),
``matching`` (the ``init: match`` starts: ``least_squares_map``, ``match_grelu``,
``match_monomial``) and ``fitting`` (``stitch``, ``fit``, ``select_alpha``,
``refresh_batch_norm``, ``stitch_site``). Every public name is importable from ``intertwine.stitching``.
"""

# The package's public names; each module's private helpers stay in it (the modules import each
# other's public names only).
from intertwine.stitching.fitting import (
    Fit as Fit,
)
from intertwine.stitching.fitting import (
    cv_split,
    fit,
    refresh_batch_norm,
    select_alpha,
    stitch,
    stitch_site,
)
from intertwine.stitching.fitting import (
    refreshes_batch_norm as refreshes_batch_norm,
)
from intertwine.stitching.layers import (
    MATCH_OFF_MASS as MATCH_OFF_MASS,
)
from intertwine.stitching.layers import (
    PERMUTATION_UPDATES as PERMUTATION_UPDATES,
)
from intertwine.stitching.layers import (
    FullStitch,
    GReLULayer,
    GReLUStitch,
    MonomialStitch,
    RankStitch,
    SoftSortStitch,
    build_layer,
    method_dimension,
    sparsity,
)
from intertwine.stitching.matching import (
    least_squares_map as least_squares_map,
)
from intertwine.stitching.matching import (
    match_grelu,
    match_monomial,
)

__all__ = [
    "FullStitch",
    "RankStitch",
    "GReLULayer",
    "MonomialStitch",
    "match_monomial",
    "GReLUStitch",
    "SoftSortStitch",
    "build_layer",
    "method_dimension",
    "sparsity",
    "cv_split",
    "match_grelu",
    "stitch",
    "fit",
    "select_alpha",
    "refresh_batch_norm",
    "stitch_site",
]
