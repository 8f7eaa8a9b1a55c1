"""Training loop, determinism, divergence, checkpoints."""

import hashlib
import math
import re

import pandas as pd
import pytest
import torch

from intertwine import models
from intertwine.data import load_split
from intertwine.training import DivergedError, lr_factor, make_optimizer, mixed_loss, train
from intertwine.workflow.job import Job
from intertwine.workflow.settings import TrainConfig
from intertwine.workflow.stages.zoo.job import train_member
from intertwine.workflow.stages.zoo.study import zoo_table
from intertwine.workflow.zoo import CHECKPOINT_FORMAT, load_model, load_weights, save_checkpoint

SPEC = {"arch": "myrtle", "width_multiplier": 0.125}
TRAINING = {"epochs": 2, "batch_size": 32}


def state_hash(state_dict):
    digest = hashlib.sha256()
    for key, value in sorted(state_dict.items()):
        digest.update(key.encode())
        digest.update(value.contiguous().numpy().tobytes())
    return digest.hexdigest()


def test_lr_schedule_has_four_even_drops():
    factors = [lr_factor(step, 100, 4, 0.5) for step in range(100)]
    assert factors[0] == 1.0 and factors[-1] == 0.5**4
    drops = [step for step in range(1, 100) if factors[step] != factors[step - 1]]
    assert drops == [20, 40, 60, 80]


def test_cosine_schedule_warms_up_from_the_floor_and_returns_to_it():
    # Hassani et al.'s CCT recipe: lr 55e-5, min_lr = warmup_lr = 1e-5
    floor = 1e-5 / 55e-5
    factor = lambda step: lr_factor(step, 1000, 4, 0.5, [], 100, "cosine", floor)  # noqa: E731
    assert factor(0) == pytest.approx(floor) and factor(50) == pytest.approx((1 + floor) / 2)
    after = [factor(step) for step in range(100, 1001)]
    assert all(a >= b for a, b in zip(after, after[1:]))  # falling after the warm-up
    assert factor(500) == pytest.approx(floor + (1 - floor) / 2) and factor(1000) == pytest.approx(floor)
    # timm's cosine counts from step 0, so the warm-up ends a little below the full rate
    assert factor(100) == pytest.approx(floor + (1 - floor) * (1 + math.cos(math.pi * 0.1)) / 2)


def test_adamw_decouples_the_weight_decay():
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = make_optimizer([weight], TrainConfig(optimizer="adamw", lr=0.1, weight_decay=0.5))
    assert isinstance(optimizer, torch.optim.AdamW)
    weight.grad = torch.zeros(3)
    optimizer.step()  # no gradient: only the decay moves it, by lr * decay
    assert torch.allclose(weight.detach(), torch.full((3,), 1 - 0.1 * 0.5))


@pytest.mark.parametrize("grouped", [False, True])
def test_a_capturable_optimiser_reads_its_learning_rate_from_a_tensor_on_the_parameters_device(grouped):
    weights = [torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))]
    params = [{"params": iter(weights[:1])}, {"params": weights[1:]}] if grouped else weights
    optimizer = make_optimizer(params, TrainConfig(lr=0.25), capturable=True)
    assert all(group["capturable"] for group in optimizer.param_groups)
    lr = optimizer.param_groups[0]["lr"]
    assert torch.is_tensor(lr) and lr.device == weights[0].device and lr.item() == 0.25
    assert [p for group in optimizer.param_groups for p in group["params"]] == weights  # none lost


def test_mixed_loss_is_the_cross_entropy_of_the_mixed_smoothed_targets():
    torch.manual_seed(0)
    logits, y = torch.randn(6, 10, dtype=torch.float64), torch.randint(0, 10, (6,))
    assert torch.allclose(
        mixed_loss(logits, y, 1.0, 0.0), torch.nn.functional.cross_entropy(logits, y, reduction="none")
    )
    smoothing, lam = 0.1, 0.3
    one_hot = torch.nn.functional.one_hot(y, 10).double()
    smoothed = one_hot * (1 - smoothing) + smoothing / 10
    targets = lam * smoothed + (1 - lam) * smoothed.flip(0)
    expected = -(targets * logits.log_softmax(-1)).sum(-1)
    assert torch.allclose(mixed_loss(logits, y, lam, smoothing), expected)
    # a pack: one lambda per member, each member's batch reversed on its own
    packed = mixed_loss(
        torch.stack([logits, logits]), torch.stack([y, y]), torch.tensor([lam, 1.0]), smoothing
    )
    assert torch.allclose(packed[0], expected) and torch.allclose(
        packed[1], mixed_loss(logits, y, 1.0, smoothing)
    )


@pytest.mark.parametrize("images, epochs", [(45_000, 182), (49_000, 168)])
def test_table_ii_schedule_is_counted_in_iterations(images, epochs):
    # The gated-networks paper's Table II: 0.01 for 400 iterations, 0.1 to 32k, 0.01 to 48k and
    # 0.001 to 64k, whatever the training set's size.
    config = TrainConfig(
        steps=64_000, batch_size=128, lr_milestones=[0.5, 0.75], lr_drop_factor=0.1, warmup_steps=400
    )
    assert config.length(images) == (epochs, 64_000, -(-images // 128))
    factor = lambda step: lr_factor(step, 64_000, 4, 0.1, [0.5, 0.75], 400)  # noqa: E731
    assert [factor(s) for s in (0, 399, 400, 31_999)] == [0.1, 0.1, 1.0, 1.0]
    assert factor(32_000) == pytest.approx(0.1) and factor(47_999) == pytest.approx(0.1)
    assert factor(48_000) == pytest.approx(0.01) and factor(63_999) == pytest.approx(0.01)
    assert TrainConfig(epochs=3, batch_size=128).length(images)[:2] == (3, 3 * -(-images // 128))


def test_training_by_steps_cuts_the_last_epoch(tiny_shapes_dir):
    torch.set_num_threads(1)
    steps_per_epoch = -(-len(load_split(tiny_shapes_dir, "train")) // 32)
    checkpoint, metrics = train_member(
        Job("cpu", tiny_shapes_dir), "m", 0, SPEC, TRAINING | {"steps": steps_per_epoch + 2}
    )
    assert list(metrics["epoch"]) == [1, 2] and checkpoint["epochs"] == 2
    assert metrics["train_acc"].between(0, 1).all()


def test_training_is_bit_identical_and_seed_dependent(tiny_shapes_dir):
    torch.set_num_threads(1)
    first, metrics = train_member(Job("cpu", tiny_shapes_dir), "m", 0, SPEC, TRAINING)
    second, _ = train_member(Job("cpu", tiny_shapes_dir), "m", 0, SPEC, TRAINING)
    other, _ = train_member(Job("cpu", tiny_shapes_dir), "m", 1, SPEC, TRAINING)
    assert state_hash(first["state_dict"]) == state_hash(second["state_dict"])
    assert state_hash(first["state_dict"]) != state_hash(other["state_dict"])
    assert list(metrics["epoch"]) == [1, 2] and metrics["kept"].sum() == 1
    assert metrics.loc[metrics["kept"], "val_acc"].item() == first["val_acc"]
    assert first["test_acc"] == metrics["test_acc"].max()


@pytest.mark.parametrize("spec", [SPEC, {"arch": "resnet20", "width_multiplier": 0.25}])
def test_recording_gate_patterns_leaves_the_weights_bit_identical(tiny_shapes_dir, spec):
    """Hypothesis 1's record (gate patterns before training and after each epoch) runs forward
    passes in eval mode between epochs: the trained weights, batch-norm statistics included, and
    the metrics are the same bit for bit, and the record settles on the last epoch's pattern."""
    torch.set_num_threads(1)
    plain, plain_metrics = train_member(Job("cpu", tiny_shapes_dir), "m", 0, spec, TRAINING)
    recorded, metrics = train_member(
        Job("cpu", tiny_shapes_dir), "m", 0, spec, TRAINING | {"gate_probe_images": 16}
    )
    assert state_hash(plain["state_dict"]) == state_hash(recorded["state_dict"])
    columns = ["train_loss", "train_acc", "val_acc"]
    pd.testing.assert_frame_equal(plain_metrics[columns], metrics[columns])
    assert "gate_settling" not in plain
    rows = pd.DataFrame(recorded["gate_settling"])
    assert sorted(set(rows["epoch"])) == [0, 1, 2] and (rows["final_epoch"] == 2).all()
    assert (rows["probe_images"] == 16).all() and rows["site"].nunique() >= 4
    final = rows[rows["epoch"] == 2]
    assert (final["agreement"] == 1.0).all()
    assert rows[["agreement", "chance", "active"]].stack().between(0, 1).all()
    assert (rows.loc[rows["epoch"] == 0, "agreement"] < 1).all()  # training changed the gates


def test_training_learns(tiny_shapes_dir):
    torch.set_num_threads(1)
    checkpoint, metrics = train_member(Job("cpu", tiny_shapes_dir), "m", 0, SPEC, TRAINING | {"epochs": 6})
    assert metrics["train_loss"].iloc[-1] < metrics["train_loss"].iloc[0]


def test_nan_loss_names_model_and_epoch(tiny_shapes_dir):
    split = load_split(tiny_shapes_dir, "train")
    model = models.build(SPEC)
    with pytest.raises(DivergedError, match="myrtle seed 3.*epoch 1"):
        # A zero std turns the inputs into inf/NaN, so the loss is NaN in the first epoch.
        train(
            model,
            split,
            split,
            TrainConfig(epochs=2),
            torch.Generator(),
            torch.zeros(3),
            torch.zeros(3),
            label="myrtle seed 3",
        )


def test_a_member_whose_loss_blew_up_is_an_error_naming_variant_seed_loss_and_key(tiny_shapes_dir):
    """``lr: 1e6`` left a member at chance with a finite training loss of ~1e13 and a checkpoint;
    the limit is 10 x ln(num_classes) (ours), 23.0 for the 10 shapes classes."""
    from intertwine.workflow.stages.zoo.job import train_pack as train_pack_job

    torch.set_num_threads(1)
    blown = TRAINING | {"epochs": 1, "lr": 1e6}
    message = (
        r"m seed 0: training diverged: its last epoch's mean training loss is [0-9.]+e\+1\d, above 10 x the "
        r"loss of chance \(ln 10 = 2.303\).* lower zoo.training.lr \(or zoo.training_per_variant.m.lr\)"
    )
    with pytest.raises(DivergedError, match=message):
        train_member(Job("cpu", tiny_shapes_dir), "m", 0, SPEC, blown)
    results = train_pack_job(Job("cpu", tiny_shapes_dir), "m", [0, 1], SPEC, blown, ["a.pt", "b.pt"])
    assert all(isinstance(result, DivergedError) for result in results)
    assert re.search(message, str(results[0])) and "m seed 1: training diverged" in str(results[1])
    checkpoint, metrics = train_member(Job("cpu", tiny_shapes_dir), "m", 0, SPEC, TRAINING | {"epochs": 1})
    assert metrics["train_loss"].iloc[-1] < 23.0 and checkpoint["seed"] == 0  # a sane lr trains as before


def test_checkpoints_are_never_overwritten_and_check_architecture(tiny_shapes_dir, tmp_path):
    checkpoint, _ = train_member(Job("cpu", tiny_shapes_dir), "m", 0, SPEC, TRAINING | {"epochs": 1})
    path = tmp_path / "zoo" / "seed0.pt"
    save_checkpoint(checkpoint, path)
    with pytest.raises(FileExistsError, match="never overwritten"):
        save_checkpoint(checkpoint, path)
    model, meta = load_model(path)
    assert meta["spec"] == models.normalize_spec(SPEC) and meta["seed"] == 0
    assert not model.training
    with pytest.raises(ValueError, match=r"'arch': 'myrtle'.*resnet20"):
        load_weights(models.build({"arch": "resnet20"}), path, spec={"arch": "resnet20"})
    assert sorted(p.name for p in path.parent.iterdir()) == ["seed0.pt"]  # no temp files left


@pytest.mark.parametrize("spec", [SPEC, {"arch": "resnet20", "width_multiplier": 0.25}])
def test_a_jobs_member_is_channels_last_and_computes_what_was_saved(tiny_shapes_dir, tmp_path, spec):
    torch.manual_seed(0)
    model = models.build(spec).eval()
    path = tmp_path / "seed0.pt"
    spec = models.normalize_spec(spec)
    save_checkpoint(
        {
            "format": CHECKPOINT_FORMAT,
            "state_dict": model.state_dict(),
            "spec": spec,
            "variant": "m",
            "seed": 0,
        },
        path,
    )
    member, _ = Job("cpu", tiny_shapes_dir).model(path)
    convolutions = [p for p in member.parameters() if p.dim() == 4]
    assert convolutions and all(p.is_contiguous(memory_format=torch.channels_last) for p in convolutions)
    assert not all(p.is_contiguous() for p in convolutions)
    images = torch.randn(8, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(member(images), model(images), rtol=1e-5, atol=1e-5)


def test_zoo_table_takes_the_kept_epoch():
    epochs = pd.DataFrame(
        {
            "variant": ["a", "a", "a"],
            "seed": [0, 0, 0],
            "epoch": [1, 2, 3],
            "val_acc": [0.5, 0.7, 0.6],
            "test_acc": [None, 0.65, None],
            "kept": [False, True, False],
            "epoch_seconds": [1.0, 2.0, 3.0],
            "n_params": [10] * 3,
            "device": ["cpu"] * 3,
            "checkpoint": ["x.pt"] * 3,
            "config_hash": ["h"] * 3,
            "version": ["v"] * 3,
        }
    )
    row = zoo_table([epochs]).iloc[0]
    assert (row["val_acc"], row["test_acc"], row["best_epoch"], row["epochs"]) == (0.7, 0.65, 2, 3)
    assert row["train_seconds"] == 6.0


def test_atomic_writes_leave_nothing_on_failure_and_use_the_umask(tmp_path):
    import os

    from intertwine.utils import atomic_path

    target = tmp_path / "out.txt"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert list(tmp_path.iterdir()) == []
    with atomic_path(target) as tmp:
        tmp.write_text("whole")
    umask = os.umask(0)
    os.umask(umask)
    assert target.read_text() == "whole" and target.stat().st_mode & 0o777 == 0o666 & ~umask


def test_recorded_test_acc_only_when_evaluated_in_float32():
    from intertwine.workflow.zoo import recorded_test_acc

    assert recorded_test_acc({"test_acc": 0.9, "test_dtype": "float32"}) == 0.9
    assert recorded_test_acc({"test_acc": 0.9, "test_dtype": "bfloat16"}) is None
    assert recorded_test_acc({"test_acc": 0.9}) is None  # written before the dtype was recorded


# --- unreadable checkpoints: every error names the file, what is wrong, and how to recover ------


def a_checkpoint(path):
    from intertwine.workflow.zoo import CHECKPOINT_FORMAT

    spec = models.normalize_spec(SPEC)
    torch.save(
        {
            "format": CHECKPOINT_FORMAT,
            "variant": "m",
            "spec": spec,
            "seed": 0,
            "state_dict": models.build(spec).state_dict(),
        },
        path,
    )
    return path


@pytest.mark.parametrize("keep", [0, 10, 1000, 0.5, -100])
def test_truncated_checkpoint_names_the_file_and_the_fix(tmp_path, keep):
    """A copy cut short: torch said `[Errno 22] Invalid argument`, `PytorchStreamReader failed ...`
    or nothing (EOFError), without the file."""
    from intertwine.workflow.zoo import CheckpointError

    path = a_checkpoint(tmp_path / "seed0.pt")
    data = path.read_bytes()
    path.write_bytes(data[: int(keep * len(data)) if isinstance(keep, float) else keep])
    with pytest.raises(
        CheckpointError,
        match=rf"^{re.escape(str(path))} is not a readable intertwine checkpoint: "
        r"it is truncated or damaged \(.*\)\. Delete it \(rm -f .*seed0\.pt.*"
        r"rerun its job: snakemake retrains that member",
    ):
        load_model(path)


def test_a_file_that_is_not_a_checkpoint_is_refused_without_unsafe_advice(tmp_path):
    """torch's own message advises weights_only=False, which would run the file's code."""
    import pathlib

    from intertwine.workflow.zoo import CheckpointError, read_checkpoint

    path = tmp_path / "objects.pt"
    torch.save({"format": "x", "where": pathlib.PurePosixPath("a")}, path)  # any object but data
    with pytest.raises(
        CheckpointError,
        match=r"objects\.pt is not a readable intertwine checkpoint: it holds "
        r"Python objects.*Delete it",
    ) as caught:
        read_checkpoint(path)
    assert "weights_only" not in str(caught.value)
    (tmp_path / "notes.pt").write_text("not a checkpoint")
    with pytest.raises(CheckpointError, match=r"notes\.pt is not a readable"):
        read_checkpoint(tmp_path / "notes.pt")
    torch.save({"state_dict": {}}, tmp_path / "plain.pt")
    with pytest.raises(CheckpointError, match=r"plain\.pt is not an intertwine checkpoint"):
        read_checkpoint(tmp_path / "plain.pt")
    from intertwine.workflow.zoo import CHECKPOINT_FORMAT

    torch.save({"format": CHECKPOINT_FORMAT, "spec": SPEC}, tmp_path / "partial.pt")
    with pytest.raises(
        CheckpointError,
        match=r"partial\.pt is an incomplete checkpoint \(it lacks "
        r"\['variant', 'seed', 'state_dict'\]\)",
    ):
        read_checkpoint(tmp_path / "partial.pt")
    with pytest.raises(FileNotFoundError, match=r"missing\.pt: no such checkpoint"):
        read_checkpoint(tmp_path / "missing.pt")


def test_checkpoint_whose_weights_do_not_fit_its_spec(tmp_path):
    from intertwine.workflow.zoo import CheckpointError

    path = a_checkpoint(tmp_path / "seed0.pt")
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["spec"] = models.normalize_spec({"arch": "resnet20"})
    torch.save(checkpoint, path)
    with pytest.raises(CheckpointError, match=r"seed0\.pt holds weights that do not fit its own spec"):
        load_model(path)


def test_truncated_checkpoint_fails_a_downstream_job_with_one_line(tmp_path, tiny_shapes_dir):
    import subprocess
    import sys

    path = a_checkpoint(tmp_path / "seed0.pt")
    path.write_bytes(path.read_bytes()[:5000])
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "intertwine",
            "symmetry-check",
            "--checkpoint",
            str(path),
            "--data",
            str(tiny_shapes_dir),
            "--config",
            "{}",
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "out.parquet"),
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert (
        f"intertwine symmetry-check: error: {path} is not a readable intertwine checkpoint" in result.stderr
    )


# --- training and evaluation refuse what has no answer ------------------------------------------


def test_empty_splits_are_errors_not_zero_accuracy(tiny_shapes_dir):
    from intertwine.data import Split
    from intertwine.training import evaluate

    split = load_split(tiny_shapes_dir, "train")
    empty = Split(split.images[:0], split.labels[:0])
    model = models.build(SPEC)
    mean, std = torch.full((3,), 0.5), torch.full((3,), 0.25)
    with pytest.raises(ValueError, match="the split is empty"):  # was 0.0
        evaluate(model, empty, mean, std)
    with pytest.raises(ValueError, match="batch size must be at least 1, got 0"):  # was range()'s error
        evaluate(model, split, mean, std, batch_size=0)
    with pytest.raises(ValueError, match="m seed 0: cannot train on 0 training and 128 validation"):
        train(model, empty, split, TrainConfig(epochs=1), torch.Generator(), mean, std, label="m seed 0")


def test_job_takes_an_incomplete_training_block_and_eval_batch_size_apart(tiny_shapes_dir):
    """Keys the block lacks take the schema's defaults (were KeyErrors in the jobs that indexed
    dicts); eval_batch_size, passed apart by the workflow, changes neither the weights nor the
    provenance hash, which is over the block as given."""
    torch.set_num_threads(1)
    job = Job("cpu", tiny_shapes_dir, log=lambda _: None)
    first, metrics = train_member(job, "m", 0, SPEC, {"epochs": 1, "batch_size": 32})
    second, _ = train_member(job, "m", 0, SPEC, {"epochs": 1, "batch_size": 32}, eval_batch_size=7)
    assert state_hash(first["state_dict"]) == state_hash(second["state_dict"])
    assert first["config_hash"] == second["config_hash"] and first["val_acc"] == second["val_acc"]
    with pytest.raises(ValueError, match=r"config key zoo\.training\.eval_batch_size: 0 is less than"):
        train_member(job, "m", 0, SPEC, {"epochs": 1}, eval_batch_size=0)
    with pytest.raises(ValueError, match=r"config key zoo\.training\.epochs: 'two' is not of type 'integer'"):
        train_member(job, "m", 0, SPEC, {"epochs": "two"})


# --- the data a checkpoint was trained on (issue 33) ---------------------------------------------


def _other_cache(tmp_path, change):
    from intertwine.data import build_dataset, write_dataset
    from intertwine.workflow.settings import checked_block

    block = {
        "dataset": "shapes",
        "val_size": 32,
        "shapes": {"train_size": 160, "test_size": 64, "image_size": 16},
    }
    seed = change(block) or 0
    splits, meta = build_dataset(checked_block(block, "data"), seed=seed)
    write_dataset(tmp_path / "other", splits, meta)
    return tmp_path / "other"


@pytest.mark.parametrize(
    "change, differs",
    [
        (
            lambda b: b["shapes"].update(image_size=12),
            r"was trained on shapes at 16x16 .* holds shapes at 12x12",
        ),
        (
            lambda b: b["shapes"].update(test_size=48),
            r"was trained on .*\(test 64, .* holds shapes at 16x16 \(test 48",
        ),
        (
            lambda b: 1,
            r"was trained on shapes at 16x16 \(test 64, train 128, val 32; hash (\w+)\), but .*hash (?!\1)\w+\)",
        ),
    ],
    ids=["image size", "split size", "other seed"],
)
def test_jobs_refuse_a_checkpoint_trained_on_other_data(tiny_shapes_dir, tmp_path, change, differs):
    from intertwine.workflow.zoo import data_fingerprint, read_checkpoint

    spec = {"arch": "c4gap", "width_multiplier": 0.0625}
    checkpoint, _ = train_member(Job("cpu", tiny_shapes_dir), "m", 0, spec, {"epochs": 1})
    path = tmp_path / "seed0.pt"
    save_checkpoint(checkpoint, path)
    assert read_checkpoint(path)["data"] == data_fingerprint(Job("cpu", tiny_shapes_dir).meta())
    assert set(checkpoint["data"]) == {"dataset", "image_size", "sizes", "hash"}
    Job("cpu", tiny_shapes_dir).model(path)  # its own data: accepted
    other = _other_cache(tmp_path, change)
    with pytest.raises(
        ValueError, match=rf"seed0.pt {differs}.*Give the job the data cache the member was trained on"
    ):
        Job("cpu", other).model(path)


def test_a_checkpoint_without_a_fingerprint_is_used_with_a_warning(tiny_shapes_dir, tmp_path):
    spec = {"arch": "c4gap", "width_multiplier": 0.0625}
    checkpoint, _ = train_member(Job("cpu", tiny_shapes_dir), "m", 0, spec, {"epochs": 1})
    del checkpoint["data"]  # as written before checkpoints recorded their data
    save_checkpoint(checkpoint, tmp_path / "old.pt")
    logged = []
    model, meta = Job("cpu", tiny_shapes_dir, 0, logged.append).model(tmp_path / "old.pt")
    assert meta["seed"] == 0
    assert len(logged) == 1 and re.match(
        r"warning: .*old.pt records no data fingerprint .* retrain it", logged[0]
    )
