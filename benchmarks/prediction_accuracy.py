"""Prediction accuracy: are orch's stated predictions right where they claim to be?

For each mode, one real sweep on the local site (``orch sweep --site local --nodes 1,2,4[,8]``,
as a user runs it: the pre-flight, then the scales smallest first, each larger run's
prediction stated in ``predictions.jsonl`` before its job starts; the local site pins each
virtual node's ranks to cores of their own where the machine has them). The runs of more than
2 ranks are scored against the prediction made from the 2-rank run (the latest one stated
from 1 or 2 ranks: what a user has before spending on the large runs), the 2-rank run against
the one from 1 rank.

Per mode it prints, for valid and for flagged predictions apart (a flagged prediction said
before its run why it may not hold: orchestrator.model.validity): how many, the median
absolute ``t_iter`` error, and the coverage of the predicted intervals (the share of measured
``t_iter`` inside them) against their nominal level. The goal (on a machine whose nodes get
cores of their own): median |error| ≤ 10 % and coverage within 10 points of nominal.

Run: ``.venv/bin/python -m benchmarks.prediction_accuracy [--modes torch-ddp,horovod,mpi-ssgd,
tf-allreduce --nodes 1,2,4,8 --iters 30 --out /tmp/prediction-accuracy --site local]``
(``--site testcluster``: the same on the test Slurm cluster). ``--nodes`` defaults
to 1, 2, 4 and 8 where the machine has 8 physical cores (each node one rank, one core), else
up to 4.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from benchmarks import record

ROOT = Path(__file__).resolve().parents[1]
MODES = ("torch-ddp", "horovod", "mpi-ssgd", "tf-allreduce")
GOAL_ERROR, GOAL_COVERAGE = 0.10, 0.10
SMALL = 2  # predictions are scored from runs of at most this many ranks


def physical_cores() -> int:
    """The physical cores this process may run on (hyper-threads counted once)."""
    from orchestrator.rankside import cores

    return cores.this_process().physical


def default_nodes() -> str:
    return "1,2,4,8" if physical_cores() >= 8 else "1,2,4"


def sweep(mode: str, nodes: str, iters: int, warmup: int, out: Path, store: Path,
          site: str = "local") -> str | None:
    """One mode's real sweep with its pre-flight (None, or why it failed)."""
    if (out / "results" / "runs.parquet").is_file() and (out / "predictions.jsonl").is_file():
        return None  # kept from an earlier call
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "sweep", "--site", site, "--mode", mode,
         "--model", "lenet5", "--batch-size", "32", "--nodes", nodes, "--iters", str(iters),
         "--warmup", str(warmup), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, "ORCH_NETBENCH_DIR":
                                                       str(store)})
    for line in proc.stderr.splitlines():
        if line.startswith(("pre-flight", "Scorecard", "Flagged", "  ")) and "job" not in line:
            print(f"  {mode}: {line.strip()}", flush=True)
    if proc.returncode != 0 and not (out / "predictions.jsonl").is_file():
        return (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
    return None


def scored(out: Path) -> pd.DataFrame:
    """The sweep's runs scored against the latest prediction stated from at most SMALL ranks
    before each run started (orchestrator.model.ledger)."""
    from orchestrator.model import ledger

    preds = [p for p in ledger.load(out / ledger.FILE) if int(p.get("from_workers", 0)) <= SMALL]
    runs = pd.read_parquet(out / "results" / "runs.parquet")
    started = {p["run_id"]: ledger.run_started_at(out / p["run_id"]) for p in preds}
    return ledger.scorecard_frame(runs, preds, started)


def summarize(frame: pd.DataFrame) -> dict:
    """Count, median |error| and coverage (inside/known) of the scored rows."""
    done = frame[frame["error_t_iter"].notna()]
    inside = done["inside"].dropna().astype(bool)
    return {"runs": len(done),
            "median_abs_error": (float(done["error_t_iter"].astype(float).abs().median())
                                 if len(done) else None),
            "inside": int(inside.sum()), "with_interval": len(inside)}


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def _coverage(s: dict, level: float | None) -> str:
    """``k of n inside = p % (nominal L %)``, and below 10 that n cannot judge calibration."""
    from orchestrator.model import interval

    text = interval.coverage_text(s["inside"], s["with_interval"], level)
    return text.removeprefix("interval coverage ") or "–"


def row(mode: str, group: str, s: dict, level: float | None) -> list[str]:
    return [mode, group, str(s["runs"]), _pct(s["median_abs_error"]), _coverage(s, level)]


def run_row(mode: str, r: pd.Series) -> list[str]:
    """One scored run: its prediction with the interval, the measurement, the error, and
    'valid' or its flags."""
    band = (f" ({r['predicted_t_iter_low'] * 1e3:.1f}–{r['predicted_t_iter_high'] * 1e3:.1f})"
            if pd.notna(r["predicted_t_iter_low"]) else "")
    return [mode, str(r["workers"]), str(r["from_workers"]),
            f"{r['predicted_t_iter'] * 1e3:.1f}{band}", f"{r['measured_t_iter'] * 1e3:.1f}",
            f"{r['error_t_iter']:+.1%}", str(r["flags"]) or "valid"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--nodes", default=default_nodes())
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("/tmp/prediction-accuracy"))
    ap.add_argument("--site", default="local", help="local, or a Slurm site (testcluster)")
    a = ap.parse_args()
    store = a.out / "netbench-store"
    rows, figures, failures, frames, each = [], {}, [], [], []
    start = time.time()
    for mode in a.modes.split(","):
        why = sweep(mode, a.nodes, a.iters, a.warmup, a.out / mode, store, a.site)
        if why is not None:
            failures.append(f"{mode}: {why}")
            print(f"{mode}: failed: {why}", flush=True)
            continue
        frame = scored(a.out / mode)
        frames.append(frame)
        level = frame["level"].dropna().iloc[0] if frame["level"].notna().any() else None
        for group, part in (("valid", frame[frame["valid"]]),
                            ("flagged", frame[~frame["valid"]])):
            s = summarize(part)
            rows.append(row(mode, group, s, level))
            figures[f"{mode}/{group}/median_abs_error"] = s["median_abs_error"]
            figures[f"{mode}/{group}/coverage"] = (s["inside"] / s["with_interval"]
                                                   if s["with_interval"] else None)
            print(" | ".join(rows[-1]), flush=True)
        for _, r in frame[frame["error_t_iter"].notna()].sort_values("workers").iterrows():
            each.append(run_row(mode, r))
            if not r["valid"]:
                print(f"    {mode} {r['workers']} ranks: {r['flags']}", flush=True)
    from orchestrator.model import interval

    every = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    valid = summarize(every[every["valid"]]) if len(every) else summarize(every)
    flagged = summarize(every[~every["valid"]]) if len(every) else valid
    figures.update({"valid/median_abs_error": valid["median_abs_error"],
                    "flagged/median_abs_error": flagged["median_abs_error"],
                    "valid/runs": valid["runs"], "flagged/runs": flagged["runs"],
                    "goal_error": GOAL_ERROR, "cores": physical_cores(),
                    "minutes": round((time.time() - start) / 60, 1)})
    summary = (f"valid: {valid['runs']} run(s), median |error| {_pct(valid['median_abs_error'])}"
               f", coverage {_coverage(valid, interval.LEVEL)}; flagged: "
               f"{flagged['runs']} run(s), median |error| {_pct(flagged['median_abs_error'])}, "
               f"coverage {_coverage(flagged, interval.LEVEL)} (site {a.site}, nodes "
               f"{a.nodes}, {physical_cores()} cores here)")
    print(summary)
    table = record.Table(columns=["mode", "predictions", "runs", "median abs. error",
                                  "interval coverage"], rows=rows)
    runs = record.Table(title="Each scored run", columns=[
        "mode", "ranks", "from", "predicted ms (interval)", "measured ms", "error", "check"],
        rows=each)
    record.write("prediction_accuracy", summary, figures, tables=[table, runs],
                 notes="\n".join(f"Failed: {f}" for f in failures))

if __name__ == "__main__":
    main()
