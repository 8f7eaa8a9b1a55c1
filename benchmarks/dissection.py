"""Time of one dissection (thresholds and IoU of every unit with every concept) in intertwine's
way against a plain NetDissect-style baseline, on the same activations and concept masks.

    python benchmarks/dissection.py [--images 1000] [--units 32] [--size 8] [--mask 32] [--threads 1]

intertwine: thresholds from a running top-k per unit; for IoU only the maps whose raw maximum
exceeds the unit's threshold are upsampled, and only the firing pixels are counted. Baseline: the
quantile of each unit with numpy.quantile over all its values, every map upsampled, and the IoU
with each concept from boolean masks (one pass per concept over all pixels). Both give the same
IoUs (checked). The default layer is ResNet20's stage-3 output at half width on `shapes`
(32 units at 8x8, masks at 32x32), the probe size of config/paper.yaml's scale being 5000.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F

from common import describe_device
from intertwine.data.concepts import shapes_concepts
from intertwine.data import Split
from intertwine.data.shapes import generate_shapes
from intertwine.dissection import unit_iou, unit_thresholds


def baseline(activations: torch.Tensor, labels: torch.Tensor, n_concepts: int, quantile: float):
    n, c = activations.shape[:2]
    values = activations.transpose(0, 1).reshape(c, -1).double().numpy()
    thresholds = torch.from_numpy(np.quantile(values, 1 - quantile, axis=1)).float()
    upsampled = F.interpolate(
        activations, size=tuple(labels.shape[-2:]), mode="bilinear", align_corners=False
    )
    fired = upsampled > thresholds.view(1, -1, 1, 1)
    iou = torch.zeros(c, n_concepts)
    for k in range(n_concepts):
        mask = (labels == k + 1).any(dim=1, keepdim=True)  # (N, 1, H, W)
        inter = (fired & mask).sum(dim=(0, 2, 3)).double()
        union = fired.sum(dim=(0, 2, 3)).double() + mask.sum() - inter
        iou[:, k] = (inter / union.clamp_min(1)).float()
    return iou


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1000)
    parser.add_argument("--units", type=int, default=32)
    parser.add_argument("--size", type=int, default=8, help="activation map size")
    parser.add_argument("--mask", type=int, default=32, help="image and mask size")
    parser.add_argument("--quantile", type=float, default=0.005)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    split = generate_shapes(args.images, 0, image_size=args.mask)
    probe = shapes_concepts(Split(*(torch.from_numpy(split[k]) for k in ("images", "labels", "concepts"))))
    generator = torch.Generator().manual_seed(0)
    # ReLU-like maps with spatial structure: smoothed noise, rectified.
    noise = torch.randn(args.images, args.units, args.size, args.size, generator=generator)
    activations = F.avg_pool2d(noise, 3, stride=1, padding=1).relu()
    k = len(probe.concepts)
    print(
        f"{args.images} images, {args.units} units at {args.size}x{args.size}, masks {args.mask}x{args.mask}, "
        f"{k} concepts; {describe_device(torch.device('cpu'))}"
    )

    started = time.perf_counter()
    ours = unit_iou(activations, probe.labels, k, unit_thresholds(activations, args.quantile))
    ours_seconds = time.perf_counter() - started
    started = time.perf_counter()
    theirs = baseline(activations, probe.labels, k, args.quantile)
    baseline_seconds = time.perf_counter() - started
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)
    print(
        f"dissection: intertwine {ours_seconds:.2f} s, baseline {baseline_seconds:.2f} s, "
        f"ratio {baseline_seconds / ours_seconds:.1f}x faster (same IoUs)"
    )


if __name__ == "__main__":
    main()
