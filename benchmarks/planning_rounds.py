"""How often Snakemake plans, and what planning costs its own process, with its default job-rate
span (``--max-jobs-per-timespan 100/1s``) and with the one `make run` passes (1000/10s), side by
side on the same workflow: N jobs that only sleep, on 2 cores, so the CPU measured is Snakemake's.

    python benchmarks/planning_rounds.py [--jobs 60] [--seconds 2] [--repeats 2]

Snakemake arms a timer of one span after every planning round that leaves jobs waiting; the timer
starts another round, and every finished job adds a round, so the rounds per second grow with the
jobs finished. A round is counted by its "Ready jobs" line in Snakemake's --verbose log.
"""

from __future__ import annotations

import argparse
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SNAKEFILE = """rule all:
    input: expand("out/{{i}}.txt", i=range({jobs}))

rule one:
    output: "out/{{i}}.txt"
    shell: "sleep {seconds}; echo {{wildcards.i}} > {{output}}"
"""
SPANS = {"default (100/1s)": [], "make run (1000/10s)": ["--max-jobs-per-timespan", "1000/10s"]}


def run(folder: Path, extra: list[str]) -> tuple[int, float, float]:
    """(planning rounds, wall seconds, CPU-seconds of Snakemake and its jobs) of one run in ``folder``."""
    for old in ("out", ".snakemake"):
        shutil.rmtree(folder / old, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "snakemake", "--cores", "2", "--verbose", *extra],
        cwd=folder,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"snakemake failed:\n{result.stderr[-2000:]}")
    rounds = len(re.findall(r"^Ready jobs", result.stderr, flags=re.MULTILINE))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return rounds, wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=60)
    parser.add_argument("--seconds", type=float, default=2.0, help="how long each job sleeps")
    parser.add_argument("--repeats", type=int, default=2, help="paired runs of each span, alternating")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="planning-rounds-") as tmp:
        folder = Path(tmp)
        (folder / "Snakefile").write_text(SNAKEFILE.format(jobs=args.jobs, seconds=args.seconds))
        measured: dict[str, list[tuple[int, float, float]]] = {name: [] for name in SPANS}
        for _ in range(args.repeats):
            for name, extra in SPANS.items():
                measured[name].append(run(folder, extra))
    ideal = args.jobs * args.seconds / 2
    print(f"{args.jobs} jobs of {args.seconds:g} s on 2 cores ({ideal:.0f} s if the cores never wait)")
    print(f"{'span':<22} {'rounds':>7} {'wall s':>7} {'CPU s':>6}")
    means = {}
    for name, runs in measured.items():
        means[name] = [sum(values) / len(runs) for values in zip(*runs)]
        rounds, wall, cpu = means[name]
        print(f"{name:<22} {rounds:>7.0f} {wall:>7.1f} {cpu:>6.2f}")
    (base_rounds, base_wall, base_cpu), (rounds, wall, cpu) = means.values()
    print(
        f"make run's span / default: rounds {rounds / base_rounds:.2f}x, "
        f"CPU {cpu / base_cpu:.2f}x, wall {wall / base_wall:.2f}x (its exit waits up to one span)"
    )


if __name__ == "__main__":
    main()
