"""Packed zoo training: K members in one job end with the weights each gets alone."""

import dataclasses
import re

import pytest
import torch

from intertwine import models, packed_training
from intertwine.training import mixed_loss, pack_problem
from intertwine.utils import DivergedError
from intertwine.workflow.job import Job
from intertwine.workflow.stages.zoo.job import train_member, train_pack

TRAINING = {"epochs": 3, "batch_size": 32}

# Packed, a member's convolutions run as one grouped convolution whose sums are taken in another
# order: float32 rounding, about 1e-7 relative per operation; after a dozen Adam steps the weights
# differ by at most 1e-6 (measured 5e-7). The exception is a convolution's bias followed by batch
# norm: its gradient is zero but for rounding noise, which Adam divides by its own size, so the
# bias moves by about +-lr per step either way (measured 5.6e-3 after 12 steps at lr 1e-3), and
# its batch norm's running mean follows. In training mode the batch norm cancels it exactly. A
# member trained from another seed differs by about 1e-1.
# One more exception, machine-dependent: where rounding flips a ReLU or max-pool decision at some
# step (a pre-activation within rounding of 0), the member's gradients change by O(1e-3) from then
# on. Measured on an AMD EPYC: ResNet20 seed 0 ends with weights 2.2e-4 and batch-norm running
# variances (about 2) 1.8e-3 away; every other member, and every member on the machine the
# tolerance was first set on, within 5e-7. Another seed is 20x beyond the tolerance (checked below).
WEIGHT_TOLERANCE = 5e-3
CANCELLED_TOLERANCE = 2e-2  # 12 steps x lr 1e-3 + the running mean's lag


def cancelled_by_batch_norm(state: dict) -> set[str]:
    """The biases of convolutions followed by a batch norm (``convI.bias`` beside ``bnI``) and
    those batch norms' running means."""
    keys = set()
    for key in state:
        match = re.fullmatch(r"(.*)conv(\d+)\.bias", key)
        running_mean = match and f"{match[1]}bn{match[2]}.running_mean"
        if running_mean in state:
            keys |= {key, running_mean}
    return keys


def max_weight_difference(a: dict, b: dict, keys=None) -> float:
    assert a.keys() == b.keys()
    keys = [k for k in (a if keys is None else keys) if a[k].is_floating_point()]
    return max((a[k].double() - b[k].double()).abs().max().item() for k in keys)


@pytest.mark.parametrize(
    "spec",
    [
        {"arch": "myrtle", "width_multiplier": 0.125},
        {"arch": "resnet20", "width_multiplier": 0.25},
        {"arch": "myrtle", "width_multiplier": 0.125, "gated": {"family": "dlgn", "pools": "gated_max"}},
    ],
    ids=["myrtle", "resnet20", "gated"],
)
def test_packed_members_equal_members_trained_alone(tiny_shapes_dir, spec):
    torch.set_num_threads(1)
    seeds = [0, 1, 2]
    packed = train_pack(Job("cpu", tiny_shapes_dir), "m", seeds, spec, TRAINING, ["a", "b", "c"])
    alone = [train_member(Job("cpu", tiny_shapes_dir), "m", seed, spec, TRAINING)[0] for seed in seeds]
    for (checkpoint, metrics), single in zip(packed, alone):
        assert checkpoint["best_epoch"] == single["best_epoch"]
        # The drift of a cancelled bias moves an eval-mode logit by up to about 1e-2: an image at a
        # near tie may change its class.
        assert abs(checkpoint["val_acc"] - single["val_acc"]) <= 1 / 32
        assert abs(checkpoint["test_acc"] - single["test_acc"]) <= 1 / 64
        cancelled = cancelled_by_batch_norm(single["state_dict"])
        rest = set(single["state_dict"]) - cancelled
        assert max_weight_difference(checkpoint["state_dict"], single["state_dict"], rest) < WEIGHT_TOLERANCE
        if cancelled:
            assert (
                max_weight_difference(checkpoint["state_dict"], single["state_dict"], cancelled)
                < CANCELLED_TOLERANCE
            )
        assert list(metrics["epoch"]) == [1, 2, 3]
    # The tolerance separates: another member's weights are far outside it.
    assert max_weight_difference(alone[0]["state_dict"], alone[1]["state_dict"]) > 5 * CANCELLED_TOLERANCE


def test_packed_members_equal_members_trained_alone_with_mixing_and_a_cosine_schedule(tiny_shapes_dir):
    # Hassani et al.'s recipe, as config/paper.yaml trains the CCT with: every member draws its own
    # mixing from its own generator, so the pack still gives each member its weights alone
    torch.set_num_threads(1)
    recipe = TRAINING | {
        "optimizer": "adamw",
        "weight_decay": 0.06,
        "lr_schedule": "cosine",
        "lr_min": 1e-5,
        "warmup_steps": 3,
        "label_smoothing": 0.1,
        "mixup_alpha": 0.8,
        "cutmix_alpha": 1.0,
        "mixing_epochs": 2,
    }
    spec, seeds = {"arch": "myrtle", "width_multiplier": 0.125}, [0, 1]
    packed = train_pack(Job("cpu", tiny_shapes_dir), "m", seeds, spec, recipe, ["a", "b"])
    alone = [train_member(Job("cpu", tiny_shapes_dir), "m", seed, spec, recipe)[0] for seed in seeds]
    plain = train_member(Job("cpu", tiny_shapes_dir), "m", 0, spec, TRAINING)[0]
    for (checkpoint, _), single in zip(packed, alone):
        rest = set(single["state_dict"]) - cancelled_by_batch_norm(single["state_dict"])
        assert max_weight_difference(checkpoint["state_dict"], single["state_dict"], rest) < WEIGHT_TOLERANCE
    # the recipe changes training: far outside the tolerance of the plain recipe's weights
    assert max_weight_difference(alone[0]["state_dict"], plain["state_dict"], rest) > 2 * WEIGHT_TOLERANCE


def test_an_unmixed_pack_skips_the_partner_loss_and_its_loss_is_unchanged(tiny_shapes_dir, monkeypatch):
    torch.manual_seed(0)
    logits, y = torch.randn(3, 16, 10, requires_grad=True), torch.randint(0, 10, (3, 16))
    calls = []
    cross_entropy = torch.nn.functional.cross_entropy
    monkeypatch.setattr(
        torch.nn.functional, "cross_entropy", lambda *a, **k: calls.append(1) or cross_entropy(*a, **k)
    )
    weighed = mixed_loss(logits, y, torch.ones(3), 0.1)  # the partner's cross-entropy, weighed by 0
    (weighed_grad,) = torch.autograd.grad(weighed.mean(1).sum(), logits)
    assert len(calls) == 2
    skipped = mixed_loss(logits, y, 1.0, 0.1)
    (skipped_grad,) = torch.autograd.grad(skipped.mean(1).sum(), logits)
    assert len(calls) == 3  # one cross-entropy
    assert torch.equal(skipped, weighed) and torch.equal(skipped_grad, weighed_grad)
    # train_pack passes 1 once no member is mixed (after mixing_epochs), one lam per member before
    monkeypatch.setattr(torch.nn.functional, "cross_entropy", cross_entropy)
    lams = []
    monkeypatch.setattr(  # the module whose step (_stacked_step) calls mixed_loss
        packed_training,
        "mixed_loss",
        lambda logits, y, lam, s: lams.append(lam) or mixed_loss(logits, y, lam, s),
    )
    torch.set_num_threads(1)
    recipe = {"epochs": 2, "batch_size": 64, "mixup_alpha": 0.8, "mixing_epochs": 1}
    train_pack(
        Job("cpu", tiny_shapes_dir),
        "m",
        [0, 1],
        {"arch": "c4gap", "width_multiplier": 0.125},
        recipe,
        ["a", "b"],
    )
    steps = len(lams) // 2
    assert steps >= 1 and all(isinstance(lam, torch.Tensor) and lam.shape == (2,) for lam in lams[:steps])
    assert all(lam == 1.0 and not isinstance(lam, torch.Tensor) for lam in lams[steps:])


def test_a_diverged_member_leaves_the_rest_of_its_pack(tiny_shapes_dir, tmp_path):
    from intertwine.training import train_pack as train_models_packed
    from intertwine.workflow.settings import TrainConfig
    from intertwine.workflow.stages.zoo.job import _member

    torch.set_num_threads(1)
    job = Job("cpu", tiny_shapes_dir)
    spec = models.normalize_spec({"arch": "myrtle", "width_multiplier": 0.125})
    members = [_member(job, "m", seed, spec, None) for seed in range(3)]
    with torch.no_grad():
        members[1][0].conv1.weight.fill_(float("nan"))  # member 1's loss is NaN from the first step
    config = TrainConfig.from_block(TRAINING)
    results = train_models_packed(
        [model for model, _ in members],
        job.split("train"),
        job.split("val"),
        config,
        [generator for _, generator in members],
        *job.stats(),
        labels=["m seed 0", "m seed 1", "m seed 2"],
    )
    assert (
        isinstance(results[1], DivergedError)
        and "m seed 1" in str(results[1])
        and "epoch 1" in str(results[1])
    )
    alone = train_member(Job("cpu", tiny_shapes_dir), "m", 2, spec, TRAINING)[0]
    assert results[2].best_epoch == alone["best_epoch"]
    rest = set(alone["state_dict"]) - cancelled_by_batch_norm(alone["state_dict"])
    assert max_weight_difference(results[2].state_dict, alone["state_dict"], rest) < WEIGHT_TOLERANCE


def test_pack_directory_links_members_and_never_overwrites(tiny_shapes_dir, tmp_path):
    from intertwine.workflow.zoo import read_checkpoint, unpack_member, write_pack

    spec = {"arch": "c4gap", "width_multiplier": 0.0625}
    checkpoint, metrics = train_member(Job("cpu", tiny_shapes_dir), "m", 0, spec, {"epochs": 1})
    pack = tmp_path / "packs" / "seeds0-1"
    write_pack(
        pack, {0: (checkpoint, metrics), 1: DivergedError("m seed 1: training loss became nan in epoch 1")}
    )
    unpack_member(pack, 0, tmp_path / "seed0.pt", tmp_path / "seed0.metrics.parquet")
    assert (tmp_path / "seed0.pt").stat().st_ino == (pack / "seed0.pt").stat().st_ino  # a link, not a copy
    assert read_checkpoint(tmp_path / "seed0.pt")["seed"] == 0
    with pytest.raises(
        DivergedError, match=r"m seed 1: training loss became nan in epoch 1 \(the rest of its pack"
    ):
        unpack_member(pack, 1, tmp_path / "seed1.pt", tmp_path / "seed1.metrics.parquet")
    assert not (tmp_path / "seed1.pt").exists()
    with pytest.raises(FileExistsError, match="never overwritten"):
        unpack_member(pack, 0, tmp_path / "seed0.pt", tmp_path / "seed0.metrics.parquet")
    with pytest.raises(FileExistsError, match="a trained pack is never overwritten"):
        write_pack(pack, {0: (checkpoint, metrics)})
    assert sorted(p.name for p in pack.iterdir()) == ["seed0.metrics.parquet", "seed0.pt", "seed1.diverged"]
    assert not [p for p in pack.parent.iterdir() if p.name.startswith(".")]  # no temporary left


def test_every_zoo_architecture_packs_or_says_why():
    """vmap runs every architecture but CCT, whose tokenizer asks for channels-last inside the
    forward: it trains one member at a time, and the reason is logged."""
    packable = {
        "myrtle": {"arch": "myrtle", "width_multiplier": 0.125},
        "resnet20": {"arch": "resnet20", "width_multiplier": 0.125},
        "resnet18": {"arch": "resnet18", "width_multiplier": 0.0625},
        "convnext": {"arch": "convnext", "width_multiplier": 0.125},
        "c4gap_dlgn": {"arch": "c4gap", "width_multiplier": 0.0625, "gated": {"family": "dlgn"}},
        "vgg16_dgn_fr": {
            "arch": "vgg16_avg",
            "width_multiplier": 0.0625,
            "gated": {"family": "dgn", "regime": "fr"},
        },
        "myrtle_leaky": {"arch": "myrtle", "width_multiplier": 0.125, "activation": "leaky_relu"},
    }
    example = torch.randn(2, 3, 32, 32)  # VGG16's five pools need 32 pixels
    for name, spec in packable.items():
        assert pack_problem([models.build(spec) for _ in range(2)], example) is None, name
    cct = {"arch": "cct", "width_multiplier": 0.125, "depth": 1}
    assert "vmap cannot run its forward" in pack_problem([models.build(cct) for _ in range(2)], example)


def test_an_architecture_vmap_cannot_run_trains_its_pack_one_at_a_time(tiny_shapes_dir):
    torch.set_num_threads(1)
    spec = {"arch": "cct", "width_multiplier": 0.125, "depth": 1}
    lines = []
    packed = train_pack(
        Job("cpu", tiny_shapes_dir, 0, lines.append), "m", [0, 1], spec, {"epochs": 1}, ["a", "b"]
    )
    assert any("one at a time: torch.func.vmap cannot run its forward" in line for line in lines)
    for seed, (checkpoint, _) in enumerate(packed):
        alone = train_member(Job("cpu", tiny_shapes_dir), "m", seed, spec, {"epochs": 1})[0]
        assert max_weight_difference(checkpoint["state_dict"], alone["state_dict"]) == 0.0  # the same code


@pytest.mark.skipif(not torch.cuda.is_available(), reason="bf16 autocast of packed training is CUDA's")
@pytest.mark.parametrize("arch", ["myrtle", "resnet20"])
def test_packed_bf16_trains_like_members_alone_in_bf16(tiny_shapes_dir, arch):
    # On CUDA the vmapped batch norm's backward needs float32 inputs under bf16 autocast (it
    # failed with "Expected running_mean to have type BFloat16"); bf16 rounding leaves the
    # accuracies, not the weights, comparable.
    spec = {"arch": arch, "width_multiplier": 0.25}
    training = TRAINING | {"bf16": True, "channels_last": False}
    seeds = [0, 1, 2]
    packed = train_pack(Job("cuda", tiny_shapes_dir), "m", seeds, spec, training, ["a", "b", "c"])
    alone = [train_member(Job("cuda", tiny_shapes_dir), "m", seed, spec, training)[0] for seed in seeds]
    for (checkpoint, metrics), single in zip(packed, alone):
        assert (
            metrics["train_loss"].notna().all()
            and metrics["train_loss"].iloc[-1] < metrics["train_loss"].iloc[0]
        )
        assert abs(checkpoint["test_acc"] - single["test_acc"]) <= 0.15


def _damage(path, how):
    """Damage a file in place (through a hard link, both names see it)."""
    data = path.read_bytes()
    path.chmod(0o644)
    with open(path, "r+b") as f:  # in place: the inode, and so every link to it, is kept
        if how == "truncated":
            f.truncate(len(data) // 2)
        else:
            f.seek(len(data) // 3)
            f.write(b"\0" * 4096)


@pytest.mark.parametrize("how", ["truncated", "overwritten"])
@pytest.mark.parametrize("found_by", ["reading the member", "unpacking it again"])
def test_damaged_pack_member_is_repaired_by_following_its_error(tiny_shapes_dir, tmp_path, how, found_by):
    """A member's checkpoint is a hard link into its pack, so damage to one is damage to both.
    Deleting the member alone and unpacking again would link the same damage: the error (from
    reading the member, or from unpack_member, which reads what it links) says to delete the pack
    and its members' links, and doing exactly that and rerunning gives readable members."""
    import subprocess

    from intertwine.workflow.zoo import CheckpointError, read_checkpoint, unpack_member, write_pack

    spec = {"arch": "c4gap", "width_multiplier": 0.0625}
    trained = {
        seed: train_member(Job("cpu", tiny_shapes_dir), "m", seed, spec, {"epochs": 1}) for seed in (0, 1)
    }
    zoo = tmp_path / "results" / "zoo" / "m"
    pack = zoo / "packs" / "seeds0-1"

    def run_jobs():  # what the workflow's train_pack and unpack_member jobs do
        if not pack.exists():
            write_pack(pack, trained)
        for seed in (0, 1):
            if not (zoo / f"seed{seed}.pt").exists():
                unpack_member(pack, seed, zoo / f"seed{seed}.pt", zoo / f"seed{seed}.metrics.parquet")

    run_jobs()
    for path in [*pack.iterdir(), zoo / "seed1.pt"]:
        path.chmod(0o444)  # as the workflow protects them
    pack.chmod(0o555)
    _damage(zoo / "seed0.pt", how)
    if found_by == "reading the member":
        with pytest.raises(CheckpointError, match="is not a readable intertwine checkpoint") as error:
            read_checkpoint(zoo / "seed0.pt")
    else:
        (zoo / "seed0.pt").unlink()  # the old advice: delete the member and rerun its job
        with pytest.raises(CheckpointError, match="is not a readable intertwine checkpoint") as error:
            unpack_member(pack, 0, zoo / "seed0.pt", zoo / "seed0.metrics.parquet")
        assert not (zoo / "seed0.pt").exists()  # nothing linked to the damage
    message = str(error.value)
    assert f"It is a file of the pack {pack}" in message
    command = re.search(r"\((chmod -R u\+w .*?)\)", message)[1]
    subprocess.run(["bash", "-c", command], check=True, cwd=tmp_path)
    assert not pack.exists() and not list(zoo.glob("seed*"))
    run_jobs()
    for seed in (0, 1):
        checkpoint = read_checkpoint(zoo / f"seed{seed}.pt")
        assert checkpoint["seed"] == seed
        assert torch.equal(checkpoint["state_dict"]["fc.weight"], trained[seed][0]["state_dict"]["fc.weight"])


def test_checkpoint_of_its_own_keeps_the_plain_advice(tiny_shapes_dir, tmp_path):
    from intertwine.workflow.zoo import CheckpointError, read_checkpoint, save_checkpoint

    checkpoint, _ = train_member(
        Job("cpu", tiny_shapes_dir), "m", 0, {"arch": "c4gap", "width_multiplier": 0.0625}, {"epochs": 1}
    )
    path = tmp_path / "seed0.pt"
    save_checkpoint(checkpoint, path)
    _damage(path, "truncated")
    with pytest.raises(CheckpointError, match=r"Delete it \(rm -f .*seed0.pt.*retrains that member") as error:
        read_checkpoint(path)
    assert "pack" not in str(error.value)


def _full_disk(message):
    """A writer that fails as it does on a full disk: torch.save's C++ stream error, or ENOSPC."""
    import errno

    def write(*args, **kwargs):
        raise RuntimeError(message) if message else OSError(errno.ENOSPC, "No space left on device")

    return write


@pytest.mark.parametrize(
    "failing, message",
    [
        ("torch.save", "[enforce fail at inline_container.cc:626] . basic_ios::clear: iostream error"),
        ("torch.save", None),
        ("parquet", None),
    ],
)
def test_a_full_disk_says_so_and_leaves_no_file(tiny_shapes_dir, tmp_path, monkeypatch, failing, message):
    """A full disk while a member's files are written: the error says the disk is full, names the
    file and the space left, and neither the checkpoint nor its metrics table is left behind (the
    metrics used to be written first and stay); a pack leaves no directory."""
    import argparse

    import pyarrow.parquet as pq

    from intertwine.workflow.stages.zoo import commands, job
    from intertwine.workflow.zoo import write_pack

    spec = {"arch": "c4gap", "width_multiplier": 0.0625}
    trained = train_member(Job("cpu", tiny_shapes_dir), "m", 0, spec, {"epochs": 1})
    monkeypatch.setattr(job, "train_member", lambda *args, **kwargs: trained)
    if failing == "torch.save":
        monkeypatch.setattr(torch, "save", _full_disk(message))
    else:
        monkeypatch.setattr(pq, "write_table", _full_disk(message))
    out = tmp_path / "zoo" / "m" / "seed0.pt"
    args = argparse.Namespace(
        device="cpu", data=str(tiny_shapes_dir), global_seed=0, variant="m", seed=0, spec=spec,
        training={"epochs": 1}, out=str(out), metrics=str(out.with_suffix(".metrics.parquet")),
        eval_batch_size=64, features=None,
    )  # fmt: skip
    failed = out.with_suffix(".metrics.parquet") if failing == "parquet" else out
    pattern = rf"could not write {re.escape(str(failed))}: the (disk is full|write failed as it does on a full disk).*GiB free"
    with pytest.raises(OSError, match=pattern) as raised:
        commands.cmd_train_member(args)
    assert "iostream error" in str(raised.value) if message else "No space left" in str(raised.value)
    assert list(out.parent.iterdir()) == []  # no checkpoint, no metrics, no temporary
    pack = tmp_path / "packs" / "seeds0-0"
    with pytest.raises(
        OSError, match=rf"could not write {re.escape(str(pack))}/seed0\.(pt|metrics\.parquet)"
    ):
        write_pack(pack, {0: trained})
    assert list(pack.parent.iterdir()) == []


@pytest.mark.parametrize(
    "options, expected",
    [
        ([], (True, "none", "wide", 1000)),
        (
            [
                "--cuda-graphs",
                "0",
                "--compile",
                "default",
                "--pack-mode",
                "streams",
                "--eval-batch-size",
                "50",
            ],
            (False, "default", "streams", 50),
        ),
    ],
)
def test_a_pack_job_takes_the_speed_settings_its_rule_passes_beside_the_training_block(
    tiny_shapes_dir, tmp_path, monkeypatch, options, expected
):
    """zoo.training.cuda_graphs, compile, pack_mode and eval_batch_size reach a train-pack job as options of
    their own (the rule's resources, so that changing them reruns nothing); unset, the schema's."""
    from intertwine.workflow.cli import build_parser
    from intertwine.workflow.stages.zoo import job

    seen = []
    monkeypatch.setattr(
        job, "train_models_packed", lambda models, *args, **kwargs: seen.append(args[2]) or []
    )
    argv = [
        "train-pack",
        "--variant",
        "m",
        "--seeds",
        "0-1",
        "--spec",
        '{"arch": "c4gap", "width_multiplier": 0.0625}',
    ]
    argv += ["--training", '{"epochs": 1}', "--checkpoints", "a.pt", "b.pt", "--out", str(tmp_path / "pack")]
    argv += ["--data", str(tiny_shapes_dir), "--device", "cpu", "--global-seed", "0", *options]
    args = build_parser().parse_args(argv)
    args.func(args)
    (config,) = seen
    assert (config.cuda_graphs, config.compile, config.pack_mode, config.eval_batch_size) == expected


# --- the fast path: wide packs, batched batches, CUDA graphs ------------------------------------


from intertwine import wide_pack
from intertwine.data import Split
from intertwine.data.augment import apply_augmentation, augment, draw_augmentation
from intertwine.training import train_pack as train_models
from intertwine.training_steps import EpochDraws, member_batches
from intertwine.workflow.settings import TrainConfig

WIDENED = {
    "myrtle": {"arch": "myrtle", "width_multiplier": 0.125},
    "myrtle_nobn": {"arch": "myrtle", "width_multiplier": 0.125, "batch_norm": False},
    "resnet20_leaky": {"arch": "resnet20", "width_multiplier": 0.25, "activation": "leaky_relu"},
    "resnet18": {"arch": "resnet18", "width_multiplier": 0.0625},
    "c4gap": {"arch": "c4gap", "width_multiplier": 0.0625},
    "c4gap_dgn": {"arch": "c4gap", "width_multiplier": 0.0625, "gated": {"family": "dgn"}},
    "c4gap_dlgn_fr": {
        "arch": "c4gap",
        "width_multiplier": 0.0625,
        "gated": {"family": "dlgn", "regime": "fr"},
    },
    "myrtle_dlgn_gated_max": {
        "arch": "myrtle",
        "width_multiplier": 0.125,
        "gated": {"family": "dlgn", "pools": "gated_max"},
    },
    "vgg16_dgn": {"arch": "vgg16_avg", "width_multiplier": 0.0625, "gated": {"family": "dgn"}},
}


@pytest.mark.parametrize("name", WIDENED)
def test_zoo_architectures_widen_and_give_each_member_its_own_weights(name):
    torch.manual_seed(0)
    members = [models.build(WIDENED[name]) for _ in range(3)]
    assert wide_pack.widen_problem(members, torch.randn(4, 3, 32, 32)) is None
    wide = wide_pack.widen(members)
    for k, member in enumerate(members):
        state = wide_pack.member_state(wide, k, len(members))
        assert state.keys() == member.state_dict().keys()
        assert all(torch.equal(state[key], value) for key, value in member.state_dict().items())
    # a frozen feature network (the FR regime) stays frozen
    frozen = {n for n, p in members[0].named_parameters() if not p.requires_grad}
    assert frozen == {n for n, p in wide.named_parameters() if not p.requires_grad}


class _Concatenating(torch.nn.Module):
    """A forward that concatenates two branches' channels: right alone, wrong on a wide tensor."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Conv2d(3, 2, 1), torch.nn.Conv2d(3, 2, 1)
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(torch.cat([self.a(x), self.b(x)], dim=1).mean((2, 3)))


def test_an_architecture_that_does_not_widen_says_why_and_trains_under_vmap():
    example = torch.randn(2, 3, 32, 32)
    assert "mixes the members' channels" in wide_pack.widen_problem(
        [_Concatenating() for _ in range(2)], example
    )
    cct = {"arch": "cct", "width_multiplier": 0.125, "depth": 1}
    assert "CCT holds its own tensors ('pos_embedding')" in wide_pack.widen_problem(
        [models.build(cct) for _ in range(2)], example
    )
    convnext = {"arch": "convnext", "width_multiplier": 0.125}
    assert "LayerNorm2d" in wide_pack.widen_problem([models.build(convnext) for _ in range(2)], example)


def _random_split(n, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return Split(
        torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=generator),
        torch.randint(0, 3, (n,), generator=generator),
    )


@pytest.mark.parametrize("mixing", [{}, {"mixup_alpha": 0.4, "cutmix_alpha": 1.0}])
def test_a_packs_batch_is_each_members_own_batch_exactly(mixing):
    split, config = _random_split(70), TrainConfig(batch_size=16, **mixing)
    mean, std = torch.full((3,), 0.5), torch.full((3,), 0.25)
    seeds = [3, 4, 5]
    packed_generators = [torch.Generator().manual_seed(s) for s in seeds]
    alone_generators = [torch.Generator().manual_seed(s) for s in seeds]
    packed_draws = EpochDraws.stack([EpochDraws.draw(len(split), g, config) for g in packed_generators])
    alone_draws = [EpochDraws.stack([EpochDraws.draw(len(split), g, config)]) for g in alone_generators]
    mixed = 0
    for step in range(5):  # the last batch is short (70 = 4 x 16 + 6)
        x, y, lams = member_batches(split, packed_draws, step, config, packed_generators, mean, std, 1)
        assert x.shape[:2] == y.shape == (3, 16 if step < 4 else 6)
        for k, (draws, generator) in enumerate(zip(alone_draws, alone_generators)):
            x_k, y_k, lams_k = member_batches(split, draws, step, config, [generator], mean, std, 1)
            assert torch.equal(x[k], x_k[0]) and torch.equal(y[k], y_k[0]) and lams[k] == lams_k[0]
        mixed += sum(lam < 1.0 for lam in lams)
    assert (mixed > 0) == bool(mixing)


def test_augment_is_its_draws_applied():
    x = torch.randn(6, 3, 8, 8)
    shifts, flips = draw_augmentation(6, torch.Generator().manual_seed(1), translate=2, flip=True)
    assert torch.equal(augment(x, torch.Generator().manual_seed(1)), apply_augmentation(x, shifts, flips, 2))
    assert shifts.shape == (2, 6) and 0 <= shifts.min() and shifts.max() <= 4


def _initial_member(spec, seed):
    """Member ``seed`` of a 3-class ``spec`` as ``_train_pack_of`` starts it."""
    torch.manual_seed(seed)
    return models.build(spec | {"num_classes": 3})


def _train_pack_of(spec, seeds, config, device, log=lambda _: None):
    split, val = _random_split(96).to(device), _random_split(64, seed=1).to(device)
    built = [_initial_member(spec, seed).to(device) for seed in seeds]
    generators = [torch.Generator(device=device).manual_seed(seed) for seed in seeds]
    mean, std = torch.full((3,), 0.5, device=device), torch.full((3,), 0.25, device=device)
    return train_models(built, split, val, config, generators, mean, std, [f"m{s}" for s in seeds], log)


@pytest.mark.parametrize("name", WIDENED)
def test_a_wide_pack_trains_each_architecture_as_its_members_alone(name):
    """Issue 56's CPU check, per architecture of the fast path: a pack of two trained as one wide
    network (no vmap) ends each member where ``train`` alone ends it, biases that a batch norm
    cancels aside (their drift changes no output)."""
    torch.set_num_threads(1)
    spec, config = WIDENED[name], TrainConfig(epochs=1, batch_size=32)
    lines = []
    packed = _train_pack_of(spec, [0, 1], config, torch.device("cpu"), lines.append)
    assert not [line for line in lines if "vmap" in line or "one after another" in line], lines
    for seed, result in zip([0, 1], packed):
        (alone,) = _train_pack_of(spec, [seed], config, torch.device("cpu"))
        rest = set(result.state_dict) - cancelled_by_batch_norm(result.state_dict)
        assert max_weight_difference(result.state_dict, alone.state_dict, rest) < WEIGHT_TOLERANCE
        assert result.history[-1]["val_acc"] == pytest.approx(alone.history[-1]["val_acc"], abs=2 / 64)


def test_a_pack_that_does_not_widen_trains_under_vmap_as_its_members_alone():
    torch.set_num_threads(1)
    spec, config = {"arch": "convnext", "width_multiplier": 0.125}, TrainConfig(epochs=1, batch_size=32)
    lines = []
    packed = _train_pack_of(spec, [0, 1], config, torch.device("cpu"), lines.append)
    assert any(
        "the pack runs under torch.func.vmap: it cannot be widened: LayerNorm2d" in line for line in lines
    )
    for seed, result in zip([0, 1], packed):
        (alone,) = _train_pack_of(spec, [seed], config, torch.device("cpu"))
        assert max_weight_difference(result.state_dict, alone.state_dict) < WEIGHT_TOLERANCE


@pytest.mark.parametrize(
    "spec, channels_last",
    [
        (WIDENED["myrtle"], False),
        (WIDENED["myrtle"], True),
        (WIDENED["resnet20_leaky"], False),
        ({"arch": "cct", "width_multiplier": 0.125, "depth": 1}, False),  # neither widens nor vmaps
    ],
    ids=["myrtle", "myrtle-channels-last", "resnet20_leaky", "cct"],
)
def test_a_pack_on_streams_trains_each_member_exactly_as_alone(spec, channels_last):
    """zoo.training.pack_mode streams: on a CPU the members run one after another, each its own
    network, so each ends bit for bit where ``train`` alone ends it, every architecture."""
    torch.set_num_threads(1)
    config = TrainConfig(epochs=2, batch_size=32, pack_mode="streams", channels_last=channels_last)
    lines = []
    packed = _train_pack_of(spec, [0, 1], config, torch.device("cpu"), lines.append)
    assert not [line for line in lines if "vmap" in line or "one at a time" in line], lines
    for seed, result in zip([0, 1], packed):
        (alone,) = _train_pack_of(spec, [seed], config, torch.device("cpu"))
        assert result.state_dict.keys() == alone.state_dict.keys()
        assert all(torch.equal(result.state_dict[k], alone.state_dict[k]) for k in alone.state_dict)
        assert all(v.is_contiguous() for v in result.state_dict.values())  # kept in the default format
        assert result.history == [
            row | {"epoch_seconds": r["epoch_seconds"]} for row, r in zip(alone.history, result.history)
        ]


def test_a_compiled_wide_pack_trains_through_the_compiled_forward_and_as_the_eager_pack(monkeypatch):
    """zoo.training.compile: the training steps run through torch.compile's module, evaluation
    eagerly, and the members end where the eager pack ends them. On the CPU with the aot_eager
    backend (traced forward and backward, no generated kernels: inductor compiles for half a
    minute here); the GPU test below uses inductor."""
    torch.set_num_threads(1)
    compiled_modes, calls = [], {"train": 0, "eval": 0}
    real_compile = torch.compile

    def traced(module, mode=None):
        compiled_modes.append(mode)
        compiled = real_compile(module, backend="aot_eager")

        def forward(x):
            calls["train" if module.training else "eval"] += 1
            return compiled(x)

        return forward

    monkeypatch.setattr(torch, "compile", traced)
    spec, config = WIDENED["myrtle"], TrainConfig(epochs=2, batch_size=32)
    cpu = torch.device("cpu")
    compiled = _train_pack_of(spec, [0, 1], dataclasses.replace(config, compile="default"), cpu)
    assert compiled_modes == ["default"] and calls == {"train": 2 * 3, "eval": 0}  # 96 images, batch 32
    eager = _train_pack_of(spec, [0, 1], config, cpu)
    assert compiled_modes == ["default"]  # "none" compiles nothing
    for a, b in zip(compiled, eager):
        rest = set(a.state_dict) - cancelled_by_batch_norm(a.state_dict)
        assert max_weight_difference(a.state_dict, b.state_dict, rest) < WEIGHT_TOLERANCE
        assert [row["val_acc"] for row in a.history] == pytest.approx(
            [row["val_acc"] for row in b.history], abs=2 / 64
        )


def test_a_vmap_stack_trains_eagerly_when_compile_is_asked_for_and_says_so(monkeypatch):
    monkeypatch.setattr(torch, "compile", lambda *args, **kwargs: pytest.fail("a vmap stack was compiled"))
    spec = {"arch": "convnext", "width_multiplier": 0.125}
    config = TrainConfig(epochs=1, batch_size=32, compile="default")
    lines = []
    _train_pack_of(spec, [0, 1], config, torch.device("cpu"), lines.append)
    assert any("the pack trains eagerly (zoo.training.compile" in line for line in lines)


gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs and bf16 autocast are a GPU's")


@gpu
@pytest.mark.parametrize("arch", ["myrtle", "resnet20"])
def test_a_pack_replayed_as_a_cuda_graph_trains_as_its_eager_steps(arch):
    spec = {"arch": arch, "width_multiplier": 0.25}
    config = TrainConfig(epochs=3, batch_size=16, channels_last=True)
    cuda, lines = torch.device("cuda"), []
    graphed = _train_pack_of(spec, [0, 1, 2], config, cuda, lines.append)
    assert not [line for line in lines if "CUDA graph" in line or "vmap" in line]  # wide, and captured
    eager = _train_pack_of(spec, [0, 1, 2], dataclasses.replace(config, cuda_graphs=False), cuda)
    for a, b in zip(graphed, eager):
        rest = set(a.state_dict) - cancelled_by_batch_norm(a.state_dict)
        assert max_weight_difference(a.state_dict, b.state_dict, rest) < WEIGHT_TOLERANCE
        assert [row["val_acc"] for row in a.history] == pytest.approx(
            [row["val_acc"] for row in b.history], abs=2 / 64
        )


# bf16 keeps 8 bits of mantissa: the weights of a bf16 pack drift from the float32 pack's by
# about lr per step wherever a gradient's sign flips, so they are compared with how far training
# moved them: the distance of a bf16 member from its float32 twin over the float32 member's
# distance from its initial weights (the weights a batch norm does not cancel) is at most
# BF16_WEIGHT_TOLERANCE. Calibrated on a CPU under its bf16 autocast, at this test's sizes
# (0.045-0.047 for Myrtle, 0.012-0.013 for ResNet20), not yet on a GPU; the members start
# 12-28 apart, so a member trained from another's weights would fail it.
BF16_ACCURACY_TOLERANCE = 0.1
BF16_WEIGHT_TOLERANCE = 0.25


def relative_drift(trained: dict, twin: dict, initial: dict) -> float:
    """||trained - twin|| / ||twin - initial|| over the weights a batch norm does not cancel."""
    keys = sorted(k for k in set(twin) - cancelled_by_batch_norm(twin) if twin[k].is_floating_point())

    def flat(state):
        return torch.cat([state[k].detach().double().cpu().flatten() for k in keys])

    return ((flat(trained) - flat(twin)).norm() / (flat(twin) - flat(initial)).norm()).item()


@gpu
@pytest.mark.parametrize("arch", ["myrtle", "resnet20"])
def test_a_bf16_pack_trains_like_a_float32_pack(arch):
    spec = {"arch": arch, "width_multiplier": 0.25}
    config = TrainConfig(epochs=3, batch_size=16, channels_last=True)
    cuda = torch.device("cuda")
    float32 = _train_pack_of(spec, [0, 1, 2], config, cuda)
    bf16 = _train_pack_of(spec, [0, 1, 2], dataclasses.replace(config, bf16=True), cuda)
    for seed, a, b in zip([0, 1, 2], float32, bf16):
        assert b.history[-1]["train_loss"] < b.history[0]["train_loss"]
        assert abs(a.history[-1]["val_acc"] - b.history[-1]["val_acc"]) <= BF16_ACCURACY_TOLERANCE
        initial = _initial_member(spec, seed).state_dict()
        assert relative_drift(b.state_dict, a.state_dict, initial) <= BF16_WEIGHT_TOLERANCE
        assert all(
            v.dtype == a.state_dict[k].dtype for k, v in b.state_dict.items()
        )  # float32 master weights


@gpu
@pytest.mark.parametrize("arch", ["myrtle", "resnet20"])
def test_a_compiled_bf16_pack_is_captured_and_trains_like_the_eager_bf16_pack(arch):
    spec = {"arch": arch, "width_multiplier": 0.25}
    config = TrainConfig(epochs=3, batch_size=16, bf16=True)
    cuda, lines = torch.device("cuda"), []
    compiled = _train_pack_of(
        spec, [0, 1, 2], dataclasses.replace(config, compile="default"), cuda, lines.append
    )
    assert not [line for line in lines if "CUDA graph" in line or "vmap" in line]  # wide, and captured
    eager = _train_pack_of(spec, [0, 1, 2], config, cuda)
    for a, b in zip(compiled, eager):
        assert a.history[-1]["train_loss"] < a.history[0]["train_loss"]
        assert abs(a.history[-1]["val_acc"] - b.history[-1]["val_acc"]) <= BF16_ACCURACY_TOLERANCE


@gpu
@pytest.mark.parametrize("arch", ["myrtle", "resnet20"])
def test_a_pack_on_streams_is_captured_and_trains_as_its_members_alone(arch):
    """The members' forwards and backwards forked onto their streams and joined again, inside the
    step's CUDA graph: each member ends where it ends alone (eager, on the default stream), up to
    the rounding of the graph's kernels."""
    spec = {"arch": arch, "width_multiplier": 0.25}
    config = TrainConfig(epochs=3, batch_size=16, channels_last=True, pack_mode="streams")
    cuda, lines = torch.device("cuda"), []
    packed = _train_pack_of(spec, [0, 1, 2], config, cuda, lines.append)
    assert not [line for line in lines if "CUDA graph" in line], lines  # captured
    for seed, result in zip([0, 1, 2], packed):
        (alone,) = _train_pack_of(spec, [seed], config, cuda)
        rest = set(result.state_dict) - cancelled_by_batch_norm(result.state_dict)
        assert max_weight_difference(result.state_dict, alone.state_dict, rest) < WEIGHT_TOLERANCE
        assert [row["val_acc"] for row in result.history] == pytest.approx(
            [row["val_acc"] for row in alone.history], abs=2 / 64
        )
