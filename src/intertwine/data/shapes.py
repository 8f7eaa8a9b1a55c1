"""``shapes``: a procedurally generated image classification data set with concept masks.

The embedded default data set of the workflow.  Each image shows one object, drawn from ten
shape classes, on a textured background with a few small distractor marks and pixel noise.  It
is generated in vectorised NumPy (about 3.5 s for 10,000 images at 32x32 on a busy 2-core CPU),
learnable by a small CNN in a few epochs but not trivially (the default workflow's
quarter-width Myrtle CNN, four epochs on 4,000 images, reaches 72-81 % test accuracy over four
seeds), and every image comes with pixel-level concept label maps in the style of Broden, so that
network dissection can run on it.

Classes (``CLASSES``, label = index)
    circle, square, triangle, star, cross, ring, diamond, hexagon, crescent, arrow.
    Shapes are scaled to roughly equal area (about that of a circle of radius 0.85 object
    radii), so size does not give the class away.  The diamond is an elongated rhombus (a square
    rotated by 45 degrees would be a square).  Some pairs are confusable at small scale and
    under noise (circle / hexagon / ring, square / diamond, star / cross).

Concept categories (``CONCEPTS``; category order = axis 1 of ``split["concepts"]``)
    ``object``  the class name over the object's pixels, ``clutter`` over visible distractor
                marks, 0 over the background.
    ``color``   named colour of whatever is visible at the pixel: the object's named colour over
                the object, the background's over the background, a mark's over a mark.  Every
                pixel has one.  Named colours: red, orange, yellow, green, cyan, blue, purple,
                brown, white, grey, black.
    ``texture`` solid, stripes, checks or dots: the object's texture over the object, the
                background's over the background, ``solid`` over marks.  Every pixel has one.
    ``part``    ``boundary`` over object pixels that have a 4-neighbour outside the object,
                ``interior`` over the other object pixels, 0 elsewhere.
    Value 0 means "no concept of this category here"; value k > 0 means
    ``CONCEPTS[category][k - 1]``.  A dissection mask is ``concepts[:, c] == k``.  With
    anti-aliasing, each pixel belongs to the layer (object, mark, background) that covers most
    of it, ties going to the layer on top, and all categories are derived from that one map.

Nuisances (all independent of the class, drawn per image)
    position (the object stays essentially inside the frame), scale (``scale_range``), rotation
    (uniform within +-``max_rotation`` degrees), a mild anisotropic stretch (``stretch``), object
    colour and background colour (two different named colours, uniform, with per-channel
    jitter ``color_jitter`` around the named value; the label stays the named colour), object
    texture and background texture (uniform over the four; the pattern alternates the colour
    with a lighter or darker shade of it, ``texture_contrast``, with random period, phase and
    orientation; the object's texture turns with the object), clutter (0..``clutter`` small
    dots and strokes of other named colours, beneath the object) and Gaussian pixel noise
    (``noise_std``).  Labels are balanced: each class appears ``n // 10`` or ``n // 10 + 1``
    times, in random order.

Difficulty knobs
    Raise ``noise_std``, ``clutter``, ``max_rotation`` (up to 180: any orientation) or
    ``texture_contrast`` (busier textures that hide the outline), or lower ``scale_range``, to
    make the task harder; ``noise_std=0, clutter=0, texture_contrast=0`` makes it easy.  The
    defaults keep textures faint (``texture_contrast=0.1``); dissection of the ``texture``
    category is more telling with stronger textures (0.3-0.4).

Determinism
    All randomness comes from ``numpy.random.default_rng(seed)``; the same ``(n, seed,
    options)`` give byte-identical arrays with the same NumPy on the same kind of CPU (NumPy's
    vectorised float32 trigonometry may differ in the last bit between instruction sets, which
    can move a rare pixel by one grey level), and different seeds give different images.

Example::

    from intertwine.data.shapes import generate_shapes, CLASSES, CONCEPTS
    split = generate_shapes(5000, seed=0)
    split["images"]    # uint8 (n, 3, H, W)
    split["labels"]    # int64 (n,)
    split["concepts"]  # uint8 (n, len(CONCEPTS), H, W)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from intertwine.data.shape_masks import (
    AREAS as AREAS,
)

# The vocabulary and the masks, and the rendering, are two modules of their own (issue 35: module
# size); the names stay importable from here, the tests check AREAS against shape_areas.
from intertwine.data.shape_masks import (
    CLASSES,
    COLORS,
    CONCEPTS,
    TEXTURES,
)
from intertwine.data.shape_masks import (
    shape_areas as shape_areas,
)
from intertwine.data.shape_render import draw_marks, draw_objects, generating_factors, render_images

__all__ = [
    "CLASSES",
    "CONCEPTS",
    "COLORS",
    "TEXTURES",
    "generate_shapes",
]


def _check_options(
    n: int,
    image_size: int,
    noise_std: float,
    clutter: int,
    scale_range: tuple[float, float],
    supersample: int,
    max_rotation: float,
) -> None:
    if int(n) != n or n < 0:
        raise ValueError(f"shapes: n must be a non-negative integer, got {n!r}")
    if int(image_size) != image_size or image_size < 8:
        raise ValueError(f"shapes: image_size must be an integer >= 8, got {image_size!r}")
    if noise_std < 0:
        raise ValueError(f"shapes: noise_std must be >= 0, got {noise_std!r}")
    if int(clutter) != clutter or clutter < 0:
        raise ValueError(f"shapes: clutter must be a non-negative integer, got {clutter!r}")
    lo, hi = scale_range
    if not 0 < lo <= hi <= 0.5:
        raise ValueError(
            f"shapes: scale_range must satisfy 0 < low <= high <= 0.5 (object radius as a "
            f"fraction of image_size), got {scale_range!r}"
        )
    if int(supersample) != supersample or supersample < 1:
        raise ValueError(f"shapes: supersample must be an integer >= 1, got {supersample!r}")
    if not 0 <= max_rotation <= 180:
        raise ValueError(f"shapes: max_rotation must lie in [0, 180] degrees, got {max_rotation!r}")


def generate_shapes(
    n: int,
    seed: int,
    image_size: int = 32,
    *,
    noise_std: float = 0.05,
    clutter: int = 3,
    scale_range: tuple[float, float] = (0.28, 0.45),
    max_rotation: float = 15.0,
    stretch: float = 0.1,
    color_jitter: float = 0.06,
    texture_contrast: float = 0.1,
    texture_period: tuple[float, float] = (0.09, 0.16),
    supersample: int = 2,
    return_factors: bool = False,
) -> dict[str, Any]:
    """Generate `n` images of the ``shapes`` data set (see the module docstring).

    Parameters
    ----------
    n, seed:
        Number of images and the seed of ``numpy.random.default_rng``.
    image_size:
        Height and width in pixels (the scene is defined in units of the image size, so
        other sizes render the same kind of scene at another resolution).
    noise_std:
        Standard deviation of the additive Gaussian pixel noise, in units of the full
        intensity range (1.0 = 255 grey levels).
    clutter:
        Maximum number of distractor marks per image (the count is uniform on 0..clutter).
    scale_range:
        Range of the object radius as a fraction of ``image_size`` (uniform).
    max_rotation:
        Objects are rotated uniformly within +-max_rotation degrees (180: the full circle,
        0: upright).
    stretch:
        Maximum relative anisotropic stretch of the object (log-uniform in
        ``[1 - stretch, 1 + stretch]`` along one axis, the inverse along the other).
    color_jitter:
        Half-width of the uniform per-channel jitter around the named colours.
    texture_contrast:
        How far the second tone of a texture lies from the base colour (0 = invisible).
    texture_period:
        Range of the texture period as a fraction of ``image_size``.
    supersample:
        Anti-aliasing factor of the object's outline: the shape is sampled on a
        ``supersample`` x ``supersample`` grid per pixel and its coverage averaged (1 = no
        anti-aliasing).  Marks are anti-aliased analytically; textures are sampled once per
        pixel.
    return_factors:
        Also return ``split["factors"]``: per-image generating factors (named colour and texture
        indices, RGB values, centre, radius, angle, number of marks).

    Returns
    -------
    dict with ``images`` (uint8, (n, 3, H, W)), ``labels`` (int64, (n,)), ``concepts``
    (uint8, (n, len(CONCEPTS), H, W)), and ``factors`` if asked for.
    """
    _check_options(n, image_size, noise_std, clutter, scale_range, supersample, max_rotation)
    n, size, f, n_marks = int(n), int(image_size), int(supersample), int(clutter)
    rng = np.random.default_rng(seed)
    # every factor is drawn up front, in this order; the blocks then draw only their noise
    obj = draw_objects(
        rng, n, size, scale_range, max_rotation, stretch, color_jitter, texture_contrast, texture_period
    )
    marks = draw_marks(rng, n, size, n_marks, obj, color_jitter)
    images, concepts = render_images(rng, obj, marks, size, f, noise_std)
    split: dict[str, Any] = {"images": images, "labels": obj.labels, "concepts": concepts}
    if return_factors:
        split["factors"] = generating_factors(obj, marks)
    return split
