"""benchmarks/gpu_zoo.py, the GPU check of packed training, runs on the CPU at tiny size, and its
projection is each cost group's images over its measured rate."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_zoo  # noqa: E402


def test_the_gpu_check_runs_on_the_cpu_at_tiny_size(tmp_path):
    out = tmp_path / "tiny.json"
    done = subprocess.run(
        [
            sys.executable,
            "gpu_zoo.py",
            "measure",
            "--tiny",
            "--budget",
            "40",
            "--extra-budget",
            "20",
            "--plan",
            "",
            "--out",
            str(out),
        ],
        cwd=ROOT / "benchmarks",
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "training images/s of K members together" in done.stdout
    rows = json.loads(out.read_text())["rows"]
    first = next(r for r in rows if r.get("name") == "myrtle" and r.get("k") == 1)
    assert first["path"] == "new" and first["images_per_s"] > 0 and first["steady_images_per_s"] > 0
    streams = [r for r in rows if r.get("path") == "streams-bf16" and "images_per_s" in r]
    assert {(r["name"], r["k"]) for r in streams} == {("myrtle", 2), ("resnet20", 2)}  # the largest tiny pack


def test_the_projection_is_each_groups_images_over_its_rate():
    plan = {
        "groups": [
            {"spec": {"arch": "myrtle"}, "batch_size": 32, "k": 32, "images": 7.2e6, "members": 32},
            {"spec": {"arch": "resnet20"}, "batch_size": 32, "k": 5, "images": 3.6e6, "members": 5},
            {"spec": {"arch": "resnet18"}, "batch_size": 32, "k": 1, "images": 1.2e6, "members": 1},
        ]
    }
    names = [gpu_zoo.group_name(g) for g in plan["groups"]]
    rows = [
        {"path": "new", "name": names[0], "k": 32, "images_per_s": 2000.0},
        {"path": "new", "name": names[1], "k": 5, "images_per_s": 1000.0},
        {"path": "new", "name": names[2], "k": 8, "images_per_s": 1.0},  # another pack size: not this group's
        {"path": "old", "name": names[0], "k": 32, "images_per_s": 1000.0},
    ]
    projection = gpu_zoo.project(plan, rows)
    assert projection["new"]["hours_measured"] == pytest.approx(1.0 + 1.0)
    assert projection["new"]["image_share_measured"] == pytest.approx(10.8 / 12.0)
    assert projection["old"]["hours_measured"] == pytest.approx(2.0)


def test_the_ceiling_is_the_images_of_a_step_over_the_kernels_times(tmp_path):
    kernels = tmp_path / "kernels.jsonl"
    layers = [
        {"layer": "a", "gflop": 1.0, "dense NHWC bf16": 1.5, "BN NCHW f32": 2.0, "BN NHWC f32": 1.0},
        {"layer": "b", "gflop": 1.0, "dense NHWC bf16": 0.5, "BN NCHW f32": 2.0, "BN NHWC f32": 1.0},
    ]
    kernels.write_text("".join(json.dumps(layer) + "\n" for layer in layers))
    log = "model K old\nmyrtle             2            1,000          9,999\n"
    text = gpu_zoo.ceiling(str(kernels), log, k=2, batch=4, asked=2.0)
    # 8 images a step: 2 ms of dense convolutions, 4,000 images/s, 4x; with the batch norms' best
    # (2 ms) 2,000 images/s, 2x; twice the old rate is a step of 4 ms, 2 ms beside the convolutions.
    assert "a step takes 2.0 ms, 4,000 images/s, 4.0x the old path's 1,000" in text
    assert (
        "4.0 ms, 2,000 images/s, 2.0x" in text and "is a step of 4.00 ms: 2.00 ms for the batch norms" in text
    )
    assert "less than the convolutions take alone" in gpu_zoo.ceiling(
        str(kernels), log, k=2, batch=4, asked=5.0
    )
    assert gpu_zoo.ceiling(str(kernels), "no table", k=2, batch=4) == ""


def test_the_docs_gpu_block_is_the_committed_run_and_its_projection(tmp_path):
    page = tmp_path / "benchmarks.md"
    committed = (ROOT / "docs" / "benchmarks.md").read_text()
    page.write_text(committed)
    logs = ("benchmarks/gpu_zoo_h200.log", "benchmarks/gpu_kernels_h200.jsonl")
    cwd = Path.cwd()
    try:
        os.chdir(ROOT)
        gpu_zoo.docs_block(logs[0], str(page), logs[1])
    finally:
        os.chdir(cwd)
    assert page.read_text() == committed, "regenerate: python benchmarks/gpu_zoo.py docs " + " ".join(
        [logs[0], "docs/benchmarks.md", logs[1]]
    )
    assert "Their projected training time on this device, new-bf16:" in committed


def test_the_committed_paper_zoo_plan_is_the_paper_configs(tmp_path):
    out = tmp_path / "paper_zoo.json"
    gpu_zoo.plan(str(ROOT / "config" / "paper.yaml"), str(out))
    committed = json.loads((ROOT / "benchmarks" / "paper_zoo.json").read_text())
    assert json.loads(out.read_text())["groups"] == committed["groups"]
