"""Readable config errors: the key path, what is wrong, and what is allowed."""

from __future__ import annotations

from pathlib import Path


def key_path(path) -> str:
    return ".".join(str(part) for part in path) or "(top level)"


def describe_validation_error(error) -> str:
    """One message for a ``jsonschema.ValidationError`` raised while validating the config."""
    where = key_path(error.absolute_path)
    if error.validator == "additionalProperties" and "properties" in error.schema:
        unknown = sorted(set(error.instance) - set(error.schema["properties"]))
        allowed = ", ".join(error.schema["properties"])
        first = f"{where}.{unknown[0]}" if error.absolute_path else unknown[0]
        return f"config key {first}: unknown key (misspelt?); the keys allowed under {where} are: {allowed}"
    if error.validator == "uniqueItems":
        return (
            f"config key {where}: {error.instance} lists an item more than once; list each once "
            "(a repeated item would run the same jobs twice and count them as independent evidence)"
        )
    if error.validator in ("maximum", "exclusiveMaximum"):
        return (
            f"config key {where}: {error.message}; lower it (the limit and its reason are in the key's "
            "description, docs/config-reference.md)"
        )
    return f"config key {where}: {error.message}"


def _duplicate_keys(node, path=()) -> list[str]:
    """Each key written twice in one mapping of a composed YAML document, with its two lines: YAML
    keeps the last silently, so a second ``symmetry:`` block would drop the first one's settings."""
    import yaml

    found = []
    if isinstance(node, yaml.MappingNode):
        first_line: dict = {}
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else None
            if name is not None and name != "<<":
                if name in first_line:
                    found.append(
                        f"key {key_path([*path, name])} is written twice, on lines {first_line[name]} "
                        f"and {key.start_mark.line + 1}; YAML would keep only the second silently"
                    )
                else:
                    first_line[name] = key.start_mark.line + 1
            found += _duplicate_keys(value, (*path, name))
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            found += _duplicate_keys(item, (*path, index))
    return found


def read_config_file(path) -> dict:
    """One config file, strictly: valid YAML (a syntax error names the file, line and column), a
    mapping, no key written twice in one block, and no ``__use_yte__`` (Snakemake would run the
    file as a YTE template, i.e. evaluate Python written in the config)."""
    import yaml

    try:
        with open(path) as fh:
            loader = yaml.SafeLoader(fh)
            try:
                node = loader.get_single_node()
                duplicates = _duplicate_keys(node)
                loaded = None if duplicates else loader.construct_document(node)
            finally:
                loader.dispose()
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err)
        raise ValueError(f"{path}{where}: not valid YAML: {problem}") from None
    if duplicates:
        raise ValueError(
            f"{path}: " + "; ".join(duplicates) + ". Write each key once: merge the two blocks into "
            "one (or delete the one you do not mean)"
        )
    loaded = {} if loaded is None else loaded
    if not isinstance(loaded, dict):
        raise ValueError(
            f"{path}: a config is a mapping of blocks (data:, zoo:, ...), not {type(loaded).__name__}"
        )
    if "__use_yte__" in loaded:
        raise ValueError(
            f"{path}: key __use_yte__: it would make Snakemake run the file as a YTE template, "
            "evaluating the Python written in it; the workflow's configs are plain YAML. Delete the "
            "key and write the values themselves"
        )
    return loaded


def load_config(paths) -> dict:
    """The config the workflow would run with ``--configfile paths...``: the YAML files merged in
    order, a later file's keys over an earlier one's (nested blocks key by key, as Snakemake does).
    Each file is read by ``read_config_file``: a syntax error, a key written twice or a YTE template
    names the file (and lines)."""
    from snakemake.utils import update_config

    config: dict = {}
    for path in paths:
        update_config(config, read_config_file(path))
    return config


#: The top-level key with which config files say they are a whole config: ``replaces_default: true``
#: (in the files' merge) runs them alone, on the schema's defaults, without config/config.yaml under them.
REPLACES_DEFAULT = "replaces_default"


def default_config_path(root) -> Path:
    """The embedded default config of the checkout at ``root`` (the directory above workflow/)."""
    return Path(root) / "config" / "config.yaml"


def replaces_default(overrides: dict) -> bool:
    """Whether the merged ``--configfile`` files say they replace the default rather than overlay it."""
    return overrides.get(REPLACES_DEFAULT) is True


def run_config(paths, default) -> dict:
    """The config a run with ``--configfile paths...`` uses: the default config (``default``, the
    checkout's config/config.yaml) with the files merged onto it in order, mappings key by key and
    every other value (a list included) replaced, as Snakemake merges them; or, when the files'
    merge sets ``replaces_default: true``, the files alone. The Snakefile loads the same default
    under the same condition, and Snakemake merges the files onto it with the same function
    (``snakemake.utils.update_config``)."""
    from snakemake.utils import update_config

    overrides = load_config(paths)
    if replaces_default(overrides):
        return overrides
    if not Path(default).is_file():
        raise ValueError(
            f"{default}: the default config is not there; the files given are merged onto it (none "
            f"of them sets {REPLACES_DEFAULT}: true). Run from the repository root, as snakemake is "
            "run, or give --default PATH"
        )
    config = read_config_file(default)
    update_config(config, overrides)
    return config


def data_folder_errors(config: dict, workdir=".") -> list[str]:
    """The data folder of a validated config, checked before any job (as a message; none: fine):
    for cifar10, cifar100, mnist and image_folder, ``data.<dataset>.root`` (relative to ``workdir``,
    where the jobs run) must hold the data set in its layout, unless the data cache under
    ``workdir/results/data/<dataset>`` is already there (then the data job, the folder's only
    reader, does not run)."""
    from intertwine.data.cifar10 import CIFARS, folder_problem
    from intertwine.data.image_folder import split_folders_problem

    dataset = config["data"]["dataset"]
    if dataset not in (*CIFARS, "image_folder"):
        return []
    cache = Path(workdir) / "results" / "data" / dataset
    if (cache / "meta.json").exists():
        return []
    if dataset == "image_folder":
        problem = split_folders_problem(
            Path(workdir) / Path(config["data"]["image_folder"]["root"]).expanduser()
        )
        return [problem] if problem else []
    block = config["data"][dataset]
    root = (Path(workdir) / Path(block["root"]).expanduser()).absolute()
    problem = folder_problem(dataset, root, block["layout"], block["download"])
    return [f"config key data.{dataset}.root ({block['root']}): {problem}"] if problem else []


def check_config(config: dict) -> list[str]:
    """The workflow's checks of a config, as messages (none: it runs): the schema, whose defaults
    this fills in (``config`` changes in place), then the plan's cross-checks."""
    import jsonschema

    from intertwine.workflow.plan import Plan
    from intertwine.workflow.settings import validate_config

    try:
        validate_config(config)
    except jsonschema.ValidationError as err:
        return [describe_validation_error(err)]
    return Plan(config).errors()


def reference_markdown(schema: dict | None = None) -> str:
    """The configuration reference (docs/config-reference.md): every key of the schema with its
    type, default and description, one section per top-level block, generated so that the schema
    stays the one place a setting is written (tests/test_docs.py checks the page is current).

    Parameters
    ----------
    schema : the parsed schema; None: the workflow's (``intertwine.workflow.settings.schema()``, the core
        file and every stage's block).

    Returns
    -------
    The page's markdown.
    """
    import json

    from intertwine.workflow.settings import schema as workflow_schema

    if schema is None:
        schema = workflow_schema()

    def kind(node: dict) -> str:
        if "enum" in node:
            return " | ".join(f"`{v}`" for v in node["enum"])
        types = node.get("type", "object" if "properties" in node else "")
        return " or ".join(types) if isinstance(types, list) else types

    def cell(text) -> str:
        return " ".join(str(text).split()).replace("|", "\\|")

    rows: dict[str, list[str]] = {}

    def walk(node: dict, path: list[str]) -> None:
        for name, child in node.get("properties", {}).items():
            key = ".".join([*path, name])
            default = f"`{json.dumps(child['default'])}`" if "default" in child else ""
            block = path[0] if path else name if "properties" in child else "top level"
            rows.setdefault(block, []).append(
                f"| `{key}` | {kind(child)} | {cell(default)} | {cell(child.get('description', ''))} |"
            )
            walk(child, [*path, name])

    walk(schema, [])
    out = [
        "# Configuration reference",
        "",
        "Generated from `src/intertwine/workflow/config.schema.yaml` and each stage's block",
        "(`src/intertwine/workflow/stages/<stage>/schema.yaml`) by `intertwine.workflow.config.reference_markdown()`",
        "(`python -m intertwine.workflow.config > docs/config-reference.md`); edit the schema, not this page.",
        "",
        cell(schema.get("description", "")),
    ]
    for block, lines in rows.items():
        heading = block if block == "top level" else f"`{block}`"
        out += [
            "",
            f"## {heading}",
            "",
            "| key | type | default | description |",
            "| --- | --- | --- | --- |",
        ]
        out += lines
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(reference_markdown(), end="")
