"""The similarity stage's zoo-as-a-whole job: every measure's distance matrix over the first K
members of a variant at each site, and each member's distance to the zoo's Procrustes mean.

Its own module (not ``job``), so that its code identity is its own: editing it reruns the zoo
views, not the pair jobs."""

from __future__ import annotations

import pandas as pd

from intertwine import measures, models
from intertwine.workflow.job import Job
from intertwine.workflow.stages.similarity.settings import SimilarityZooConfig


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
