"""Every setting's one definition, and the stitching method names.

The schema is the one source of every config key: its type, its default and its description
(`config.schema.yaml` beside this file for the shared blocks, each stage's `schema.yaml` in its
folder for its block; `schema()` joins them). The workflow validates a config against it (filling the defaults),
and the dataclasses below, the library's own (`intertwine.training_config`) with the workflow's
methods, read their defaults from it, so `StitchConfig()` is the schema's `stitching` block. Their `from_block` refuses unknown keys.

A per-job block is built from a dataclass's fields (`job_block`): a setting a job does not read
is not in its params, so changing it reruns nothing. Settings only some stitching methods read
are marked on their field (`only_for=`), so a change to them reruns those methods' jobs only.
Settings that cannot change a result, only how fast it comes (`affects_results=False`, e.g.
`zoo.training.eval_batch_size`), are left out of the block too: `run_block` gives them, and the
workflow passes them to the job beside its params (a `resources:` entry), so changing them reruns
nothing either.

Torch-free: the workflow imports it at parse time.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
from pathlib import Path
from typing import Any

import yaml

from intertwine import training_config
from intertwine.stitch_methods import G_RELU_METHODS, METHODS, parse_method  # noqa: F401 (re-exported)

#: The core of the schema: the top-level keys, the shared blocks (data, figures, cluster) and the
#: model spec; each stage's block is ``schema.yaml`` in its folder (``stage_schema_path``).
CORE_SCHEMA_PATH = Path(__file__).with_name("config.schema.yaml")
#: libyaml's parser where PyYAML was built with it: every job reads the schema at start-up, which
#: takes 0.10 s with the pure-Python parser and 0.01 s with libyaml's (the same mappings).
_SCHEMA_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def stage_schema_path(stage: str) -> Path:
    """The file of ``stage``'s config block: ``intertwine/workflow/stages/<stage>/schema.yaml``."""
    return Path(__file__).parent / "stages" / stage / "schema.yaml"


@functools.cache
def schema() -> dict:
    """The workflow's config schema (JSON Schema, draft 2020-12): the core file with every stage's
    block, read once (shared: do not change it)."""
    from intertwine.workflow.stages import STAGES  # the registry alone: no stage's code

    core = yaml.load(CORE_SCHEMA_PATH.read_text(), Loader=_SCHEMA_LOADER)
    blocks = {
        stage: yaml.load(stage_schema_path(stage).read_text(), Loader=_SCHEMA_LOADER)
        for stage in STAGES
        if stage_schema_path(stage).is_file()
    }
    # The report's order: the run's own keys and data, the stages, then figures and cluster.
    first = {key: core["properties"][key] for key in ("seed", "device", "pairs_share_members", "data")}
    rest = {key: node for key, node in core["properties"].items() if key not in first}
    return core | {"properties": first | blocks | rest}


def validate_config(config: dict) -> None:
    """Check ``config`` against the schema and fill in, in place, the defaults of the keys it lacks
    (at every depth, as Snakemake's ``validate(..., set_default=True)``); a value that does not
    fit raises ``jsonschema.ValidationError``."""
    import jsonschema

    base = jsonschema.Draft202012Validator
    check_properties = base.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, node):
        for name, sub in properties.items():
            if "default" in sub and isinstance(instance, dict):
                instance.setdefault(name, copy.deepcopy(sub["default"]))
        yield from check_properties(validator, properties, instance, node)

    check_type = base.VALIDATORS["type"]

    def finite_numbers(validator, types, instance, node):
        # NaN passes every minimum and maximum (each comparison is False), and YAML writes it as
        # .nan: `lr: .nan` trained until torch failed. No setting is meaningful at NaN or infinity.
        yield from check_type(validator, types, instance, node)
        if isinstance(instance, float) and not math.isfinite(instance):
            yield jsonschema.ValidationError(f"{instance} is not a finite number; write a number")

    with_defaults = jsonschema.validators.extend(base, {"properties": set_defaults, "type": finite_numbers})
    with_defaults(schema()).validate(config)


def schema_block(key: str) -> dict:
    """The schema of a config block by its dotted key, e.g. ``"zoo.training"``."""
    node = schema()
    for part in key.split("."):
        node = node["properties"][part]
    return node


def default(node: dict) -> Any:
    """The default a validated config holds for a schema node (an object's nested defaults too)."""
    value = node.get("default")
    if isinstance(value, dict) and "properties" in node:
        value = {k: default(sub) for k, sub in node["properties"].items() if "default" in sub} | value
    return value


def fill_defaults(value: Any, node: dict) -> Any:
    """``value`` with the schema node's defaults for the keys it lacks, at every depth (what
    validation with ``set_default`` does to a config); other values are returned as they are."""
    if not isinstance(value, dict) or "properties" not in node:
        return value
    filled = {k: default(sub) for k, sub in node["properties"].items() if k not in value and "default" in sub}
    return filled | {
        k: fill_defaults(v, node["properties"][k]) if k in node["properties"] else v for k, v in value.items()
    }


def checked_block(block: Any, key: str) -> dict:
    """The config block ``key`` (e.g. ``"data"``) as given, its missing keys filled with the
    schema's defaults and the whole checked against the schema: a ValueError names the config key
    of the first value that does not fit."""
    import jsonschema

    node = schema_block(key)
    if not isinstance(block, dict):
        raise ValueError(f"config block {key}: expected a mapping of settings, got {block!r}")
    block = fill_defaults(block, node)
    try:
        jsonschema.validate(block, node)
    except jsonschema.ValidationError as err:
        path = "".join(f".{part}" for part in err.absolute_path)
        raise ValueError(f"config key {key}{path}: {err.message}") from None
    return block


def setting(
    key: str,
    only_for: tuple[str, ...] | None = None,
    affects_results: bool = True,
    read_when: str | None = None,
) -> Any:
    """A dataclass field whose default is the schema's default of config key ``key``; ``only_for``
    names the kinds of job that read it (stitching methods; `masks`); ``affects_results=False``
    marks a setting that changes only how fast a job runs, never what it computes; ``read_when``
    names a boolean setting of the same dataclass without which no job reads this one."""
    block, name = key.rsplit(".", 1)
    default_value = default(schema_block(block)["properties"][name])
    metadata = (
        {"key": key}
        | ({"only_for": only_for} if only_for else {})
        | ({} if affects_results else {"affects_results": False})
        | ({"read_when": read_when} if read_when else {})
    )
    if isinstance(default_value, (list, dict)):
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default_value), metadata=metadata)
    return dataclasses.field(default=default_value, metadata=metadata)


class Settings:
    """``from_block``, ``job_block`` and the field list shared by the settings dataclasses."""

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_block(cls, block: dict, where: str = ""):
        """The settings in ``block`` (a dict of config keys), the schema's defaults for the keys it
        lacks (nested ones too, e.g. ``dissection.probe.images``). A key not among the settings,
        or a value of the wrong type or range, is an error naming the config key."""
        import jsonschema  # here: the workflow imports this module at parse time

        where = where or cls.__name__
        if not isinstance(block, dict):
            raise ValueError(f"config block {where}: expected a mapping of settings, got {block!r}")
        unknown = sorted(set(block) - set(cls.names()))
        if unknown:
            raise ValueError(
                f"config key {where}.{unknown[0]}: not a setting of "
                f"{cls.__name__}; its settings are {', '.join(cls.names())}"
            )
        values = {}
        for f in dataclasses.fields(cls):
            if f.name not in block:
                continue
            source, name = f.metadata["key"].rsplit(".", 1)
            node = schema_block(source)["properties"][name]
            value = block[f.name]
            if isinstance(value, dict) and "properties" in node:
                # Nested defaults filled; keys the plan adds (dissection.probe.shapes) pass unchecked.
                value = fill_defaults(value, node)
                checked = {k: v for k, v in value.items() if k in node["properties"]}
            else:
                checked = value
            try:
                jsonschema.validate(checked, node)
            except jsonschema.ValidationError as err:
                path = "".join(f".{part}" for part in err.absolute_path)
                raise ValueError(f"config key {where}.{f.name}{path}: {err.message}") from None
            values[f.name] = value
        return cls(**values)

    @classmethod
    def _fields_from(cls, sources: dict[str, dict], kind: str | None, affects_results: bool) -> dict:
        fields = {f.name: f for f in dataclasses.fields(cls)}

        def value(name: str):
            source, key = fields[name].metadata["key"].rsplit(".", 1)
            return sources[source][key]

        block = {}
        for f in fields.values():
            if kind not in f.metadata.get("only_for", (kind,)):
                continue
            if f.metadata.get("affects_results", True) != affects_results:
                continue
            if "read_when" in f.metadata and not value(f.metadata["read_when"]):
                continue  # no job reads it now: left out, changing it reruns nothing
            block[f.name] = value(f.name)
        return block

    @classmethod
    def job_block(cls, sources: dict[str, dict], kind: str | None = None) -> dict:
        """The settings a job of ``kind`` reads, from the validated config blocks ``sources``
        (keyed by dotted block key, e.g. ``{"stitching": ..., "zoo.training": ...}``); a field
        marked ``only_for`` other kinds is left out, and so is one that cannot change a result
        (``affects_results=False``: see ``run_block``)."""
        return cls._fields_from(sources, kind, affects_results=True)

    @classmethod
    def run_block(cls, sources: dict[str, dict], kind: str | None = None) -> dict:
        """The settings of a job of ``kind`` that cannot change its result, only its speed
        (``affects_results=False``): not in ``job_block``, so not in the rule's params, and
        passed to the job beside them (``job_block | run_block`` is every setting it reads)."""
        return cls._fields_from(sources, kind, affects_results=False)


def schema_settings(library: type, block: str, **fields: dict) -> type:
    """The library's settings dataclass ``library`` (``intertwine.training_config``) with the
    schema's defaults and the workflow's ``Settings`` methods: each field is config key
    ``<block>.<field>`` (or ``fields[field]["key"]``), and ``fields[field]`` gives the rest of its
    ``setting`` (``only_for``, ``affects_results``, ``read_when``)."""
    specs = []
    for f in dataclasses.fields(library):
        options = dict(fields.get(f.name, {}))
        key = options.pop("key", f"{block}.{f.name}")
        specs.append((f.name, f.type, setting(key, **options)))
    cls = dataclasses.make_dataclass(library.__name__, specs, bases=(Settings, library), frozen=True)
    cls.__module__, cls.__doc__ = __name__, library.__doc__
    return cls


#: How a zoo member trains: ``intertwine.training_config.TrainConfig`` with ``zoo.training``'s
#: defaults. The evaluation batch changes the speed and memory only, never a result.
TrainConfig = schema_settings(
    training_config.TrainConfig,
    "zoo.training",
    eval_batch_size={"affects_results": False},
    cuda_graphs={"affects_results": False},
    compile={"affects_results": False},
    pack_mode={"affects_results": False},
)

_ZOO_AUGMENTATION = {"translate": {"key": "zoo.training.translate"}, "flip": {"key": "zoo.training.flip"}}
_G_RELU_LAYERS = {"only_for": ("grelu", "grelu_cv", "monomial")}

#: How a stitching layer trains: ``intertwine.training_config.StitchConfig`` with ``stitching``'s
#: defaults (and the zoo's augmentation); the settings only some methods read are marked so.
#: Its ``eval_batch_size`` is not ``affects_results=False``, unlike ``zoo.training``'s: it is also
#: the batch of the pass that refreshes g's batch-norm statistics.
StitchConfig = schema_settings(
    training_config.StitchConfig,
    "stitching",
    **_ZOO_AUGMENTATION,
    alpha={"only_for": ("grelu", "monomial")},
    scales_frozen_fraction={"only_for": ("grelu", "softsort", "monomial")},
    sinkhorn_iters=_G_RELU_LAYERS,
    permutation_step=_G_RELU_LAYERS,
    permutation_update=_G_RELU_LAYERS,
    softsort_tau={"only_for": ("softsort",)},
    softsort_hardening={"only_for": ("softsort",)},
    softsort_rounding={"only_for": ("softsort",)},
    grelu_start=_G_RELU_LAYERS,
    alpha_grid={"only_for": ("grelu_cv",)},
    cv_held_out={"only_for": ("grelu_cv",)},
    cv_epochs={"only_for": ("grelu_cv",)},
)


# --- Stitching method names (their grammar: intertwine.stitch_methods).


def method_kind(method: str) -> str:
    """The config's name of a job's method: 'rank4' -> 'rank', 'l1_0.01' -> 'l1'."""
    return parse_method(method)[0]


def l1_method(strength: float) -> str:
    """The method name of full stitching with L1 strength ``strength`` (0.01 -> 'l1_0.01')."""
    return f"l1_{strength:g}"


def expand_methods(methods: list[str], ranks: list[int], l1_lambdas: list[float]) -> list[str]:
    """The config's methods as job names: `rank` becomes rank<r> per rank, `l1` l1_<lambda> per
    strength."""
    expanded = []
    for method in methods:
        if method == "rank":
            expanded += [f"rank{r}" for r in ranks]
        elif method == "l1":
            expanded += [l1_method(strength) for strength in l1_lambdas]
        else:
            expanded.append(method)
    return expanded


# --- DEQ-NTK variance settings' names: the one grammar of the plan's files, the CLI and the jobs.


def variances_name(variances) -> str:
    """The name of a variance setting (sigma_w2, sigma_u2, sigma_b2) in file paths and on the
    command line: [0.25, 0.25, 0.5] -> 'w0.25_u0.25_b0.5'."""
    w, u, b = (float(v) for v in variances)
    return f"w{w:g}_u{u:g}_b{b:g}"


def parse_variances(name: str) -> tuple[float, float, float]:
    """'w0.25_u0.25_b0.5' -> (0.25, 0.25, 0.5), the inverse of ``variances_name``."""
    parts = name.split("_")
    try:
        if len(parts) != 3 or [p[:1] for p in parts] != ["w", "u", "b"]:
            raise ValueError
        return tuple(float(p[1:]) for p in parts)
    except ValueError:
        raise ValueError(
            f"not a variance setting's name w<sigma_w2>_u<sigma_u2>_b<sigma_b2> (e.g. w0.25_u0.25_b0.5): {name!r}"
        ) from None
