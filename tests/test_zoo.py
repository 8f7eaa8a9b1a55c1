"""Training loop, determinism, divergence, checkpoints."""
import hashlib

import pandas as pd
import pytest
import torch

from intertwine import models
from intertwine.data import load_split
from intertwine.settings import TrainConfig
from intertwine.training import DivergedError, lr_factor, train
from intertwine.jobs import Job
from intertwine.jobs.zoo import train_member
from intertwine.zoo import load_model, load_weights, save_checkpoint, zoo_table

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


def test_training_learns(tiny_shapes_dir):
    torch.set_num_threads(1)
    checkpoint, metrics = train_member(Job("cpu", tiny_shapes_dir), "m", 0, SPEC, TRAINING | {"epochs": 6})
    assert metrics["train_loss"].iloc[-1] < metrics["train_loss"].iloc[0]


def test_nan_loss_names_model_and_epoch(tiny_shapes_dir):
    split = load_split(tiny_shapes_dir, "train")
    model = models.build(SPEC)
    with pytest.raises(DivergedError, match="myrtle seed 3.*epoch 1"):
        # A zero std turns the inputs into inf/NaN, so the loss is NaN in the first epoch.
        train(model, split, split, TrainConfig(epochs=2), torch.Generator(), torch.zeros(3),
              torch.zeros(3), label="myrtle seed 3")


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


def test_zoo_table_takes_the_kept_epoch():
    epochs = pd.DataFrame({
        "variant": ["a", "a", "a"], "seed": [0, 0, 0], "epoch": [1, 2, 3],
        "val_acc": [0.5, 0.7, 0.6], "test_acc": [None, 0.65, None], "kept": [False, True, False],
        "epoch_seconds": [1.0, 2.0, 3.0], "n_params": [10] * 3, "device": ["cpu"] * 3,
        "checkpoint": ["x.pt"] * 3, "config_hash": ["h"] * 3, "version": ["v"] * 3})
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
    from intertwine.zoo import recorded_test_acc

    assert recorded_test_acc({"test_acc": 0.9, "test_dtype": "float32"}) == 0.9
    assert recorded_test_acc({"test_acc": 0.9, "test_dtype": "bfloat16"}) is None
    assert recorded_test_acc({"test_acc": 0.9}) is None  # written before the dtype was recorded
