"""The zoo at GPU speed, measured in one short window: training images/s and TFLOP/s of packs of
the zoo's architectures (K = 1, 8, 32, 64 members) on the old path and the new side by side, and the
projected wall time of config/paper.yaml's zoo on this device.

Paths: ``old`` is ``training.train_pack`` of another source tree (``--old-src``, e.g. a checkout of
the commit before the fast path: ``git worktree add /tmp/old <commit>``); ``new`` and ``new-bf16``
are this tree's ``packed_training.train_stacked`` (wide grouped convolutions, batched augmentation,
a fused optimiser step, a CUDA graph per step) in float32 and under bf16 autocast; ``compiled-bf16``
is ``new-bf16`` through ``torch.compile`` (``--compile``, on a GPU) and ``streams-bf16`` each
member its own network on its own CUDA stream in channels-last (``zoo.training.pack_mode``), both for
Myrtle and ResNet20 at K = 32, the packs the check names, within ``--extra-budget`` (a minute; 0
leaves them out and the run within 6 minutes). Each path runs in
its own process, so the old and the new code never share a module. Inputs are random images (speed
does not depend on their content); every member trains ``--steps`` steps of batch 32 after a
shorter warm-up run of the same shapes (cuDNN's autotuning, the allocator).

    python benchmarks/gpu_zoo.py plan config/paper.yaml benchmarks/paper_zoo.json   # needs Snakemake
    python benchmarks/gpu_zoo.py measure --old-src /tmp/old/src --out gpu_zoo.json   # on the GPU, ~7 min
    python benchmarks/gpu_zoo.py measure --tiny                                      # a CPU check, ~1 min
    python benchmarks/gpu_zoo.py kernels                                             # one pack's layers, ~30 s
    python benchmarks/gpu_zoo.py docs benchmarks/gpu_zoo_h200.log docs/benchmarks.md benchmarks/gpu_kernels_h200.jsonl

``measure`` prints a table per architecture and the projection, and writes every number to
``--out`` (JSON); ``--budget`` and ``--extra-budget`` seconds bound the measurement (what is left
unmeasured says so).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"

#: The architectures of issue-sized GPU checks, in the order they are measured (the ones that
#: decide the check first).
SPECS = {
    "myrtle": {"arch": "myrtle"},
    "resnet20": {"arch": "resnet20"},
    "myrtle_nobn": {"arch": "myrtle", "batch_norm": False},
    "resnet20_leaky": {"arch": "resnet20", "activation": "leaky_relu", "negative_slope": 0.1},
    "resnet18": {"arch": "resnet18"},
    "c4gap": {"arch": "c4gap"},
    "c4gap_dgn": {"arch": "c4gap", "gated": {"family": "dgn"}},
}
TINY_SPECS = {
    "myrtle": {"arch": "myrtle", "width_multiplier": 0.125},
    "resnet20": {"arch": "resnet20", "width_multiplier": 0.25},
    "c4gap_dgn": {"arch": "c4gap", "width_multiplier": 0.125, "gated": {"family": "dgn"}},
}
PATHS = ("old", "new", "new-bf16")
#: Other ways of running the new path, in bf16, measured beside the three for the packs the GPU
#: check names (Myrtle and ResNet20 at the largest size up to 32); not in the projection. Streams:
#: each member its own network on its own CUDA stream, in channels-last (``zoo.training.pack_mode``;
#: the layer table's dense NHWC bf16 convolutions); compiled: the wide pack through
#: ``torch.compile`` (``zoo.training.compile``, ``--compile``; on a GPU only: inductor compiles for
#: half a minute a pack on a CPU).
STREAMS, COMPILED = "streams-bf16", "compiled-bf16"
EXTRA_SIZE = 32
#: Cost groups of the plan with fewer training images are not measured (the projection says so).
GROUP_MIN_IMAGES = 1e8
#: Pack sizes measured per architecture: every size for the two the GPU check names, the paper
#: config's pack size for the rest.
SIZES = {"myrtle": None, "resnet20": None}
#: ResNet18's packs stop at 32 (the paper config's pack size; 64 would take minutes of the window).
LARGEST_PACK = {"resnet18": 32}

#: Every field of ``TrainConfig`` for these runs: the paper's recipe (Adam, batch 32 per member,
#: translations and flips), one epoch. Fields a tree's ``TrainConfig`` lacks are left out.
RECIPE = {
    "epochs": 1,
    "steps": None,
    "batch_size": 32,
    "lr": 1e-3,
    "weight_decay": 0.0,
    "lr_drops": 0,
    "lr_drop_factor": 0.1,
    "lr_milestones": [],
    "warmup_steps": 0,
    "lr_schedule": "step",
    "lr_min": 0.0,
    "optimizer": "adam",
    "label_smoothing": 0.0,
    "mixup_alpha": 0.0,
    "cutmix_alpha": 0.0,
    "mixing_epochs": None,
    "momentum": 0.9,
    "translate": 2,
    "flip": True,
    "select_on": "val",
    "bf16": False,
    "channels_last": True,
    "cuda_graphs": True,
    "pack_mode": "wide",
    "compile": "none",
    "gate_probe_images": 0,
    "eval_batch_size": 1000,
}


# --- one path, in its own process -------------------------------------------------------------


def _config(**changes):
    from intertwine.training_config import TrainConfig

    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    return TrainConfig(**{k: v for k, v in (RECIPE | changes).items() if k in fields})


def _train(
    path: str, spec: dict, k: int, steps: int, device, config, alone: bool = False, log=None
) -> tuple[float, float]:
    """(seconds, peak GiB) of training k members of ``spec`` for ``steps`` steps on ``path``;
    ``alone``: one member by ``training.train_pack`` (which is ``train``), as the zoo trains a
    variant whose pack size is 1, on every path."""
    import torch

    from intertwine import models
    from intertwine.data import Split

    n = steps * config.batch_size
    cpu = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=cpu).to(device)
    labels = torch.randint(0, 10, (n,), generator=cpu).to(device)
    split, val = Split(images, labels), Split(images[:256], labels[:256])
    mean = torch.full((3,), 0.5, device=device)
    std = torch.full((3,), 0.25, device=device)
    built = []
    for seed in range(k):
        torch.manual_seed(seed)
        built.append(models.build(spec).to(device))
    generators = [torch.Generator(device=device).manual_seed(seed) for seed in range(k)]
    names = [f"m{i}" for i in range(k)]
    log = log or (lambda _: None)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
    started = time.perf_counter()
    if path == "old" or alone:
        from intertwine.training import train_pack

        train_pack(built, split, val, config, generators, mean, std, names, log=log)
    else:  # a pack even of one member, the new path's own cost
        from intertwine.data.augment import normalize
        from intertwine.packed_training import pack_network, train_stacked

        example = normalize(images[:2], mean, std)
        network = pack_network(built, example, names[0], log, config.pack_mode, config.channels_last)
        if network is None:  # train_pack would train the members one after another: not a pack
            raise SystemExit(f"{spec}: neither widens nor packs under vmap, so it has no packed path to time")
        train_stacked(network, split, val, config, generators, mean, std, names, log=log)
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else 0.0
    return seconds, peak


def _flops_per_image(spec: dict, device) -> float:
    """Training FLOPs per image (forward and backward) of one member, by torch's flop counter."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from intertwine import models

    model = models.build(spec).to(device)
    x = torch.randn(32, 3, 32, 32, device=device)
    with FlopCounterMode(display=False) as counter:
        model(x).sum().backward()
    return counter.get_total_flops() / 32


def worker(path: str, jobs: list[dict], steps: int, deadline: float, device_name: str) -> None:
    """Measure each job (spec name, spec, K) on ``path`` until ``deadline`` (a time.time()); one
    JSON line per job on stdout."""
    import torch

    from intertwine.utils import resolve_device

    device = resolve_device(device_name)
    channels_last = device.type == "cuda" and os.environ.get("GPU_ZOO_CHANNELS_LAST") == "1"
    base = _config(
        bf16=path in ("new-bf16", STREAMS, COMPILED),
        channels_last=channels_last or path == STREAMS,
        compile=os.environ.get("GPU_ZOO_COMPILE", "none") if path == COMPILED else "none",
        pack_mode="streams" if path == STREAMS else "wide",
    )
    flops: dict[str, float] = {}
    for job in jobs:
        row = {"path": path, "name": job["name"], "k": job["k"]}
        config = dataclasses.replace(base, batch_size=job.get("batch_size", 32))
        alone = job.get("alone", False)
        if time.time() > deadline:
            print(json.dumps(row | {"skipped": "the time budget ran out"}), flush=True)
            continue
        try:
            if path != "old" and job["name"] not in flops:
                flops[job["name"]] = _flops_per_image(job["spec"], device)
            short = max(4, steps // 4)
            _train(path, job["spec"], job["k"], short, device, config, alone)  # warm-up
            short_seconds, _ = _train(path, job["spec"], job["k"], short, device, config, alone)
            lines: list[str] = []
            seconds, peak = _train(path, job["spec"], job["k"], steps, device, config, alone, lines.append)
            notes = [line for line in lines if " epoch " not in line]
            if notes:
                row["log"] = notes[:2]
            images = job["k"] * steps * config.batch_size
            # The steps beyond the short run's, over the time they added: the rate of a long training,
            # without the costs a run pays once (building the pack, capturing the step, evaluating).
            steady = job["k"] * (steps - short) * config.batch_size / max(seconds - short_seconds, 1e-9)
            row |= {"images_per_s": images / seconds, "steady_images_per_s": steady}
            row |= {"seconds": seconds, "peak_gib": peak}
            if job["name"] in flops:
                row |= {"gflop_per_image": flops[job["name"]] / 1e9}
        except Exception as err:  # noqa: BLE001 - one failed configuration; the rest still measure
            row |= {"error": f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"}
            if device.type == "cuda":
                torch.cuda.empty_cache()
        print(json.dumps(row), flush=True)
    print(
        json.dumps(
            {"path": path, "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}
        )
    )


# --- where a packed step's time goes: one layer's kernels --------------------------------------


def _milliseconds(run, repeats: int = 10) -> float:
    import torch

    for _ in range(3):
        run()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        run()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeats


def _layer_cases(k: int, batch: int, c_in: int, c_out: int, size: int) -> dict:
    """``kernels``' ways of one layer, each a function that builds its forward-and-backward run."""
    import torch
    import torch.nn.functional as F

    def grouped(dtype, channels_last):
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        x = torch.randn(batch, k * c_in, size, size, device="cuda", dtype=dtype).contiguous(memory_format=fmt)
        w = torch.randn(k * c_out, c_in, 3, 3, device="cuda", dtype=dtype, requires_grad=True)
        w = w.detach().contiguous(memory_format=fmt).requires_grad_()
        x.requires_grad_()
        return lambda: F.conv2d(x, w, padding=1, groups=k).sum().backward()

    def batch_norm(channels_last):
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        x = torch.randn(batch, k * c_out, size, size, device="cuda").contiguous(memory_format=fmt)
        x.requires_grad_()
        bn = torch.nn.BatchNorm2d(k * c_out, device="cuda").to(memory_format=fmt)
        return lambda: bn(x).sum().backward()

    def unfolded():
        x = torch.randn(k * batch, c_in, size, size, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        w = torch.randn(k, c_in * 9, c_out, device="cuda", dtype=torch.bfloat16, requires_grad=True)

        def run():
            cols = F.unfold(x, 3, padding=1).view(k, batch, c_in * 9, size * size)
            cols = cols.permute(0, 1, 3, 2).reshape(k, batch * size * size, c_in * 9)
            torch.bmm(cols, w).sum().backward()

        return run

    def dense():
        x = torch.randn(k * batch, c_in, size, size, device="cuda", dtype=torch.bfloat16)
        x = x.contiguous(memory_format=torch.channels_last).requires_grad_()
        w = torch.randn(c_out, c_in, 3, 3, device="cuda", dtype=torch.bfloat16)
        w = w.contiguous(memory_format=torch.channels_last).requires_grad_()
        return lambda: F.conv2d(x, w, padding=1).sum().backward()

    return {
        "grouped NCHW f32": lambda: grouped(torch.float32, False),
        "grouped NHWC f32": lambda: grouped(torch.float32, True),
        "grouped NCHW bf16": lambda: grouped(torch.bfloat16, False),
        "grouped NHWC bf16": lambda: grouped(torch.bfloat16, True),
        "unfold+bmm bf16": unfolded,
        "dense NHWC bf16": dense,
        "BN NCHW f32": lambda: batch_norm(False),
        "BN NHWC f32": lambda: batch_norm(True),
    }


def kernels(k: int = 32, batch: int = 32) -> list[dict]:
    """Forward and backward milliseconds of Myrtle x1's convolutions and batch norms for a pack of
    k members, done five ways: a grouped convolution in NCHW and in NHWC, float32 (TF32) and bf16;
    per member as an unfolded batched matrix product (bf16); and the same FLOPs as one dense
    convolution of k x batch images (shared weights: the speed a pack cannot beat)."""
    import torch

    torch.backends.cudnn.benchmark = True
    layers = [(3, 64, 32), (64, 128, 32), (128, 256, 16), (256, 512, 8)]
    rows = []
    for c_in, c_out, size in layers:
        flops = 2 * 9 * c_in * c_out * size * size * batch * k * 3  # forward + two backward products
        row = {"layer": f"{c_in}->{c_out} at {size}x{size}", "gflop": flops / 1e9}

        cases = _layer_cases(k, batch, c_in, c_out, size)
        for name, make in cases.items():
            try:
                row[name] = _milliseconds(make())
            except Exception as err:  # noqa: BLE001 - a case the device does not support
                row[name] = f"{type(err).__name__}"
            torch.cuda.empty_cache()
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


# --- the parent: paths side by side, the projection ----------------------------------------------


def _run_path(
    path: str,
    src: Path,
    jobs: list[dict],
    steps: int,
    seconds: float,
    device: str,
    channels_last: bool,
    compile_mode: str = "none",
) -> list[dict]:
    env = os.environ | {
        "PYTHONPATH": str(src),
        "PYTHONUNBUFFERED": "1",
        "GPU_ZOO_CHANNELS_LAST": str(int(channels_last)),
        "GPU_ZOO_COMPILE": compile_mode,
    }
    command = [
        sys.executable,
        __file__,
        "worker",
        path,
        json.dumps(jobs),
        str(steps),
        str(time.time() + seconds),
        device,
    ]
    try:
        done = subprocess.run(
            command, check=False, env=env, capture_output=True, text=True, timeout=seconds + 60
        )
        out, err = done.stdout, done.stderr
    except subprocess.TimeoutExpired as timeout:
        out = timeout.stdout.decode() if isinstance(timeout.stdout, bytes) else (timeout.stdout or "")
        err = "timed out"
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    if not rows or "device" not in rows[-1]:
        print(f"{path}: the worker stopped early: {err.strip().splitlines()[-1:] or '?'}", flush=True)
    return rows


def _table(rows: list[dict], names: list[str], sizes: list[int], key: str = "images_per_s") -> None:
    rates = {(r["path"], r["name"], r["k"]): r for r in rows if "k" in r}
    extras = [p for p in (STREAMS, COMPILED) if any(r.get("path") == p for r in rows)]
    paths = (*PATHS, *extras)
    print(
        f"{'model':<16} {'K':>3} "
        + "".join(f"{p + ' img/s':>19}" for p in paths)
        + f" {'new/old':>8} {'bf16/old':>8}"
        + "".join(f" {p.split('-')[0][:4] + '/old':>8}" for p in extras)
        + f" {'TFLOP/s':>8}"
    )
    for name in names:
        for k in sizes:
            cells, values = [], {}
            for path in paths:
                row = rates.get((path, name, k), {})
                values[path] = row.get(key)
                cells.append(
                    f"{values[path]:>19,.0f}"
                    if values[path]
                    else f"{row.get('skipped', row.get('error', '-'))[:18]:>19}"
                )
            gflop = next(
                (r["gflop_per_image"] for r in rows if r.get("name") == name and "gflop_per_image" in r), None
            )
            best = max((v for p, v in values.items() if p != "old" and v), default=None)
            tflops = f"{best * gflop / 1e3:>8.0f}" if best and gflop else f"{'-':>8}"
            print(
                f"{name:<16} {k:>3} "
                + "".join(cells)
                + f" {_ratio(values, 'new')} {_ratio(values, 'new-bf16')}"
                + "".join(f" {_ratio(values, p)}" for p in extras)
                + f" {tflops}",
                flush=True,
            )


def _group_table(rows: list[dict], plan: dict) -> None:
    rates = {(r["path"], r["name"], r["k"]): r.get("images_per_s") for r in rows if "k" in r}
    print(f"{'group (members, images)':<40} {'K':>3} " + "".join(f"{p + ' img/s':>16}" for p in PATHS))
    for group in plan["groups"]:
        name = group_name(group)
        if not any((p, name, group["k"]) in rates for p in PATHS):
            continue
        cells = [rates.get((p, name, group["k"])) for p in PATHS]
        label = f"{name} ({group['members']}, {group['images']:.1e})"
        print(f"{label:<40} {group['k']:>3} " + "".join(f"{c:>16,.0f}" if c else f"{'-':>16}" for c in cells))


def group_name(group: dict) -> str:
    """A cost group's name: architecture, width, gated family, no batch norm, constant width and
    batch size (``benchmarks/paper_scale.py`` names its groups by it too)."""
    spec = group["spec"]
    gated = spec.get("gated") or {}
    name = f"{spec['arch']} x{spec.get('width_multiplier', 1)}" + (f" {gated['family']}" if gated else "")
    if spec.get("batch_norm") is False:
        name += " no-BN"
    if spec.get("constant_width"):
        name += f" w{spec['constant_width']}"
    return name + f" b{group['batch_size']}"


def _ratio(values: dict, path: str) -> str:
    if values.get(path) and values.get("old"):
        return f"{values[path] / values['old']:>7.1f}x"
    return f"{'-':>8}"


def project(plan: dict, rows: list[dict]) -> dict:
    """Hours of the config's zoo on this device, per path: each cost group's images over the
    images/s measured for the group at its pack size; groups not measured are counted apart."""
    rates = {(r["path"], r["name"], r["k"]): r["images_per_s"] for r in rows if "images_per_s" in r}
    total = sum(g["images"] for g in plan["groups"])
    projection = {}
    for path in PATHS:
        measured = [g for g in plan["groups"] if (path, group_name(g), g["k"]) in rates]
        if not measured:
            continue
        hours = sum(g["images"] / rates[(path, group_name(g), g["k"])] / 3600 for g in measured)
        share = sum(g["images"] for g in measured) / total
        projection[path] = {"hours_measured": hours, "image_share_measured": share}
    return projection


def measure(args) -> None:
    specs = TINY_SPECS if args.tiny else SPECS
    sizes = [1, 2] if args.tiny else args.sizes
    steps = 8 if args.tiny else args.steps
    device = "cpu" if args.tiny else args.device
    jobs = [
        {"name": name, "spec": spec, "k": k}
        for name, spec in specs.items()
        for k in sizes
        if k <= LARGEST_PACK.get(name, k) and (args.tiny or name in SIZES or k == 32)
    ]
    plan = json.loads(Path(args.plan).read_text()) if args.plan else None
    if plan and not args.tiny:
        for group in [g for g in plan["groups"] if g["images"] >= GROUP_MIN_IMAGES]:
            group_job = {"name": group_name(group), "spec": group["spec"], "k": group["k"]}
            group_job |= {"batch_size": group["batch_size"], "alone": group["k"] == 1}
            jobs.append(group_job)
    paths = [p for p in PATHS if p != "old" or args.old_src]
    if device == "cpu":
        paths = [p for p in paths if p != "new-bf16"]
    budgets = {path: args.budget / len(paths) for path in paths}
    # The extras have a budget of their own: streams a third, compiling two thirds. On a CPU the
    # streams run too (bf16 is ignored there), so the tiny check runs their plumbing.
    if args.extra_budget > 0:
        compiled = args.compile != "none" and device != "cpu"
        budgets[STREAMS] = args.extra_budget / 3 if compiled else args.extra_budget
        if compiled:
            budgets[COMPILED] = args.extra_budget * 2 / 3
    extra_size = max(k for k in sizes if k <= EXTRA_SIZE)
    extra_jobs = [j for j in jobs if j["name"] in SIZES and j["k"] == extra_size]
    rows = []
    for path, budget in budgets.items():
        src = Path(args.old_src) if path == "old" else SRC
        path_jobs = extra_jobs if path in (STREAMS, COMPILED) else jobs
        started = time.time()
        rows += _run_path(path, src, path_jobs, steps, budget, device, args.channels_last, args.compile)
        print(f"{path}: {time.time() - started:.0f} s", flush=True)
    device_names = {r["device"] for r in rows if "device" in r}
    print(
        f"\ntraining images/s of K members together, {steps} steps of batch 32 each, on {', '.join(device_names)}"
    )
    _table(rows, list(specs), sizes)
    print(
        f"\nthe same, steady state: the images of the last {steps - max(4, steps // 4)} steps over the time they added"
    )
    _table(rows, list(specs), sizes, key="steady_images_per_s")
    result = {
        "device": sorted(device_names),
        "steps": steps,
        "channels_last": args.channels_last,
        "rows": rows,
    }
    if plan and not args.tiny:
        print(
            f"\nthe zoo of {plan['config']} ({sum(g['members'] for g in plan['groups'])} members, {sum(g['images'] for g in plan['groups']):.2e} images), by cost group at its pack size:"
        )
        _group_table(rows, plan)
        result["projection"] = project(plan, rows)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    for path, projected in result.get("projection", {}).items():
        print(
            f"projected zoo on this device, {path}: {projected['hours_measured']:,.1f} h for the "
            f"{projected['image_share_measured']:.0%} of its training images whose groups were measured"
        )


def projection_from_log(text: str) -> list[str]:
    """The projection lines of a ``measure`` output, recomputed from its cost-group table: per path,
    the hours of the groups measured on every path, and their share of the zoo's images."""
    groups = re.findall(r"^(.+?) \((\d+), ([\d.e+]+)\)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)$", text, re.MULTILINE)
    total = re.search(r"\(\d+ members, ([\d.e+]+) images\)", text)
    if not groups or not total:
        return ["(no cost-group table in this output)"]

    def rate(cell: str) -> float | None:
        return float(cell.replace(",", "")) if cell != "-" else None

    measured = [g for g in groups if all(rate(c) for c in g[4:])]
    images = sum(float(g[2]) for g in measured)
    names = ", ".join(g[0].strip() for g in measured)
    share = f"{images:.2e} of the zoo's {float(total[1]):.2e} training images, {images / float(total[1]):.0%}"
    lines = [f"Cost groups measured on every path: {names} ({share})."]
    for index, path in enumerate(PATHS):
        hours = sum(float(g[2]) / rate(g[4 + index]) for g in measured) / 3600
        lines.append(f"Their projected training time on this device, {path}: {hours:,.1f} h.")
    ratios = re.findall(r"^\S+\s+\d+\s+[\d,]+\s+[\d,]+\s+[\d,]+\s+([\d.]+)x\s+([\d.]+)x", text, re.MULTILINE)
    if ratios:
        float32, bf16 = ([float(r[i]) for r in ratios] for i in (0, 1))
        lines.append(
            f"Where both paths trained, the new path ran {min(float32)}-{max(float32)}x the old in float32 and "
            f"{min(bf16)}-{max(bf16)}x in bf16 ({len(ratios)} architectures and pack sizes)."
        )
    return lines


def _kernel_rows(jsonl: str) -> tuple[list[dict], list[str], dict[str, float]]:
    """A ``kernels`` output's rows, its cases, and each case's milliseconds over the four layers."""
    rows = [json.loads(line) for line in Path(jsonl).read_text().splitlines() if line.strip()]
    cases = [key for key in rows[0] if key not in ("layer", "gflop")]
    total = {c: sum(r[c] for r in rows if isinstance(r[c], float)) for c in cases}
    return rows, cases, total


def kernels_table(jsonl: str) -> str:
    """A markdown table of a ``kernels`` output (one JSON object per layer): milliseconds per case."""
    rows, cases, total = _kernel_rows(jsonl)
    lines = ["| layer (GFLOP) | " + " | ".join(cases) + " |", "| --- |" + " --- |" * len(cases)]
    for row in rows:
        cells = [f"{row[c]:.2f}" if isinstance(row[c], float) else str(row[c]) for c in cases]
        lines.append(f"| {row['layer']} ({row['gflop']:.0f}) | " + " | ".join(cells) + " |")
    lines.append("| all four | " + " | ".join(f"{total[c]:.2f}" for c in cases) + " |")
    grouped = min((c for c in cases if c.startswith("grouped")), key=total.get)
    batch_norm = min((c for c in cases if c.startswith("BN")), key=total.get)
    lines.append(
        f"\nThe four convolutions take {total[grouped]:.1f} ms grouped at best ({grouped}), "
        f"{total['dense NHWC bf16']:.1f} ms as one dense convolution of the same FLOPs "
        f"({total[grouped] / total['dense NHWC bf16']:.1f}x less), {total['unfold+bmm bf16']:.1f} ms unfolded "
        f"into batched matrix products; the batch norms {total[batch_norm]:.1f} ms ({batch_norm})."
    )
    return "\n".join(lines) + "\n"


def ceiling(jsonl: str, text: str, k: int = 32, batch: int = 32, asked: float = 10.0) -> str:
    """What the ``kernels`` table bounds: the Myrtle pack's images/s if its four convolutions ran at
    the dense rate and nothing else took time, and with the batch norms' best time besides, each
    against the old path's Myrtle rate at K = ``k`` in the ``measure`` log ``text``; and what the
    rest of a step may take for ``asked`` times that rate."""
    _, _, total = _kernel_rows(jsonl)
    row = re.search(rf"^myrtle\s+{k}\s+([\d,]+)\s", text, re.MULTILINE)
    if not row:
        return ""
    old = float(row[1].replace(",", ""))
    images = k * batch
    dense = total["dense NHWC bf16"]
    norms = min(v for c, v in total.items() if c.startswith("BN"))
    allowed = images / (asked * old) * 1e3  # ms a step may take
    rest = (
        f"{allowed - dense:.2f} ms for the batch norms, activations, pools and optimiser step beside "
        "dense-rate convolutions"
        if allowed > dense
        else "less than the convolutions take alone at the dense rate"
    )
    return (
        f"\nWhat the table bounds (Myrtle x1, {k} members of batch {batch}: {images:,} images a step): "
        f"with its convolutions at the dense rate and nothing else taking time, a step takes {dense:.1f} ms, "
        f"{images / dense * 1e3:,.0f} images/s, {images / dense * 1e3 / old:.1f}x the old path's {old:,.0f}; "
        f"with the batch norms' best time besides, {dense + norms:.1f} ms, {images / (dense + norms) * 1e3:,.0f} "
        f"images/s, {images / (dense + norms) * 1e3 / old:.1f}x. {asked:.0f}x the old rate is a step of "
        f"{allowed:.2f} ms: {rest}.\n"
    )


def docs_block(log: str, markdown: str, kernels_log: str | None = None) -> None:
    """Write the ``measure`` output ``log``, its projection and (given) the ``kernels`` output's
    table into ``markdown``'s ``<!-- gpu-zoo: LOG -->`` block."""
    text = Path(log).read_text()
    body = "```text\n" + text.rstrip() + "\n```\n\n" + "\n".join(projection_from_log(text)) + "\n"
    if kernels_log:
        body += (
            f"\nOne pack's layers ({kernels_log}): Myrtle x1's convolutions and batch norms for 32"
            " members of batch 32, milliseconds of a forward and backward pass:\n\n"
            + kernels_table(kernels_log)
            + ceiling(kernels_log, text)
        )
    page = Path(markdown).read_text()
    start, end = f"<!-- gpu-zoo: {log} -->\n", "<!-- /gpu-zoo -->"
    head, rest = page.split(start)
    Path(markdown).write_text(head + start + body + end + rest.split(end, 1)[1])


def plan(config_path: str, out: str) -> None:
    """Write the zoo's cost groups: spec, batch size, pack size, members, training images."""
    from paper_scale import cost_class

    from intertwine.workflow.config import default_config_path, run_config
    from intertwine.workflow.plan import Plan
    from intertwine.workflow.settings import validate_config

    config = run_config([config_path], default_config_path(HERE.parent))
    validate_config(config)
    zoo = Plan(config)
    train_images = zoo.dataset_sizes()[0] - config["data"]["val_size"]
    groups: dict[str, dict] = defaultdict(lambda: {"variants": [], "members": 0, "images": 0})
    for variant in zoo.variants:
        block = zoo.train_block(variant)
        # Spec fields that change what a member computes but not what it costs are left out.
        spec = json.loads(cost_class(zoo.spec(variant), block))["spec"]
        k = max((len(p) for p in zoo.packs(variant)), default=1)  # 1: one member per job
        key = json.dumps({"spec": spec, "batch_size": block["batch_size"], "k": k}, sort_keys=True)
        members = len(zoo.zoo_seeds(variant))
        groups[key]["variants"].append(variant)
        groups[key]["members"] += members
        groups[key]["images"] += members * block["epochs"] * train_images
    work = sorted((json.loads(key) | value for key, value in groups.items()), key=lambda g: -g["images"])
    Path(out).write_text(json.dumps({"config": config_path, "groups": work}, indent=1) + "\n")
    print(f"{config_path}: {sum(g['members'] for g in work)} members in {len(work)} cost groups")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "docs":
        return docs_block(*sys.argv[2:5])
    if len(sys.argv) > 1 and sys.argv[1] == "kernels":
        return print(json.dumps(kernels()))
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        path, jobs, steps, deadline, device = sys.argv[2:7]
        return worker(path, json.loads(jobs), int(steps), float(deadline), device)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    planning = commands.add_parser("plan", help="count a config's zoo by cost group (needs Snakemake)")
    planning.add_argument("config")
    planning.add_argument("out")
    measuring = commands.add_parser("measure", help="measure the paths side by side and project the zoo")
    measuring.add_argument("--old-src", help="the src folder of the tree whose train_pack is the old path")
    measuring.add_argument(
        "--plan", default=str(HERE / "paper_zoo.json"), help="a `plan` file to project ('' for none)"
    )
    measuring.add_argument("--sizes", type=int, nargs="+", default=[1, 8, 32, 64])
    measuring.add_argument("--steps", type=int, default=32, help="timed steps per measurement")
    measuring.add_argument("--budget", type=float, default=330, help="seconds for the old and new paths")
    measuring.add_argument(
        "--extra-budget",
        type=float,
        default=60,
        help=f"seconds for the {STREAMS} and {COMPILED} paths beside them (0: not measured)",
    )
    measuring.add_argument("--device", default="auto")
    measuring.add_argument(
        "--channels-last",
        action="store_true",
        help="train in the channels-last memory format (default: NCHW)",
    )
    measuring.add_argument(
        "--compile",
        default="default",
        choices=["none", "default", "max-autotune-no-cudagraphs"],
        help=f"torch.compile mode of the {COMPILED} path (K = {EXTRA_SIZE}, on a GPU; none: not measured)",
    )
    measuring.add_argument("--tiny", action="store_true", help="tiny models on the CPU: checks the script")
    measuring.add_argument("--out", help="write every measurement here (JSON)")
    args = parser.parse_args()
    if args.command == "plan":
        plan(args.config, args.out)
    else:
        measure(args)


if __name__ == "__main__":
    sys.exit(main())
