"""Stitching helpers refuse invalid input with a clear error instead of a wrong answer or a late
failure (tests/test_stitching.py holds the stitching itself)."""

import pytest
import torch

from intertwine import models, stitching
from intertwine.groups import permutation_matrix

SPEC = {"arch": "myrtle", "width_multiplier": 0.125}


def test_match_grelu_on_integer_activations_keeps_its_scales():
    """The scales were cast back to the activations' dtype: integer activations gave scales 0."""
    g = torch.Generator().manual_seed(0)
    x = torch.randint(1, 50, (20, 4, 3, 3), generator=g)
    perm = torch.tensor([2, 0, 3, 1])
    y = 3 * x[:, perm]  # y_i = 3 x_perm[i]
    found, scales = stitching.match_grelu(x, y)
    assert torch.equal(found, perm)
    assert scales.dtype == torch.get_default_dtype()
    torch.testing.assert_close(scales, torch.full((4,), 3.0))
    assert stitching.match_grelu(x.double(), y.double())[1].dtype == torch.float64


@pytest.mark.parametrize(
    "x, y, message",
    [
        (
            torch.zeros(0, 4, 2, 2),
            torch.zeros(0, 4, 2, 2),
            r"needs at least one sample and one channel, got shape \(0, 4, 2, 2\)",
        ),
        (torch.ones(5, 4), torch.ones(5, 3), r"of one shape \(N, C, \.\.\.\), got \(5, 4\) and \(5, 3\)"),
        (torch.ones(5, 4), torch.ones(6, 4), r"got \(5, 4\) and \(6, 4\)"),
        (torch.full((3, 2), float("nan")), torch.ones(3, 2), "x contains NaN"),
        (torch.ones(4), torch.ones(4), r"x must be a real tensor of activations \(N, C, \.\.\.\)"),
    ],
)
def test_match_grelu_refuses_what_has_no_match(x, y, message):
    """N = 0 returned zero scales and an arbitrary permutation."""
    with pytest.raises(ValueError, match=f"^match_grelu: .*{message}"):
        stitching.match_grelu(x, y)


@pytest.mark.parametrize("channels", [0, -3, 2.0, True, None])
def test_layers_need_a_positive_channel_count(channels):
    """build_layer("grelu", 0) divided by zero (1 / channels)."""
    for method in ("grelu", "full", "rank2", "softsort"):
        with pytest.raises(ValueError, match=rf"a stitching layer needs channels >= 1 .*got {channels!r}"):
            stitching.build_layer(method, channels)
    with pytest.raises(ValueError, match="channels >= 1"):
        stitching.method_dimension("rank2", channels)


def test_rank_above_the_channels_is_a_full_rank_layer():
    assert stitching.method_dimension("rank64", 8) == 8 * 8 == stitching.method_dimension("full", 8)
    assert stitching.build_layer("rank64", 8).down.shape == (8, 8)


def test_stitch_checks_the_layers_width_against_the_site():
    """A layer of the wrong width was accepted until the forward pass."""
    f, g = models.build(SPEC), models.build(SPEC)
    for method in ("full", "rank2", "grelu", "softsort", "l1_0.01"):
        with pytest.raises(
            ValueError,
            match=r"the stitching layer maps 8 channels to 8, but site 'act2' has 16 "
            r"channels in front \(f, run up to it\) and 16 in back",
        ):
            stitching.stitch(f, g, "act2", stitching.build_layer(method, 8))
    assert all(p.requires_grad for p in g.parameters())  # g untouched by the refused call
    stitched = stitching.stitch(f, g, "act2", stitching.build_layer("grelu", 16))
    assert stitched(torch.randn(2, 3, 16, 16)).shape == (2, 10)
    layer = stitching.build_layer("grelu", 16)
    layer.permutation = torch.arange(16)  # rounded: its matrix is a permutation's
    assert torch.equal(layer.matrix(), permutation_matrix(torch.arange(16)).to(layer.matrix()))
    stitching.stitch(f, g, "act2", layer)


def test_stitch_pair_records_the_rank_the_layer_has(tmp_path, tiny_shapes_dir):
    """rank64 at a site of 8 channels runs as rank 8 (a full layer): the table said 64."""
    from intertwine.workflow.job import Job
    from intertwine.workflow.stages.stitching.job import stitch_pair
    from intertwine.workflow.zoo import CHECKPOINT_FORMAT, save_checkpoint

    paths = []
    for seed in range(2):
        torch.manual_seed(seed)
        paths.append(tmp_path / f"seed{seed}.pt")
        save_checkpoint(
            {
                "format": CHECKPOINT_FORMAT,
                "state_dict": models.build(SPEC).state_dict(),
                "spec": models.normalize_spec(SPEC),
                "variant": "myrtle",
                "seed": seed,
            },
            paths[-1],
        )
    rows = stitch_pair(
        Job("cpu", tiny_shapes_dir, log=lambda _: None),
        *paths,
        "rank64",
        0,
        {"epochs": 1, "batch_size": 64, "train_images": 64},
        ["act1", "act2"],
    )
    assert list(rows["method"]) == ["rank64", "rank64"]  # the job's name
    assert list(rows["channels"]) == [8, 16] and list(rows["rank"]) == [8, 16]
    assert list(rows["stitch_params"]) == [64, 256]


def _checkpoint(path, seed, weights_seed=None):
    from intertwine.workflow.zoo import CHECKPOINT_FORMAT, save_checkpoint

    torch.manual_seed(seed if weights_seed is None else weights_seed)
    save_checkpoint(
        {
            "format": CHECKPOINT_FORMAT,
            "state_dict": models.build(SPEC).state_dict(),
            "spec": models.normalize_spec(SPEC),
            "variant": "myrtle",
            "seed": seed,
        },
        path,
    )
    return path


@pytest.mark.parametrize("case", ["copied to the wrong path", "same weights"])
def test_stitch_pair_refuses_one_member_twice(tmp_path, tiny_shapes_dir, case):
    """A checkpoint at the wrong path was stitched with itself, both seeds recorded as 1."""
    from intertwine.workflow.job import Job
    from intertwine.workflow.stages.stitching.job import stitch_pair

    b = _checkpoint(tmp_path / "seed1.pt", 1)
    if case == "copied to the wrong path":
        a = tmp_path / "seed0.pt"
        a.write_bytes(b.read_bytes())
        message = (
            rf"cannot stitch {a} into {b}: they are one member \(both record myrtle seed 1\).*"
            rf"{a} records seed 1, so a checkpoint is at the wrong path"
        )
    else:
        a = _checkpoint(tmp_path / "seed0.pt", 0, weights_seed=1)
        message = rf"cannot stitch {a} into {b}: they are one member \(they hold the same weights"
    with pytest.raises(ValueError, match=message + ".*Give two members' checkpoints"):
        stitch_pair(Job("cpu", tiny_shapes_dir, log=lambda _: None), str(a), str(b), "full", 0, {}, ["act1"])
