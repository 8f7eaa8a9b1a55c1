"""The rotation-penalty machinery: the inserted transform, freezing, and a tiny trial."""

import torch

from intertwine import models
from intertwine.data import load_meta, load_split
from intertwine.rotation import rotation_trial, transform_site
from intertwine.workflow.settings import TrainConfig

SPEC = {"arch": "myrtle", "width_multiplier": 0.125, "batch_norm": False}


def test_transform_multiplies_the_pre_activation():
    torch.manual_seed(0)
    model = models.build(SPEC).eval()
    site = models.sites(model)[1]
    matrix = torch.randn(site.channels, site.channels)
    transformed = transform_site(model, site.name, matrix)
    x = torch.randn(2, 3, 16, 16)
    seen = {}
    model.get_submodule(site.name).register_forward_hook(lambda m, i, o: seen.update(old=i[0]))
    transformed.get_submodule(site.name)[1].register_forward_hook(lambda m, i, o: seen.update(new=i[0]))
    model(x), transformed(x)
    torch.testing.assert_close(seen["new"], torch.einsum("ij,njhw->nihw", matrix, seen["old"]))
    assert isinstance(model.get_submodule(site.name), torch.nn.ReLU)  # the original is untouched


def test_identity_transform_changes_nothing():
    torch.manual_seed(0)
    model = models.build(SPEC).eval()
    site = models.sites(model)[2]
    x = torch.randn(2, 3, 16, 16)
    same = transform_site(model, site.name, torch.eye(site.channels))
    torch.testing.assert_close(same(x), model(x))


def test_rotation_trial_keeps_the_frozen_layers(tiny_shapes_dir):
    torch.manual_seed(0)
    model = models.build(SPEC)
    meta = load_meta(tiny_shapes_dir)
    mean, std = torch.tensor(meta["mean"]), torch.tensor(meta["std"])
    train, val, test = (load_split(tiny_shapes_dir, s) for s in ("train", "val", "test"))
    site = models.sites(model)[1]
    matrix = torch.linalg.qr(torch.randn(site.channels, site.channels))[0]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    row = rotation_trial(
        model,
        site.name,
        matrix,
        train,
        val,
        test,
        TrainConfig(epochs=1),
        torch.Generator().manual_seed(0),
        mean,
        std,
        log=lambda _: None,
    )
    assert set(row) == {"acc_before", "acc_transformed", "acc_finetuned", "finetune_seconds"}
    assert all(0 <= row[k] <= 1 for k in ("acc_before", "acc_transformed", "acc_finetuned"))
    for key, value in model.state_dict().items():  # the zoo model itself is not modified
        assert torch.equal(value, before[key])


def test_stitched_front_is_frozen_in_eval_mode_and_back_trains():
    torch.manual_seed(0)
    spec = {"arch": "resnet20", "width_multiplier": 0.25}
    front, back = models.build(spec), models.build(spec)
    site = "layer2.1.act1"  # inside a block: the skip path must carry the front's block input
    stitched = models.Stitched(front, back, site).train()
    assert not front.training and back.training
    assert not any(p.requires_grad for p in front.parameters())
    x = torch.randn(4, 3, 16, 16)
    stitched(x).sum().backward()
    assert all(p.grad is None for p in front.parameters())
    grads = {n for n, p in back.named_parameters() if p.grad is not None}
    assert "layer2.1.conv2.weight" in grads and "fc.weight" in grads
    assert "layer2.1.conv1.weight" not in grads and "conv1.weight" not in grads
    # With the same weights on both sides it is the model itself (eval mode: same BN statistics).
    back.load_state_dict(front.state_dict())
    stitched.eval()
    with torch.no_grad():
        torch.testing.assert_close(stitched(x), front(x))


def test_transform_of_the_wrong_size_is_refused_before_the_forward_pass():
    import pytest

    from intertwine.rotation import sample_transform

    model = models.build(SPEC).eval()
    with pytest.raises(
        ValueError,
        match=r"site 'act2' has 16 channels, so its transform must be a 16x16 "
        r"matrix, got \(8, 8\)",
    ):
        transform_site(model, "act2", torch.eye(8))
    with pytest.raises(ValueError, match="NaN"):
        transform_site(model, "act2", torch.full((16, 16), float("nan")))
    with pytest.raises(ValueError, match="has no site 'act9'"):
        transform_site(model, "act9", torch.eye(16))
    with pytest.raises(ValueError, match="needs n >= 1 channels, got 0"):  # was an empty matrix
        sample_transform("grelu", 0, torch.Generator())
