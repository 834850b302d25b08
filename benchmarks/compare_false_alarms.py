"""How often does ``orch compare`` call a change between identical sweeps? (Its false alarms.)

    .venv/bin/python -m benchmarks.compare_false_alarms [--sweeps 6] [--iters 10]
                                                        [--repeats 1] [--keep DIR]
                                                        [--synthetic 2000]

Runs ``--sweeps`` identical real local sweeps one after the other (torch-ddp, lenet5, 2 ranks,
``--iters`` measured iterations after 2 warm-up; ``--repeats`` runs of it per sweep, which makes
each run's trimmed mean the compared value), then compares every pair of them as
``orch compare`` does and counts the pairs whose verdict is not "no measured change": each is
a false alarm, since nothing differs but the moment they ran. Reported beside it:

* the verdict of the throughput alone (without the instrumented window's confirmation), to
  show what that rule buys;
* the share of single metrics (throughput, iteration time, each phase) called worse or better;
* ``--synthetic N``: N comparisons of samples drawn from one lognormal distribution (20
  iterations a side), where the test's own rate must stay near ``alpha`` (0.05) or below:
  it checks the statistics, where the real sweeps check the machine.

The real figure is the machine's as much as orch's: a shared, loaded machine (the run-to-run
spread is then what a run's iterations do not see) gives more than a quiet one. Nothing is
asserted; the figures are printed for docs/howto/compare.md.
"""

from __future__ import annotations

import argparse
import itertools
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

from orchestrator.history import compare, samples  # noqa: E402


def run_sweeps(out: Path, count: int, iters: int, repeats: int = 1) -> list[pd.DataFrame]:
    """``count`` identical sweeps, one after the other: their sample tables."""
    from orchestrator.cli.resultset import load_result_set

    tables = []
    for i in range(count):
        target = out / f"sweep-{i}"
        subprocess.run([sys.executable, "-m", "orchestrator", "sweep", "--model", "lenet5",
                        "--nodes", "2", "--iters", str(iters), "--warmup", "2", "--repeats",
                        str(repeats), "--out", str(target)], cwd=ROOT, check=True,
                       capture_output=True)
        runs, its, _ = load_result_set(target)
        tables.append(samples.samples(runs, its))
        rates = ", ".join(f"{v:,.0f}" for v in runs["samples_per_s"])
        print(f"sweep {i + 1}/{count}: {rates} samples/s", flush=True)
    return tables


def tally(pairs: list[tuple[pd.DataFrame, pd.DataFrame]]) -> dict:
    """Verdicts over the pairs: with both windows, throughput alone, and per metric."""
    verdicts, alone, moved, metrics = [], [], 0, 0
    for a, b in pairs:
        for c in compare.compare(a, b):
            verdicts.append(c.verdict)
            alone.append(c.changes["samples_per_s"].moved if "samples_per_s" in c.changes
                         else "")
            moved += sum(bool(ch.moved) for ch in c.changes.values())
            metrics += len(c.changes)
    n = len(verdicts)
    return {"comparisons": n,
            "false_alarms": sum(v != "no measured change" for v in verdicts),
            "throughput_alone": sum(bool(m) for m in alone),
            "metric_rate": moved / metrics if metrics else float("nan"),
            "verdicts": pd.Series(verdicts).value_counts().to_dict()}


def synthetic(count: int, seed: int = 0) -> dict:
    """``count`` comparisons of two samples of one distribution (one run of 20 iterations a
    side, 2 ranks, the phases of a small CPU step, 30 % spread)."""
    rng = np.random.default_rng(seed)
    return tally([(_table(rng), _table(rng)) for _ in range(count)])


def _table(rng: np.random.Generator) -> pd.DataFrame:
    rows = []
    for it in range(20):
        phases = {"t_f": 0.005, "t_b": 0.005, "t_u": 0.0004, "t_comm": 0.008, "t_io": 1e-5,
                  "t_h2d": 1e-5}
        values = {k: v * rng.lognormal(0, 0.3) for k, v in phases.items()}
        t_iter = sum(values.values())
        values.update(t_comm_total=values["t_comm"], t_iter=t_iter,
                      compute=values["t_f"] + values["t_b"] + values["t_u"],
                      samples_per_s=64 / (t_iter * rng.lognormal(0, 0.3) / 1.5))
        rows += [{"run_id": "r", "metric": k, "iter": it, "value": v} for k, v in values.items()]
    key = {"site": "local", "partition": "local", "mode": "torch-ddp", "model": "lenet5",
           "nodes": 2, "tasks_per_node": 1, "batch_size": 32, "options": "{}", "repeat": 0}
    return pd.DataFrame(rows).assign(**key)


def report(name: str, t: dict) -> None:
    n = t["comparisons"]
    print(f"{name}: {t['false_alarms']} false alarm(s) in {n} comparisons "
          f"({t['false_alarms'] / n:.1%}); throughput alone: {t['throughput_alone']} "
          f"({t['throughput_alone'] / n:.1%}); single metrics called changed: "
          f"{t['metric_rate']:.1%}; verdicts {t['verdicts']}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sweeps", type=int, default=6)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--synthetic", type=int, default=2000)
    p.add_argument("--keep", type=Path, help="keep the sweeps in this directory")
    args = p.parse_args(argv)
    if args.synthetic:
        report(f"synthetic ({args.synthetic} pairs)", synthetic(args.synthetic))
    if args.sweeps >= 2:
        out = args.keep or Path(tempfile.mkdtemp(prefix="orch-false-alarms-"))
        started = time.time()
        try:
            tables = run_sweeps(out, args.sweeps, args.iters, args.repeats)
        finally:
            if args.keep is None:
                shutil.rmtree(out, ignore_errors=True)
        pairs = list(itertools.combinations(tables, 2))
        report(f"real ({args.sweeps} sweeps of {args.repeats} run(s), {len(pairs)} pairs, "
               f"{time.time() - started:.0f} s)", tally(pairs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
