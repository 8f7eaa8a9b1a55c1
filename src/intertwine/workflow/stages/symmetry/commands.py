"""The symmetry self-check's commands: one member's check, the table and its summary."""

from __future__ import annotations

from intertwine.workflow.commands import (
    Commands,
    job_context,
)


def cmd_symmetry_check(args) -> None:
    from intertwine.workflow.tables import write_parquet
    from intertwine.workflow.stages.symmetry.job import symmetry_check
    from intertwine.workflow.stages.symmetry.tables import SYMMETRY

    write_parquet(symmetry_check(job_context(args), args.checkpoint, args.config), args.out, SYMMETRY)


def cmd_symmetry_table(args) -> None:
    from intertwine.workflow.stages.symmetry.study import summarize
    from intertwine.workflow.tables import read_parquet, write_csv, write_parquet
    from intertwine.workflow.stages.symmetry.tables import SYMMETRY

    table = read_parquet(args.parts, SYMMETRY)
    write_parquet(table, args.out, SYMMETRY)
    write_csv(summarize(table), args.summary, float_format="%.3g")


def add_commands(cli: Commands) -> None:
    """Add this stage's subcommands to the command line."""
    cli.add(
        "symmetry-check",
        cmd_symmetry_check,
        "check the weight-space symmetry on one zoo member",
        [cli.job],
        out="per-model .parquet",
        config="symmetry",
        options=["--checkpoint"],
    )
    p = cli.add(
        "symmetry-table",
        cmd_symmetry_table,
        "aggregate the symmetry checks and summarise them",
        out="symmetry.parquet",
        options=["--summary"],
        rules={"--out": "{output.table}"},
    )
    p.add_argument("parts", nargs="+", rule="{input}", help="per-member tables (symmetry-check)")
