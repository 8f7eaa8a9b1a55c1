"""The SLURM cluster test (tests/cluster, `make test-cluster`) without SLURM.

Its job checks must not depend on how long the workflow ran: slurmctld forgets a
finished job MinJobAge seconds after it ended (there is no accounting database), so
the checks read files written while the jobs ran (jobcomp/filetxt when a job ends,
the PrologSlurmctld's `scontrol show job` when it starts), never a `scontrol show job`
taken after the run.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

CLUSTER = Path(__file__).parent / "cluster"
RUN_SH = CLUSTER / "run.sh"
CHECK = CLUSTER / "check_jobs.py"
RUN_ID = "de01f4d8-7056-49cd-844d-8705b52109d0"

SNAKEMAKE_LOG = f"""\
Building DAG of jobs...
SLURM run ID: {RUN_ID}
Select jobs to execute...

[Mon Nov 23 18:06:31 2026]
rule train_member:
    output: out/zoo_1.txt
    jobid: 2
    wildcards: i=1
    resources: tmpdir=<TBD>, mem_mb=16000, slurm_partition=gpu, runtime=120, cpus_per_task=1, gpu=1
Shell command: intertwine train-member

[Mon Nov 23 18:06:31 2026]
rule train_member:
    output: out/zoo_0.txt
    jobid: 1
    wildcards: i=0
    resources: tmpdir=<TBD>, mem_mb=16000, slurm_partition=gpu, runtime=120, cpus_per_task=1, gpu=1
Shell command: intertwine train-member
Job 2 has been submitted with SLURM jobid 1 (log: slurm_logs/rule_train_member/1/1.log).
Job 1 has been submitted with SLURM jobid 2 (log: slurm_logs/rule_train_member/0/2.log).
Finished jobid: 2 (Rule: train_member)

[Mon Nov 23 18:06:45 2026]
rule zoo_table:
    input: out/zoo_0.txt, out/zoo_1.txt
    output: out/table.txt
    jobid: 3
    resources: tmpdir=<TBD>, mem_mb=2000, slurm_partition=cpu, runtime=15, cpus_per_task=1
Shell command: intertwine table
Job 3 has been submitted with SLURM jobid 3 (log: slurm_logs/rule_zoo_table/3.log).

[Mon Nov 23 18:07:00 2026]
localrule all:
    input: out/table.txt
    jobid: 0
"""


def jobcomp_line(jobid, partition, state="COMPLETED", exit_code="0:0", name=RUN_ID):
    """A line as jobcomp/filetxt (SLURM 22.05) writes it."""
    return (
        f"JobId={jobid} UserId=root(0) GroupId=root(0) Name={name} JobState={state} "
        f"Partition={partition} TimeLimit=120 StartTime=2026-11-23T18:06:32 "
        f"EndTime=2026-11-23T18:06:38 NodeList=vm NodeCnt=1 ProcCnt=1 WorkDir=/tmp/x/work "
        f"ReservationName= Tres=cpu=1,mem=16000M,node=1,billing=1 Account= QOS= WcKey= "
        f"Cluster=unknown SubmitTime=2026-11-23T18:06:31 EligibleTime=2026-11-23T18:06:31 "
        f"DerivedExitCode=0:0 ExitCode={exit_code} \n"
    )


def start_line(jobid, comment, partition, gpu=True, account="lab"):
    """A `scontrol show job --oneliner` line as the PrologSlurmctld saves it."""
    tres = " TresPerJob=gres:gpu:1" if gpu else ""
    return (
        f"JobId={jobid} JobName={RUN_ID} UserId=root(0) GroupId=root(0) Account={account} JobState=CONFIGURING "
        f"Reason=None ExitCode=0:0 Partition={partition} Comment={comment} "
        f"WorkDir=/tmp/x/work{tres} TresPerTask=cpu:1\n"
    )


JOBCOMP = [jobcomp_line(1, "gpu"), jobcomp_line(2, "gpu"), jobcomp_line(3, "cpu")]
STARTS = [
    start_line(2, "rule_train_member_wildcards_0", "gpu"),
    start_line(1, "rule_train_member_wildcards_1", "gpu"),
    start_line(3, "rule_zoo_table", "cpu", gpu=False),
]


def run_check(tmp_path, jobcomp=JOBCOMP, starts=STARTS):
    (tmp_path / "snakemake.log").write_text(SNAKEMAKE_LOG)
    (tmp_path / "jobcomp.txt").write_text("".join(jobcomp))
    (tmp_path / "job_starts.txt").write_text("".join(starts))
    return subprocess.run(
        [
            sys.executable,
            str(CHECK),
            "--snakemake-log",
            str(tmp_path / "snakemake.log"),
            "--jobcomp",
            str(tmp_path / "jobcomp.txt"),
            "--job-starts",
            str(tmp_path / "job_starts.txt"),
            "--gpu-rule",
            "train_member",
            "--cpu-partition",
            "cpu",
            "--gpu-partition",
            "gpu",
            "--account",
            "lab",
        ],
        check=False,
        capture_output=True,
        text=True,
    )


def test_check_passes_from_the_record_files_alone(tmp_path):
    # No `scontrol show job` output at all: every job is long gone from slurmctld.
    r = run_check(tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("3 jobs ran on SLURM, 2 with a GPU request")
    assert "train_member x2, zoo_table x1; local: all" in r.stdout


def test_a_later_record_of_a_job_wins(tmp_path):
    # A requeued job is recorded again; its last completion counts.
    r = run_check(tmp_path, jobcomp=[jobcomp_line(1, "gpu", "NODE_FAIL", "0:0")] + JOBCOMP)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(
    "jobcomp, starts, message",
    [
        (JOBCOMP[1:], STARTS, "SLURM job 1 has no completion record in"),
        (
            [jobcomp_line(1, "gpu", "FAILED", "1:0")] + JOBCOMP[1:],
            STARTS,
            "SLURM job 1 is FAILED with exit code 1:0, expected COMPLETED 0:0",
        ),
        (
            [jobcomp_line(1, "gpu", name="other-run")] + JOBCOMP[1:],
            STARTS,
            "SLURM job 1 has name other-run, not the run ID",
        ),
        (JOBCOMP, STARTS[:2], "SLURM job 3 has no start record in"),
        (
            JOBCOMP,
            STARTS[:1] + [start_line(1, "rule_train_member_wildcards_1", "gpu", gpu=False)] + STARTS[2:],
            "asks for a GPU (tmpdir=<TBD>",
        ),
        (
            JOBCOMP,
            STARTS[:2] + [start_line(3, "rule_zoo_table", "cpu", gpu=True)],
            "CPU-only rule, but SLURM job 3 requested TresPerJob=gres:gpu:1",
        ),
        (
            JOBCOMP,
            STARTS[:2] + [start_line(3, "rule_other", "cpu", gpu=False)],
            "SLURM job 3 has comment 'rule_other', expected rule_zoo_table",
        ),
        (
            JOBCOMP,
            STARTS[:1] + [start_line(1, "rule_train_member_wildcards_1", "cpu")] + STARTS[2:],
            "asks for a GPU, but SLURM job 1 ran in partition 'cpu', not 'gpu'",
        ),
        (
            JOBCOMP,
            STARTS[:2] + [start_line(3, "rule_zoo_table", "debug", gpu=False)],
            "CPU-only rule, but SLURM job 3 ran in partition 'debug', not 'cpu'",
        ),
        (
            JOBCOMP,
            STARTS[:2] + [start_line(3, "rule_zoo_table", "cpu", gpu=False, account="(null)")],
            "SLURM job 3 was charged to '(null)', not 'lab'",
        ),
    ],
)
def test_check_fails_on_a_bad_or_missing_record(tmp_path, jobcomp, starts, message):
    r = run_check(tmp_path, jobcomp=jobcomp, starts=starts)
    assert r.returncode == 1
    assert message in r.stderr


def slurm_conf():
    """The slurm.conf that run.sh writes (its here-document)."""
    text = RUN_SH.read_text()
    m = re.search(r'cat >"\$TMP/slurm\.conf" <<EOF\n(.*?)\nEOF\n', text, re.DOTALL)
    assert m, "run.sh no longer writes slurm.conf with a here-document"
    return dict(
        line.split("=", 1)
        for line in m.group(1).splitlines()
        if "=" in line and not line.startswith("#") and not line.startswith("NodeName")
    )


def test_slurm_conf_keeps_durable_job_records():
    conf = slurm_conf()
    assert conf["JobCompType"] == "jobcomp/filetxt"
    assert conf["JobCompLoc"] == "$TMP/jobcomp.txt"
    assert conf["PrologSlurmctld"] == "$TMP/prolog_slurmctld.sh"
    # Without slurmdbd, slurmctld refuses to start with GPUs as TRES.
    assert "AccountingStorageTRES" not in conf
    # Snakemake's squeue status checks (up to 180 s apart) need finished jobs in memory.
    assert int(conf["MinJobAge"]) > 180


def test_run_sh_checks_after_slurmctld_forgot_the_jobs():
    text = RUN_SH.read_text()
    # The prolog saves each job's scontrol record as the job starts...
    prolog = re.search(r'cat >"\$TMP/prolog_slurmctld\.sh" <<EOF\n(.*?)\nEOF\n', text, re.DOTALL)
    assert prolog and "show job --oneliner" in prolog.group(1)
    assert 'job_starts.txt"' in prolog.group(1)
    outside = text.replace(prolog.group(0), "")
    # ...and nothing else reads job records from slurmctld's memory for the check.
    assert "scontrol show job" not in "\n".join(
        line for line in outside.splitlines() if not line.lstrip().startswith("#")
    )
    expire = outside.index("sed -i 's/^MinJobAge=.*/MinJobAge=5/'")
    reconfigure = outside.index("scontrol reconfigure", expire)
    wait_empty = outside.index("squeue -h -t all -o '%i' | wc -l", reconfigure)
    check = outside.index('"$HERE/check_jobs.py"')
    assert expire < reconfigure < wait_empty < check
    call = outside[check : outside.index('FAILED_STEP="done"', check)]
    assert '--jobcomp "$TMP/jobcomp.txt"' in call
    assert '--job-starts "$TMP/job_starts.txt"' in call
    assert "--jobs " not in call
