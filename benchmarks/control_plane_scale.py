"""The control plane at scale: a sweep of 16, 32 and 64 nodes on the test cluster, timed stage by
stage, and the scheduler commands orch runs per poll, counted.

For each node count N, one sweep of ``--repeats`` runs of the all-reduce micro-benchmark
(``allreduce-bench``, 4-byte messages, one rank a node: N ranks of a real job, light enough that
64 of them fit two cores) is planned, materialised, submitted, waited for, gathered and merged
through orch's own functions, each stage timed. Every Slurm command orch (and submitit) starts
goes through a shim on ``PATH`` that writes its name to a log, so the calls are counted, not
assumed: a poll is one ``squeue``, and the other commands per poll must not grow with N.

Needs the test cluster with at least the largest N nodes: ``scripts/testcluster up --nodes 64``
(the CPU shares and shaping are optional there). Run: ``.venv/bin/python -m
benchmarks.control_plane_scale [--nodes 16,32,64 --repeats 4]``; ``scripts/testcluster up``
afterwards brings the 4-node cluster back.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

from benchmarks import record

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = ("sbatch", "squeue", "sacct", "scontrol", "sinfo", "sacctmgr", "scancel", "srun")


def shims(folder: Path, log: Path) -> Path:
    """A folder of scripts named as Slurm's commands that log their own name, then exec the
    real one (found on PATH without this folder)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in COMMANDS:
        real = subprocess.run(["bash", "-c", f"command -v {name}"], capture_output=True,
                              text=True).stdout.strip()
        if not real:
            continue
        path = folder / name
        path.write_text(f'#!/bin/sh\necho {name} >>"{log}"\nexec {real} "$@"\n')
        path.chmod(0o755)
    return folder


def cluster_nodes() -> int:
    out = subprocess.run(["sinfo", "-h", "-N", "-p", "ib", "-o", "%N"], capture_output=True,
                         text=True).stdout.split()
    return len(out)


def site_for(nodes: int, folder: Path) -> Path:
    """The test cluster's site config with its partitions as large as the cluster."""
    data = yaml.safe_load((ROOT / "site-configs" / "testcluster.yaml").read_text())
    data["name"] = f"testcluster{nodes}"
    for part in data["partitions"]:
        part["nodes"] = nodes
    path = folder / f"testcluster{nodes}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def counts(log: Path, since: int) -> Counter:
    lines = log.read_text().splitlines() if log.exists() else []
    return Counter(lines[since:])


def lines_in(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def measure(nodes: int, repeats: int, site_path: Path, out: Path, log: Path) -> dict:
    """Plan, prepare, submit, wait, gather and merge one sweep; seconds and command counts."""
    from orchestrator import execute, results
    from orchestrator import site as sitemod
    from orchestrator.plan.sweep import SweepSpec, expand

    site = sitemod.load(str(site_path))[0]
    marks: dict[str, float] = {}

    def on_event(_run, rec):
        marks[f"last_{rec.state}"] = time.time()

    t0 = time.time()
    spec = SweepSpec(nodes=(nodes,), modes=("allreduce-bench",), iters=2, warmup=1,
                     repeats=repeats, partitions=("eth",),
                     options={"sizes": ("4",), "reps": ("1",)})
    runs = expand(spec, site)
    t_plan = time.time()
    prepared = execute.prepare(runs, site, out)
    t_prepare = time.time()
    before = lines_in(log)
    execute.execute(prepared, site, wait=True, on_event=on_event)
    t_wait = time.time()
    waited = counts(log, before)
    results.recheck(out)
    t_gather = time.time()
    frame = results.merge(out)
    t_merge = time.time()
    states = Counter(frame["state"]) if "state" in frame.columns else Counter()
    polls = waited.get("squeue", 0)
    others = sum(v for k, v in waited.items() if k not in ("squeue", "sbatch"))
    return {"nodes": nodes, "runs": len(runs), "completed": states.get("COMPLETED", 0),
            "plan_s": t_plan - t0, "prepare_s": t_prepare - t_plan,
            "submit_s": marks.get("last_PENDING", t_prepare) - t_prepare,
            "wait_s": t_wait - t_prepare, "gather_s": t_gather - t_wait,
            "merge_s": t_merge - t_gather, "polls": polls, "sbatch": waited.get("sbatch", 0),
            "other_calls": others, "other_per_poll": others / polls if polls else None,
            "calls": dict(waited)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", default="16,32,64")
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    counts_wanted = [int(n) for n in a.nodes.split(",")]
    have = cluster_nodes()
    if have < max(counts_wanted):
        raise SystemExit(f"the test cluster has {have} nodes; run scripts/testcluster up "
                         f"--nodes {max(counts_wanted)} first")
    work = Path(a.out or tempfile.mkdtemp(prefix="orch-scale-"))
    log = work / "slurm-calls.log"
    os.environ["PATH"] = f"{shims(work / 'shims', log)}:{os.environ['PATH']}"
    rows, figures = [], {}
    for n in counts_wanted:
        got = measure(n, a.repeats, site_for(n, work), work / f"sweep-{n}", log)
        figures[str(n)] = got
        rows.append([str(n), f"{got['completed']}/{got['runs']}",
                     *(f"{got[k]:.2f}" for k in ("plan_s", "prepare_s", "submit_s", "wait_s",
                                                 "gather_s", "merge_s")),
                     str(got["polls"]),
                     f"{got['other_per_poll']:.2f}" if got["other_per_poll"] is not None
                     else "–"])
        print(" | ".join(rows[-1]), flush=True)
    per_poll = [figures[str(n)]["other_per_poll"] for n in counts_wanted]
    figures["max_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    each = [f"{n} nodes: {figures[str(n)]['completed']}/{a.repeats} completed, merge "
            f"{figures[str(n)]['merge_s']:.2f} s" for n in counts_wanted]
    calls = ", ".join("–" if v is None else f"{v:.2f}" for v in per_poll)
    summary = f"{', '.join(each)}; other scheduler calls per poll (squeue) {calls}"
    print(summary)
    table = record.Table(columns=["nodes", "completed", "plan s", "prepare s", "submit s",
                                  "wait s", "gather s", "merge s", "polls (squeue)",
                                  "other calls / poll"], rows=rows)
    record.write("control_plane_scale", summary, figures, tables=[table])


if __name__ == "__main__":
    main()
