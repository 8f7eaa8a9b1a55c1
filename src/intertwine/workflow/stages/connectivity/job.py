"""The linear-mode-connectivity stage's job: one pair of zoo members, aligned and interpolated."""

from __future__ import annotations

import copy
import time

import numpy as np
import pandas as pd
import torch

from intertwine import mode_connectivity, network_alignment
from intertwine.data.augment import normalize
from intertwine.workflow.job import Job
from intertwine.models import normalize_spec
from intertwine.workflow.stages.connectivity.settings import ConnectivityConfig


def connectivity_pair(job: Job, a: str, b: str, pair: int, block: dict) -> pd.DataFrame:
    """One row per (method, correction, split, lambda): member b (g) aligned to member a (f) by
    each of ``block["methods"]``, then the loss and accuracy of ``(1 - lam) f + lam T(g)``,
    corrected by each of ``block["corrections"]``, on the first ``train_images`` training images
    and on the test images, with each curve's barriers. Keys ``block`` lacks take the schema's
    defaults."""
    settings = ConnectivityConfig.from_block(block, "connectivity")
    f, meta_a = job.model(a)
    g, meta_b = job.model(b)
    if meta_a["variant"] != meta_b["variant"]:
        raise ValueError(f"{a} and {b} belong to different variants")
    variant = meta_a["variant"]
    mean, std = job.stats()
    train = job.split("train", settings.train_images)
    test = job.split("test", settings.test_images)
    train_x, test_x = normalize(train.images, mean, std), normalize(test.images, mean, std)
    lams = np.linspace(0.0, 1.0, settings.lambdas).tolist()
    base = {
        "variant": variant,
        "pair": pair,
        "seed_a": meta_a["seed"],
        "seed_b": meta_b["seed"],
        "width_multiplier": normalize_spec(meta_a["spec"]).get("width_multiplier", 1.0),
    }
    splits = {"train": (train_x, train.labels), "test": (test_x, test.labels)}
    # f's own point (lambda 0) is the same whichever way g is aligned: scored once per correction.
    known = {correction: {} for correction in settings.corrections}
    rows = []
    for method in settings.methods:
        started = time.perf_counter()
        aligned, sweeps = _aligned(job, f, g, method, train_x, settings, (variant, pair))
        seconds = time.perf_counter() - started
        distance = network_alignment.parameter_distance(f, aligned, settings.fold_batch_norm)
        for correction in settings.corrections:
            curves = mode_connectivity.interpolation_curve(
                f,
                aligned,
                lams,
                splits,
                correction=correction,
                train_images=train_x,
                batch_size=settings.batch_size,
                known=known[correction],
            )
            known[correction].setdefault(0.0, {split: curve[0] for split, curve in curves.items()})
            curve_rows = _curve_rows(
                curves,
                lams,
                {**base, "method": method, "correction": correction, "distance": distance},
                {"sweeps": sweeps, "align_seconds": seconds},
                {split: len(x) for split, (x, _) in splits.items()},
            )
            rows += curve_rows
            job.log(
                f"{variant} pair {pair} {method} ({correction}): aligned in {seconds:.1f} s ({sweeps} "
                f"sweeps), test loss barrier {curve_rows[-1]['barrier']:.3f}, accuracy along the line "
                + " ".join(f"{point.accuracy:.3f}" for point in curves["test"])
            )
    return pd.DataFrame(rows).assign(**job.provenance({"connectivity": block}))


def _curve_rows(
    curves: dict, lams: list[float], keys: dict, alignment: dict, images: dict[str, int]
) -> list[dict]:
    """The table's rows of one curve per split (the test split last), each with the curve's
    barriers and the images it was scored on."""
    rows = []
    for split in sorted(curves, key=lambda name: name == "test"):
        curve = curves[split]
        losses = [point.loss for point in curve]
        accuracies = [point.accuracy for point in curve]
        barriers = {
            "barrier": mode_connectivity.barrier(lams, losses, reference="endpoints_mean"),
            "barrier_line": mode_connectivity.barrier(lams, losses, reference="endpoints_line"),
            "accuracy_barrier": mode_connectivity.barrier(
                lams, [-a for a in accuracies], reference="endpoints_mean"
            ),
        }
        rows += [
            {
                **keys,
                "split": split,
                "lam": point.lam,
                "loss": point.loss,
                "accuracy": point.accuracy,
                **barriers,
                **alignment,
                "images": images[split],
            }
            for point in curve
        ]
    return rows


def _aligned(job: Job, f, g, method: str, train_x, settings: ConnectivityConfig, key: tuple):
    """g aligned to f by ``method`` (the same function as g), and weight matching's sweeps."""
    if method == "unaligned":
        return g, 0
    matching, group = method.split("_", 1)
    if matching == "weight":
        # on CPU copies in float64: the coordinate descent moves one site's weights at a time
        order = torch.Generator().manual_seed(job.seed("connectivity", *key, "order"))
        alignment = network_alignment.weight_matching(
            copy.deepcopy(f).cpu().double(),
            copy.deepcopy(g).cpu().double(),
            group,
            max_sweeps=settings.max_sweeps,
            generator=order,
            fold_batch_norm=settings.fold_batch_norm,
        )
    else:
        alignment = network_alignment.activation_matching(
            f, g, train_x, group, batch_size=settings.batch_size
        )
    return alignment.apply(g), alignment.sweeps
