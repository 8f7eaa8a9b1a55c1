"""Model stitching's commands: one pair with one method, the figures and the appendix studies'."""

from __future__ import annotations

from intertwine.workflow.commands import (
    WHEN_GIVEN,
    Commands,
    job_context,
    json_names,
    json_names_or_null,
    json_numbers,
    method,
    save_figure_files,
)


def cmd_stitch_pair(args) -> None:
    from intertwine.workflow.tables import write_parquet
    from intertwine.workflow.stages.stitching.job import stitch_pair
    from intertwine.workflow.stages.stitching.tables import STITCHING

    rows = stitch_pair(job_context(args), args.a, args.b, args.method, args.pair, args.config, args.sites)
    write_parquet(rows, args.out, STITCHING)


def cmd_stitching_figure(args) -> None:
    from intertwine.workflow.tables import read_parquet, write_csv
    from intertwine.workflow.stages.stitching.figures import (
        stitching_convergence,
        stitching_dimension,
        stitching_penalty,
        stitching_summary,
    )
    from intertwine.workflow.stages.stitching.tables import STITCHING

    table = read_parquet([args.table], STITCHING)
    save_figure_files(stitching_penalty(table), args.penalty, args.other_formats, args.figures)
    save_figure_files(stitching_dimension(table), args.dimension, args.other_formats, args.figures)
    save_figure_files(stitching_convergence(table), args.convergence, args.other_formats, args.figures)
    write_csv(stitching_summary(table), args.summary)


def cmd_stitching_studies(args) -> None:
    """The appendix studies' figures, each drawn only when its file is asked for."""
    from intertwine.workflow.tables import read_parquet, write_csv
    from intertwine.workflow.stages.stitching import figures
    from intertwine.workflow.stages.zoo.tables import ZOO

    table = read_parquet([args.table])  # no schema: the studies read only the columns they need
    save = lambda fig, path: save_figure_files(fig, path, args.other_formats, args.figures)  # noqa: E731
    if args.leaky_relu or args.leaky_relu_table:
        if args.zoo is None or args.slopes is None:
            raise ValueError("--leaky-relu and --leaky-relu-table need --zoo and --slopes")
        zoo = read_parquet([args.zoo], ZOO)
        accuracy = figures.leaky_relu_accuracy(zoo, args.slopes)
        if args.leaky_relu_table:
            write_csv(accuracy, args.leaky_relu_table)
        if args.leaky_relu:
            save(figures.leaky_relu_penalty(table, args.slopes, accuracy, zoo), args.leaky_relu)
    if args.alpha_cv:
        save(figures.alpha_selection(table), args.alpha_cv)
    if args.l1:
        save(figures.l1_sparsity(table), args.l1)
    if args.softsort:
        save(figures.softsort_comparison(table), args.softsort)
    if args.transformer:
        if not args.transformers:
            raise ValueError("--transformer needs --transformers, the JSON list of transformer variants")
        save(figures.transformer_penalty(table, args.transformers), args.transformer)


def add_commands(cli: Commands) -> None:
    """Add this stage's subcommands to the command line."""
    p = cli.add(
        "stitch-pair",
        cmd_stitch_pair,
        "stitch a pair of zoo members with one method at each site",
        [cli.job],
        out=".parquet, one row per site",
        config="stitching",
        options=["--a", "--b", "--pair"],
    )
    p.add_argument(
        "--method",
        type=method,
        required=True,
        rule="{wildcards.method}",
        help="full, rank<r>, l1_<lambda>, grelu, grelu_cv, softsort or monomial",
    )
    p.add_argument(
        "--sites",
        type=json_names_or_null,
        default=None,
        rule="{params.sites:q}",
        help="JSON list of sites, or null for all (the default)",
    )
    p = cli.add(
        "stitching-figure",
        cmd_stitching_figure,
        "stitching penalty and layer dimension per site (Figs. 1, 6, 7)",
        [cli.figure],
        options=["--table", "--summary"],
        rules={"--table": "{input}"},
    )
    p.add_argument("--penalty", required=True, rule="{output.penalty}", help="penalty figure (.png)")
    p.add_argument(
        "--dimension", required=True, rule="{output.dimension}", help="parameter dimension figure (.png)"
    )
    p.add_argument(
        "--convergence",
        required=True,
        rule="{output.convergence}",
        help="G_ReLU layers' off-permutation mass per epoch (.png)",
    )
    p = cli.add(
        "stitching-studies",
        cmd_stitching_studies,
        "appendix D stitching studies: LeakyReLU, alpha by CV, L1, SoftSort, transformers",
        [cli.figure],
        options=["--table"],
    )
    p.add_argument("--zoo", rule="{input.zoo}", help="zoo.parquet (for --leaky-relu, --leaky-relu-table)")
    p.add_argument(
        "--slopes",
        type=json_numbers,
        rule="{params.slopes:q}",
        help="JSON {variant: LeakyReLU negative slope}, ReLU 0",
    )
    p.add_argument(
        "--transformers",
        type=json_names,
        rule="{params.transformers:q}",
        help="JSON list of the transformer variants",
    )
    # each figure (and the table) only when the config asks for its study (Plan.study_figures)
    p.add_argument(
        "--leaky-relu",
        rule=WHEN_GIVEN,
        help="G_ReLU penalty per slope and zoo accuracy (Fig. 8, Table 3; .png)",
    )
    p.add_argument("--leaky-relu-table", rule=WHEN_GIVEN, help="zoo accuracy per slope beside Table 3 (.csv)")
    p.add_argument(
        "--alpha-cv", rule=WHEN_GIVEN, help="alpha chosen by cross-validation (Figs. 13, 14; .png)"
    )
    p.add_argument(
        "--l1", rule=WHEN_GIVEN, help="penalty against sparsity of L1-regularised stitching (Fig. 15; .png)"
    )
    p.add_argument(
        "--softsort", rule=WHEN_GIVEN, help="SoftSort against Birkhoff G_ReLU stitching (D.2.2; .png)"
    )
    p.add_argument("--transformer", rule=WHEN_GIVEN, help="transformer stitching penalty (Fig. 12; .png)")
