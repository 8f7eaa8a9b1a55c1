"""Representation similarity measures with the symmetries of ReLU networks (Godfrey et al.,
NeurIPS 2022, section 5 and appendix D.7).

Every measure takes two activation tensors of shape (N, C, H, W) or (N, C) -- more generally
(N, C, *spatial) -- computed on the same N inputs, and returns a float. Channels are the features
the network's intertwiner groups act on; spatial positions are never permuted. Numpy arrays are
converted; tensors stay on their device.

* ``grelu_procrustes``: Procrustes distance minimised over G_ReLU (channel permutations times
  positive channel scalings), turned into a similarity in [0, 1].
* ``orthogonal_procrustes``: the classical orthogonal Procrustes similarity, in [0, 1].
* ``grelu_cka``: CKA with the G_ReLU-invariant "max kernel" K_mn = max_c <x_mc, x_nc>.
* ``linear_cka``: linear CKA (Kornblith et al. 2019) on the flattened features.
* ``laplace_cka``: CKA with the Laplace kernel exp(-||x - y||_1 / bandwidth) on channel-normalised
  features, a positive-definite kernel that shares the G_ReLU symmetry.
* ``channel_normalized_linear_cka``: linear CKA after per-channel normalisation, as the paper's
  released code computed its "linear CKA"; kept to compare with published figures.
* ``gate_cka``: linear CKA of the gate patterns 1{x > 0} over channels and positions (the gate
  kernel of gated networks, Lakshminarayanan & Singh): which units an input switches on. Invariant
  to G_ReLU (a positive scaling keeps every sign, a permutation permutes the units), not to
  rotations, which mix the signs.
* ``rbf_cka``: CKA with the Gaussian kernel, bandwidth a fraction of the median distance
  (Kornblith et al. 2019).
* ``svcca``, ``pwcca`` (``measures.cca``), ``shape_angular``, ``shape_euclidean``
  (``measures.shape``): SVCCA, PWCCA and netrep's shape metrics; the shape metrics are distances.

Beyond one pair: ``pairwise`` computes the matrix of a measure between two lists of layers, each
layer's work done once; ``zoo`` sees K representations as a whole (netrep's generalized shape
metrics, Williams et al. 2021): ``pairwise_distances`` (the K x K distance matrix of any measure),
``classical_mds`` (an embedding of the zoo) and ``procrustes_mean`` (the mean of the Procrustes
and shape measures); ``intertwine.compare.compare_models`` reads sites of two models by forward
hooks over a data set, streaming the Procrustes measures and linear CKA through exact accumulators
(``ProcrustesAccumulator``, ``LinearCKAAccumulator``).

The package: ``names`` (the measures' names and ``MIN_SAMPLES``, torch-free), ``_base`` (input
checks, scale guard, memory blocking), ``hsic``, ``kernels``, ``cka``, ``procrustes``, ``cca``,
``shape``, ``registry`` (``MEASURES``: every measure by name), ``layerwise`` (``pairwise``),
``zoo`` (``pairwise_distances``, ``classical_mds``, ``procrustes_mean``), ``statistics`` (``permutation_test``, ``jackknife_interval``, ``pairwise_jackknife``,
``bootstrap_interval``: a measure's null and its spread over inputs).
Arrays in, numbers out: nothing here reads files, configs or tables.

Gradients: ``linear_cka``, ``rbf_cka``, ``kernel_cka`` and both Procrustes similarities, given a
tensor that requires grad, return a float64 0-d tensor carrying the graph (a training loss);
otherwise every measure returns a float.

All CKAs use the unbiased HSIC_1 estimator (Song et al. 2012; Nguyen, Raghu & Kornblith 2021,
eq. 3), so they need N >= 4 and can be slightly negative for unrelated representations. Every
measure's minimum N, and why, is ``MIN_SAMPLES``.

Scale: every measure divides a representation whose entries would overflow or underflow once
squared (beyond about 1e+-77 in float64, 1e+-9 in float32) by a power of two before it squares
anything (exact; the measures are invariant to the scale, and the euclidean shape distance is
scaled back), so values at 1e-200 and 1e+200 are those at 1.

Constant representations: a representation that is the same for every one of its N samples (zero
variance over the inputs, e.g. a layer whose units are all dead on them; with one sample, an
all-zero one) carries no information about the inputs, and no measure is defined on it (the CKAs
would be 0/0, G_ReLU Procrustes of all zeros 0.5). Every measure, ``kernel_cka`` on a kernel that
is constant up to centring, and ``ProcrustesAccumulator``'s results raise
``ConstantRepresentationError`` (a ``ValueError``) saying which argument it is; ``site_procrustes``
and ``site_cka`` add the model and the site. No measure returns NaN.

Precision: features are processed in their own floating dtype, numpy arrays as torch tensors
alike (float32 stays float32, float64 float64; integer input becomes float64, half precision
float32). Sums that cancel or run
over many samples -- the HSIC reductions, per-channel statistics and the Procrustes cross-products --
are accumulated in float64. With float32 inputs every measure agreed with its float64 value to
1e-7 (N = 1000, 32 channels 8x8); the tests allow 1e-6.

Memory: no N x N x C tensor is ever formed. Kernel matrices (N x N) are held; every other
intermediate is blocked so that it stays within ``max_bytes`` (64 MiB by default).
"""

from intertwine.measures._base import DEFAULT_MAX_BYTES, ConstantRepresentationError, constant_message
from intertwine.measures.cca import pwcca, svcca
from intertwine.measures.cka import (
    LinearCKAAccumulator,
    channel_normalized_linear_cka,
    cka_kernel,
    gate_cka,
    grelu_cka,
    kernel_cka,
    laplace_cka,
    linear_cka,
    rbf_cka,
)
from intertwine.measures.hsic import unbiased_hsic
from intertwine.measures.kernels import max_kernel
from intertwine.measures.layerwise import pairwise
from intertwine.measures.names import (
    CKA_MEASURES,
    DISTANCES,
    MIN_SAMPLES,
    PROCRUSTES_MEASURES,
    too_few_samples,
)
from intertwine.measures.procrustes import (
    ProcrustesAccumulator,
    ProcrustesAlignment,
    grelu_procrustes,
    match_channels,
    orthogonal_procrustes,
)
from intertwine.measures.statistics import (
    BootstrapInterval,
    JackknifeInterval,
    PermutationTest,
    bootstrap_interval,
    jackknife_interval,
    pairwise_jackknife,
    permutation_test,
)
from intertwine.measures.registry import MEASURES
from intertwine.measures.shape import ShapeAlignment, shape_angular, shape_euclidean, shape_metric
from intertwine.measures.zoo import (
    DISTANCE_FORMS,
    MEAN_MEASURES,
    METRICS,
    Embedding,
    ProcrustesMean,
    as_distance,
    classical_mds,
    pairwise_distances,
    procrustes_mean,
)

__all__ = [
    "procrustes_mean",
    "pairwise_distances",
    "classical_mds",
    "as_distance",
    "ProcrustesMean",
    "Embedding",
    "METRICS",
    "MEAN_MEASURES",
    "DISTANCE_FORMS",
    "BootstrapInterval",
    "CKA_MEASURES",
    "DEFAULT_MAX_BYTES",
    "DISTANCES",
    "MEASURES",
    "MIN_SAMPLES",
    "PROCRUSTES_MEASURES",
    "PermutationTest",
    "JackknifeInterval",
    "ConstantRepresentationError",
    "constant_message",
    "LinearCKAAccumulator",
    "ProcrustesAccumulator",
    "ProcrustesAlignment",
    "ShapeAlignment",
    "bootstrap_interval",
    "jackknife_interval",
    "pairwise_jackknife",
    "channel_normalized_linear_cka",
    "cka_kernel",
    "gate_cka",
    "grelu_cka",
    "grelu_procrustes",
    "kernel_cka",
    "laplace_cka",
    "linear_cka",
    "match_channels",
    "max_kernel",
    "orthogonal_procrustes",
    "pairwise",
    "permutation_test",
    "pwcca",
    "rbf_cka",
    "shape_angular",
    "shape_euclidean",
    "shape_metric",
    "svcca",
    "too_few_samples",
    "unbiased_hsic",
]
