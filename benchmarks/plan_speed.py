"""Planning speed: the dry run of a 1,200-run sweep (target: under 1 s beyond CLI start-up).

The sweep: 5 modes x 5 models x 4 node counts (1, 2, 4, 8: gpu-eth has 8 nodes, gpu-ib 16) x
2 batch sizes x 2 partitions x 3 repeats on the example-gpu-cluster site. Measured two ways:

    in process     expand (spec -> runs), render (both scripts of every run, as
                   ``orch sweep --dry-run`` does) and their sum, per sweep and per run;
                   templates are compiled by a warm-up render first, as the CLI compiles
                   them once for its whole dry run
    whole process  ``orch sweep ... --dry-run`` (stdout to /dev/null) minus ``orch --version``
                   (interpreter, imports, CLI set-up), timed in alternation so that drift in
                   the machine's load hits both alike

Every figure is printed as min / median / max over the repetitions: quote the median.

Run: ``.venv/bin/python -m benchmarks.plan_speed [--reps 5 --procs 5]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import record
from orchestrator import execute
from orchestrator import site as sitemod
from orchestrator.plan.sweep import SweepSpec, expand

SITE = "example-gpu-cluster"
MODES = ("torch-ddp", "horovod", "mpi-ssgd", "tf-allreduce", "mxnet-kvstore")
MODELS = ("lenet5", "alexnet", "googlenet", "resnet18", "resnet50")
NODES = (1, 2, 4, 8)
BATCHES = (32, 64)
PARTITIONS = ("gpu-ib", "gpu-eth")
REPEATS = 3


def spec() -> SweepSpec:
    return SweepSpec(nodes=NODES, modes=MODES, models=MODELS, partitions=PARTITIONS,
                     batch_sizes=BATCHES, repeats=REPEATS)


def cli_args(out: Path) -> list[str]:
    """The same sweep as ``orch sweep`` arguments."""
    return ["sweep", "--site", SITE, "--mode", ",".join(MODES), "--model", ",".join(MODELS),
            "--nodes", ",".join(map(str, NODES)), "--batch-size", ",".join(map(str, BATCHES)),
            "--partition", ",".join(PARTITIONS), "--repeats", str(REPEATS),
            "--out", str(out), "--dry-run"]


def in_process(reps: int, out: Path) -> dict[str, list[float]]:
    site, _ = sitemod.load(SITE)
    execute.dry_run(expand(spec(), site), site, out)  # warm-up: compiles the templates
    times: dict[str, list[float]] = {"expand": [], "render": [], "plan": []}
    n = 0
    for _ in range(reps):
        t0 = time.perf_counter()
        runs = expand(spec(), site)
        t1 = time.perf_counter()
        execute.dry_run(runs, site, out)
        t2 = time.perf_counter()
        n = len(runs)
        times["expand"].append(t1 - t0)
        times["render"].append(t2 - t1)
        times["plan"].append(t2 - t0)
    times["runs"] = [float(n)]
    return times


def _wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t0


def whole_process(procs: int, out: Path) -> dict[str, list[float]]:
    orch = [sys.executable, "-m", "orchestrator"]
    _wall([*orch, "--version"])  # warm-up: page cache, bytecode
    times: dict[str, list[float]] = {"dry run": [], "start-up": [], "difference": []}
    for _ in range(procs):
        dry = _wall([*orch, *cli_args(out)])
        start = _wall([*orch, "--version"])
        times["dry run"].append(dry)
        times["start-up"].append(start)
        times["difference"].append(dry - start)
    return times


def row(name: str, values: list[float], per: int = 1, unit: str = "s") -> str:
    scale = 1000.0 if unit == "ms" else 1.0
    lo, med, hi = (v * scale / per for v in (min(values), statistics.median(values),
                                             max(values)))
    return f"  {name:<28} {lo:9.3f} {med:9.3f} {hi:9.3f}  {unit}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="in-process repetitions")
    parser.add_argument("--procs", type=int, default=5,
                        help="whole-process pairs (dry run, start-up), alternated")
    a = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "sweep"  # never written: a dry run writes nothing
        inproc = in_process(a.reps, out)
        n = int(inproc.pop("runs")[0])
        whole = whole_process(a.procs, out)
    print(f"plan speed: {n} runs ({len(MODES)} modes x {len(MODELS)} models x {len(NODES)} "
          f"node counts x {len(BATCHES)} batches x {len(PARTITIONS)} partitions x {REPEATS} "
          f"repeats) on {SITE}")
    print(f"  {'':<28} {'min':>9} {'median':>9} {'max':>9}")
    print(f"in process ({a.reps} repetitions):")
    for name, values in inproc.items():
        print(row(f"{name} (sweep)", values))
    print(row("plan per run", inproc["plan"], per=n, unit="ms"))
    print(f"whole process ({a.procs} alternated pairs):")
    for name, values in whole.items():
        print(row(name, values))
    med = statistics.median(whole["difference"])
    print(f"planning beyond CLI start-up: {med:.2f} s median "
          f"(target < 1 s: {'met' if med < 1.0 else 'NOT met'})")
    per_run_ms = statistics.median(inproc["plan"]) / n * 1e3
    record.write("plan_speed", f"{med:.2f} s beyond start-up (median; {per_run_ms:.1f} ms per "
                 f"run in process), {n} runs, target < 1 s",
                 {"beyond_startup_s": round(med, 3), "per_run_ms_in_process": round(per_run_ms, 3),
                  "runs": n})


if __name__ == "__main__":
    main()
