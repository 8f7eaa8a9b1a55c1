"""Representation similarity's commands: the measures between two members, the zoo as a whole, the
figures."""

from __future__ import annotations

from intertwine.workflow.commands import (
    WHEN_GIVEN,
    Commands,
    job_context,
    save_figure_files,
)


def cmd_similarity_pair(args) -> None:
    from intertwine.workflow.tables import write_parquet
    from intertwine.workflow.stages.similarity.job import similarity_pair
    from intertwine.workflow.stages.similarity.tables import SIMILARITY

    rows = similarity_pair(
        job_context(args), args.a, args.b, args.pair, args.config, args.procrustes, args.cka
    )
    write_parquet(rows, args.out, SIMILARITY)


def cmd_similarity_figure(args) -> None:
    from intertwine.workflow.paper import reported_procrustes
    from intertwine.workflow.tables import read_parquet, write_csv
    from intertwine.workflow.stages.similarity.figures import (
        similarity_cka,
        similarity_procrustes,
        similarity_summary,
    )
    from intertwine.workflow.stages.similarity.tables import SIMILARITY

    table = read_parquet([args.table], SIMILARITY)
    paper = (
        {name: reported_procrustes(spec) for name, spec in args.variants.items()}
        if args.dataset == "cifar10"
        else {}
    )
    if args.procrustes:
        save_figure_files(
            similarity_procrustes(table, paper), args.procrustes, args.other_formats, args.figures
        )
    if args.cka:
        save_figure_files(similarity_cka(table), args.cka, args.other_formats, args.figures)
    write_csv(similarity_summary(table, paper), args.summary)


def cmd_similarity_zoo(args) -> None:
    from intertwine.workflow.tables import write_parquet
    from intertwine.workflow.stages.similarity.tables import SIMILARITY_ZOO
    from intertwine.workflow.stages.similarity.job import similarity_zoo

    rows = similarity_zoo(job_context(args), args.variant, args.members, args.sites, args.config)
    write_parquet(rows, args.out, SIMILARITY_ZOO)


def cmd_similarity_zoo_figure(args) -> None:
    from intertwine.workflow.tables import read_parquet, write_csv
    from intertwine.workflow.stages.similarity.figures import similarity_zoo, similarity_zoo_summary
    from intertwine.workflow.stages.similarity.tables import SIMILARITY_ZOO

    table = read_parquet([args.table], SIMILARITY_ZOO)
    save_figure_files(similarity_zoo(table), args.figure, args.other_formats, args.figures)
    write_csv(similarity_zoo_summary(table), args.summary)


def add_commands(cli: Commands) -> None:
    """Add this stage's subcommands to the command line."""
    p = cli.add(
        "similarity-pair",
        cmd_similarity_pair,
        "similarity measures between two zoo members",
        [cli.job],
        out=".parquet, one row per (site_a, site_b, measure)",
        config="similarity",
        options=["--a", "--b", "--pair"],
    )
    # each measure for the pairs the config asks it of (Plan.similarity_measures)
    p.add_argument(
        "--procrustes", action="store_true", rule=WHEN_GIVEN, help="Procrustes measures at matching sites"
    )
    p.add_argument("--cka", action="store_true", rule=WHEN_GIVEN, help="CKA measures for every pair of sites")
    p = cli.add(
        "similarity-figure",
        cmd_similarity_figure,
        "Procrustes per site and CKA heatmaps (Table 2, Figs. 2, 5, 9-11)",
        [cli.figure],
        options=["--table", "--dataset", "--variants", "--summary"],
        rules={"--table": "{input}"},
    )
    p.add_argument("--procrustes", rule=WHEN_GIVEN, help="Procrustes figure (.png)")
    p.add_argument("--cka", rule=WHEN_GIVEN, help="CKA heatmaps (.png)")
    p = cli.add(
        "similarity-zoo",
        cmd_similarity_zoo,
        "the zoo as a whole: each measure's distance matrix over a variant's members, their Procrustes mean",
        [cli.job],
        out=".parquet, one row per (site, measure, seed_a, seed_b); seed_b empty: the Procrustes mean",
        config="similarity.zoo",
    )
    p.add_argument("--variant", required=True, rule="{wildcards.variant}", help="the zoo variant")
    p.add_argument("--members", nargs="+", required=True, rule="{input.members}", help="its members (.pt)")
    p.add_argument("--sites", nargs="+", required=True, rule="{params.sites}", help="the sites to view")
    p = cli.add(
        "similarity-zoo-figure",
        cmd_similarity_zoo_figure,
        "the zoo embedded in the plane per variant, measure and site, and its summary",
        [cli.figure],
        options=["--table", "--summary"],
        rules={"--table": "{input}"},
    )
    p.add_argument("--figure", required=True, rule="{output.figure}", help="the figure (.png)")
