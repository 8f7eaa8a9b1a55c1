"""The command line: what a rule runs, and the errors a person sees."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from intertwine.workflow.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
# Subcommands that run torch: each is named like its rule and its function in intertwine.workflow.stages.<stage>.job.
JOBS = {
    "train-member": "zoo",
    "train-pack": "zoo",
    "import-member": "zoo",
    "rotation-trial": "rotation",
    "stitch-pair": "stitching",
    "similarity-pair": "similarity",
    "similarity-zoo": "similarity",
    "connectivity-pair": "connectivity",
    "symmetry-check": "symmetry",
    "dissect-member": "dissection",
    "npk-member": "gated",
    "gated-ensemble": "gated",
    "dissect-external": "dissection",
    "dissection-masks": "dissection",
    "deqntk-gram": "deqntk",
    "deqntk-regression": "deqntk",
    "deqntk-depth": "deqntk",
    "deqntk-conv": "deqntk",
    "kernel-reference-member": "deqntk",
    "pullback-member": "pullback",
    "pullback-pair": "pullback",
    "pullback-images": "pullback",
    "pullback-external": "pullback",
}


def intertwine(*args, cwd=REPO):
    """The command line, run from the repository root (as snakemake is) unless ``cwd`` says."""
    return subprocess.run(
        [sys.executable, "-m", "intertwine", *args], capture_output=True, text=True, cwd=cwd
    )


def subcommands():
    action = next(a for a in build_parser()._actions if a.dest == "command")
    return action.choices


def rule_commands():
    """Each rule's `intertwine` command: {rule: the command whose shell line it runs}."""
    commands = {}
    for smk in (REPO / "workflow" / "rules").glob("*.smk"):
        for rule, body in re.findall(r"^rule (\w+):\n(.*?)(?=^rule |\Z)", smk.read_text(), re.S | re.M):
            shell = re.search(r"shell:\n.*?CLI\[\"([\w-]+)\"\]\.shell\(", body, re.S)
            if shell:
                commands[rule] = shell[1]
    return commands


def test_every_torch_job_is_named_like_its_rule_and_function():
    import importlib

    for name, stage in JOBS.items():
        assert name in subcommands()
        assert callable(
            getattr(
                importlib.import_module(f"intertwine.workflow.stages.{stage}.job"), name.replace("-", "_")
            )
        )
    rules = rule_commands()
    for name in [*JOBS, "prepare-data"]:
        assert rules[name.replace("-", "_")] == name


# Every job is a fresh process, so what it imports before its work is paid once per job (189 of
# them in `make run`). scipy takes 0.2-0.6 s to import; the stages listed here never need it to
# start, so a module-level scipy import crept into their path would cost `make run` tens of seconds.
STARTS_WITHOUT_SCIPY = ["zoo", "stitching", "rotation", "symmetry", "dissection", "pullback", "deqntk"]


@pytest.mark.parametrize("stage", STARTS_WITHOUT_SCIPY)
def test_a_job_starts_without_importing_scipy(stage):
    code = (
        "import sys\n"
        "from intertwine.workflow.cli import build_parser\n"
        "build_parser()\n"
        f"import intertwine.workflow.stages.{stage}.job\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'scipy', 'matplotlib'}))"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "[]", f"{stage}'s job imports {run.stdout.strip()} at start-up"


def test_every_rule_runs_a_command_and_writes_no_command_line_itself():
    """A job's arguments are declared once, beside the command's options: no rule spells a command
    line of its own."""
    rules = [smk for smk in (REPO / "workflow" / "rules").glob("*.smk") if smk.name != "common.smk"]
    text = "\n".join(smk.read_text() for smk in rules)
    assert len(rule_commands()) == len(re.findall(r"^    shell:\n", text, re.M)) > 40
    assert not re.findall(r'"[^"\n]*(intertwine |--)[^"\n]*"', text)  # no command, no flag


# Template placeholders of each kind, filled with values the options take: JSON lists and blocks,
# names the options restrict, integers; anything else is a path.
LISTS = {
    "{params.sites:q}": '["act1"]',
    "{params.transformers:q}": '["cct"]',
    "{params.study:q}": '["myrtle"]',
}
NAMES = {
    "{params.dataset}": "shapes",
    "{wildcards.method}": "full",
    "{wildcards.group}": "grelu",
    "{params.arch}": "resnet50",
    "{params.device}": "cpu",
    "{params.barrier}": "endpoints_mean",
    "{wildcards.variances}": "w0.6_u0.4_b0",
    "{wildcards.part}": "train",
    "{wildcards.first}-{wildcards.last}": "0-1",
    "{resources.compile}": "none",
    "{resources.pack_mode}": "wide",
}
INTEGERS = re.compile(
    r"\{(wildcards\.(seed|pair|trial|start|n_train|draw)|params\.(seed|n_train|stop)|threads"
    r"|resources\.(eval_batch_size|cuda_graphs))\}"
)


def filled(argv: list[str]) -> list[str]:
    return [
        LISTS.get(a, "{}")
        if a.endswith(":q}")
        else NAMES.get(a, "1")
        if a in NAMES or INTEGERS.fullmatch(a)
        else a.replace("{", "x").replace("}", "x")
        for a in argv
    ]


@pytest.mark.parametrize("name", sorted(set(rule_commands().values())))
def test_each_rule_command_parses(name):
    """The shell line a rule gets from its command, placeholders filled, parses; the options passed
    only when given are left out."""
    from intertwine.workflow.cli import commands

    command = commands()[name]
    line = command.shell(**({"schema": "rotation"} if name == "table" else {}))
    assert line.startswith(f"intertwine {name}") and line.endswith(" > {log} 2>&1")
    line = re.sub(r"\{params\.(\w+)\}", lambda m: "" if m[1] in command.when_given_options else m[0], line)
    argv = line.removesuffix(" > {log} 2>&1").split()[1:]
    args = build_parser().parse_args(filled(argv))
    if "threads" in vars(args):
        assert "--device" in argv, f"{name} does not pass --device"


def test_a_rule_passes_an_option_only_when_given_and_each_value_its_own_flag():
    """``Command.shell`` and ``Command.when_given`` on a command of their own: the line, then each
    kind of value an option passed only when given renders to."""
    import argparse

    from intertwine.workflow.commands import BY_RULE, WHEN_GIVEN, Commands

    cli = Commands(argparse.ArgumentParser().add_subparsers())
    p = cli.add("toy", print, "a toy", [cli.job], out="out", options=["--checkpoint"], rules={"--data": None})
    p.add_argument("parts", nargs="+", rule="{input.parts}")
    p.add_argument("--name", rule=BY_RULE)
    p.add_argument("--extra", rule=WHEN_GIVEN)
    p.add_argument("--table", action="append", rule=WHEN_GIVEN)
    p.add_argument("--fast", action="store_true", rule=WHEN_GIVEN)
    p.add_argument("--by-hand")  # no rule: for people only
    assert p.shell(name="x") == (
        "intertwine toy {input.parts} --checkpoint {input.checkpoint} --name x{params.extra}{params.table}"
        "{params.fast} --global-seed {params.seed} --device {params.device} --threads {threads} --out {output}"
        " > {log} 2>&1"
    )
    with pytest.raises(ValueError, match="name="):
        p.shell()
    with pytest.raises(ValueError, match="no option"):
        p.shell(name="x", by_hand="y")
    given = p.when_given(extra=None, table=["a=1", "b=2"], fast=True)
    assert given == {"extra": "", "table": " --table a=1 --table b=2", "fast": " --fast"}
    assert p.when_given(extra="e.png", table=[], fast=False) == {
        "extra": " --extra e.png",
        "table": "",
        "fast": "",
    }
    render = p.when_given(extra=lambda wc, output: output.extra, table=[], fast=False)["extra"]
    assert render({}, None, argparse.Namespace(extra=["a.png", "b.png"])) == " --extra a.png b.png"
    assert render({}, None, argparse.Namespace(extra=[])) == ""
    with pytest.raises(ValueError, match=r"give the values of \['extra', 'fast', 'table'\]"):
        p.when_given(extra=None)
    with pytest.raises(ValueError, match="takes no shared option"):
        cli.add("toy2", print, "another", [cli.job], rules={"--nothing": None})


def test_torch_jobs_share_one_parent_for_the_job_options():
    """--data, --global-seed, --device and --threads are one parent's actions in every torch
    command (so one definition, one default, one help), and only torch commands have them."""
    parsers = subcommands()
    shared = {"--data", "--global-seed", "--device", "--threads"}
    actions = {name: {o: a for a in p._actions for o in a.option_strings} for name, p in parsers.items()}
    first = actions[next(iter(JOBS))]
    for name in JOBS:
        for option in shared:
            assert actions[name][option] is first[option], (name, option)
        assert "--out" in actions[name]
    for name in set(parsers) - set(JOBS):
        assert not {"--device", "--threads"} & set(actions[name]), name
    assert first["--device"].default == "auto"


def test_figure_commands_share_their_options():
    parsers = subcommands()
    figures = [name for name in parsers if name.endswith(("-figure", "-studies", "-masks"))]
    actions = {name: {o: a for a in parsers[name]._actions for o in a.option_strings} for name in figures}
    for name in figures:
        assert actions[name]["--figures"] is actions[figures[0]]["--figures"], name
        assert actions[name]["--other-formats"] is actions[figures[0]]["--other-formats"], name


def test_missing_cifar_is_one_clear_error(tmp_path):
    block = {
        "dataset": "cifar10",
        "val_size": 10,
        "cifar10": {"root": str(tmp_path / "nowhere"), "layout": "auto", "download": False},
    }
    result = intertwine("prepare-data", "--config", json.dumps(block), "--out", str(tmp_path / "cache"))
    assert result.returncode != 0
    assert "intertwine prepare-data: error: no CIFAR-10 found" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "cache").exists()


def test_train_refuses_an_existing_checkpoint_before_training(tmp_path):
    checkpoint = tmp_path / "seed0.pt"
    checkpoint.write_bytes(b"trained weights")
    result = intertwine(
        "train-member",
        "--data",
        str(tmp_path / "no-data"),
        "--variant",
        "m",
        "--seed",
        "0",
        "--spec",
        '{"arch": "myrtle"}',
        "--training",
        "{}",
        "--device",
        "cpu",
        "--out",
        str(checkpoint),
        "--metrics",
        str(tmp_path / "m.parquet"),
    )
    assert result.returncode != 0 and "never overwritten" in result.stderr
    assert checkpoint.read_bytes() == b"trained weights"
    # The log starts with the command that reruns the job.
    assert result.stderr.splitlines()[0].startswith("intertwine train-member --data ")


def test_bad_json_names_the_argument(tmp_path):
    result = intertwine("prepare-data", "--config", "{not json", "--out", str(tmp_path))
    assert result.returncode == 2 and "--config" in result.stderr and "not valid JSON" in result.stderr


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--threads", "0"], "argument --threads: must be at least 1, got 0"),
        (["--threads", "two"], "argument --threads: expected an integer, got 'two'"),
        (["--device", "gpu"], "argument --device: expected auto, cpu, cuda or cuda:<n>, got 'gpu'"),
        (["--sites", '"act2"'], "argument --sites: expected a JSON list of strings"),
        (["--sites", '["act2", "act2"]'], r"argument --sites: \['act2'\] listed more than once"),
        (["--sites", "[1]"], "argument --sites: expected a JSON list of strings"),
        (["--config", "[]"], r"argument --config: expected a JSON object \{\.\.\.\}, got \[\]"),
        (["--method", "rank0"], "argument --method: unknown stitching method 'rank0'"),
        (["--pair", "-1"], "argument --pair: must be at least 0, got -1"),
    ],
)
def test_job_options_are_checked_by_the_parser(argv, message):
    """Each was accepted before: --threads 0 reached torch, --sites '"act2"' iterated over letters."""
    base = {
        "--a": "a.pt",
        "--b": "b.pt",
        "--pair": "0",
        "--method": "full",
        "--config": "{}",
        "--out": "o.parquet",
    }
    given = dict(zip(argv[::2], argv[1::2]))
    args = [item for key, value in (base | given).items() for item in (key, value)]
    result = intertwine("stitch-pair", *args)
    assert result.returncode == 2
    assert re.search(f"intertwine stitch-pair: error: {message}", result.stderr), result.stderr


@pytest.mark.parametrize(
    "command, argv, message",
    [
        (
            "table",
            ["a.parquet", "--schema", "stitchin", "--out", "t.parquet"],
            r"argument --schema: no table 'stitchin' \(did you mean 'stitching'\?\)",
        ),
        (
            "rotation-trial",
            [
                "--checkpoint",
                "c.pt",
                "--site",
                "act2",
                "--group",
                "rotation",
                "--trial",
                "0",
                "--config",
                "{}",
                "--training",
                "{}",
                "--out",
                "o",
            ],
            "argument --group: invalid choice",
        ),
        (
            "train-member",
            [
                "--variant",
                "m",
                "--seed",
                "0",
                "--spec",
                '"myrtle"',
                "--training",
                "{}",
                "--out",
                "o.pt",
                "--metrics",
                "m.parquet",
            ],
            r"argument --spec: expected a JSON object",
        ),
        (
            "train-member",
            [
                "--variant",
                "m",
                "--seed",
                "0",
                "--spec",
                "{}",
                "--training",
                "{}",
                "--out",
                "o.pt",
                "--metrics",
                "m.parquet",
                "--eval-batch-size",
                "0",
            ],
            "argument --eval-batch-size: must be at least 1",
        ),
        (
            "dissect-external",
            [
                "--name",
                "r",
                "--arch",
                "vgg16",
                "--weights",
                "w",
                "--config",
                "{}",
                "--out",
                "o",
                "--units-out",
                "u",
            ],
            "argument --arch: invalid choice: 'vgg16'",
        ),
        (
            "zoo-figure",
            [
                "--zoo",
                "z",
                "--variants",
                "{}",
                "--dataset",
                "imagenet",
                "--summary",
                "s",
                "--out",
                "o",
                "--figures",
                "{}",
            ],
            "argument --dataset: invalid choice: 'imagenet'",
        ),
        (
            "stitching-studies",
            ["--table", "t", "--figures", "{}", "--slopes", '{"resnet20": "zero"}'],
            "argument --slopes: expected a JSON object of numbers",
        ),
        (
            "stitching-studies",
            ["--table", "t", "--figures", "{}", "--transformers", '"cct"'],
            "argument --transformers: expected a JSON list of strings",
        ),
    ],
)
def test_other_options_are_checked_by_the_parser(command, argv, message):
    result = intertwine(command, *argv)
    assert result.returncode == 2
    assert re.search(f"intertwine {command}: error: {message}", result.stderr), result.stderr


def test_table_schema_names_each_stages_tables_and_refuses_others(capsys):
    """``table --schema`` takes every table a stage's folder lists, and nothing else: an unknown
    name is an argparse error that names the closest table."""
    from intertwine.workflow.cli import build_parser
    from intertwine.workflow.tables import stage_tables
    from intertwine.workflow import stages

    listed = [name for stage in stages.with_part("tables") for name in stages.part(stage, "tables").TABLES]
    assert list(stage_tables()) == listed and len(set(listed)) == len(listed) == 21
    assert "similarity_zoo" in listed
    parser = build_parser()
    args = parser.parse_args(["table", "x.parquet", "--schema", "zoo_epochs", "--out", "y.parquet"])
    assert args.schema is stage_tables()["zoo_epochs"]
    with pytest.raises(SystemExit):
        parser.parse_args(["table", "x.parquet", "--schema", "rotaton", "--out", "y.parquet"])
    assert "no table 'rotaton' (did you mean 'rotation'?)" in capsys.readouterr().err


def test_incomplete_config_blocks_take_the_schemas_defaults(tmp_path, tiny_shapes_dir):
    """Every job builds its settings with the settings dataclasses: a block that lacks keys (nested
    ones too) runs with the schema's defaults, where the jobs that indexed dicts raised KeyError."""
    import torch

    from intertwine import models
    from intertwine.workflow.zoo import CHECKPOINT_FORMAT, save_checkpoint

    spec = {"arch": "myrtle", "width_multiplier": 0.125}
    paths = []
    for seed in range(2):
        torch.manual_seed(seed)
        paths.append(str(tmp_path / f"seed{seed}.pt"))
        save_checkpoint(
            {
                "format": CHECKPOINT_FORMAT,
                "state_dict": models.build(spec).state_dict(),
                "spec": models.normalize_spec(spec),
                "variant": "myrtle",
                "seed": seed,
                "test_acc": 0.1,
                "test_dtype": "float32",
            },
            paths[-1],
        )
    shared = ["--data", str(tiny_shapes_dir), "--device", "cpu"]
    commands = {
        "rotation-trial": [
            "--checkpoint",
            paths[0],
            "--site",
            "act2",
            "--group",
            "grelu",
            "--trial",
            "0",
            "--config",
            '{"train_images": 32}',
            "--training",
            '{"epochs": 1}',
        ],
        "symmetry-check": ["--checkpoint", paths[0], "--config", '{"images": 8}'],
        "similarity-pair": [
            "--a",
            paths[0],
            "--b",
            paths[1],
            "--pair",
            "0",
            "--procrustes",
            "--config",
            '{"samples": 16}',
        ],
        "dissect-member": [
            "--checkpoint",
            paths[0],
            "--sites",
            '["act4"]',
            "--units-out",
            str(tmp_path / "u.parquet"),
            "--config",
            '{"rotations": 1, "alphas": [0.0, 1.0], "probe": {"images": 16}}',
        ],
    }
    for command, argv in commands.items():
        out = tmp_path / f"{command}.parquet"
        result = intertwine(command, *argv, *shared, "--out", str(out))
        assert result.returncode == 0 and out.exists(), f"{command}:\n{result.stderr[-2000:]}"
    result = intertwine(
        "symmetry-check",
        "--checkpoint",
        paths[0],
        "--config",
        '{"imgs": 8}',
        *shared,
        "--out",
        str(tmp_path / "x.parquet"),
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "config key symmetry.imgs: not a setting of SymmetryConfig" in result.stderr


@pytest.mark.parametrize(
    "command, argv, code, message",
    [
        (
            "pullback-pair",
            [
                "--a",
                "a.pt",
                "--b",
                "b.pt",
                "--pair",
                "0",
                "--config",
                "{}",
                "--sites",
                '"act2"',
                "--out",
                "o",
                "--transfer-out",
                "t",
            ],
            2,
            "argument --sites: expected a JSON list of strings",
        ),
        (
            "pullback-member",
            ["--checkpoint", "c.pt", "--config", "{}", "--out", "o.parquet"],
            2,
            "the following arguments are required: --faithfulness-out",
        ),
        (
            "pullback-member",
            ["--checkpoint", "c.pt", "--config", '{"spreads": []}', "--out", "o", "--faithfulness-out", "f"],
            1,
            r"config key pullback.spreads: \[\] should be non-empty",
        ),
        (
            "pullback-member",
            [
                "--checkpoint",
                "c.pt",
                "--config",
                '{"temperatures": 2}',
                "--out",
                "o",
                "--faithfulness-out",
                "f",
            ],
            1,
            "config key pullback.temperatures: not a setting of PullbackConfig",
        ),
        (
            "pullback-images",
            [
                "--checkpoint",
                "c.pt",
                "--config",
                '{"pgd": {"steps": 0}}',
                "--figures",
                "{}",
                "--out",
                "g.png",
            ],
            2,
            "the following arguments are required: --pgd",
        ),
        (
            "pullback-table",
            [
                *("--symmetry", "s.parquet", "--out", "s", "--faithfulness-out", "f", "--agreement-out", "a"),
                *("--transfer-out", "t"),
            ],
            2,
            "the following arguments are required: --summary, --faithfulness",
        ),
        (
            "pullback-table",
            [
                *("--symmetry", "s.parquet", "s.parquet", "--faithfulness", "f.parquet"),
                *("--out", "s", "--faithfulness-out", "f", "--agreement-out", "a", "--summary", "x.csv"),
                *("--transfer-out", "t"),
            ],
            1,
            "s.parquet is given more than once",
        ),
    ],
)
def test_pullback_commands_refuse_bad_input(command, argv, code, message):
    result = intertwine(command, *argv)
    assert result.returncode == code and "Traceback" not in result.stderr
    assert re.search(message, result.stderr), result.stderr


def test_a_cuda_device_that_is_not_there_is_one_clear_error():
    import torch

    from intertwine.utils import resolve_device

    missing = "cuda" if not torch.cuda.is_available() else f"cuda:{torch.cuda.device_count()}"
    with pytest.raises(ValueError, match=rf"device: '{missing}' was requested but .*; set device: auto"):
        resolve_device(missing)  # was a RuntimeError, printed by the CLI as a traceback


def test_version_and_help_say_what_the_tool_is():
    from intertwine import __version__

    version = intertwine("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"intertwine {__version__}"
    help_text = intertwine("--help").stdout
    assert "make run" in help_text and "snakemake" in help_text and "check-config" in help_text
    assert "``" not in help_text  # no reST markup from the module's docstring


def test_every_option_has_help_text():
    missing = [
        f"{name} {action.option_strings or action.dest}"
        for name, parser in subcommands().items()
        for action in parser._actions
        if action.help is None and action.dest != "help"
    ]
    assert missing == []


def test_stitch_pair_help_lists_every_method():
    from intertwine.workflow.settings import G_RELU_METHODS

    help_text = " ".join(intertwine("stitch-pair", "--help").stdout.split())
    for method in ("full", "rank<r>", "l1_<lambda>", *G_RELU_METHODS):
        assert method in help_text, method


def test_check_config_gives_the_workflows_messages_naming_the_files(tmp_path):
    default = REPO / "config" / "config.yaml"
    assert intertwine("check-config", str(default)).returncode == 0
    wrong = tmp_path / "site.yaml"
    wrong.write_text("similarity:\n  variants: [resnet56]\n")
    result = intertwine("check-config", str(default), str(wrong))
    assert result.returncode != 0
    assert f"{default}, {wrong} (merged onto config/config.yaml):" in result.stderr
    assert "config key similarity.variants: ['resnet56'] must be among zoo.variants: [" in result.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("zoo:\n  seeds: 3\n   bad: 1\n")
    result = intertwine("check-config", str(broken))
    assert f"{broken}, line 3, column 7: not valid YAML" in result.stderr
    misspelt = tmp_path / "misspelt.yaml"
    misspelt.write_text("zoo:\n  seedz: 3\n")
    result = intertwine("check-config", str(default), str(misspelt))
    assert "config key zoo.seedz: unknown key (misspelt?)" in result.stderr


def test_check_config_checks_an_override_only_file_merged_onto_the_default(tmp_path):
    """A file holding only a change is checked as the run uses it: on config/config.yaml, its
    mappings merged key by key (before, against the schema's defaults alone, a file of overrides
    failed: `symmetry.images: 256 test images asked for, but the test split of shapes has 128`)."""
    import yaml

    from intertwine.workflow.settings import validate_config

    overrides = tmp_path / "epochs.yaml"
    overrides.write_text("zoo:\n  training: {epochs: 2}\n")
    default = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    result = intertwine("check-config", str(overrides), "--show")
    assert result.returncode == 0, result.stderr
    shown, _, verdict = result.stdout.rpartition(f"{overrides} (merged onto config/config.yaml): valid")
    expected = default
    expected["zoo"]["training"]["epochs"] = 2  # the change; batch_size, lr, ... stay the default's
    validate_config(expected)
    assert yaml.safe_load(shown) == expected
    assert verdict.startswith(f" ({len(default['zoo']['variants'])} zoo variants: myrtle, resnet20,")
    whole = tmp_path / "whole.yaml"  # the one way to leave the default out
    whole.write_text("replaces_default: true\nzoo:\n  training: {epochs: 2}\n")
    result = intertwine("check-config", str(whole), "--show")
    assert result.returncode == 0, result.stderr
    assert "replacing the default): valid (1 zoo variants: myrtle)" in result.stdout
    elsewhere = intertwine("check-config", str(overrides), cwd=tmp_path)  # no config/config.yaml there
    assert elsewhere.returncode != 0 and "the default config is not there" in elsewhere.stderr
    assert "Run from the repository root, as snakemake is run, or give --default PATH" in elsewhere.stderr
    given = intertwine(
        "check-config", str(overrides), "--default", str(REPO / "config" / "config.yaml"), cwd=tmp_path
    )
    assert given.returncode == 0, given.stderr


def test_check_config_names_a_missing_data_folder_and_its_key(tmp_path):
    """The data folder is checked before any job: a wrong data.cifar10.root was found only when the
    data job ran."""
    config = tmp_path / "cifar.yaml"
    root = tmp_path / "cifar10"
    config.write_text(f"data:\n  dataset: cifar10\n  cifar10: {{root: {root}}}\n")
    result = intertwine("check-config", str(config))
    assert result.returncode != 0
    assert (
        f"config key data.cifar10.root ({root}): {root} is not a directory; expected CIFAR-10"
        in result.stderr
    )
    (root / "train").mkdir(parents=True)
    result = intertwine("check-config", str(config))
    assert f"no CIFAR-10 found in {root}; expected CIFAR-10 under {root}" in result.stderr
    (root / "test").mkdir()
    result = intertwine("check-config", str(config))  # the folders are there: now what they hold
    assert result.returncode != 0
    assert f"config key data.cifar10.root: {root} has 0 class folders with images" in result.stderr
    assert f"config key data.cifar10.root: {root / 'train'} holds no images" in result.stderr


@pytest.mark.parametrize("typed, meant", [("stich-pair", "stitch-pair"), ("check_config", "check-config")])
def test_a_mistyped_command_says_which_was_meant(typed, meant):
    result = intertwine(typed, "--help")
    assert result.returncode == 2
    assert f"unknown command {typed!r}; did you mean {meant!r}" in result.stderr
    nothing_close = intertwine("zzzz")
    assert "unknown command 'zzzz' (`intertwine --help` lists the commands)" in nothing_close.stderr
