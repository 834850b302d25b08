"""orch's own overhead per job on the real test cluster (issue #3; target: under 2 s).

Overhead = time from the start of submission to merged results, minus the time the job
script itself ran (recorded by the job in job-times.json). It is split into:

    submit   rendering, staging, sbatch through submitit        (orch)
    queue    sbatch accepted -> batch process starts              (Slurm: scheduling, launch)
    start    batch process starts -> job script starts            (submitit's Python start)
    detect   job script ends -> orch has the terminal state       (polling squeue, verdict)
    merge    -> results/*.parquet written                         (gather + analyze)

Run: ``.venv/bin/python -m benchmarks.slurm_overhead [--jobs 5]`` with the cluster up.
Jobs run one after another so that each is measured alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks import record
from orchestrator import execute, results
from orchestrator import site as sitemod
from orchestrator.plan.sweep import SweepSpec, expand


def measure_one(site, out: Path, repeat: int) -> dict:
    spec = SweepSpec(nodes=(1,), iters=2, warmup=0, repeats=repeat + 1)
    run = expand(spec, site)[repeat]
    marks: dict[str, float] = {}

    def on_event(_run, record):
        marks.setdefault(record.state, time.time())

    t0 = time.time()
    prepared = execute.prepare([run], site, out)
    execute.execute(prepared, site, wait=True, on_event=on_event)
    detected = time.time()
    keys = results.recheck(out)
    results.merge(out, keys)
    t1 = time.time()
    times = json.loads((out / run.run_id / "job-times.json").read_text())
    job = times["script_ended_at"] - times["script_started_at"]
    launched = times["process_started_at"]
    return {
        "total": t1 - t0,
        "job": job,
        "overhead": (t1 - t0) - job,
        "submit": marks["PENDING"] - t0,
        "queue": launched - marks["PENDING"],
        "start": times["script_started_at"] - launched,
        "detect": detected - times["script_ended_at"],
        "merge": t1 - detected,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5)
    parser.add_argument("--site", default="testcluster")
    args = parser.parse_args()
    site = sitemod.load(args.site)[0]
    with tempfile.TemporaryDirectory() as tmp:
        rows = [measure_one(site, Path(tmp), k) for k in range(args.jobs)]
    keys = ("total", "job", "overhead", "submit", "queue", "start", "detect", "merge")
    print(f"{'':10}" + "".join(f"{k:>10}" for k in keys))
    for i, row in enumerate(rows):
        print(f"job {i:<6}" + "".join(f"{row[k]:>10.2f}" for k in keys))
    mean = {k: statistics.mean(r[k] for r in rows) for k in keys}
    print(f"{'mean':10}" + "".join(f"{mean[k]:>10.2f}" for k in keys))
    own = mean["overhead"] - mean["queue"]
    print(f"overhead per job: {mean['overhead']:.2f} s, of which Slurm's queue latency "
          f"{mean['queue']:.2f} s (sched_min_interval) and orch's own {own:.2f} s "
          f"(target < 2 s: {'met' if own < 2 else 'NOT met'}); overhead / job time = "
          f"{mean['overhead'] / mean['job']:.2f}")
    record.write("slurm_overhead",
                 f"{mean['overhead']:.2f} s per job, of which {mean['queue']:.2f} s Slurm's queue "
                 f"latency and {own:.2f} s orch's own (target < 2 s), {args.jobs} jobs",
                 {**{f"{k}_s": round(v, 3) for k, v in mean.items()}, "orch_own_s": round(own, 3),
                  "jobs": args.jobs})


if __name__ == "__main__":
    main()
