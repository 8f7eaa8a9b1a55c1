"""What every command of the command line shares: the argument types (JSON config blocks, seed
ranges, bounded integers, the schema's enums), the parent parsers of the torch jobs and the figure
commands, the options several commands take in the same sense, and the job's log. Each stage's
commands (``intertwine.workflow.stages.<stage>.commands``) add themselves through ``Commands``, each
option with what its rule passes it, so that the rule's shell line is the command's
(``Command.shell``): a job's arguments are declared once."""

from __future__ import annotations

import argparse
import inspect
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
    from intertwine.workflow.settings import parse_method

    try:
        parse_method(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def variances(text: str) -> tuple[float, float, float]:
    """A DEQ-NTK variance setting by its name, e.g. w0.25_u0.25_b0.5."""
    from intertwine.workflow.settings import parse_variances

    try:
        return parse_variances(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def schema_enum(*path: str) -> list[str]:
    """The values the config schema allows at ``path`` (an enum), so the CLI takes the same."""
    from intertwine.workflow.settings import schema

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


#: The ``rule`` of an option the workflow passes only when it has a value (an optional input, a
#: figure the config asks for): the rule's params render it (``Command.when_given``) and its shell
#: line holds ``{params.<dest>}``.
WHEN_GIVEN = "when given"
#: The ``rule`` of an option each rule that runs the command gives itself (``shell(schema=...)``).
BY_RULE = "by rule"


class Command:
    """One subcommand: its parser, and what the workflow's rule passes each option, in order.

    An option's ``rule`` is the Snakemake template its rule gives it (``"{input.a}"``,
    ``"{params.block:q}"``, ``"{wildcards.pair}"``), or ``WHEN_GIVEN``; options without one are for
    people only. The rule's shell line is built from these (``shell``), so a job's arguments are
    declared once, here, for the rule and the command alike."""

    def __init__(self, name: str, parser: argparse.ArgumentParser, shared: list, last: list) -> None:
        self.name = name
        self.parser = parser
        # (action, rule template): the shared options it takes, its own, then the config block, the
        # options of every job or figure and --out, which is the order of the shell line
        self._shared, self._own, self._last = shared, [], last
        self.repeated: set[str] = set()  # options given once per value (action="append")

    @property
    def passed(self) -> list[tuple[argparse.Action, str]]:
        """What the rule passes, in the order of its shell line, each with its template: the
        positional arguments first (no option taking several values may come before them)."""
        options = self._shared + self._own + self._last
        return [o for o in options if not o[0].option_strings] + [o for o in options if o[0].option_strings]

    def add_argument(self, *flags: str, rule: str | None = None, **kwargs) -> argparse.Action:
        """``parser.add_argument``; ``rule`` is the template the workflow's rule passes."""
        action = self.parser.add_argument(*flags, **kwargs)
        if kwargs.get("action") == "append":
            self.repeated.add(action.dest)
        if rule is not None:
            self._own.append((action, rule))
        return action

    def shell(self, log: bool = True, **rules: str) -> str:
        """The rule's shell line: each passed option with its template, ``rules`` overriding them by
        destination (e.g. ``schema="rotation"`` for ``intertwine table``); ``log`` sends the
        command's output to the rule's log."""
        unknown = set(rules) - {action.dest for action, _ in self.passed}
        if unknown:
            raise ValueError(f"intertwine {self.name} passes no option {sorted(unknown)}")
        line = f"intertwine {self.name}"
        for action, rule in self.passed:
            rule = rules.get(action.dest, rule)
            if rule == BY_RULE:
                raise ValueError(f"intertwine {self.name}: the rule gives {action.dest}= to shell()")
            if rule == WHEN_GIVEN:
                line += f"{{params.{action.dest}}}"
            elif action.option_strings:
                line += f" {action.option_strings[0]} {rule}"
            else:
                line += f" {rule}"
        return line + (" > {log} 2>&1" if log else "")

    @property
    def when_given_options(self) -> dict[str, argparse.Action]:
        """The options the rule passes only when given, by destination."""
        return {action.dest: action for action, rule in self.passed if rule == WHEN_GIVEN}

    def when_given(self, **values) -> dict:
        """The rule's params of its ``WHEN_GIVEN`` options, each `` --flag value`` or nothing:
        ``values`` holds each option's value, or a function of the job's ``wildcards``, ``input``
        and ``output`` (those it names) that gives it."""
        actions = self.when_given_options
        if set(values) != set(actions):
            raise ValueError(
                f"intertwine {self.name}: give the values of {sorted(actions)} (got {sorted(values)})"
            )
        return {
            dest: _rendered(actions[dest].option_strings[0], value, dest in self.repeated)
            for dest, value in values.items()
        }


def _flag(flag: str, value, repeated: bool) -> str:
    """`` flag value`` (`` flag`` for True), nothing for an empty or false value; a list's items
    follow one flag, or each its own where the option is ``repeated`` (``action="append"``)."""
    if value is None or value is False or value == "":
        return ""
    if value is True:
        return f" {flag}"
    if isinstance(value, str) or not hasattr(value, "__iter__"):
        return f" {flag} {value}"
    items = [str(item) for item in value]
    if repeated:
        return "".join(f" {flag} {item}" for item in items)
    return f" {flag} " + " ".join(items) if items else ""


def _rendered(flag: str, value, repeated: bool):
    """A params entry: ``value``'s flag now, or a function of the job that renders it."""
    if not callable(value):
        return _flag(flag, value, repeated)
    names = list(inspect.signature(value).parameters)[1:]  # after the wildcards: input, output
    if not set(names) <= {"input", "output"}:
        raise ValueError(f"{flag}: a value's function takes (wildcards[, input][, output]), not {names}")

    def render(wildcards, input, output):
        job = {"input": input, "output": output}
        return _flag(flag, value(wildcards, **{name: job[name] for name in names}), repeated)

    return render


def _speed_choice(key: str, what: str) -> tuple[dict, str]:
    """A shared option for a ``zoo.training`` setting that changes the speed only: the schema's
    choices, and the rule's resource of that name as its value (so changing it reruns nothing)."""
    choices = schema_enum("properties", "zoo", "properties", "training", "properties", key)
    help_text = f"{what} (zoo.training.{key}; speed only, so the workflow passes it beside --training)"
    return dict(choices=choices, default=None, help=help_text), f"{{resources.{key}}}"


def _shared_options() -> dict[str, tuple[dict, str]]:
    """The options several commands take in the same sense: {flag: (argparse keywords, what a rule
    passes it unless the command says otherwise)}."""
    return {
        "--checkpoint": (dict(required=True, help="trained zoo member (.pt)"), "{input.checkpoint}"),
        "--a": (
            dict(required=True, help="zoo member a (.pt); stitching: f, whose layers run up to the site"),
            "{input.a}",
        ),
        "--b": (
            dict(required=True, help="zoo member b (.pt); stitching: g, whose layers run after the site"),
            "{input.b}",
        ),
        "--pair": (
            dict(type=integer(0), required=True, help="the pair's index (seeds its random draws)"),
            "{wildcards.pair}",
        ),
        "--site": (dict(required=True, help="activation site"), "{wildcards.site}"),
        "--training": (
            dict(type=json_object, required=True, help="the variant's `zoo.training` block (JSON)"),
            "{params.training:q}",
        ),
        "--eval-batch-size": (
            dict(
                type=integer(1),
                default=None,
                help="evaluation batch size (zoo.training.eval_batch_size; speed only, "
                "so the workflow passes it beside --training)",
            ),
            "{resources.eval_batch_size}",
        ),
        "--cuda-graphs": (
            dict(
                type=int,
                choices=[0, 1],
                default=None,
                help="1: a pack's step is captured as a CUDA graph on a GPU (zoo.training.cuda_graphs; "
                "speed only, so the workflow passes it beside --training)",
            ),
            "{resources.cuda_graphs}",
        ),
        "--pack-mode": _speed_choice("pack_mode", "how a pack runs its members"),
        "--compile": _speed_choice("compile", "torch.compile mode of a wide pack's training step"),
        "--units-out": (
            dict(required=True, help=".parquet, one row per unit of each --out row"),
            "{output.units}",
        ),
        "--table": (dict(required=True, help="the stage's table (.parquet)"), "{input.table}"),
        "--summary": (dict(required=True, help="summary table .csv"), "{output.summary}"),
        "--variants": (
            dict(type=json_object, required=True, help="the `zoo.variants` block (JSON)"),
            "{params.variants:q}",
        ),
        "--dataset": (
            dict(
                required=True,
                choices=schema_enum("properties", "data", "properties", "dataset"),
                help="the data set (the paper's numbers are shown for cifar10)",
            ),
            "{params.dataset}",
        ),
    }


class Commands:
    """The subcommands being built: ``add`` one; ``job`` and ``figure`` are the parent parsers of
    the torch jobs' shared options (``--data``, ``--global-seed``, ``--device``, ``--threads``) and
    of the figure commands' (``--figures``, ``--other-formats``), each option with what the rules
    pass it; ``commands`` holds each ``Command`` by name."""

    def __init__(self, subparsers) -> None:
        self._subparsers = subparsers
        self.commands: dict[str, Command] = {}
        # Options every torch job takes, and those of every figure command: one parent parser each,
        # with what the rules pass them.
        self.job = argparse.ArgumentParser(add_help=False)
        self.figure = argparse.ArgumentParser(add_help=False)
        self._rules = {
            self.job: {
                self.job.add_argument(
                    "--data",
                    help="data cache directory, e.g. results/data/shapes (read by every job but the "
                    "external models')",
                ): "{params.data}",
                self.job.add_argument("--global-seed", type=int, default=0, help="the config's seed"): (
                    "{params.seed}"
                ),
                self.job.add_argument(
                    "--device",
                    type=device,
                    default="auto",
                    help="torch device: auto (CUDA when present), cpu, cuda[:n]",
                ): "{params.device}",
                self.job.add_argument(
                    "--threads", type=integer(1), default=1, help="CPU threads for torch (at least 1)"
                ): "{threads}",
            },
            self.figure: {
                self.figure.add_argument(
                    "--figures", type=json_object, required=True, help="the `figures` block (JSON)"
                ): "{params.figures:q}",
                self.figure.add_argument(
                    "--other-formats",
                    nargs="*",
                    default=[],
                    help="more files of the same figures (.pdf, .svg), matched by file name",
                ): "{output.other_formats}",
            },
        }
        # Options several commands take in the same sense, each defined once: (argparse keywords,
        # what a rule passes unless the command says otherwise).
        self.same = _shared_options()

    def add(self, name, func, help, parents=(), out=None, config=None, options=(), rules=None) -> Command:
        """A subcommand ``name`` running ``func(args)``; ``out`` is the help of its --out, ``config``
        the config block its --config holds, ``options`` those of ``same`` it takes. ``rules``
        changes what the rule passes a shared, parent, --out or --config option ({flag: template},
        None for not passed); --out takes ``{output}``, --config ``{params.block:q}``."""
        rules = dict(rules or {})
        p = self._subparsers.add_parser(name, help=help, description=help, parents=list(parents))
        p.set_defaults(func=func)

        def passed(action, default):
            rule = rules.pop(action.option_strings[0], default)
            return [] if rule is None else [(action, rule)]

        shared = []
        for option in options:
            kwargs, rule = self.same[option]
            shared += passed(p.add_argument(option, **kwargs), rule)
        last = []
        if config:
            action = p.add_argument(
                "--config", type=json_object, required=True, help=f"the `{config}` block (JSON)"
            )
            last += passed(action, "{params.block:q}")
        for parent in parents:
            for action, rule in self._rules[parent].items():
                last += passed(action, rule)
        if out:
            last += passed(p.add_argument("--out", required=True, help=out), "{output}")
        if rules:
            raise ValueError(f"intertwine {name} takes no shared option {sorted(rules)}")
        self.commands[name] = Command(name, p, shared, last)
        return self.commands[name]
