"""The rotation penalty's commands: one trial, the figure."""

from __future__ import annotations

from intertwine.workflow.commands import (
    Commands,
    integer,
    job_context,
    save_figure_files,
    schema_enum,
)


def cmd_rotation_trial(args) -> None:
    from intertwine.workflow.tables import write_parquet
    from intertwine.workflow.stages.rotation.job import rotation_trial
    from intertwine.workflow.stages.rotation.tables import ROTATION

    row = rotation_trial(
        job_context(args),
        args.checkpoint,
        args.site,
        args.group,
        args.trial,
        args.config,
        args.training,
        eval_batch_size=args.eval_batch_size,
    )
    write_parquet(row, args.out, ROTATION)


def cmd_rotation_figure(args) -> None:
    from intertwine.workflow.tables import read_parquet
    from intertwine.workflow.stages.rotation.figures import rotation_penalty
    from intertwine.workflow.stages.rotation.tables import ROTATION

    save_figure_files(
        rotation_penalty(read_parquet([args.table], ROTATION)), args.out, args.other_formats, args.figures
    )


def add_commands(cli: Commands) -> None:
    """Add this stage's subcommands to the command line."""
    p = cli.add(
        "rotation-trial",
        cmd_rotation_trial,
        "one rotation-penalty trial (paper section 3.3)",
        [cli.job],
        out="one-row .parquet",
        config="rotation",
        options=["--checkpoint", "--site", "--training", "--eval-batch-size"],
    )
    p.add_argument(
        "--group",
        required=True,
        rule="{wildcards.group}",
        choices=schema_enum(
            "properties", "rotation", "properties", "variants", "additionalProperties", "items"
        ),
        help="the group a random element of which transforms the site",
    )
    p.add_argument(
        "--trial",
        type=integer(0),
        required=True,
        rule="{wildcards.trial}",
        help="the trial's index (seeds its draw)",
    )
    cli.add(
        "rotation-figure",
        cmd_rotation_figure,
        "rotation penalty per site and group (Fig. 4)",
        [cli.figure],
        out="figure (.png)",
        options=["--table"],
        rules={"--table": "{input}", "--out": "{output.png}"},
    )
