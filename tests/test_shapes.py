"""The procedural `shapes` data set: determinism, labels, and concept maps consistent with images."""
import numpy as np
import pytest

from intertwine.data.shapes import CLASSES, CONCEPTS, generate_shapes

N = 200


@pytest.fixture(scope="module")
def split():
    return generate_shapes(N, seed=7, return_factors=True)


def test_arrays(split):
    assert split["images"].shape == (N, 3, 32, 32) and split["images"].dtype == np.uint8
    assert split["labels"].shape == (N,) and split["labels"].dtype == np.int64
    assert split["concepts"].shape == (N, len(CONCEPTS), 32, 32)
    assert len(CLASSES) == 10 and list(CONCEPTS) == ["object", "color", "texture", "part"]
    assert np.bincount(split["labels"], minlength=10).tolist() == [N // 10] * 10
    for c, names in enumerate(CONCEPTS.values()):
        assert split["concepts"][:, c].max() <= len(names)


def test_deterministic_and_seed_dependent(split):
    again = generate_shapes(N, seed=7)
    other = generate_shapes(N, seed=8)
    for key in ("images", "labels", "concepts"):
        np.testing.assert_array_equal(split[key], again[key])
    assert not np.array_equal(split["images"], other["images"])


def test_object_map_matches_label(split):
    objects = split["concepts"][:, 0]
    for i in range(N):
        values = set(np.unique(objects[i]).tolist()) - {0, len(CLASSES) + 1}  # background, clutter
        assert values == {split["labels"][i] + 1}  # exactly its own shape, and it is visible


def test_every_pixel_has_a_colour_and_texture(split):
    assert (split["concepts"][:, 1] > 0).all() and (split["concepts"][:, 2] > 0).all()


def test_parts_cover_the_object_exactly(split):
    is_object = (split["concepts"][:, 0] > 0) & (split["concepts"][:, 0] <= len(CLASSES))
    np.testing.assert_array_equal(split["concepts"][:, 3] > 0, is_object)


def test_colour_map_follows_the_factors(split):
    colors, factors = split["concepts"][:, 1], split["factors"]
    objects = split["concepts"][:, 0]
    for i in range(0, N, 17):
        on_object = (objects[i] > 0) & (objects[i] <= len(CLASSES))
        assert (colors[i][on_object] == factors["object_color"][i] + 1).all()
        assert (colors[i][objects[i] == 0] == factors["background_color"][i] + 1).all()


def test_image_shows_the_object_colour(split):
    """Where the object is solid and the map says object, the pixels are near its RGB."""
    factors, images = split["factors"], split["images"].astype(float) / 255
    solid = np.flatnonzero(factors["object_texture"] == 0)
    part = split["concepts"][:, 3]
    for i in solid[:10]:
        interior = part[i] == 2
        if interior.sum() < 4:
            continue
        mean_rgb = images[i][:, interior].mean(axis=1)
        assert np.abs(mean_rgb - factors["object_rgb"][i]).max() < 0.08


def test_colour_is_independent_of_class():
    split = generate_shapes(1000, seed=1, return_factors=True)
    for c in range(10):
        colours = split["factors"]["object_color"][split["labels"] == c]
        assert len(np.unique(colours)) >= 6


@pytest.mark.parametrize("size", [16, 64])
def test_image_size(size):
    split = generate_shapes(20, seed=0, image_size=size)
    assert split["images"].shape == (20, 3, size, size)
    assert split["concepts"].shape == (20, len(CONCEPTS), size, size)


def test_options_are_checked():
    with pytest.raises(ValueError, match="scale_range"):
        generate_shapes(4, seed=0, scale_range=(0.3, 0.9))
    with pytest.raises(ValueError, match="noise_std"):
        generate_shapes(4, seed=0, noise_std=-1)
