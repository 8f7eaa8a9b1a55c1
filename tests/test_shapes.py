"""Tests of the procedurally generated ``shapes`` data set (intertwine.data.shapes)."""

from __future__ import annotations

import numpy as np
import pytest

from intertwine.data import shapes
from intertwine.data.shapes import CLASSES, CONCEPTS, generate_shapes

N_CATS = len(CONCEPTS)
OBJ, COL, TEX, PART = (list(CONCEPTS).index(c) for c in ("object", "color", "texture", "part"))
CLUTTER = CONCEPTS["object"].index("clutter") + 1


@pytest.fixture(scope="module")
def split():
    return generate_shapes(300, seed=0, return_factors=True)


@pytest.fixture(scope="module")
def clean():
    """No noise, no clutter, no anti-aliasing: every pixel is exactly one layer's colour."""
    return generate_shapes(200, seed=5, noise_std=0.0, clutter=0, supersample=1, return_factors=True)


def test_constants():
    assert len(CLASSES) == 10 and len(set(CLASSES)) == 10
    assert list(CONCEPTS)[:3] == ["object", "color", "texture"]
    assert CONCEPTS["object"][:10] == CLASSES and "clutter" in CONCEPTS["object"]
    assert 8 <= len(CONCEPTS["color"]) <= 12
    assert CONCEPTS["texture"] == ["solid", "stripes", "checks", "dots"]
    for names in CONCEPTS.values():
        assert len(names) == len(set(names)) and len(names) < 255


def test_shapes_dtypes_ranges(split):
    images, labels, concepts = split["images"], split["labels"], split["concepts"]
    assert images.shape == (300, 3, 32, 32) and images.dtype == np.uint8
    assert labels.shape == (300,) and labels.dtype == np.int64
    assert concepts.shape == (300, N_CATS, 32, 32) and concepts.dtype == np.uint8
    assert labels.min() >= 0 and labels.max() <= 9
    for c, names in enumerate(CONCEPTS.values()):
        assert concepts[:, c].max() <= len(names)
    # real images: a spread of intensities, not saturated or constant
    assert images.std() > 30 and 60 < images.mean() < 200


def test_deterministic_and_seed_dependent():
    a = generate_shapes(40, seed=3)
    b = generate_shapes(40, seed=3)
    c = generate_shapes(40, seed=4)
    for key in ("images", "labels", "concepts"):
        assert a[key].tobytes() == b[key].tobytes()
    assert not np.array_equal(a["images"], c["images"])
    assert not np.array_equal(a["concepts"], c["concepts"])
    # options are part of the definition
    d = generate_shapes(40, seed=3, noise_std=0.1)
    assert not np.array_equal(a["images"], d["images"])


def test_labels_balanced_and_shuffled():
    labels = generate_shapes(103, seed=1)["labels"]
    counts = np.bincount(labels, minlength=10)
    assert counts.min() == 10 and counts.max() == 11
    assert not np.array_equal(labels, np.sort(labels))


def test_object_concept_matches_label(split):
    concepts, labels = split["concepts"], split["labels"]
    obj = concepts[:, OBJ]
    is_obj = (obj > 0) & (obj != CLUTTER)
    # object pixels carry the image's class, and every image shows its object
    assert np.all(np.where(is_obj, obj == labels[:, None, None] + 1, True))
    assert is_obj.reshape(len(obj), -1).sum(1).min() >= 4
    # objects are not tiny nor the whole image
    frac = is_obj.mean(axis=(1, 2))
    assert 0.03 < frac.mean() < 0.4
    # clutter appears in some images, not everywhere
    has_clutter = (obj == CLUTTER).any(axis=(1, 2))
    assert 0.3 < has_clutter.mean() < 0.95


def test_every_pixel_has_color_and_texture(split):
    concepts = split["concepts"]
    assert concepts[:, COL].min() >= 1 and concepts[:, TEX].min() >= 1


def test_color_texture_part_maps_follow_layers(split):
    concepts, fac = split["concepts"], split["factors"]
    obj = concepts[:, OBJ]
    is_obj = (obj > 0) & (obj != CLUTTER)
    is_bg = obj == 0
    col, tex = concepts[:, COL].astype(int), concepts[:, TEX].astype(int)
    oc = fac["object_color"][:, None, None] + 1
    bc = fac["background_color"][:, None, None] + 1
    assert np.all(col[is_obj] == np.broadcast_to(oc, col.shape)[is_obj])
    assert np.all(col[is_bg] == np.broadcast_to(bc, col.shape)[is_bg])
    ot = fac["object_texture"][:, None, None] + 1
    bt = fac["background_texture"][:, None, None] + 1
    assert np.all(tex[is_obj] == np.broadcast_to(ot, tex.shape)[is_obj])
    assert np.all(tex[is_bg] == np.broadcast_to(bt, tex.shape)[is_bg])
    # marks: solid, in a colour other than the object's and the background's
    is_mark = obj == CLUTTER
    assert is_mark.any()
    assert np.all(tex[is_mark] == CONCEPTS["texture"].index("solid") + 1)
    assert not np.any(col[is_mark] == np.broadcast_to(oc, col.shape)[is_mark])
    assert not np.any(col[is_mark] == np.broadcast_to(bc, col.shape)[is_mark])
    # object and background colours always differ
    assert np.all(fac["object_color"] != fac["background_color"])
    # part: defined exactly over the object, with both boundary and interior present
    part = concepts[:, PART]
    assert np.array_equal(part > 0, is_obj)
    assert (part == 1).any() and (part == 2).any()


def test_pixels_match_concept_maps_exactly(clean):
    """Without noise/clutter/anti-aliasing, object-mask pixels have the object's colour (or its
    texture shade) and all other pixels the background's: the mask is where the object is."""
    images = clean["images"].astype(int)
    fac = clean["factors"]
    is_obj = clean["concepts"][:, OBJ] > 0
    assert not (clean["concepts"][:, OBJ] == CLUTTER).any()

    def q(rgb):  # expected uint8 value of a float colour, (n, 3, 1, 1)
        return np.rint(np.clip(rgb, 0, 1) * 255).astype(int)[:, :, None, None]

    def near(ref):  # pixel equals the reference colour (all channels, up to rounding)
        return np.all(np.abs(images - ref) <= 1, axis=1)

    on_obj = near(q(fac["object_rgb"])) | near(q(fac["object_shade_rgb"]))
    on_bg = near(q(fac["background_rgb"])) | near(q(fac["background_shade_rgb"]))
    assert np.all(on_obj[is_obj])
    assert np.all(on_bg[~is_obj])
    # a solid object shows only its base colour
    solid = fac["object_texture"] == 0
    assert solid.any()
    base = near(q(fac["object_rgb"]))
    assert np.all(base[solid][is_obj[solid]])
    # textured objects use the shade somewhere
    striped = fac["object_texture"] == 1
    shade_used = (near(q(fac["object_shade_rgb"])) & ~base & is_obj).any(axis=(1, 2))
    assert shade_used[striped].mean() > 0.8


def test_color_independent_of_class():
    split = generate_shapes(2000, seed=2, return_factors=True)
    labels, color = split["labels"], split["factors"]["object_color"]
    n_colors = len(CONCEPTS["color"])
    table = np.zeros((10, n_colors), int)
    np.add.at(table, (labels, color), 1)
    assert np.all((table > 0).sum(1) == n_colors)  # each class in every colour
    # no colour dominates a class: the largest share is near 1/n_colors
    share = table / table.sum(1, keepdims=True)
    assert share.max() < 2.5 / n_colors
    # and the background colour does not predict the class either
    bg = split["factors"]["background_color"]
    table_bg = np.zeros((10, n_colors), int)
    np.add.at(table_bg, (labels, bg), 1)
    assert (table_bg / table_bg.sum(1, keepdims=True)).max() < 2.5 / n_colors


@pytest.mark.parametrize("size", [16, 64])
def test_image_size(size):
    split = generate_shapes(30, seed=0, image_size=size)
    assert split["images"].shape == (30, 3, size, size)
    assert split["concepts"].shape == (30, N_CATS, size, size)
    is_obj = (split["concepts"][:, OBJ] > 0) & (split["concepts"][:, OBJ] != CLUTTER)
    assert is_obj.any(axis=(1, 2)).all()
    # the scene is defined relative to the image: the same seed gives the same layout
    ref = generate_shapes(30, seed=0, image_size=32)
    assert np.array_equal(split["labels"], ref["labels"])
    ref_obj = (ref["concepts"][:, OBJ] > 0) & (ref["concepts"][:, OBJ] != CLUTTER)
    assert abs(is_obj.mean() - ref_obj.mean()) < 0.2 * ref_obj.mean()


def test_anti_aliasing_only_changes_edges():
    a = generate_shapes(50, seed=9, supersample=1, noise_std=0.0)
    b = generate_shapes(50, seed=9, supersample=3, noise_std=0.0)
    ma, mb = a["concepts"][:, OBJ] > 0, b["concepts"][:, OBJ] > 0
    assert (ma & mb).sum() / (ma | mb).sum() > 0.85
    assert not np.array_equal(a["images"], b["images"])


def test_knobs_change_the_data():
    base = generate_shapes(200, seed=0, return_factors=True)
    small = generate_shapes(200, seed=0, scale_range=(0.1, 0.15), return_factors=True)
    assert small["factors"]["radius"].max() <= 0.15 * 32 + 1e-4
    area = lambda s: ((s["concepts"][:, OBJ] > 0) & (s["concepts"][:, OBJ] != CLUTTER)).mean()
    assert area(small) < 0.5 * area(base)
    none = generate_shapes(200, seed=0, clutter=0)
    assert not (none["concepts"][:, OBJ] == CLUTTER).any()
    many = generate_shapes(200, seed=0, clutter=8)
    clutter_frac = lambda s: (s["concepts"][:, OBJ] == CLUTTER).mean()
    assert clutter_frac(many) > clutter_frac(base)
    upright = generate_shapes(20, seed=0, max_rotation=0.0, return_factors=True)
    assert np.all(upright["factors"]["angle"] == 0)
    tilted = generate_shapes(500, seed=0, max_rotation=30.0, return_factors=True)
    angle = np.rad2deg(tilted["factors"]["angle"])
    assert np.abs(angle).max() <= 30.0 + 1e-4 and np.abs(angle).max() > 25.0
    turned = generate_shapes(500, seed=0, max_rotation=180.0, return_factors=True)
    assert np.abs(np.rad2deg(turned["factors"]["angle"])).max() > 170.0


def test_shape_area_table_is_current():
    # the per-class size factors equalise areas; the table must match the predicates
    np.testing.assert_allclose(shapes.shape_areas(401), shapes.AREAS, rtol=0.02)


def test_empty_and_bad_options():
    empty = generate_shapes(0, seed=0)
    assert empty["images"].shape == (0, 3, 32, 32) and empty["labels"].shape == (0,)
    for bad in (
        dict(n=-1),
        dict(image_size=4),
        dict(noise_std=-0.1),
        dict(clutter=-1),
        dict(scale_range=(0.3, 0.2)),
        dict(supersample=0),
        dict(max_rotation=-1.0),
    ):
        kwargs = dict(n=5, seed=0) | bad
        with pytest.raises(ValueError):
            generate_shapes(**kwargs)
