"""Linear mode connectivity's commands: one aligned pair's interpolation curves, the figures."""

from __future__ import annotations

from intertwine.workflow.commands import (
    Commands,
    job_context,
    json_object,
    save_figure_files,
)


def cmd_connectivity_pair(args) -> None:
    from intertwine.workflow.tables import write_parquet
    from intertwine.workflow.stages.connectivity.job import connectivity_pair
    from intertwine.workflow.stages.connectivity.tables import CONNECTIVITY

    write_parquet(
        connectivity_pair(job_context(args), args.a, args.b, args.pair, args.config), args.out, CONNECTIVITY
    )


def cmd_connectivity_figure(args) -> None:
    from intertwine.workflow.tables import read_parquet, write_csv
    from intertwine.workflow.stages.connectivity.figures import (
        connectivity_barriers,
        connectivity_curves,
        connectivity_summary,
    )
    from intertwine.workflow.stages.connectivity.tables import CONNECTIVITY

    table = read_parquet([args.table], CONNECTIVITY)
    save_figure_files(connectivity_curves(table), args.curves, args.other_formats, args.figures)
    save_figure_files(
        connectivity_barriers(table, args.families, args.barrier),
        args.barriers,
        args.other_formats,
        args.figures,
    )
    write_csv(connectivity_summary(table, args.barrier), args.summary)


def add_commands(cli: Commands) -> None:
    """Add this stage's subcommands to the command line."""
    cli.add(
        "connectivity-pair",
        cmd_connectivity_pair,
        "align one zoo member to another by the intertwiner groups and interpolate their weights",
        [cli.job],
        out=".parquet, one row per (method, split, lambda)",
        config="connectivity",
        options=["--a", "--b", "--pair"],
    )
    p = cli.add(
        "connectivity-figure",
        cmd_connectivity_figure,
        "loss and accuracy along the line between aligned members, and the barrier against width",
        [cli.figure],
        options=["--table", "--summary"],
        rules={"--table": "{input}"},
    )
    p.add_argument(
        "--families",
        type=json_object,
        required=True,
        rule="{params.families:q}",
        help="variant -> its architecture without the width (JSON): a panel of the barriers figure each",
    )
    p.add_argument(
        "--curves", required=True, rule="{output.figures[0]}", help="loss and accuracy along the line (.png)"
    )
    p.add_argument(
        "--barriers",
        required=True,
        rule="{output.figures[1]}",
        help="test-loss barrier per method against width (.png)",
    )
    p.add_argument(
        "--barrier",
        default="endpoints_mean",
        rule="{params.barrier}",
        choices=["endpoints_mean", "endpoints_line"],
        help="the barrier drawn and summarised (config connectivity.barrier)",
    )
