"""The ``pullback`` block's settings as a dataclass: what the stage's jobs read, each field one config
key with the schema's default (:mod:`intertwine.workflow.settings`)."""

from __future__ import annotations

import dataclasses

from intertwine.workflow.settings import Settings, setting


@dataclasses.dataclass(frozen=True)
class PullbackConfig(Settings):
    """The excitation-pullback stage's jobs (config ``pullback``). Job kinds: ``member`` (symmetry
    and faithfulness of one zoo member), ``pair`` (agreement of two members), ``images`` (a
    variant's image grids), ``external`` (the paper's grids of a torchvision ImageNet model). Which jobs run (``variants``, ``seeds``, ``pairs``) and at which sites
    (``sites``, ``unit_sites``) is the plan's."""

    images: int = setting("pullback.images", only_for=("member", "pair"))
    probe_images: int = setting("pullback.probe_images", only_for=("member", "pair", "images"))
    temperature: float = setting("pullback.temperature")
    sweep: list[float] = setting("pullback.sweep", only_for=("member", "pair"))
    functional: str = setting("pullback.functional")
    pool_padding: str = setting("pullback.pool_padding")
    spreads: list[float] = setting("pullback.spreads", only_for=("member",))
    deletion_steps: int = setting("pullback.deletion_steps", only_for=("member",))
    pgd: dict = setting("pullback.pgd", only_for=("member", "images", "external"))
    units: int = setting("pullback.units", only_for=("pair",))
    grid_images: int = setting("pullback.grid_images", only_for=("images",))
