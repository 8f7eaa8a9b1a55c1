"""What every job of a config asks SLURM for, as Snakemake resolves it through profiles/slurm with a
user's site file: GPU jobs on the GPU partition with a GPU, every other job on the CPU partition,
the site's account on every job, and memory and wall time no smaller than what the job does needs."""

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import code_identities
from intertwine.workflow.cluster import JobNeeds, request
from intertwine.workflow.plan import Plan
from intertwine.workflow.settings import validate_config

REPO = Path(__file__).resolve().parents[1]
SITE = {"cpu_partition": "site-cpu", "gpu_partition": "site-gpu", "account": "site-lab", "qos": "site-qos"}
# Run by Snakemake itself, never submitted (the target rule; zoo.smk's localrules), though a
# dry run prints them as `rule`.
LOCAL = {"all", "unpack_member"}
pytestmark = pytest.mark.workflow


def dry_run(tmp_path, config, *args, site=SITE):
    """[(rule, wildcards, resources, shell command)] of every job a dry run through the profile plans."""
    files = [str(config)]
    if site is not None:
        (tmp_path / "site.yaml").write_text(yaml.safe_dump({"cluster": site}))
        files.append(str(tmp_path / "site.yaml"))
    command = [
        sys.executable,
        "-m",
        "snakemake",
        "-s",
        str(REPO / "workflow" / "Snakefile"),
        "-d",
        str(tmp_path),
    ]
    command += ["--workflow-profile", str(REPO / "profiles" / "slurm"), "-n", "--configfile", *files, *args]
    code_identities.seed(tmp_path)
    result = subprocess.run(command, capture_output=True, text=True)
    code_identities.keep(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule \w+:\n)", result.stdout):
        head = re.match(r"(local)?rule (\w+):\n", block)
        if not head or head[1] or head[2] in LOCAL:
            continue
        fields = dict(re.findall(r"^    (\w+): (.*)$", block, re.M))
        wildcards = dict(item.split("=", 1) for item in fields.get("wildcards", "").split(", ") if item)
        resources = dict(item.split("=", 1) for item in fields["resources"].split(", "))
        shell = re.search(r"^Shell command: (.*)$", block, re.M)
        jobs.append((head[2], wildcards, resources, shell[1] if shell else ""))
    return jobs


def plan_of(config):
    config = yaml.safe_load(Path(config).read_text())
    config["cluster"] = SITE
    validate_config(config)
    return Plan(config)


def lower_bounds(plan, rule, wildcards):
    """What the job's work needs at the least, computed here from the config alone: (MB, minutes)."""
    deqntk = plan.config["deqntk"]
    if rule == "deqntk_gram":  # the float64 block it writes
        rows = plan.deqntk_stop(wildcards["part"], int(wildcards["start"])) - int(wildcards["start"])
        return 8 * rows * plan.deqntk_train_rows / 1e6, 0
    if rule == "deqntk_regression":  # the float64 training and test-train Grams
        n = int(wildcards["n_train"])
        return 8 * (n * n + deqntk["n_test"] * n) / 1e6, 0
    if rule in ("train_member", "train_pack"):  # every member's images at 30,000 images/s
        members = int(wildcards["last"]) - int(wildcards["first"]) + 1 if rule == "train_pack" else 1
        images = plan.member_epochs(wildcards["variant"]) * (
            plan.dataset_sizes()[0] - plan.config["data"]["val_size"]
        )
        return 0, members * images / 30_000 / 60
    return 0, 0


@pytest.mark.parametrize(
    "config",
    ["config/config.yaml", "config/cifar10_cpu.yaml", "config/paper.yaml", "config/deqntk_mnist.yaml"],
)
def test_every_job_goes_where_its_rule_needs_with_what_it_needs(tmp_path, config):
    plan, needs = plan_of(REPO / config), None
    needs = JobNeeds(plan)
    jobs = dry_run(tmp_path, REPO / config)
    assert len(jobs) > 20
    for rule, wildcards, res, shell in jobs:
        what = f"{rule} {wildcards}"
        gpu = res.get("gpu") == "1"
        # a job that runs torch on the configured device is a GPU job, and only those are
        assert gpu == (" --device " in shell and "dissection-masks" not in shell), what
        assert res["slurm_partition"] == SITE["gpu_partition" if gpu else "cpu_partition"], what
        assert res["slurm_account"] == SITE["account"] and res["qos"] == SITE["qos"], what
        need = getattr(needs, rule, needs.heavy if gpu else needs.light)(**wildcards)
        mem_mb, minutes = request(need, plan.config["cluster"], attempt=1)
        assert int(res["mem_mb"]) >= mem_mb and int(res["runtime"]) >= minutes, what
        floor_mb, floor_minutes = lower_bounds(plan, rule, wildcards)
        assert int(res["mem_mb"]) >= floor_mb and int(res["runtime"]) >= floor_minutes, what


def test_an_account_on_the_command_line_keeps_every_other_setting(tmp_path):
    """`--default-resources slurm_account=...` as the SLURM plugin documents it: the jobs keep their
    partitions, memory and time (the profile sets no defaults it could drop)."""
    jobs = dry_run(
        tmp_path, REPO / "config" / "config.yaml", "--default-resources", "slurm_account=cli", site=None
    )
    for rule, wildcards, res, _ in jobs:
        assert res["slurm_account"] == "cli", rule
        assert res.get("slurm_partition") == ("gpu" if res.get("gpu") == "1" else None), rule
        assert int(res["mem_mb"]) >= 2000 and int(res["runtime"]) >= 15, rule


def test_no_site_file_sends_cpu_jobs_to_the_default_partition(tmp_path):
    jobs = dry_run(tmp_path, REPO / "config" / "config.yaml", site=None)
    for rule, _, res, _ in jobs:
        if res.get("gpu") == "1":
            assert res["slurm_partition"] == "gpu", rule
        else:
            assert "slurm_partition" not in res, rule  # sbatch's default partition
        assert "slurm_account" not in res


def test_a_retried_job_asks_for_more():
    plan = plan_of(REPO / "config" / "paper.yaml")
    need = JobNeeds(plan).deqntk_regression(variances="w0.25_u0.25_b0.5", n_train="50000")
    first, second = (request(need, plan.config["cluster"], attempt) for attempt in (1, 2))
    assert second[0] >= 2 * first[0] - 1 and second[1] >= 2 * first[1] - 1
    # 50,000^2 float64 is 20 GB: the Gram alone is more than the 4 GB the profile once gave
    assert first[0] > 20_000 * plan.config["cluster"]["margin"]
    assert math.isfinite(first[1])
