"""The DEQ neural tangent kernel stage's jobs, on :mod:`intertwine.kernels.deq_regression`'s
mathematics: a block of the accuracy study's Gram (written and read as files here:
:func:`save_block`, :func:`load_block`, :func:`check_blocks`), the regression of one variance
setting and training-set size on it, one draw of the depth sweep, and one zoo member's CKAs with
the kernel (the similarity stage's reference).

The training pool is the data set's whole training set, the validation split included (kernel
regression selects nothing on it). One permutation of the pool, drawn from the global seed, gives
every training subset of the accuracy study: the first n_train of it, so that the subsets are
nested and one Gram of the largest serves every smaller one. Its test images are the first n_test
of the test split (the data cache holds each split in a random order). Each draw of the depth
sweep permutes the pool and the test split anew. ``intertwine.workflow.stages.deqntk.plan.gram_layout`` cuts the Gram
into blocks of rows, one job each.
"""

from __future__ import annotations

import io
import math
import time
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from intertwine import models
from intertwine.data import Split
from intertwine.workflow.job import Job
from intertwine.kernels import deq, deq_regression
from intertwine.kernels.deq_regression import Block
from intertwine.workflow.stages.deqntk.settings import DeqntkConfig
from intertwine.workflow.settings import variances_name
from intertwine.utils import atomic_path
from intertwine.workflow.zoo import data_fingerprint, fingerprint_text

# --- the Gram's blocks as files ------------------------------------------------------------------


def save_block(block: Block, path: str | Path, provenance: dict | None = None) -> None:
    """Write a block as .npz (the Gram in float64 and where it sits), atomically; with
    ``provenance`` (``gram_provenance``), the global seed and data cache its rows were computed from."""
    buffer = io.BytesIO()
    recorded = {key: np.array(value) for key, value in (provenance or {}).items()}
    np.savez(
        buffer,
        gram=block.gram.detach().cpu().numpy(),
        part=np.array(block.part),
        rows=np.array([block.start, block.stop, block.column]),
        iterations=np.array(block.iterations),
        residual=np.array(block.residual),
        seconds=np.array(block.seconds),
        variances=np.array(block.variances, dtype=np.float64),
        sizes=np.array([block.n_train, block.n_test]),
        preprocessing=np.array(block.preprocessing),
        **recorded,
    )
    with atomic_path(path) as tmp:
        Path(tmp).write_bytes(buffer.getvalue())


def load_block(path: str | Path) -> Block:
    """A block written by :func:`save_block`; a damaged or foreign file, or one written before
    blocks recorded their variances and sizes, is an error naming it."""
    try:
        with np.load(path) as f:
            if not {"variances", "sizes", "preprocessing"} <= set(f.files):
                raise ValueError(
                    f"{path}: a Gram block that records no variance setting, sizes or input preprocessing "
                    "(written by an older version, or not a block of this stage); delete it and rerun its "
                    "deqntk_gram job"
                )
            start, stop, column = (int(v) for v in f["rows"])
            n_train, n_test = (int(v) for v in f["sizes"])
            block = Block(
                str(f["part"]),
                start,
                stop,
                column,
                torch.from_numpy(f["gram"]),
                int(f["iterations"]),
                float(f["residual"]),
                float(f["seconds"]),
                tuple(float(v) for v in f["variances"]),
                n_train,
                n_test,
                str(f["preprocessing"]),
            )
    except FileNotFoundError:
        raise
    except ValueError as err:
        if str(err).startswith(f"{path}: "):
            raise
        raise ValueError(
            f"{path}: not a readable Gram block ({err}); delete it and rerun its deqntk_gram job"
        ) from None
    except (OSError, KeyError, EOFError, TypeError, zipfile.BadZipFile) as err:
        raise ValueError(
            f"{path}: not a readable Gram block ({type(err).__name__}: {err}); delete it and rerun its "
            "deqntk_gram job"
        ) from None
    if (
        block.part not in ("train", "test")
        or block.gram.ndim != 2
        or block.gram.shape[0] != stop - start
        or len(block.variances) != 3
    ):
        raise ValueError(f"{path}: not a Gram block of this stage; delete it and rerun its deqntk_gram job")
    return block


def check_blocks(
    blocks: list[Block],
    names: list[str],
    variances: tuple[float, float, float],
    n_train: int,
    n_test: int,
    preprocessing: str = "raw",
) -> None:
    """ValueError naming the first block (``names``: its file) that belongs to another Gram than
    the one of ``variances`` and ``preprocessing`` with at least ``n_train`` training columns and
    ``n_test`` test rows, or that disagrees with the first block on the Gram's sizes."""
    if not blocks:
        raise ValueError("no Gram blocks given; give every block of one Gram (deqntk-gram's outputs)")
    first = blocks[0]
    for block, name in zip(blocks, names):
        if block.preprocessing != preprocessing:
            raise ValueError(
                f"{name} is a block of the Gram of {block.preprocessing!r} inputs, but deqntk.preprocessing "
                f"is {preprocessing!r}: rerun its deqntk_gram job (snakemake does, when the setting changes)"
            )
        if not all(
            math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-15) for a, b in zip(block.variances, variances)
        ):
            raise ValueError(
                f"{name} is a block of the Gram at {variances_name(block.variances)}, not at "
                f"{variances_name(variances)}: give only the blocks of one variance setting (rerun its "
                "deqntk_gram jobs if it is in the wrong place)"
            )
        if (block.n_train, block.n_test) != (first.n_train, first.n_test):
            raise ValueError(
                f"{name} is a block of a Gram of {block.n_train} training and {block.n_test} test images, "
                f"but {names[0]} of one of {first.n_train} and {first.n_test}: the blocks come from two "
                "configs; delete the stale ones and rerun their deqntk_gram jobs"
            )
    if first.n_train < n_train:
        raise ValueError(
            f"the blocks ({names[0]}, ...) hold a Gram of {first.n_train} training images, fewer than the "
            f"{n_train} asked for; rerun the deqntk_gram jobs with --n-train {n_train} or more"
        )
    if first.n_test != n_test:
        raise ValueError(
            f"the blocks ({names[0]}, ...) hold {first.n_test} test rows, but n_test is {n_test}: they belong "
            "to another config; rerun their deqntk_gram jobs"
        )


def gram_provenance(job: Job) -> dict:
    """What a Gram's rows are computed from beyond the block's own settings: the global seed (it
    draws the permutation of the training pool whose first n_train images are the Gram's columns)
    and the data cache (its images), as the hash of ``zoo.data_fingerprint`` and its description."""
    fingerprint = data_fingerprint(job.meta())
    return {"seed": job.global_seed, "data": fingerprint["hash"], "data_text": fingerprint_text(fingerprint)}


def check_provenance(paths: list[str], job: Job) -> None:
    """ValueError naming the first block file written from another global seed or data cache than
    ``job``'s: its rows are other images, so the regression would give a wrong accuracy. A block
    written before blocks recorded them is used unchecked, with a warning in the job's log."""
    ours = gram_provenance(job)
    for path in paths:
        with np.load(path) as f:
            recorded = {key: f[key].item() for key in ("seed", "data", "data_text") if key in f.files}
        if not {"seed", "data"} <= set(recorded):
            job.log(
                f"warning: {path} records no global seed or data cache (written before Gram blocks "
                "recorded them), so whether it belongs to this job's is not checked"
            )
            continue
        differences = []
        if int(recorded["seed"]) != ours["seed"]:
            differences.append(
                f"its global seed is {recorded['seed']}, this job's --global-seed {ours['seed']}"
            )
        if recorded["data"] != ours["data"]:
            differences.append(
                f"it was computed on {recorded.get('data_text', recorded['data'])}, but this job's data "
                f"cache {job.data_dir} holds {ours['data_text']}"
            )
        if differences:
            raise ValueError(
                f"{path} is a block of another Gram than this job's: {'; and '.join(differences)}. The "
                "seed draws the training images and the cache holds them, so its rows are other images "
                "and the accuracy would be wrong. Give the blocks made with this seed and data cache, or "
                f"rerun their deqntk_gram jobs with --global-seed {ours['seed']} --data {job.data_dir}"
            )


# --- the jobs -------------------------------------------------------------------------------------


def _pool(job: Job) -> Split:
    """The whole training set: the train split and the held-out validation split."""

    def load():
        train, val = job.split("train"), job.split("val")
        return Split(torch.cat([train.images, val.images]), torch.cat([train.labels, val.labels]))

    return job._cached("deqntk pool", load)


def _training_order(job: Job, n: int) -> torch.Tensor:
    """The first n of the accuracy study's one permutation of the training pool (nested in n)."""
    generator = torch.Generator().manual_seed(job.seed("deqntk", "train"))
    return deq_regression.draw(n, len(_pool(job)), generator, "training images").to(job.device)


def _test_split(job: Job, n: int) -> Split:
    split = job.split("test", n)
    if len(split) < n:
        raise ValueError(f"{n} test images asked for, but the test split has {len(split)}")
    return split


def _unit_rows(job: Job, images: torch.Tensor, settings: DeqntkConfig) -> torch.Tensor:
    """The images as the kernel's unit rows, preprocessed as ``deqntk.preprocessing`` says."""
    mean, std = job.stats() if settings.preprocessing != "raw" else (None, None)
    return deq_regression.unit_rows(images, settings.preprocessing, mean, std)


def _num_classes(job: Job) -> int:
    return len(job.meta()["classes"])


def _variances(values, equilibrium: bool = True) -> tuple[float, float, float]:
    """A variance setting (sigma_w2, sigma_u2, sigma_b2): numbers >= 0 that sum to 1, with
    sigma_w2 < 1 for the equilibrium kernel (``equilibrium``; a finite-depth NTK allows 1)."""
    if len(values) != 3:
        raise ValueError(f"a variance setting is (sigma_w2, sigma_u2, sigma_b2), got {values}")
    try:
        w, u, b = (float(v) for v in values)
    except (TypeError, ValueError):
        raise ValueError(
            f"a variance setting is three numbers (sigma_w2, sigma_u2, sigma_b2), got {values}"
        ) from None
    try:
        deq.check_variances(w, u, b, equilibrium=equilibrium)
    except ValueError as err:
        raise ValueError(f"variance setting {variances_name((w, u, b))}: {err}") from None
    return w, u, b


def deqntk_gram(job: Job, variances, n_train: int, part: str, start: int, stop: int, block: dict) -> Block:
    """Rows [start, stop) of the ``part`` ("train" or "test") rows of the accuracy study's Gram
    for the first ``n_train`` training images (the largest training-set size) and the first
    ``block["n_test"]`` test images (``deq_regression.gram_block``)."""
    settings = DeqntkConfig.from_block(block, "deqntk")
    variances = _variances(variances)
    order = _training_order(job, n_train)
    x_train = _unit_rows(job, _pool(job).images[order], settings)
    x_test = _unit_rows(job, _test_split(job, settings.n_test).images, settings)
    result = deq_regression.gram_block(
        x_train, x_test, part, start, stop, variances, settings.tol, settings.preprocessing
    )
    job.log(
        f"{variances_name(variances)}: {part} rows [{start}, {stop}) x {tuple(result.gram.shape)} "
        f"in {result.seconds:.1f} s, {result.iterations} iterations (last step {result.residual:.1e})"
    )
    return result


def deqntk_regression(job: Job, variances, n_train: int, blocks: list[str], block: dict) -> pd.DataFrame:
    """Kernel regression with the DEQ-NTK of the first ``n_train`` training images on the test
    images, the Gram assembled from its ``blocks`` (.npz files of ``deqntk_gram``): one row."""
    settings = DeqntkConfig.from_block(block, "deqntk")
    variances = _variances(variances)
    parts = [load_block(path) for path in blocks]
    check_blocks(
        parts, [str(path) for path in blocks], variances, n_train, settings.n_test, settings.preprocessing
    )
    check_provenance([str(path) for path in blocks], job)
    K, K_test = deq_regression.assemble(parts, n_train)
    used = [p for p in parts if p.part == "test" or p.start < n_train]
    y_train = _pool(job).labels[_training_order(job, n_train)]
    y_test = _test_split(job, settings.n_test).labels
    started = time.perf_counter()
    acc = deq_regression.regression_accuracy(
        K.to(job.device), y_train, K_test.to(job.device), y_test, _num_classes(job), settings.ridge
    )
    seconds = time.perf_counter() - started
    job.log(
        f"{variances_name(variances)}, {n_train} training / {len(y_test)} test images: "
        f"test accuracy {100 * acc:.2f} % (regression {seconds:.1f} s)"
    )
    w, u, b = variances
    row = {
        "study": "accuracy",
        "dataset": job.meta()["dataset"],
        "sigma_w2": w,
        "sigma_u2": u,
        "sigma_b2": b,
        "n_train": n_train,
        "n_test": len(y_test),
        "depth": deq_regression.DEQ,
        "draw": 0,
        "test_acc": acc,
        "ridge": settings.ridge,
        "panel": "",
        "preprocessing": settings.preprocessing,
        "readout": "",
        "iterations": max(p.iterations for p in used),
        "residual": max(p.residual for p in used),
        "gram_seconds": sum(p.seconds for p in used),
        "regression_seconds": seconds,
        "paper_acc": None,
    }
    return pd.DataFrame([row]).assign(**job.provenance({"deqntk": block}))


def deqntk_depth(job: Job, draw: int, block: dict) -> pd.DataFrame:
    """One draw of the depth sweep (``deq_regression.depth_sweep``): ``depth_n_train`` training images of
    the pool and ``depth_n_test`` test images, each drawn from the draw's seed."""
    settings = DeqntkConfig.from_block(block, "deqntk")
    generator = torch.Generator().manual_seed(job.seed("deqntk", "depth", draw))
    pool, test = _pool(job), job.split("test")
    train_idx = deq_regression.draw(settings.depth_n_train, len(pool), generator, "training images").to(
        job.device
    )
    test_idx = deq_regression.draw(settings.depth_n_test, len(test), generator, "test images").to(job.device)
    panels = [
        (name, _variances(finite, equilibrium=False), _variances(equilibrium))
        for name, finite, equilibrium in deq_regression.panel_curves(settings.panels, settings.deq_sigma_b2)
    ]
    rows = deq_regression.depth_sweep(
        _unit_rows(job, pool.images[train_idx], settings),
        pool.labels[train_idx],
        _unit_rows(job, test.images[test_idx], settings),
        test.labels[test_idx],
        _num_classes(job),
        settings.depths,
        [_variances(v, equilibrium=False) for v in settings.finite_variances],
        None if settings.depth_variances is None else _variances(settings.depth_variances),
        settings.ridge,
        settings.tol,
        panels,
        settings.frozen_ridge,
    )
    table = pd.DataFrame(rows)
    job.log(
        f"draw {draw}: "
        + ", ".join(
            f"{r['panel'] + ' ' if r['panel'] else ''}{r['depth']} {100 * r['test_acc']:.1f} %" for r in rows
        )
        + f" ({table['gram_seconds'].sum() + table['regression_seconds'].sum():.1f} s)"
    )
    return table.assign(
        study="depth",
        dataset=job.meta()["dataset"],
        n_train=settings.depth_n_train,
        n_test=settings.depth_n_test,
        draw=draw,
        preprocessing=settings.preprocessing,
        readout="",
        paper_acc=None,
        iterations=table["iterations"].astype("Int64"),
        **job.provenance({"deqntk": block}),
    )


def deqntk_conv(job: Job, block: dict) -> pd.DataFrame:
    """The convolutional DEQ-NTK on a small subset: the first ``conv_n_train`` images of the
    accuracy study's permutation of the pool and the first ``conv_n_test`` test images, each pixel
    a unit vector (``deq_regression.unit_pixels``); per variance setting, kernel regression with the
    NTK of the configured readout (``deq_regression.conv_accuracy``): one row each."""
    settings = DeqntkConfig.from_block(block, "deqntk")
    order = _training_order(job, settings.conv_n_train)
    pool, test = _pool(job), _test_split(job, settings.conv_n_test)
    mean, std = job.stats() if settings.conv_preprocessing != "raw" else (None, None)
    x_train = deq_regression.unit_pixels(pool.images[order], settings.conv_preprocessing, mean, std)
    x_test = deq_regression.unit_pixels(test.images, settings.conv_preprocessing, mean, std)
    rows = []
    for values in settings.conv_settings:
        w, u, b = _variances(values)
        result = deq_regression.conv_accuracy(
            x_train,
            pool.labels[order],
            x_test,
            test.labels,
            _num_classes(job),
            (w, u, b),
            settings.conv_readout,
            settings.ridge,
            settings.tol,
        )
        job.log(
            f"convolutional DEQ-NTK {variances_name((w, u, b))}, {settings.conv_readout} readout, "
            f"{len(x_train)} training / {len(x_test)} test images of {tuple(x_train.shape[1:])}: test accuracy "
            f"{100 * result['test_acc']:.2f} %, {result['iterations']} iterations, "
            f"{result['seconds_per_pair']:.3g} s per image pair ({result['pairs']} pairs)"
        )
        rows.append(
            {
                "study": "conv",
                "dataset": job.meta()["dataset"],
                "sigma_w2": w,
                "sigma_u2": u,
                "sigma_b2": b,
                "n_train": len(x_train),
                "n_test": len(x_test),
                "depth": deq_regression.DEQ,
                "draw": 0,
                "panel": "",
                "preprocessing": settings.conv_preprocessing,
                "readout": settings.conv_readout,
                "test_acc": result["test_acc"],
                "ridge": settings.ridge,
                "iterations": result["iterations"],
                "residual": result["residual"],
                "gram_seconds": result["gram_seconds"],
                "regression_seconds": result["regression_seconds"],
                "paper_acc": None,
            }
        )
    return pd.DataFrame(rows).assign(**job.provenance({"deqntk": block}))


#: Activations held at once by ``kernel_reference_member`` (a forward pass reads every site of a group).
ACTIVATION_BYTES = 512 * 2**20


def _site_activations(model, images, sites, mean, std, max_bytes: int = ACTIVATION_BYTES):
    """(site, activations) of every site on ``images``, one forward pass per group of consecutive
    sites whose activations fit in ``max_bytes`` together (a site too large alone is its own group)."""
    sizes = {
        site: a[0].numel() * a.element_size()
        for site, a in models.site_activations(model, images[:1], sites, mean, std).items()
    }
    groups, current, total = [], [], 0
    for site in sites:
        size = sizes[site] * len(images)
        if current and total + size > max_bytes:
            groups.append(current)
            current, total = [], 0
        current.append(site)
        total += size
    groups.append(current)
    for group in groups:
        yield from models.site_activations(model, images, group, mean, std).items()


def kernel_reference_member(job: Job, checkpoint: str, block: dict) -> pd.DataFrame:
    """CKA of each site of a zoo member with the DEQ-NTK Gram of the first ``reference_samples``
    test images (all of them when null), one row per (site, measure's kernel)."""
    settings = DeqntkConfig.from_block(block, "deqntk")
    model, meta = job.model(checkpoint)
    images = job.split("test", settings.reference_samples).images
    w, u, b = _variances(settings.reference_variances)
    kernel = deq.deq_ntk(
        _unit_rows(job, images, settings), sigma_w2=w, sigma_u2=u, sigma_b2=b, tol=settings.tol
    ).gram
    sites = [site.name for site in models.sites(model)]
    activations = _site_activations(model, images, sites, *job.stats())
    rows = deq_regression.reference_rows(activations, kernel, settings.reference_measures)
    table = pd.DataFrame(rows)
    job.log(
        f"{meta['variant']} seed {meta['seed']}: CKA with the DEQ-NTK {variances_name((w, u, b))} on "
        f"{len(images)} images at {len(sites)} sites: "
        + ", ".join(
            f"{m} {table.loc[table['kernel'] == m, 'cka'].mean():.3f}" for m in settings.reference_measures
        )
        + " (mean over sites)"
    )
    table.insert(0, "variant", meta["variant"])
    table.insert(1, "seed", meta["seed"])
    return table.assign(
        samples=len(images),
        sigma_w2=w,
        sigma_u2=u,
        sigma_b2=b,
        **job.provenance({"deqntk": block}, device=False),
    )
