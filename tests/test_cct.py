"""The Compact Convolutional Transformer (``arch: cct``): sites, channels-first layout, the split
forward pass, stitching at its blocks, spec validation."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from intertwine import models
from intertwine.data.augment import normalize
from intertwine.models import (
    Site,
    Stitched,
    build,
    count_parameters,
    forward_from,
    forward_to,
    normalize_spec,
    site_activations,
    sites,
)
from intertwine.models.cct import CCT, CCTBlock, SelfAttention, sinusoidal_encoding
from intertwine.stitching import build_layer, stitch

TINY = {"arch": "cct", "width_multiplier": 0.125}  # D = 16, MLP 32, tokenizer 8 channels


def _tiny(seed: int = 0, **options) -> nn.Module:
    torch.manual_seed(seed)
    return build({**TINY, **options}).eval()


def test_default_sites_and_size():
    torch.manual_seed(0)
    model = build({"arch": "cct"})
    assert isinstance(model, CCT)
    assert count_parameters(model) == 349_515
    assert sites(model) == [
        Site("blocks.0.act", 256, True),
        Site("blocks.0.out", 128, False),
        Site("blocks.1.act", 256, True),
        Site("blocks.1.out", 128, False),
    ]
    for site in sites(model):
        module = model.get_submodule(site.name)
        assert type(module) is (nn.GELU if site.inside_residual else nn.Identity)
    # The tokenizer's ReLUs are functional: the encoder's activations are the only modules.
    assert [name for name, m in model.named_modules() if isinstance(m, (nn.ReLU, nn.GELU))] == [
        "blocks.0.act",
        "blocks.1.act",
    ]


@pytest.mark.parametrize("width, depth, dim", [(0.25, 3, 32), (0.5, 1, 64), (2.0, 7, 256), (0.3, 2, 38)])
def test_depth_and_width(width, depth, dim):
    model = build({"arch": "cct", "width_multiplier": width, "depth": depth})
    assert len(model.blocks) == depth
    expected = []
    for k in range(depth):
        expected += [Site(f"blocks.{k}.act", 2 * dim, True), Site(f"blocks.{k}.out", dim, False)]
    assert sites(model) == expected
    assert dim % model.blocks[0].attn.heads == 0 and model.blocks[0].attn.heads == 2
    assert model.tokenizer[-1].conv.out_channels == dim


@pytest.mark.parametrize("size, tokens", [(32, 64), (16, 16)])
def test_every_site_is_channels_first(size, tokens):
    model = _tiny(depth=3)
    seen = {}
    handles = [
        model.get_submodule(s.name).register_forward_hook(
            lambda _m, _i, out, name=s.name: seen.setdefault(name, []).append(out.shape)
        )
        for s in sites(model)
    ]
    with torch.no_grad():
        assert model(torch.randn(2, 3, size, size)).shape == (2, 10)
    for handle in handles:
        handle.remove()
    # Each site runs once per pass, in order, with output (N, channels, tokens).
    assert list(seen) == [s.name for s in sites(model)]
    assert seen == {s.name: [(2, s.channels, tokens)] for s in sites(model)}


def test_positional_embedding_resized_only_for_other_sizes():
    model = _tiny()
    assert model.pos_embedding.shape == (1, 16, 8, 8)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        tokens = model._embed(x)
        plain = x
        for layer in model.tokenizer:
            plain = nn.functional.max_pool2d(nn.functional.relu(layer.conv(plain)), 3, 2, 1)
        torch.testing.assert_close(tokens, (plain + model.pos_embedding).flatten(2))
        small = torch.randn(2, 3, 16, 16)
        plain = small
        for layer in model.tokenizer:
            plain = nn.functional.max_pool2d(nn.functional.relu(layer.conv(plain)), 3, 2, 1)
        pos = nn.functional.interpolate(model.pos_embedding, size=(4, 4), mode="bilinear")
        torch.testing.assert_close(model._embed(small), (plain + pos).flatten(2))


def test_sinusoidal_positional_encodings_are_fixed_sine_cosine():
    """Appendix D.4: "Compact Convolutional Transformers with sinusoidal positional encodings"."""
    table = sinusoidal_encoding(64, 16)
    assert table.shape == (64, 16)
    assert torch.equal(table[0, 0::2], torch.zeros(8)) and torch.equal(table[0, 1::2], torch.ones(8))
    p, i = 5, 6  # sin(p / 10000^(2 floor(i/2) / dim)) at even i, its cosine at i + 1
    angle = torch.tensor(p / 10000 ** (2 * (i // 2) / 16), dtype=torch.float64)
    assert table[p, i].item() == pytest.approx(angle.sin().item(), abs=1e-7)
    assert table[p, i + 1].item() == pytest.approx(angle.cos().item(), abs=1e-7)
    model = _tiny(positional="sinusoidal")
    assert "pos_embedding" not in dict(model.named_parameters())
    grid = model.pos_embedding[0].flatten(1).T  # tokens in the order flatten(2) reads them
    torch.testing.assert_close(grid, sinusoidal_encoding(64, model.pos_embedding.shape[1]))
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    assert models.normalize_spec({"arch": "cct"})["positional"] == "learnable"
    with pytest.raises(ValueError, match="model option 'positional'"):
        models.normalize_spec({"arch": "cct", "positional": "rotary"})


@pytest.mark.parametrize("tokenizer_norm", [False, True])
def test_forward_split_at_every_site_is_the_forward(tokenizer_norm):
    model = _tiny(depth=3, tokenizer_norm=tokenizer_norm)
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        expected = model(x)
        assert [name for name, _ in model.pieces() if name] == [s.name for s in sites(model)]
        for site in sites(model):
            state = forward_to(model, x, site.name)
            assert len(state) == (2 if site.inside_residual else 1)
            assert state[0].shape == (3, site.channels, 64)
            torch.testing.assert_close(forward_from(model, state, site.name), expected, rtol=0, atol=0)


def test_site_activations_equal_forward_to():
    model = _tiny(depth=2)
    images = torch.randint(0, 256, (5, 3, 32, 32), dtype=torch.uint8)
    mean, std = torch.tensor([120.0, 110.0, 100.0]), torch.tensor([60.0, 55.0, 50.0])
    names = [s.name for s in sites(model)]
    x = normalize(images, mean, std)
    with torch.no_grad():  # in site_activations' batches: another batch size may round differently
        expected = {
            name: torch.cat([forward_to(model, x[i : i + 2], name)[0] for i in (0, 2, 4)]) for name in names
        }
    together = site_activations(model, images, names, mean, std, batch_size=2)
    for name in names:
        alone = site_activations(model, images, [name], mean, std, batch_size=2)[name]
        torch.testing.assert_close(alone, expected[name], rtol=0, atol=0)
        torch.testing.assert_close(together[name], expected[name], rtol=0, atol=0)


@pytest.mark.parametrize("site", ["blocks.0.act", "blocks.0.out", "blocks.1.act", "blocks.1.out"])
def test_stitched_to_itself_is_itself(site):
    model = _tiny()
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        expected = model(x)
        stitched = Stitched(model, model, site, bridge=nn.Identity()).eval()
        torch.testing.assert_close(stitched(x), expected, rtol=0, atol=0)


def test_block_output_is_pre_norm_transformer():
    block = _tiny().blocks[0]
    x = torch.randn(2, 16, 10)  # (N, D, T)
    with torch.no_grad():
        t = x.transpose(1, 2)
        t = t + block.attn(block.norm1(t))
        t = t + block.fc2(block.act(block.fc1(block.norm2(t))))
        torch.testing.assert_close(block(x), t.transpose(1, 2))
        inner, skip = block.start(x)
        torch.testing.assert_close(
            skip, (x.transpose(1, 2) + block.attn(block.norm1(x.transpose(1, 2)))).transpose(1, 2)
        )
        assert inner.shape == (2, 32, 10)


def test_self_attention_is_multihead_attention():
    torch.manual_seed(0)
    attn = SelfAttention(16, 2)
    reference = nn.MultiheadAttention(16, 2, batch_first=True)
    with torch.no_grad():
        reference.in_proj_weight.copy_(attn.qkv.weight)
        reference.in_proj_bias.zero_()
        reference.out_proj.weight.copy_(attn.proj.weight)
        reference.out_proj.bias.copy_(torch.randn(16))
        attn.proj.bias.copy_(reference.out_proj.bias)
        x = torch.randn(3, 7, 16)
        torch.testing.assert_close(attn(x), reference(x, x, x, need_weights=False)[0])
    with pytest.raises(ValueError, match="not divisible"):
        SelfAttention(15, 2)


@pytest.mark.parametrize("method", ["full", "grelu"])
@pytest.mark.parametrize("site", ["blocks.0.out", "blocks.1.act"])
@pytest.mark.parametrize("tokenizer_norm", [False, True])
def test_stitch_trains_only_the_bridge(method, site, tokenizer_norm):
    f = _tiny(seed=1, tokenizer_norm=tokenizer_norm).train()
    g = _tiny(seed=2, tokenizer_norm=tokenizer_norm).train()
    assert not torch.equal(f.blocks[0].fc1.weight, g.blocks[0].fc1.weight)
    channels = {s.name: s.channels for s in sites(f)}[site]
    layer = build_layer(method, channels, torch.Generator().manual_seed(0))
    stitched = stitch(f, g, site, layer)
    x, y = torch.randn(4, 3, 32, 32), torch.randint(0, 10, (4,))
    loss = nn.functional.cross_entropy(stitched(x), y)
    loss.backward()
    assert torch.isfinite(loss)
    bridge = list(layer.parameters())
    assert bridge and all(p.grad is not None and p.grad.abs().sum() > 0 for p in bridge)
    assert all(p.grad is None for p in (*f.parameters(), *g.parameters()))
    assert not f.training  # the front always runs in eval mode


def test_activation_options():
    relu = build({**TINY, "activation": "relu"})
    assert all(
        type(relu.get_submodule(s.name)) is (nn.ReLU if s.inside_residual else nn.Identity)
        for s in sites(relu)
    )
    assert not any(isinstance(m, nn.GELU) for m in relu.modules())
    leaky = build({**TINY, "activation": "leaky_relu", "negative_slope": 0.2, "num_classes": 7})
    assert leaky.blocks[1].act.negative_slope == 0.2
    with torch.no_grad():
        assert leaky(torch.randn(2, 3, 32, 32)).shape == (2, 7)


def test_spec_defaults_and_depth_validation():
    assert normalize_spec({"arch": "cct"}) == {
        "arch": "cct",
        "activation": "gelu",
        "negative_slope": 0.01,
        "width_multiplier": 1.0,
        "num_classes": 10,
        "depth": 2,
        "tokenizer_norm": False,
        "positional": "learnable",
    }
    assert normalize_spec({"arch": "cct", "depth": 7})["depth"] == 7
    for bad in (0, -1, 2.5, True, "3", None):
        with pytest.raises(ValueError, match="'depth'.*positive integer"):
            build({"arch": "cct", "depth": bad})
    with pytest.raises(ValueError, match="'depth'.*only to cct"):
        build({"arch": "convnext", "depth": 2})
    with pytest.raises(ValueError, match="'batch_norm'"):
        build({"arch": "cct", "batch_norm": False})
    with pytest.raises(ValueError, match="'tokenizer_norm'.*true or false"):
        build({"arch": "cct", "tokenizer_norm": 1})
    with pytest.raises(ValueError, match="negative_slope"):
        build({"arch": "cct", "negative_slope": 0.1})  # gelu by default


def test_init():
    torch.manual_seed(0)
    model = build({"arch": "cct", "width_multiplier": 2.0})
    weight = model.blocks[1].fc1.weight
    assert abs(weight.std().item() - 0.02) < 0.001
    assert abs(model.pos_embedding.std().item() - 0.2) < 0.01
    conv = model.tokenizer[1].conv.weight
    expected = (2 / (128 * 9)) ** 0.5  # kaiming-normal
    assert abs(conv.std().item() - expected) / expected < 0.05
    for module in model.modules():
        if isinstance(module, nn.Linear) and module.bias is not None:
            assert torch.count_nonzero(module.bias) == 0
        if isinstance(module, nn.Conv2d):
            assert module.bias is None
    assert all(isinstance(b, CCTBlock) for b in model.blocks)


def test_registered():
    assert "cct" in models.ARCHITECTURES
    assert set(models.ARCHITECTURES["cct"].options) == {
        "activation",
        "negative_slope",
        "width_multiplier",
        "num_classes",
        "depth",
        "tokenizer_norm",
        "positional",
    }


def test_tokenizer_norm_standardises_each_image_and_channel():
    plain, normed = _tiny(), _tiny(tokenizer_norm=True)
    assert all(type(layer.norm) is nn.Identity for layer in plain.tokenizer)
    norms = [(layer.norm.num_groups, layer.norm.num_channels) for layer in normed.tokenizer]
    assert norms == [(8, 8), (16, 16)]  # a group per channel
    # Only the norms' affine parameters are added; the same seed gives the same other weights.
    assert count_parameters(normed) == count_parameters(plain) + 2 * (8 + 16)
    assert all(torch.equal(value, normed.state_dict()[key]) for key, value in plain.state_dict().items())
    x = torch.randn(4, 3, 32, 32)
    with torch.no_grad():
        grid = normed.tokenizer(x)
        torch.testing.assert_close(grid.mean(dim=(2, 3)), torch.zeros(4, 16), rtol=0, atol=1e-5)
        torch.testing.assert_close(grid.var(dim=(2, 3), correction=0), torch.ones(4, 16), rtol=0, atol=1e-3)
        # Per image: no batch statistics, the same in training and evaluation mode.
        torch.testing.assert_close(normed(x)[:1], normed(x[:1]))
        torch.testing.assert_close(normed.train()(x), normed.eval()(x))
