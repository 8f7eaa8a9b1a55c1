"""The gated networks' commands: a member's kernels, a logit ensemble, the study's table, the figures."""

from __future__ import annotations

from intertwine.workflow.commands import (
    WHEN_GIVEN,
    Commands,
    job_context,
    json_names,
    json_object,
    save_figure_files,
)


def cmd_gated_ensemble(args) -> None:
    from intertwine.workflow.tables import write_parquet
    from intertwine.workflow.stages.gated.job import gated_ensemble
    from intertwine.workflow.stages.gated.tables import GATED_ENSEMBLE

    rows = gated_ensemble(job_context(args), args.checkpoints, args.eval_batch_size or 500)
    write_parquet(rows, args.out, GATED_ENSEMBLE)


def cmd_npk_member(args) -> None:
    from intertwine.workflow.tables import write_parquet
    from intertwine.workflow.stages.gated.job import npk_member
    from intertwine.workflow.stages.gated.tables import NPK

    write_parquet(npk_member(job_context(args), args.checkpoint, args.config), args.out, NPK)


def cmd_gated_table(args) -> None:
    from intertwine.workflow.stages.gated import study as gated
    from intertwine.models import normalize_spec
    from intertwine.workflow.tables import read_parquet, write_csv, write_parquet
    from intertwine.workflow.stages.gated.tables import GATED, GATED_ENSEMBLE, NPK
    from intertwine.workflow.stages.zoo.tables import ZOO

    specs = {variant: normalize_spec(args.variants[variant]) for variant in args.study}
    table = gated.study_table(read_parquet([args.zoo], ZOO), specs, args.dataset, args.epochs)
    write_parquet(table, args.out, GATED)
    write_parquet(read_parquet(args.parts, NPK), args.npk_out, NPK)
    ensembles = (
        read_parquet(args.ensembles, GATED_ENSEMBLE)
        if args.ensembles
        else GATED_ENSEMBLE.empty_table().to_pandas()
    )
    write_csv(gated.findings(table, args.epochs, ensembles), args.findings)
    write_csv(gated.ensemble_table(ensembles, specs, args.dataset, args.epochs), args.ensembles_out)


def cmd_gated_figure(args) -> None:
    from intertwine.workflow.tables import read_parquet
    from intertwine.workflow.stages.gated.figures import gated_accuracy, gated_kernels, gated_permutations
    from intertwine.workflow.stages.gated.tables import GATED, NPK
    from intertwine.workflow.stages.similarity.tables import SIMILARITY

    table = read_parquet([args.table], GATED)
    save_figure_files(gated_accuracy(table), args.accuracy, args.other_formats, args.figures)
    if args.permutations:
        save_figure_files(gated_permutations(table), args.permutations, args.other_formats, args.figures)
    similarity = read_parquet([args.similarity], SIMILARITY) if args.similarity else None
    save_figure_files(
        gated_kernels(read_parquet([args.npk], NPK), similarity),
        args.kernels,
        args.other_formats,
        args.figures,
    )


def add_commands(cli: Commands) -> None:
    """Add this stage's subcommands to the command line."""
    _add_job_commands(cli)
    _add_table_and_figure_commands(cli)


def _add_job_commands(cli: Commands) -> None:
    """The jobs: a variant's logit ensemble, a member's kernels."""
    p = cli.add(
        "gated-ensemble",
        cmd_gated_ensemble,
        "the logits of a variant's zoo members averaged, on the test set (the paper's C1GAP-16-ENS)",
        [cli.job],
        out=".parquet, one row",
        options=["--eval-batch-size"],
    )
    p.add_argument(
        "--checkpoints",
        nargs="+",
        required=True,
        rule="{input.checkpoints}",
        help="the ensemble's zoo members (.pt)",
    )
    cli.add(
        "npk-member",
        cmd_npk_member,
        "a zoo member's neural path kernel and gate kernels with their checks",
        [cli.job],
        out="per-member .parquet",
        config="gated",
        options=["--checkpoint"],
    )


def _add_table_and_figure_commands(cli: Commands) -> None:
    """The study's table, findings and figure."""
    p = cli.add(
        "gated-table",
        cmd_gated_table,
        "the gated-networks study: accuracy per member beside the paper, kernels, findings",
        out="gated.parquet",
        options=["--variants", "--dataset"],
        rules={"--out": "{output.table}"},
    )
    p.add_argument("parts", nargs="+", rule="{input.parts}", help="per-member kernel tables (npk-member)")
    p.add_argument("--zoo", required=True, rule="{input.zoo}", help="zoo.parquet")
    p.add_argument(
        "--study",
        type=json_names,
        required=True,
        rule="{params.study:q}",
        help="JSON list of the study's variants",
    )
    p.add_argument(
        "--epochs",
        type=json_object,
        required=True,
        rule="{params.epochs:q}",
        help="JSON {variant: training epochs}",
    )
    p.add_argument(
        "--npk-out", required=True, rule="{output.npk}", help="npk.parquet: the per-member kernel tables"
    )
    p.add_argument(
        "--findings",
        required=True,
        rule="{output.findings}",
        help="the paper's findings and our verdicts (.csv)",
    )
    p.add_argument(
        "--ensembles",
        nargs="*",
        default=[],
        rule="{input.ensembles}",
        help="logit ensembles' tables (gated-ensemble)",
    )
    p.add_argument(
        "--ensembles-out",
        required=True,
        rule="{output.ensembles}",
        help="gated_ensembles.csv: the ensembles beside the paper's",
    )
    p = cli.add(
        "gated-figure",
        cmd_gated_figure,
        "gated networks: accuracy per family beside Table I, over gate permutations, kernels",
        [cli.figure],
        options=["--table"],
    )
    p.add_argument("--npk", required=True, rule="{input.npk}", help="npk.parquet")
    p.add_argument(
        "--similarity",
        rule=WHEN_GIVEN,
        help="similarity.parquet (gate, linear and G_ReLU CKA across seeds)",
    )
    p.add_argument(
        "--accuracy", required=True, rule="{output.accuracy}", help="accuracy per family x value input (.png)"
    )
    p.add_argument("--permutations", rule=WHEN_GIVEN, help="accuracy over gate permutations (.png)")
    p.add_argument("--kernels", required=True, rule="{output.kernels}", help="kernel CKAs (.png)")
