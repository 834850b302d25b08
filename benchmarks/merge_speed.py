"""How fast does orch merge a big sweep? 1,000 rank logs, 1,000,000 iteration rows.

    .venv/bin/python -m benchmarks.merge_speed [--logs 1000] [--iters 1000]
                                               [--windows both|breakdown] [--repeat N]
                                               [--keep DIR] [--skip-naive] [--stages]

Generates a synthetic sweep directory in a temporary directory (25 configurations x nodes
1..4 x 4 ranks per node = 100 runs, 1,000 rank logs, 1,000 iterations per rank; ``--logs
10000``: the same grid 10 times over, repeats 0..9, 1,000 runs), written with
the rank-side harness' own log writer (``orchestrator.rankside.harness.RankLogWriter``: header,
one ``iter`` record per iteration, footer), each run's ledger entry finalized as orch
finalizes it (COMPLETED, with its logs' digest) and every file a minute old, as a finished
sweep's are. ``--windows both`` (the default) writes what the
harness writes since the two windows (protocol.py): half of each log's iterations in the native
window (no phases), then half in the breakdown window; ``--windows breakdown`` writes every
iteration with phases and no ``window`` key, as logs were written before (bigger lines). Then,
in one run, side by side, each as ``orch gather`` does it (``results.recheck``, then
``results.merge``):

* the gather from scratch (no ``results/``: re-checks every finished run against the
  digest of its logs, reads every log, writes every run's ``results/iterations.parquet/<run>``
  file and ``results/runs.parquet``);
* the incremental re-gather: nothing changed, and one run's rank log touched (only that run's
  logs may be read, the count is checked; only its file and runs.parquet are written) — a
  live sweep's gather after one more run finished;
* a naive pandas read of the same logs (``pd.read_json(lines=True)`` per rank log, keep the
  ``iter`` records, ``pd.concat``) — which only *reads*, it computes and writes nothing.

Each is timed by the wall clock (best of ``--repeat``) and by the CPU time (all threads): on a
shared machine the CPU time is the steadier figure. The merge from scratch runs in a child
process, whose peak resident memory is reported too (the merge streams: it holds one batch of
logs at a time, whatever the sweep's size). ``--stages``: one more merge from scratch, split
into its stages (where the time goes). Targets: from scratch < 1.5 s per 1,000 logs and peak
memory < 2 GiB, >= 5x faster than naive, one changed run re-reads and rewrites only its own
files and its re-gather takes < 1 s. Exits 1 if one is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(ROOT))

from benchmarks import record  # noqa: E402
from orchestrator import files  # noqa: E402
from orchestrator.protocol import PHASES  # noqa: E402
from orchestrator.rankside.harness import RankLogWriter  # noqa: E402
from orchestrator.runs import rundir  # noqa: E402
from orchestrator.runs.rundir import JobRecord  # noqa: E402
from orchestrator.spec.api import Run  # noqa: E402

MODELS = ("lenet5", "alexnet", "googlenet", "resnet18", "resnet50")
BATCHES = (16, 32, 64, 128, 256)
NODES = (1, 2, 3, 4)
TASKS_PER_NODE = 4
WARMUP = 10
AGE_S = 60  # logs written this long ago: older than results.RACY_S, as real logs are


GRID_LOGS = len(MODELS) * len(BATCHES) * sum(NODES) * TASKS_PER_NODE  # 1,000
GIB = 1 << 30


def make_sweep(out: Path, iters_per_rank: int, windows: str = "both",
               seed: int = 0, repeats: int = 1) -> tuple[int, int]:
    """Write the synthetic sweep (``repeats`` times the grid); returns (rank logs, rows)."""
    rng = random.Random(seed)
    logs = rows = 0
    per_window = iters_per_rank // 2 if windows == "both" else iters_per_rank
    grid = [(m, b, n, r) for r in range(repeats) for m in MODELS for b in BATCHES for n in NODES]
    for model, batch, nodes, repeat in grid:
        run = Run(site="bench", scheduler="slurm", partition="ib",
                  interconnect="infiniband", mode="torch-ddp", framework="torch",
                  launcher="srun", model=model, dataset="cifar", nodes=nodes,
                  tasks_per_node=TASKS_PER_NODE, batch_size=batch,
                  iters=per_window - WARMUP, warmup=WARMUP, repeat=repeat,
                  time_limit_min=10, options={"backend": "gloo"})
        rdir = out / run.run_id
        (rdir / "ranks").mkdir(parents=True)
        (rdir / "run.json").write_text(run.model_dump_json(indent=2) + "\n")
        for rank in range(run.ranks):
            _write_rank(rdir / "ranks" / f"rank-{rank}.jsonl", run, rank, rng, windows)
            logs += 1
            rows += per_window * (2 if windows == "both" else 1)
        # finalized as orch finalizes a run (execute.finalize): its logs' digest recorded
        rundir.write_record(rdir, JobRecord(run_id=run.run_id, scheduler="slurm",
                                            job_id=str(1000 + logs), state="COMPLETED",
                                            logs_digest=rundir.logs_digest(rdir)))
        then = time.time_ns() - AGE_S * 10**9
        for path in (*rdir.iterdir(), *(rdir / "ranks").iterdir()):
            os.utime(path, ns=(then, then))
    return logs, rows


def _write_rank(path: Path, run: Run, rank: int, rng: random.Random, windows: str) -> None:
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
    # both: as the harness writes them, a native window (its own warm-up, no phases), then the
    # breakdown window; iteration numbers run on across the two.
    native = run.warmup + run.iters if windows == "both" else 0
    total = native + run.warmup + run.iters
    for it in range(total):
        in_native = it < native
        k = it if in_native else it - native  # the iteration's place in its window
        record = {"type": "iter", "iter": it}
        if windows == "both":
            record["window"] = "native" if in_native else "breakdown"
        if in_native:
            t_iter = rng.uniform(9e-3, 1.3e-2)
            record.update(warmup=k < WARMUP, t_start=t, t_iter=t_iter,
                          samples=run.batch_size)
        else:
            phases = {"t_io": rng.uniform(1e-6, 1e-5), "t_h2d": rng.uniform(1e-5, 2e-5),
                      "t_f": rng.uniform(4e-3, 6e-3), "t_b": rng.uniform(4e-3, 6e-3),
                      "t_comm": rng.uniform(0, 4e-3), "t_u": rng.uniform(5e-4, 8e-4)}
            t_iter = sum(phases.values()) + rng.uniform(1e-5, 5e-5)
            record.update(warmup=k < WARMUP, t_start=t, t_iter=t_iter,
                          samples=run.batch_size)
            record.update({p: phases[p] for p in PHASES})
            record["t_comm_total"] = phases["t_comm"] + rng.uniform(0, 2e-3)
        log.write(record)
        t += t_iter
    log.write({"type": "footer", "status": "ok", "error": None, "peak_rss_bytes": 3 << 28,
               "ended_at": t, "versions": {"python": "3.11", "orch": "0.1.0",
                                           "torch": "2.13.0+cpu"},
               "param_checksum": 5.8864466, "comm_buckets": 1})
    log.close()


def _cpu() -> float:
    """CPU seconds of this process, all threads (Arrow's included)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


# The merge from scratch, in a child process: its peak RSS is the merge's own, not that of
# this process (which wrote the logs and reads them naively).
_CHILD = """
import json, resource, sys, time
from pathlib import Path
from orchestrator import results
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
out = Path(sys.argv[1])
t0, c0 = time.perf_counter(), cpu()
runs = results.merge(out, results.recheck(out))
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
print(json.dumps([time.perf_counter() - t0, cpu() - c0, len(runs), peak]))
"""


def time_orch(out: Path, runs: int) -> tuple[float, float, int]:
    """A gather from scratch (the run records re-checked, then merged, as orch gather does):
    the result set and its cache (results/) are removed first, as after a sweep's runs.
    Returns (wall s, CPU s, peak RSS bytes of the process that merged)."""
    shutil.rmtree(out / "results", ignore_errors=True)
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(out)], capture_output=True,
                          text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    elapsed, cpu, merged, peak = json.loads(proc.stdout.splitlines()[-1])
    assert merged == runs, (merged, runs)
    return elapsed, cpu, peak


def _merge_here(out: Path) -> tuple[float, float]:
    """A gather from scratch in this process (for --stages). Returns (wall s, CPU s)."""
    from orchestrator import results

    shutil.rmtree(out / "results", ignore_errors=True)
    t0, c0 = time.perf_counter(), _cpu()
    results.merge(out, results.recheck(out))
    return time.perf_counter() - t0, _cpu() - c0


def time_regather(out: Path, change_one: bool) -> tuple[float, float, list[Path], list[Path]]:
    """A re-gather with the cache of the previous one; ``change_one``: one run's rank log
    changed (:func:`_change_one_run`), so that run's logs are read again and only those.
    Returns (wall s, CPU s, the logs read, the files written)."""
    from orchestrator import protocol, results

    if change_one:
        _change_one_run(out)
    read: list[Path] = []
    written: list[Path] = []
    real_read, real_write = protocol.read_rank_log, files.write_bytes_atomic

    def counting(path, raw_iters=False):
        read.append(path)
        return real_read(path, raw_iters)

    def writing(path, data, mode=None):
        written.append(path)
        return real_write(path, data, mode)

    protocol.read_rank_log, files.write_bytes_atomic = counting, writing
    try:
        t0, c0 = time.perf_counter(), _cpu()
        results.merge(out, results.recheck(out))  # as orch gather does
        elapsed, cpu = time.perf_counter() - t0, _cpu() - c0
    finally:
        protocol.read_rank_log, files.write_bytes_atomic = real_read, real_write
    return elapsed, cpu, read, written


def _change_one_run(out: Path) -> None:
    """The first run's rank 0 measured its last iteration 0.1 s slower (or no longer does),
    and its ledger entry finalized again, as for a run that has just finished: its files half
    a minute old, older than RACY_S."""
    from orchestrator import protocol

    rdir = rundir.run_dirs(out)[0]
    log = rdir / protocol.RANKS_DIR / protocol.rank_log_name(0)
    text = log.read_bytes()
    fast, slow = b'"t_iter":0.0', b'"t_iter":0.1'
    at = max(text.rfind(fast), text.rfind(slow))
    log.write_bytes(text[:at] + (fast if text.startswith(slow, at) else slow)
                    + text[at + len(fast):])
    record = rundir.read_record(rdir)
    rundir.write_record(rdir, record.model_copy(update={"logs_digest": rundir.logs_digest(rdir)}))
    then = time.time_ns() - AGE_S * 10**9 // 2
    for path in (log, rdir / protocol.JOB_FILE):
        os.utime(path, ns=(then, then))


def time_stages(out: Path) -> list[tuple[str, float, float]]:
    """A merge from scratch with its stages timed: (stage, wall s, CPU s) each. Reading the
    logs and parsing them are timed by the process' CPU (Arrow's threads included), which
    includes the write of the previous batch, running beside them on its own thread; the
    per-run metrics and the Parquet writes are timed by their own thread's CPU."""
    from orchestrator.results import analyze, cache, gather
    from orchestrator.results import iterations as tables

    times: dict[str, list[float]] = {}

    def timed(module, name: str, stage: str, clock) -> None:
        real = getattr(module, name)

        def wrapper(*args, **kwargs):
            t0, c0 = time.perf_counter(), clock()
            try:
                return real(*args, **kwargs)
            finally:
                spent = times.setdefault(stage, [0.0, 0.0])
                spent[0] += time.perf_counter() - t0
                spent[1] += clock() - c0

        setattr(module, name, wrapper)
        undo.append((module, name, real))

    undo: list[tuple] = []
    timed(gather, "scan_runs_logs", "read the logs (threads)", _cpu)
    timed(tables, "merged_iteration_table", "parse the iteration lines", _cpu)
    timed(analyze, "run_metrics", "per-run metrics", time.thread_time)
    timed(files, "parquet_bytes", "encode the Parquet files", time.thread_time)
    timed(files, "write_bytes_atomic", "write the files", time.thread_time)
    timed(cache, "run_key", "the runs' keys", time.thread_time)
    timed(analyze, "add_scaling", "speedup and efficiency", time.thread_time)
    try:
        total = _merge_here(out)
    finally:
        for module, name, real in undo:
            setattr(module, name, real)
    return [*((k, w, c) for k, (w, c) in times.items()), ("total", *total)]


def time_naive(out: Path) -> tuple[float, float, int]:
    import pandas as pd

    t0, c0 = time.perf_counter(), _cpu()
    frames = []
    for path in sorted(out.glob("*/ranks/rank-*.jsonl")):
        df = pd.read_json(path, lines=True)
        frames.append(df[df["type"] == "iter"])
    merged = pd.concat(frames, ignore_index=True)
    return time.perf_counter() - t0, _cpu() - c0, len(merged)


def _rows_merged(out: Path) -> int:
    """The rows of results/iterations.parquet, every run's file."""
    import pyarrow.parquet as pq

    from orchestrator.results import resultset

    return sum(pq.read_metadata(path).num_rows
               for path in resultset.table_files(out / resultset.ITERATIONS))


def time_reads(out: Path, repeat: int) -> tuple[float, float]:
    """Reading the whole iterations table with pandas: its directory (a file per run) and the
    same rows as one file (as ``orch export --table iterations`` writes it). Returns the best
    wall seconds of each."""
    import pandas as pd
    import pyarrow.parquet as pq

    from orchestrator.results import resultset

    directory = out / resultset.ITERATIONS
    found = resultset.table_files(directory)
    one = out.parent / "iterations-one-file.parquet"
    with pq.ParquetWriter(one, pq.read_schema(found[0])) as writer:
        for path in found:
            writer.write_table(pq.read_table(path))

    def timed(path: Path) -> float:
        t0 = time.perf_counter()
        pd.read_parquet(path)
        return time.perf_counter() - t0

    try:
        return (min(timed(directory) for _ in range(repeat)),
                min(timed(one) for _ in range(repeat)))
    finally:
        one.unlink()


def _best(results: list[tuple]) -> tuple:
    return min(results, key=lambda r: r[0])


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--logs", type=int, default=GRID_LOGS,
                   help=f"rank logs, a multiple of {GRID_LOGS:,} (the grid, repeated)")
    p.add_argument("--iters", type=int, default=1000, help="iterations per rank log")
    p.add_argument("--windows", choices=("both", "breakdown"), default="both",
                   help="both: native + breakdown windows, as the harness writes (default); "
                        "breakdown: every iteration with phases, no window key (older logs)")
    p.add_argument("--repeat", type=int, default=1, help="timed repetitions (best is shown)")
    p.add_argument("--keep", type=Path, default=None,
                   help="generate here and keep it (reused if it exists)")
    p.add_argument("--skip-naive", action="store_true", help="do not time the naive read")
    p.add_argument("--stages", action="store_true",
                   help="one more merge from scratch, its stages timed")
    args = p.parse_args(argv)
    if args.logs <= 0 or args.logs % GRID_LOGS:
        p.error(f"--logs: a multiple of {GRID_LOGS:,}")
    return args


def _sweep(out: Path, args: argparse.Namespace) -> tuple[int, int]:
    """The sweep to merge: generated, or reused from --keep DIR. Returns (logs, rows)."""
    t0 = time.perf_counter()
    if out.is_dir():  # --keep DIR of an earlier run: reuse its logs
        logs = len(list(out.glob("*/ranks/*.jsonl")))
        rows = logs * args.iters
        verb = "reusing"
    else:
        logs, rows = make_sweep(out, args.iters, args.windows,
                                repeats=args.logs // GRID_LOGS)
        verb = "generated"
    size = sum(f.stat().st_size for f in out.glob("*/ranks/*.jsonl"))
    print(f"{verb} {logs:,} rank logs, {rows:,} iteration rows, {size / 1e6:,.0f} MB "
          f"(windows: {args.windows}) in {time.perf_counter() - t0:.1f} s ({out})")
    return logs, rows


def _regathers(out: Path, repeat: int) -> dict:
    """Time the re-gathers: nothing changed (no log read, no file written), one run changed
    (its logs read, its file of iterations and runs.parquet written, nothing else)."""
    same_s, same_cpu, same_read, same_written = _best([time_regather(out, False)
                                                       for _ in range(repeat)])
    one_s, one_cpu, one_read, one_written = _best([time_regather(out, True)
                                                   for _ in range(repeat)])
    changed = {path.parent.parent for path in one_read}
    only_one = len(changed) == 1 and len(one_read) == len(
        list(next(iter(changed)).glob("ranks/rank-*.jsonl")))
    names = sorted(str(p.relative_to(out / "results")) for p in one_written
                   if ".cache" not in p.parts)
    writes_one = only_one and names == [
        f"iterations.parquet/{next(iter(changed)).name}.parquet", "runs.parquet"]
    print(f"{'re-gather, nothing changed':36s} {same_s:7.2f}s {same_cpu:7.2f}s  "
          f"({len(same_read)} logs read, {len(same_written)} files written)")
    print(f"{'re-gather, one run changed':36s} {one_s:7.2f}s {one_cpu:7.2f}s  "
          f"({len(one_read)} logs read, of {len(changed)} run; wrote {', '.join(names)})")
    return {"nothing_changed_s": round(same_s, 3), "nothing_changed_cpu_s": round(same_cpu, 3),
            "one_changed_s": round(one_s, 3), "one_changed_cpu_s": round(one_cpu, 3),
            "one_changed_logs_read": len(one_read),
            "ok": not same_read and not same_written and writes_one and one_s < 1.0}


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="orch-merge-bench-")) if args.keep is None else args.keep
    try:
        out = tmp / "sweep"
        logs, rows = _sweep(out, args)
        load = os.getloadavg()[0]
        runs = len(rundir.run_dirs(out))
        scratch_s, scratch_cpu, peak = _best([time_orch(out, runs) for _ in range(args.repeat)])
        merged = _rows_merged(out)
        assert merged == rows, (merged, rows)
        print(f"{'':36s} {'wall':>8s} {'CPU':>8s}")
        print(f"{'orch gather from scratch':36s} {scratch_s:7.2f}s {scratch_cpu:7.2f}s  "
              f"(peak RSS {peak / GIB:.2f} GiB)")
        limit_s = 1.5 * logs / GRID_LOGS
        again = _regathers(out, args.repeat)
        print(f"{'ratio one run changed / from scratch':36s} "
              f"{again['one_changed_s'] / scratch_s:7.3f}x "
              f"{again['one_changed_cpu_s'] / scratch_cpu:7.3f}x")
        ok = again.pop("ok") and scratch_s < limit_s and peak < 2 * GIB
        read_dir_s, read_one_s = time_reads(out, args.repeat)
        print(f"{'pandas reads the table: a file per run':36s} {read_dir_s:7.2f}s  "
              f"(one file of the same rows: {read_one_s:.2f} s)")
        again.update(read_table_s=round(read_dir_s, 3), read_one_file_s=round(read_one_s, 3))
        if args.stages:
            for stage, wall, cpu in time_stages(out):
                print(f"  {stage:34s} {wall:7.2f}s {cpu:7.2f}s")
        if not args.skip_naive:
            naive_s, naive_cpu, naive_rows = _best([time_naive(out)
                                                    for _ in range(args.repeat)])
            assert naive_rows == rows, (naive_rows, rows)
            ratio = naive_s / scratch_s
            print(f"{'naive pandas read_json per log':36s} {naive_s:7.2f}s {naive_cpu:7.2f}s")
            print(f"{'ratio naive / from scratch':36s} {ratio:7.1f}x "
                  f"{naive_cpu / scratch_cpu:7.1f}x")
            ok = ok and ratio >= 5
        print(f"targets (from scratch < {limit_s:g} s and < 2 GiB, >= 5x naive, one changed "
              f"run reads and writes only its files in < 1 s): {'met' if ok else 'MISSED'} "
              f"(load average {load:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} "
              "cores)")
        record.write("merge_speed", f"{logs:,} logs, {rows:,} rows: from scratch "
                     f"{scratch_s:.2f} s wall, {scratch_cpu:.2f} s CPU, peak RSS "
                     f"{peak / GIB:.2f} GiB; one run changed {again['one_changed_s']:.2f} s "
                     f"wall, {again['one_changed_cpu_s']:.2f} s CPU; nothing changed "
                     f"{again['nothing_changed_s']:.2f} s; at load {load:.1f} (targets "
                     f"< {limit_s:g} s, < 2 GiB, one run changed < 1 s): "
                     f"{'met' if ok else 'missed'}",
                     {"logs": logs, "rows": rows, "from_scratch_s": round(scratch_s, 3),
                      "from_scratch_cpu_s": round(scratch_cpu, 3), **again,
                      "peak_rss_gib": round(peak / GIB, 3), "load": round(load, 2),
                      "targets_met": ok})
        return 0 if ok else 1
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
