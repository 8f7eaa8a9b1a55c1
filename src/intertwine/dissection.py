"""Network dissection (Bau et al. 2017) under rotations of the activation basis: the paper's
section 6 and appendix F.

For every unit (channel) at a site: its activation maps over a probe set with pixel-level concept
masks (``intertwine.data.concepts.ConceptData``); a per-unit threshold at the top ``quantile``
(0.5 %) of the unit's activations over the whole probe set; the maps upsampled (bilinear) to the
mask size and thresholded; the IoU of that binary map with each concept's mask, summed over the
whole probe set; the unit is a detector of its best concept when that IoU exceeds
``iou_threshold`` (0.04).

In a rotated basis the channels are first mixed by an orthogonal matrix R: unit i reads
``sum_j R_ij a_j``. Since both the mixing and bilinear upsampling are linear, mixing the raw
maps equals mixing the upsampled ones. The paper rotates by ``Q^alpha`` with Q Haar-random in
SO(n), along the geodesic from I (alpha = 0) to Q (alpha = 1): ``dissect_rotations``.

The thresholds (exact quantiles, streamed in bounded memory) and the IoUs come from
``intertwine.dissection_iou``; its names (``DEFAULT_QUANTILE``, ``unit_thresholds``, ``unit_iou``)
are importable from here too. Tensors in, labels and counts out (``UnitLabels``, arrays): the
dissection stage builds its tables from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from intertwine import groups, models
from intertwine.data.concepts import ConceptData
from intertwine.dissection_iou import DEFAULT_QUANTILE, unit_iou, unit_thresholds
from intertwine.utils import derive_seed

__all__ = [
    "DEFAULT_IOU_THRESHOLD",
    "DEFAULT_QUANTILE",
    "UnitLabels",
    "default_sites",
    "dissect",
    "dissect_activations",
    "dissect_rotations",
    "draw_rotation",
    "label_units",
    "probe_concepts",
    "rotated_bases",
    "summarize_units",
    "top_examples",
    "unit_iou",
    "unit_thresholds",
]

DEFAULT_IOU_THRESHOLD = 0.04


@dataclass(frozen=True)
class UnitLabels:
    """One dissection's units, a column per field (unit i at position i).

    Attributes
    ----------
    concept : list[str]
        Each unit's best concept (the one of highest IoU).
    category : list[str]
        That concept's category (``object``, ``color``, ...).
    iou : numpy.ndarray
        (C,) float64: the IoU of each unit with its best concept.
    detector : numpy.ndarray
        (C,) bool: whether that IoU exceeds the IoU threshold.
    threshold : numpy.ndarray
        (C,) float64: each unit's activation threshold (``unit_thresholds``).
    """

    concept: list[str]
    category: list[str]
    iou: np.ndarray
    detector: np.ndarray
    threshold: np.ndarray

    def __len__(self) -> int:
        return len(self.concept)

    def columns(self) -> dict:
        """The units as named columns (``unit``: 0 .. C-1, then the fields in table order)."""
        return {
            "unit": range(len(self)),
            "concept": self.concept,
            "category": self.category,
            "iou": self.iou,
            "detector": self.detector,
            "threshold": self.threshold,
        }


def label_units(
    iou: Tensor,
    thresholds: Tensor,
    concept_data: ConceptData,
    iou_threshold: float = DEFAULT_IOU_THRESHOLD,
) -> UnitLabels:
    """Each unit's best concept, that concept's category and IoU, and whether the unit is a
    detector (best IoU > ``iou_threshold``).

    Parameters
    ----------
    iou : Tensor
        (C, n_concepts) IoU of each unit with each concept (``unit_iou``).
    thresholds : Tensor
        (C,) each unit's activation threshold (``unit_thresholds``), kept beside its label.
    concept_data : ConceptData
        The probe set, for its concept names and categories.
    iou_threshold : float, default DEFAULT_IOU_THRESHOLD (0.04)
        A unit whose best IoU exceeds it is a detector.

    Returns
    -------
    UnitLabels
        The C units' labels.
    """
    best_iou, best = iou.max(dim=1)
    return UnitLabels(
        concept=[concept_data.concepts[i] for i in best.tolist()],
        category=[concept_data.categories[i] for i in best.tolist()],
        iou=best_iou.double().numpy(),
        detector=(best_iou > iou_threshold).numpy(),
        threshold=thresholds.double().numpy(),
    )


def dissect_activations(
    activations: Tensor,
    concept_data: ConceptData,
    basis: Tensor | None = None,
    *,
    quantile: float = DEFAULT_QUANTILE,
    iou_threshold: float = DEFAULT_IOU_THRESHOLD,
) -> UnitLabels:
    """Dissect precomputed activations (N, C, h, w) of the probe set's N images: each unit's
    threshold, its IoU with every concept, and its label (``label_units``).

    ``basis``, a (C, C) matrix, mixes the channels first. Activations must be (N, C, h, w) with
    N, C >= 1 and finite: NaN thresholds would make no unit fire, silently.

    Parameters
    ----------
    activations : Tensor
        (N, C, h, w) finite activations of the probe set's N images at one site.
    concept_data : ConceptData
        The probe set: its N images' label maps, concepts and categories.
    basis : Tensor or None, default None
        A finite (C, C) matrix mixing the channels first; None dissects the units as they are.
    quantile : float, default DEFAULT_QUANTILE (0.005)
        The top fraction of each unit's activations that fires (``unit_thresholds``).
    iou_threshold : float, default DEFAULT_IOU_THRESHOLD (0.04)
        A unit whose best IoU exceeds it is a detector.

    Returns
    -------
    UnitLabels
        The C units' labels and thresholds.
    """
    if activations.ndim != 4 or activations.shape[0] < 1 or activations.shape[1] < 1:
        raise ValueError(
            f"dissection needs (N, C, h, w) feature maps of at least one image and unit, "
            f"got shape {tuple(activations.shape)}"
        )
    if activations.is_floating_point() and not bool(torch.isfinite(activations).all()):
        raise ValueError(
            "the activations contain NaN or infinite values (a diverged model?): no unit can be dissected"
        )
    if basis is not None and not bool(torch.isfinite(basis).all()):
        raise ValueError("the basis contains NaN or infinite values")
    if len(activations) != len(concept_data):
        raise ValueError(f"{len(activations)} activation maps for {len(concept_data)} probe images")
    if basis is not None and tuple(basis.shape) != (activations.shape[1],) * 2:
        raise ValueError(
            f"basis must be ({activations.shape[1]}, {activations.shape[1]}) for "
            f"{activations.shape[1]} units, got {tuple(basis.shape)}"
        )
    thresholds = unit_thresholds(activations, quantile, basis)
    iou = unit_iou(activations, concept_data.labels, len(concept_data.concepts), thresholds, basis)
    return label_units(iou, thresholds, concept_data, iou_threshold)


def dissect(
    model: nn.Module,
    site: str,
    concept_data: ConceptData,
    basis: Tensor | None = None,
    *,
    mean: Tensor,
    std: Tensor,
    quantile: float = DEFAULT_QUANTILE,
    iou_threshold: float = DEFAULT_IOU_THRESHOLD,
    batch_size: int = 250,
) -> UnitLabels:
    """Dissect ``model`` at ``site`` (a module name, read by a forward hook) over ``concept_data``.

    ``mean``/``std``: the model's input normalisation (0..1 units). Returns the units' labels
    (see ``label_units``), in the rotated basis when ``basis`` is given.

    Parameters
    ----------
    model : nn.Module
        The network, run in eval mode without autograd (its mode restored afterwards).
    site : str
        The module whose output is dissected; it must give (N, C, h, w) feature maps.
    concept_data : ConceptData
        The probe set: uint8 images and their concept label maps.
    basis : Tensor or None, default None
        A (C, C) matrix mixing the site's channels first.
    mean, std : Tensor
        The model's per-channel input normalisation (0..1 units); keyword-only.
    quantile : float, default DEFAULT_QUANTILE (0.005)
        The top fraction of each unit's activations that fires (``unit_thresholds``).
    iou_threshold : float, default DEFAULT_IOU_THRESHOLD (0.04)
        A unit whose best IoU exceeds it is a detector.
    batch_size : int, default 250
        Probe images per forward pass.

    Returns
    -------
    UnitLabels
        The site's units, as ``dissect_activations`` gives them.
    """
    activations = models.site_activations(model, concept_data.images, [site], mean, std, batch_size)[site]
    if activations.ndim != 4:
        raise ValueError(
            f"site {site!r} gives {activations.ndim}-D outputs; dissection needs (N, C, h, w) feature maps"
        )
    return dissect_activations(
        activations, concept_data, basis, quantile=quantile, iou_threshold=iou_threshold
    )


def summarize_units(detector: np.ndarray, concept: Sequence[str]) -> dict:
    """Counts over one dissection: units, detectors, their fraction, distinct detected concepts.

    Parameters
    ----------
    detector : numpy.ndarray
        (C,) bool: which units are detectors (``UnitLabels.detector``).
    concept : sequence of str
        The C units' best concepts (``UnitLabels.concept``).

    Returns
    -------
    dict
        ``n_units``, ``n_interpretable`` (the detectors), ``fraction_interpretable`` (0 for no units)
        and ``n_unique_concepts`` (distinct concepts among the detectors).
    """
    detector = np.asarray(detector, dtype=bool)
    n_units, n_interpretable = len(detector), int(detector.sum())
    return {
        "n_units": n_units,
        "n_interpretable": n_interpretable,
        "fraction_interpretable": n_interpretable / max(1, n_units),
        "n_unique_concepts": len({c for c, fires in zip(concept, detector) if fires}),
    }


def default_sites(sites: list[models.Site]) -> list[str]:
    """Where the stage dissects a model by default: the residual output of each stage (the last
    residual-stream site of each top-level module holding blocks) plus the last site inside a
    block (the paper's Fig. 19); every site of a network without blocks (Myrtle).

    Parameters
    ----------
    sites : list[models.Site]
        The model's sites in forward order (``models.sites``).

    Returns
    -------
    list[str]
        Site names: the stage outputs in forward order, then the last site inside a block (if any).
    """
    in_blocks = [site for site in sites if "." in site.name]
    if not in_blocks:
        return [site.name for site in sites]
    stage_outputs = {site.name.split(".")[0]: site.name for site in in_blocks if not site.inside_residual}
    inside = [site.name for site in in_blocks if site.inside_residual]
    return list(stage_outputs.values()) + inside[-1:]


def probe_concepts(probe: dict, image_size: list[int], global_seed: int = 0) -> ConceptData:
    """The probe set of the dissection stage (the config's ``dissection.probe``) at the zoo's
    image size: ``shapes`` images generated for the probe (the same for every model, drawn from
    the global seed, with the data set's ``shapes`` options), or a Broden directory, resized.

    Parameters
    ----------
    probe : dict
        The config's ``dissection.probe`` block: ``source`` ("shapes" or "broden"), ``images`` (how
        many), and the ``shapes`` options or the ``broden`` directory.
    image_size : list[int]
        The zoo's image size [H, W]; shapes images are generated at ``image_size[0]``.
    global_seed : int, default 0
        The seed the shapes probe is drawn from.

    Returns
    -------
    ConceptData
        The probe images with their concept label maps.
    """
    from intertwine.data import Split
    from intertwine.data.concepts import shapes_concepts

    if probe["source"] == "shapes":
        from intertwine.data.shapes import generate_shapes

        options = dict(probe.get("shapes", {}), image_size=int(image_size[0]))
        arrays = generate_shapes(probe["images"], derive_seed(global_seed, "dissection", "probe"), **options)
        return shapes_concepts(
            Split(*(torch.from_numpy(arrays[k]) for k in ("images", "labels", "concepts")))
        )
    if probe["source"] == "broden":
        from intertwine.data.broden import load_broden

        if not probe.get("broden"):
            raise ValueError(
                "dissection.probe.source is 'broden' but dissection.probe.broden "
                "names no directory; set it to your Broden copy (e.g. broden1_224)"
            )
        return load_broden(probe["broden"], max_images=probe["images"]).resized(tuple(image_size))
    raise ValueError(f"dissection.probe.source {probe['source']!r} is not 'shapes' or 'broden'")


def draw_rotation(n: int, key: tuple, draw: int) -> Tensor:
    """The ``draw``-th Haar-random Q in SO(n) for ``key`` (float64).

    Parameters
    ----------
    n : int
        The dimension (the site's channel count).
    key : tuple
        The seed key (e.g. global seed, stage, variant, seed, site).
    draw : int
        Which draw: the generator is seeded with ``derive_seed(*key, draw)``.

    Returns
    -------
    Tensor
        (n, n) float64 rotation matrix (orthogonal, determinant 1).
    """
    generator = torch.Generator().manual_seed(derive_seed(*key, draw))
    return groups.random_rotation(n, generator, dtype=torch.float64)


def rotated_bases(n: int, key: tuple, draw: int, alphas) -> dict[float, Tensor | None]:
    """The float32 basis ``Q^alpha`` for each of ``alphas`` (None for alpha 0: the units as they
    are), Q the ``draw``-th Haar draw for ``key``: the bases ``dissect_rotations`` dissects in.

    Parameters
    ----------
    n : int
        The number of units (channels).
    key : tuple
        The seed key of ``draw_rotation``.
    draw : int
        Which Haar draw.
    alphas : sequence of float
        The powers of Q; 0 means no rotation.

    Returns
    -------
    dict[float, Tensor or None]
        alpha -> the (n, n) float32 ``Q^alpha``, or None for alpha 0.
    """
    rotated = [alpha for alpha in alphas if alpha != 0]
    powers = dict(zip(rotated, groups.rotation_powers(draw_rotation(n, key, draw), rotated)))
    return {alpha: None if alpha == 0 else powers[alpha].float() for alpha in alphas}


def dissect_rotations(
    activations: Tensor,
    concept_data: ConceptData,
    alphas,
    rotations: int,
    key: tuple,
    quantile: float = DEFAULT_QUANTILE,
    iou_threshold: float = DEFAULT_IOU_THRESHOLD,
) -> list[tuple[float, int, UnitLabels]]:
    """``dissect_activations`` in the basis ``Q^alpha`` for each alpha and each of ``rotations``
    Haar draws of Q (draw k seeded by ``key + (k,)``). Alpha 0 is dissected once and shared by
    the draws.

    Parameters
    ----------
    activations : Tensor
        (N, C, h, w) activations of the probe set at one site.
    concept_data : ConceptData
        The probe set.
    alphas : sequence of float
        The powers of Q to dissect in (0: the units as they are).
    rotations : int
        How many Haar draws of Q.
    key : tuple
        The seed key of the draws (``draw_rotation``).
    quantile : float, default DEFAULT_QUANTILE (0.005)
        The top fraction of each unit's activations that fires (``unit_thresholds``).
    iou_threshold : float, default DEFAULT_IOU_THRESHOLD (0.04)
        A unit whose best IoU exceeds it is a detector.

    Returns
    -------
    list[tuple[float, int, UnitLabels]]
        One ``(alpha, k, units)`` per basis dissected, draw by draw and within a draw in the order
        of ``alphas``: the units in the basis ``Q_k^alpha``.
    """
    dissected = []
    unrotated = None
    for draw in range(rotations):
        bases = rotated_bases(activations.shape[1], key, draw, alphas)
        for alpha in alphas:
            if alpha == 0:
                if unrotated is None:
                    unrotated = dissect_activations(
                        activations, concept_data, quantile=quantile, iou_threshold=iou_threshold
                    )
                units = unrotated
            else:
                units = dissect_activations(
                    activations, concept_data, bases[alpha], quantile=quantile, iou_threshold=iou_threshold
                )
            dissected.append((float(alpha), draw, units))
    return dissected


def top_examples(
    activations: Tensor,
    units: UnitLabels,
    basis: Tensor | None,
    size: tuple[int, int],
    n_units: int = 4,
    n_images: int = 4,
) -> list[dict]:
    """The ``n_units`` units with the highest IoU (see ``dissect_activations``), each with the
    ``n_images`` probe images where it peaks and its thresholded, upsampled map over each.

    Parameters
    ----------
    activations : Tensor
        (N, C, h, w) activations of the probe images at the site.
    units : UnitLabels
        The site's C units dissected in ``basis`` (``dissect_activations``).
    basis : Tensor or None
        The (C, C) basis they were dissected in (None: the units as they are).
    size : tuple[int, int]
        The (H, W) the maps are upsampled to (the label maps' size).
    n_units : int, default 4
        How many units.
    n_images : int, default 4
        How many images per unit (all of them when the probe set has fewer).

    Returns
    -------
    list[dict]
        One dict per unit, highest IoU first (ties: the lower unit first): ``unit``, ``concept``,
        ``category``, ``iou`` and ``examples``, a list of (image index, bool (H, W) numpy mask),
        highest peak first.
    """
    panels = []
    for unit in np.argsort(-units.iou, kind="stable")[:n_units].tolist():
        weights = torch.eye(activations.shape[1])[unit] if basis is None else basis[unit]
        maps = torch.einsum("j,njhw->nhw", weights.to(torch.float32), activations.float())
        best = maps.amax(dim=(1, 2)).topk(min(n_images, len(maps))).indices
        upsampled = F.interpolate(maps[best].unsqueeze(1), size=size, mode="bilinear", align_corners=False)
        masks = (upsampled.squeeze(1) > units.threshold[unit]).numpy()
        panels.append(
            {
                "unit": unit,
                "concept": units.concept[unit],
                "category": units.category[unit],
                "iou": float(units.iou[unit]),
                "examples": list(zip(best.tolist(), masks)),
            }
        )
    return panels
