"""Command line: ``intertwine <stage> ...``, the only thing the workflow's rules call.

Config blocks are passed as JSON strings, exactly as the workflow holds them, so any job can be
rerun by hand from the command its log prints.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def _json(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not valid JSON ({err}): {text[:80]}") from err


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _save(fig, path: str, other_formats: list[str], figures: dict) -> None:
    """Save ``fig`` as ``path`` and as each of ``other_formats`` with the same file name stem."""
    from intertwine.figures import save_figure

    stem = Path(path).stem
    save_figure(fig, [path, *(p for p in other_formats if Path(p).stem == stem)], dpi=figures["dpi"])


def cmd_data(args) -> None:
    from intertwine.data import build_dataset, write_dataset

    splits, meta = build_dataset(args.config, args.seed)
    write_dataset(args.out, splits, meta)
    _log(f"{meta['dataset']}: " + ", ".join(f"{k} {v}" for k, v in meta["sizes"].items())
         + f" images of {meta['image_size']} pixels in {args.out}")


def cmd_train(args) -> None:
    import torch

    from intertwine.tables import ZOO_EPOCHS, write_parquet
    from intertwine.zoo import refuse_overwrite, save_checkpoint, train_member

    refuse_overwrite(args.checkpoint)  # fail before training, not after
    torch.set_num_threads(args.threads)
    checkpoint, metrics = train_member(args.spec, args.variant, args.seed, args.data,
                                       args.training, args.global_seed, args.checkpoint, log=_log)
    write_parquet(metrics, args.metrics, ZOO_EPOCHS)
    save_checkpoint(checkpoint, args.checkpoint)


def cmd_zoo_table(args) -> None:
    from intertwine.tables import ZOO, ZOO_EPOCHS, read_parquet, write_parquet
    from intertwine.zoo import zoo_table

    epochs = read_parquet(args.metrics, ZOO_EPOCHS)
    write_parquet(epochs, args.epochs_out, ZOO_EPOCHS)
    write_parquet(zoo_table([epochs]), args.out, ZOO)


def cmd_zoo_figure(args) -> None:
    from intertwine.figures import save_figure, zoo_accuracy, zoo_summary
    from intertwine.paper import reported_accuracy
    from intertwine.tables import ZOO, read_parquet, write_csv

    zoo = read_parquet([args.zoo], ZOO)
    reported = ({name: reported_accuracy(spec) for name, spec in args.variants.items()}
                if args.dataset == "cifar10" else {})
    save_figure(zoo_accuracy(zoo, reported), args.out, dpi=args.figures["dpi"])
    write_csv(zoo_summary(zoo, reported), args.summary)


def cmd_rotation(args) -> None:
    import torch

    from intertwine.rotation import run_trial
    from intertwine.tables import ROTATION, write_parquet

    torch.set_num_threads(args.threads)
    row = run_trial(args.checkpoint, args.data, args.site, args.group, args.trial, args.config,
                    args.training, args.global_seed, log=_log)
    write_parquet(row, args.out, ROTATION)


def cmd_stitch(args) -> None:
    import torch

    from intertwine.stitching import stitch_pair
    from intertwine.tables import STITCHING, write_parquet

    torch.set_num_threads(args.threads)
    rows = stitch_pair(args.a, args.b, args.data, args.method, args.pair, args.config,
                       args.training, args.sites, args.global_seed, log=_log)
    write_parquet(rows, args.out, STITCHING)


def cmd_similarity(args) -> None:
    import torch

    from intertwine.similarity import similarity_pair
    from intertwine.tables import SIMILARITY, write_parquet

    torch.set_num_threads(args.threads)
    rows = similarity_pair(args.a, args.b, args.data, args.pair, args.config, args.procrustes,
                           args.cka, args.global_seed, args.device, log=_log)
    write_parquet(rows, args.out, SIMILARITY)


def cmd_similarity_figure(args) -> None:
    from intertwine.figures import similarity_cka, similarity_procrustes, similarity_summary
    from intertwine.tables import SIMILARITY, read_parquet, write_csv

    from intertwine.paper import reported_procrustes

    table = read_parquet([args.table], SIMILARITY)
    paper = ({name: reported_procrustes(spec) for name, spec in args.variants.items()}
             if args.dataset == "cifar10" else {})
    if args.procrustes:
        _save(similarity_procrustes(table, paper), args.procrustes, args.other_formats, args.figures)
    if args.cka:
        _save(similarity_cka(table), args.cka, args.other_formats, args.figures)
    write_csv(similarity_summary(table, paper), args.summary)


def cmd_dissect(args) -> None:
    import torch

    from intertwine.dissection import run_member
    from intertwine.tables import DISSECTION, DISSECTION_UNITS, write_parquet

    torch.set_num_threads(args.threads)
    summary, units = run_member(args.checkpoint, args.data, args.sites, args.config, args.global_seed,
                                args.device, log=_log)
    write_parquet(units, args.units_out, DISSECTION_UNITS)
    write_parquet(summary, args.out, DISSECTION)


def cmd_dissect_external(args) -> None:
    import torch

    from intertwine.dissection import run_external
    from intertwine.tables import DISSECTION, DISSECTION_UNITS, write_parquet

    torch.set_num_threads(args.threads)
    summary, units = run_external(args.name, args.arch, args.weights, args.sites, args.config,
                                  args.global_seed, args.device, log=_log)
    write_parquet(units, args.units_out, DISSECTION_UNITS)
    write_parquet(summary, args.out, DISSECTION)


def cmd_dissection_figure(args) -> None:
    from intertwine.figures import dissection_categories, dissection_fraction, dissection_summary
    from intertwine.tables import DISSECTION, DISSECTION_UNITS, read_parquet, write_csv

    table = read_parquet([args.table], DISSECTION)
    _save(dissection_fraction(table), args.fraction, args.other_formats, args.figures)
    _save(dissection_categories(read_parquet([args.units], DISSECTION_UNITS), args.category_sites),
          args.categories, args.other_formats, args.figures)
    write_csv(dissection_summary(table), args.summary)


def cmd_dissection_masks(args) -> None:
    import torch

    from intertwine.dissection import mask_panels
    from intertwine.figures import dissection_masks

    torch.set_num_threads(args.threads)
    images, panels = mask_panels(args.checkpoint, args.data, args.site, args.config,
                                 args.config["masks"]["alphas"], args.global_seed, args.device)
    _save(dissection_masks(images.numpy(), panels), args.out, args.other_formats, args.figures)


def cmd_symmetry(args) -> None:
    import torch

    from intertwine.symmetry import run_check
    from intertwine.tables import SYMMETRY, write_parquet

    torch.set_num_threads(args.threads)
    write_parquet(run_check(args.checkpoint, args.data, args.config, args.global_seed, args.device),
                  args.out, SYMMETRY)


def cmd_symmetry_table(args) -> None:
    from intertwine.symmetry import summarize
    from intertwine.tables import SYMMETRY, read_parquet, write_csv, write_parquet

    table = read_parquet(args.parts, SYMMETRY)
    write_parquet(table, args.out, SYMMETRY)
    write_csv(summarize(table), args.summary, float_format="%.3g")


def cmd_table(args) -> None:
    from intertwine import tables

    schema = getattr(tables, args.schema.upper())
    tables.write_parquet(tables.read_parquet(args.parts, schema), args.out, schema)


def cmd_rotation_figure(args) -> None:
    from intertwine.figures import rotation_penalty, save_figure
    from intertwine.tables import ROTATION, read_parquet

    figure = rotation_penalty(read_parquet([args.table], ROTATION))
    save_figure(figure, args.out, dpi=args.figures["dpi"])


def cmd_stitching_figure(args) -> None:
    from intertwine.figures import stitching_dimension, stitching_penalty, stitching_summary
    from intertwine.tables import STITCHING, read_parquet, write_csv

    table = read_parquet([args.table], STITCHING)
    _save(stitching_penalty(table), args.penalty, args.other_formats, args.figures)
    _save(stitching_dimension(table), args.dimension, args.other_formats, args.figures)
    write_csv(stitching_summary(table), args.summary)


def cmd_stitching_studies(args) -> None:
    """The appendix studies' figures, each drawn only when its file is asked for."""
    from intertwine import figures
    from intertwine.tables import ZOO, read_parquet, write_csv

    if args.slopes is not None and not isinstance(args.slopes, dict):
        raise ValueError("--slopes must be a JSON object {variant: negative slope}")
    if args.transformers is not None and not isinstance(args.transformers, list):
        raise ValueError("--transformers must be a JSON list of variant names")
    table = read_parquet([args.table])  # no schema: the studies read only the columns they need
    save = lambda fig, path: _save(fig, path, args.other_formats, args.figures)  # noqa: E731
    if args.leaky_relu or args.leaky_relu_table:
        if args.zoo is None or args.slopes is None:
            raise ValueError("--leaky-relu and --leaky-relu-table need --zoo and --slopes")
        accuracy = figures.leaky_relu_accuracy(read_parquet([args.zoo], ZOO), args.slopes)
        if args.leaky_relu_table:
            write_csv(accuracy, args.leaky_relu_table)
        if args.leaky_relu:
            save(figures.leaky_relu_penalty(table, args.slopes, accuracy), args.leaky_relu)
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="intertwine", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("data", help="generate or decode the data set into the cache")
    p.add_argument("--config", type=_json, required=True, help="the config's `data` block (JSON)")
    p.add_argument("--seed", type=int, default=0, help="the config's global seed")
    p.add_argument("--out", required=True, help="cache directory, e.g. results/data/shapes")
    p.set_defaults(func=cmd_data)

    p = sub.add_parser("train", help="train one zoo member")
    p.add_argument("--data", required=True, help="data cache directory")
    p.add_argument("--variant", required=True)
    p.add_argument("--spec", type=_json, required=True, help="the variant's model spec (JSON)")
    p.add_argument("--seed", type=int, required=True, help="zoo member seed")
    p.add_argument("--training", type=_json, required=True, help="the `zoo.training` block (JSON)")
    p.add_argument("--global-seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help="CPU threads for torch")
    p.add_argument("--checkpoint", required=True, help="output .pt (never overwritten)")
    p.add_argument("--metrics", required=True, help="output per-epoch metrics .parquet")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("zoo-table", help="aggregate per-model metrics into the zoo tables")
    p.add_argument("metrics", nargs="+", help="per-model metrics .parquet files")
    p.add_argument("--out", required=True, help="zoo.parquet: one row per model")
    p.add_argument("--epochs-out", required=True, help="zoo_epochs.parquet: one row per epoch")
    p.set_defaults(func=cmd_zoo_table)

    p = sub.add_parser("zoo-figure", help="accuracy distribution per variant and its summary")
    p.add_argument("--zoo", required=True, help="zoo.parquet")
    p.add_argument("--variants", type=_json, required=True, help="the `zoo.variants` block (JSON)")
    p.add_argument("--dataset", required=True)
    p.add_argument("--figures", type=_json, required=True, help="the `figures` block (JSON)")
    p.add_argument("--out", nargs="+", required=True, help="figure files (.png, .pdf, ...)")
    p.add_argument("--summary", required=True, help="summary table .csv")
    p.set_defaults(func=cmd_zoo_figure)

    p = sub.add_parser("rotation", help="one rotation-penalty trial (paper section 3.3)")
    p.add_argument("--checkpoint", required=True, help="trained zoo member (.pt)")
    p.add_argument("--data", required=True, help="data cache directory")
    p.add_argument("--site", required=True, help="activation site whose pre-activation is transformed")
    p.add_argument("--group", required=True, help="grelu, orthogonal or permutation")
    p.add_argument("--trial", type=int, required=True)
    p.add_argument("--config", type=_json, required=True, help="the `rotation` block (JSON)")
    p.add_argument("--training", type=_json, required=True, help="the `zoo.training` block (JSON)")
    p.add_argument("--global-seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True, help="one-row .parquet")
    p.set_defaults(func=cmd_rotation)

    p = sub.add_parser("stitch", help="stitch one pair of zoo members with one method at each site")
    p.add_argument("--a", required=True, help="zoo member f, whose layers run up to the site (.pt)")
    p.add_argument("--b", required=True, help="zoo member g, whose layers run after the site (.pt)")
    p.add_argument("--data", required=True, help="data cache directory")
    p.add_argument("--method", required=True, help="full, grelu or rank<r> (e.g. rank4)")
    p.add_argument("--pair", type=int, required=True, help="the pair's index (seeds the layers)")
    p.add_argument("--sites", type=_json, default=None, help="JSON list of sites (default: all)")
    p.add_argument("--config", type=_json, required=True, help="the `stitching` block (JSON)")
    p.add_argument("--training", type=_json, required=True, help="the `zoo.training` block (JSON)")
    p.add_argument("--global-seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True, help=".parquet, one row per site")
    p.set_defaults(func=cmd_stitch)

    p = sub.add_parser("similarity", help="similarity measures between two zoo members at every site")
    p.add_argument("--a", required=True, help="zoo member (.pt)")
    p.add_argument("--b", required=True, help="zoo member (.pt)")
    p.add_argument("--data", required=True, help="data cache directory")
    p.add_argument("--pair", type=int, required=True, help="the pair's index")
    p.add_argument("--procrustes", action="store_true", help="Procrustes measures at matching sites")
    p.add_argument("--cka", action="store_true", help="CKA measures for every pair of sites")
    p.add_argument("--config", type=_json, required=True, help="the `similarity` block (JSON)")
    p.add_argument("--global-seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True, help=".parquet, one row per (site_a, site_b, measure)")
    p.set_defaults(func=cmd_similarity)

    p = sub.add_parser("similarity-figure", help="Procrustes per site and CKA heatmaps (Table 2, Figs. 2, 5, 9-11)")
    p.add_argument("--table", required=True, help="similarity.parquet")
    p.add_argument("--dataset", required=True, help="the data set (the paper's numbers are shown for cifar10)")
    p.add_argument("--variants", type=_json, required=True, help="the `zoo.variants` block (JSON)")
    p.add_argument("--figures", type=_json, required=True, help="the `figures` block (JSON)")
    p.add_argument("--procrustes", help="Procrustes figure (.png)")
    p.add_argument("--cka", help="CKA heatmaps (.png)")
    p.add_argument("--summary", required=True, help="summary table .csv")
    p.add_argument("--other-formats", nargs="*", default=[], help="more files of the same figures, matched by name")
    p.set_defaults(func=cmd_similarity_figure)

    p = sub.add_parser("dissect", help="network dissection of one zoo member under basis rotations (section 6)")
    p.add_argument("--checkpoint", required=True, help="trained zoo member (.pt)")
    p.add_argument("--data", required=True, help="data cache directory (normalisation, image size)")
    p.add_argument("--sites", type=_json, required=True, help="JSON list of sites")
    p.add_argument("--config", type=_json, required=True, help="the `dissection` block (JSON)")
    p.add_argument("--global-seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True, help=".parquet, one row per (site, alpha, rotation)")
    p.add_argument("--units-out", required=True, help=".parquet, one row per unit of each")
    p.set_defaults(func=cmd_dissect)

    p = sub.add_parser("dissect-external", help="dissect a torchvision ImageNet model (local weights) on Broden")
    p.add_argument("--name", required=True, help="the model's name in the tables (its `variant`)")
    p.add_argument("--arch", required=True, help="resnet50 or convnext_tiny")
    p.add_argument("--weights", required=True, help="state dict file (.pth)")
    p.add_argument("--sites", type=_json, default=None, help="JSON list of module names (default: per arch)")
    p.add_argument("--config", type=_json, required=True, help="the `dissection` block (JSON)")
    p.add_argument("--global-seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True)
    p.add_argument("--units-out", required=True)
    p.set_defaults(func=cmd_dissect_external)

    p = sub.add_parser("dissection-figure", help="interpretable units vs rotation, by category (Figs. 3, 18-20)")
    p.add_argument("--table", required=True, help="dissection.parquet")
    p.add_argument("--units", required=True, help="dissection_units.parquet")
    p.add_argument("--category-sites", type=_json, required=True, help="JSON {variant: site} for the category bars")
    p.add_argument("--figures", type=_json, required=True, help="the `figures` block (JSON)")
    p.add_argument("--fraction", required=True, help="fraction-vs-alpha figure (.png)")
    p.add_argument("--categories", required=True, help="units-per-category figure (.png)")
    p.add_argument("--summary", required=True, help="summary table .csv")
    p.add_argument("--other-formats", nargs="*", default=[], help="more files of the same figures, matched by name")
    p.set_defaults(func=cmd_dissection_figure)

    p = sub.add_parser("dissection-masks", help="top units' regions over probe images (Figs. 21, 23, 25)")
    p.add_argument("--checkpoint", required=True, help="trained zoo member (.pt)")
    p.add_argument("--data", required=True, help="data cache directory")
    p.add_argument("--site", required=True)
    p.add_argument("--config", type=_json, required=True, help="the `dissection` block (JSON)")
    p.add_argument("--figures", type=_json, required=True, help="the `figures` block (JSON)")
    p.add_argument("--global-seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True, help="figure (.png)")
    p.add_argument("--other-formats", nargs="*", default=[])
    p.set_defaults(func=cmd_dissection_masks)

    p = sub.add_parser("symmetry", help="check the weight-space symmetry on one zoo member")
    p.add_argument("--checkpoint", required=True, help="trained zoo member (.pt)")
    p.add_argument("--data", required=True, help="data cache directory")
    p.add_argument("--config", type=_json, required=True, help="the `symmetry` block (JSON)")
    p.add_argument("--global-seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True, help="per-model .parquet")
    p.set_defaults(func=cmd_symmetry)

    p = sub.add_parser("symmetry-table", help="aggregate the symmetry checks and summarise them")
    p.add_argument("parts", nargs="+")
    p.add_argument("--out", required=True, help="symmetry.parquet")
    p.add_argument("--summary", required=True, help="summary .csv for the report")
    p.set_defaults(func=cmd_symmetry_table)

    p = sub.add_parser("table", help="concatenate per-job Parquet files into a stage's table")
    p.add_argument("parts", nargs="+")
    p.add_argument("--schema", required=True, help="the table's schema in intertwine.tables, e.g. rotation")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_table)

    p = sub.add_parser("rotation-figure", help="rotation penalty per site and group (Fig. 4)")
    p.add_argument("--table", required=True, help="rotation.parquet")
    p.add_argument("--figures", type=_json, required=True, help="the `figures` block (JSON)")
    p.add_argument("--out", nargs="+", required=True)
    p.set_defaults(func=cmd_rotation_figure)

    p = sub.add_parser("stitching-figure", help="stitching penalty and layer dimension per site (Figs. 1, 6, 7)")
    p.add_argument("--table", required=True, help="stitching.parquet")
    p.add_argument("--figures", type=_json, required=True, help="the `figures` block (JSON)")
    p.add_argument("--penalty", required=True, help="penalty figure (.png)")
    p.add_argument("--dimension", required=True, help="parameter dimension figure (.png)")
    p.add_argument("--summary", required=True, help="summary table .csv")
    p.add_argument("--other-formats", nargs="*", default=[],
                   help="more files of the same figures (.pdf, .svg), matched by file name")
    p.set_defaults(func=cmd_stitching_figure)

    p = sub.add_parser("stitching-studies",
                       help="appendix D stitching studies: LeakyReLU, alpha by CV, L1, SoftSort, transformers")
    p.add_argument("--table", required=True, help="stitching.parquet")
    p.add_argument("--zoo", help="zoo.parquet (for --leaky-relu, --leaky-relu-table)")
    p.add_argument("--slopes", type=_json, help="JSON {variant: LeakyReLU negative slope}, ReLU 0")
    p.add_argument("--transformers", type=_json, help="JSON list of the transformer variants")
    p.add_argument("--figures", type=_json, required=True, help="the `figures` block (JSON)")
    p.add_argument("--leaky-relu", help="G_ReLU penalty per slope and zoo accuracy (Fig. 8, Table 3; .png)")
    p.add_argument("--leaky-relu-table", help="zoo accuracy per slope beside Table 3 (.csv)")
    p.add_argument("--alpha-cv", help="alpha chosen by cross-validation (Figs. 13, 14; .png)")
    p.add_argument("--l1", help="penalty against sparsity of L1-regularised stitching (Fig. 15; .png)")
    p.add_argument("--softsort", help="SoftSort against Birkhoff G_ReLU stitching (D.2.2; .png)")
    p.add_argument("--transformer", help="transformer stitching penalty (Fig. 12; .png)")
    p.add_argument("--other-formats", nargs="*", default=[],
                   help="more files of the same figures (.pdf, .svg), matched by file name")
    p.set_defaults(func=cmd_stitching_studies)
    return parser


def main(argv: list[str] | None = None) -> None:
    from intertwine.utils import DivergedError

    args = build_parser().parse_args(argv)
    try:
        args.func(args)
    except (OSError, ValueError, DivergedError) as err:  # the user's to fix: no traceback
        sys.exit(f"intertwine {args.command}: error: {err}")


if __name__ == "__main__":
    main()
