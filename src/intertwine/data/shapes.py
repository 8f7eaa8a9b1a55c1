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

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "CLASSES",
    "CONCEPTS",
    "COLORS",
    "TEXTURES",
    "generate_shapes",
]

CLASSES: list[str] = [
    "circle",
    "square",
    "triangle",
    "star",
    "cross",
    "ring",
    "diamond",
    "hexagon",
    "crescent",
    "arrow",
]

#: Named colours and their nominal RGB values in [0, 1].
COLORS: dict[str, tuple[float, float, float]] = {
    "red": (0.85, 0.10, 0.10),
    "orange": (1.00, 0.55, 0.05),
    "yellow": (0.95, 0.90, 0.15),
    "green": (0.10, 0.62, 0.15),
    "cyan": (0.10, 0.80, 0.85),
    "blue": (0.12, 0.22, 0.88),
    "purple": (0.55, 0.15, 0.70),
    "brown": (0.50, 0.30, 0.10),
    "white": (0.95, 0.95, 0.95),
    "grey": (0.50, 0.50, 0.50),
    "black": (0.07, 0.07, 0.07),
}

TEXTURES: list[str] = ["solid", "stripes", "checks", "dots"]

CONCEPTS: dict[str, list[str]] = {
    "object": [*CLASSES, "clutter"],
    "color": list(COLORS),
    "texture": list(TEXTURES),
    "part": ["boundary", "interior"],
}

_CLUTTER = len(CLASSES) + 1  # value of "clutter" in the object category

_RGB = np.array(list(COLORS.values()), dtype=np.float32)

# Per-class size factors (object radius multiplier) that give every shape an area of about
# pi * 0.85**2 (measured numerically on a fine grid).
_TARGET_AREA = np.pi * 0.85**2

# Images rendered per block: bounds memory and keeps the working set in cache.  Part of the
# definition of the data set (the noise is drawn block by block), so do not change it.
_BLOCK = 256


# --------------------------------------------------------------------------- shape predicates
# Each takes coordinates (u, v) in the object's frame, in units of the object radius, and
# returns a boolean array: True inside the shape.  All shapes fit in about the unit disc.


def _circle(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    return u * u + v * v <= 1.0


def _square(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np.maximum(np.abs(u), np.abs(v)) <= 0.78


def _triangle(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    # equilateral, circumradius 1, a vertex at +v; apothem 0.5
    c, s = np.float32(np.sqrt(3.0) / 2.0), np.float32(0.5)
    return (v >= -0.5) & (c * u + s * v <= 0.5) & (-c * u + s * v <= 0.5)


def _star(u: np.ndarray, v: np.ndarray, points: int = 5, inner: float = 0.45) -> np.ndarray:
    # fold the angle into [0, pi/points] and test against the edge from a tip (1, 0) to the
    # neighbouring inner vertex
    sector = 2.0 * np.pi / points
    phi = np.mod(np.arctan2(u, v), np.float32(sector))  # tip at +v
    a = np.minimum(phi, np.float32(sector) - phi)
    rho = np.sqrt(u * u + v * v)
    qx, qy = rho * np.cos(a), rho * np.sin(a)
    p2x, p2y = inner * np.cos(np.pi / points), inner * np.sin(np.pi / points)
    ex, ey = np.float32(p2x - 1.0), np.float32(p2y)
    return ex * qy - ey * (qx - 1.0) >= 0.0


def _cross(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    au, av = np.abs(u), np.abs(v)
    w, length = 0.3, 0.92
    return ((au <= w) & (av <= length)) | ((av <= w) & (au <= length))


def _ring(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    r2 = u * u + v * v
    return (r2 <= 1.0) & (r2 >= 0.58**2)


def _diamond(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    return np.abs(u) * np.float32(1.0 / 0.62) + np.abs(v) <= 1.0


def _hexagon(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    # regular hexagon, circumradius 1, vertices on the u axis
    apothem = np.float32(np.sqrt(3.0) / 2.0)
    au, av = np.abs(u), np.abs(v)
    return (av <= apothem) & (apothem * au + np.float32(0.5) * av <= apothem)


def _crescent(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    du = u - np.float32(0.42)
    return (u * u + v * v <= 1.0) & (du * du + v * v > 0.78**2)


def _arrow(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    av = np.abs(v)
    shaft = (u >= -0.9) & (u <= 0.0) & (av <= 0.26)
    head = (u >= -0.1) & (av <= 0.75 * (0.9 - u))
    return shaft | head


_SHAPES = [
    _circle,
    _square,
    _triangle,
    _star,
    _cross,
    _ring,
    _diamond,
    _hexagon,
    _crescent,
    _arrow,
]


def _shape_areas(resolution: int = 801) -> np.ndarray:
    """Areas of the unit shapes, by counting samples on a fine grid over [-1.5, 1.5]^2."""
    t = np.linspace(-1.5, 1.5, resolution, dtype=np.float32)
    v, u = np.meshgrid(t, t, indexing="ij")
    cell = (t[1] - t[0]) ** 2
    return np.array([f(u, v).sum() * cell for f in _SHAPES], dtype=np.float64)


# Hard-coded (so import is free) and checked against _shape_areas() in the tests.
_AREAS = np.array([3.1416, 2.4415, 1.3013, 1.3225, 1.8573, 2.0850, 1.2402, 2.5987, 1.4636, 1.1699])
_SIZE = np.sqrt(_TARGET_AREA / _AREAS).astype(np.float32)


# --------------------------------------------------------------------------- textures


def _texture(kind: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Texture "shade" indicator (B, H, W) for texture indices `kind` (B,), pattern
    coordinates `a`, `b` (B, H, W) in cycles."""
    out = np.zeros(a.shape, dtype=bool)
    for k in (1, 2, 3):  # solid (0) never shows the shade
        idx = np.flatnonzero(kind == k)
        if idx.size == 0:
            continue
        fa = a[idx] - np.floor(a[idx])
        if k == 1:  # stripes
            out[idx] = fa < 0.5
            continue
        fb = b[idx] - np.floor(b[idx])
        if k == 2:  # checks
            out[idx] = (fa < 0.5) ^ (fb < 0.5)
        else:  # dots
            fa -= 0.5
            fb -= 0.5
            out[idx] = fa * fa + fb * fb < 0.3**2
    return out


def _shade(rgb: np.ndarray, contrast: float) -> np.ndarray:
    """The second tone of a texture: darker for light colours, lighter for dark ones."""
    luma = rgb @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    target = np.where(luma > 0.4, 0.0, 1.0).astype(np.float32)[:, None]
    return rgb + np.float32(contrast) * (target - rgb)


# --------------------------------------------------------------------------- generation


def _pool(x: np.ndarray, f: int) -> np.ndarray:
    """Mean over f x f blocks of a boolean (B, Hf, Wf) array, as float32 (B, H, W)."""
    if f == 1:
        return x.astype(np.float32)
    b, hf, wf = x.shape
    blocks = x.view(np.uint8).reshape(b, hf // f, f, wf // f, f)
    acc = blocks[:, :, 0, :, 0].copy()  # at most f * f <= 255 ones per pixel: uint8 is exact
    for i in range(f):
        for j in range(f):
            if i or j:
                acc += blocks[:, :, i, :, j]
    return acc.astype(np.float32) * np.float32(1.0 / (f * f))


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


@dataclass
class _Objects:
    """Per-image factors of the object and the background, each an array over the images."""

    labels: np.ndarray  # (n,) class index
    radius: np.ndarray  # (n,) object radius in pixels
    angle: np.ndarray  # (n,) rotation in radians
    aspect: np.ndarray  # (n,) stretch along u (1 / aspect along v)
    center: np.ndarray  # (n, 2) x, y in pixels
    obj_color: np.ndarray  # (n,) named colour indices
    bg_color: np.ndarray
    obj_tex: np.ndarray  # (n,) texture indices
    bg_tex: np.ndarray
    obj_rgb: np.ndarray  # (n, 3) float32, the named colour with jitter
    bg_rgb: np.ndarray
    obj_shade: np.ndarray  # (n, 3) float32, the texture's second tone
    bg_shade: np.ndarray
    period: np.ndarray  # (2, n) texture period in pixels: object, background
    bg_angle: np.ndarray  # (n,) orientation of the background's texture
    phase: np.ndarray  # (2, 2, n): (object/background, a/b, image)


@dataclass
class _Marks:
    """Per-mark factors of the distractor marks, each an array over (mark slot, image)."""

    count: np.ndarray  # (n,) number of marks the image shows
    center: np.ndarray  # (n_marks, n, 2)
    width: np.ndarray  # (n_marks, n)
    length: np.ndarray  # (n_marks, n) half-length: 0 for a dot
    angle: np.ndarray  # (n_marks, n)
    color: np.ndarray  # (n_marks, n) named colour indices
    rgb: np.ndarray  # (n_marks, n, 3) float32
    active: np.ndarray  # (n_marks, n) bool: slot k < count


def _draw_objects(
    rng: np.random.Generator,
    n: int,
    size: int,
    scale_range: tuple[float, float],
    max_rotation: float,
    stretch: float,
    color_jitter: float,
    texture_contrast: float,
    texture_period: tuple[float, float],
) -> _Objects:
    """Draw the object and background factors of all images.

    The order of the draws is part of the definition of the data set: every seeded split
    depends on it, so do not reorder them.
    """
    n_colors, n_textures = len(COLORS), len(TEXTURES)
    labels = rng.permutation(np.arange(n) % len(CLASSES)).astype(np.int64)
    radius = size * rng.uniform(*scale_range, size=n)
    angle = np.deg2rad(max_rotation) * rng.uniform(-1.0, 1.0, size=n)
    aspect = np.exp(rng.uniform(np.log1p(-stretch), np.log1p(stretch), size=n))
    margin = 0.85 * radius
    center = margin[:, None] + rng.uniform(size=(n, 2)) * (size - 2.0 * margin)[:, None]
    obj_color = rng.integers(0, n_colors, size=n)
    bg_color = (obj_color + rng.integers(1, n_colors, size=n)) % n_colors  # != obj_color
    obj_tex = rng.integers(0, n_textures, size=n)
    bg_tex = rng.integers(0, n_textures, size=n)
    jitter = rng.uniform(-color_jitter, color_jitter, size=(2, n, 3))
    obj_rgb = np.clip(_RGB[obj_color] + jitter[0], 0, 1).astype(np.float32)
    bg_rgb = np.clip(_RGB[bg_color] + jitter[1], 0, 1).astype(np.float32)
    period = size * rng.uniform(*texture_period, size=(2, n))
    bg_angle = rng.uniform(0.0, np.pi, size=n)
    phase = rng.uniform(size=(2, 2, n))
    return _Objects(
        labels=labels,
        radius=radius,
        angle=angle,
        aspect=aspect,
        center=center,
        obj_color=obj_color,
        bg_color=bg_color,
        obj_tex=obj_tex,
        bg_tex=bg_tex,
        obj_rgb=obj_rgb,
        bg_rgb=bg_rgb,
        obj_shade=_shade(obj_rgb, texture_contrast),
        bg_shade=_shade(bg_rgb, texture_contrast),
        period=period,
        bg_angle=bg_angle,
        phase=phase,
    )


def _draw_marks(
    rng: np.random.Generator, n: int, size: int, n_marks: int, obj: _Objects, color_jitter: float
) -> _Marks:
    """Draw the distractor marks of all images, after the object factors (same stream).

    Marks are capsules: dots when the half-length is 0, strokes otherwise.  As in
    `_draw_objects`, the order of the draws defines the data set.
    """
    n_colors = len(COLORS)
    count = rng.integers(0, n_marks + 1, size=n)
    center = rng.uniform(0.0, size, size=(n_marks, n, 2))
    width = size * rng.uniform(0.035, 0.07, size=(n_marks, n))
    # half of the marks are dots: the second draw zeroes their half-length
    length = size * rng.uniform(0.0, 0.12, size=(n_marks, n)) * (rng.uniform(size=(n_marks, n)) < 0.5)
    angle = rng.uniform(0.0, np.pi, size=(n_marks, n))
    # uniform over the named colours other than the object's and the background's: draw among
    # n_colors - 2 and step over the two taken indices, lower one first
    color = rng.integers(0, n_colors - 2, size=(n_marks, n))
    lo, hi = np.minimum(obj.obj_color, obj.bg_color), np.maximum(obj.obj_color, obj.bg_color)
    color += color >= lo
    color += color >= hi
    jitter = rng.uniform(-color_jitter, color_jitter, size=(n_marks, n, 3))
    rgb = np.clip(_RGB[color] + jitter, 0, 1).astype(np.float32)
    active = np.arange(n_marks)[:, None] < count[None, :]
    return _Marks(
        count=count,
        center=center,
        width=width,
        length=length,
        angle=angle,
        color=color,
        rgb=rgb,
        active=active,
    )


def _object_frame(obj: _Objects, sl: slice) -> tuple[np.ndarray, ...]:
    """cos, sin of the object's angle and its centre x, y for a block, as float32 (b, 1, 1)."""
    cos = np.cos(obj.angle[sl]).astype(np.float32)[:, None, None]
    sin = np.sin(obj.angle[sl]).astype(np.float32)[:, None, None]
    cx = obj.center[sl, 0, None, None].astype(np.float32)
    cy = obj.center[sl, 1, None, None].astype(np.float32)
    return cos, sin, cx, cy


def _object_coverage(
    obj: _Objects, sl: slice, frame: tuple[np.ndarray, ...], sub: np.ndarray, f: int
) -> np.ndarray:
    """Fraction of each pixel the object covers (b, H, W): its shape on the supersampled grid
    `sub`, averaged over f x f samples."""
    cos, sin, cx, cy = frame
    lab = obj.labels[sl]
    dx, dy = sub[None, None, :] - cx, sub[None, :, None] - cy  # (b, 1, W), (b, H, 1)
    ou, ov = cos * dx + sin * dy, cos * dy - sin * dx  # object frame, pixels
    inside = np.zeros(ou.shape, dtype=bool)
    for c, shape in enumerate(_SHAPES):
        idx = np.flatnonzero(lab == c)
        if idx.size == 0:
            continue
        r = obj.radius[sl][idx] * _SIZE[c]
        su = (1.0 / (r * obj.aspect[sl][idx])).astype(np.float32)[:, None, None]
        sv = (obj.aspect[sl][idx] / r).astype(np.float32)[:, None, None]
        inside[idx] = shape(ou[idx] * su, ov[idx] * sv)
    return _pool(inside, f)


def _texture_tones(
    obj: _Objects, sl: slice, frame: tuple[np.ndarray, ...], pix: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Where the object's and the background's patterns show their second tone (b, H, W)
    each, at pixel resolution; the object's pattern turns with the object."""
    cos, sin, cx, cy = frame
    dx, dy = pix[None, None, :] - cx, pix[None, :, None] - cy
    p = (1.0 / obj.period[0, sl]).astype(np.float32)[:, None, None]
    ph = obj.phase[0, :, sl].astype(np.float32)[:, :, None, None]
    obj_on = _texture(obj.obj_tex[sl], (cos * dx + sin * dy) * p + ph[0], (cos * dy - sin * dx) * p + ph[1])
    bcos = np.cos(obj.bg_angle[sl]).astype(np.float32)[:, None, None]
    bsin = np.sin(obj.bg_angle[sl]).astype(np.float32)[:, None, None]
    gx, gy = pix[None, None, :], pix[None, :, None]
    p = (1.0 / obj.period[1, sl]).astype(np.float32)[:, None, None]
    ph = obj.phase[1, :, sl].astype(np.float32)[:, :, None, None]
    bg_on = _texture(obj.bg_tex[sl], (bcos * gx + bsin * gy) * p + ph[0], (bcos * gy - bsin * gx) * p + ph[1])
    return obj_on, bg_on


def _mark_coverage(
    marks: _Marks, sl: slice, pix: np.ndarray, cov_obj: np.ndarray
) -> tuple[list[np.ndarray], np.ndarray]:
    """Visible coverage of each mark beneath the object, top mark (the last slot) first, and
    what is left for the background.  Capsules are anti-aliased analytically: coverage falls
    linearly over the pixel straddling the edge."""
    rest = 1.0 - cov_obj  # what the layers above leave visible
    mark_vis = []
    for k in range(len(marks.color) - 1, -1, -1):
        mdx = pix[None, None, :] - marks.center[k, sl, 0, None, None].astype(np.float32)
        mdy = pix[None, :, None] - marks.center[k, sl, 1, None, None].astype(np.float32)
        mc = np.cos(marks.angle[k, sl]).astype(np.float32)[:, None, None]
        ms = np.sin(marks.angle[k, sl]).astype(np.float32)[:, None, None]
        half = marks.length[k, sl].astype(np.float32)[:, None, None]
        # an inactive slot gets a negative width, so that it covers nothing
        width = np.where(marks.active[k, sl], marks.width[k, sl], -2.0).astype(np.float32)
        mu = mc * mdx + ms * mdy
        mv = mc * mdy - ms * mdx
        mu -= np.maximum(np.minimum(mu, half), -half)
        dist = np.sqrt(mu * mu + mv * mv)
        mark = np.clip(width[:, None, None] + np.float32(0.5) - dist, 0.0, 1.0)
        mark_vis.append(rest * mark)
        rest = rest * (1.0 - mark)
    return mark_vis, rest


def _composite(
    rng: np.random.Generator,
    obj: _Objects,
    marks: _Marks,
    sl: slice,
    layers: tuple[np.ndarray, list[np.ndarray], np.ndarray],
    tones: tuple[np.ndarray, np.ndarray],
    noise_std: float,
) -> np.ndarray:
    """The block's uint8 images (b, 3, H, W): the layers' colours weighted by their coverage,
    plus the block's pixel noise (drawn here, one block at a time, so the draws follow the
    blocks)."""
    cov_obj, mark_vis, cov_bg = layers
    obj_on, bg_on = tones
    obj_col = np.where(obj_on[:, None], obj.obj_shade[sl, :, None, None], obj.obj_rgb[sl, :, None, None])
    bg_col = np.where(bg_on[:, None], obj.bg_shade[sl, :, None, None], obj.bg_rgb[sl, :, None, None])
    rgb = cov_obj[:, None] * obj_col + cov_bg[:, None] * bg_col
    n_marks = len(mark_vis)
    for j, cov in enumerate(mark_vis):
        rgb += cov[:, None] * marks.rgb[n_marks - 1 - j, sl, :, None, None]
    if noise_std > 0:
        rgb += np.float32(noise_std) * rng.standard_normal(rgb.shape, dtype=np.float32)
    return np.rint(np.clip(rgb, 0.0, 1.0) * 255.0).astype(np.uint8)


def _concept_maps(
    obj: _Objects,
    marks: _Marks,
    sl: slice,
    layers: tuple[np.ndarray, list[np.ndarray], np.ndarray],
    out: np.ndarray,
) -> None:
    """Write the block's concept maps into `out` (b, len(CONCEPTS), H, W), all derived from the
    layer that covers most of each pixel (ties go to the layer on top)."""
    cov_obj, mark_vis, cov_bg = layers
    n_marks = len(mark_vis)
    top = np.argmax(np.stack([cov_obj, *mark_vis, cov_bg]), axis=0)  # layer index, object = 0
    is_obj = top == 0
    is_bg = top == n_marks + 1
    obj_map = np.where(is_obj, obj.labels[sl][:, None, None] + 1, np.where(is_bg, 0, _CLUTTER))
    color_map = np.where(is_obj, obj.obj_color[sl, None, None], obj.bg_color[sl, None, None])
    for j in range(n_marks):
        k = n_marks - 1 - j  # mark_vis runs from the top slot down
        color_map = np.where(top == j + 1, marks.color[k, sl, None, None], color_map)
    tex_map = np.where(is_obj, obj.obj_tex[sl, None, None], np.where(is_bg, obj.bg_tex[sl, None, None], 0))
    # edge padding: the border of the frame is not a boundary of the object
    padded = np.pad(is_obj, ((0, 0), (1, 1), (1, 1)), mode="edge")
    interior = (
        is_obj & padded[:, :-2, 1:-1] & padded[:, 2:, 1:-1] & padded[:, 1:-1, :-2] & padded[:, 1:-1, 2:]
    )
    part_map = np.where(interior, 2, np.where(is_obj, 1, 0))
    out[:, 0] = obj_map
    out[:, 1] = color_map + 1
    out[:, 2] = tex_map + 1
    out[:, 3] = part_map


def _render_block(
    rng: np.random.Generator,
    obj: _Objects,
    marks: _Marks,
    sl: slice,
    grids: tuple[np.ndarray, np.ndarray, int],
    noise_std: float,
    concepts: np.ndarray,
) -> np.ndarray:
    """Render the images of block `sl` and write their concept maps into `concepts` (the
    block's rows); `grids` is (pixel centres, supersampled centres, supersample)."""
    pix, sub, f = grids
    frame = _object_frame(obj, sl)
    cov_obj = _object_coverage(obj, sl, frame, sub, f)
    tones = _texture_tones(obj, sl, frame, pix)
    mark_vis, cov_bg = _mark_coverage(marks, sl, pix, cov_obj)
    layers = (cov_obj, mark_vis, cov_bg)
    images = _composite(rng, obj, marks, sl, layers, tones, noise_std)
    _concept_maps(obj, marks, sl, layers, concepts)
    return images


def _render(
    rng: np.random.Generator, obj: _Objects, marks: _Marks, size: int, f: int, noise_std: float
) -> tuple[np.ndarray, np.ndarray]:
    """Render all images and their concept maps, block by block (see `_BLOCK`)."""
    n = len(obj.labels)
    images = np.empty((n, 3, size, size), dtype=np.uint8)
    concepts = np.zeros((n, len(CONCEPTS), size, size), dtype=np.uint8)
    pix = np.arange(size, dtype=np.float32) + np.float32(0.5)  # pixel centres
    sub = (np.arange(size * f, dtype=np.float32) + np.float32(0.5)) / np.float32(f)
    for start in range(0, n, _BLOCK):
        sl = slice(start, min(start + _BLOCK, n))
        images[sl] = _render_block(rng, obj, marks, sl, (pix, sub, f), noise_std, concepts[sl])
    return images, concepts


def _factors(obj: _Objects, marks: _Marks) -> dict[str, np.ndarray]:
    """The generating factors that ``return_factors=True`` returns."""
    return {
        "object_color": obj.obj_color.astype(np.int64),
        "background_color": obj.bg_color.astype(np.int64),
        "object_texture": obj.obj_tex.astype(np.int64),
        "background_texture": obj.bg_tex.astype(np.int64),
        "object_rgb": obj.obj_rgb,
        "object_shade_rgb": obj.obj_shade,
        "background_rgb": obj.bg_rgb,
        "background_shade_rgb": obj.bg_shade,
        "center": obj.center.astype(np.float32),
        "radius": obj.radius.astype(np.float32),
        "angle": obj.angle.astype(np.float32),
        "n_clutter": marks.count.astype(np.int64),
    }


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
    obj = _draw_objects(
        rng, n, size, scale_range, max_rotation, stretch, color_jitter, texture_contrast, texture_period
    )
    marks = _draw_marks(rng, n, size, n_marks, obj, color_jitter)
    images, concepts = _render(rng, obj, marks, size, f, noise_std)
    split: dict[str, Any] = {"images": images, "labels": obj.labels, "concepts": concepts}
    if return_factors:
        split["factors"] = _factors(obj, marks)
    return split
