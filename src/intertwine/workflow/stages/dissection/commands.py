"""Network dissection's commands: a zoo member, an external model, the unit masks, the figures."""

from __future__ import annotations

from intertwine.workflow.commands import (
    Commands,
    job_context,
    json_names,
    json_names_or_null,
    json_object,
    save_figure_files,
    schema_enum,
)


def cmd_dissect_member(args) -> None:
    from intertwine.workflow.tables import write_parquet
    from intertwine.workflow.stages.dissection.job import dissect_member
    from intertwine.workflow.stages.dissection.tables import DISSECTION, DISSECTION_UNITS

    summary, units = dissect_member(job_context(args), args.checkpoint, args.sites, args.config)
    write_parquet(units, args.units_out, DISSECTION_UNITS)
    write_parquet(summary, args.out, DISSECTION)


def cmd_dissect_external(args) -> None:
    from intertwine.workflow.tables import write_parquet
    from intertwine.workflow.stages.dissection.job import dissect_external
    from intertwine.workflow.stages.dissection.tables import DISSECTION, DISSECTION_UNITS

    summary, units = dissect_external(
        job_context(args), args.name, args.arch, args.weights, args.config, args.sites
    )
    write_parquet(units, args.units_out, DISSECTION_UNITS)
    write_parquet(summary, args.out, DISSECTION)


def cmd_dissection_masks(args) -> None:
    from intertwine.workflow.tables import read_parquet
    from intertwine.workflow.stages.dissection.figures import dissection_masks as draw_masks
    from intertwine.workflow.stages.dissection.job import dissection_masks
    from intertwine.workflow.stages.dissection.tables import DISSECTION_UNITS

    units = read_parquet([args.units], DISSECTION_UNITS)
    images, panels = dissection_masks(job_context(args), args.checkpoint, args.site, args.config, units)
    save_figure_files(draw_masks(images.numpy(), panels), args.out, args.other_formats, args.figures)


def cmd_dissection_figure(args) -> None:
    from intertwine.workflow.tables import read_parquet, write_csv
    from intertwine.workflow.stages.dissection.figures import (
        dissection_categories,
        dissection_fraction,
        dissection_summary,
    )
    from intertwine.workflow.stages.dissection.tables import DISSECTION, DISSECTION_UNITS

    table = read_parquet([args.table], DISSECTION)
    save_figure_files(dissection_fraction(table), args.fraction, args.other_formats, args.figures)
    save_figure_files(
        dissection_categories(read_parquet([args.units], DISSECTION_UNITS), args.category_sites),
        args.categories,
        args.other_formats,
        args.figures,
    )
    write_csv(dissection_summary(table), args.summary)


def add_commands(cli: Commands) -> None:
    """Add this stage's subcommands to the command line."""
    _add_job_commands(cli)
    _add_figure_commands(cli)


def _add_job_commands(cli: Commands) -> None:
    """The jobs: a zoo member's dissection, an external model's."""
    p = cli.add(
        "dissect-member",
        cmd_dissect_member,
        "network dissection of one zoo member under basis rotations (section 6)",
        [cli.job],
        out=".parquet, one row per (site, alpha, rotation)",
        config="dissection",
        options=["--checkpoint", "--units-out"],
        rules={"--out": "{output.summary}"},
    )
    p.add_argument(
        "--sites", type=json_names, required=True, rule="{params.sites:q}", help="JSON list of sites"
    )
    p = cli.add(
        "dissect-external",
        cmd_dissect_external,
        "dissect a torchvision ImageNet model (local weights) on Broden",
        [cli.job],
        out=".parquet, one row per (site, alpha, rotation)",
        config="dissection",
        options=["--units-out"],
        rules={"--out": "{output.summary}", "--data": None},  # Broden is found through its config
    )
    p.add_argument(
        "--name",
        required=True,
        rule="{wildcards.name}",
        help="the model's name in the tables (its `variant`)",
    )
    p.add_argument(
        "--arch",
        required=True,
        rule="{params.arch}",
        choices=schema_enum(
            "properties", "dissection", "properties", "external", "additionalProperties", "properties", "arch"
        ),
        help="torchvision architecture of the weights",
    )
    p.add_argument("--weights", required=True, rule="{input.weights}", help="state dict file (.pth)")
    p.add_argument(
        "--sites",
        type=json_names_or_null,
        default=None,
        rule="{params.sites:q}",
        help="JSON list of module names, or null for the arch's default",
    )


def _add_figure_commands(cli: Commands) -> None:
    """The top units' masks and the dissection figure."""
    p = cli.add(
        "dissection-masks",
        cmd_dissection_masks,
        "top units' regions over probe images (Figs. 21, 23, 25)",
        [cli.job, cli.figure],
        out="figure (.png)",
        config="dissection",
        options=["--checkpoint", "--site"],
        rules={"--site": "{params.site}", "--out": "{output.png}"},
    )
    p.add_argument(
        "--units",
        required=True,
        rule="{input.units}",
        help="the member's dissection units (seed0.units.parquet)",
    )
    p = cli.add(
        "dissection-figure",
        cmd_dissection_figure,
        "interpretable units vs rotation, by category (Figs. 3, 18-20)",
        [cli.figure],
        options=["--table", "--summary"],
    )
    p.add_argument("--units", required=True, rule="{input.units}", help="dissection_units.parquet")
    p.add_argument(
        "--category-sites",
        type=json_object,
        required=True,
        rule="{params.category_sites:q}",
        help="JSON {variant: site} for the category bars",
    )
    p.add_argument(
        "--fraction", required=True, rule="{output.figures[0]}", help="fraction-vs-alpha figure (.png)"
    )
    p.add_argument(
        "--categories", required=True, rule="{output.figures[1]}", help="units-per-category figure (.png)"
    )
