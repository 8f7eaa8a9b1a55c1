"""What every command of the command line shares: the argument types (JSON config blocks, seed
ranges, bounded integers, the schema's enums), the parent parsers of the torch jobs and the figure
commands, the options several commands take in the same sense, and the job's log. Each stage's
commands (``intertwine.workflow.stages.<stage>.commands``) add themselves through ``Commands``."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path


def json_value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise argparse.ArgumentTypeError(f"not valid JSON ({err}): {text[:80]}") from err


def json_object(text: str) -> dict:
    """A JSON object (a config block, a spec, {name: value})."""
    value = json_value(text)
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object {{...}}, got {text[:80]}")
    return value


def json_names(text: str) -> list[str]:
    """A JSON list of distinct strings, e.g. '["act1", "act2"]'."""
    value = json_value(text)
    if not (isinstance(value, list) and all(isinstance(item, str) for item in value)):
        raise argparse.ArgumentTypeError(
            f'expected a JSON list of strings, e.g. \'["act1", "act2"]\', got {text[:80]}'
        )
    repeated = sorted({item for item in value if value.count(item) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(f"{repeated} listed more than once")
    return value


def json_names_or_null(text: str) -> list[str] | None:
    """``json_names``, or JSON null for the default."""
    return None if json_value(text) is None else json_names(text)


def json_numbers(text: str) -> dict[str, float]:
    """A JSON object of numbers, e.g. '{"resnet20": 0, "resnet20_leaky": 0.5}'."""
    value = json_object(text)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value.values()):
        raise argparse.ArgumentTypeError(f"expected a JSON object of numbers, got {text[:80]}")
    return value


def seed_range(text: str) -> list[int]:
    """An argparse type: ``first-last`` (or one seed), the seeds first .. last."""
    first, _, last = text.partition("-")
    try:
        seeds = list(range(int(first), int(last or first) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected first-last, e.g. 0-3, got {text!r}") from None
    if not seeds or seeds[0] < 0:
        raise argparse.ArgumentTypeError(f"expected 0 <= first <= last, got {text!r}")
    return seeds


def integer(minimum: int):
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


def device(text: str) -> str:
    if not re.fullmatch(r"auto|cpu|cuda(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"expected auto, cpu, cuda or cuda:<n>, got {text!r}")
    return text


def method(text: str) -> str:
    from intertwine.settings import parse_method

    try:
        parse_method(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def variances(text: str) -> tuple[float, float, float]:
    """A DEQ-NTK variance setting by its name, e.g. w0.25_u0.25_b0.5."""
    from intertwine.settings import parse_variances

    try:
        return parse_variances(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def schema_enum(*path: str) -> list[str]:
    """The values the config schema allows at ``path`` (an enum), so the CLI takes the same."""
    from intertwine.settings import schema

    node = schema()
    for part in path:
        node = node[part]
    return list(node["enum"])


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def save_figure_files(fig, path: str, other_formats: list[str], figures: dict) -> None:
    """Save ``fig`` as ``path`` and as each of ``other_formats`` with the same file name stem."""
    from intertwine.workflow.plotting import save_figure

    stem = Path(path).stem
    save_figure(fig, [path, *(p for p in other_formats if Path(p).stem == stem)], dpi=figures["dpi"])


def job_context(args):
    """The job context of a torch command's shared options."""
    from intertwine.workflow.job import Job

    return Job(args.device, args.data, args.global_seed, log)


class Commands:
    """The subcommands being built: ``add`` one; ``job`` and ``figure`` are the parent parsers of
    the torch jobs' shared options (``--data``, ``--global-seed``, ``--device``, ``--threads``) and
    of the figure commands' (``--figures``, ``--other-formats``)."""

    def __init__(self, subparsers) -> None:
        self._subparsers = subparsers
        # Options every torch job takes, and those of every figure command: one parent parser each.
        self.job = argparse.ArgumentParser(add_help=False)
        self.job.add_argument(
            "--data",
            help="data cache directory, e.g. results/data/shapes (read by every job but dissect-external)",
        )
        self.job.add_argument("--global-seed", type=int, default=0, help="the config's seed")
        self.job.add_argument(
            "--device",
            type=device,
            default="auto",
            help="torch device: auto (CUDA when present), cpu, cuda[:n]",
        )
        self.job.add_argument(
            "--threads", type=integer(1), default=1, help="CPU threads for torch (at least 1)"
        )
        self.figure = argparse.ArgumentParser(add_help=False)
        self.figure.add_argument(
            "--figures", type=json_object, required=True, help="the `figures` block (JSON)"
        )
        self.figure.add_argument(
            "--other-formats",
            nargs="*",
            default=[],
            help="more files of the same figures (.pdf, .svg), matched by file name",
        )
        # Options several commands take in the same sense, each defined once here.
        self.same = {
            "--checkpoint": dict(required=True, help="trained zoo member (.pt)"),
            "--a": dict(
                required=True, help="zoo member a (.pt); stitching: f, whose layers run up to the site"
            ),
            "--b": dict(
                required=True, help="zoo member b (.pt); stitching: g, whose layers run after the site"
            ),
            "--pair": dict(type=integer(0), required=True, help="the pair's index (seeds its random draws)"),
            "--site": dict(required=True, help="activation site"),
            "--training": dict(
                type=json_object, required=True, help="the variant's `zoo.training` block (JSON)"
            ),
            "--eval-batch-size": dict(
                type=integer(1),
                default=None,
                help="evaluation batch size (zoo.training.eval_batch_size; speed only, "
                "so the workflow passes it beside --training)",
            ),
            "--units-out": dict(required=True, help=".parquet, one row per unit of each --out row"),
            "--table": dict(required=True, help="the stage's table (.parquet)"),
            "--summary": dict(required=True, help="summary table .csv"),
            "--variants": dict(type=json_object, required=True, help="the `zoo.variants` block (JSON)"),
            "--dataset": dict(
                required=True,
                choices=schema_enum("properties", "data", "properties", "dataset"),
                help="the data set (the paper's numbers are shown for cifar10)",
            ),
        }

    def add(self, name, func, help, parents=(), out=None, config=None, options=()) -> argparse.ArgumentParser:
        """A subcommand ``name`` running ``func(args)``; ``out`` is the help of its --out, ``config``
        the config block its --config holds, ``options`` those of ``same`` it takes."""
        p = self._subparsers.add_parser(name, help=help, description=help, parents=list(parents))
        p.set_defaults(func=func)
        if out:
            p.add_argument("--out", required=True, help=out)
        if config:
            p.add_argument("--config", type=json_object, required=True, help=f"the `{config}` block (JSON)")
        for option in options:
            p.add_argument(option, **self.same[option])
        return p
