"""The stitching stage's job: one pair of zoo members, one method, every site."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from intertwine import models, stitching
from intertwine.workflow.job import Job
from intertwine.workflow.settings import StitchConfig, parse_method
from intertwine.training import evaluate
from intertwine.workflow.zoo import recorded_test_acc


def check_two_members(f, meta_a: dict, a: str, g, meta_b: dict, b: str) -> None:
    """ValueError naming both checkpoints when they are one member: the same variant and seed, or
    the same weights (a checkpoint copied to the wrong path), which would stitch a network with
    itself and report it as a pair of two."""
    same_member = (meta_a.get("variant"), meta_a.get("seed")) == (meta_b.get("variant"), meta_b.get("seed"))
    state_a, state_b = f.state_dict(), g.state_dict()
    same_weights = state_a.keys() == state_b.keys() and all(
        state_a[name].shape == state_b[name].shape and torch.equal(state_a[name], state_b[name])
        for name in state_a
    )
    if not (same_member or same_weights):
        return
    why = (
        f"both record {meta_a.get('variant')} seed {meta_a.get('seed')}"
        if same_member
        else f"they hold the same weights (recorded as {meta_a.get('variant')} seed {meta_a.get('seed')} "
        f"and {meta_b.get('variant')} seed {meta_b.get('seed')})"
    )
    misplaced = [
        f"{path} records seed {meta.get('seed')}"
        for path, meta in ((a, meta_a), (b, meta_b))
        if Path(path).name.startswith("seed") and Path(path).stem != f"seed{meta.get('seed')}"
    ]
    raise ValueError(
        f"cannot stitch {a} into {b}: they are one member ({why}), so the pair would stitch a network "
        "with itself"
        + (f"; {', '.join(misplaced)}, so a checkpoint is at the wrong path" if misplaced else "")
        + ". Give two members' checkpoints; a checkpoint copied to the wrong path: delete it and rerun "
        "its training job (snakemake remakes it)"
    )


def stitch_pair(
    job: Job, a: str, b: str, method: str, pair: int, block: dict, sites: list[str] | None = None
) -> pd.DataFrame:
    """One row per site (``sites``, or every site): zoo member a stitched into member b with
    ``method``. ``block`` holds the ``StitchConfig`` settings the method reads."""
    f, meta_a = job.model(a)
    g, meta_b = job.model(b)
    check_two_members(f, meta_a, a, g, meta_b, b)
    if meta_a["spec"] != meta_b["spec"]:
        raise ValueError(
            f"cannot stitch {a} into {b}: different model specs ({meta_a['spec']} vs {meta_b['spec']})"
        )
    available = {s.name: s for s in models.sites(f)}
    for site in sites or []:
        if site not in available:
            raise ValueError(
                f"stitching.sites names {site!r}, which {meta_a['variant']} does not "
                f"have; its sites are {list(available)}"
            )
    config = StitchConfig.from_block(block, "stitching")
    kind, param = parse_method(method)
    mean, std = job.stats()
    train_split, test_split = job.split("train", config.train_images), job.split("test")
    acc = lambda m: evaluate(m, test_split, mean, std, config.eval_batch_size)  # noqa: E731
    # f's and g's own accuracies come from their checkpoints when recorded in float32.
    acc_a, acc_b = recorded_test_acc(meta_a), recorded_test_acc(meta_b)
    acc_a = acc(f) if acc_a is None else acc_a
    acc_b = acc(g) if acc_b is None else acc_b
    rows = []
    for site in (available[name] for name in (sites or models.cut_sites(f))):
        label = f"{meta_a['variant']} pair {pair} ({meta_a['seed']}->{meta_b['seed']}) {site.name} {method}"
        key = (job.global_seed, "stitching", meta_a["variant"], pair, site.name, method)
        stitched, layer = stitching.stitch_site(
            f, g, site, method, config, train_split, mean, std, key, label, job.log, accuracy=acc
        )
        acc_stitched, acc_start = acc(stitched), layer.pop("acc_start")
        job.log(
            f"{label}: accuracy {acc_stitched:.4f} (before training {acc_start:.4f}; a {acc_a:.4f}, "
            f"b {acc_b:.4f})"
        )
        rows.append(
            {
                "variant": meta_a["variant"],
                "pair": pair,
                "seed_a": meta_a["seed"],
                "seed_b": meta_b["seed"],
                "site": site.name,
                "inside_residual": site.inside_residual,
                "method": method,
                # the rank the layer has: rank<r> above the site's channels runs as full rank
                "rank": min(param, site.channels) if kind == "rank" else None,
                "l1_lambda": param if kind == "l1" else None,
                "acc_a": acc_a,
                "acc_b": acc_b,
                "acc_stitched": acc_stitched,
                "penalty": (acc_a + acc_b) / 2 - acc_stitched,
                "penalty_start": (acc_a + acc_b) / 2 - acc_start,
                "stitch_params": stitching.method_dimension(method, site.channels),
                "channels": site.channels,
                "epochs": config.epochs,
                **layer,
                **job.provenance({"stitching": block}),
            }
        )
    return pd.DataFrame(rows)
