"""What the excitation-pullback stage's jobs share: the block's pullback options around a job, the
PGD settings scaled to the images, a mode's ascent direction."""

from __future__ import annotations

import functools
import inspect

import numpy as np

from intertwine.pullback import measurements, options
from intertwine.pullback.pgd import scaled_to_image
from intertwine.workflow.stages.pullback.settings import PullbackConfig


def with_pullback_options(job_function):
    """Runs a job with ``pullback.functional`` and ``pullback.pool_padding`` of its ``block`` as
    every pullback's setting (the study's functions take them from :func:`intertwine.pullback.options`)."""

    @functools.wraps(job_function)
    def run(*args, **kwargs):
        block = inspect.signature(job_function).bind(*args, **kwargs).arguments["block"]
        settings = PullbackConfig.from_block(block, "pullback")
        with options(functional=settings.functional, pool_padding=settings.pool_padding):
            return job_function(*args, **kwargs)

    return run


def pgd_settings(settings: PullbackConfig, image_shape) -> dict:
    """The PGD radius and step for these images: the paper's, scaled to their size."""
    dims = int(np.prod(image_shape))
    pgd = settings.pgd
    return {
        "steps": pgd["steps"],
        "epsilon": scaled_to_image(pgd["epsilon"], dims),
        "step_size": scaled_to_image(pgd["step_size"], dims),
    }


def ascent_direction(model, mode: str, temperature: float, temperatures):
    """The PGD ascent direction of a mode: the pullback (or gradient) of the target's logit."""
    return lambda z, targets: measurements.attributions(
        model, z, targets, mode, temperature, temperatures=temperatures
    ).to(z.dtype)
