"""Network dissection: thresholds, IoU and rotated bases on synthetic activations with known answers."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from intertwine import dissection_iou, groups
from intertwine.data.concepts import ConceptData, shapes_concepts
from intertwine.dissection import (
    dissect_activations,
    summarize_units,
    unit_iou,
    unit_thresholds,
)


def rotation_basis(n: int, alpha: float, generator: torch.Generator) -> torch.Tensor:
    return groups.rotation_power(groups.random_rotation(n, generator, dtype=torch.float64), alpha).float()


def _concept_data(labels: np.ndarray, names=None, categories=None) -> ConceptData:
    labels = torch.as_tensor(labels, dtype=torch.int16)
    k = int(labels.max())
    names = names or [f"c{i}" for i in range(k)]
    categories = categories or ["object"] * k
    images = torch.zeros(len(labels), 3, *labels.shape[-2:], dtype=torch.uint8)
    return ConceptData(images, labels, names, categories)


def _blobs(rng, n=40, size=20, concepts=2, pixels=80):
    """Label maps (n, 1, size, size) where concept k covers exactly `pixels` pixels in total."""
    labels = np.zeros((n, 1, size, size), dtype=np.int16)
    flat = labels.reshape(-1)
    chosen = rng.choice(flat.size, size=concepts * pixels, replace=False)
    for k in range(concepts):
        flat[chosen[k * pixels : (k + 1) * pixels]] = k + 1
    return labels


@pytest.mark.parametrize("quantile", [0.005, 0.01, 0.2, 0.0])
@pytest.mark.parametrize("batch_elements", [None, 1000])
def test_thresholds_equal_numpy_quantile(monkeypatch, rng, quantile, batch_elements):
    if batch_elements:  # several batches: the running top-k must still be exact
        monkeypatch.setattr(dissection_iou, "_BATCH_ELEMENTS", batch_elements)
    activations = torch.from_numpy(rng.standard_normal((30, 5, 6, 7)).astype(np.float32))
    values = activations.transpose(0, 1).reshape(5, -1).double().numpy()
    expected = np.quantile(values, 1 - quantile, axis=1)
    got = unit_thresholds(activations, quantile).double().numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_thresholds_in_a_rotated_basis_equal_numpy_on_mixed_channels(monkeypatch, rng):
    monkeypatch.setattr(dissection_iou, "_BATCH_ELEMENTS", 500)
    activations = torch.from_numpy(rng.standard_normal((20, 4, 5, 5)).astype(np.float32))
    basis = rotation_basis(4, 0.7, torch.Generator().manual_seed(1))
    mixed = torch.einsum("ij,njhw->nihw", basis, activations)
    expected = np.quantile(mixed.transpose(0, 1).reshape(4, -1).double().numpy(), 0.99, axis=1)
    np.testing.assert_allclose(
        unit_thresholds(activations, 0.01, basis).numpy(), expected, rtol=1e-5, atol=1e-5
    )


def test_a_unit_equal_to_a_concept_mask_has_iou_one(rng):
    labels = _blobs(rng)
    masks = torch.from_numpy(np.stack([labels[:, 0] == 1, labels[:, 0] == 2], axis=1)).float()
    noise = torch.from_numpy(rng.uniform(0, 1, masks.shape).astype(np.float32))
    # Unit 0 is concept c0's mask, unit 1 concept c1's, unit 2 noise. Both masks hold 80 of the
    # 16,000 pixels, so the 0.5 % threshold falls between the mask and the rest.
    activations = torch.cat([10 * masks + noise, noise[:, :1] * 0.5], dim=1)
    units = dissect_activations(activations, _concept_data(labels), quantile=0.005)
    assert units.concept[:2] == ["c0", "c1"] and len(units) == 3
    np.testing.assert_allclose(units.iou[:2], 1.0)
    assert units.detector.tolist() == [True, True, False]
    assert units.iou[2] < 0.04
    assert summarize_units(units.detector, units.concept) == {
        "n_units": 3,
        "n_interpretable": 2,
        "fraction_interpretable": 2 / 3,
        "n_unique_concepts": 2,
    }


def test_counts_over_units_take_each_detected_concept_once():
    detector = np.array([True, False, True, True])
    assert summarize_units(detector, ["dog", "dog", "red", "dog"]) == {
        "n_units": 4,
        "n_interpretable": 3,
        "fraction_interpretable": 0.75,
        "n_unique_concepts": 2,
    }
    assert summarize_units(np.zeros(0, dtype=bool), [])["fraction_interpretable"] == 0


def test_units_table_reads_back_into_the_labels_it_was_built_from():
    """The stage writes UnitLabels as rows and the masks figure reads them back, in any row order."""
    from intertwine.dissection import UnitLabels
    from intertwine.workflow.stages.dissection.rows import unit_labels, units_frame

    units = UnitLabels(
        concept=["dog", "red", "sky"],
        category=["object", "color", "object"],
        iou=np.array([0.1, 0.02, 0.3]),
        detector=np.array([True, False, True]),
        threshold=np.array([1.5, 0.5, 2.0]),
    )
    frame = units_frame(units)
    assert list(frame.columns) == ["unit", "concept", "category", "iou", "detector", "threshold"]
    assert frame["unit"].tolist() == [0, 1, 2] and frame["detector"].dtype == bool
    back = unit_labels(frame.iloc[[2, 0, 1]])
    for field in dataclasses.fields(units):
        np.testing.assert_array_equal(getattr(back, field.name), getattr(units, field.name))
    with pytest.raises(ValueError, match=r"numbered 0..1, got \[0, 2\]"):
        unit_labels(frame.iloc[[0, 2]])


def test_top_examples_rank_units_by_iou_and_mask_above_the_threshold():
    from intertwine.dissection import UnitLabels, top_examples

    # Unit k is k on image k's one bright pixel, 0 elsewhere; IoUs tie between units 1 and 2.
    activations = torch.zeros(3, 3, 2, 2)
    for k in range(3):
        activations[k, k, 0, 0] = 1.0 + k
    units = UnitLabels(
        concept=["a", "b", "c"],
        category=["object"] * 3,
        iou=np.array([0.1, 0.5, 0.5]),
        detector=np.array([True, True, True]),
        threshold=np.array([0.5, 0.5, 0.5]),
    )
    panels = top_examples(activations, units, None, (2, 2), n_units=2, n_images=1)
    assert [(p["unit"], p["concept"], p["iou"]) for p in panels] == [(1, "b", 0.5), (2, "c", 0.5)]
    image, mask = panels[0]["examples"][0]
    assert image == 1 and mask.dtype == bool and mask.any() and not mask.all()


def test_rotating_concept_units_together_lowers_their_ious(rng):
    labels = _blobs(rng, concepts=4, pixels=40)
    masks = torch.from_numpy(np.stack([labels[:, 0] == k for k in range(1, 5)], axis=1)).float()
    activations = 10 * masks + torch.from_numpy(rng.uniform(0, 1, masks.shape).astype(np.float32))
    data = _concept_data(labels)
    before = dissect_activations(activations, data, quantile=0.0025)
    np.testing.assert_allclose(before.iou, 1.0)
    # Each row of this orthogonal matrix reads at least two concepts with equal positive weight.
    hadamard = torch.tensor([[1, 1, 1, 1], [1, 1, -1, -1], [1, -1, 1, -1], [1, -1, -1, 1]]) / 2.0
    after = dissect_activations(activations, data, hadamard, quantile=0.0025)
    assert (after.iou < 0.6).all()
    # Two units turned by 45 degrees: the sum reads both concepts and drops to about 1/3, while
    # the difference still has one concept on top (only the top of each unit is thresholded).
    angle = math.pi / 4
    turn = torch.eye(4)
    turn[:2, :2] = torch.tensor([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    turned = dissect_activations(activations, data, turn, quantile=0.0025).iou
    np.testing.assert_allclose(turned[[0, 2, 3]], 1.0)
    assert turned[1] < 0.5
    # The identity end of the geodesic changes nothing.
    same = dissect_activations(activations, data, rotation_basis(4, 0.0, torch.Generator()), quantile=0.0025)
    np.testing.assert_allclose(same.iou, 1.0)


def test_upsampled_block_unit_finds_its_concept(rng):
    """A unit at a quarter of the mask resolution that lights up on a concept's 4x4 blocks."""
    low = (rng.uniform(size=(30, 1, 5, 5)) < 0.02).astype(np.float32)
    low[0, 0, 2, 2] = 1.0
    labels = np.kron(low, np.ones((4, 4), dtype=np.float32)).astype(np.int16)  # concept 1 = the blocks
    labels[:, :, :2, :] = np.where(labels[:, :, :2, :] == 0, 2, labels[:, :, :2, :])  # concept 2: top rows
    activations = torch.from_numpy(low * 5)
    # Bilinear upsampling puts 12 of a block's 16 pixels above half the peak, none outside it
    # (when blocks do not touch).
    iou = unit_iou(activations, torch.from_numpy(labels), 2, torch.tensor([2.5]))
    assert iou[0, 0] > 0.6 and iou[0, 1] < 0.1
    units = dissect_activations(activations, _concept_data(labels), quantile=0.01)
    assert units.concept[0] == "c0"


def test_iou_equals_brute_force_over_layers(rng):
    """Random activations and two label layers, against a direct numpy computation."""
    n, c, size, concepts = 12, 3, 8, 4
    activations = torch.from_numpy(rng.standard_normal((n, c, 4, 4)).astype(np.float32))
    labels = rng.integers(0, concepts + 1, size=(n, 2, size, size)).astype(np.int16)
    labels[:, 1] = np.where(rng.uniform(size=(n, size, size)) < 0.7, 0, labels[:, 1])
    thresholds = unit_thresholds(activations, 0.1)
    iou = unit_iou(activations, torch.from_numpy(labels), concepts, thresholds).numpy()
    upsampled = torch.nn.functional.interpolate(
        activations, size=(size, size), mode="bilinear", align_corners=False
    ).numpy()
    for unit in range(c):
        fired = upsampled[:, unit] > thresholds[unit].item()
        for k in range(concepts):
            per_layer = [(labels[:, layer] == k + 1) for layer in range(2)]
            inter = sum((fired & m).sum() for m in per_layer)
            union = fired.sum() + sum(m.sum() for m in per_layer) - inter
            assert iou[unit, k] == pytest.approx(inter / union, rel=1e-6)


def test_rotation_basis_runs_the_geodesic(rng):
    generator = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    start, half, end = (rotation_basis(6, a, generator()).double() for a in (0.0, 0.5, 1.0))
    np.testing.assert_allclose(start, torch.eye(6), atol=1e-6)
    np.testing.assert_allclose(half @ half, end, atol=1e-5)
    np.testing.assert_allclose(end @ end.T, torch.eye(6), atol=1e-5)
    assert torch.linalg.det(end).item() == pytest.approx(1.0, abs=1e-5)
    q = torch.from_numpy(np.asarray(end))
    assert not torch.allclose(q, torch.eye(6, dtype=q.dtype), atol=0.1)


def test_shapes_concepts_use_global_indices(tiny_shapes_dir):
    from intertwine.data import load_split
    from intertwine.data.shapes import CONCEPTS

    split = load_split(tiny_shapes_dir, "test")
    data = shapes_concepts(split)
    assert data.category_names == ["object", "color", "texture", "part"]
    assert data.concepts[:2] == ["circle", "square"] and "red" in data.concepts
    for layer, category in enumerate(data.category_names):
        codes = split.concepts[:, layer].long()
        names = CONCEPTS[category]
        present = codes > 0
        got = data.labels[:, layer].long()[present] - 1
        assert [data.concepts[i] for i in got[:50].tolist()] == [
            names[i - 1] for i in codes[present][:50].tolist()
        ]
        assert {data.categories[i] for i in got.unique().tolist()} == {category}
    assert len(data.head(5)) == 5


def test_concept_data_rejects_bad_input():
    images = torch.zeros(2, 3, 4, 4, dtype=torch.uint8)
    with pytest.raises(ValueError, match="only 1 concepts"):
        ConceptData(images, torch.full((2, 1, 4, 4), 2), ["a"], ["object"])
    with pytest.raises(ValueError, match="unique"):
        ConceptData(images, torch.zeros(2, 1, 4, 4), ["a", "a"], ["object", "object"])
    with pytest.raises(ValueError, match="uint8"):
        ConceptData(images.float(), torch.zeros(2, 1, 4, 4), ["a"], ["object"])


# --- on models -------------------------------------------------------------------------------------


def test_default_sites_are_stage_outputs_and_one_inside_site():
    from intertwine.dissection import default_sites
    from intertwine.models import build, sites

    assert default_sites(sites(build({"arch": "resnet20", "width_multiplier": 0.25}))) == [
        "layer1.2.act2",
        "layer2.2.act2",
        "layer3.2.act2",
        "layer3.2.act1",
    ]
    assert default_sites(sites(build({"arch": "convnext", "width_multiplier": 0.125}))) == [
        "stage1.1.out",
        "stage2.1.out",
        "stage3.1.out",
        "stage3.1.act",
    ]
    assert default_sites(sites(build({"arch": "myrtle", "width_multiplier": 0.125}))) == [
        "act1",
        "act2",
        "act3",
        "act4",
    ]


def test_dissect_a_model_equals_dissecting_its_activations(tiny_shapes_dir):
    from intertwine.data import channel_stats, load_split
    from intertwine.dissection import dissect
    from intertwine.models import build, site_activations

    torch.manual_seed(0)
    model = build({"arch": "resnet20", "width_multiplier": 0.25})
    probe = shapes_concepts(load_split(tiny_shapes_dir, "test"))
    mean, std = channel_stats(tiny_shapes_dir)
    units = dissect(model, "layer2.2.act2", probe, mean=mean, std=std, batch_size=20)
    assert len(units) == 8
    activations = site_activations(model, probe.images, ["layer2.2.act2"], mean, std)["layer2.2.act2"]
    assert activations.shape == (len(probe), 8, 8, 8)
    direct = dissect_activations(activations, probe)
    for field in dataclasses.fields(units):
        np.testing.assert_array_equal(getattr(units, field.name), getattr(direct, field.name))
    assert set(units.category) <= set(probe.categories)


def test_rotations_are_reproducible_and_alpha_zero_is_shared(rng):
    from intertwine.dissection import dissect_rotations

    labels = _blobs(rng, concepts=3, pixels=40)
    masks = torch.from_numpy(np.stack([labels[:, 0] == k for k in (1, 2, 3)], axis=1)).float()
    activations = 10 * masks + torch.from_numpy(rng.uniform(0, 1, masks.shape).astype(np.float32))
    data = _concept_data(labels)
    first = dissect_rotations(activations, data, [0.0, 1.0], 2, ("key",), quantile=0.0025)
    again = dissect_rotations(activations, data, [0.0, 1.0], 2, ("key",), quantile=0.0025)
    assert [(alpha, draw) for alpha, draw, _ in first] == [(0.0, 0), (1.0, 0), (0.0, 1), (1.0, 1)]
    assert [units.iou.tolist() for *_, units in first] == [units.iou.tolist() for *_, units in again]
    at = {(alpha, draw): units for alpha, draw, units in first}
    assert at[0.0, 0].iou.tolist() == at[0.0, 1].iou.tolist() == [1.0, 1.0, 1.0]
    assert at[1.0, 0].iou.tolist() != at[1.0, 1].iou.tolist()
    assert at[1.0, 0].iou.mean() < 1.0


def test_a_module_run_twice_per_forward_is_refused():
    from intertwine.models import site_activations

    class Twice(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 1)
            self.relu = torch.nn.ReLU()

        def forward(self, x):
            return self.relu(self.conv(self.relu(x)))

    images = torch.zeros(2, 3, 4, 4, dtype=torch.uint8)
    with pytest.raises(ValueError, match="more than once"):
        site_activations(Twice(), images, ["relu"], torch.zeros(3), torch.ones(3))


def test_external_model_on_broden_through_the_cli(tmp_path, rng):
    """The ImageNet path with random resnet50 weights on a fake Broden directory."""
    import pandas as pd
    import torchvision

    from intertwine.workflow.cli import main
    from test_broden import make_broden

    root = tmp_path / "broden"
    make_broden(root, rng)
    weights = tmp_path / "resnet50.pth"
    torch.save(torchvision.models.resnet50(weights=None).state_dict(), weights)
    block = {
        "alphas": [0.0, 1.0],
        "rotations": 1,
        "quantile": 0.005,
        "iou_threshold": 0.04,
        "batch_size": 4,
        "probe": {"source": "broden", "images": None, "broden": str(root)},
    }
    import json

    main(
        [
            "dissect-external",
            "--name",
            "r50",
            "--arch",
            "resnet50",
            "--weights",
            str(weights),
            "--config",
            json.dumps(block),
            "--device",
            "cpu",
            "--out",
            str(tmp_path / "r50.parquet"),
            "--units-out",
            str(tmp_path / "r50.units.parquet"),
        ]
    )
    table = pd.read_parquet(tmp_path / "r50.parquet")
    assert list(dict.fromkeys(table["site"])) == ["layer1", "layer2", "layer3", "layer4", "layer4.2.bn2"]
    assert table.set_index("site")["inside_residual"].to_dict() == {
        "layer1": False,
        "layer2": False,
        "layer3": False,
        "layer4": False,
        "layer4.2.bn2": True,
    }
    assert table.loc[table["site"] == "layer4", "n_units"].iloc[0] == 2048
    units = pd.read_parquet(tmp_path / "r50.units.parquet")
    assert len(units) == table["n_units"].sum() and (units["variant"] == "r50").all()


def test_broden_probe_is_resized_to_the_zoo_image_size(tmp_path, rng):
    from intertwine.dissection import probe_concepts
    from test_broden import make_broden

    make_broden(tmp_path / "broden", rng)
    probe = probe_concepts({"source": "broden", "images": 3, "broden": str(tmp_path / "broden")}, [32, 32])
    assert probe.images.shape == (3, 3, 32, 32) and probe.labels.shape[-2:] == (32, 32)
    with pytest.raises(ValueError, match="names no directory"):
        probe_concepts({"source": "broden", "images": 3, "broden": None}, [32, 32])


@pytest.mark.parametrize("arch", ["resnet20", "convnext", "myrtle"])
def test_site_activations_equal_the_split_forward_pass(arch):
    """Hooks (stopping once the sites have run) read what forward_to computes, batch by batch."""
    from intertwine.data.augment import normalize
    from intertwine.models import build, forward_to, site_activations, sites

    torch.manual_seed(0)
    model = build({"arch": arch, "width_multiplier": 0.125}).eval()
    images = torch.randint(0, 256, (6, 3, 16, 16), dtype=torch.uint8)
    mean, std = torch.full((3,), 0.5), torch.full((3,), 0.25)
    names = [site.name for site in sites(model)]
    read = site_activations(model, images, names[::3], mean, std, batch_size=4)
    with torch.no_grad():
        for name in names[::3]:
            assert torch.equal(read[name], forward_to(model, normalize(images, mean, std), name)[0])


def test_masks_figure_shows_the_members_own_dissection(tmp_path, tiny_shapes_dir):
    """dissection_masks labels units from dissect_member's units table (not a second dissection):
    the same units, IoUs and thresholds as the table at each alpha of rotation draw 0."""
    from intertwine import models
    from intertwine.workflow.job import Job
    from intertwine.workflow.stages.dissection.job import dissect_member, dissection_masks
    from intertwine.workflow.zoo import CHECKPOINT_FORMAT, save_checkpoint

    torch.manual_seed(0)
    spec = models.normalize_spec({"arch": "resnet20", "width_multiplier": 0.25})
    path = tmp_path / "seed0.pt"
    save_checkpoint(
        {
            "format": CHECKPOINT_FORMAT,
            "state_dict": models.build(spec).state_dict(),
            "spec": spec,
            "variant": "r",
            "seed": 0,
        },
        path,
    )
    block = {
        "alphas": [0.0, 0.5, 1.0],
        "rotations": 1,
        "quantile": 0.005,
        "iou_threshold": 0.04,
        "batch_size": 16,
        "probe": {"source": "shapes", "images": 24},
        "masks": {"units": 2, "images": 3, "alphas": [0.0, 1.0]},
    }
    job = Job("cpu", tiny_shapes_dir, log=lambda _: None)
    _, units = dissect_member(job, str(path), ["layer3.2.act2"], block)
    images, panels = dissection_masks(job, str(path), "layer3.2.act2", block, units)
    assert len(images) == 24 and len(panels) == 2 * 2
    for panel, alpha in zip(panels, [0.0, 0.0, 1.0, 1.0]):
        row = units[
            (units["alpha"] == alpha) & (units["rotation_seed"] == 0) & (units["unit"] == panel["unit"])
        ]
        assert panel["iou"] == row["iou"].item() and panel["concept"] == row["concept"].item()
        assert len(panel["examples"]) == 3
    with pytest.raises(ValueError, match=r"masks.alphas \[0.25\] are not among dissection.alphas"):
        dissection_masks(
            job, str(path), "layer3.2.act2", block | {"masks": block["masks"] | {"alphas": [0.25]}}, units
        )
    with pytest.raises(ValueError, match="hold 0 units of r seed 0 at layer2.2.act2"):
        dissection_masks(job, str(path), "layer2.2.act2", block, units)


def test_dissection_refuses_activations_it_cannot_dissect(rng):
    """NaN activations gave NaN thresholds, so no unit fired: zero detectors, silently."""
    labels = _blobs(rng)
    data = _concept_data(labels)
    activations = torch.from_numpy(rng.uniform(0, 1, (labels.shape[0], 3, 8, 8)).astype(np.float32))
    activations[0, 1, 2, 2] = float("nan")
    with pytest.raises(ValueError, match="activations contain NaN"):
        dissect_activations(activations, data)
    with pytest.raises(ValueError, match=r"needs \(N, C, h, w\) feature maps.*got shape \(0, 3, 8, 8\)"):
        dissect_activations(activations[:0], data)
    with pytest.raises(ValueError, match=r"got shape \(\d+, 3\)"):
        dissect_activations(activations[:, :, 0, 0], data)
