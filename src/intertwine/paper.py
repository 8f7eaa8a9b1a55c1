"""Numbers reported by Godfrey et al. (NeurIPS 2022), for captions and side-by-side tables."""

from __future__ import annotations

import math

# CIFAR-10 test accuracy (%) of the zoos (appendix D.1, Table 3).
LEAKY_RESNET20_ACCURACY = {1e-4: 89.3, 1e-3: 89.4, 1e-2: 89.2, 0.1: 89.4, 0.5: 86.6, 0.9: 73.0, 1.0: 41.8}


def reported_leaky_accuracy(slope: float) -> float | None:
    """The paper's Table 3 accuracy (%) for a LeakyReLU ResNet20 of negative slope ``slope``
    (None for slopes it did not train, ReLU's 0 included)."""
    return next(
        (acc for s, acc in LEAKY_RESNET20_ACCURACY.items() if math.isclose(s, slope, rel_tol=1e-9)), None
    )


def reported_accuracy(spec: dict) -> float | None:
    """The paper's mean CIFAR-10 test accuracy (%) for a variant spec, or None if it reports none."""
    arch, activation = spec["arch"], spec.get("activation", "relu")
    if spec.get("width_multiplier", 1.0) != 1.0:
        return None
    if arch == "myrtle" and activation == "relu" and spec.get("constant_width") is None:
        return 91.3 if spec.get("batch_norm", True) else 87.0
    if arch == "resnet20" and spec.get("batch_norm", True) and spec.get("residual_activation", True):
        if activation == "relu":
            return 89.9
        if activation == "leaky_relu":
            return LEAKY_RESNET20_ACCURACY.get(spec.get("negative_slope"))
    if arch == "resnet18" and activation == "relu" and spec.get("batch_norm", True):
        return 92.9
    return None


# Procrustes similarities on the CIFAR-10 test set, mean over 32 pairs (Table 2: Myrtle, layers
# 3/6/10/14 = our act1..act4; Table 4: constant-width Myrtle, layer 10 = act3).
_MYRTLE_PROCRUSTES = {
    "grelu_procrustes": {"act1": 0.621, "act2": 0.511, "act3": 0.443, "act4": 0.490},
    "orthogonal_procrustes": {"act1": 0.772, "act2": 0.574, "act3": 0.509, "act4": 0.583},
}
_CONSTANT_WIDTH_MYRTLE_PROCRUSTES = {
    "grelu_procrustes": {"act3": 0.569},
    "orthogonal_procrustes": {"act3": 0.541},
}


def reported_procrustes(spec: dict) -> dict[str, dict[str, float]]:
    """The paper's Procrustes similarities {measure: {site: value}} for a variant spec ({} if none)."""
    if (
        spec["arch"] != "myrtle"
        or spec.get("activation", "relu") != "relu"
        or not spec.get("batch_norm", True)
    ):
        return {}
    if spec.get("width_multiplier", 1.0) != 1.0:
        return {}
    if spec.get("constant_width") is None:
        return _MYRTLE_PROCRUSTES
    return _CONSTANT_WIDTH_MYRTLE_PROCRUSTES if spec["constant_width"] == 512 else {}
