"""The command line: what a rule runs, and the errors a person sees."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from intertwine.cli import build_parser

REPO = Path(__file__).resolve().parents[1]
# Subcommands that run torch: each is named like its rule and its function in intertwine.jobs.<stage>.
JOBS = {"train-member": "zoo", "rotation-trial": "rotation", "stitch-pair": "stitching",
        "similarity-pair": "similarity", "symmetry-check": "symmetry", "dissect-member": "dissection",
        "dissect-external": "dissection", "dissection-masks": "dissection"}


def intertwine(*args):
    return subprocess.run([sys.executable, "-m", "intertwine", *args], capture_output=True, text=True)


def subcommands():
    action = next(a for a in build_parser()._actions if a.dest == "command")
    return action.choices


def rule_commands():
    """Each rule's `intertwine` command as its shell line gives it, {wildcards}/{params} filled
    with placeholders: {rule: argv}."""
    commands = {}
    for smk in (REPO / "workflow" / "rules").glob("*.smk"):
        for rule, body in re.findall(r"^rule (\w+):\n(.*?)(?=^rule |\Z)", smk.read_text(), re.S | re.M):
            shell = re.search(r"shell:\n((?:\s+\".*\"\n?)+)", body)
            if shell:
                line = "".join(re.findall(r"\"(.*)\"", shell.group(1)))
                commands[rule] = line
    return commands


def test_every_torch_job_is_named_like_its_rule_and_function():
    import importlib

    for name, stage in JOBS.items():
        assert name in subcommands()
        assert callable(getattr(importlib.import_module(f"intertwine.jobs.{stage}"), name.replace("-", "_")))
    rules = rule_commands()
    for name in [*JOBS, "prepare-data"]:
        assert rules[name.replace("-", "_")].startswith(f"intertwine {name} "), name


@pytest.mark.parametrize("rule", sorted(rule_commands()))
def test_each_rule_command_parses(rule):
    line = rule_commands()[rule].split(" > {log}")[0].strip("( ")
    line = re.sub(r"\{params\.(paths|parts|procrustes|cka)\}", " ", line)  # optional flags, as built
    for command in line.split(" && intertwine "):
        argv = command.removeprefix("intertwine ").split()
        # Fill the rule's placeholders: JSON blocks, integers, paths.
        argv = ["{}" if a.endswith(":q}") else "1" if re.fullmatch(r"\{(wildcards\.(seed|pair|trial)|params\.seed|threads)\}", a)
                else a.replace("{", "x").replace("}", "x") for a in argv]
        args = build_parser().parse_args(argv)
        if "threads" in vars(args):
            assert "--device" in argv, f"{rule} does not pass --device"


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
    block = {"dataset": "cifar10", "val_size": 10,
             "cifar10": {"root": str(tmp_path / "nowhere"), "layout": "auto", "download": False}}
    result = intertwine("prepare-data", "--config", json.dumps(block), "--out", str(tmp_path / "cache"))
    assert result.returncode != 0
    assert "intertwine prepare-data: error: no CIFAR-10 found" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "cache").exists()


def test_train_refuses_an_existing_checkpoint_before_training(tmp_path):
    checkpoint = tmp_path / "seed0.pt"
    checkpoint.write_bytes(b"trained weights")
    result = intertwine("train-member", "--data", str(tmp_path / "no-data"), "--variant", "m", "--seed", "0",
                        "--spec", '{"arch": "myrtle"}', "--training", "{}", "--device", "cpu",
                        "--out", str(checkpoint), "--metrics", str(tmp_path / "m.parquet"))
    assert result.returncode != 0 and "never overwritten" in result.stderr
    assert checkpoint.read_bytes() == b"trained weights"
    # The log starts with the command that reruns the job.
    assert result.stderr.splitlines()[0].startswith("intertwine train-member --data ")


def test_bad_json_names_the_argument(tmp_path):
    result = intertwine("prepare-data", "--config", "{not json", "--out", str(tmp_path))
    assert result.returncode == 2 and "--config" in result.stderr and "not valid JSON" in result.stderr
