"""The DEQ-NTK's commands: Gram blocks, kernel regression, the depth sweep, the convolutional
kernel, the reference CKA, the table and the figures."""

from __future__ import annotations

from intertwine.workflow.commands import (
    WHEN_GIVEN,
    Commands,
    integer,
    job_context,
    save_figure_files,
    variances,
)


def cmd_deqntk_gram(args) -> None:
    from intertwine.workflow.stages.deqntk.job import deqntk_gram, gram_provenance, save_block

    if args.stop <= args.start:
        raise ValueError(f"--stop ({args.stop}) must be greater than --start ({args.start})")
    job = job_context(args)
    block = deqntk_gram(job, args.variances, args.n_train, args.part, args.start, args.stop, args.config)
    save_block(block, args.out, gram_provenance(job))


def cmd_deqntk_regression(args) -> None:
    from intertwine.workflow.tables import write_parquet
    from intertwine.workflow.stages.deqntk.job import deqntk_regression
    from intertwine.workflow.stages.deqntk.tables import DEQNTK

    row = deqntk_regression(job_context(args), args.variances, args.n_train, args.blocks, args.config)
    write_parquet(row, args.out, DEQNTK)


def cmd_deqntk_depth(args) -> None:
    from intertwine.workflow.tables import write_parquet
    from intertwine.workflow.stages.deqntk.job import deqntk_depth
    from intertwine.workflow.stages.deqntk.tables import DEQNTK

    write_parquet(deqntk_depth(job_context(args), args.draw, args.config), args.out, DEQNTK)


def cmd_deqntk_conv(args) -> None:
    from intertwine.workflow.tables import write_parquet
    from intertwine.workflow.stages.deqntk.job import deqntk_conv
    from intertwine.workflow.stages.deqntk.tables import DEQNTK

    write_parquet(deqntk_conv(job_context(args), args.config), args.out, DEQNTK)


def cmd_kernel_reference_member(args) -> None:
    from intertwine.workflow.tables import write_parquet
    from intertwine.workflow.stages.deqntk.job import kernel_reference_member
    from intertwine.workflow.stages.deqntk.tables import KERNEL_REFERENCE

    write_parquet(
        kernel_reference_member(job_context(args), args.checkpoint, args.config), args.out, KERNEL_REFERENCE
    )


def cmd_deqntk_table(args) -> None:
    from intertwine.workflow.paper import reported_deqntk
    from intertwine.workflow.tables import read_parquet, write_parquet
    from intertwine.workflow.stages.deqntk.tables import DEQNTK

    table = read_parquet(args.parts, DEQNTK)
    # The paper's accuracy as a fraction, like test_acc (the claims subtract one from the other).
    reported = [
        reported_deqntk(row.dataset, (row.sigma_w2, row.sigma_u2, row.sigma_b2), row.n_train, row.n_test)
        if row.study == "accuracy" and row.depth == "deq"
        else None
        for row in table.itertuples()
    ]
    table["paper_acc"] = [None if value is None else value / 100 for value in reported]
    write_parquet(table, args.out, DEQNTK)


def cmd_deqntk_figure(args) -> None:
    from intertwine.workflow.paper import DEQNTK_ACCURACY
    from intertwine.workflow.tables import read_parquet
    from intertwine.workflow.stages.deqntk.figures import deqntk_accuracy, deqntk_depth, deqntk_reference
    from intertwine.workflow.stages.deqntk.tables import DEQNTK, KERNEL_REFERENCE
    from intertwine.workflow.stages.zoo.tables import ZOO

    if (args.accuracy or args.depth) and not args.table:
        raise ValueError("--accuracy and --depth draw deqntk.parquet: give it as --table")
    if args.kernel_reference and not args.reference:
        raise ValueError("--kernel-reference draws kernel_reference.parquet: give it as --reference")
    save = lambda fig, path: save_figure_files(fig, path, args.other_formats, args.figures)  # noqa: E731
    table = read_parquet([args.table], DEQNTK) if args.table else None
    if args.accuracy:
        zoo = read_parquet([args.zoo], ZOO) if args.zoo else None
        dataset = table["dataset"].iloc[0] if len(table) else None
        save(deqntk_accuracy(table, zoo, DEQNTK_ACCURACY.get(dataset, {})), args.accuracy)
    if args.depth:
        save(deqntk_depth(table), args.depth)
    if args.kernel_reference:
        save(deqntk_reference(read_parquet([args.reference], KERNEL_REFERENCE)), args.kernel_reference)


def add_commands(cli: Commands) -> None:
    """Add this stage's subcommands to the command line."""
    deqntk_options = {
        "--variances": dict(
            type=variances,
            required=True,
            help="the variance setting, e.g. w0.25_u0.25_b0.5 (sigma_w2, sigma_u2, sigma_b2)",
        ),
        "--n-train": dict(type=integer(1), required=True),
    }
    _add_kernel_commands(cli, deqntk_options)
    _add_table_and_figure_commands(cli)


def _add_kernel_commands(cli: Commands, deqntk_options: dict) -> None:
    """The kernel's jobs: the Gram's blocks, regression, the depth sweep, the convolutional kernel, a member's CKAs."""
    p = cli.add(
        "deqntk-gram",
        cmd_deqntk_gram,
        "a block of rows of the DEQ-NTK accuracy study's [train; test] x train Gram",
        [cli.job],
        out="the block (.npz)",
        config="deqntk",
    )
    p.add_argument("--variances", rule="{wildcards.variances}", **deqntk_options["--variances"])
    p.add_argument(
        "--n-train",
        rule="{params.n_train}",
        **deqntk_options["--n-train"] | {"help": "the Gram's training images (the largest deqntk.n_train)"},
    )
    p.add_argument(
        "--part",
        required=True,
        choices=["train", "test"],
        rule="{wildcards.part}",
        help="the training or the test rows",
    )
    p.add_argument(
        "--start",
        type=integer(0),
        required=True,
        rule="{wildcards.start}",
        help="the block's first row of its part",
    )
    p.add_argument(
        "--stop", type=integer(1), required=True, rule="{params.stop}", help="one past its last row"
    )
    p = cli.add(
        "deqntk-regression",
        cmd_deqntk_regression,
        "kernel regression with the DEQ-NTK of one variance setting and training-set size",
        [cli.job],
        out="one-row .parquet",
        config="deqntk",
    )
    p.add_argument("--variances", rule="{wildcards.variances}", **deqntk_options["--variances"])
    p.add_argument(
        "--n-train",
        rule="{wildcards.n_train}",
        **deqntk_options["--n-train"] | {"help": "training images (the Gram's first)"},
    )
    p.add_argument("blocks", nargs="+", rule="{input.blocks}", help="the Gram's blocks (.npz of deqntk-gram)")
    p = cli.add(
        "deqntk-depth",
        cmd_deqntk_depth,
        "one draw of the depth sweep: the depth-L NTK for each depth beside the DEQ-NTK (Figure 1)",
        [cli.job],
        out=".parquet, one row per kernel",
        config="deqntk",
    )
    p.add_argument(
        "--draw",
        type=integer(0),
        required=True,
        rule="{wildcards.draw}",
        help="the draw's index (seeds its images)",
    )
    cli.add(
        "deqntk-conv",
        cmd_deqntk_conv,
        "the convolutional DEQ-NTK's kernel regression on a small subset, per variance setting",
        [cli.job],
        out=".parquet, one row per variance setting",
        config="deqntk",
    )
    cli.add(
        "kernel-reference-member",
        cmd_kernel_reference_member,
        "CKA of each site of a zoo member with the DEQ-NTK of the same images",
        [cli.job],
        out=".parquet, one row per (site, kernel)",
        config="deqntk",
        options=["--checkpoint"],
    )


def _add_table_and_figure_commands(cli: Commands) -> None:
    """The stage's table and its figures."""
    p = cli.add(
        "deqntk-table",
        cmd_deqntk_table,
        "the DEQ-NTK regressions and depth sweep in one table, with the paper's accuracies",
        out="deqntk.parquet",
    )
    p.add_argument(
        "parts",
        nargs="+",
        rule="{input}",
        help="per-job tables (deqntk-regression, deqntk-depth, deqntk-conv)",
    )
    p = cli.add(
        "deqntk-figure",
        cmd_deqntk_figure,
        "DEQ-NTK: accuracy beside the zoo's, accuracy vs depth, CKA of each site with the kernel",
        [cli.figure],
    )
    p.add_argument("--zoo", rule="{input.zoo}", help="zoo.parquet (the zoo's accuracies beside the kernel's)")
    # each figure, with the table it draws, only when the config asks for it (Plan.deqntk_figures)
    p.add_argument("--table", rule=WHEN_GIVEN, help="deqntk.parquet")
    p.add_argument("--reference", rule=WHEN_GIVEN, help="kernel_reference.parquet")
    p.add_argument(
        "--accuracy", rule=WHEN_GIVEN, help="the kernel's accuracy per setting beside the zoo's (.png)"
    )
    p.add_argument("--depth", rule=WHEN_GIVEN, help="accuracy vs depth, finite depth and DEQ (.png)")
    p.add_argument("--kernel-reference", rule=WHEN_GIVEN, help="CKA of each site with the kernel (.png)")
