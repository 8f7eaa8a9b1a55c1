"""The similarity stage's jobs: the measures between one pair of zoo members, and the zoo as a whole
(every measure's distance matrix over a variant's members, their Procrustes mean)."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd

from intertwine import compare, measures, models
from intertwine.workflow.job import Job
from intertwine.workflow.stages.similarity.settings import SimilarityConfig, SimilarityZooConfig


def similarity_pair(
    job: Job, a: str, b: str, pair: int, block: dict, procrustes: bool, cka: bool
) -> pd.DataFrame:
    """One row per (site_a, site_b, measure) of zoo members a and b on the first
    ``block["samples"]`` test images: Procrustes measures at matching sites (``procrustes``),
    the ``cka_measures`` (CKAs, SVCCA, PWCCA, shape distances) for every pair of sites (``cka``,
    by ``measures.pairwise``). Keys ``block`` lacks take the schema's
    defaults."""
    settings = SimilarityConfig.from_block(block, "similarity")
    model_a, meta_a = job.model(a)
    model_b, meta_b = job.model(b)
    if meta_a["variant"] != meta_b["variant"]:
        raise ValueError(f"{a} and {b} belong to different variants")
    images = job.split("test", settings.samples).images
    sites = [s.name for s in models.sites(model_a)]
    reads = (model_a, model_b, images, sites, *job.stats(), settings.batch_size)
    base = {"variant": meta_a["variant"], "pair": pair, "seed_a": meta_a["seed"], "seed_b": meta_b["seed"]}
    try:
        rows = _rows(job, base, settings, reads, procrustes, cka, len(sites))
    except measures.ConstantRepresentationError as err:
        member = {"a": a, "b": b}.get(err.which, f"{a} or {b}")
        raise ValueError(
            f"{base['variant']} pair {pair}: {err}. Check {member} (if it is dead at "
            f"{err.site}, delete it and rerun its train_member job to retrain it), or compare "
            "on more test images (similarity.samples)"
        ) from None
    # Procrustes and npk_cka rows have no interval, nor any row without similarity.intervals
    table = pd.DataFrame(rows)
    table = table.assign(**{column: table.get(column, np.nan) for column in ("low", "high")})
    table = table.assign(note=table.get("note", pd.Series(None, index=table.index, dtype=object)))
    # npk_cka rows carry their own (smaller) image count
    samples = table["n_samples"] if "n_samples" in table else pd.Series(len(images), index=table.index)
    return table.assign(
        n_samples=samples.fillna(len(images)).astype("int64"),
        **job.provenance({"similarity": block}, device=False),
    )


def _rows(
    job: Job, base: dict, settings: SimilarityConfig, reads: tuple, procrustes: bool, cka: bool, n_sites: int
) -> list[dict]:
    pair = base["pair"]
    rows = []
    if procrustes:
        for site, acc in compare.site_procrustes(*reads).items():
            values = {"grelu_procrustes": acc.grelu, "orthogonal_procrustes": acc.orthogonal}
            rows += [
                {**base, "site_a": site, "site_b": site, "measure": measure, "value": values[measure]()}
                for measure in settings.procrustes_measures
            ]
        job.log(f"{base['variant']} pair {pair}: Procrustes at {n_sites} sites")
    for measure in settings.cka_measures if cka else []:
        if measure == "npk_cka":
            rows += _npk_rows(job, base, settings, reads)
            continue
        if settings.intervals:
            cells = compare.site_cka_intervals(measure, *reads, groups=settings.jackknife_groups, seed=pair)
        else:
            cells = {sites: (value, None, None) for sites, value in compare.site_cka(measure, *reads).items()}
        rows += [
            {**base, "site_a": a, "site_b": b, "measure": measure, "value": value, "low": low, "high": high}
            for (a, b), (value, low, high) in cells.items()
        ]
        intervals = f", {settings.jackknife_groups}-group jackknife intervals" if settings.intervals else ""
        job.log(f"{base['variant']} pair {pair}: {measure} for {n_sites}x{n_sites} site pairs{intervals}")
    return rows


def _npk_rows(job: Job, base: dict, settings: SimilarityConfig, reads: tuple) -> list[dict]:
    """CKA of the two members' neural path kernels on the first ``npk_images`` images (site
    "model"), for models that have one (``kernels.has_npk``); for others one row without a value
    whose ``note`` says why."""
    from intertwine import kernels
    from intertwine.data.augment import normalize

    model_a, model_b, images, _, mean, std, _ = reads
    without = next((model for model in (model_a, model_b) if not kernels.has_npk(model)), None)
    if without is not None:
        # A row that says so: a measure asked of a variant and missing from the table would read as
        # a job that did not run.
        note = (
            f"does not apply: a {type(without).__name__} has no neural path kernel (only "
            "C4GAP/C1GAP/VGG and gated networks have one, intertwine.kernels.has_npk)"
        )
        job.log(f"{base['variant']} pair {base['pair']}: npk_cka {note}")
        return [
            {
                **base,
                "site_a": "model",
                "site_b": "model",
                "measure": "npk_cka",
                "value": np.nan,
                "n_samples": 0,
                "note": note,
            }
        ]
    x = normalize(images[: settings.npk_images], mean, std).double()
    npks = [kernels.member_npk(copy.deepcopy(model).double(), x) for model in (model_a, model_b)]
    value = measures.kernel_cka(*npks)
    job.log(f"{base['variant']} pair {base['pair']}: npk_cka {value:.4f} on {len(x)} images")
    return [
        {
            **base,
            "site_a": "model",
            "site_b": "model",
            "measure": "npk_cka",
            "value": value,
            "n_samples": len(x),
        }
    ]


def similarity_zoo(
    job: Job, variant: str, checkpoints: list[str], sites: list[str], block: dict
) -> pd.DataFrame:
    """One row per (site, measure, seed_a, seed_b) of the K members ``checkpoints`` of ``variant``
    on the first ``block["samples"]`` test images: the measure's distance
    (``measures.pairwise_distances``, the whole K x K matrix, diagonal included), and for the
    measures with a Procrustes mean (``measures.MEAN_MEASURES``) one row per member with
    ``seed_b`` null, its distance to the mean (``measures.procrustes_mean``). The members are
    loaded once; one site's activations of all K are held at a time."""
    settings = SimilarityZooConfig.from_block(block, "similarity.zoo")
    members = [job.model(path) for path in checkpoints]
    for path, (_, meta) in zip(checkpoints, members):
        if meta["variant"] != variant:
            raise ValueError(f"{path} is a member of {meta['variant']!r}, not of {variant!r}")
    seeds = [meta["seed"] for _, meta in members]
    images = job.split("test", settings.samples).images
    mean, std = job.stats()
    rows = []
    for site in sites:
        reps = [
            models.site_activations(model, images, [site], mean, std, settings.batch_size)[site]
            for model, _ in members
        ]
        for measure in settings.measures:
            try:
                rows += _site_rows(job, variant, site, measure, reps, seeds, settings)
            except measures.ConstantRepresentationError as err:
                member = checkpoints[err.index] if err.index is not None else "a member"
                raise ValueError(
                    f"{variant} at {site}: {err}. Check {member} (if it is dead at {site}, delete it "
                    "and rerun its train_member job to retrain it), or view the zoo on more test "
                    "images (similarity.zoo.samples)"
                ) from None
        del reps
    return pd.DataFrame(rows).assign(
        n_samples=len(images), **job.provenance({"similarity.zoo": block}, device=False)
    )


def _site_rows(
    job: Job,
    variant: str,
    site: str,
    measure: str,
    reps: list,
    seeds: list[int],
    settings: SimilarityZooConfig,
) -> list[dict]:
    base = {"variant": variant, "site": site, "measure": measure}
    distances = measures.pairwise_distances(reps, measure)
    rows = [
        {**base, "seed_a": a, "seed_b": b, "distance": float(distances[i, j])}
        for i, a in enumerate(seeds)
        for j, b in enumerate(seeds)
    ]
    if measure not in measures.MEAN_MEASURES:
        job.log(f"{variant} {site} {measure}: {len(seeds)} x {len(seeds)} distances")
        return rows
    found = measures.procrustes_mean(reps, measure, max_iterations=settings.mean_iterations)
    best = float((distances**2).sum(1).min())
    job.log(
        f"{variant} {site} {measure}: {len(seeds)} x {len(seeds)} distances; Procrustes mean after "
        f"{found.iterations} rounds ({'converged' if found.converged else 'not converged'}), summed "
        f"squared distances {found.objective:.4g} (the best member's {best:.4g})"
    )
    return rows + [
        {**base, "seed_a": a, "seed_b": None, "distance": float(d)} for a, d in zip(seeds, found.distances)
    ]
