"""How fast does ``orch history changes`` read a history of 3,000 recorded sweeps?

    .venv/bin/python -m benchmarks.changes_speed [--entries 3000] [--iters 30] [--repeat 3]
                                                 [--keep DIR]

Writes a history of ``--entries`` recorded sweeps, each of 2 configurations (torch-ddp
resnet50 on 1 and 4 nodes of 4 tasks) x 1 run of ``--iters`` measured iterations of every
metric (the runs of ``benchmarks.compare_speed``: lognormal around a GPU node's step, a 3 %
run-to-run spread), the 4-node configuration's communication 20 % slower from the sweep at
two thirds on; entries are written as ``orchestrator.history.store.record`` writes them
(entry file, then its record linked in), without its look-up of the entries already there,
which would make writing 3,000 quadratic.

Timed (best of ``--repeat``, wall and CPU): ``orch history changes --history H`` as a user
runs it (a new process: start-up included), with the history's cache of run levels in place
(each reader keeps it up to date: the first reading after N new sweeps reads those N entry
files) and, once, without it (every entry file read: what the first reading after an upgrade
costs). Target: under 2 s with the cache; ``orch compare`` of two 1,000-run histories is
``benchmarks.compare_speed``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import record  # noqa: E402
from benchmarks.compare_speed import run_table  # noqa: E402
from orchestrator.history import changes, store  # noqa: E402

TARGET_S = 2.0


def write_history(root: Path, count: int, iters: int, seed: int = 0) -> int:
    """``count`` entries (kept ones reused); how many the history holds."""
    have = len(store.entries(root)[0])
    if have:
        return have
    rng = np.random.default_rng(seed)
    for folder in (root, root / store.ENTRIES, root / store.RECORDS):
        store.make_dir(folder)
    for s in range(count):
        slow = 1.2 if s >= 2 * count // 3 else 1.0
        body = pd.concat([run_table(rng, f"s{s}-{nodes}", "torch-ddp", nodes, 0, iters,
                                    slow if nodes == 4 else 1.0).assign(
                                        measured_at=1.7e9 + 86400 * s)
                          for nodes in (1, 4)], ignore_index=True)
        digest = hashlib.sha256(pd.util.hash_pandas_object(body, index=False).values
                                .tobytes()).hexdigest()
        entry = store._entry(body, digest, Path(f"/sweeps/night-{s}"))
        store.write_new(root / entry.file, lambda tmp, b=body: b.to_parquet(tmp, index=False))
        store._publish(root, entry, [f"table-{digest}", f"sweep-{s}"])
    return count


def command(root: Path) -> tuple[float, float, str]:
    """Wall and CPU seconds of ``orch history changes`` as a command, and its output."""
    argv = [sys.executable, "-m", "orchestrator", "history", "changes", "--history", str(root)]
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), \
        proc.stdout


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--entries", type=int, default=3000)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--keep", type=Path, help="write the history here and keep it (and reuse "
                   "the one it holds)")
    args = p.parse_args(argv)
    out = args.keep or Path(tempfile.mkdtemp(prefix="orch-changes-speed-"))
    try:
        started = time.perf_counter()
        count = write_history(out, args.entries, args.iters)
        print(f"a history of {count:,} entries ({time.perf_counter() - started:.0f} s to write)")
        (out / store.CACHE / changes.CACHE_FILE).unlink(missing_ok=True)
        cold_wall, cold_cpu, _ = command(out)
        print(f"without the cache (every entry file read): {cold_wall:.2f} s wall, "
              f"{cold_cpu:.2f} s CPU")
        runs = [command(out) for _ in range(args.repeat)]
        wall, cpu = min(r[0] for r in runs), min(r[1] for r in runs)
        print(runs[-1][2])
        load = os.getloadavg()[0]
        print(f"orch history changes as a command, cache in place: {wall:.2f} s wall, "
              f"{cpu:.2f} s CPU (load average {load:.1f})")
    finally:
        if args.keep is None:
            shutil.rmtree(out, ignore_errors=True)
    ok = cpu < TARGET_S
    record.write("changes_speed", f"a history of {count:,} recorded sweeps: orch history "
                 f"changes as a command {wall:.2f} s wall, {cpu:.2f} s CPU, start-up included "
                 f"(target < {TARGET_S:.0f} s: {'met' if ok else 'missed'}); without its cache "
                 f"of run levels (the first reading after an upgrade) {cold_wall:.1f} s wall, "
                 f"{cold_cpu:.1f} s CPU; load average {load:.1f}",
                 {"entries": count, "command_wall_s": round(wall, 3),
                  "command_cpu_s": round(cpu, 3), "cold_wall_s": round(cold_wall, 3),
                  "cold_cpu_s": round(cold_cpu, 3), "load_average": round(load, 2),
                  "target_s": TARGET_S, "target_met": ok})
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
