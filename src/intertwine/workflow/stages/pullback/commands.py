"""Excitation pullbacks' commands: per member, per pair, the image grids, an external model,
the settling of gate patterns, the tables and the figures."""

from __future__ import annotations

import json

from intertwine.workflow.commands import (
    WHEN_GIVEN,
    Commands,
    job_context,
    json_names,
    save_figure_files,
    schema_enum,
)


def cmd_pullback_member(args) -> None:
    from intertwine.workflow.tables import write_parquet
    from intertwine.workflow.stages.pullback.job import pullback_member
    from intertwine.workflow.stages.pullback.tables import PULLBACK_FAITHFULNESS, PULLBACK_SYMMETRY

    symmetry, faithfulness = pullback_member(job_context(args), args.checkpoint, args.config)
    write_parquet(faithfulness, args.faithfulness_out, PULLBACK_FAITHFULNESS)
    write_parquet(symmetry, args.out, PULLBACK_SYMMETRY)


def cmd_pullback_pair(args) -> None:
    from intertwine.workflow.tables import write_parquet
    from intertwine.workflow.stages.pullback.job import pullback_pair
    from intertwine.workflow.stages.pullback.tables import PULLBACK_AGREEMENT, PULLBACK_TRANSFER

    rows, transfer = pullback_pair(job_context(args), args.a, args.b, args.pair, args.config, args.sites)
    write_parquet(transfer, args.transfer_out, PULLBACK_TRANSFER)
    write_parquet(rows, args.out, PULLBACK_AGREEMENT)


def cmd_pullback_images(args) -> None:
    from intertwine.workflow.stages.pullback.figures import pullback_grid, pullback_pgd
    from intertwine.workflow.stages.pullback.job import pullback_images

    arrays = pullback_images(job_context(args), args.checkpoint, args.config)
    save_figure_files(pullback_grid(arrays), args.out, args.other_formats, args.figures)
    save_figure_files(pullback_pgd(arrays), args.pgd, args.other_formats, args.figures)


def cmd_pullback_table(args) -> None:
    from intertwine.workflow.stages.pullback.study import summarize
    from intertwine.workflow.tables import read_parquet, write_csv, write_parquet
    from intertwine.workflow.stages.pullback.tables import (
        PULLBACK_AGREEMENT,
        PULLBACK_FAITHFULNESS,
        PULLBACK_SYMMETRY,
        PULLBACK_TRANSFER,
    )

    tables = {}
    for name, schema, parts, out in (
        ("symmetry", PULLBACK_SYMMETRY, args.symmetry, args.out),
        ("agreement", PULLBACK_AGREEMENT, args.agreement, args.agreement_out),
        ("faithfulness", PULLBACK_FAITHFULNESS, args.faithfulness, args.faithfulness_out),
        ("transfer", PULLBACK_TRANSFER, args.transfer, args.transfer_out),
    ):
        tables[name] = read_parquet(parts, schema)
        write_parquet(tables[name], out, schema)
    write_csv(summarize(**tables), args.summary, float_format="%.6g")


def cmd_pullback_external(args) -> None:
    from intertwine.workflow.tables import write_parquet
    from intertwine.workflow.stages.pullback.external import pullback_external
    from intertwine.workflow.stages.pullback.figures import pullback_external as figure
    from intertwine.workflow.stages.pullback.tables import PULLBACK_EXTERNAL

    table, arrays = pullback_external(
        job_context(args), args.name, args.arch, args.weights, args.entry, args.config
    )
    save_figure_files(figure(arrays), args.figure, args.other_formats, args.figures)
    save_figure_files(figure(arrays, perturbed=True), args.perturbed_figure, args.other_formats, args.figures)
    save_figure_files(figure(arrays, pullbacks=True), args.pullbacks_figure, args.other_formats, args.figures)
    write_parquet(table, args.out, PULLBACK_EXTERNAL)


def cmd_pullback_settling(args) -> None:
    from intertwine.workflow.tables import write_parquet
    from intertwine.workflow.stages.pullback.figures import pullback_settling as figure
    from intertwine.workflow.stages.pullback.job import pullback_settling
    from intertwine.workflow.stages.pullback.tables import PULLBACK_SETTLING

    table = pullback_settling(args.checkpoints)
    write_parquet(table, args.out, PULLBACK_SETTLING)
    save_figure_files(figure(table), args.figure, args.other_formats, args.figures)


def cmd_pullback_figure(args) -> None:
    from intertwine.workflow.tables import read_parquet
    from intertwine.workflow.stages.pullback.figures import (
        pullback_agreement,
        pullback_faithfulness,
        pullback_symmetry,
        pullback_temperature,
        pullback_transfer,
    )
    from intertwine.workflow.stages.pullback.tables import (
        PULLBACK_AGREEMENT,
        PULLBACK_FAITHFULNESS,
        PULLBACK_SYMMETRY,
        PULLBACK_TRANSFER,
    )

    save = lambda fig, path: save_figure_files(fig, path, args.other_formats, args.figures)  # noqa: E731
    save(pullback_symmetry(read_parquet([args.symmetry], PULLBACK_SYMMETRY)), args.symmetry_figure)
    save(
        pullback_faithfulness(read_parquet([args.faithfulness], PULLBACK_FAITHFULNESS)),
        args.faithfulness_figure,
    )
    if args.agreement_figure:
        save(pullback_agreement(read_parquet([args.agreement], PULLBACK_AGREEMENT)), args.agreement_figure)
    if args.transfer_figure:
        if not args.transfer:
            raise SystemExit(
                "pullback-figure: --transfer-figure needs --transfer (pullback_transfer.parquet)"
            )
        save(pullback_transfer(read_parquet([args.transfer], PULLBACK_TRANSFER)), args.transfer_figure)
    if args.temperature_figure:
        tables = [
            read_parquet([path], schema)
            for path, schema in (
                (args.symmetry, PULLBACK_SYMMETRY),
                (args.agreement, PULLBACK_AGREEMENT),
                (args.faithfulness, PULLBACK_FAITHFULNESS),
            )
        ]
        save(pullback_temperature(*tables), args.temperature_figure)


def add_commands(cli: Commands) -> None:
    """Add this stage's subcommands to the command line."""
    _add_member_commands(cli)
    _add_table_command(cli)
    _add_external_and_settling_commands(cli)
    _add_figure_command(cli)


def _add_member_commands(cli: Commands) -> None:
    """The jobs of one member or pair: symmetry and faithfulness, agreement and transfer, the images."""
    p = cli.add(
        "pullback-member",
        cmd_pullback_member,
        "a zoo member's excitation pullbacks: invariance to its weight symmetries, faithfulness, PGD",
        [cli.job],
        out=".parquet, one row per (group, scale spread, mode)",
        config="pullback",
        options=["--checkpoint"],
        rules={"--out": "{output.symmetry}"},
    )
    p.add_argument(
        "--faithfulness-out", required=True, rule="{output.faithfulness}", help=".parquet, one row per mode"
    )
    p = cli.add(
        "pullback-pair",
        cmd_pullback_pair,
        "the agreement of two zoo members' excitation pullbacks (class logits, matched hidden units)",
        [cli.job],
        out=".parquet, one row per (site, unit, mode)",
        config="pullback",
        options=["--a", "--b", "--pair"],
        rules={"--out": "{output.agreement}"},
    )
    p.add_argument(
        "--sites",
        type=json_names,
        required=True,
        rule="{params.sites:q}",
        help="JSON list of the hidden units' sites",
    )
    p.add_argument(
        "--transfer-out",
        required=True,
        rule="{output.transfer}",
        help=".parquet, PGD transfer across the seeds: one row per direction and mode",
    )
    p = cli.add(
        "pullback-images",
        cmd_pullback_images,
        "a zoo member's gradients and pullbacks of test images, and PGD toward other classes",
        [cli.job, cli.figure],
        out="gradient vs pullback grid (.png)",
        config="pullback",
        options=["--checkpoint"],
        rules={"--out": "{output.grid}"},
    )
    p.add_argument("--pgd", required=True, rule="{output.pgd}", help="PGD grid (.png)")


def _add_table_command(cli: Commands) -> None:
    """The stage's tables and their summary."""
    p = cli.add(
        "pullback-table",
        cmd_pullback_table,
        "the excitation-pullback stage's tables and their summary",
        out="pullback_symmetry.parquet",
        options=["--summary"],
        rules={"--out": "{output.symmetry}"},
    )
    p.add_argument(
        "--symmetry", nargs="+", required=True, rule="{input.symmetry}", help="per-member symmetry tables"
    )
    p.add_argument(
        "--faithfulness",
        nargs="+",
        required=True,
        rule="{input.faithfulness}",
        help="per-member faithfulness tables",
    )
    p.add_argument(
        "--agreement",
        nargs="*",
        default=[],
        rule="{input.agreement}",
        help="per-pair agreement tables (none: no pairs)",
    )
    p.add_argument(
        "--faithfulness-out",
        required=True,
        rule="{output.faithfulness}",
        help="pullback_faithfulness.parquet",
    )
    p.add_argument(
        "--agreement-out", required=True, rule="{output.agreement}", help="pullback_agreement.parquet"
    )
    p.add_argument(
        "--transfer",
        nargs="*",
        default=[],
        rule="{input.transfer}",
        help="per-pair PGD transfer tables (none: no pairs)",
    )
    p.add_argument(
        "--transfer-out", required=True, rule="{output.transfer}", help="pullback_transfer.parquet"
    )


def _add_external_and_settling_commands(cli: Commands) -> None:
    """The external models' PGD grids and Hypothesis 1's settling."""
    p = cli.add(
        "pullback-external",
        cmd_pullback_external,
        "the paper's raw-pullback and PGD grids (gradient vs pullbacks) for a torchvision ImageNet model",
        [cli.job, cli.figure],
        out=".parquet, one row per (mode, image, target)",
        config="pullback",
        rules={"--out": "{output.table}", "--data": None},  # the images are found through its entry
    )
    p.add_argument(
        "--name", required=True, rule="{wildcards.name}", help="the model's name (pullback.external)"
    )
    p.add_argument(
        "--arch",
        required=True,
        rule="{params.arch}",
        choices=schema_enum(
            "properties", "pullback", "properties", "external", "additionalProperties", "properties", "arch"
        ),
        help="torchvision architecture of the weights",
    )
    p.add_argument("--weights", required=True, rule="{input.weights}", help="state dict file (.pth)")
    p.add_argument(
        "--entry",
        type=json.loads,
        required=True,
        rule="{params.entry:q}",
        help="JSON: the model's pullback.external entry",
    )
    p.add_argument("--figure", required=True, rule="{output.figure}", help="differences grid (.png)")
    p.add_argument(
        "--perturbed-figure", required=True, rule="{output.perturbed}", help="perturbed images grid (.png)"
    )
    p.add_argument(
        "--pullbacks-figure",
        required=True,
        rule="{output.pullbacks}",
        help="raw pullbacks grid, the paper's Figure 2 (.png)",
    )
    p = cli.add(
        "pullback-settling",
        cmd_pullback_settling,
        "Hypothesis 1: how far each recorded epoch's gate pattern is a zoo member's final one",
        [cli.figure],
        out="pullback_settling.parquet",
        rules={"--out": "{output.table}"},
    )
    p.add_argument(
        "--checkpoints",
        nargs="+",
        required=True,
        rule="{input}",
        help="members that recorded gate patterns",
    )
    p.add_argument(
        "--figure",
        required=True,
        rule="{output.figure}",
        help="agreement with the final pattern per epoch (.png)",
    )


def _add_figure_command(cli: Commands) -> None:
    """The stage's figure of its tables."""
    p = cli.add(
        "pullback-figure",
        cmd_pullback_figure,
        "excitation pullbacks: cosine vs scale spread per mode, agreement across seeds, faithfulness",
        [cli.figure],
    )
    p.add_argument("--symmetry", required=True, rule="{input.symmetry}", help="pullback_symmetry.parquet")
    p.add_argument(
        "--faithfulness", required=True, rule="{input.faithfulness}", help="pullback_faithfulness.parquet"
    )
    p.add_argument("--agreement", required=True, rule="{input.agreement}", help="pullback_agreement.parquet")
    p.add_argument(
        "--symmetry-figure",
        required=True,
        rule="{output.symmetry}",
        help="cosine vs scale spread per mode (.png)",
    )
    p.add_argument(
        "--faithfulness-figure",
        required=True,
        rule="{output.faithfulness}",
        help="deletion, insertion, PGD success (.png)",
    )
    # the figures the config asks for (Plan.pullback_figures)
    p.add_argument(
        "--agreement-figure", rule=WHEN_GIVEN, help="agreement across seeds (.png); none without pairs"
    )
    p.add_argument("--transfer", rule=WHEN_GIVEN, help="pullback_transfer.parquet (with --transfer-figure)")
    p.add_argument(
        "--transfer-figure", rule=WHEN_GIVEN, help="PGD transfer across seeds (.png); none without pairs"
    )
    p.add_argument(
        "--temperature-figure",
        rule=WHEN_GIVEN,
        help="every measure against T (.png); none without pullback.sweep",
    )
