# Validation, constants and input functions. Which jobs each stage runs, and what each job is
# given, is the plan (intertwine.plan): plain Python, unit-tested, the same for every caller.
import functools
import hashlib
import os
import shutil
import sys
from pathlib import Path

import jsonschema
from snakemake.exceptions import WorkflowError
from snakemake.utils import validate

import intertwine
from intertwine.config import describe_validation_error
from intertwine.plan import Plan, as_json
from intertwine.settings import SCHEMA_PATH

try:
    validate(config, schema=str(SCHEMA_PATH), set_default=True)
except WorkflowError as err:
    if not isinstance(err.__context__, jsonschema.ValidationError):
        raise
    raise WorkflowError(describe_validation_error(err.__context__)) from None

PLAN = Plan(config)
_errors = PLAN.errors()
if _errors:
    raise WorkflowError("\n".join(_errors))


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

# Every rule runs in the project's one environment (used with --software-deployment-method conda).
CONDA_ENV = "../../environment.yml"

DATASET = config["data"]["dataset"]
DATA_DIR = f"results/data/{DATASET}"
DATA_FILES = multiext(f"{DATA_DIR}/", "train.npz", "val.npz", "test.npz", "meta.json")
THREADS = config["zoo"]["training"]["threads"]  # the rules' threads directive (no rerun trigger)

# The library files each stage runs; a change to them reruns that stage (and its dependents) only.
STAGE_CODE = {
    "data": ["data/__init__.py", "data/shapes.py", "data/cifar10.py"],
    "zoo": ["models", "data/augment.py", "training.py", "zoo.py", "jobs/__init__.py", "jobs/zoo.py"],
    "rotation": ["rotation.py", "groups.py", "jobs/__init__.py", "jobs/rotation.py"],
    "symmetry": ["symmetry.py", "groups.py", "jobs/__init__.py", "jobs/symmetry.py"],
    "stitching": ["stitching.py", "groups.py", "jobs/__init__.py", "jobs/stitching.py"],
    "similarity": ["similarity.py", "gated.py", "kernels", "jobs/__init__.py", "jobs/similarity.py"],
    "gated": ["gated.py", "kernels", "symmetry.py", "similarity.py", "jobs/__init__.py", "jobs/gated.py"],
    "dissection": [
        "dissection.py",
        "data/concepts.py",
        "data/broden.py",
        "data/cifar10.py",
        "data/shapes.py",
        "models/__init__.py",
        "models/imagenet.py",
        "groups.py",
        "jobs/__init__.py",
        "jobs/dissection.py",
    ],
    "deqntk": ["deqntk.py", "kernels/deq.py", "jobs/__init__.py", "jobs/deqntk.py"],
    # symmetry.py: the group action; stitching.py: the Hungarian matching of hidden units
    "pullback": [
        "pullback.py",
        "pullback_study.py",
        "symmetry.py",
        "groups.py",
        "stitching.py",
        "jobs/__init__.py",
        "jobs/pullback.py",
    ],
    "kernel_reference": [
        "deqntk.py",
        "kernels/deq.py",
        "similarity.py",
        "jobs/__init__.py",
        "jobs/deqntk.py",
    ],
    "tables": ["tables.py"],
    "claims": ["claims.py"],
    "deqntk_table": ["tables.py", "paper.py"],  # the table holds the paper's accuracies
    "figures": ["figures.py", "paper.py"],
}
_PACKAGE = Path(intertwine.__file__).parent


@functools.cache  # each rule asks; the files are read once per run
def code_hash(stage):
    digest = hashlib.sha256()
    for entry in STAGE_CODE[stage]:
        path = _PACKAGE / entry
        for file in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(file.relative_to(_PACKAGE).as_posix().encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:12]


def member(pairs, which):
    """Input function: the checkpoint of member a or b of the job's pair (pairs: variant -> pairs)."""
    index = {"a": 0, "b": 1}[which]
    return lambda wc: f"results/zoo/{wc.variant}/seed{pairs(wc.variant)[int(wc.pair)][index]}.pt"


def data_dir(wildcards, input):
    """Params function: the data cache directory, from the job's first input."""
    return os.path.dirname(input[0])
