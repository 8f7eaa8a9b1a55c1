"""What every stage's plan shares: config blocks as JSON (what a rule's params carry), a model
spec's sites, pairs of zoo members drawn reproducibly, and the error a plan raises."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json

ZOO_TABLES = ["results/tables/zoo.parquet", "results/tables/zoo_epochs.parquet"]


# The architectures that have a gated form (spec key `gated`).
GATED_ARCHS = ("myrtle", "c4gap", "c1gap", "vgg16_avg", "resnet110")


class StagePlan:
    """A stage's part of the plan (``<Stage>Plan`` in its folder's ``plan.py``): it holds the whole
    plan (``self.plan``) and reads through it what it does not define itself (``self.spec``,
    ``self.zoo_seeds``, its config block ``self.<stage>``), so a method here reads like one of the
    plan's. The plan (:class:`intertwine.workflow.plan.Plan`) composes the parts and answers for
    each (``Plan(config).stitch_jobs``).

    What the plan's core asks of every part, each named after the stage (``connectivity_...``) and
    each optional but ``<stage>_outputs``: ``<stage>_outputs`` (what the stage writes, for ``rule
    all``), ``<stage>_errors(check)`` (the config's cross-checks the schema cannot express),
    ``<stage>_image_counts(train_split, test_size)`` (the image counts the data set's splits must
    hold), ``<stage>_claims_tables`` (the tables its claims read, by name), ``<stage>_claims_settings``
    (the run's settings its claims read, ``SETTINGS`` of its ``claims`` module) and
    ``<stage>_claims_scale`` (its budget beside the paper's, in words)."""

    def __init__(self, plan) -> None:
        self.plan = plan

    def __getattr__(self, name: str):
        # Called only for a name this part lacks (or whose property raised AttributeError, which
        # must not be asked of the plan: the plan would ask this part again).
        if name.startswith("__") or "plan" not in self.__dict__:
            raise AttributeError(name)
        if hasattr(type(self), name):
            raise AttributeError(f"{type(self).__name__}.{name} raised an AttributeError")
        return getattr(self.plan, name)


@dataclasses.dataclass(frozen=True)
class ImageCount:
    """A count of images a stage takes from a split of the data set (``<stage>_image_counts``): the
    config key that sets it, the count asked for (None: the whole split), the split ("test",
    "training": the training images left after ``data.val_size``, or "stored training": the
    training split with its validation images, as the DEQ-NTK's kernels take it), and what else
    the key may say to take fewer (``hint``)."""

    key: str
    asked: int | None
    split: str
    hint: str = ""


class ConfigError(ValueError):
    """A config the schema accepts but the plan cannot run; the message names the key."""


class ConfigCheck:
    """The tests the stages' cross-checks of a config share, collecting their messages (each
    naming the config key and the fix) in ``errors``."""

    def __init__(self, plan) -> None:
        self.plan = plan
        self.errors: list[str] = []

    def subset(self, key: str, chosen, available, among: str) -> bool:
        """Whether every name of ``chosen`` is ``available``; else a message naming the unknown."""
        unknown = sorted(set(chosen) - set(available))
        if unknown:
            self.errors.append(f"config key {key}: {unknown} must be among {among}: {list(available)}")
        return not unknown

    def pairable(self, key: str, variants, count_key: str, count, symmetric: bool) -> None:
        """Whether each variant's zoo members form ``count(variant)`` distinct pairs."""
        share = self.plan.config["pairs_share_members"]
        for variant in variants:
            if variant not in self.plan.variants:
                continue
            members = len(self.plan.zoo_seeds(variant))
            if members < 2:
                self.errors.append(
                    f"config key {key}: {key.split('.')[0]} pairs need at least 2 zoo "
                    f"members, but the zoo trains {members} of {variant!r}; raise "
                    "zoo.seeds (or zoo.seeds_per_variant) or drop the variant"
                )
            elif count(variant) > distinct_pairs(members, symmetric, share):
                available = distinct_pairs(members, symmetric, share)
                self.errors.append(
                    f"config key {count_key}: {count(variant)} pairs of {variant!r} asked "
                    f"for, but its {members} zoo members form only {available} "
                    + (
                        f"distinct pairs{' (the measures are symmetric)' if symmetric else ''}; ask "
                        "for at most that many, or raise zoo.seeds (or zoo.seeds_per_variant)"
                        if share
                        else "pairs with no member in common (independent units); ask for at most "
                        f"that many, raise zoo.seeds (or zoo.seeds_per_variant) to {2 * count(variant)}, "
                        "or set pairs_share_members: true (the claims then treat each member as a cluster)"
                    )
                )

    # What a stage may need of a model beyond its sites, and why: a custom architecture (the user's
    # factory, intertwine.models.factory) has its sites only, unless its class declares more.
    NEEDS = {
        "pieces": (
            "cut points: its class must define pieces() (and site_layout()), as the zoo's architectures "
            "do, since the stage runs a model up to a site and on from there"
        ),
        "weights": (
            "the conv, norm and activation layer names of each site (the zoo architectures' wiring), "
            "since the stage acts on its weights (intertwine.symmetry's weight action)"
        ),
    }

    def capable(self, key: str, variants, need: str) -> bool:
        """Whether each custom variant among ``variants`` has what the stage of ``key`` needs
        (``NEEDS``); else a message per variant naming what and why, and False."""
        from intertwine.workflow.planning import spec_model

        lacking = []
        for variant in variants:
            if variant not in self.plan.variants or self.plan.spec(variant)["arch"] != "custom":
                continue
            model = spec_model(as_json(self.plan.config["zoo"]["variants"][variant]))
            if need == "pieces" and callable(getattr(model, "pieces", None)):
                continue
            lacking.append(variant)
            self.errors.append(
                f"config key {key}: {variant!r} is your own architecture "
                f"({self.plan.spec(variant)['factory']}), which lacks {self.NEEDS[need]}; drop it from "
                f"{key} (docs/own-models.md says which stages a factory model runs through)"
            )
        return not lacking

    def members(self, key: str, variants, count) -> None:
        """Whether the zoo trains the ``count`` members of each variant that ``key`` asks for."""
        for variant in variants:
            if variant in self.plan.variants:
                try:
                    self.plan.members(key, variant, count)
                except ConfigError as err:
                    self.errors.append(str(err))

    def overrides(self, key: str, override: dict, block: str) -> None:
        """Per-variant or per-method overrides: known keys, each valid as in ``block``."""
        import jsonschema

        from intertwine.workflow.settings import schema_block

        properties = schema_block(block)["properties"]
        if self.subset(key, override, properties, f"the settings of {block}"):
            for name, value in override.items():
                try:
                    jsonschema.validate(value, properties[name])
                except jsonschema.ValidationError as err:
                    self.errors.append(f"config key {key}.{name}: {err.message}")


def as_json(block) -> str:
    """A config block as one JSON string: what a rule's params carry and its shell command passes."""
    return json.dumps(block, sort_keys=True)


# The most parameters a zoo model may have (ours): 1e9 float32 weights are 4 GB, 16 GB with the
# gradients and Adam's two moments, before any activation; a width_multiplier of 1000 asked for
# 7e10 in one convolution.
MAX_PARAMETERS = 10**9


@functools.cache
def spec_model(spec_json: str):
    """A model of the spec built on the meta device: its layers and shapes without weights, so a
    config check costs no memory however wide the model (its sites, its parameter count)."""
    import torch

    from intertwine.models import build  # torch: only when a model is asked for

    with torch.device("meta"), _meta_normal_draws_skipped(torch):
        return build(json.loads(spec_json))


@contextlib.contextmanager
def _meta_normal_draws_skipped(torch):
    """``Tensor.normal_`` on a meta tensor returns it untouched: a meta tensor holds no values to
    draw, and torch's meta path for ``normal_`` (``kaiming_normal_``, ``trunc_normal_`` in the
    ResNet, CCT and ConvNeXt initialisations) imports its compiler, torch._dynamo: 1.2
    CPU-seconds that every Snakemake parse of the workflow paid for its config check. Shapes
    and parameter counts are the same."""
    drawn = torch.Tensor.normal_

    def normal_(tensor, *args, **kwargs):
        return tensor if tensor.is_meta else drawn(tensor, *args, **kwargs)

    torch.Tensor.normal_ = normal_
    try:
        yield
    finally:
        torch.Tensor.normal_ = drawn


def spec_parameters(spec_json: str) -> int:
    """The parameter count of a model spec, from shapes."""
    from intertwine.models import count_parameters

    return count_parameters(spec_model(spec_json))


@functools.cache
def spec_sites(spec_json: str) -> tuple:
    """The sites of a model spec (the same for every seed)."""
    from intertwine.models import sites

    return tuple(sites(spec_model(spec_json)))


@functools.cache
def spec_cut_sites(spec_json: str) -> tuple:
    from intertwine.models import cut_sites

    return tuple(cut_sites(spec_model(spec_json)))


def distinct_pairs(n_members: int, symmetric: bool, share_members: bool = True) -> int:
    """How many pairs ``n_members`` members form: with ``share_members`` every distinct pair,
    n(n-1), or n(n-1)/2 for a symmetric measure; without, n // 2 pairs with no member in common."""
    if not share_members:
        return n_members // 2
    return n_members * (n_members - 1) // (2 if symmetric else 1)


def draw_pairs(
    n_members: int, n_pairs: int, *key, symmetric: bool = False, share_members: bool = False
) -> list[tuple[int, int]]:
    """``n_pairs`` ordered pairs of distinct zoo members of ``range(n_members)``, drawn by a
    generator seeded from ``key`` (e.g. the global seed, the stage and the variant), so every run
    draws the same pairs.

    By default no member is in two pairs (a random matching: a shuffle of the members, paired off
    in order), so the pairs are independent units of evidence; 2k members give k such pairs.
    With ``share_members`` the pairs are drawn uniformly with replacement as in the paper's code,
    the two members distinct and no pair (or, when ``symmetric``, its reverse) twice; pairs then
    share members, and an analysis must treat each member as a cluster."""
    import torch

    from intertwine.utils import derive_seed

    if n_members < 2:
        raise ValueError(f"pairs need at least 2 zoo members per variant, got {n_members}")
    available = distinct_pairs(n_members, symmetric, share_members)
    if n_pairs > available:
        kind = "distinct " + ("unordered " if symmetric else "") if share_members else "member-disjoint "
        raise ValueError(
            f"{n_pairs} pairs asked for, but {n_members} members form only {available} {kind}pairs"
        )
    generator = torch.Generator().manual_seed(derive_seed(*key))
    if not share_members:
        order = torch.randperm(n_members, generator=generator).tolist()
        return [(order[2 * i], order[2 * i + 1]) for i in range(n_pairs)]
    pairs: list[tuple[int, int]] = []
    while len(pairs) < n_pairs:
        a, b = torch.randint(n_members, (2,), generator=generator).tolist()
        if a != b and (a, b) not in pairs and not (symmetric and (b, a) in pairs):
            pairs.append((a, b))
    return pairs
