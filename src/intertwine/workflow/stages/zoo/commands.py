"""The model zoo's commands: train a member or a pack of members, link a pack's member, the zoo's
table and figure."""

from __future__ import annotations

from intertwine.workflow.commands import (
    WHEN_GIVEN,
    Commands,
    integer,
    job_context,
    json_object,
    save_figure_files,
    seed_range,
)


def cmd_train_member(args) -> None:
    from intertwine.workflow.stages.zoo.job import train_member
    from intertwine.workflow.zoo import refuse_overwrite, save_member

    refuse_overwrite(args.out)  # fail before training, not after
    checkpoint, metrics = train_member(
        job_context(args),
        args.variant,
        args.seed,
        args.spec,
        args.training,
        args.out,
        eval_batch_size=args.eval_batch_size,
        features=args.features,
    )
    save_member(checkpoint, metrics, args.out, args.metrics)


def cmd_train_pack(args) -> None:
    from intertwine.workflow.stages.zoo.job import train_pack
    from intertwine.workflow.zoo import write_pack

    seeds = args.seeds
    if len(args.checkpoints) != len(seeds):
        raise ValueError(f"--checkpoints: {len(args.checkpoints)} paths for the {len(seeds)} seeds {seeds}")
    if args.features and len(args.features) != len(seeds):
        raise ValueError(f"--features: {len(args.features)} checkpoints for the {len(seeds)} seeds {seeds}")
    members = train_pack(
        job_context(args),
        args.variant,
        seeds,
        args.spec,
        args.training,
        args.checkpoints,
        eval_batch_size=args.eval_batch_size,
        features=args.features,
        cuda_graphs=None if args.cuda_graphs is None else bool(args.cuda_graphs),
        compile_mode=args.compile,
        pack_mode=args.pack_mode,
    )
    write_pack(args.out, dict(zip(seeds, members)))


def cmd_import_member(args) -> None:
    from intertwine.workflow.stages.zoo.job import import_member
    from intertwine.workflow.zoo import refuse_overwrite, save_member

    refuse_overwrite(args.out)
    checkpoint, metrics = import_member(
        job_context(args),
        args.variant,
        args.seed,
        args.spec,
        args.source,
        args.whole_modules,
        args.out,
        eval_batch_size=args.eval_batch_size,
    )
    save_member(checkpoint, metrics, args.out, args.metrics)


def cmd_unpack_member(args) -> None:
    from intertwine.workflow.zoo import unpack_member

    unpack_member(args.pack, args.seed, args.out, args.metrics)


def cmd_zoo_table(args) -> None:
    from intertwine.workflow.tables import read_parquet, write_parquet
    from intertwine.workflow.stages.zoo.tables import ZOO, ZOO_EPOCHS
    from intertwine.workflow.stages.zoo.study import zoo_table

    epochs = read_parquet(args.metrics, ZOO_EPOCHS)
    write_parquet(epochs, args.epochs_out, ZOO_EPOCHS)
    write_parquet(zoo_table([epochs]), args.out, ZOO)


def cmd_zoo_figure(args) -> None:
    from intertwine.workflow.paper import reported_accuracy
    from intertwine.workflow.tables import read_parquet, write_csv
    from intertwine.workflow.stages.zoo.figures import zoo_accuracy, zoo_summary
    from intertwine.workflow.stages.zoo.tables import ZOO

    zoo = read_parquet([args.zoo], ZOO)
    reported = (
        {name: reported_accuracy(spec) for name, spec in args.variants.items()}
        if args.dataset == "cifar10"
        else {}
    )
    save_figure_files(zoo_accuracy(zoo, reported), args.out, args.other_formats, args.figures)
    write_csv(zoo_summary(zoo, reported), args.summary)


def add_commands(cli: Commands) -> None:
    """Add this stage's subcommands to the command line."""
    _add_training_commands(cli)
    _add_table_and_figure_commands(cli)


def _add_training_commands(cli: Commands) -> None:
    """The training jobs: a member, a pack, a pack's member."""
    p = cli.add(
        "train-member",
        cmd_train_member,
        "train one zoo member",
        [cli.job],
        out="its checkpoint .pt (never overwritten)",
        options=["--training", "--eval-batch-size"],
        rules={"--out": "{output.checkpoint}"},
    )
    p.add_argument(
        "--variant",
        required=True,
        rule="{wildcards.variant}",
        help="the variant's name in zoo.variants (names the outputs)",
    )
    p.add_argument("--seed", type=integer(0), required=True, rule="{wildcards.seed}", help="zoo member seed")
    p.add_argument(
        "--spec",
        type=json_object,
        required=True,
        rule="{params.spec:q}",
        help="the variant's model spec (JSON)",
    )
    p.add_argument(
        "--metrics", required=True, rule="{output.metrics}", help="output per-epoch metrics .parquet"
    )
    p.add_argument(
        "--features",
        rule=WHEN_GIVEN,
        help="a gated FL variant's feature network: the checkpoint of the trained member named by gated.features_from",
    )
    p = cli.add(
        "train-pack",
        cmd_train_pack,
        "train several zoo members of a variant together (zoo.pack_size)",
        [cli.job],
        out="the pack directory (never overwritten): per member a checkpoint and metrics, or a .diverged note",
        options=["--training", "--eval-batch-size", "--cuda-graphs", "--pack-mode", "--compile"],
    )
    p.add_argument(
        "--variant",
        required=True,
        rule="{wildcards.variant}",
        help="the variant's name in zoo.variants (names the outputs)",
    )
    p.add_argument(
        "--seeds",
        required=True,
        type=seed_range,
        rule="{wildcards.first}-{wildcards.last}",
        help="the members, first-last (e.g. 0-3), consecutive",
    )
    p.add_argument(
        "--spec",
        type=json_object,
        required=True,
        rule="{params.spec:q}",
        help="the variant's model spec (JSON)",
    )
    p.add_argument(
        "--checkpoints",
        nargs="+",
        required=True,
        rule="{params.checkpoints}",
        help="each member's own checkpoint path (its metrics record it)",
    )
    p.add_argument(
        "--features",
        nargs="+",
        rule=WHEN_GIVEN,
        help="a gated FL variant's feature networks, one checkpoint per seed",
    )

    _add_import_command(cli)


def _add_import_command(cli: Commands) -> None:
    """A member taken from a checkpoint trained elsewhere (zoo.checkpoints)."""
    p = cli.add(
        "import-member",
        cmd_import_member,
        "take a zoo member from a checkpoint trained elsewhere (zoo.checkpoints): fit, test and record it",
        [cli.job],
        out="its checkpoint .pt (never overwritten)",
        options=["--eval-batch-size"],
        rules={"--out": "{output.checkpoint}"},
    )
    p.add_argument(
        "--variant", required=True, rule="{wildcards.variant}", help="the variant's name in zoo.variants"
    )
    p.add_argument("--seed", type=integer(0), required=True, rule="{wildcards.seed}", help="zoo member seed")
    p.add_argument(
        "--spec",
        type=json_object,
        required=True,
        rule="{params.spec:q}",
        help="the variant's model spec (JSON)",
    )
    p.add_argument(
        "--source", required=True, rule="{input.source:q}", help="the checkpoint file trained elsewhere"
    )
    p.add_argument(
        "--whole-modules",
        action="store_true",
        rule=WHEN_GIVEN,
        help="unpickle a whole saved module (runs the file's code: only for files you trust)",
    )
    p.add_argument(
        "--metrics", required=True, rule="{output.metrics}", help="output metrics .parquet (one row)"
    )


def _add_table_and_figure_commands(cli: Commands) -> None:
    """The zoo's table and figure."""
    p = cli.add(
        "unpack-member",
        cmd_unpack_member,
        "give a member of a trained pack its checkpoint and metrics paths (hard links)",
        out="its checkpoint .pt (never overwritten)",
        rules={"--out": "{output.checkpoint}"},
    )
    p.add_argument("--pack", required=True, rule="{input.pack}", help="the pack directory (train-pack --out)")
    p.add_argument("--seed", type=integer(0), required=True, rule="{wildcards.seed}", help="zoo member seed")
    p.add_argument("--metrics", required=True, rule="{output.metrics}", help="its per-epoch metrics .parquet")
    p = cli.add(
        "zoo-table",
        cmd_zoo_table,
        "aggregate per-model metrics into the zoo tables",
        out="zoo.parquet: one row per model",
        rules={"--out": "{output.zoo}"},
    )
    p.add_argument("metrics", nargs="+", rule="{input}", help="per-model metrics .parquet files")
    p.add_argument(
        "--epochs-out", required=True, rule="{output.epochs}", help="zoo_epochs.parquet: one row per epoch"
    )
    # --- figures
    p = cli.add(
        "zoo-figure",
        cmd_zoo_figure,
        "accuracy distribution per variant and its summary",
        [cli.figure],
        out="figure (.png)",
        options=["--variants", "--dataset", "--summary"],
        rules={"--out": "{output.png}"},
    )
    p.add_argument("--zoo", required=True, rule="{input}", help="zoo.parquet")
