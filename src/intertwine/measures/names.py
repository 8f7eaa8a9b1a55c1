"""The measures' names and the fewest samples each is defined on. Torch-free, so that plotting and
config code can read them without importing the measures."""

from __future__ import annotations

#: The fewest samples (inputs, the first axis) each measure is defined on, from its estimator:
#: the CKAs' unbiased HSIC_1 divides by N (N - 3), so N >= 4; CCA and the shape metrics centre the
#: features, and N centred samples span at most N - 1 directions: at N = 2 both representations
#: are the same line and SVCCA and PWCCA are 1 and the shape distances 0 for any data, so N >= 3;
#: Procrustes does not centre and compares the rows of the (N x positions, C) matrices, so it
#: counts rows: one row of each is two vectors one rotation (or, per channel, one normalisation)
#: apart, 1 for any data, so N x positions >= 2 (N >= 2 for features without positions; one
#: image with its spatial positions is allowed). Every entry point (one-shot, ``pairwise``, the
#: accumulators, ``compare_models``) enforces it with the same message.
MIN_SAMPLES = {
    "grelu_procrustes": 2,
    "orthogonal_procrustes": 2,
    "grelu_cka": 4,
    "linear_cka": 4,
    "laplace_cka": 4,
    "rbf_cka": 4,
    "channel_normalized_linear_cka": 4,
    "gate_cka": 4,
    "svcca": 3,
    "pwcca": 3,
    "shape_angular": 3,
    "shape_euclidean": 3,
}

CKA_MEASURES = (
    "grelu_cka",
    "linear_cka",
    "laplace_cka",
    "rbf_cka",
    "channel_normalized_linear_cka",
    "gate_cka",
)
PROCRUSTES_MEASURES = ("grelu_procrustes", "orthogonal_procrustes")
# Distances (0 for equal representations, up to a symmetry); every other measure is a similarity.
DISTANCES = ("shape_angular", "shape_euclidean")


def too_few_samples(measure: str, n: int, positions: int = 1) -> str | None:
    """Why ``measure`` is undefined on ``n`` samples (``MIN_SAMPLES``; of ``positions`` spatial
    positions each, which count for Procrustes), or None when it is defined.

    Parameters
    ----------
    measure : str
        A name of ``MIN_SAMPLES``.
    n : int
        The number of samples.
    positions : int
        The spatial positions per sample.

    Returns
    -------
    str or None
        The message saying how many samples the measure needs, or None.
    """
    need = MIN_SAMPLES[measure]
    procrustes = measure in ("grelu_procrustes", "orthogonal_procrustes")
    if (n * positions if procrustes else n) >= need:
        return None
    what = "rows (samples x spatial positions)" if procrustes else "samples (inputs)"
    return (
        f"{measure} needs at least {need} {what}, got N = {n}"
        + (f" x {positions}" if procrustes and positions > 1 else "")
        + f": below that it is {'undefined' if need == 4 else 'the same for any data'} (see "
        "intertwine.measures.MIN_SAMPLES); compare the representations of more inputs"
    )
