"""Check a Snakemake run through the SLURM executor against what SLURM recorded.

    python check_jobs.py --snakemake-log snakemake.log --jobcomp jobcomp.txt \
        --job-starts job_starts.txt [--gpu-rule train_member] \
        [--cpu-partition cpu --gpu-partition gpu] [--account lab]

The SLURM side comes from files that slurmctld writes while the jobs run, so the check
works however long ago a job ended (`scontrol show job` forgets a finished job after
MinJobAge, and there is no accounting database for sacct):

* `jobcomp.txt`: JobCompType=jobcomp/filetxt, one line per finished job, with its
  final state (`JobId=.. Name=.. JobState=COMPLETED ... ExitCode=0:0`).
* `job_starts.txt`: the PrologSlurmctld of tests/cluster/run.sh appends the job's
  `scontrol show job --oneliner` as it starts, for what the completion record lacks:
  the comment and the GPU request (TresPerJob/TresPerNode/... gres:gpu).

From the Snakemake log we take every job that was submitted to SLURM (`rule X:`
blocks; `localrule X:` ran on the submit host), its resources and the SLURM job id it
got. Then, for each of them, SLURM must have recorded a job of this run (job name =
the plugin's SLURM run ID, comment = rule_<X>...) that COMPLETED with exit code 0:0,
with a GPU request exactly when the rule asked for one (`gpu=`, `gpu_model=` or a
gpu `gres=`), in the GPU partition if it asked for one and in the CPU partition if not
(when those are given), charged to the account given. Prints a one-line summary; exits
non-zero with the reasons when a check fails.
"""

import argparse
import re
import sys

BLOCK = re.compile(r"^(local)?rule (\w+):$")
SUBMITTED = re.compile(r"^Job (\d+) has been submitted with SLURM jobid (\d+)")
RUN_ID = re.compile(r"^SLURM run ID: (\S+)")
GPU_REQUEST = re.compile(r"^TresPer\w+$")


def parse_snakemake_log(text):
    """Return (run_id, {snakemake jobid: job}, {snakemake jobid: slurm jobid}, local rules)."""
    run_id, jobs, slurm_ids, local = None, {}, {}, set()
    current = None
    for raw in text.splitlines():
        line = raw.rstrip()
        m = RUN_ID.match(line)
        if m:
            run_id = m.group(1)
            continue
        m = BLOCK.match(line)
        if m:
            if m.group(1):
                local.add(m.group(2))
                current = None
            else:
                current = {"rule": m.group(2), "resources": "", "wildcards": ""}
            continue
        if current is not None and line.startswith("    "):
            key, _, value = line.strip().partition(": ")
            if key == "jobid":
                jobs[value] = current
            elif key in ("resources", "wildcards"):
                current[key] = value
            continue
        if not line.startswith("    "):
            current = None
        m = SUBMITTED.match(line)
        if m:
            slurm_ids[m.group(1)] = m.group(2)
    return run_id, jobs, slurm_ids, local


def wants_gpu(resources):
    """Whether a job's resources line (`a=1, b=x, ...`) asks for a GPU."""
    res = {}
    for item in resources.split(", "):
        key, _, value = item.partition("=")
        res[key.strip()] = value.strip()
    try:
        gpu = int(res.get("gpu") or 0)
    except ValueError:
        gpu = 1
    return gpu > 0 or bool(res.get("gpu_model")) or "gpu" in res.get("gres", "")


def parse_records(text):
    """Lines of `Key=value` tokens (jobcomp/filetxt, `scontrol show job --oneliner`)
    -> {JobId: {field: value}}; a later line for a job (after a requeue) wins."""
    out = {}
    for line in text.splitlines():
        fields = {}
        for token in line.split():
            key, sep, value = token.partition("=")
            if sep and key not in fields:
                fields[key] = value
        if "JobId" in fields:
            out[fields["JobId"]] = fields
    return out


def read_records(path):
    """parse_records of a file; {} when it does not exist (no job wrote to it)."""
    try:
        with open(path) as fh:
            return parse_records(fh.read())
    except FileNotFoundError:
        return {}


def gpu_request(fields):
    """The GPU part of a SLURM job's request, '' when there is none."""
    return ",".join(f"{k}={v}" for k, v in fields.items() if GPU_REQUEST.match(k) and "gpu" in v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snakemake-log", required=True)
    ap.add_argument(
        "--jobcomp", required=True, help="job completion records (JobCompType=jobcomp/filetxt, JobCompLoc)"
    )
    ap.add_argument(
        "--job-starts", required=True, help="scontrol show job --oneliner of each job as it started"
    )
    ap.add_argument(
        "--gpu-rule",
        default="train_member",
        help="a rule that must have run with a GPU request ('' for none)",
    )
    ap.add_argument("--cpu-partition", help="the partition every CPU-only job must run in")
    ap.add_argument("--gpu-partition", help="the partition every job asking for a GPU must run in")
    ap.add_argument("--account", help="the account every job must be charged to")
    args = ap.parse_args()

    with open(args.snakemake_log) as fh:
        run_id, jobs, slurm_ids, local = parse_snakemake_log(fh.read())
    ended = read_records(args.jobcomp)
    started = read_records(args.job_starts)

    errors = []
    if run_id is None:
        errors.append("no 'SLURM run ID' in the Snakemake log: was the slurm executor used?")
    if not jobs:
        errors.append("the Snakemake log shows no job submitted to SLURM")
    n_gpu = 0
    per_rule = {}
    for sm_id, job in sorted(jobs.items(), key=lambda kv: int(kv[0])):
        rule = job["rule"]
        what = f"rule {rule}" + (f" ({job['wildcards']})" if job["wildcards"] else "")
        per_rule[rule] = per_rule.get(rule, 0) + 1
        sid = slurm_ids.get(sm_id)
        if sid is None:
            errors.append(f"{what}: Snakemake job {sm_id} was never submitted with sbatch")
            continue
        fields, start = ended.get(sid), started.get(sid)
        if fields is None:
            errors.append(f"{what}: SLURM job {sid} has no completion record in {args.jobcomp}")
            continue
        if run_id and fields.get("Name") != run_id:
            errors.append(f"{what}: SLURM job {sid} has name {fields.get('Name')}, not the run ID {run_id}")
        if fields.get("JobState") != "COMPLETED" or fields.get("ExitCode") != "0:0":
            errors.append(
                f"{what}: SLURM job {sid} is {fields.get('JobState')} with exit code "
                f"{fields.get('ExitCode')}, expected COMPLETED 0:0"
            )
        if start is None:
            errors.append(f"{what}: SLURM job {sid} has no start record in {args.job_starts}")
            continue
        comment = start.get("Comment", "")
        if comment != f"rule_{rule}" and not comment.startswith(f"rule_{rule}_wildcards_"):
            errors.append(f"{what}: SLURM job {sid} has comment {comment!r}, expected rule_{rule}...")
        expected, got = wants_gpu(job["resources"]), gpu_request(start)
        if expected and not got:
            errors.append(
                f"{what}: asks for a GPU ({job['resources']}) but SLURM job {sid} has no GPU request"
            )
        if got and not expected:
            errors.append(f"{what}: CPU-only rule, but SLURM job {sid} requested {got}")
        if expected and got:
            n_gpu += 1
        partition = args.gpu_partition if expected else args.cpu_partition
        if partition and start.get("Partition") != partition:
            kind = "asks for a GPU" if expected else "CPU-only rule"
            errors.append(
                f"{what}: {kind}, but SLURM job {sid} ran in partition {start.get('Partition')!r}, "
                f"not {partition!r}"
            )
        if args.account and start.get("Account") != args.account:
            errors.append(
                f"{what}: SLURM job {sid} was charged to {start.get('Account')!r}, not {args.account!r}"
            )
        job["gpu"] = expected
    if args.gpu_rule:
        tagged = [j for j in jobs.values() if j["rule"] == args.gpu_rule]
        if not tagged:
            errors.append(f"rule {args.gpu_rule} did not run on SLURM (ran: {sorted(per_rule) or 'nothing'})")
        elif not all(j.get("gpu") for j in tagged):
            errors.append(f"rule {args.gpu_rule} is not tagged with a GPU resource in the workflow")
    if not any(not j.get("gpu", True) for j in jobs.values()):
        errors.append("no CPU-only job ran on SLURM, so 'CPU rules get no GPU' went untested")

    if errors:
        for e in errors:
            print(f"cluster check: {e}", file=sys.stderr)
        sys.exit(1)
    rules = ", ".join(f"{r} x{n}" for r, n in sorted(per_rule.items()))
    print(
        f"{len(jobs)} jobs ran on SLURM, {n_gpu} with a GPU request "
        f"(all COMPLETED 0:0; {rules}; local: {', '.join(sorted(local)) or 'none'})"
    )


if __name__ == "__main__":
    main()
