"""The Broden loader (on a tiny fake Broden directory) and the local-weights ImageNet models."""

import csv

import numpy as np
import pytest
import torch
from PIL import Image

from intertwine.data.broden import BrodenNotFoundError, load_broden
from intertwine.models.imagenet import (
    DEFAULT_SITES,
    IMAGENET_ARCHS,
    IMAGENET_MEAN,
    IMAGENET_STD,
    feature_map,
    load_imagenet_model,
    site_activations,
)

# --- a fake Broden directory ----------------------------------------------------------------------

COLUMNS = ["color", "object", "part", "material", "scene", "texture"]  # broden1_224's order
N_LABELS = 300  # label numbers 1..300, so that masks hold labels > 255 (G channel in use)
NAMED = {  # number: (name, label.csv category field, {category: coverage in c_<category>.csv})
    1: ("red-c", "color(3)", {"color": 2.5}),
    2: ("wall", "object(4)", {"object": 3.0}),
    # listed under material first (more frequent there), but with more coverage as an object:
    # NetDissect's primary category (max coverage) is object.
    3: ("fabric", "material(36);object(3)", {"material": 0.5, "object": 4.2}),
    4: ("leg", "part(2)", {"part": 0.4}),
    5: ("arm", "part(2)", {"part": 0.3}),
    6: ("kitchen-s", "scene(2)", {"scene": 2.0}),
    7: ("striped", "texture(2)", {"texture": 2.0}),
    8: ("dotted", "texture(1)", {"texture": 1.0}),
    300: ("door-knob", "part(1)", {"part": 0.1}),  # 300 = 44 + 256 * 1
}


def _label(k):
    if k in NAMED:
        return NAMED[k]
    return f"thing{k}", "object(1)", {"object": 0.01}


def _write_csv(path, fields, rows):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def _read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _save_seg(root, rel, code):
    rgb = np.zeros(code.shape + (3,), dtype=np.uint8)
    rgb[..., 0], rgb[..., 1] = code % 256, code // 256
    Image.fromarray(rgb).save(root / "images" / rel)
    return rel


def make_broden(root, rng, image_size=16, seg_size=8):
    """Write a fake Broden directory; return what it drew: per row, the image array and per
    column the list of entries (label-map arrays or whole-image label numbers)."""
    (root / "images" / "ade20k").mkdir(parents=True)
    (root / "images" / "dtd").mkdir()
    s = seg_size

    def seg(choices):
        return rng.choice(np.array([0] + choices), size=(s, s))

    drawn = [  # (image name, split, {column: entries}, image format)
        (
            "ade20k/a.jpg",
            "train",
            {
                "color": [seg([1])],
                "object": [seg([2, 3, 150])],
                "part": [seg([4, 300]), seg([5, 300])],
                "material": [seg([3])],
                "scene": [6],
                "texture": [7, 8],
            },
            "JPEG",
        ),
        ("ade20k/b.png", "val", {"object": [seg([2, 299])], "part": [seg([4])], "scene": [6]}, "PNG"),
        ("dtd/c.png", "train", {"texture": [8]}, "PNG"),
        ("ade20k/d.png", "train", {"object": [seg([256, 3])], "part": [], "scene": [6]}, "PNG"),
    ]
    index, out = [], []
    for n, (name, split, cells, fmt) in enumerate(drawn):
        pixels = rng.integers(0, 256, size=(image_size, image_size, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / "images" / name, format=fmt)
        with Image.open(root / "images" / name) as im:  # what a decoder gives (JPEG is lossy)
            pixels = np.asarray(im.convert("RGB"))
        row = {"image": name, "split": split, "ih": image_size, "iw": image_size, "sh": s, "sw": s}
        for column in COLUMNS:
            entries = []
            for j, entry in enumerate(cells.get(column, [])):
                if isinstance(entry, int):
                    entries.append(str(entry))
                else:
                    entries.append(_save_seg(root, f"{name[:-4]}_{column}_{j}.png", entry))
            row[column] = ";".join(entries)
        index.append(row)
        out.append({"image": pixels, "cells": cells, "split": split})
    _write_csv(root / "index.csv", ["image", "split", "ih", "iw", "sh", "sw"] + COLUMNS, index)

    labels = [
        {
            "number": k,
            "name": _label(k)[0],
            "category": _label(k)[1],
            "frequency": 1,
            "coverage": 1.0,
            "syns": "",
        }
        for k in range(1, N_LABELS + 1)
    ]
    _write_csv(root / "label.csv", ["number", "name", "category", "frequency", "coverage", "syns"], labels)
    category_order = ["color", "object", "part", "material", "scene", "texture"]
    _write_csv(
        root / "category.csv",
        ["name", "first", "last", "count", "frequency"],
        [{"name": c, "first": 1, "last": N_LABELS, "count": 1, "frequency": 1} for c in category_order],
    )
    for c in category_order:
        members = [k for k in range(1, N_LABELS + 1) if c in _label(k)[2]]
        _write_csv(
            root / f"c_{c}.csv",
            ["code", "number", "name", "frequency", "coverage"],
            [
                {
                    "code": i + 1,
                    "number": k,
                    "name": _label(k)[0],
                    "frequency": 1,
                    "coverage": _label(k)[2][c],
                }
                for i, k in enumerate(members)
            ],
        )
    return out


@pytest.fixture
def broden(tmp_path, rng):
    root = tmp_path / "broden1_224"
    return root, make_broden(root, rng)


def _expected_layers(rows, columns):
    depth = {c: max(len(r["cells"].get(c, [])) for r in rows) for c in columns}
    out = np.zeros((len(rows), sum(depth.values()), 8, 8), dtype=np.int16)
    for n, r in enumerate(rows):
        layer = 0
        for c in columns:
            for j, entry in enumerate(r["cells"].get(c, [])):
                out[n, layer + j] = entry  # whole-image labels broadcast over the layer
            layer += depth[c]
    return out


def test_label_maps_images_and_concepts(broden):
    root, drawn = broden
    data = load_broden(root)
    assert len(data) == 4 and data.images.shape == (4, 3, 16, 16) and data.images.dtype == torch.uint8
    for n, row in enumerate(drawn):
        assert np.array_equal(data.images[n].permute(1, 2, 0).numpy(), row["image"])
    # layers: color 1, object 1, part 2, material 1, scene 1, texture 2
    assert data.labels.shape == (4, 8, 8, 8) and data.labels.dtype == torch.int16
    assert np.array_equal(data.labels.numpy(), _expected_layers(drawn, COLUMNS))
    assert int(data.labels.max()) == 300  # decoded from R = 44, G = 1
    assert len(data.concepts) == N_LABELS
    assert data.concepts[0] == "red-c" and data.concepts[299] == "door-knob"
    assert data.concepts[149] == "thing150"
    assert [data.categories[k - 1] for k in (1, 2, 3, 4, 6, 7, 300)] == [
        "color",
        "object",
        "object",
        "part",
        "scene",
        "texture",
        "part",
    ]


def test_overlapping_parts_stay_in_separate_layers(broden):
    root, drawn = broden
    data = load_broden(root, categories=["part"])
    assert data.labels.shape[1] == 2
    first, second = drawn[0]["cells"]["part"]
    assert np.array_equal(data.labels[0, 0].numpy(), first)
    assert np.array_equal(data.labels[0, 1].numpy(), second)
    assert (data.labels[1, 1] == 0).all()  # b.png has one part mask only
    # a concept's mask is the union over layers
    both = ((data.labels[0] == 300).any(0)).numpy()
    assert np.array_equal(both, (first == 300) | (second == 300))


def test_whole_image_labels_fill_their_layer(broden):
    root, drawn = broden
    data = load_broden(root, categories=["scene", "texture"])
    assert data.labels.shape == (4, 3, 8, 8)  # scene 1 layer, texture 2
    assert (data.labels[0, 0] == 6).all() and (data.labels[0, 1] == 7).all()
    assert (data.labels[0, 2] == 8).all()
    assert (data.labels[2, 0] == 0).all() and (data.labels[2, 1] == 8).all()


def test_filters(broden):
    root, drawn = broden
    val = load_broden(root, split="val")
    assert len(val) == 1 and np.array_equal(val.images[0].permute(1, 2, 0).numpy(), drawn[1]["image"])
    # only columns the selected rows use get layers: object 1, part 1, scene 1
    assert val.labels.shape == (1, 3, 8, 8)
    assert np.array_equal(val.labels.numpy(), _expected_layers([drawn[1]], COLUMNS))

    train = load_broden(root, split="train", max_images=2)
    assert len(train) == 2
    assert np.array_equal(train.images[1].permute(1, 2, 0).numpy(), drawn[2]["image"])

    # rows without annotations in the loaded columns are skipped (dtd/c.png has texture only)
    objects = load_broden(root, categories=["object"])
    assert len(objects) == 3 and objects.labels.shape == (3, 1, 8, 8)
    kept = [drawn[0], drawn[1], drawn[3]]
    assert np.array_equal(objects.labels.numpy(), _expected_layers(kept, ["object"]))
    assert int(objects.labels.max()) == 299 and (objects.labels == 256).any()
    # the primary category is chosen among the loaded categories
    material = load_broden(root, categories=["material"])
    assert material.categories[2] == "material"
    assert load_broden(root, max_images=1).labels.shape[0] == 1


def test_bad_arguments(broden):
    root, _ = broden
    with pytest.raises(ValueError, match="not columns"):
        load_broden(root, categories=["objects"])
    with pytest.raises(ValueError, match="split 'test' does not occur"):
        load_broden(root, split="test")
    with pytest.raises(ValueError, match="no rows"):
        load_broden(root, split="val", categories=["color"])


def test_size_mismatch_is_named(broden):
    root, _ = broden
    Image.fromarray(np.zeros((20, 16, 3), dtype=np.uint8)).save(root / "images" / "dtd" / "c.png")
    # the index still says 16x16: the file is named
    with pytest.raises(ValueError, match=r"c\.png is 20x16 but index\.csv says 16x16"):
        load_broden(root)
    # the index says 20x16: the row is named, with the fix
    rows = _read_csv(root / "index.csv")
    rows[2]["ih"] = "20"
    _write_csv(root / "index.csv", list(rows[0]), rows)
    with pytest.raises(
        ValueError,
        match=r"'dtd/c\.png' is 20x16.*first selected image "
        r"'ade20k/a\.jpg' is 16x16.*one size",
    ):
        load_broden(root)
    assert len(load_broden(root, split="val")) == 1  # the mismatch is outside this selection


def test_missing_files_are_named(broden, tmp_path):
    root, _ = broden
    with pytest.raises(BrodenNotFoundError, match="nowhere is not a directory.*index.csv, label.csv"):
        load_broden(tmp_path / "nowhere")
    (root / "images" / "ade20k" / "b_part_0.png").unlink()
    with pytest.raises(FileNotFoundError, match=r"b_part_0\.png \(named in index\.csv\) is missing"):
        load_broden(root)
    assert len(load_broden(root, split="train")) == 3
    (root / "c_scene.csv").unlink()
    with pytest.raises(FileNotFoundError, match=r"c_scene\.csv is missing"):
        load_broden(root, split="train")
    assert len(load_broden(root, split="train", categories=["object"])) == 2
    (root / "label.csv").unlink()
    with pytest.raises(FileNotFoundError, match=r"label\.csv is missing.*category\.csv"):
        load_broden(root)


def test_label_beyond_label_csv(broden):
    root, _ = broden
    rows = _read_csv(root / "label.csv")
    _write_csv(root / "label.csv", list(rows[0]), rows[:299])  # drop 300, which masks use
    with pytest.raises(ValueError, match="holds label 300.*stops at 299"):
        load_broden(root, categories=["part"])


# --- ImageNet models from local weights ---------------------------------------------------------


@pytest.fixture(scope="module")
def saved_models(tmp_path_factory):
    from torchvision import models

    torch.manual_seed(0)
    out = {}
    for arch in IMAGENET_ARCHS:
        model = getattr(models, arch)(weights=None).eval()
        path = tmp_path_factory.mktemp(arch) / f"{arch}.pth"
        torch.save(model.state_dict(), path)
        out[arch] = (model, path)
    return out


@pytest.mark.parametrize("arch", IMAGENET_ARCHS)
def test_load_imagenet_model(arch, saved_models):
    source, path = saved_models[arch]
    model = load_imagenet_model(arch, path)
    assert not model.training
    images = torch.randint(
        0, 256, (2, 3, 64, 64), dtype=torch.uint8, generator=torch.Generator().manual_seed(1)
    )
    x = (images.float() / 255 - torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)) / torch.tensor(
        IMAGENET_STD
    ).view(1, 3, 1, 1)
    with torch.no_grad():
        assert torch.equal(model(x), source(x))

    maps = site_activations(model, arch, images)
    assert list(maps) == DEFAULT_SITES[arch]
    seen, handles = {}, []
    for site in DEFAULT_SITES[arch]:

        def hook(_module, _inputs, output, site=site):
            seen[site] = output.detach().clone()

        handles.append(model.get_submodule(site).register_forward_hook(hook))
    if arch == "resnet50":  # the inner site's representation is the input of conv3
        handles.append(
            model.layer4[2].conv3.register_forward_pre_hook(
                lambda _m, args: seen.__setitem__("conv3 input", args[0].clone())
            )
        )
    with torch.no_grad():
        model(x)
    for handle in handles:
        handle.remove()
    for site in DEFAULT_SITES[arch]:
        assert seen[site].ndim == 4, site
        assert maps[site].ndim == 4 and maps[site].shape[0] == 2
        assert torch.equal(maps[site], feature_map(arch, site, seen[site]))
    if arch == "resnet50":
        assert maps["layer4"].shape == (2, 2048, 2, 2)
        inner = maps["layer4.2.bn2"]
        assert inner.shape == (2, 512, 2, 2) and (inner >= 0).all()
        assert torch.equal(inner, seen["conv3 input"])
        assert (seen["layer4.2.bn2"] < 0).any()  # the hooked output itself is pre-ReLU
    else:
        assert maps["features.7"].shape == (2, 768, 2, 2)
        assert maps["features.7.2.block.4"].shape == (2, 3072, 2, 2)  # channels first


def test_wrapped_state_dicts_load(saved_models, tmp_path):
    source, path = saved_models["resnet50"]
    state = torch.load(path, weights_only=True)
    for key in ("state_dict", "model"):
        wrapped = tmp_path / f"{key}.pth"
        torch.save({key: state, "epoch": 3}, wrapped)
        model = load_imagenet_model("resnet50", wrapped)
        assert torch.equal(model.fc.weight, source.fc.weight)
    prefixed = tmp_path / "ddp.pth"
    torch.save({f"module.{k}": v for k, v in state.items()}, prefixed)
    assert torch.equal(load_imagenet_model("resnet50", prefixed).conv1.weight, source.conv1.weight)


def test_wrong_weights_give_clear_errors(saved_models, tmp_path):
    _, path = saved_models["resnet50"]
    with pytest.raises(
        ValueError,
        match=r"resnet50\.pth does not hold torchvision's convnext_tiny "
        r"weights: \d+ keys missing \(e\.g\. \['features",
    ):
        load_imagenet_model("convnext_tiny", path)
    state = torch.load(path, weights_only=True)
    state["fc.weight"] = state["fc.weight"][:10]
    del state["fc.bias"]
    state["extra.weight"] = torch.zeros(1)
    bad = tmp_path / "bad.pth"
    torch.save(state, bad)
    with pytest.raises(
        ValueError,
        match=r"bad\.pth.*1 keys missing \(e\.g\. \['fc\.bias'\]\), "
        r"1 unexpected.*extra\.weight.*1 of the wrong shape",
    ):
        load_imagenet_model("resnet50", bad)
    with pytest.raises(FileNotFoundError, match=r"missing\.pth.*download\.pytorch\.org"):
        load_imagenet_model("resnet50", tmp_path / "missing.pth")
    junk = tmp_path / "junk.pth"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match=r"junk\.pth could not be read"):
        load_imagenet_model("resnet50", junk)
    with pytest.raises(ValueError, match="not one of"):
        load_imagenet_model("vgg16", path)


def test_truncated_image_is_named(broden):
    from intertwine.data.cifar10 import DataCorruptError

    root, _ = broden
    image = next((root / "images").rglob("*.jpg"), None) or next((root / "images").rglob("*.png"))
    image.write_bytes(image.read_bytes()[:60])
    with pytest.raises(DataCorruptError, match=rf"{image.name} cannot be read as an image.*damaged"):
        load_broden(root)
