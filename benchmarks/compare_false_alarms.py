"""How often does ``orch compare`` call a change between identical sweeps (its false alarms),
and how small a real slowdown does it find?

    .venv/bin/python -m benchmarks.compare_false_alarms [--sweeps 6] [--iters 10]
                                                        [--repeats 1] [--keep DIR]
                                                        [--synthetic 2000]
                                                        [--delays 5,20,50] [--rounds 6]

Runs ``--sweeps`` identical real local sweeps one after the other (torch-ddp, lenet5, 2 ranks,
``--iters`` measured iterations after 2 warm-up; ``--repeats`` runs of it per sweep, which makes
each run's trimmed mean the compared value), then compares every pair of them as
``orch compare`` does and counts the pairs called slower or faster: each is a false alarm,
since nothing differs but the moment they ran (one run a side now gets no such verdict
without a history's spread, so pairs of single runs measure what that rule spares); and
compares each sweep with the others together (one run against a history of the rest, as a
nightly job compares tonight's sweep with the last ones). Reported beside it:

* the verdict of the throughput alone (without the instrumented window's confirmation), to
  show what that rule buys;
* the share of single metrics (throughput, iteration time, each phase) called worse or better;
* why single runs differ more than their iterations say: the lag-1 autocorrelation of each
  run's iterations, and the variance of the runs' means over the variance of a mean that one
  run's iterations predict (1 where the iterations tell the whole spread);
* ``--delays``: ``--rounds`` rounds of a clean sweep then one sweep per delay, each with every
  all-reduce ``comm_delay_ms`` late (a slow fabric, for real), interleaved so that clean and
  delayed runs see the same load; each delayed sweep compared with the rounds' clean sweeps
  together and with its round's clean sweep: the share found slower with the communication
  named, per delay;
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

from benchmarks import record  # noqa: E402
from orchestrator.history import compare, samples  # noqa: E402

FIGURES: dict[str, dict] = {}  # every tally printed, by its line's name: the result file's figures

IGNORE = ("comm_delay_ms",)  # delayed and clean runs are one configuration


def run_sweeps(out: Path, count: int, iters: int, repeats: int = 1, name: str = "sweep",
               options: tuple[str, ...] = ()) -> list[pd.DataFrame]:
    """``count`` identical sweeps, one after the other: their sample tables (each run's id
    made unique to its sweep, as a history does)."""
    from orchestrator.cli.resultset import load_result_set

    tables = []
    for i in range(count):
        target = out / f"{name}-{i}"
        if not (target / "results").is_dir():  # kept from an earlier call (--keep)
            subprocess.run([sys.executable, "-m", "orchestrator", "sweep", "--model", "lenet5",
                            "--nodes", "2", "--iters", str(iters), "--warmup", "2",
                            "--repeats", str(repeats), "--out", str(target),
                            *[f"--option={o}" for o in options]], cwd=ROOT, check=True,
                           capture_output=True)
        runs, its, _ = load_result_set(target)
        table = samples.samples(runs, its)
        tables.append(table.assign(run_id=f"{name}-{i}/" + table["run_id"]))
        rates = ", ".join(f"{v:,.0f}" for v in runs["samples_per_s"])
        print(f"{name} {i + 1}/{count}: {rates} samples/s", flush=True)
    return tables


def diagnose(tables: list[pd.DataFrame]) -> None:
    """Per metric: the median lag-1 autocorrelation of the runs' iterations, and the variance
    of the runs' trimmed means over the squared standard error one run's iterations give it."""
    from orchestrator.history.stats import Trimmed, lag1_autocorrelation

    every = pd.concat(tables, ignore_index=True)
    for metric in ("samples_per_s", "t_iter", "compute", "t_comm"):
        runs = [np.log(g.sort_values("iter")["value"].to_numpy(float))
                for _, g in every[every["metric"] == metric].groupby("run_id")]
        if len(runs) < 3:
            continue
        means = [Trimmed.of(x).mean for x in runs]
        within = float(np.mean([Trimmed.of(x).d for x in runs]))
        r1 = float(np.median([lag1_autocorrelation(x) for x in runs]))
        print(f"  {metric}: lag-1 autocorrelation {r1:.2f} (median of {len(runs)} runs); "
              f"run means' variance / one run's predicted {np.var(means, ddof=1) / within:.1f}")


def against_history(tables: list[pd.DataFrame]) -> dict:
    """Each sweep against all the others together (tonight's against the history)."""
    return tally([(pd.concat(tables[:i] + tables[i + 1:], ignore_index=True), t)
                  for i, t in enumerate(tables)])


def found(pairs: list[tuple[pd.DataFrame, pd.DataFrame]]) -> dict:
    verdicts = [c for a, b in pairs for c in compare.compare(a, b, ignore_options=IGNORE)]
    slow = [c for c in verdicts if c.verdict == "slower"]
    fabric = [c for c in slow if "fabric" in c.hint]
    ratios = [c.changes["samples_per_s"].ratio for c in verdicts if "samples_per_s" in c.changes]
    return {"comparisons": len(verdicts), "slower": len(slow), "fabric": len(fabric),
            "throughput": float(np.median(ratios)) if ratios else float("nan")}


def tally(pairs: list[tuple[pd.DataFrame, pd.DataFrame]]) -> dict:
    """Verdicts over the pairs: with both windows, throughput alone, and per metric."""
    verdicts, alone, moved, metrics = [], [], 0, 0
    for a, b in pairs:
        for c in compare.compare(a, b, ignore_options=IGNORE):
            verdicts.append(c.verdict)
            alone.append(c.changes["samples_per_s"].moved if "samples_per_s" in c.changes
                         else "")
            moved += sum(bool(ch.moved) for ch in c.changes.values())
            metrics += len(c.changes)
    n = len(verdicts)
    return {"comparisons": n,
            # a verdict it cannot back is not given (compare.UNMEASURED): not an alarm
            "false_alarms": sum(v in ("slower", "faster") for v in verdicts),
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
    FIGURES[name] = {"comparisons": n, "false_alarms": t["false_alarms"],
                     "false_alarm_rate": round(t["false_alarms"] / n, 4) if n else None,
                     "verdicts": t["verdicts"]}
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
    p.add_argument("--keep", type=Path, help="keep the sweeps in this directory (and reuse "
                   "those it holds)")
    p.add_argument("--delays", default="", help="comm_delay_ms values to detect, e.g. 1,2,5")
    p.add_argument("--rounds", type=int, default=6, help="rounds of a clean sweep and one "
                   "per delay")
    args = p.parse_args(argv)
    if args.synthetic:
        report(f"synthetic ({args.synthetic} pairs)", synthetic(args.synthetic))
    if args.sweeps >= 2 or args.delays:
        out = args.keep or Path(tempfile.mkdtemp(prefix="orch-false-alarms-"))
        try:
            real(out, args)
        finally:
            if args.keep is None:
                shutil.rmtree(out, ignore_errors=True)
    record.write("compare_false_alarms", summary(FIGURES), FIGURES)
    return 0


def summary(figures: dict[str, dict]) -> str:
    """One line: each tally's false-alarm rate, and each delay's detections."""
    parts = []
    for name, f in figures.items():
        if "false_alarm_rate" in f and f["false_alarm_rate"] is not None:
            parts.append(f"{name}: {f['false_alarm_rate']:.1%} false alarms")
        elif "slower" in f:
            parts.append(f"{name}: {f['slower']}/{f['comparisons']} found slower "
                         f"({f['fabric']} naming the fabric), throughput B/A "
                         f"{f['throughput']:.2f}")
    return "; ".join(parts)


def real(out: Path, args: argparse.Namespace) -> None:
    if args.sweeps >= 2:
        identical(out, args)
    delays = [d for d in args.delays.split(",") if d]
    if delays:
        detect(out, args, delays)


def identical(out: Path, args: argparse.Namespace) -> None:
    started = time.time()
    tables = run_sweeps(out, args.sweeps, args.iters, args.repeats)
    pairs = list(itertools.combinations(tables, 2))
    report(f"real, sweep against sweep ({args.sweeps} sweeps of {args.repeats} run(s), "
           f"{len(pairs)} pairs, {time.time() - started:.0f} s)", tally(pairs))
    report(f"real, each sweep against the {args.sweeps - 1} others together",
           against_history(tables))
    diagnose(tables)


def detect(out: Path, args: argparse.Namespace, delays: list[str]) -> None:
    """``--rounds`` rounds of a clean sweep then one sweep per delay, so that clean and
    delayed runs see the same load over time; each delayed sweep compared with the rounds'
    clean sweeps together, and with its round's clean sweep alone."""
    clean, delayed = [], {d: [] for d in delays}
    for r in range(args.rounds):
        clean += run_sweeps(out, 1, args.iters, args.repeats, f"round{r}-clean")
        for d in delays:
            delayed[d] += run_sweeps(out, 1, args.iters, args.repeats, f"round{r}-delay{d}",
                                     (f"comm_delay_ms={d}",))
    report(f"real, each of {args.rounds} interleaved clean sweeps against the others",
           against_history(clean))
    history = pd.concat(clean, ignore_index=True)
    for d in delays:
        together = found([(history, b) for b in delayed[d]])
        alone = found(list(zip(clean, delayed[d], strict=True)))
        FIGURES[f"comm_delay_ms={d} against the clean sweeps"] = {
            k: together[k] for k in ("comparisons", "slower", "fabric", "throughput")}
        print(f"comm_delay_ms={d} (throughput B/A {together['throughput']:.2f}): against the "
              f"clean sweeps together {together['slower']}/{together['comparisons']} slower "
              f"({together['fabric']} naming the fabric); against its round's clean sweep "
              f"{alone['slower']}/{alone['comparisons']} ({alone['fabric']})", flush=True)


if __name__ == "__main__":
    sys.exit(main())
