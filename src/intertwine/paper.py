"""Numbers reported by Godfrey et al. (NeurIPS 2022), for captions and side-by-side tables."""
from __future__ import annotations

# CIFAR-10 test accuracy (%) of the zoos (appendix D.1, Table 3).
LEAKY_RESNET20_ACCURACY = {1e-4: 89.3, 1e-3: 89.4, 1e-2: 89.2, 0.1: 89.4, 0.5: 86.6, 0.9: 73.0, 1.0: 41.8}


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
