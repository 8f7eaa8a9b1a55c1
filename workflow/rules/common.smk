# Validation, constants and input functions. Which jobs each stage runs, and what each job is
# given, is the plan (intertwine.workflow.plan): plain Python, unit-tested, the same for every caller.
import os
import re
import shutil
import sys

from snakemake.exceptions import WorkflowError

from intertwine.data.contents import check_contents, damaged_cache_message
from intertwine.workflow.cli import commands
from intertwine.workflow.cluster import JobNeeds, request, submission
from intertwine.workflow.code_identity import (
    architecture_key,
    code_identities,
    factory_identity,
    variant_architectures,
)
from intertwine.workflow.config import check_config, data_folder_errors, read_config_file
from intertwine.workflow.plan import Plan, as_json
from intertwine.workflow import stages
from intertwine.workflow.run_lock import unlock_refusal

# Snakemake reads each config file itself, keeping the last of a key written twice and running a
# file that sets __use_yte__ as a YTE template (before this file is read): each file is read again
# strictly, so that the run stops on either, naming the file and the lines, as check-config does.
for _file in workflow.configfiles:
    try:
        read_config_file(_file)
    except ValueError as _err:
        _yte = (
            " (Snakemake evaluated it while reading the file; no job has run)"
            if "__use_yte__" in str(_err)
            else ""
        )
        raise WorkflowError(f"{_err}{_yte}") from None
# Snakemake's lock error advises --unlock "if you are sure that no other instances of snakemake are
# running on this directory"; unlocking under a run still active runs its jobs twice, so --unlock
# first looks for that run (intertwine.workflow.run_lock) and refuses, naming it.
if "--unlock" in sys.argv:
    _refusal = unlock_refusal(os.getcwd())
    if _refusal:
        raise WorkflowError(_refusal)
_errors = check_config(config)  # the schema (filling in its defaults), then the plan's cross-checks
if _errors:
    _files = ", ".join(map(str, workflow.configfiles)) or "the config"
    raise WorkflowError(f"{_files}:\n" + "\n".join(_errors))
PLAN = Plan(config)


# device: cuda on a machine without a GPU would fail every torch job, the first after the data
# stage. The Snakefile is parsed before Snakemake picks its executor (snakemake.api: the workflow
# is included when the DAG API is made, `Workflow.execute` receives the executor plugin later), so
# the check waits for `onstart` (in the Snakefile), which runs in the main Snakemake process
# before any job (not on dry runs, not in jobs: those get --no-hooks), once `workflow.local_exec`
# says whether this process runs the jobs. A cluster executor is left alone: its login node need
# not have the GPUs its jobs get.
def check_device():
    device = config["device"]
    if not device.startswith("cuda") or not workflow.local_exec:
        return
    from intertwine.utils import cuda_problem

    problem = cuda_problem(device)
    if problem:
        raise WorkflowError(
            f"config key device: {device!r}, but {problem}, and this run executes its jobs on this "
            "machine, so every torch job would fail. Set device: auto (CUDA when present, else the "
            "CPU) or device: cpu in the config (or --config device=cpu), or run where the GPU is "
            "(e.g. through the cluster profile: --workflow-profile profiles/slurm)"
        )


# A data set read from a folder (data.<dataset>.root) is checked before the first job, not when the
# data job reaches it; like the device, at `onstart` (dry runs and the jobs themselves skip it).
def check_data_folder():
    problems = data_folder_errors(config, os.getcwd())
    if problems:
        raise WorkflowError("\n".join(problems))


# Rules call the `intertwine` command of the environment that runs Snakemake, also when that
# environment is not activated (`.venv/bin/snakemake ...`): then its bin directory goes first on
# every job's PATH.
_OWN = os.path.join(os.path.dirname(sys.executable), "intertwine")
if os.path.exists(_OWN) and shutil.which("intertwine") != _OWN:
    shell.prefix(f'export PATH="{os.path.dirname(_OWN)}:$PATH"; ')
elif shutil.which("intertwine") is None:
    raise WorkflowError(
        "the rules run the `intertwine` command, which is neither beside this Python "
        f"({sys.executable}) nor on PATH; install the package into the environment that runs "
        "Snakemake (`make .venv`, or `pip install -e .`)"
    )

# Each shell line is that of the one `intertwine` command it runs, built from what each option of
# the command says it is passed (intertwine.workflow.commands.Command), as in
# `shell: CLI["stitch-pair"].shell()`. Options passed only when given are params,
# `**CLI[...].when_given(...)`.
CLI = commands()

# Every rule runs in the project's one environment (used with --software-deployment-method conda).
CONDA_ENV = "../../environment.yml"

DATASET = config["data"]["dataset"]
DATA_DIR = f"results/data/{DATASET}"
DATA_OUTPUTS = multiext(f"{DATA_DIR}/", "train.npz", "val.npz", "test.npz", "meta.json")
# A damaged data cache is newer than what was trained on it, so Snakemake would schedule the zoo
# over finished work (as root deleting the protected checkpoints first): the cache is checked
# against the content identity the data job recorded before any job is scheduled, here (which
# also gives a touched but unchanged file its recorded time back: content, not time, reruns), and
# every job that reads it refuses to be scheduled while it is damaged (intertwine.data.contents).
# The data job itself is not refused: regenerating the cache is the repair.
DATA_PROBLEMS = check_contents(DATA_DIR)


def DATA_FILES(wildcards):
    """Input function: the data cache, once it is whole."""
    if DATA_PROBLEMS:
        raise WorkflowError(damaged_cache_message(DATA_DIR, DATA_PROBLEMS))
    return DATA_OUTPUTS


THREADS = config["zoo"]["training"]["threads"]  # the rules' threads directive (no rerun trigger)

# Cluster resources. A rule says whether its jobs need a GPU (on_gpu) or not (on_cpu), and what
# they need (a function of its wildcards: NEEDS.light, or the rule's own, NEEDS.<rule>, declared in
# its stage's resources.py); where that is (config block `cluster`) and how much to ask for
# (intertwine.workflow.cluster) follow. A profile's set-resources still win over these.
NEEDS = JobNeeds(PLAN)


def on_gpu(need):
    """A rule's resources when its jobs need a GPU: the GPU partition, one GPU, memory and time."""
    return _submitted(need, gpu=True)


def on_cpu(need=NEEDS.light):
    """A rule's resources when its jobs run on CPUs only."""
    return _submitted(need, gpu=False)


def _submitted(need, gpu):
    cluster = config["cluster"]

    def amount(index):
        return lambda wildcards, attempt: request(need(**dict(wildcards.items())), cluster, attempt)[index]

    return submission(cluster, gpu) | {"mem_mb": amount(0), "runtime": amount(1)}


# Where each stage's code starts: its job functions (a module: all of it). A stage's code identity
# is the code those reach, followed through the package's imports and names, without comments or
# docstrings (intertwine.workflow.code_identity): editing what a job runs reruns it and what reads it;
# editing anything else reruns nothing. Each stage's jobs, figures and tables are found in its folder
# through the stage registry (intertwine.workflow.stages), and what else its jobs start from in its
# `identity` module: ENTRIES (jobs that run one function) and TABLE_COMPUTES (what its table job
# computes beyond collecting rows).
def identity_part(stage, name, empty):
    """``name`` of the stage's ``identity`` module, or ``empty`` when it declares none."""
    if stage not in stages.with_part("identity"):
        return empty
    return getattr(stages.part(stage, "identity"), name, empty)


STAGE_ENTRIES = {
    "data": ["intertwine.data:build_dataset", "intertwine.data:write_dataset"],
    # "zoo", "stitching", ...: the stage's job module
    **{stage: [stages.module_name(stage, "job")] for stage in stages.with_part("job")},
    # "zoo_figures", ...: the stage's figures module, and the papers' numbers some draw beside ours
    **{
        f"{stage}_figures": [stages.module_name(stage, "figures"), "intertwine.workflow.paper"]
        for stage in stages.with_part("figures")
    },
    # "deqntk_gram", ...: jobs that run one function of their stage's job module
    **{
        name: entries
        for stage in stages.STAGES
        for name, entries in identity_part(stage, "ENTRIES", {}).items()
    },
    # "zoo_table", ...: the schemas in the stage's folder, and what the job computes beyond collecting
    **{
        f"{stage}_table": [
            "intertwine.workflow.tables",
            stages.module_name(stage, "tables"),
            *identity_part(stage, "TABLE_COMPUTES", []),
        ]
        for stage in stages.with_part("tables")
    },
    # the scorecard: its rule, every stage's claims and the tables it reads
    "claims": [
        "intertwine.workflow.claims",
        *(stages.module_name(stage, "claims") for stage in stages.with_part("claims")),
        *(stages.module_name(stage, "tables") for stage in stages.with_part("tables")),
    ],
}


# Kept in .snakemake/intertwine/ while the package's sources stay the same: every dry run and every
# cluster job parses this file.
# A job on one zoo variant (a {variant} wildcard) has its stage's identity for that variant's
# architectures (variant_code_hash): an edit to one architecture reruns its variants' jobs only.
CODE_IDENTITIES = code_identities(
    STAGE_ENTRIES,
    os.path.join(".snakemake", "intertwine"),
    [variant_architectures(config["zoo"]["variants"], v) for v in config["zoo"]["variants"]],
)


def code_hash(stage):
    return CODE_IDENTITIES[stage]


def variant_code_hash(stage, variant):
    """The code identity of a job of ``stage`` that builds the models of zoo variant ``variant`` (with
    a custom architecture's factory file: factory_identity)."""
    variants = config["zoo"]["variants"]
    return CODE_IDENTITIES[
        architecture_key(stage, variant_architectures(variants, variant))
    ] + factory_identity(variants, variant)


def member(pairs, which):
    """Input function: the checkpoint of member a or b of the job's pair (pairs: variant -> pairs)."""
    index = {"a": 0, "b": 1}[which]
    return lambda wc: f"results/zoo/{wc.variant}/seed{pairs(wc.variant)[int(wc.pair)][index]}.pt"


def data_dir(wildcards, input):
    """Params function: the data cache directory, from the job's first input."""
    return os.path.dirname(input[0])
