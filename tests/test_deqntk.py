"""The DEQ neural tangent kernel stage: the Gram in blocks, regression, the depth sweep, the
kernel reference, its jobs on a tiny cached data set, and its commands' errors (seconds in all)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from intertwine.workflow import paper
from intertwine.workflow.stages.deqntk import job as deqntk_jobs
from intertwine.kernels import deq, deq_regression
from intertwine.workflow.stages.deqntk.plan import gram_layout
from intertwine.workflow.settings import parse_variances, variances_name
from intertwine.workflow.stages.deqntk.tables import DEQNTK, KERNEL_REFERENCE
from intertwine.workflow.tables import to_table

SETTING = (0.6, 0.4, 0.0)


def unit(n, d=12, seed=0):
    x = torch.rand(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return x / x.norm(dim=1, keepdim=True)


def blocks_of(x_train, x_test, block_rows, tmp_path=None, variances=SETTING):
    """Every block of the [train; test] x train Gram, through a file when ``tmp_path`` is given."""
    blocks = []
    for part, start, stop in gram_layout(len(x_train), len(x_test), block_rows):
        block = deq_regression.gram_block(x_train, x_test, part, start, stop, variances)
        if tmp_path is not None:
            path = tmp_path / f"{part}{start}.npz"
            deqntk_jobs.save_block(block, path)
            block = deqntk_jobs.load_block(path)
        blocks.append(block)
    return blocks


def test_layout_tiles_train_then_test():
    assert gram_layout(5, 3, 2) == [
        ("train", 0, 2),
        ("train", 2, 4),
        ("train", 4, 5),
        ("test", 0, 2),
        ("test", 2, 3),
    ]
    with pytest.raises(ValueError, match="block_rows"):
        gram_layout(5, 3, 0)


@pytest.mark.parametrize("n_train", [23, 16, 9])  # the whole Gram, a block boundary, inside a block
def test_blocks_assemble_into_the_unblocked_gram(tmp_path, n_train):
    x_train, x_test = unit(23, seed=1), unit(7, seed=2)
    blocks = blocks_of(x_train, x_test, 8, tmp_path)
    K, K_test = deq_regression.assemble(blocks, n_train)
    full = deq.deq_ntk(x_train[:n_train], sigma_w2=0.6, sigma_u2=0.4, sigma_b2=0.0).gram
    cross = deq.deq_ntk(x_test, x_train[:n_train], sigma_w2=0.6, sigma_u2=0.4, sigma_b2=0.0).gram
    assert torch.equal(K, K.T)  # exactly symmetric
    torch.testing.assert_close(K, full, rtol=0, atol=1e-12)
    torch.testing.assert_close(K_test, cross, rtol=0, atol=1e-12)
    assert torch.allclose(K.diagonal(), torch.full((n_train,), 1 / (1 - 0.6), dtype=torch.float64))
    # a training block holds only the columns right of its diagonal
    assert [tuple(b.gram.shape) for b in blocks] == [(8, 23), (8, 15), (7, 7), (7, 23)]


def test_assemble_refuses_missing_or_repeated_blocks(tmp_path):
    blocks = blocks_of(unit(10), unit(4, seed=3), 4)
    with pytest.raises(ValueError, match="training blocks do not cover the rows"):
        deq_regression.assemble([b for b in blocks if (b.part, b.start) != ("train", 4)], 10)
    with pytest.raises(ValueError, match="test blocks do not cover"):
        deq_regression.assemble(blocks + blocks[-1:], 10)
    (tmp_path / "bad.npz").write_bytes(b"not a block")
    with pytest.raises(ValueError, match="bad.npz: not a readable Gram block"):
        deqntk_jobs.load_block(tmp_path / "bad.npz")


def test_regression_separates_clusters_and_is_nan_on_a_singular_kernel():
    generator = torch.Generator().manual_seed(0)
    centres = torch.eye(3, 30, dtype=torch.float64) + 0.2
    labels = torch.arange(60) % 3
    x = centres[labels] + 0.05 * torch.randn(60, 30, generator=generator, dtype=torch.float64)
    x = x / x.norm(dim=1, keepdim=True)
    K = deq.deq_ntk(x[:40], sigma_w2=0.6, sigma_u2=0.4, sigma_b2=0.0).gram
    K_test = deq.deq_ntk(x[40:], x[:40], sigma_w2=0.6, sigma_u2=0.4, sigma_b2=0.0).gram
    assert deq_regression.regression_accuracy(K, labels[:40], K_test, labels[40:], 3) == 1.0
    constant = torch.ones(40, 40, dtype=torch.float64)
    assert math.isnan(deq_regression.regression_accuracy(constant, labels[:40], K_test, labels[40:], 3))


def test_depth_sweep_rows_and_the_injected_ntk_reaching_the_deq_ntk():
    x, labels = unit(30, d=16, seed=4), torch.arange(30) % 3
    rows = deq_regression.depth_sweep(
        x[:20], labels[:20], x[20:], labels[20:], 3, [1, 60], [(1.0, 0.0, 0.0), SETTING], SETTING
    )
    assert [r["depth"] for r in rows] == ["1", "60", "1", "60", "deq"]
    assert [r["panel"] for r in rows] == [""] * 5 and [r["ridge"] for r in rows] == [0.0] * 5
    assert all(0 <= r["test_acc"] <= 1 for r in rows)
    assert [r["iterations"] is None for r in rows] == [True] * 4 + [False]
    # depth 60 with input injection: the DEQ-NTK to 0.6^60, the same predictions
    assert rows[3]["test_acc"] == rows[4]["test_acc"]


def test_reference_is_blind_to_rotations_of_a_representation():
    """The DEQ-NTK is a function of inner products: rotating the inputs leaves it unchanged, and a
    rotated representation has the same linear CKA with it (G_ReLU CKA, the max kernel, differs)."""
    x = unit(24, d=8, seed=5)
    q, _ = torch.linalg.qr(torch.randn(8, 8, generator=torch.Generator().manual_seed(6), dtype=torch.float64))
    kernel = deq.deq_ntk(x, sigma_w2=0.6, sigma_u2=0.4, sigma_b2=0.0).gram
    torch.testing.assert_close(deq.deq_ntk(x @ q, sigma_w2=0.6, sigma_u2=0.4, sigma_b2=0.0).gram, kernel)
    representation = torch.relu(
        x @ torch.randn(8, 6, generator=torch.Generator().manual_seed(7), dtype=x.dtype)
    )
    rotation, _ = torch.linalg.qr(
        torch.randn(6, 6, generator=torch.Generator().manual_seed(8), dtype=x.dtype)
    )
    measures = ["linear_cka", "grelu_cka"]
    plain = deq_regression.reference_rows({"site": representation}, kernel, measures)
    rotated = deq_regression.reference_rows([("site", representation @ rotation)], kernel, measures)
    assert [r["kernel"] for r in plain] == measures
    assert plain[0]["cka"] == pytest.approx(rotated[0]["cka"], abs=1e-10)
    assert abs(plain[1]["cka"] - rotated[1]["cka"]) > 1e-3
    dead = deq_regression.reference_rows({"dead": torch.zeros(24, 6, dtype=x.dtype)}, kernel, ["linear_cka"])
    assert math.isnan(dead[0]["cka"])


def test_inputs_are_unit_rows_and_variance_names_round_trip():
    images = torch.randint(0, 256, (5, 3, 4, 4), dtype=torch.uint8)
    x = deq_regression.unit_rows(images)
    assert x.shape == (5, 48) and x.dtype == torch.float64
    torch.testing.assert_close(x.norm(dim=1), torch.ones(5, dtype=torch.float64))
    with pytest.raises(ValueError, match="zero after deqntk.preprocessing 'raw'"):
        deq_regression.unit_rows(torch.zeros(1, 3, 2, 2, dtype=torch.uint8))


def test_preprocessing_choices():
    images = torch.randint(
        0, 256, (6, 3, 4, 4), dtype=torch.uint8, generator=torch.Generator().manual_seed(3)
    )
    mean = torch.tensor([0.2, 0.5, 0.7])
    std = torch.tensor([0.1, 0.2, 0.4])
    pixels = images.double() / 255
    raw = deq_regression.unit_rows(images, "raw", mean, std)  # raw ignores the statistics
    torch.testing.assert_close(raw, deq_regression.unit_rows(images))
    torch.testing.assert_close(
        raw, pixels.flatten(1) / pixels.flatten(1).norm(dim=1, keepdim=True), rtol=0, atol=0
    )
    centred = (pixels - mean.double()[:, None, None]).flatten(1)
    torch.testing.assert_close(
        deq_regression.unit_rows(images, "centred", mean), centred / centred.norm(dim=1, keepdim=True)
    )
    standard = ((pixels - mean.double()[:, None, None]) / std.double()[:, None, None]).flatten(1)
    x = deq_regression.unit_rows(images, "standardised", mean, std)
    torch.testing.assert_close(x, standard / standard.norm(dim=1, keepdim=True))
    torch.testing.assert_close(x.norm(dim=1), torch.ones(6, dtype=torch.float64))
    # the three differ: a per-channel shift and scale change the directions of the rows
    assert (deq_regression.unit_rows(images, "centred", mean) - raw).abs().max() > 0.05
    assert (x - deq_regression.unit_rows(images, "centred", mean)).abs().max() > 0.05
    with pytest.raises(ValueError, match="deqntk.preprocessing: unknown choice 'zca'"):
        deq_regression.unit_rows(images, "zca")
    with pytest.raises(ValueError, match="needs the training set's per-channel mean and std"):
        deq_regression.unit_rows(images, "standardised", mean)
    with pytest.raises(ValueError, match="std 0"):
        deq_regression.unit_rows(images, "standardised", mean, torch.tensor([0.1, 0.0, 0.4]))
    flat = torch.full((1, 3, 2, 2), 51, dtype=torch.uint8)  # 51 / 255 = 0.2 everywhere: the mean
    with pytest.raises(ValueError, match="zero after deqntk.preprocessing 'centred'"):
        deq_regression.unit_rows(flat, "centred", torch.tensor([0.2, 0.2, 0.2], dtype=torch.float64))


def test_three_equal_channels_give_the_kernel_of_one():
    """MNIST's grey images are stored as three equal channels: their unit rows' inner products, and
    so the DEQ-NTK, are those of the one channel (exactly up to rounding)."""
    grey = torch.randint(0, 256, (5, 1, 6, 6), dtype=torch.uint8, generator=torch.Generator().manual_seed(9))
    one, three = deq_regression.unit_rows(grey), deq_regression.unit_rows(grey.repeat(1, 3, 1, 1))
    torch.testing.assert_close(three @ three.T, one @ one.T, rtol=0, atol=1e-15)


def test_unit_pixels_and_the_convolutional_regression():
    images = torch.randint(
        1, 256, (7, 3, 1, 1), dtype=torch.uint8, generator=torch.Generator().manual_seed(2)
    )
    x = deq_regression.unit_pixels(images, "raw")
    torch.testing.assert_close(x.norm(dim=1), torch.ones(7, 1, 1, dtype=torch.float64))
    black = images.clone()
    black[0] = 0
    with pytest.raises(ValueError, match="1 pixels are zero after deqntk.conv.preprocessing 'raw'"):
        deq_regression.unit_pixels(black, "raw")
    mean = torch.tensor([0.5, 0.5, 0.5], dtype=torch.float64)
    assert deq_regression.unit_pixels(black, "centred", mean).isfinite().all()
    # one-pixel images: the convolutional kernel is the fully connected one of the pixel, so the
    # regression gives the same accuracy; pairs are the training triangle and test x train
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 0])
    result = deq_regression.conv_accuracy(x[:5], labels[:5], x[5:], labels[5:], 3, SETTING, "gap")
    rows = x.flatten(1)
    K = deq.deq_ntk(rows[:5], **dict(zip(("sigma_w2", "sigma_u2", "sigma_b2"), SETTING))).gram
    K_test = deq.deq_ntk(rows[5:], rows[:5], **dict(zip(("sigma_w2", "sigma_u2", "sigma_b2"), SETTING))).gram
    assert result["test_acc"] == deq_regression.regression_accuracy(K, labels[:5], K_test, labels[5:], 3)
    assert result["pairs"] == 15 + 10 and result["seconds_per_pair"] > 0 and result["iterations"] > 0
    # the text's readout (deqntk.conv.readout: trace) regresses on conv_deq_ntk's trace Grams
    trace = deq_regression.conv_accuracy(x[:5], labels[:5], x[5:], labels[5:], 3, SETTING, "trace")
    options = dict(zip(("sigma_w2", "sigma_u2", "sigma_b2"), SETTING), pooling="trace")
    K, K_test = deq.conv_deq_ntk(x[:5], **options).gram, deq.conv_deq_ntk(x[5:], x[:5], **options).gram
    assert trace["test_acc"] == deq_regression.regression_accuracy(K, labels[:5], K_test, labels[5:], 3)


def test_frozen_ridge_and_panels():
    K = torch.diag(torch.tensor([3.0, 3.0, 3.0, 3.0], dtype=torch.float64)) + 1
    assert deq_regression.frozen_ridge(K, 1.0) == 4.0 / 4  # Theta(x, x) = 4, n = 4
    assert deq_regression.frozen_ridge(K, 0.5) == 0.5
    assert deq_regression.frozen_ridge(K, 0.0) == 0.0
    curves = deq_regression.panel_curves([[0.6, 0.4], [0.25, 0.75]], 0.1)
    assert [c[0] for c in curves] == ["w0.6_b0.4", "w0.25_b0.75"]
    assert curves[0][1] == (0.6, 0.0, 0.4)
    assert curves[0][2] == pytest.approx((0.6, 0.3, 0.1), abs=1e-15)
    assert curves[1][2] == pytest.approx((0.25, 0.65, 0.1), abs=1e-15)
    with pytest.raises(ValueError, match="deqntk.depth.panels: panel .* sigma_b2 below"):
        deq_regression.panel_curves([[0.95, 0.05]], 0.1)


def test_depth_sweep_panels_regularise_the_frozen_kernel():
    x, labels = unit(30, d=16, seed=4), torch.arange(30) % 3
    panels = deq_regression.panel_curves([[0.6, 0.4]], 0.1)
    rows = deq_regression.depth_sweep(
        x[:20], labels[:20], x[20:], labels[20:], 3, [1, 60], [], None, panels=panels, frozen_scale=1.0
    )
    assert [(r["panel"], r["depth"]) for r in rows] == [
        ("w0.6_b0.4", "1"),
        ("w0.6_b0.4", "60"),
        ("w0.6_b0.4", "1"),
        ("w0.6_b0.4", "60"),
        ("w0.6_b0.4", "deq"),
    ]
    assert [(r["sigma_w2"], r["sigma_u2"]) for r in rows[:2]] == [(0.6, 0.0)] * 2
    # the DEQ-NTK's finite-depth iteration (the caption's), then the DEQ-NTK, at (0.6, 0.3, 0.1)
    for r in rows[2:]:
        assert r["sigma_u2"] == pytest.approx(0.3) and r["sigma_b2"] == 0.1
    # the finite-depth NTK gets Theta(x, x) / n, the DEQ-NTK's iteration and the DEQ-NTK none
    theta_60 = deq.ntk(x[:1], depth=60, sigma_w2=0.6, sigma_u2=0.0, sigma_b2=0.4)[0, 0]
    assert rows[1]["ridge"] == pytest.approx(float(theta_60) / 20, rel=1e-12)
    assert [r["ridge"] for r in rows[2:]] == [0.0] * 3
    # at depth 60 the iteration has reached the DEQ-NTK (0.6^60 of the way left): same accuracy
    assert rows[3]["test_acc"] == rows[4]["test_acc"]
    # at depth 60 without input injection the kernel has frozen: every entry the same correlation's
    K = deq.ntk(x[:20], depth=60, sigma_w2=0.6, sigma_u2=0.0, sigma_b2=0.4)
    off = K[~torch.eye(20, dtype=torch.bool)]
    assert float(off.max() - off.min()) < 1e-6 * float(off.mean())
    for variances in [(0.25, 0.25, 0.5), (0.6, 0.4, 0.0), (1.0, 0.0, 0.0)]:
        assert parse_variances(variances_name(variances)) == variances
    assert variances_name([0.6, 0.4, 0.0]) == "w0.6_u0.4_b0"
    with pytest.raises(ValueError, match="not a variance setting's name"):
        parse_variances("0.6_0.4_0")


def test_papers_accuracies():
    assert paper.reported_deqntk("cifar10", (0.6, 0.4, 0.0)) == 59.77
    assert paper.reported_deqntk("cifar10", [0.25, 0.25, 0.5], 50_000, 10_000) == 59.08
    assert paper.reported_deqntk("cifar10", (0.8, 0.2, 0.0), 1000) is None  # not the paper's size
    assert paper.reported_deqntk("mnist", (0.25, 0.25, 0.5)) == 98.6
    assert paper.reported_deqntk("shapes", (0.6, 0.4, 0.0)) is None
    assert paper.reported_deqntk("cifar10", (0.5, 0.5, 0.0)) is None


# --- the jobs, on a tiny cached data set ------------------------------------------------------------


def test_jobs_write_the_tables_rows(tmp_path, tiny_shapes_dir):
    from intertwine.workflow.job import Job
    from intertwine.workflow.stages.deqntk.job import (
        deqntk_conv,
        deqntk_depth,
        deqntk_gram,
        deqntk_regression,
    )

    job = Job("cpu", tiny_shapes_dir, 0, lambda message: None)
    block = {"n_test": 16, "tol": 1e-10}
    paths = []
    for part, start, stop in gram_layout(40, 16, 24):
        paths.append(tmp_path / f"{part}{start}.npz")
        gram = deqntk_gram(job, SETTING, 40, part, start, stop, block)
        deqntk_jobs.save_block(gram, paths[-1], deqntk_jobs.gram_provenance(job))
    rows = pd.concat(
        deqntk_regression(job, SETTING, n, [str(p) for p in paths], {"n_test": 16, "ridge": 0.0})
        for n in (24, 40)
    )
    to_table(rows, DEQNTK)  # every column, of its type
    assert list(rows["n_train"]) == [24, 40] and (rows["depth"] == "deq").all()
    assert rows["test_acc"].between(0, 1).all() and (rows["iterations"] > 0).all()
    with pytest.raises(ValueError, match="hold 16 test rows, but n_test is 8"):
        deqntk_regression(job, SETTING, 40, [str(p) for p in paths], {"n_test": 8})
    depth = deqntk_depth(job, 0, {"depths": [1, 3], "depth_n_train": 20, "depth_n_test": 10})
    to_table(depth, DEQNTK)
    assert list(depth["depth"]) == ["1", "3", "deq"] and (depth["study"] == "depth").all()
    assert depth["iterations"].isna().tolist() == [True, True, False]
    assert (depth["preprocessing"] == "raw").all() and (depth["panel"] == "").all()
    panels = deqntk_depth(
        job,
        0,
        {
            "depths": [2],
            "depth_n_train": 20,
            "depth_n_test": 10,
            "finite_variances": [],
            "depth_variances": None,
            "panels": [[0.6, 0.4]],
            "preprocessing": "standardised",
        },
    )
    to_table(panels, DEQNTK)
    assert list(panels["panel"]) == ["w0.6_b0.4"] * 3 and list(panels["depth"]) == ["2", "2", "deq"]
    assert (panels["preprocessing"] == "standardised").all() and panels["ridge"].iloc[0] > 0
    conv = deqntk_conv(
        job, {"conv_n_train": 4, "conv_n_test": 2, "conv_settings": [[0.6, 0.4, 0.0], [0.25, 0.25, 0.5]]}
    )
    to_table(conv, DEQNTK)
    assert list(conv["study"]) == ["conv"] * 2 and list(conv["sigma_w2"]) == [0.6, 0.25]
    assert (conv["readout"] == "gap").all() and (conv["preprocessing"] == "centred").all()
    assert conv["test_acc"].between(0, 1).all() and (conv["n_train"] == 4).all()
    # the preprocessing reaches the Gram: centred inputs give another block than raw ones
    raw = deqntk_gram(job, SETTING, 40, "test", 0, 16, block)
    centred = deqntk_gram(job, SETTING, 40, "test", 0, 16, block | {"preprocessing": "centred"})
    assert (raw.gram - centred.gram).abs().max() > 1e-3
    with pytest.raises(ValueError, match="500 training images asked for, but there are only 160"):
        deqntk_depth(job, 0, {"depth_n_train": 500})


def test_table_holds_the_papers_accuracy_as_a_fraction(tmp_path):
    """deqntk-table fills paper_acc where the paper has a number, on test_acc's scale: the claims
    subtract one from the other."""
    from argparse import Namespace

    from intertwine.workflow.stages.deqntk.commands import cmd_deqntk_table
    from intertwine.workflow.tables import read_parquet, write_parquet

    row = {
        "study": "accuracy",
        "dataset": "cifar10",
        "sigma_w2": 0.6,
        "sigma_u2": 0.4,
        "sigma_b2": 0.0,
        "n_train": 50_000,
        "n_test": 10_000,
        "depth": "deq",
        "draw": 0,
        "panel": "",
        "preprocessing": "raw",
        "readout": "",
        "test_acc": 0.5,
        "ridge": 0.0,
        "gram_seconds": 1.0,
        "regression_seconds": 1.0,
        "iterations": 29,
        "residual": 1e-11,
        "paper_acc": None,
        "device": "cpu",
        "config_hash": "0",
        "version": "0",
    }
    other = row | {"n_train": 1000}  # not the paper's size: no number
    part = tmp_path / "part.parquet"
    write_parquet(pd.DataFrame([row, other]), part, DEQNTK)
    cmd_deqntk_table(Namespace(parts=[str(part)], out=str(tmp_path / "deqntk.parquet")))
    table = read_parquet([tmp_path / "deqntk.parquet"], DEQNTK)
    assert table["paper_acc"].iloc[0] == pytest.approx(0.5977, abs=1e-12)
    assert pd.isna(table["paper_acc"].iloc[1])


def test_reference_job_rows(tmp_path, tiny_shapes_dir):
    from intertwine import models
    from intertwine.workflow.job import Job
    from intertwine.workflow.stages.deqntk.job import kernel_reference_member
    from intertwine.workflow.zoo import CHECKPOINT_FORMAT, save_checkpoint

    spec = {"arch": "myrtle", "width_multiplier": 0.125}
    torch.manual_seed(0)
    checkpoint = tmp_path / "seed0.pt"
    save_checkpoint(
        {
            "format": CHECKPOINT_FORMAT,
            "state_dict": models.build(spec).state_dict(),
            "spec": models.normalize_spec(spec),
            "variant": "myrtle",
            "seed": 0,
            "test_acc": 0.1,
            "test_dtype": "float32",
        },
        checkpoint,
    )
    job = Job("cpu", tiny_shapes_dir, 0, lambda message: None)
    rows = kernel_reference_member(job, str(checkpoint), {"reference_samples": 12})
    to_table(rows, KERNEL_REFERENCE)
    assert len(rows) == 4 * 2 and set(rows["kernel"]) == {"grelu_cka", "linear_cka"}
    assert (rows["samples"] == 12).all() and rows["cka"].dropna().between(-1, 1).all()


# --- the commands' errors ---------------------------------------------------------------------------


def intertwine(*args):
    return subprocess.run([sys.executable, "-m", "intertwine", *args], capture_output=True, text=True)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--variances", "0.6,0.4,0"], "argument --variances: not a variance setting's name"),
        (["--part", "val"], "argument --part: invalid choice: 'val'"),
        (["--n-train", "0"], "argument --n-train: must be at least 1, got 0"),
        (["--start", "-1"], "argument --start: must be at least 0, got -1"),
    ],
)
def test_gram_options_are_checked_by_the_parser(argv, message):
    base = {
        "--variances": "w0.6_u0.4_b0",
        "--n-train": "10",
        "--part": "train",
        "--start": "0",
        "--stop": "5",
        "--config": "{}",
        "--out": "o.npz",
    }
    given = dict(zip(argv[::2], argv[1::2]))
    result = intertwine(
        "deqntk-gram", *[item for key, value in (base | given).items() for item in (key, value)]
    )
    assert result.returncode == 2 and f"intertwine deqntk-gram: error: {message}" in result.stderr


def test_command_errors_name_the_problem(tmp_path, tiny_shapes_dir):
    result = intertwine(
        "deqntk-gram",
        *("--data", str(tiny_shapes_dir), "--variances", "w0.6_u0.4_b0", "--n-train", "10"),
        *(
            "--part",
            "train",
            "--start",
            "5",
            "--stop",
            "5",
            "--config",
            "{}",
            "--out",
            str(tmp_path / "g.npz"),
        ),
    )
    assert result.returncode == 1 and "--stop (5) must be greater than --start (5)" in result.stderr
    result = intertwine(
        "deqntk-gram",
        *("--data", str(tiny_shapes_dir), "--variances", "w0.6_u0.4_b0.5", "--n-train", "10"),
        *("--part", "train", "--start", "0", "--stop", "5", "--config", json.dumps({"n_test": 4})),
        *("--out", str(tmp_path / "g.npz")),
    )
    assert result.returncode == 1 and "sigma_w2 + sigma_u2 + sigma_b2 must be 1" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "g.npz").exists()
    result = intertwine("deqntk-figure", "--figures", '{"dpi": 50}', "--depth", str(tmp_path / "d.png"))
    assert (
        result.returncode == 1
        and "--accuracy and --depth draw deqntk.parquet: give it as --table" in result.stderr
    )
    (tmp_path / "block.npz").write_bytes(np.zeros(3).tobytes())
    result = intertwine(
        "deqntk-regression",
        str(tmp_path / "block.npz"),
        *("--data", str(tiny_shapes_dir), "--variances", "w0.6_u0.4_b0", "--n-train", "4"),
        *("--config", "{}", "--out", str(tmp_path / "r.parquet")),
    )
    assert result.returncode == 1 and "block.npz: not a readable Gram block" in result.stderr


# --- provenance of the Gram's blocks (issue 33) -------------------------------------------------------


@pytest.fixture
def gram_job(tmp_path, tiny_shapes_dir):
    from intertwine.workflow.job import Job
    from intertwine.workflow.stages.deqntk.job import deqntk_gram

    job = Job("cpu", tiny_shapes_dir, 0, lambda message: None)

    def blocks(variances, n_train=40, n_test=16, where="g", preprocessing="raw"):
        paths = []
        for part, start, stop in gram_layout(n_train, n_test, 24):
            paths.append(tmp_path / where / f"{part}{start}.npz")
            config = {"n_test": n_test, "preprocessing": preprocessing}
            block = deqntk_gram(job, variances, n_train, part, start, stop, config)
            deqntk_jobs.save_block(block, paths[-1], deqntk_jobs.gram_provenance(job))
        return [str(p) for p in paths]

    return job, blocks


@pytest.mark.parametrize(
    "mix, message",
    [
        ("other variances", r"test0.npz is a block of the Gram at w0.8_u0.2_b0, not at w0.6_u0.4_b0"),
        ("other n_train", r"train24.npz is a block of a Gram of 48 training and 16 test images"),
        ("other n_test", r"test0.npz is a block of a Gram of 40 training and 8 test images"),
        (
            "other preprocessing",
            r"test0.npz is a block of the Gram of 'centred' inputs, but deqntk.preprocessing is 'raw'",
        ),
    ],
)
def test_regression_refuses_blocks_of_another_gram(gram_job, mix, message):
    from intertwine.workflow.stages.deqntk.job import deqntk_regression

    job, blocks = gram_job
    good = blocks(SETTING)
    if mix == "other variances":
        other = blocks((0.8, 0.2, 0.0), where="o")
        paths = good[:-1] + other[-1:]
    elif mix == "other preprocessing":
        paths = good[:-1] + blocks(SETTING, where="o", preprocessing="centred")[-1:]
    elif mix == "other n_train":
        paths = good[:1] + blocks(SETTING, n_train=48, where="o")[1:2] + good[2:]
    else:
        paths = good[:-1] + blocks(SETTING, n_test=8, where="o")[-1:]
    with pytest.raises(ValueError, match=message):
        deqntk_regression(job, SETTING, 40, paths, {"n_test": 16})


def test_regression_refuses_a_gram_too_small_and_variances_that_do_not_sum_to_one(gram_job):
    from intertwine.workflow.stages.deqntk.job import deqntk_regression

    job, blocks = gram_job
    paths = blocks(SETTING)
    assert deqntk_jobs.load_block(paths[0]).variances == SETTING
    assert (deqntk_jobs.load_block(paths[0]).n_train, deqntk_jobs.load_block(paths[0]).n_test) == (40, 16)
    assert deqntk_jobs.load_block(paths[0]).preprocessing == "raw"
    with pytest.raises(ValueError, match="hold a Gram of 40 training images, fewer than the 48 asked for"):
        deqntk_regression(job, SETTING, 48, paths, {"n_test": 16})
    with pytest.raises(ValueError, match="hold 16 test rows, but n_test is 8"):
        deqntk_regression(job, SETTING, 40, paths, {"n_test": 8})
    with pytest.raises(ValueError, match=r"w0.6_u0.5_b0: sigma_w2 \+ sigma_u2 \+ sigma_b2 must be 1"):
        deqntk_regression(job, (0.6, 0.5, 0.0), 40, paths, {"n_test": 16})
    with pytest.raises(ValueError, match="a variance setting is three numbers"):
        deqntk_regression(job, (None, 0.4, 0.0), 40, paths, {"n_test": 16})


@pytest.mark.parametrize("other", ["global seed", "data cache"])
def test_regression_refuses_blocks_of_another_seed_or_data_cache(gram_job, tmp_path, other):
    """Before: blocks of another --global-seed, or of another data cache of the same size, gave a
    wrong accuracy with rc 0 (the blocks recorded neither)."""
    from intertwine.data import build_dataset, write_dataset
    from intertwine.workflow.job import Job
    from intertwine.workflow.stages.deqntk.job import deqntk_regression

    job, blocks = gram_job
    paths = blocks(SETTING)
    assert deqntk_regression(job, SETTING, 40, paths, {"n_test": 16})["test_acc"].between(0, 1).all()
    if other == "global seed":
        reader = Job("cpu", job.data_dir, 1, lambda message: None)
        message = r"train0.npz is a block of another Gram than this job's: its global seed is 0, this job's --global-seed 1\. "
    else:  # the same sizes, drawn from another seed
        block = {
            "dataset": "shapes",
            "val_size": 32,
            "shapes": {"train_size": 160, "test_size": 64, "image_size": 16},
        }
        write_dataset(tmp_path / "other", *build_dataset(block, seed=1))
        reader = Job("cpu", tmp_path / "other", 0, lambda message: None)
        message = r"train0.npz is a block of another Gram than this job's: it was computed on shapes at 16x16 .*, but this job's data cache .*other holds shapes at 16x16 .*"
    with pytest.raises(ValueError, match=message + r".*rerun their deqntk_gram jobs with --global-seed"):
        deqntk_regression(reader, SETTING, 40, paths, {"n_test": 16})


def test_a_block_without_seed_or_data_is_used_with_a_warning(gram_job, tmp_path):
    from intertwine.workflow.stages.deqntk.job import deqntk_gram, deqntk_regression

    job, _ = gram_job
    logged = []
    job.log = logged.append
    paths = []
    for part, start, stop in gram_layout(40, 16, 24):
        paths.append(str(tmp_path / f"old{part}{start}.npz"))
        deqntk_jobs.save_block(deqntk_gram(job, SETTING, 40, part, start, stop, {"n_test": 16}), paths[-1])
    deqntk_regression(job, SETTING, 40, paths, {"n_test": 16})
    assert sum("records no global seed or data cache" in line for line in logged) == len(paths)


@pytest.mark.parametrize("damage", ["truncated", "old format", "empty"])
def test_damaged_or_old_block_is_an_error_naming_the_file(tmp_path, damage):
    x_train, x_test = unit(10, seed=1), unit(4, seed=2)
    path = tmp_path / "train0.npz"
    deqntk_jobs.save_block(deq_regression.gram_block(x_train, x_test, "train", 0, 5, SETTING), path)
    if damage == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
        message = r"train0.npz: not a readable Gram block \(BadZipFile"
    elif damage == "empty":
        path.write_bytes(b"")
        message = "train0.npz: not a readable Gram block"
    else:
        with np.load(path) as f:
            old = {k: f[k] for k in f.files if k not in ("variances", "sizes", "preprocessing")}
        np.savez(path, **old)
        message = "train0.npz: a Gram block that records no variance setting, sizes or input preprocessing"
    with pytest.raises(ValueError, match=message + r".*delete it and rerun its deqntk_gram job"):
        deqntk_jobs.load_block(path)
