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
are importable from here too.
"""

from __future__ import annotations

from typing import Callable

import pandas as pd
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
    "default_sites",
    "dissect",
    "dissect_activations",
    "dissect_rotations",
    "draw_rotation",
    "dissect_sites",
    "label_units",
    "probe_concepts",
    "rotated_bases",
    "summarize",
    "summarize_units",
    "top_examples",
    "unit_iou",
    "unit_thresholds",
]

DEFAULT_IOU_THRESHOLD = 0.04


def label_units(
    iou: Tensor, concept_data: ConceptData, iou_threshold: float = DEFAULT_IOU_THRESHOLD
) -> pd.DataFrame:
    """One row per unit: its best concept, that concept's category and IoU, and whether the unit
    is a detector (best IoU > ``iou_threshold``).

    Parameters
    ----------
    iou : Tensor
        (C, n_concepts) IoU of each unit with each concept (``unit_iou``).
    concept_data : ConceptData
        The probe set, for its concept names and categories.
    iou_threshold : float, default DEFAULT_IOU_THRESHOLD (0.04)
        A unit whose best IoU exceeds it is a detector.

    Returns
    -------
    pandas.DataFrame
        C rows: ``unit``, ``concept``, ``category``, ``iou`` (float64) and ``detector`` (bool).
    """
    best_iou, best = iou.max(dim=1)
    return pd.DataFrame(
        {
            "unit": range(len(best)),
            "concept": [concept_data.concepts[i] for i in best.tolist()],
            "category": [concept_data.categories[i] for i in best.tolist()],
            "iou": best_iou.double().numpy(),
            "detector": (best_iou > iou_threshold).numpy(),
        }
    )


def dissect_activations(
    activations: Tensor,
    concept_data: ConceptData,
    basis: Tensor | None = None,
    *,
    quantile: float = DEFAULT_QUANTILE,
    iou_threshold: float = DEFAULT_IOU_THRESHOLD,
) -> pd.DataFrame:
    """Dissect precomputed activations (N, C, h, w) of the probe set's N images: ``label_units``
    plus each unit's threshold. ``basis``: a (C, C) matrix mixing the channels first.
    Activations must be (N, C, h, w) with N, C >= 1 and finite: NaN thresholds would make no unit
    fire, silently.

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
    pandas.DataFrame
        One row per unit: ``label_units``' columns plus its ``threshold`` (float64).
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
    units = label_units(iou, concept_data, iou_threshold)
    units["threshold"] = thresholds.double().numpy()
    return units


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
) -> pd.DataFrame:
    """Dissect ``model`` at ``site`` (a module name, read by a forward hook) over ``concept_data``.

    ``mean``/``std``: the model's input normalisation (0..1 units). Returns one row per unit
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
    pandas.DataFrame
        One row per unit, as ``dissect_activations`` gives it.
    """
    activations = models.site_activations(model, concept_data.images, [site], mean, std, batch_size)[site]
    if activations.ndim != 4:
        raise ValueError(
            f"site {site!r} gives {activations.ndim}-D outputs; dissection needs (N, C, h, w) feature maps"
        )
    return dissect_activations(
        activations, concept_data, basis, quantile=quantile, iou_threshold=iou_threshold
    )


def summarize_units(units: pd.DataFrame) -> dict:
    """Counts over one dissection: units, detectors, their fraction, distinct detected concepts.

    Parameters
    ----------
    units : pandas.DataFrame
        One dissection's units (``label_units``' rows: ``detector`` and ``concept`` are read).

    Returns
    -------
    dict
        ``n_units``, ``n_interpretable`` (the detectors), ``fraction_interpretable`` (0 for no units)
        and ``n_unique_concepts`` (distinct concepts among the detectors).
    """
    detectors = units[units["detector"]]
    return {
        "n_units": len(units),
        "n_interpretable": len(detectors),
        "fraction_interpretable": len(detectors) / max(1, len(units)),
        "n_unique_concepts": detectors["concept"].nunique(),
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


def rotation_key(global_seed: int, variant: str, seed: int, site: str) -> tuple:
    return (global_seed, "dissection", variant, seed, site)


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
) -> pd.DataFrame:
    """``dissect_activations`` in the basis ``Q^alpha`` for each alpha and each of ``rotations``
    Haar draws of Q (draw k seeded by ``key + (k,)``): one row per (alpha, draw, unit), with
    columns ``alpha`` and ``rotation_seed`` (k). Alpha 0 is dissected once and shared by the draws.

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
    pandas.DataFrame
        ``dissect_activations``' columns plus ``alpha`` (float) and ``rotation_seed`` (the draw k).
    """
    tables = []
    unrotated = None
    for draw in range(rotations):
        bases = rotated_bases(activations.shape[1], key, draw, alphas)
        for alpha in alphas:
            if alpha == 0:
                if unrotated is None:
                    unrotated = dissect_activations(
                        activations, concept_data, quantile=quantile, iou_threshold=iou_threshold
                    )
                units = unrotated.copy()
            else:
                units = dissect_activations(
                    activations, concept_data, bases[alpha], quantile=quantile, iou_threshold=iou_threshold
                )
            tables.append(units.assign(alpha=float(alpha), rotation_seed=draw))
    return pd.concat(tables, ignore_index=True)


def summarize(units: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """``summarize_units`` for each group of ``keys`` (e.g. variant, seed, site, alpha, draw).

    Parameters
    ----------
    units : pandas.DataFrame
        Dissected units with the ``keys`` columns (e.g. ``dissect_rotations``' rows).
    keys : list[str]
        The columns to group by.

    Returns
    -------
    pandas.DataFrame
        One row per group, in order of first appearance: the ``keys`` columns, then
        ``summarize_units``' counts.
    """
    rows = [
        {**dict(zip(keys, values)), **summarize_units(group)}
        for values, group in units.groupby(keys, sort=False)
    ]
    return pd.DataFrame(rows)


def dissect_sites(
    read_site: Callable[[str], Tensor],
    sites: list[str],
    inside: dict[str, bool],
    probe: ConceptData,
    block: dict,
    variant: str,
    seed: int,
    global_seed: int,
    log: Callable[[str], None] = print,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``dissect_rotations`` at each site (activations from ``read_site``) as the config's
    ``dissection`` block says: (summary, units), one row per (site, alpha, draw) and one per unit
    of each (the stage's tables but for their provenance).

    Parameters
    ----------
    read_site : Callable[[str], Tensor]
        Site name -> its (N, C, h, w) activations on the probe images.
    sites : list[str]
        The sites to dissect, in order.
    inside : dict[str, bool]
        Site name -> whether it lies inside a residual block (the summary's ``inside_residual``).
    probe : ConceptData
        The probe set.
    block : dict
        The config's ``dissection`` block: ``alphas``, ``rotations``, ``quantile``,
        ``iou_threshold`` and ``probe``.
    variant : str
        The model's variant (a column, and part of the rotations' seed key).
    seed : int
        The model's seed (likewise).
    global_seed : int
        The global seed (part of the rotations' seed key).
    log : Callable[[str], None], default print
        Where one line per site goes.

    Returns
    -------
    summary : pandas.DataFrame
        One row per (site, alpha, draw): ``variant``, ``seed``, ``site``, ``inside_residual``,
        ``alpha``, ``rotation_seed``, ``summarize_units``' counts, ``n_images``, ``probe`` (the
        probe's source), ``quantile`` and ``iou_threshold``.
    units : pandas.DataFrame
        One row per unit of each: ``variant``, ``seed``, ``site``, ``alpha``, ``rotation_seed``,
        ``unit``, ``concept``, ``category``, ``iou``, ``threshold`` and ``detector``.
    """
    import time

    tables = []
    for site in sites:
        started = time.perf_counter()
        activations = read_site(site)
        units = dissect_rotations(
            activations,
            probe,
            block["alphas"],
            block["rotations"],
            rotation_key(global_seed, variant, seed, site),
            block["quantile"],
            block["iou_threshold"],
        )
        tables.append(units.assign(site=site))
        fractions = units.groupby("alpha")["detector"].mean()
        log(
            f"{variant} seed {seed} {site}: {activations.shape[1]} units, interpretable fraction "
            f"{fractions.iloc[0]:.3f} at alpha {fractions.index[0]:g}, {fractions.iloc[-1]:.3f} at "
            f"alpha {fractions.index[-1]:g} ({time.perf_counter() - started:.1f}s)"
        )
    units = pd.concat(tables, ignore_index=True).assign(variant=variant, seed=seed)
    keys = ["variant", "seed", "site", "alpha", "rotation_seed"]
    summary = summarize(units, keys)
    summary.insert(3, "inside_residual", summary["site"].map(inside))
    summary = summary.assign(
        n_images=len(probe),
        probe=block["probe"]["source"],
        quantile=block["quantile"],
        iou_threshold=block["iou_threshold"],
    )
    return summary, units[keys + ["unit", "concept", "category", "iou", "threshold", "detector"]]


def top_examples(
    activations: Tensor,
    units: pd.DataFrame,
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
    units : pandas.DataFrame
        The site's units dissected in ``basis`` (``dissect_activations``: ``unit``, ``concept``,
        ``category``, ``iou`` and ``threshold`` are read).
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
        One dict per unit, highest IoU first: ``unit``, ``concept``, ``category``, ``iou`` and
        ``examples``, a list of (image index, bool (H, W) numpy mask), highest peak first.
    """
    panels = []
    for row in units.sort_values("iou", ascending=False).head(n_units).itertuples():
        weights = torch.eye(activations.shape[1])[row.unit] if basis is None else basis[row.unit]
        maps = torch.einsum("j,njhw->nhw", weights.to(torch.float32), activations.float())
        best = maps.amax(dim=(1, 2)).topk(min(n_images, len(maps))).indices
        upsampled = F.interpolate(maps[best].unsqueeze(1), size=size, mode="bilinear", align_corners=False)
        masks = (upsampled.squeeze(1) > row.threshold).numpy()
        panels.append(
            {
                "unit": row.unit,
                "concept": row.concept,
                "category": row.category,
                "iou": row.iou,
                "examples": list(zip(best.tolist(), masks)),
            }
        )
    return panels
