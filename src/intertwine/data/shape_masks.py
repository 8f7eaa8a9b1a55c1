"""The ``shapes`` data set's vocabulary and drawing primitives: the classes, named colours,
textures and concept categories, the masks of the ten shape classes (with their size factors, which
give every class about the same area) and the texture patterns.

Part of :mod:`intertwine.data.shapes`, which documents the data set and re-exports the public names.
"""

from __future__ import annotations

import numpy as np

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

CLUTTER = len(CLASSES) + 1  # value of "clutter" in the object category

COLOR_VALUES = np.array(list(COLORS.values()), dtype=np.float32)

# Per-class size factors (object radius multiplier) that give every shape an area of about
# pi * 0.85**2 (measured numerically on a fine grid).
_TARGET_AREA = np.pi * 0.85**2


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


SHAPES = [
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


def shape_areas(resolution: int = 801) -> np.ndarray:
    """Areas of the unit shapes, by counting samples on a fine grid over [-1.5, 1.5]^2."""
    t = np.linspace(-1.5, 1.5, resolution, dtype=np.float32)
    v, u = np.meshgrid(t, t, indexing="ij")
    cell = (t[1] - t[0]) ** 2
    return np.array([f(u, v).sum() * cell for f in SHAPES], dtype=np.float64)


# Hard-coded (so import is free) and checked against shape_areas() in the tests.
AREAS = np.array([3.1416, 2.4415, 1.3013, 1.3225, 1.8573, 2.0850, 1.2402, 2.5987, 1.4636, 1.1699])
SIZE = np.sqrt(_TARGET_AREA / AREAS).astype(np.float32)


# --------------------------------------------------------------------------- textures


def texture_mask(kind: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
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


def second_tone(rgb: np.ndarray, contrast: float) -> np.ndarray:
    """The second tone of a texture: darker for light colours, lighter for dark ones."""
    luma = rgb @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    target = np.where(luma > 0.4, 0.0, 1.0).astype(np.float32)[:, None]
    return rgb + np.float32(contrast) * (target - rgb)
