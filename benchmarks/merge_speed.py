"""How fast does orch merge a big sweep? 1,000 rank logs, 1,000,000 iteration rows.

    .venv/bin/python benchmarks/merge_speed.py [--runs-per-config 4] [--iters 1000] [--keep DIR]

Generates a synthetic sweep directory in a temporary directory (25 configurations x nodes
1..4 x 4 ranks per node = 100 runs, 1,000 rank logs, 1,000 iterations per rank), written with
the rank-side harness' own log writer (``orchestrator.rankside.harness.RankLogWriter``: header,
one ``iter`` record per iteration, footer), then times

* ``orch``'s merge (``orchestrator.results.merge``: reads every log, writes
  ``results/iterations.parquet`` and ``results/runs.parquet``), and
* a naive pandas read of the same logs (``pd.read_json(lines=True)`` per rank log, keep the
  ``iter`` records, ``pd.concat``) — which only *reads*, it computes and writes nothing,

and prints both times and their ratio. Targets (issue #7): merge < 5 s, >= 5x faster than naive.
Exits 1 if a target is missed. Timings are wall-clock, best of ``--repeat`` (default 1).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

from orchestrator import rundir  # noqa: E402
from orchestrator.protocol import PHASES  # noqa: E402
from orchestrator.rankside.harness import RankLogWriter  # noqa: E402
from orchestrator.rundir import JobRecord  # noqa: E402
from orchestrator.sweep import Run  # noqa: E402

MODELS = ("lenet5", "alexnet", "googlenet", "resnet18", "resnet50")
BATCHES = (16, 32, 64, 128, 256)
NODES = (1, 2, 3, 4)
TASKS_PER_NODE = 4
WARMUP = 10


def make_sweep(out: Path, iters_per_rank: int, seed: int = 0) -> tuple[int, int]:
    """Write the synthetic sweep; returns (rank logs, iteration rows)."""
    rng = random.Random(seed)
    logs = rows = 0
    for model in MODELS:
        for batch in BATCHES:
            for nodes in NODES:
                run = Run(site="bench", scheduler="slurm", partition="ib",
                          interconnect="infiniband", mode="torch-ddp", framework="torch",
                          launcher="srun", model=model, dataset="cifar", nodes=nodes,
                          tasks_per_node=TASKS_PER_NODE, batch_size=batch,
                          iters=iters_per_rank - WARMUP, warmup=WARMUP, repeat=0,
                          time_limit_min=10, options={"backend": "gloo"})
                rdir = out / run.run_id
                (rdir / "ranks").mkdir(parents=True)
                (rdir / "run.json").write_text(run.model_dump_json(indent=2) + "\n")
                rundir.write_record(rdir, JobRecord(run_id=run.run_id, scheduler="slurm",
                                                    job_id=str(1000 + logs), state="COMPLETED"))
                for rank in range(run.ranks):
                    _write_rank(rdir / "ranks" / f"rank-{rank}.jsonl", run, rank, rng)
                    logs += 1
                    rows += iters_per_rank
    return logs, rows


def _write_rank(path: Path, run: Run, rank: int, rng: random.Random) -> None:
    node = rank // run.tasks_per_node
    log = RankLogWriter(str(path))
    log.write({"type": "header", "schema": 1, "run_id": run.run_id, "framework": "torch",
               "mode": run.mode, "task": rank, "role": "worker", "role_index": rank,
               "rank": rank, "world_size": run.ranks, "local_rank": rank % run.tasks_per_node,
               "node_rank": node, "host": f"node{node + 1}", "node": f"node{node + 1}",
               "pid": 1000 + rank, "model": run.model, "dataset": run.dataset,
               "batch_size": run.batch_size, "warmup": run.warmup, "iters": run.iters,
               "started_at": 1.7e9, "argv": ["python", "-m", "orchestrator.workloads.torch_ddp"],
               "env": {"GLOO_SOCKET_IFNAME": "ib0", "NCCL_IB_DISABLE": "0"},
               "script_digest": "0123456789abcdef"})
    t = 1.7e9 + rng.random()
    for it in range(run.warmup + run.iters):
        phases = {"t_io": rng.uniform(1e-6, 1e-5), "t_h2d": rng.uniform(1e-5, 2e-5),
                  "t_f": rng.uniform(4e-3, 6e-3), "t_b": rng.uniform(4e-3, 6e-3),
                  "t_comm": rng.uniform(0, 4e-3), "t_u": rng.uniform(5e-4, 8e-4)}
        t_iter = sum(phases.values()) + rng.uniform(1e-5, 5e-5)
        record = {"type": "iter", "iter": it, "warmup": it < run.warmup, "t_start": t,
                  "t_iter": t_iter, "samples": run.batch_size}
        record.update({p: phases[p] for p in PHASES})
        record["t_comm_total"] = phases["t_comm"] + rng.uniform(0, 2e-3)
        log.write(record)
        t += t_iter
    log.write({"type": "footer", "status": "ok", "error": None, "peak_rss_bytes": 3 << 28,
               "ended_at": t, "versions": {"python": "3.11", "orch": "0.1.0",
                                           "torch": "2.13.0+cpu"},
               "param_checksum": 5.8864466, "comm_buckets": 1})
    log.close()


def time_orch(out: Path) -> tuple[float, int]:
    """A merge from scratch: the incremental cache (results/.cache) is removed first."""
    from orchestrator import results

    shutil.rmtree(out / results.CACHE_DIR, ignore_errors=True)
    t0 = time.perf_counter()
    runs = results.merge(out)
    elapsed = time.perf_counter() - t0
    assert len(runs) == len(MODELS) * len(BATCHES) * len(NODES)
    return elapsed, len(runs)


def time_regather(out: Path, change_one: bool) -> tuple[float, int]:
    """A re-merge with the cache of the previous one; ``change_one``: one run's rank log
    was touched (new mtime), so that run's logs are read again and only those."""
    from orchestrator import gather, results

    if change_one:
        log = sorted(out.glob("*/ranks/rank-0.jsonl"))[0]
        os.utime(log, ns=(time.time_ns(), time.time_ns()))
    read = []
    real = gather.scan_rank_log
    gather.scan_rank_log = lambda path: (read.append(path), real(path))[1]
    try:
        t0 = time.perf_counter()
        results.merge(out)
        elapsed = time.perf_counter() - t0
    finally:
        gather.scan_rank_log = real
    return elapsed, len(read)


def time_naive(out: Path) -> tuple[float, int]:
    import pandas as pd

    t0 = time.perf_counter()
    frames = []
    for path in sorted(out.glob("*/ranks/rank-*.jsonl")):
        df = pd.read_json(path, lines=True)
        frames.append(df[df["type"] == "iter"])
    merged = pd.concat(frames, ignore_index=True)
    return time.perf_counter() - t0, len(merged)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--iters", type=int, default=1000, help="iterations per rank log")
    p.add_argument("--repeat", type=int, default=1, help="timed repetitions (best is shown)")
    p.add_argument("--keep", type=Path, default=None,
                   help="generate here and keep it (reused if it exists)")
    p.add_argument("--skip-naive", action="store_true", help="time only orch's merge")
    args = p.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="orch-merge-bench-")) if args.keep is None else args.keep
    try:
        out = tmp / "sweep"
        t0 = time.perf_counter()
        if out.is_dir():  # --keep DIR of an earlier run: reuse its logs
            logs = len(list(out.glob("*/ranks/*.jsonl")))
            rows = logs * args.iters
            verb = "reusing"
        else:
            logs, rows = make_sweep(out, args.iters)
            verb = "generated"
        size = sum(f.stat().st_size for f in out.glob("*/ranks/*.jsonl"))
        print(f"{verb} {logs:,} rank logs, {rows:,} iteration rows, {size / 1e6:,.0f} MB "
              f"in {time.perf_counter() - t0:.1f} s ({out})")
        orch_s = min(time_orch(out)[0] for _ in range(args.repeat))
        merged = __import__("pandas").read_parquet(out / "results" / "iterations.parquet")
        assert len(merged) == rows, (len(merged), rows)
        print(f"orch merge (read + verify + Parquet):  {orch_s:7.2f} s")
        same_s, same_n = min(time_regather(out, False) for _ in range(args.repeat))
        print(f"re-gather, nothing changed:            {same_s:7.2f} s ({same_n} logs read)")
        one_s, one_n = min(time_regather(out, True) for _ in range(args.repeat))
        print(f"re-gather, one run changed:            {one_s:7.2f} s ({one_n} logs read)")
        if args.skip_naive:
            return 0 if orch_s < 5 else 1
        naive = [time_naive(out) for _ in range(args.repeat)]
        naive_s = min(t for t, _ in naive)
        assert naive[0][1] == rows, (naive[0][1], rows)
        ratio = naive_s / orch_s
        print(f"naive pandas read_json per log:        {naive_s:7.2f} s")
        print(f"ratio naive / orch:                    {ratio:7.1f}x")
        ok = orch_s < 5 and ratio >= 5
        load = os.getloadavg()[0]
        print(f"targets (merge < 5 s, >= 5x): {'met' if ok else 'MISSED'} "
              f"(load average {load:.1f} on {os.cpu_count()} cores)")
        return 0 if ok else 1
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
