"""Rendering of the ``shapes`` data set: the per-image factors (object, background, distractor
marks) drawn from the seeded stream, and the images and their concept maps rendered from them
block by block.

Part of :mod:`intertwine.data.shapes`, whose ``generate_shapes`` draws and renders in this order;
the vocabulary and the shape masks are :mod:`intertwine.data.shape_masks`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from intertwine.data.shape_masks import (
    CLASSES,
    CLUTTER,
    COLOR_VALUES,
    COLORS,
    CONCEPTS,
    SHAPES,
    SIZE,
    TEXTURES,
    second_tone,
    texture_mask,
)

# Images rendered per block: bounds memory and keeps the working set in cache.  Part of the
# definition of the data set (the noise is drawn block by block), so do not change it.
_BLOCK = 256


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


def draw_objects(
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
    obj_rgb = np.clip(COLOR_VALUES[obj_color] + jitter[0], 0, 1).astype(np.float32)
    bg_rgb = np.clip(COLOR_VALUES[bg_color] + jitter[1], 0, 1).astype(np.float32)
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
        obj_shade=second_tone(obj_rgb, texture_contrast),
        bg_shade=second_tone(bg_rgb, texture_contrast),
        period=period,
        bg_angle=bg_angle,
        phase=phase,
    )


def draw_marks(
    rng: np.random.Generator, n: int, size: int, n_marks: int, obj: _Objects, color_jitter: float
) -> _Marks:
    """Draw the distractor marks of all images, after the object factors (same stream).

    Marks are capsules: dots when the half-length is 0, strokes otherwise.  As in
    `draw_objects`, the order of the draws defines the data set.
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
    rgb = np.clip(COLOR_VALUES[color] + jitter, 0, 1).astype(np.float32)
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
    for c, shape in enumerate(SHAPES):
        idx = np.flatnonzero(lab == c)
        if idx.size == 0:
            continue
        r = obj.radius[sl][idx] * SIZE[c]
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
    obj_on = texture_mask(
        obj.obj_tex[sl], (cos * dx + sin * dy) * p + ph[0], (cos * dy - sin * dx) * p + ph[1]
    )
    bcos = np.cos(obj.bg_angle[sl]).astype(np.float32)[:, None, None]
    bsin = np.sin(obj.bg_angle[sl]).astype(np.float32)[:, None, None]
    gx, gy = pix[None, None, :], pix[None, :, None]
    p = (1.0 / obj.period[1, sl]).astype(np.float32)[:, None, None]
    ph = obj.phase[1, :, sl].astype(np.float32)[:, :, None, None]
    bg_on = texture_mask(
        obj.bg_tex[sl], (bcos * gx + bsin * gy) * p + ph[0], (bcos * gy - bsin * gx) * p + ph[1]
    )
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
    obj_map = np.where(is_obj, obj.labels[sl][:, None, None] + 1, np.where(is_bg, 0, CLUTTER))
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


def render_images(
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


def generating_factors(obj: _Objects, marks: _Marks) -> dict[str, np.ndarray]:
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
