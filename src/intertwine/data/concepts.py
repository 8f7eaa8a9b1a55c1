"""Concept data sets for network dissection: images with pixel-level concept label maps.

One container, ``ConceptData``, holds every probe set: the ``shapes`` data set's own annotations
(``shapes_concepts``) and the Broden data set for users who have it on disk
(``intertwine.data.broden.load_broden``). Label maps come in *layers*: a pixel may carry one
concept per layer (``shapes``: one layer per category; Broden: one per annotation column), and a
concept's mask is the union over layers of ``labels[:, layer] == concept + 1``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from intertwine.data import Split


@dataclass
class ConceptData:
    """A probe set for dissection, in memory.

    ``labels`` may be smaller than the images (Broden's masks are half the image size); the
    dissection upsamples activation maps to the label size. Memory: ``3 H W`` bytes per image
    plus ``2 L h w`` bytes for its label layers (int16).
    """

    images: torch.Tensor  # uint8 (N, 3, H, W)
    labels: torch.Tensor  # int16 (N, L, h, w): 0 = no concept, k > 0 = concept k - 1
    concepts: list[str]  # concept names; unique
    categories: list[str]  # the category of each concept (object, color, texture, part, ...)

    def __post_init__(self) -> None:
        if self.images.dtype != torch.uint8 or self.images.ndim != 4 or self.images.shape[1] != 3:
            raise ValueError(
                f"ConceptData.images must be uint8 (N, 3, H, W), got "
                f"{self.images.dtype} {tuple(self.images.shape)}"
            )
        if self.labels.ndim != 4 or len(self.labels) != len(self.images):
            raise ValueError(
                f"ConceptData.labels must be (N, layers, h, w) with N = "
                f"{len(self.images)} images, got {tuple(self.labels.shape)}"
            )
        if len(self.concepts) != len(self.categories):
            raise ValueError(f"{len(self.concepts)} concept names but {len(self.categories)} categories")
        if len(set(self.concepts)) != len(self.concepts):
            raise ValueError("ConceptData.concepts must be unique names")
        self.labels = self.labels.to(torch.int16)
        if len(self.labels) and int(self.labels.max()) > len(self.concepts):
            raise ValueError(
                f"label {int(self.labels.max())} found, but only {len(self.concepts)} concepts are named"
            )

    def __len__(self) -> int:
        return len(self.images)

    @property
    def category_names(self) -> list[str]:
        """The categories in order of first appearance."""
        return list(dict.fromkeys(self.categories))

    def resized(self, size: tuple[int, int]) -> "ConceptData":
        """Images resized to ``size`` (bilinear, antialiased); label maps to the same size
        (nearest), or kept when they already have it."""
        import torch.nn.functional as F

        images = (
            F.interpolate(
                self.images.float(), size=size, mode="bilinear", antialias=True, align_corners=False
            )
            .round()
            .clamp(0, 255)
            .to(torch.uint8)
        )
        labels = self.labels
        if tuple(labels.shape[-2:]) != tuple(size):
            labels = F.interpolate(labels.float(), size=size, mode="nearest-exact").to(torch.int16)
        return ConceptData(images, labels, self.concepts, self.categories)

    def head(self, n: int | None) -> "ConceptData":
        """The first ``n`` images (all when ``n`` is None)."""
        if n is None:
            return self
        return ConceptData(self.images[:n], self.labels[:n], self.concepts, self.categories)


def shapes_concepts(split: Split) -> ConceptData:
    """A ``shapes`` split (with its ``concepts`` maps) as a probe set: concept names from
    ``shapes.CONCEPTS``, numbered category by category."""
    from intertwine.data.shapes import CONCEPTS

    if split.concepts is None:
        raise ValueError(
            "this split has no concept maps: network dissection needs the `shapes` "
            "data set's annotations or a Broden directory (dissection.broden)"
        )
    names, categories, offsets = [], [], []
    for category, members in CONCEPTS.items():
        offsets.append(len(names))
        names += members
        categories += [category] * len(members)
    codes = split.concepts.to(torch.int16)
    offset = torch.tensor(offsets, dtype=torch.int16).view(1, -1, 1, 1)
    labels = torch.where(codes > 0, codes + offset, torch.zeros((), dtype=torch.int16))
    return ConceptData(split.images, labels, names, categories)
