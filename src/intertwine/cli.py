"""Command line: ``intertwine <stage> ...``, the only thing the workflow's rules call.

Each torch job's subcommand is named like its rule and its function in ``intertwine.jobs``
(``stitch-pair``: rule ``stitch_pair``, ``jobs.stitching.stitch_pair``) and takes the options every job
shares: ``--data``, ``--global-seed``, ``--device``, ``--threads``. Config blocks are passed as
JSON strings, exactly as the workflow holds them, and every command first logs itself, so any job
can be rerun by hand from the command its log prints.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import shlex
import sys
from pathlib import Path


def _json(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not valid JSON ({err}): {text[:80]}") from err


def _json_object(text: str) -> dict:
    """A JSON object (a config block, a spec, {name: value})."""
    value = _json(text)
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object {{...}}, got {text[:80]}")
    return value


def _json_names(text: str) -> list[str]:
    """A JSON list of distinct strings, e.g. '["act1", "act2"]'."""
    value = _json(text)
    if not (isinstance(value, list) and all(isinstance(item, str) for item in value)):
        raise argparse.ArgumentTypeError(
            f'expected a JSON list of strings, e.g. \'["act1", "act2"]\', got {text[:80]}'
        )
    repeated = sorted({item for item in value if value.count(item) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(f"{repeated} listed more than once")
    return value


def _json_names_or_null(text: str) -> list[str] | None:
    """``_json_names``, or JSON null for the default."""
    return None if _json(text) is None else _json_names(text)


def _json_numbers(text: str) -> dict[str, float]:
    """A JSON object of numbers, e.g. '{"resnet20": 0, "resnet20_leaky": 0.5}'."""
    value = _json_object(text)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value.values()):
        raise argparse.ArgumentTypeError(f"expected a JSON object of numbers, got {text[:80]}")
    return value


def _seed_range(text: str) -> list[int]:
    """An argparse type: ``first-last`` (or one seed), the seeds first .. last."""
    first, _, last = text.partition("-")
    try:
        seeds = list(range(int(first), int(last or first) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected first-last, e.g. 0-3, got {text!r}") from None
    if not seeds or seeds[0] < 0:
        raise argparse.ArgumentTypeError(f"expected 0 <= first <= last, got {text!r}")
    return seeds


def _claims_table(text: str) -> tuple[str, str]:
    """A claims table as NAME=PATH: (name, path), the name one the scorecard reads."""
    from intertwine.tables import CLAIMS_SCHEMAS

    name, equals, path = text.partition("=")
    if not equals or not name or not path:
        raise argparse.ArgumentTypeError(
            f"expected NAME=PATH (e.g. rotation=results/tables/rotation.parquet), got {text!r}"
        )
    if name not in CLAIMS_SCHEMAS:
        close = difflib.get_close_matches(name, CLAIMS_SCHEMAS, n=1)
        raise argparse.ArgumentTypeError(
            f"unknown table {name!r}"
            + (f" (did you mean {close[0]!r}?)" if close else "")
            + f"; the tables are {', '.join(CLAIMS_SCHEMAS)}"
        )
    return name, path


def _integer(minimum: int):
    """An argparse type: an integer of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    parse.__name__ = "integer"  # argparse names the type in its messages
    return parse


def _device(text: str) -> str:
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"expected auto, cpu, cuda or cuda:<n>, got {text!r}")
    return text


def _method(text: str) -> str:
    from intertwine.settings import parse_method

    try:
        parse_method(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def _variances(text: str) -> tuple[float, float, float]:
    """A DEQ-NTK variance setting by its name, e.g. w0.25_u0.25_b0.5."""
    from intertwine.settings import parse_variances

    try:
        return parse_variances(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _schema_enum(*path: str) -> list[str]:
    """The values the config schema allows at ``path`` (an enum), so the CLI takes the same."""
    from intertwine.settings import schema

    node = schema()
    for part in path:
        node = node[part]
    return list(node["enum"])


# The tables `intertwine table --schema` writes: the pyarrow schemas of intertwine.tables (named
# here, so that the parser does not import pyarrow; tests/test_cli.py checks the two agree).
TABLE_SCHEMAS = (
    "zoo",
    "zoo_epochs",
    "symmetry",
    "rotation",
    "stitching",
    "similarity",
    "connectivity",
    "dissection",
    "dissection_units",
    "gated",
    "gated_ensemble",
    "npk",
    "deqntk",
    "kernel_reference",
    "pullback_symmetry",
    "pullback_agreement",
    "pullback_faithfulness",
    "pullback_transfer",
    "pullback_settling",
    "pullback_external",
)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _save(fig, path: str, other_formats: list[str], figures: dict) -> None:
    """Save ``fig`` as ``path`` and as each of ``other_formats`` with the same file name stem."""
    from intertwine.workflow.plotting import save_figure

    stem = Path(path).stem
    save_figure(fig, [path, *(p for p in other_formats if Path(p).stem == stem)], dpi=figures["dpi"])


def _job(args):
    """The job context of a torch command's shared options."""
    from intertwine.jobs import Job

    return Job(args.device, args.data, args.global_seed, _log)


def cmd_check_config(args) -> None:
    from intertwine.config import check_config, load_config

    config = load_config(args.files)
    errors = check_config(config)
    if errors:
        raise ValueError(f"{', '.join(args.files)}:\n" + "\n".join(errors))
    print(f"{', '.join(args.files)}: valid ({len(config['zoo']['variants'])} zoo variants)")


def cmd_prepare_data(args) -> None:
    from intertwine.data import build_dataset, write_dataset

    splits, meta = build_dataset(args.config, args.global_seed)
    write_dataset(args.out, splits, meta)
    _log(
        f"{meta['dataset']}: "
        + ", ".join(f"{k} {v}" for k, v in meta["sizes"].items())
        + f" images of {meta['image_size']} pixels in {args.out}"
    )


def cmd_train_member(args) -> None:
    from intertwine.jobs.zoo import train_member
    from intertwine.tables import ZOO_EPOCHS, write_parquet
    from intertwine.zoo import refuse_overwrite, save_checkpoint

    refuse_overwrite(args.out)  # fail before training, not after
    checkpoint, metrics = train_member(
        _job(args),
        args.variant,
        args.seed,
        args.spec,
        args.training,
        args.out,
        eval_batch_size=args.eval_batch_size,
        features=args.features,
    )
    write_parquet(metrics, args.metrics, ZOO_EPOCHS)
    save_checkpoint(checkpoint, args.out)


def cmd_train_pack(args) -> None:
    from intertwine.jobs.zoo import train_pack
    from intertwine.zoo import write_pack

    seeds = args.seeds
    if len(args.checkpoints) != len(seeds):
        raise ValueError(f"--checkpoints: {len(args.checkpoints)} paths for the {len(seeds)} seeds {seeds}")
    if args.features and len(args.features) != len(seeds):
        raise ValueError(f"--features: {len(args.features)} checkpoints for the {len(seeds)} seeds {seeds}")
    members = train_pack(
        _job(args),
        args.variant,
        seeds,
        args.spec,
        args.training,
        args.checkpoints,
        eval_batch_size=args.eval_batch_size,
        features=args.features,
    )
    write_pack(args.out, dict(zip(seeds, members)))


def cmd_unpack_member(args) -> None:
    from intertwine.zoo import unpack_member

    unpack_member(args.pack, args.seed, args.out, args.metrics)


def cmd_claims(args) -> None:
    import pandas as pd

    from intertwine.claims import as_rst, scorecard
    from intertwine.tables import CLAIMS_SCHEMAS, GATED_FINDINGS_COLUMNS, read_parquet, write_csv
    from intertwine.utils import atomic_path

    names = [name for name, _ in args.table]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"--table {twice[0]}= is given twice; give each table once")
    tables = {}
    for name, path in args.table:
        schema = CLAIMS_SCHEMAS[name]
        try:
            if schema is None:
                tables[name] = pd.read_csv(path)
                missing = [c for c in GATED_FINDINGS_COLUMNS if c not in tables[name].columns]
                if missing:
                    raise ValueError(
                        f"{path}: does not have the table's columns (missing {missing}); it was written by "
                        "another stage or an older version: delete it and rerun its job"
                    )
            else:
                tables[name] = read_parquet([path], schema)
        except ValueError as err:
            raise ValueError(f"--table {name}: {err}") from None
    findings = tables.pop("gated_findings", None)
    card = scorecard(tables, args.settings, findings)
    write_csv(card, args.out)
    with atomic_path(args.rst) as tmp:
        tmp.write_text(as_rst(card, set(args.figures)))
    counts = card["verdict"].value_counts()
    _log(f"{len(card)} claims: " + ", ".join(f"{n} {verdict}" for verdict, n in counts.items()))


def cmd_rotation_trial(args) -> None:
    from intertwine.jobs.rotation import rotation_trial
    from intertwine.tables import ROTATION, write_parquet

    row = rotation_trial(
        _job(args),
        args.checkpoint,
        args.site,
        args.group,
        args.trial,
        args.config,
        args.training,
        eval_batch_size=args.eval_batch_size,
    )
    write_parquet(row, args.out, ROTATION)


def cmd_stitch_pair(args) -> None:
    from intertwine.jobs.stitching import stitch_pair
    from intertwine.tables import STITCHING, write_parquet

    rows = stitch_pair(_job(args), args.a, args.b, args.method, args.pair, args.config, args.sites)
    write_parquet(rows, args.out, STITCHING)


def cmd_similarity_pair(args) -> None:
    from intertwine.jobs.similarity import similarity_pair
    from intertwine.tables import SIMILARITY, write_parquet

    rows = similarity_pair(_job(args), args.a, args.b, args.pair, args.config, args.procrustes, args.cka)
    write_parquet(rows, args.out, SIMILARITY)


def cmd_connectivity_pair(args) -> None:
    from intertwine.jobs.connectivity import connectivity_pair
    from intertwine.tables import CONNECTIVITY, write_parquet

    write_parquet(
        connectivity_pair(_job(args), args.a, args.b, args.pair, args.config), args.out, CONNECTIVITY
    )


def cmd_symmetry_check(args) -> None:
    from intertwine.jobs.symmetry import symmetry_check
    from intertwine.tables import SYMMETRY, write_parquet

    write_parquet(symmetry_check(_job(args), args.checkpoint, args.config), args.out, SYMMETRY)


def cmd_npk_member(args) -> None:
    from intertwine.jobs.gated import npk_member
    from intertwine.tables import NPK, write_parquet

    write_parquet(npk_member(_job(args), args.checkpoint, args.config), args.out, NPK)


def cmd_gated_ensemble(args) -> None:
    from intertwine.jobs.gated import gated_ensemble
    from intertwine.tables import GATED_ENSEMBLE, write_parquet

    rows = gated_ensemble(_job(args), args.checkpoints, args.eval_batch_size or 500)
    write_parquet(rows, args.out, GATED_ENSEMBLE)


def cmd_gated_table(args) -> None:
    from intertwine import gated
    from intertwine.models import normalize_spec
    from intertwine.tables import GATED, GATED_ENSEMBLE, NPK, ZOO, read_parquet, write_csv, write_parquet

    specs = {variant: normalize_spec(args.variants[variant]) for variant in args.study}
    table = gated.study_table(read_parquet([args.zoo], ZOO), specs, args.dataset, args.epochs)
    write_parquet(table, args.out, GATED)
    write_parquet(read_parquet(args.parts, NPK), args.npk_out, NPK)
    write_csv(gated.findings(table, args.epochs), args.findings)
    ensembles = (
        read_parquet(args.ensembles, GATED_ENSEMBLE)
        if args.ensembles
        else GATED_ENSEMBLE.empty_table().to_pandas()
    )
    write_csv(gated.ensemble_table(ensembles, specs, args.dataset, args.epochs), args.ensembles_out)


def cmd_gated_figure(args) -> None:
    from intertwine.workflow.stages.gated.figures import gated_accuracy, gated_kernels, gated_permutations
    from intertwine.tables import GATED, NPK, SIMILARITY, read_parquet

    table = read_parquet([args.table], GATED)
    _save(gated_accuracy(table), args.accuracy, args.other_formats, args.figures)
    if args.permutations:
        _save(gated_permutations(table), args.permutations, args.other_formats, args.figures)
    similarity = read_parquet([args.similarity], SIMILARITY) if args.similarity else None
    _save(
        gated_kernels(read_parquet([args.npk], NPK), similarity),
        args.kernels,
        args.other_formats,
        args.figures,
    )


def cmd_deqntk_gram(args) -> None:
    from intertwine.jobs.deqntk import deqntk_gram, save_block

    if args.stop <= args.start:
        raise ValueError(f"--stop ({args.stop}) must be greater than --start ({args.start})")
    block = deqntk_gram(
        _job(args), args.variances, args.n_train, args.part, args.start, args.stop, args.config
    )
    save_block(block, args.out)


def cmd_deqntk_regression(args) -> None:
    from intertwine.jobs.deqntk import deqntk_regression
    from intertwine.tables import DEQNTK, write_parquet

    row = deqntk_regression(_job(args), args.variances, args.n_train, args.blocks, args.config)
    write_parquet(row, args.out, DEQNTK)


def cmd_deqntk_depth(args) -> None:
    from intertwine.jobs.deqntk import deqntk_depth
    from intertwine.tables import DEQNTK, write_parquet

    write_parquet(deqntk_depth(_job(args), args.draw, args.config), args.out, DEQNTK)


def cmd_deqntk_conv(args) -> None:
    from intertwine.jobs.deqntk import deqntk_conv
    from intertwine.tables import DEQNTK, write_parquet

    write_parquet(deqntk_conv(_job(args), args.config), args.out, DEQNTK)


def cmd_kernel_reference_member(args) -> None:
    from intertwine.jobs.deqntk import kernel_reference_member
    from intertwine.tables import KERNEL_REFERENCE, write_parquet

    write_parquet(
        kernel_reference_member(_job(args), args.checkpoint, args.config), args.out, KERNEL_REFERENCE
    )


def cmd_deqntk_table(args) -> None:
    from intertwine.paper import reported_deqntk
    from intertwine.tables import DEQNTK, read_parquet, write_parquet

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
    from intertwine.workflow.stages.deqntk.figures import deqntk_accuracy, deqntk_depth, deqntk_reference
    from intertwine.paper import DEQNTK_ACCURACY
    from intertwine.tables import DEQNTK, KERNEL_REFERENCE, ZOO, read_parquet

    if (args.accuracy or args.depth) and not args.table:
        raise ValueError("--accuracy and --depth draw deqntk.parquet: give it as --table")
    if args.kernel_reference and not args.reference:
        raise ValueError("--kernel-reference draws kernel_reference.parquet: give it as --reference")
    save = lambda fig, path: _save(fig, path, args.other_formats, args.figures)  # noqa: E731
    table = read_parquet([args.table], DEQNTK) if args.table else None
    if args.accuracy:
        zoo = read_parquet([args.zoo], ZOO) if args.zoo else None
        dataset = table["dataset"].iloc[0] if len(table) else None
        save(deqntk_accuracy(table, zoo, DEQNTK_ACCURACY.get(dataset, {})), args.accuracy)
    if args.depth:
        save(deqntk_depth(table), args.depth)
    if args.kernel_reference:
        save(deqntk_reference(read_parquet([args.reference], KERNEL_REFERENCE)), args.kernel_reference)


def cmd_pullback_member(args) -> None:
    from intertwine.jobs.pullback import pullback_member
    from intertwine.tables import PULLBACK_FAITHFULNESS, PULLBACK_SYMMETRY, write_parquet

    symmetry, faithfulness = pullback_member(_job(args), args.checkpoint, args.config)
    write_parquet(faithfulness, args.faithfulness_out, PULLBACK_FAITHFULNESS)
    write_parquet(symmetry, args.out, PULLBACK_SYMMETRY)


def cmd_pullback_pair(args) -> None:
    from intertwine.jobs.pullback import pullback_pair
    from intertwine.tables import PULLBACK_AGREEMENT, PULLBACK_TRANSFER, write_parquet

    rows, transfer = pullback_pair(_job(args), args.a, args.b, args.pair, args.config, args.sites)
    write_parquet(transfer, args.transfer_out, PULLBACK_TRANSFER)
    write_parquet(rows, args.out, PULLBACK_AGREEMENT)


def cmd_pullback_images(args) -> None:
    from intertwine.workflow.stages.pullback.figures import pullback_grid, pullback_pgd
    from intertwine.jobs.pullback import pullback_images

    arrays = pullback_images(_job(args), args.checkpoint, args.config)
    _save(pullback_grid(arrays), args.out, args.other_formats, args.figures)
    _save(pullback_pgd(arrays), args.pgd, args.other_formats, args.figures)


def cmd_pullback_table(args) -> None:
    from intertwine.pullback_study import summarize
    from intertwine.tables import (
        PULLBACK_AGREEMENT,
        PULLBACK_FAITHFULNESS,
        PULLBACK_SYMMETRY,
        PULLBACK_TRANSFER,
        read_parquet,
        write_csv,
        write_parquet,
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
    from intertwine.workflow.stages.pullback.figures import pullback_external as figure
    from intertwine.jobs.pullback import pullback_external
    from intertwine.tables import PULLBACK_EXTERNAL, write_parquet

    table, arrays = pullback_external(_job(args), args.name, args.arch, args.weights, args.entry, args.config)
    _save(figure(arrays), args.figure, args.other_formats, args.figures)
    _save(figure(arrays, perturbed=True), args.perturbed_figure, args.other_formats, args.figures)
    write_parquet(table, args.out, PULLBACK_EXTERNAL)


def cmd_pullback_settling(args) -> None:
    from intertwine.workflow.stages.pullback.figures import pullback_settling as figure
    from intertwine.jobs.pullback import pullback_settling
    from intertwine.tables import PULLBACK_SETTLING, write_parquet

    table = pullback_settling(args.checkpoints)
    write_parquet(table, args.out, PULLBACK_SETTLING)
    _save(figure(table), args.figure, args.other_formats, args.figures)


def cmd_pullback_figure(args) -> None:
    from intertwine.workflow.stages.pullback.figures import (
        pullback_agreement,
        pullback_faithfulness,
        pullback_symmetry,
        pullback_temperature,
        pullback_transfer,
    )
    from intertwine.tables import (
        PULLBACK_AGREEMENT,
        PULLBACK_FAITHFULNESS,
        PULLBACK_SYMMETRY,
        PULLBACK_TRANSFER,
        read_parquet,
    )

    save = lambda fig, path: _save(fig, path, args.other_formats, args.figures)  # noqa: E731
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


def cmd_dissect_member(args) -> None:
    from intertwine.jobs.dissection import dissect_member
    from intertwine.tables import DISSECTION, DISSECTION_UNITS, write_parquet

    summary, units = dissect_member(_job(args), args.checkpoint, args.sites, args.config)
    write_parquet(units, args.units_out, DISSECTION_UNITS)
    write_parquet(summary, args.out, DISSECTION)


def cmd_dissect_external(args) -> None:
    from intertwine.jobs.dissection import dissect_external
    from intertwine.tables import DISSECTION, DISSECTION_UNITS, write_parquet

    summary, units = dissect_external(_job(args), args.name, args.arch, args.weights, args.config, args.sites)
    write_parquet(units, args.units_out, DISSECTION_UNITS)
    write_parquet(summary, args.out, DISSECTION)


def cmd_dissection_masks(args) -> None:
    from intertwine.workflow.stages.dissection.figures import dissection_masks as draw_masks
    from intertwine.jobs.dissection import dissection_masks
    from intertwine.tables import DISSECTION_UNITS, read_parquet

    units = read_parquet([args.units], DISSECTION_UNITS)
    images, panels = dissection_masks(_job(args), args.checkpoint, args.site, args.config, units)
    _save(draw_masks(images.numpy(), panels), args.out, args.other_formats, args.figures)


def cmd_zoo_table(args) -> None:
    from intertwine.tables import ZOO, ZOO_EPOCHS, read_parquet, write_parquet
    from intertwine.zoo import zoo_table

    epochs = read_parquet(args.metrics, ZOO_EPOCHS)
    write_parquet(epochs, args.epochs_out, ZOO_EPOCHS)
    write_parquet(zoo_table([epochs]), args.out, ZOO)


def cmd_symmetry_table(args) -> None:
    from intertwine.symmetry_study import summarize
    from intertwine.tables import SYMMETRY, read_parquet, write_csv, write_parquet

    table = read_parquet(args.parts, SYMMETRY)
    write_parquet(table, args.out, SYMMETRY)
    write_csv(summarize(table), args.summary, float_format="%.3g")


def cmd_table(args) -> None:
    from intertwine import tables

    schema = getattr(tables, args.schema.upper())
    tables.write_parquet(tables.read_parquet(args.parts, schema), args.out, schema)


def cmd_zoo_figure(args) -> None:
    from intertwine.workflow.stages.zoo.figures import zoo_accuracy, zoo_summary
    from intertwine.paper import reported_accuracy
    from intertwine.tables import ZOO, read_parquet, write_csv

    zoo = read_parquet([args.zoo], ZOO)
    reported = (
        {name: reported_accuracy(spec) for name, spec in args.variants.items()}
        if args.dataset == "cifar10"
        else {}
    )
    _save(zoo_accuracy(zoo, reported), args.out, args.other_formats, args.figures)
    write_csv(zoo_summary(zoo, reported), args.summary)


def cmd_rotation_figure(args) -> None:
    from intertwine.workflow.stages.rotation.figures import rotation_penalty
    from intertwine.tables import ROTATION, read_parquet

    _save(rotation_penalty(read_parquet([args.table], ROTATION)), args.out, args.other_formats, args.figures)


def cmd_stitching_figure(args) -> None:
    from intertwine.workflow.stages.stitching.figures import (
        stitching_convergence,
        stitching_dimension,
        stitching_penalty,
        stitching_summary,
    )
    from intertwine.tables import STITCHING, read_parquet, write_csv

    table = read_parquet([args.table], STITCHING)
    _save(stitching_penalty(table), args.penalty, args.other_formats, args.figures)
    _save(stitching_dimension(table), args.dimension, args.other_formats, args.figures)
    _save(stitching_convergence(table), args.convergence, args.other_formats, args.figures)
    write_csv(stitching_summary(table), args.summary)


def cmd_stitching_studies(args) -> None:
    """The appendix studies' figures, each drawn only when its file is asked for."""
    from intertwine.workflow.stages.stitching import figures
    from intertwine.tables import ZOO, read_parquet, write_csv

    table = read_parquet([args.table])  # no schema: the studies read only the columns they need
    save = lambda fig, path: _save(fig, path, args.other_formats, args.figures)  # noqa: E731
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


def cmd_similarity_figure(args) -> None:
    from intertwine.workflow.stages.similarity.figures import (
        similarity_cka,
        similarity_procrustes,
        similarity_summary,
    )
    from intertwine.tables import SIMILARITY, read_parquet, write_csv

    from intertwine.paper import reported_procrustes

    table = read_parquet([args.table], SIMILARITY)
    paper = (
        {name: reported_procrustes(spec) for name, spec in args.variants.items()}
        if args.dataset == "cifar10"
        else {}
    )
    if args.procrustes:
        _save(similarity_procrustes(table, paper), args.procrustes, args.other_formats, args.figures)
    if args.cka:
        _save(similarity_cka(table), args.cka, args.other_formats, args.figures)
    write_csv(similarity_summary(table, paper), args.summary)


def cmd_connectivity_figure(args) -> None:
    from intertwine.workflow.stages.connectivity.figures import (
        connectivity_barriers,
        connectivity_curves,
        connectivity_summary,
    )
    from intertwine.tables import CONNECTIVITY, read_parquet, write_csv

    table = read_parquet([args.table], CONNECTIVITY)
    _save(connectivity_curves(table), args.curves, args.other_formats, args.figures)
    _save(
        connectivity_barriers(table, args.families, args.barrier),
        args.barriers,
        args.other_formats,
        args.figures,
    )
    write_csv(connectivity_summary(table, args.barrier), args.summary)


def cmd_dissection_figure(args) -> None:
    from intertwine.workflow.stages.dissection.figures import (
        dissection_categories,
        dissection_fraction,
        dissection_summary,
    )
    from intertwine.tables import DISSECTION, DISSECTION_UNITS, read_parquet, write_csv

    table = read_parquet([args.table], DISSECTION)
    _save(dissection_fraction(table), args.fraction, args.other_formats, args.figures)
    _save(
        dissection_categories(read_parquet([args.units], DISSECTION_UNITS), args.category_sites),
        args.categories,
        args.other_formats,
        args.figures,
    )
    write_csv(dissection_summary(table), args.summary)


def build_parser() -> argparse.ArgumentParser:
    from intertwine import __version__

    parser = argparse.ArgumentParser(
        prog="intertwine",
        description=(
            "intertwine: model zoos and the symmetries of their internal representations. These "
            "commands are the jobs of the Snakemake workflow (each is named like its rule); run the "
            "workflow itself with `make run` (the default config) or `snakemake --cores N "
            "[--configfile FILE]`. `intertwine check-config FILE` checks a config as the workflow does."
        ),
        epilog="Every job's log starts with the command that reruns it; `intertwine <command> --help` says more.",
    )
    parser.add_argument("--version", action="version", version=f"intertwine {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    # Options every torch job takes, and those of every figure command: one parent parser each.
    job = argparse.ArgumentParser(add_help=False)
    job.add_argument(
        "--data",
        help="data cache directory, e.g. results/data/shapes (read by every job but dissect-external)",
    )
    job.add_argument("--global-seed", type=int, default=0, help="the config's seed")
    job.add_argument(
        "--device", type=_device, default="auto", help="torch device: auto (CUDA when present), cpu, cuda[:n]"
    )
    job.add_argument("--threads", type=_integer(1), default=1, help="CPU threads for torch (at least 1)")
    figure = argparse.ArgumentParser(add_help=False)
    figure.add_argument("--figures", type=_json_object, required=True, help="the `figures` block (JSON)")
    figure.add_argument(
        "--other-formats",
        nargs="*",
        default=[],
        help="more files of the same figures (.pdf, .svg), matched by file name",
    )
    # Options several commands take in the same sense, each defined once here.
    same = {
        "--checkpoint": dict(required=True, help="trained zoo member (.pt)"),
        "--a": dict(required=True, help="zoo member a (.pt); stitching: f, whose layers run up to the site"),
        "--b": dict(required=True, help="zoo member b (.pt); stitching: g, whose layers run after the site"),
        "--pair": dict(type=_integer(0), required=True, help="the pair's index (seeds its random draws)"),
        "--site": dict(required=True, help="activation site"),
        "--training": dict(
            type=_json_object, required=True, help="the variant's `zoo.training` block (JSON)"
        ),
        "--eval-batch-size": dict(
            type=_integer(1),
            default=None,
            help="evaluation batch size (zoo.training.eval_batch_size; speed only, "
            "so the workflow passes it beside --training)",
        ),
        "--units-out": dict(required=True, help=".parquet, one row per unit of each --out row"),
        "--table": dict(required=True, help="the stage's table (.parquet)"),
        "--summary": dict(required=True, help="summary table .csv"),
        "--variants": dict(type=_json_object, required=True, help="the `zoo.variants` block (JSON)"),
        "--dataset": dict(
            required=True,
            choices=_schema_enum("properties", "data", "properties", "dataset"),
            help="the data set (the paper's numbers are shown for cifar10)",
        ),
    }

    def command(name, func, help, parents=(), out=None, config=None, options=()):
        """A subcommand; ``out`` is the help of its --out, ``config`` the config block its
        --config holds, ``options`` those of ``same`` it takes."""
        p = sub.add_parser(name, help=help, description=help, parents=list(parents))
        p.set_defaults(func=func)
        if out:
            p.add_argument("--out", required=True, help=out)
        if config:
            p.add_argument("--config", type=_json_object, required=True, help=f"the `{config}` block (JSON)")
        for option in options:
            p.add_argument(option, **same[option])
        return p

    p = command(
        "check-config",
        cmd_check_config,
        "check config files as the workflow does: the schema, then the plan's cross-checks",
    )
    p.add_argument(
        "files",
        nargs="+",
        help="config files, merged in order as by snakemake --configfile (later over earlier)",
    )

    # --- torch jobs, named like their rules and their functions in intertwine.jobs
    p = command(
        "prepare-data",
        cmd_prepare_data,
        "generate or decode the data set into the cache",
        out="cache directory, e.g. results/data/shapes",
        config="data",
    )
    p.add_argument("--global-seed", type=int, default=0, help="the config's seed")
    p = command(
        "train-member",
        cmd_train_member,
        "train one zoo member",
        [job],
        out="its checkpoint .pt (never overwritten)",
        options=["--training", "--eval-batch-size"],
    )
    p.add_argument("--variant", required=True, help="the variant's name in zoo.variants (names the outputs)")
    p.add_argument("--seed", type=_integer(0), required=True, help="zoo member seed")
    p.add_argument("--spec", type=_json_object, required=True, help="the variant's model spec (JSON)")
    p.add_argument("--metrics", required=True, help="output per-epoch metrics .parquet")
    p.add_argument(
        "--features",
        help="a gated FL variant's feature network: the checkpoint of the trained member named by gated.features_from",
    )
    p = command(
        "train-pack",
        cmd_train_pack,
        "train several zoo members of a variant together (zoo.pack_size)",
        [job],
        out="the pack directory (never overwritten): per member a checkpoint and metrics, or a .diverged note",
        options=["--training", "--eval-batch-size"],
    )
    p.add_argument("--variant", required=True, help="the variant's name in zoo.variants (names the outputs)")
    p.add_argument(
        "--seeds", required=True, type=_seed_range, help="the members, first-last (e.g. 0-3), consecutive"
    )
    p.add_argument("--spec", type=_json_object, required=True, help="the variant's model spec (JSON)")
    p.add_argument(
        "--checkpoints",
        nargs="+",
        required=True,
        help="each member's own checkpoint path (its metrics record it)",
    )
    p.add_argument(
        "--features", nargs="+", help="a gated FL variant's feature networks, one checkpoint per seed"
    )
    p = command(
        "unpack-member",
        cmd_unpack_member,
        "give a member of a trained pack its checkpoint and metrics paths (hard links)",
        out="its checkpoint .pt (never overwritten)",
    )
    p.add_argument("--pack", required=True, help="the pack directory (train-pack --out)")
    p.add_argument("--seed", type=_integer(0), required=True, help="zoo member seed")
    p.add_argument("--metrics", required=True, help="its per-epoch metrics .parquet")
    p = command(
        "rotation-trial",
        cmd_rotation_trial,
        "one rotation-penalty trial (paper section 3.3)",
        [job],
        out="one-row .parquet",
        config="rotation",
        options=["--checkpoint", "--site", "--training", "--eval-batch-size"],
    )
    p.add_argument(
        "--group",
        required=True,
        choices=_schema_enum(
            "properties", "rotation", "properties", "variants", "additionalProperties", "items"
        ),
        help="the group a random element of which transforms the site",
    )
    p.add_argument("--trial", type=_integer(0), required=True, help="the trial's index (seeds its draw)")
    p = command(
        "stitch-pair",
        cmd_stitch_pair,
        "stitch a pair of zoo members with one method at each site",
        [job],
        out=".parquet, one row per site",
        config="stitching",
        options=["--a", "--b", "--pair"],
    )
    p.add_argument(
        "--method",
        type=_method,
        required=True,
        help="full, rank<r>, l1_<lambda>, grelu, grelu_cv, softsort or monomial",
    )
    p.add_argument(
        "--sites",
        type=_json_names_or_null,
        default=None,
        help="JSON list of sites, or null for all (the default)",
    )
    p = command(
        "similarity-pair",
        cmd_similarity_pair,
        "similarity measures between two zoo members",
        [job],
        out=".parquet, one row per (site_a, site_b, measure)",
        config="similarity",
        options=["--a", "--b", "--pair"],
    )
    p.add_argument("--procrustes", action="store_true", help="Procrustes measures at matching sites")
    p.add_argument("--cka", action="store_true", help="CKA measures for every pair of sites")
    command(
        "connectivity-pair",
        cmd_connectivity_pair,
        "align one zoo member to another by the intertwiner groups and interpolate their weights",
        [job],
        out=".parquet, one row per (method, split, lambda)",
        config="connectivity",
        options=["--a", "--b", "--pair"],
    )
    command(
        "symmetry-check",
        cmd_symmetry_check,
        "check the weight-space symmetry on one zoo member",
        [job],
        out="per-model .parquet",
        config="symmetry",
        options=["--checkpoint"],
    )
    p = command(
        "gated-ensemble",
        cmd_gated_ensemble,
        "the logits of a variant's zoo members averaged, on the test set (the paper's C1GAP-16-ENS)",
        [job],
        out=".parquet, one row",
        options=["--eval-batch-size"],
    )
    p.add_argument("--checkpoints", nargs="+", required=True, help="the ensemble's zoo members (.pt)")
    command(
        "npk-member",
        cmd_npk_member,
        "a zoo member's neural path kernel and gate kernels with their checks",
        [job],
        out="per-member .parquet",
        config="gated",
        options=["--checkpoint"],
    )
    p = command(
        "pullback-member",
        cmd_pullback_member,
        "a zoo member's excitation pullbacks: invariance to its weight symmetries, faithfulness, PGD",
        [job],
        out=".parquet, one row per (group, scale spread, mode)",
        config="pullback",
        options=["--checkpoint"],
    )
    p.add_argument("--faithfulness-out", required=True, help=".parquet, one row per mode")
    p = command(
        "pullback-pair",
        cmd_pullback_pair,
        "the agreement of two zoo members' excitation pullbacks (class logits, matched hidden units)",
        [job],
        out=".parquet, one row per (site, unit, mode)",
        config="pullback",
        options=["--a", "--b", "--pair"],
    )
    p.add_argument("--sites", type=_json_names, required=True, help="JSON list of the hidden units' sites")
    p.add_argument(
        "--transfer-out",
        required=True,
        help=".parquet, PGD transfer across the seeds: one row per direction and mode",
    )
    p = command(
        "pullback-images",
        cmd_pullback_images,
        "a zoo member's gradients and pullbacks of test images, and PGD toward other classes",
        [job, figure],
        out="gradient vs pullback grid (.png)",
        config="pullback",
        options=["--checkpoint"],
    )
    p.add_argument("--pgd", required=True, help="PGD grid (.png)")
    deqntk_options = {
        "--variances": dict(
            type=_variances,
            required=True,
            help="the variance setting, e.g. w0.25_u0.25_b0.5 (sigma_w2, sigma_u2, sigma_b2)",
        ),
        "--n-train": dict(type=_integer(1), required=True),
    }
    p = command(
        "deqntk-gram",
        cmd_deqntk_gram,
        "a block of rows of the DEQ-NTK accuracy study's [train; test] x train Gram",
        [job],
        out="the block (.npz)",
        config="deqntk",
    )
    p.add_argument("--variances", **deqntk_options["--variances"])
    p.add_argument(
        "--n-train",
        **deqntk_options["--n-train"] | {"help": "the Gram's training images (the largest deqntk.n_train)"},
    )
    p.add_argument("--part", required=True, choices=["train", "test"], help="the training or the test rows")
    p.add_argument("--start", type=_integer(0), required=True, help="the block's first row of its part")
    p.add_argument("--stop", type=_integer(1), required=True, help="one past its last row")
    p = command(
        "deqntk-regression",
        cmd_deqntk_regression,
        "kernel regression with the DEQ-NTK of one variance setting and training-set size",
        [job],
        out="one-row .parquet",
        config="deqntk",
    )
    p.add_argument("--variances", **deqntk_options["--variances"])
    p.add_argument(
        "--n-train", **deqntk_options["--n-train"] | {"help": "training images (the Gram's first)"}
    )
    p.add_argument("blocks", nargs="+", help="the Gram's blocks (.npz of deqntk-gram)")
    p = command(
        "deqntk-depth",
        cmd_deqntk_depth,
        "one draw of the depth sweep: the depth-L NTK for each depth beside the DEQ-NTK (Figure 1)",
        [job],
        out=".parquet, one row per kernel",
        config="deqntk",
    )
    p.add_argument("--draw", type=_integer(0), required=True, help="the draw's index (seeds its images)")
    command(
        "deqntk-conv",
        cmd_deqntk_conv,
        "the convolutional DEQ-NTK's kernel regression on a small subset, per variance setting",
        [job],
        out=".parquet, one row per variance setting",
        config="deqntk",
    )
    command(
        "kernel-reference-member",
        cmd_kernel_reference_member,
        "CKA of each site of a zoo member with the DEQ-NTK of the same images",
        [job],
        out=".parquet, one row per (site, kernel)",
        config="deqntk",
        options=["--checkpoint"],
    )
    p = command(
        "dissect-member",
        cmd_dissect_member,
        "network dissection of one zoo member under basis rotations (section 6)",
        [job],
        out=".parquet, one row per (site, alpha, rotation)",
        config="dissection",
        options=["--checkpoint", "--units-out"],
    )
    p.add_argument("--sites", type=_json_names, required=True, help="JSON list of sites")
    p = command(
        "dissect-external",
        cmd_dissect_external,
        "dissect a torchvision ImageNet model (local weights) on Broden",
        [job],
        out=".parquet, one row per (site, alpha, rotation)",
        config="dissection",
        options=["--units-out"],
    )
    p.add_argument("--name", required=True, help="the model's name in the tables (its `variant`)")
    p.add_argument(
        "--arch",
        required=True,
        choices=_schema_enum(
            "properties", "dissection", "properties", "external", "additionalProperties", "properties", "arch"
        ),
        help="torchvision architecture of the weights",
    )
    p.add_argument("--weights", required=True, help="state dict file (.pth)")
    p.add_argument(
        "--sites",
        type=_json_names_or_null,
        default=None,
        help="JSON list of module names, or null for the arch's default",
    )
    p = command(
        "dissection-masks",
        cmd_dissection_masks,
        "top units' regions over probe images (Figs. 21, 23, 25)",
        [job, figure],
        out="figure (.png)",
        config="dissection",
        options=["--checkpoint", "--site"],
    )
    p.add_argument("--units", required=True, help="the member's dissection units (seed0.units.parquet)")

    # --- tables
    p = command(
        "claims",
        cmd_claims,
        "the claims scorecard: which of the papers' findings this run's tables reproduce",
        out="claims.csv: one row per claim",
    )
    p.add_argument(
        "--table",
        action="append",
        default=[],
        metavar="NAME=PATH",
        type=_claims_table,
        help="a stage's table (zoo, symmetry, rotation, stitching, similarity, dissection, gated_findings, "
        "pullback_symmetry, deqntk); a claim whose table is not given reads `not run`",
    )
    p.add_argument(
        "--settings", type=_json_object, required=True, help="the run's settings (Plan.claims_settings, JSON)"
    )
    p.add_argument(
        "--figures", nargs="*", default=[], help="file names of the report's figures a row may link to"
    )
    p.add_argument("--rst", required=True, help="the scorecard as an RST table for the report's opening page")
    p = command(
        "zoo-table",
        cmd_zoo_table,
        "aggregate per-model metrics into the zoo tables",
        out="zoo.parquet: one row per model",
    )
    p.add_argument("metrics", nargs="+", help="per-model metrics .parquet files")
    p.add_argument("--epochs-out", required=True, help="zoo_epochs.parquet: one row per epoch")
    p = command(
        "symmetry-table",
        cmd_symmetry_table,
        "aggregate the symmetry checks and summarise them",
        out="symmetry.parquet",
        options=["--summary"],
    )
    p.add_argument("parts", nargs="+", help="per-member tables (symmetry-check)")
    p = command(
        "gated-table",
        cmd_gated_table,
        "the gated-networks study: accuracy per member beside the paper, kernels, findings",
        out="gated.parquet",
        options=["--variants", "--dataset"],
    )
    p.add_argument("--zoo", required=True, help="zoo.parquet")
    p.add_argument("--study", type=_json_names, required=True, help="JSON list of the study's variants")
    p.add_argument("--epochs", type=_json_object, required=True, help="JSON {variant: training epochs}")
    p.add_argument("--npk-out", required=True, help="npk.parquet: the per-member kernel tables")
    p.add_argument("--findings", required=True, help="the paper's findings and our verdicts (.csv)")
    p.add_argument("--ensembles", nargs="*", default=[], help="logit ensembles' tables (gated-ensemble)")
    p.add_argument(
        "--ensembles-out", required=True, help="gated_ensembles.csv: the ensembles beside the paper's"
    )
    p.add_argument("parts", nargs="+", help="per-member kernel tables (npk-member)")
    p = command(
        "deqntk-table",
        cmd_deqntk_table,
        "the DEQ-NTK regressions and depth sweep in one table, with the paper's accuracies",
        out="deqntk.parquet",
    )
    p.add_argument("parts", nargs="+", help="per-job tables (deqntk-regression, deqntk-depth, deqntk-conv)")
    p = command(
        "pullback-table",
        cmd_pullback_table,
        "the excitation-pullback stage's tables and their summary",
        out="pullback_symmetry.parquet",
        options=["--summary"],
    )
    p.add_argument("--symmetry", nargs="+", required=True, help="per-member symmetry tables")
    p.add_argument("--faithfulness", nargs="+", required=True, help="per-member faithfulness tables")
    p.add_argument("--agreement", nargs="*", default=[], help="per-pair agreement tables (none: no pairs)")
    p.add_argument("--faithfulness-out", required=True, help="pullback_faithfulness.parquet")
    p.add_argument("--agreement-out", required=True, help="pullback_agreement.parquet")
    p.add_argument("--transfer", nargs="*", default=[], help="per-pair PGD transfer tables (none: no pairs)")
    p.add_argument("--transfer-out", required=True, help="pullback_transfer.parquet")
    p = command("table", cmd_table, "concatenate per-job Parquet files into a stage's table", out="the table")
    p.add_argument("parts", nargs="+", help="per-job Parquet files of one stage")
    p.add_argument(
        "--schema", required=True, choices=TABLE_SCHEMAS, help="the table's schema in intertwine.tables"
    )

    # --- figures
    p = command(
        "zoo-figure",
        cmd_zoo_figure,
        "accuracy distribution per variant and its summary",
        [figure],
        out="figure (.png)",
        options=["--variants", "--dataset", "--summary"],
    )
    p.add_argument("--zoo", required=True, help="zoo.parquet")
    command(
        "rotation-figure",
        cmd_rotation_figure,
        "rotation penalty per site and group (Fig. 4)",
        [figure],
        out="figure (.png)",
        options=["--table"],
    )
    p = command(
        "stitching-figure",
        cmd_stitching_figure,
        "stitching penalty and layer dimension per site (Figs. 1, 6, 7)",
        [figure],
        options=["--table", "--summary"],
    )
    p.add_argument("--penalty", required=True, help="penalty figure (.png)")
    p.add_argument("--dimension", required=True, help="parameter dimension figure (.png)")
    p.add_argument(
        "--convergence", required=True, help="G_ReLU layers' off-permutation mass per epoch (.png)"
    )
    p = command(
        "stitching-studies",
        cmd_stitching_studies,
        "appendix D stitching studies: LeakyReLU, alpha by CV, L1, SoftSort, transformers",
        [figure],
        options=["--table"],
    )
    p.add_argument("--zoo", help="zoo.parquet (for --leaky-relu, --leaky-relu-table)")
    p.add_argument("--slopes", type=_json_numbers, help="JSON {variant: LeakyReLU negative slope}, ReLU 0")
    p.add_argument("--transformers", type=_json_names, help="JSON list of the transformer variants")
    p.add_argument("--leaky-relu", help="G_ReLU penalty per slope and zoo accuracy (Fig. 8, Table 3; .png)")
    p.add_argument("--leaky-relu-table", help="zoo accuracy per slope beside Table 3 (.csv)")
    p.add_argument("--alpha-cv", help="alpha chosen by cross-validation (Figs. 13, 14; .png)")
    p.add_argument("--l1", help="penalty against sparsity of L1-regularised stitching (Fig. 15; .png)")
    p.add_argument("--softsort", help="SoftSort against Birkhoff G_ReLU stitching (D.2.2; .png)")
    p.add_argument("--transformer", help="transformer stitching penalty (Fig. 12; .png)")
    p = command(
        "similarity-figure",
        cmd_similarity_figure,
        "Procrustes per site and CKA heatmaps (Table 2, Figs. 2, 5, 9-11)",
        [figure],
        options=["--table", "--dataset", "--variants", "--summary"],
    )
    p.add_argument("--procrustes", help="Procrustes figure (.png)")
    p.add_argument("--cka", help="CKA heatmaps (.png)")
    p = command(
        "connectivity-figure",
        cmd_connectivity_figure,
        "loss and accuracy along the line between aligned members, and the barrier against width",
        [figure],
        options=["--table", "--summary"],
    )
    p.add_argument(
        "--families",
        type=_json_object,
        required=True,
        help="variant -> its architecture without the width (JSON): a panel of the barriers figure each",
    )
    p.add_argument("--curves", required=True, help="loss and accuracy along the line (.png)")
    p.add_argument("--barriers", required=True, help="test-loss barrier per method against width (.png)")
    p.add_argument(
        "--barrier",
        default="endpoints_mean",
        choices=["endpoints_mean", "endpoints_line"],
        help="the barrier drawn and summarised (config connectivity.barrier)",
    )
    p = command(
        "gated-figure",
        cmd_gated_figure,
        "gated networks: accuracy per family beside Table I, over gate permutations, kernels",
        [figure],
        options=["--table"],
    )
    p.add_argument("--npk", required=True, help="npk.parquet")
    p.add_argument("--similarity", help="similarity.parquet (gate, linear and G_ReLU CKA across seeds)")
    p.add_argument("--accuracy", required=True, help="accuracy per family x value input (.png)")
    p.add_argument("--permutations", help="accuracy over gate permutations (.png)")
    p.add_argument("--kernels", required=True, help="kernel CKAs (.png)")
    p = command(
        "pullback-external",
        cmd_pullback_external,
        "the paper's PGD grids (gradient vs pullbacks) for a torchvision ImageNet model on an image folder",
        [job, figure],
        out=".parquet, one row per (mode, image, target)",
        config="pullback",
    )
    p.add_argument("--name", required=True, help="the model's name (pullback.external)")
    p.add_argument(
        "--arch",
        required=True,
        choices=_schema_enum(
            "properties", "pullback", "properties", "external", "additionalProperties", "properties", "arch"
        ),
        help="torchvision architecture of the weights",
    )
    p.add_argument("--weights", required=True, help="state dict file (.pth)")
    p.add_argument(
        "--entry", type=json.loads, required=True, help="JSON: the model's pullback.external entry"
    )
    p.add_argument("--figure", required=True, help="differences grid (.png)")
    p.add_argument("--perturbed-figure", required=True, help="perturbed images grid (.png)")
    p = command(
        "pullback-settling",
        cmd_pullback_settling,
        "Hypothesis 1: how far each recorded epoch's gate pattern is a zoo member's final one",
        [figure],
        out="pullback_settling.parquet",
    )
    p.add_argument("--checkpoints", nargs="+", required=True, help="members that recorded gate patterns")
    p.add_argument("--figure", required=True, help="agreement with the final pattern per epoch (.png)")
    p = command(
        "pullback-figure",
        cmd_pullback_figure,
        "excitation pullbacks: cosine vs scale spread per mode, agreement across seeds, faithfulness",
        [figure],
    )
    p.add_argument("--symmetry", required=True, help="pullback_symmetry.parquet")
    p.add_argument("--faithfulness", required=True, help="pullback_faithfulness.parquet")
    p.add_argument("--agreement", required=True, help="pullback_agreement.parquet")
    p.add_argument("--symmetry-figure", required=True, help="cosine vs scale spread per mode (.png)")
    p.add_argument("--faithfulness-figure", required=True, help="deletion, insertion, PGD success (.png)")
    p.add_argument("--agreement-figure", help="agreement across seeds (.png); none without pairs")
    p.add_argument("--transfer", help="pullback_transfer.parquet (with --transfer-figure)")
    p.add_argument("--transfer-figure", help="PGD transfer across seeds (.png); none without pairs")
    p.add_argument("--temperature-figure", help="every measure against T (.png); none without pullback.sweep")
    p = command(
        "deqntk-figure",
        cmd_deqntk_figure,
        "DEQ-NTK: accuracy beside the zoo's, accuracy vs depth, CKA of each site with the kernel",
        [figure],
    )
    p.add_argument("--zoo", help="zoo.parquet (the zoo's accuracies beside the kernel's)")
    p.add_argument("--table", help="deqntk.parquet")
    p.add_argument("--reference", help="kernel_reference.parquet")
    p.add_argument("--accuracy", help="the kernel's accuracy per setting beside the zoo's (.png)")
    p.add_argument("--depth", help="accuracy vs depth, finite depth and DEQ (.png)")
    p.add_argument("--kernel-reference", help="CKA of each site with the kernel (.png)")
    p = command(
        "dissection-figure",
        cmd_dissection_figure,
        "interpretable units vs rotation, by category (Figs. 3, 18-20)",
        [figure],
        options=["--table", "--summary"],
    )
    p.add_argument("--units", required=True, help="dissection_units.parquet")
    p.add_argument(
        "--category-sites",
        type=_json_object,
        required=True,
        help="JSON {variant: site} for the category bars",
    )
    p.add_argument("--fraction", required=True, help="fraction-vs-alpha figure (.png)")
    p.add_argument("--categories", required=True, help="units-per-category figure (.png)")
    return parser


def main(argv: list[str] | None = None) -> None:
    from intertwine.utils import DivergedError

    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    _log(shlex.join(["intertwine", *argv]))  # the job's log starts with the command that reruns it
    if "threads" in vars(args):  # a torch job: torch is imported here, not for tables and figures
        import torch

        torch.set_num_threads(args.threads)
    try:
        args.func(args)
    except (OSError, ValueError, DivergedError) as err:  # the user's to fix: no traceback
        sys.exit(f"intertwine {args.command}: error: {err}")


if __name__ == "__main__":
    main()
