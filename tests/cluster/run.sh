#!/usr/bin/env bash
# Real one-node SLURM test of profiles/slurm (`make test-cluster`).
#
# Builds a private SLURM cluster on this machine (Debian's slurmctld + slurmd +
# munge; one node on 127.0.0.1 with four placeholder GPUs, no accounting database),
# runs the workflow through the cluster profile with every rule submitted by sbatch,
# then checks SLURM's own records that the jobs ran as SLURM jobs, finished with exit
# code 0:0, that rules tagged `resources: gpu=...` (and only those) were submitted with a
# GPU request to the GPU partition and every other job to the CPU partition (both named
# in a site file, as a user gives them), and that the site's account reached sbatch.
# Stops everything it started on exit.
#
# Those records are files that slurmctld writes as the jobs go (jobcomp/filetxt when a
# job ends; a PrologSlurmctld that saves `scontrol show job` when it starts), not a
# `scontrol show job` at the end: slurmctld
# forgets a finished job MinJobAge seconds after it ended, so a run longer than that
# would lose the first jobs. To prove the checks do not need slurmctld's memory, the
# script shortens MinJobAge after the run and waits until slurmctld forgot every job.
#
# Needs root (apt-get, daemons). Debian/Ubuntu only. Environment overrides:
#   CLUSTER_SNAKEFILE   workflow to run            (default: <repo>/workflow/Snakefile)
#   CLUSTER_CONFIG      config file for the run    (default: <repo>/tests/configs/tiny.yaml)
#   CLUSTER_PROFILE     profile directory          (default: <repo>/profiles/slurm)
#   CLUSTER_GPU_RULE    a rule that must run with a GPU request (default: train_member;
#                       empty: no such check)
#   CLUSTER_TIMEOUT     seconds the workflow may take     (default: 1800)
#   CLUSTER_CPUS        CPUs the node declares            (default: max(nproc, 4))
#   CLUSTER_MEM_MB      memory (MB) the node declares     (default: max(physical, 131072))
#   CLUSTER_KEEP_TMP=1  keep the temp dir (configs, logs, results) for inspection
#   CLUSTER_SNAKEMAKE_ARGS  extra arguments for snakemake (word-split)
set -Eeuo pipefail

log() { printf 'cluster: %s\n' "$*" >&2; }
die() { printf 'cluster: FAILED: %s\n' "$*" >&2; exit 1; }

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
HERE="$REPO/tests/cluster"
SNAKEFILE=$(realpath -m "${CLUSTER_SNAKEFILE:-$REPO/workflow/Snakefile}")
CONFIG=$(realpath -m "${CLUSTER_CONFIG:-$REPO/tests/configs/tiny.yaml}")
PROFILE=$(realpath -m "${CLUSTER_PROFILE:-$REPO/profiles/slurm}")
GPU_RULE=${CLUSTER_GPU_RULE-train_member}
TIMEOUT=${CLUSTER_TIMEOUT:-1800}

# The venv (snakemake, the plugin, the `intertwine` script) comes first on PATH; sbatch
# exports this environment to the jobs (--export=ALL), so jobs find them too.
if [[ -x "$REPO/.venv/bin/snakemake" ]]; then
    export PATH="$REPO/.venv/bin:$PATH"
fi
command -v snakemake >/dev/null || die "snakemake not found on PATH (run 'make .venv' first)"
PYTHON=$(dirname "$(command -v snakemake)")/python
[[ -x "$PYTHON" ]] || PYTHON=python3

[[ $(id -u) -eq 0 ]] || die "must run as root (installs Debian packages, starts slurmctld/slurmd/munged)"
[[ -f "$SNAKEFILE" ]] || die "workflow not found: $SNAKEFILE (set CLUSTER_SNAKEFILE)"
[[ -f "$CONFIG" ]] || die "config not found: $CONFIG (set CLUSTER_CONFIG)"
[[ -f "$PROFILE/config.yaml" ]] || die "profile not found: $PROFILE/config.yaml (set CLUSTER_PROFILE)"

T0=$SECONDS
TMP=$(mktemp -d /tmp/intertwine-cluster.XXXXXX)
chmod 755 "$TMP"
CTLD_PID="" SLURMD_PID="" SNAKEMAKE_PID="" MUNGED_STARTED="" POLICY_RC_CREATED="" FAILED_STEP="setup"

print_logs() {
    local d f
    for d in slurmctld slurmd; do
        # The daemon's log file; its stderr when it died before opening that.
        for f in "$TMP/$d.log" "$TMP/$d.out"; do
            [[ -s $f ]] || continue
            printf '\n----- %s (last 40 lines) -----\n' "$f" >&2
            tail -n 40 "$f" >&2
            break
        done
    done
}

stop_pid() {  # stop_pid PID NAME [SIGNAL]: signal (TERM), wait up to 15 s, then KILL
    local pid=$1 name=$2 sig=${3:-TERM} i
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
    kill -s "$sig" "$pid" 2>/dev/null || true
    for ((i = 0; i < 30; i++)); do
        kill -0 "$pid" 2>/dev/null || return 0
        sleep 0.5
    done
    log "$name (pid $pid) did not stop; killing it"
    kill -9 "$pid" 2>/dev/null || true
}

cleanup() {
    local rc=$?
    set +e
    trap - EXIT INT TERM
    if [[ $rc -ne 0 ]]; then
        printf 'cluster: FAILED during: %s (exit %s)\n' "$FAILED_STEP" "$rc" >&2
        if [[ -n $CTLD_PID ]] && kill -0 "$CTLD_PID" 2>/dev/null; then
            printf '\n----- squeue -t all -----\n' >&2
            squeue -t all -o '%.8i %.24k %.10T %.20r' >&2 2>&1
        fi
        print_logs
        if [[ -d $TMP/slurm_logs ]]; then
            while IFS= read -r f; do
                printf '\n----- SLURM job log %s (last 30 lines) -----\n' "${f#"$TMP"/}" >&2
                tail -n 30 "$f" >&2
            done < <(find "$TMP/slurm_logs" -name '*.log' -type f | sort | tail -n 8)
        fi
    fi
    # Snakemake (SIGINT: it cancels its jobs), then any job left (their slurmstepd must
    # not outlive the daemons), then the daemons.
    stop_pid "$SNAKEMAKE_PID" snakemake INT
    if [[ -n $CTLD_PID ]] && kill -0 "$CTLD_PID" 2>/dev/null; then
        scancel --full --quiet --user="$(id -un)" 2>/dev/null
        sleep 1
    fi
    stop_pid "$SLURMD_PID" slurmd
    stop_pid "$CTLD_PID" slurmctld
    if [[ -n $MUNGED_STARTED ]]; then
        stop_pid "$(cat /run/munge/munged.pid 2>/dev/null)" munged
    fi
    [[ -n $POLICY_RC_CREATED ]] && rm -f /usr/sbin/policy-rc.d
    # slurmd's link to its configuration cache (configless mode), if it is ours.
    if [[ $(readlink /run/slurm/conf 2>/dev/null) == "$TMP"/* ]]; then
        rm -f /run/slurm/conf
        rmdir /run/slurm 2>/dev/null
    fi
    if [[ ${CLUSTER_KEEP_TMP:-0} == 1 ]]; then
        log "kept $TMP"
    else
        rm -rf "$TMP"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- (a) packages ---------------------------------------------------------------
FAILED_STEP="installing slurmctld slurmd slurm-client munge (apt-get)"
t=$SECONDS
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
    || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
    command -v apt-get >/dev/null || die "slurm is not installed and apt-get is missing (Debian/Ubuntu needed)"
    export DEBIAN_FRONTEND=noninteractive
    # Keep the packages' postinst from starting the system services (they would use
    # /etc/slurm, which we do not write); a policy-rc.d that says "no" does that.
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        POLICY_RC_CREATED=1
    fi
    pkgs=(slurmctld slurmd slurm-client munge)
    apt_install() { apt-get install -y -q --no-install-recommends "${pkgs[@]}" >"$TMP/apt.log" 2>&1; }
    if ! apt_install; then
        log "apt-get update (package lists missing or stale)"
        apt-get update -q >>"$TMP/apt.log" 2>&1 || { tail -n 20 "$TMP/apt.log" >&2; die "apt-get update failed"; }
        apt_install || { tail -n 30 "$TMP/apt.log" >&2; die "apt-get install ${pkgs[*]} failed"; }
    fi
    [[ -n $POLICY_RC_CREATED ]] && rm -f /usr/sbin/policy-rc.d && POLICY_RC_CREATED=""
    log "installed ${pkgs[*]} in $((SECONDS - t)) s"
fi
T_APT=$((SECONDS - t))
SLURM_VERSION=$(slurmctld -V 2>/dev/null | awk '{print $2}')

# --- (b) munge ---------------------------------------------------------------------
FAILED_STEP="starting munged"
t=$SECONDS
if [[ ! -s /etc/munge/munge.key ]]; then
    install -d -o munge -g munge -m 700 /etc/munge
    if command -v mungekey >/dev/null; then
        mungekey --create --keyfile=/etc/munge/munge.key --force
    else
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
    chown munge:munge /etc/munge/munge.key
    chmod 400 /etc/munge/munge.key
fi
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    install -d -o munge -g munge -m 755 /run/munge
    install -d -o munge -g munge -m 700 /var/lib/munge /var/log/munge
    rm -f /run/munge/munged.pid
    if id munge >/dev/null 2>&1; then
        runuser -u munge -- /usr/sbin/munged || die "munged failed to start (see /var/log/munge/munged.log)"
    else
        /usr/sbin/munged --force || die "munged failed to start"
    fi
    MUNGED_STARTED=1
    for ((i = 0; i < 20; i++)); do
        munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
        sleep 0.5
    done
    munge -n | unmunge >/dev/null || die "munge does not work: 'munge -n | unmunge' fails"
fi

# --- (c) slurm.conf, gres.conf -------------------------------------------------------
FAILED_STEP="writing slurm.conf"
# srun inside a job looks for /etc/slurm/slurm.conf before /run/slurm/conf (see below),
# so a machine that is already configured for SLURM would send job steps elsewhere.
for f in /etc/slurm/slurm.conf /etc/slurm-llnl/slurm.conf; do
    [[ -e $f ]] && die "$f exists: this machine is already set up for a SLURM cluster; run this test on a machine without one"
done
# The node is this machine under its short host name (slurmctld only runs where the
# name matches SlurmctldHost); all traffic goes through 127.0.0.1.
NODE=$(hostname -s 2>/dev/null || uname -n)
NODE=${NODE%%.*}
[[ -n $NODE ]] || die "this machine has no host name ('hostname -s' is empty)"
free_port() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
CTLD_PORT=$(free_port)
SLURMD_PORT=$(free_port)
while [[ $SLURMD_PORT == "$CTLD_PORT" ]]; do SLURMD_PORT=$(free_port); done
NCPU=$(nproc)
CPUS=${CLUSTER_CPUS:-$((NCPU > 4 ? NCPU : 4))}
PHYS_MB=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
MEM_MB=${CLUSTER_MEM_MB:-$((PHYS_MB > 131072 ? PHYS_MB : 131072))}

# The site's settings, as a user gives them: the config's `cluster` block in a file of
# their own, passed after the run's config. Three partitions on the one node: the CPU and
# GPU partitions it names, and a default partition that no job of the workflow may land
# in (a job that the workflow does not route goes there, and the check below fails).
CPU_PARTITION=cpu GPU_PARTITION=gpu DEFAULT_PARTITION=debug ACCOUNT=intertwine-lab
PARTITIONS="$DEFAULT_PARTITION $CPU_PARTITION $GPU_PARTITION"
printf 'cluster:\n  cpu_partition: %s\n  gpu_partition: %s\n  account: %s\n' \
    "$CPU_PARTITION" "$GPU_PARTITION" "$ACCOUNT" >"$TMP/site.yaml"
mkdir -p "$TMP/state" "$TMP/spool" "$TMP/gpu" "$TMP/bin"
# Without an accounting database `sacctmgr` cannot list the user's accounts, and the SLURM
# plugin validates a given account with it: this stand-in lists the one the site file names.
printf '#!/bin/sh\necho %s\n' "$ACCOUNT" >"$TMP/bin/sacctmgr"
chmod 755 "$TMP/bin/sacctmgr"
export PATH="$TMP/bin:$PATH"

# Four placeholder GPUs (as many GPU jobs at once as the node's CPUs allow). slurmd wants
# device files, so these are links to /dev/null (a character device); jobs then see
# CUDA_VISIBLE_DEVICES like on a real node.
for k in 0 1 2 3; do ln -s /dev/null "$TMP/gpu/gpu$k"; done
GRES="gpu:4"
GRES_CONF="Name=gpu File=$TMP/gpu/gpu[0-3]"
printf '%s\n' "$GRES_CONF" >"$TMP/gres.conf"

cat >"$TMP/slurm.conf" <<EOF
# Written by tests/cluster/run.sh: a private one-node cluster, removed afterwards.
ClusterName=intertwine-test
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$TMP/state
SlurmdSpoolDir=$TMP/spool
SlurmctldPidFile=$TMP/slurmctld.pid
SlurmdPidFile=$TMP/slurmd.pid
SlurmctldLogFile=$TMP/slurmctld.log
SlurmdLogFile=$TMP/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups: plain process tracking, no task binding.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# No accounting database: sacct does not work, job status comes from squeue.
AccountingStorageType=accounting_storage/none
# The durable record of each finished job (name, state, exit code): one line per job,
# appended by slurmctld when the job ends. check_jobs.py reads it; unlike the job
# records in slurmctld's memory, it does not expire (MinJobAge).
JobCompType=jobcomp/filetxt
JobCompLoc=$TMP/jobcomp.txt
# What that record lacks (comment, GPU request; GPUs are no TRES without slurmdbd):
# this script saves the job's record as scontrol shows it when the job starts.
PrologSlurmctld=$TMP/prolog_slurmctld.sh
MpiDefault=none
SwitchType=switch/none
ReturnToService=2
MailProg=/bin/true
# Configless: slurmd fetches this file from slurmctld and links /run/slurm/conf to its
# copy. Commands inside jobs need that: the jobstep plugin drops SLURM_* variables
# (SLURM_CONF too) before it calls srun, and /etc/slurm/slurm.conf is not written.
SlurmctldParameters=enable_configless
# Finished jobs stay visible to squeue for 10 minutes: Snakemake's status checks use
# squeue and come at most 180 s apart. The job checks do not need this (see (f)).
MinJobAge=600
SchedulerParameters=sched_interval=2
# The node declares at least 4 CPUs and plenty of memory (config_overrides: slurmd
# does not drain it for having less), so per-rule requests of the profile fit.
SlurmdParameters=config_overrides
GresTypes=gpu
NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$NODE CPUs=$CPUS RealMemory=$MEM_MB Gres=$GRES State=UNKNOWN
EOF
for p in $PARTITIONS; do
    if [[ $p == "$DEFAULT_PARTITION" ]]; then default=YES; else default=NO; fi
    echo "PartitionName=$p Nodes=$NODE Default=$default MaxTime=INFINITE State=UP" >>"$TMP/slurm.conf"
done
# slurmctld runs this (through slurmscriptd, holding no lock) as each job starts, with
# SLURM_JOB_ID but neither SLURM_CONF nor PATH in its environment. It always exits 0:
# a job whose PrologSlurmctld fails is requeued. A missing line fails the check.
cat >"$TMP/prolog_slurmctld.sh" <<EOF
#!/bin/sh
# PrologSlurmctld written by tests/cluster/run.sh: the job's record, one line per start.
export SLURM_CONF="$TMP/slurm.conf"
for try in 1 2 3; do
    if rec=\$($(command -v scontrol) show job --oneliner "\$SLURM_JOB_ID"); then
        printf '%s\\n' "\$rec" >>"$TMP/job_starts.txt"
        exit 0
    fi
    sleep 1
done
exit 0
EOF
chmod 755 "$TMP/prolog_slurmctld.sh"
# Nothing from an outer SLURM job or the user's sbatch defaults leaks into this cluster.
while IFS= read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(SLURM_|SBATCH_|SRUN_|SALLOC_)' || true)
export SLURM_CONF="$TMP/slurm.conf"

# --- (d) daemons ---------------------------------------------------------------------
FAILED_STEP="starting slurmctld"
slurmctld -D -c -i >"$TMP/slurmctld.out" 2>&1 &
CTLD_PID=$!
for ((i = 0; i < 60; i++)); do
    kill -0 "$CTLD_PID" 2>/dev/null || die "slurmctld exited at start-up (logs below)"
    scontrol ping >/dev/null 2>&1 && break
    sleep 0.5
done
scontrol ping >/dev/null 2>&1 || die "slurmctld does not answer 'scontrol ping' after 30 s"

FAILED_STEP="starting slurmd"
env -u SLURM_CONF slurmd -D -N "$NODE" --conf-server "127.0.0.1:$CTLD_PORT" >"$TMP/slurmd.out" 2>&1 &
SLURMD_PID=$!
state=""
for ((i = 0; i < 120; i++)); do
    kill -0 "$SLURMD_PID" 2>/dev/null || die "slurmd exited at start-up (logs below)"
    state=$(sinfo -h -N -n "$NODE" -o '%t' 2>/dev/null | head -n 1)
    [[ $state == idle ]] && break
    sleep 0.5
done
[[ $state == idle ]] || { scontrol show node "$NODE" >&2 || true; die "node $NODE is '$state', not idle, after 60 s"; }
T_DAEMONS=$((SECONDS - t))
log "SLURM $SLURM_VERSION up in ${T_DAEMONS} s: node $NODE ($CPUS CPUs, $MEM_MB MB, gres $GRES), partitions: $PARTITIONS"

# --- (e) the workflow through the profile ----------------------------------------------
FAILED_STEP="running the workflow through $PROFILE (snakemake)"
WORK="$TMP/work"
mkdir -p "$WORK"
# --slurm-status-command squeue: there is no accounting database for sacct;
#   MinJobAge=600 keeps finished jobs visible to squeue while Snakemake runs.
# --retries 0: a failure here is a bug to report, not something to retry.
# Status checks every 2 s at first (the plugin backs off by 10 s while nothing finishes).
cmd=(snakemake
    --snakefile "$SNAKEFILE"
    --workflow-profile "$PROFILE"
    --configfile "$CONFIG" "$TMP/site.yaml"
    --directory "$WORK"
    --slurm-status-command squeue
    --slurm-init-seconds-before-status-checks 2
    --seconds-between-status-checks 2
    --slurm-logdir "$TMP/slurm_logs"
    --slurm-keep-successful-logs
    --retries 0)
# shellcheck disable=SC2206
cmd+=(${CLUSTER_SNAKEMAKE_ARGS:-})
log "running: ${cmd[*]}"
t=$SECONDS
# In the background, so that a signal to this script runs the cleanup at once.
timeout --signal=INT --kill-after=60 "$TIMEOUT" "${cmd[@]}" </dev/null >"$TMP/snakemake.log" 2>&1 &
SNAKEMAKE_PID=$!
set +e
wait "$SNAKEMAKE_PID"
rc=$?
set -e
SNAKEMAKE_PID=""
T_RUN=$((SECONDS - t))
if [[ $rc -ne 0 ]]; then
    tail -n 80 "$TMP/snakemake.log" >&2
    [[ $rc -eq 124 || $rc -eq 137 ]] && die "snakemake did not finish within $TIMEOUT s (CLUSTER_TIMEOUT)"
    die "snakemake exited with $rc (log above)"
fi

# --- (f) slurmctld forgets the jobs ---------------------------------------------------
# Shorten MinJobAge and wait until slurmctld has dropped every job from its memory, as
# it does by itself MinJobAge after each job's end when a run is long. The checks below
# must pass from the record files alone: reading `scontrol show job` here, as this
# script once did, finds nothing (and failed when the workflow ran over MinJobAge).
FAILED_STEP="expiring the job records in slurmctld (MinJobAge)"
t=$SECONDS
n_known=$(squeue -h -t all -o '%i' | wc -l)
sed -i 's/^MinJobAge=.*/MinJobAge=5/' "$TMP/slurm.conf"
scontrol reconfigure || die "scontrol reconfigure failed"
age=$(scontrol show config | awk '$1 == "MinJobAge" {print $3}')
[[ $age == 5 ]] || die "MinJobAge is '$age', not 5, after scontrol reconfigure"
left=$n_known
for ((i = 0; i < 90; i++)); do  # slurmctld purges every 10 s with this MinJobAge
    left=$(squeue -h -t all -o '%i' | wc -l)
    [[ $left -eq 0 ]] && break
    sleep 1
done
[[ $left -eq 0 ]] || { squeue -t all >&2; die "slurmctld still holds $left job records 90 s after MinJobAge=5"; }
T_EXPIRE=$((SECONDS - t))
log "slurmctld dropped its job records ($n_known left after the run) in ${T_EXPIRE} s"

# --- (g) what SLURM recorded ---------------------------------------------------------------
FAILED_STEP="checking the SLURM jobs"
"$PYTHON" "$HERE/check_jobs.py" --snakemake-log "$TMP/snakemake.log" \
    --jobcomp "$TMP/jobcomp.txt" --job-starts "$TMP/job_starts.txt" --gpu-rule "$GPU_RULE" \
    --cpu-partition "$CPU_PARTITION" --gpu-partition "$GPU_PARTITION" --account "$ACCOUNT" \
    >"$TMP/summary" || { tail -n 40 "$TMP/snakemake.log" >&2; die "job checks failed (see above)"; }
FAILED_STEP="done"
log "timings: apt ${T_APT} s, daemons ${T_DAEMONS} s, workflow ${T_RUN} s, record expiry ${T_EXPIRE} s, total $((SECONDS - T0)) s"
echo "cluster: $(cat "$TMP/summary")"
