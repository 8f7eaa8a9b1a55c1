"""Command line: ``intertwine <stage> ...``, the only thing the workflow's rules call.

Each torch job's subcommand is named like its rule and its function in its stage's ``job`` module
(``stitch-pair``: rule ``stitch_pair``, ``intertwine.workflow.stages.stitching.job.stitch_pair``) and takes the options every job
shares: ``--data``, ``--global-seed``, ``--device``, ``--threads``. Config blocks are passed as
JSON strings, exactly as the workflow holds them, and every command first logs itself, so any job
can be rerun by hand from the command its log prints.

Here: the commands of no one stage (``check-config``, ``prepare-data``, ``claims``, ``table``). Each
stage's commands are in its folder, ``intertwine.workflow.stages.<stage>.commands``, found through
the stage registry; what they share (argument types, the parent parsers, options taken in the same
sense) is :mod:`intertwine.workflow.commands`.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import shlex
import sys

from intertwine.workflow import stages
from intertwine.workflow.commands import BY_RULE, WHEN_GIVEN, Command, Commands, json_object, log
from intertwine.workflow.config import default_config_path


def claims_table(text: str) -> tuple[str, str]:
    """A claims table as NAME=PATH: (name, path), the name one the scorecard reads."""
    from intertwine.workflow.claims import scorecard_tables

    known = scorecard_tables()
    name, equals, path = text.partition("=")
    if not equals or not name or not path:
        raise argparse.ArgumentTypeError(
            f"expected NAME=PATH (e.g. rotation=results/tables/rotation.parquet), got {text!r}"
        )
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1)
        raise argparse.ArgumentTypeError(
            f"unknown table {name!r}"
            + (f" (did you mean {close[0]!r}?)" if close else "")
            + f"; the tables are {', '.join(known)}"
        )
    return name, path


def table_schema(name: str):
    """A stage's table by name: its schema (``intertwine.workflow.tables.schema``)."""
    from intertwine.workflow.tables import schema

    try:
        return schema(name)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def cmd_check_config(args) -> None:
    import yaml

    from intertwine.workflow.config import (
        check_config,
        data_folder_errors,
        load_config,
        replaces_default,
        run_config,
    )

    config = run_config(args.files, args.default)
    files = ", ".join(args.files)
    base = (
        "replacing the default"
        if replaces_default(load_config(args.files))
        else f"merged onto {args.default}"
    )
    errors = check_config(config) or data_folder_errors(config)
    if args.show:  # what the run would use: the merge, with the schema's defaults filled in
        print(yaml.safe_dump(config, sort_keys=False), end="")
    if errors:
        raise ValueError(f"{files} ({base}):\n" + "\n".join(errors))
    variants = config["zoo"]["variants"]
    print(f"{files} ({base}): valid ({len(variants)} zoo variants: {', '.join(variants)})")


def cmd_prepare_data(args) -> None:
    from intertwine.data import build_dataset, write_dataset
    from intertwine.data.contents import record_contents
    from intertwine.workflow.settings import checked_block

    splits, meta = build_dataset(checked_block(args.config, "data"), args.global_seed)
    write_dataset(args.out, splits, meta)
    record_contents(args.out)  # what the workflow checks the cache against before every run
    log(
        f"{meta['dataset']}: "
        + ", ".join(f"{k} {v}" for k, v in meta["sizes"].items())
        + f" images of {meta['image_size']} pixels in {args.out}"
    )


def cmd_claims(args) -> None:
    import pandas as pd

    from intertwine.workflow.claims import all_findings, scorecard, scorecard_tables
    from intertwine.workflow.scorecard_page import as_rst
    from intertwine.workflow.tables import read_parquet, write_csv
    from intertwine.utils import atomic_path

    names = [name for name, _ in args.table]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"--table {twice[0]}= is given twice; give each table once")
    tables = {}
    for name, path in args.table:
        schema = scorecard_tables()[name]
        try:
            if schema is None:
                tables[name] = pd.read_csv(path)
                missing = [c for c in all_findings()[name].columns if c not in tables[name].columns]
                if missing:
                    raise ValueError(
                        f"{path}: does not have the table's columns (missing {missing}); it was written by "
                        "another stage or an older version: delete it and rerun its job"
                    )
            else:
                tables[name] = read_parquet([path], schema)
        except ValueError as err:
            raise ValueError(f"--table {name}: {err}") from None
    card = scorecard(tables, args.settings)
    write_csv(card, args.out)
    with atomic_path(args.rst) as tmp:
        tmp.write_text(as_rst(card, set(args.figures)))
    counts = card["verdict"].value_counts()
    log(f"{len(card)} claims: " + ", ".join(f"{n} {verdict}" for verdict, n in counts.items()))


def cmd_table(args) -> None:
    from intertwine.workflow.tables import read_parquet, write_parquet

    write_parquet(read_parquet(args.parts, args.schema), args.out, args.schema)


class _CommandLine(argparse.ArgumentParser):
    """The top-level parser: a command it does not know is an error naming the closest ones."""

    def parse_known_args(self, args=None, namespace=None):
        words = sys.argv[1:] if args is None else list(args)
        named = [action for action in self._actions if isinstance(action, argparse._SubParsersAction)]
        command = next((word for word in words if not word.startswith("-")), None)
        if named and command is not None and command not in named[0].choices:
            close = difflib.get_close_matches(command, list(named[0].choices), n=3, cutoff=0.6)
            self.error(
                f"unknown command {command!r}"
                + (f"; did you mean {' or '.join(map(repr, close))}?" if close else "")
                + " (`intertwine --help` lists the commands)"
            )
        return super().parse_known_args(args, namespace)


def build_parser() -> argparse.ArgumentParser:
    """The command line."""
    return _built()[0]


@functools.cache
def commands() -> dict[str, Command]:
    """Every subcommand by name, with what its rule passes it: the workflow builds each rule's
    shell line from these (``commands()["stitch-pair"].shell()``)."""
    return _built()[1].commands


def _built() -> tuple[argparse.ArgumentParser, Commands]:
    from intertwine import __version__

    parser = _CommandLine(
        prog="intertwine",
        description=(
            "intertwine: model zoos and the symmetries of their internal representations. These "
            "commands are the jobs of the Snakemake workflow (each is named like its rule); run the "
            "workflow itself with `make run` (the default config) or `snakemake --cores N "
            "[--configfile FILE]`. `intertwine check-config FILE` checks a config as the workflow does."
        ),
        epilog="Every job's log starts with the command that reruns it; `intertwine <command> --help` says more.",
    )
    parser.add_argument("--version", action="version", version=f"intertwine {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=argparse.ArgumentParser)

    cli = Commands(sub)
    p = cli.add(
        "check-config",
        cmd_check_config,
        "check config files as the workflow does: the schema, then the plan's cross-checks",
    )
    p.add_argument(
        "files",
        nargs="+",
        help="config files, merged in order onto the default config as by snakemake --configfile "
        "(later over earlier; none under them when they set replaces_default: true)",
    )
    p.add_argument(
        "--default",
        default=str(default_config_path(".")),
        metavar="PATH",
        help="the default config the files are merged onto (default: %(default)s, as snakemake run "
        "from the repository root reads it)",
    )
    p.add_argument(
        "--show",
        action="store_true",
        help="print the config the run would use: the merge, with the schema's defaults filled in",
    )

    p = cli.add(
        "prepare-data",
        cmd_prepare_data,
        "generate or decode the data set into the cache",
        out="cache directory, e.g. results/data/shapes",
        config="data",
        rules={"--out": "{params.out}"},
    )
    p.add_argument("--global-seed", type=int, default=0, help="the config's seed", rule="{params.seed}")

    _add_claims_and_table_commands(cli)
    for stage in stages.with_part("commands"):  # each stage adds its own
        stages.part(stage, "commands").add_commands(cli)
    return parser, cli


def _add_claims_and_table_commands(cli: Commands) -> None:
    """The scorecard, and the table of a stage that only collects its jobs' rows."""
    p = cli.add(
        "claims",
        cmd_claims,
        "the claims scorecard: which of the papers' findings this run's tables reproduce",
        out="claims.csv: one row per claim",
        rules={"--out": "{output.csv}"},
    )
    p.add_argument(
        "--table",
        action="append",
        default=[],
        metavar="NAME=PATH",
        type=claims_table,
        rule=WHEN_GIVEN,
        help="a stage's table (zoo, symmetry, rotation, stitching, similarity, dissection, gated_findings, "
        "pullback_symmetry, deqntk); a claim whose table is not given reads `not run`",
    )
    p.add_argument(
        "--settings",
        type=json_object,
        required=True,
        rule="{params.settings:q}",
        help="the run's settings (Plan.claims_settings, JSON)",
    )
    p.add_argument(
        "--figures",
        nargs="*",
        default=[],
        rule="{params.figures}",
        help="file names of the report's figures a row may link to",
    )
    p.add_argument(
        "--rst",
        required=True,
        rule="{output.rst}",
        help="the scorecard as an RST table for the report's opening page",
    )
    p = cli.add("table", cmd_table, "concatenate per-job Parquet files into a stage's table", out="the table")
    p.add_argument("parts", nargs="+", rule="{input}", help="per-job Parquet files of one stage")
    p.add_argument(
        "--schema",
        type=table_schema,
        required=True,
        rule=BY_RULE,  # each table's rule names it
        help="the table's name (e.g. rotation, zoo_epochs): its schema is in its stage's folder",
    )


#: The packages of the workflow extra (`pip install 'intertwine[workflow]'`) the commands import.
WORKFLOW_PACKAGES = ("snakemake", "pandas", "pyarrow", "matplotlib", "yaml", "jsonschema")


def main(argv: list[str] | None = None) -> None:
    try:
        _run(argv)
    except ModuleNotFoundError as err:  # the library installed without the workflow
        if (err.name or "").split(".")[0] not in WORKFLOW_PACKAGES:
            raise
        sys.exit(
            f"intertwine: {err}: the workflow's commands need its packages; install them with "
            "pip install 'intertwine[workflow]' (the library itself needs none of them)"
        )


def _run(argv: list[str] | None) -> None:
    from intertwine.utils import DivergedError

    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    log(shlex.join(["intertwine", *argv]))  # the job's log starts with the command that reruns it
    if "threads" in vars(args):  # a torch job: torch is imported here, not for tables and figures
        import torch

        torch.set_num_threads(args.threads)
    try:
        args.func(args)
    except (OSError, ValueError, DivergedError) as err:  # the user's to fix: no traceback
        sys.exit(f"intertwine {args.command}: error: {err}")


if __name__ == "__main__":
    main()
