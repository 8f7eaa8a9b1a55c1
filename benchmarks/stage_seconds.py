"""Where a run's time went: job-seconds, CPU-seconds and jobs per stage, from the benchmark files
Snakemake writes for every job (``benchmark:`` in each rule, results/benchmarks/<stage>/...).

    python benchmarks/stage_seconds.py [results/benchmarks]

Job-seconds are each job's wall time summed (two jobs at once on 2 cores count twice); the CPU
share is CPU-seconds over job-seconds: up to the threads a job runs, lower where it waited for its
cores (a busy host) or for input and output.
"""

import argparse
import csv
from collections import defaultdict
from pathlib import Path


def stage_seconds(root: Path) -> dict[str, tuple[int, float, float]]:
    """Per stage (the first folder under ``root``): (jobs, job-seconds, CPU-seconds)."""
    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for path in sorted(root.rglob("*.tsv")):
        with path.open() as handle:
            row = next(csv.DictReader(handle, delimiter="\t"))
        stage = path.relative_to(root).parts[0].removesuffix(".tsv")
        totals[stage][0] += 1
        totals[stage][1] += float(row["s"])
        totals[stage][2] += float(row["cpu_time"]) if row.get("cpu_time", "NA") != "NA" else 0.0
    return {stage: (int(n), s, cpu) for stage, (n, s, cpu) in totals.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", default="results/benchmarks", type=Path)
    args = parser.parse_args()
    totals = stage_seconds(args.root)
    if not totals:
        raise SystemExit(f"no benchmark files under {args.root}: run the workflow first")
    print(f"{'stage':<12} {'jobs':>5} {'job-s':>8} {'CPU-s':>8} {'CPU share':>9}")
    for stage, (n, seconds, cpu) in sorted(totals.items(), key=lambda item: -item[1][1]):
        print(f"{stage:<12} {n:>5} {seconds:>8.0f} {cpu:>8.0f} {cpu / seconds if seconds else 0:>9.2f}")
    jobs, seconds, cpu = (sum(v[i] for v in totals.values()) for i in range(3))
    print(f"{'all':<12} {jobs:>5} {seconds:>8.0f} {cpu:>8.0f} {cpu / seconds if seconds else 0:>9.2f}")


if __name__ == "__main__":
    main()
