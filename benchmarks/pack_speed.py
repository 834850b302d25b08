"""A 12-run sweep on the real test cluster, packed (``orch sweep --pack``) vs one job per run:
queue waits, total wall time, orch's own time per run.

The sweep: torch-ddp, LeNet-5, nodes 1, 2, 4 x 4 repeats, a few iterations. Both ways run in
this one process, alternated (pack, single, pack, single, ...), each into a fresh sweep
directory, so that the cluster's load (other users' jobs) falls on both alike.

    submissions  sbatch calls = queue waits (pack: one per partition; single: one per run)
    queue        mean time from a submission to its job's start (Slurm's scheduling)
    wall         prepare -> every run finished -> results/*.parquet written
    orch cpu     orch's own CPU time per run: this process and the sbatch/squeue/sacct it
                 ran (os.times), i.e. what orch spends, not what the jobs spend
    submit       prepare + submit, wall, per run

``--shared`` packs with ``--pack-shared`` (runs share nodes by CPUs, one per rank) instead of
``--pack`` (a node to one run at a time).

Run: ``.venv/bin/python -m benchmarks.pack_speed [--rounds 1] [--iters 3] [--shared]`` with the
cluster up.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks import record
from orchestrator import backends, execute, results
from orchestrator import site as sitemod
from orchestrator.plan.sweep import SweepSpec, expand


def _cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def measure(site, out: Path, packed: str | None, iters: int, repeats: int) -> dict:
    """``packed``: "pack", "pack-shared" (orch sweep's spelling) or None (a job per run)."""
    runs = expand(SweepSpec(nodes=(1, 2, 4), repeats=repeats, iters=iters, warmup=1), site)
    submitted: dict[str, float] = {}

    def on_event(_run, record):
        if record.state == "PENDING":
            submitted.setdefault(record.job_id.split("_")[0], time.time())

    cpu0, t0 = _cpu(), time.time()
    prepared = execute.prepare(runs, site, out, packed=packed is not None)
    strategy = execute.choose(pack=packed == "pack", pack_shared=packed == "pack-shared")
    records = execute.execute(prepared, site, wait=False, on_event=on_event, strategy=strategy)
    t_submit = time.time() - t0
    execute.follow([execute.Prepared(p.run, p.rdir, r, "wait")
                    for p, r in zip(prepared, records, strict=True)],
                   backends.scheduler(site.scheduler), on_event)
    keys = results.recheck(out)
    merged = results.merge(out, keys)
    wall, cpu = time.time() - t0, _cpu() - cpu0
    # Queue wait of each submission: until the first run of its job started.
    starts: dict[str, float] = {}
    for p in prepared:
        times = json.loads((p.rdir / "job-times.json").read_text())
        job = str(times["job_id"]).split("_")[0]
        start = times.get("process_started_at") or times["script_started_at"]
        starts[job] = min(starts.get(job, start), start)
    queue = [starts[j] - submitted[j] for j in submitted if j in starts]
    states = merged["state"].value_counts().to_dict() if not merged.empty else {}
    return {"way": packed or "single", "runs": len(runs),
            "submissions": len(submitted), "queue": statistics.mean(queue),
            "wall": wall, "cpu_per_run": cpu / len(runs), "submit_per_run": t_submit / len(runs),
            "completed": states.get("COMPLETED", 0)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="pack+single pairs")
    parser.add_argument("--iters", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--site", default="testcluster")
    parser.add_argument("--shared", action="store_true", help="pack with --pack-shared")
    args = parser.parse_args()
    kind = "pack-shared" if args.shared else "pack"
    site = sitemod.load(args.site)[0]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            for packed in (kind, None):
                out = Path(tmp) / f"{i}-{packed or 'single'}"
                rows.append(measure(site, out, packed, args.iters, args.repeats))
                r = rows[-1]
                print(f"{r['way']:>11}: {r['runs']} runs ({r['completed']} completed), "
                      f"{r['submissions']} submission(s), queue {r['queue']:.1f} s, wall "
                      f"{r['wall']:.1f} s, orch cpu {r['cpu_per_run']:.2f} s/run, submit "
                      f"{r['submit_per_run']:.2f} s/run", flush=True)
    keys = ("submissions", "queue", "wall", "cpu_per_run", "submit_per_run")
    print(f"{'':12}" + "".join(f"{k:>16}" for k in keys))
    mean = {}
    for way in (kind, "single"):
        mine = [r for r in rows if r["way"] == way]
        mean[way] = {k: statistics.mean(r[k] for r in mine) for k in keys}
        print(f"{way:12}" + "".join(f"{mean[way][k]:>16.2f}" for k in keys))
    p, s = mean[kind], mean["single"]
    print(f"{kind}: {p['submissions']:.0f} queue wait(s) instead of {s['submissions']:.0f}; "
          f"wall {p['wall']:.1f} s vs {s['wall']:.1f} s ({s['wall'] / p['wall']:.2f}x); "
          f"orch's own CPU {p['cpu_per_run']:.2f} vs {s['cpu_per_run']:.2f} s per run")
    record.write("pack_speed",
                 f"{kind}: queue waits {p['submissions']:.0f} vs {s['submissions']:.0f}; wall "
                 f"{p['wall']:.1f} s vs {s['wall']:.1f} s; orch's own CPU "
                 f"{p['cpu_per_run']:.2f} vs {s['cpu_per_run']:.2f} s per run "
                 f"({args.rounds} round(s))",
                 {way: {k: round(v, 3) for k, v in m.items()} for way, m in mean.items()})


if __name__ == "__main__":
    main()
