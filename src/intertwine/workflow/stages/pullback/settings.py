"""The ``pullback`` block's settings as a dataclass: what the stage's jobs read, each field one config
key with the schema's default (:mod:`intertwine.settings`)."""

from __future__ import annotations

import dataclasses

from intertwine.settings import _Settings, _setting


@dataclasses.dataclass(frozen=True)
class PullbackConfig(_Settings):
    """The excitation-pullback stage's jobs (config ``pullback``). Job kinds: ``member`` (symmetry
    and faithfulness of one zoo member), ``pair`` (agreement of two members), ``images`` (a
    variant's image grids), ``external`` (the paper's grids of a torchvision ImageNet model). Which jobs run (``variants``, ``seeds``, ``pairs``) and at which sites
    (``sites``, ``unit_sites``) is the plan's."""

    images: int = _setting("pullback.images", only_for=("member", "pair"))
    probe_images: int = _setting("pullback.probe_images", only_for=("member", "pair", "images"))
    temperature: float = _setting("pullback.temperature")
    sweep: list[float] = _setting("pullback.sweep", only_for=("member", "pair"))
    functional: str = _setting("pullback.functional")
    pool_padding: str = _setting("pullback.pool_padding")
    spreads: list[float] = _setting("pullback.spreads", only_for=("member",))
    deletion_steps: int = _setting("pullback.deletion_steps", only_for=("member",))
    pgd: dict = _setting("pullback.pgd", only_for=("member", "images", "external"))
    units: int = _setting("pullback.units", only_for=("pair",))
    grid_images: int = _setting("pullback.grid_images", only_for=("images",))
