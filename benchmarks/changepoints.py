"""How often does ``orch history changes`` call a change point where there is none, and how
small a shift does it find? Labelled series, replayed from recorded runs, with shifts
injected at known places; the same series read by two simpler rules side by side.

    .venv/bin/python -m benchmarks.changepoints [--trials 400] [--sweeps 0] [--seed 0]

The series (one point = one recorded sweep's level, on a log scale):

* **noisy**, this machine: each point drawn at random from the per-run levels of the
  recorded identical sweeps (``tests/fixtures/history-identical``: 21 one-run torch-ddp
  LeNet-5 sweeps on the shared 2-core development machine; ``--sweeps N`` runs N more and
  adds them), so the points have the machine's own spread and tails, in no order;
* **quiet**, a GPU: consecutive steps of the recorded 500-step H200 ResNet-18 run
  (``tests/fixtures/gpu-h200-devmetrics``), from a random step on, in their order: the
  spread (and autocorrelation) of a GPU's step, a proxy for a quiet node's sweep-to-sweep
  spread.

For each, ``--trials`` series of ``n`` points a side, the second side shifted by 0 (no
change: every change point is a false alert), 2, 5 or 10 %, or by two standard deviations of
one point. A shift is **found** when a change point lies within 2 points of where it was
injected (at two standard deviations the place itself is found about 6 times in 10: the
information in 10 points a side); every other change point is a **false alert**, counted per
series point. The three rules, each at its default:

* ``orch`` — ``orch history changes`` (:mod:`orchestrator.history.changes`: Apache Otava's
  method, p ≤ 0.005, shift ≥ 2 %, 3 points a level);
* ``t-test`` — a plain t-test at every point: the 5 points before it against it and the 4
  after (Welch, p < 0.05), an alert wherever it passes (Mozilla Perfherder's rule, its
  window and threshold made plain);
* ``z > 5`` — Conbench's: a point whose distance from the mean of the 10 before it is more
  than 5 of their standard deviations.

Reported: recall and false alerts per point for each rule and shift, at 10 points a side
(20 where said), and for ``orch`` the smallest shift found 90 % of the time at 5, 10, 20 and
40 points a side. Nothing is asserted: the figures are written to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import record  # noqa: E402
from orchestrator.history import changes, compare, samples  # noqa: E402
from orchestrator.history.stats import t_cdf  # noqa: E402

NOISY = ROOT / "tests" / "fixtures" / "history-identical" / "samples.parquet"
QUIET = (ROOT / "tests" / "fixtures" / "gpu-h200-devmetrics"
         / "torch-ddp-resnet18-gpu-n1-r0-3b7ec017" / "ranks" / "rank-0.jsonl")
TOLERANCE = 2  # points between where a shift was injected and where it is found
SHIFTS = (0.0, 0.02, 0.05, 0.10)


def noisy_levels(extra: list[pd.DataFrame]) -> np.ndarray:
    """Each recorded run's level (log of its trimmed-mean throughput), centred."""
    table = pd.concat([pd.read_parquet(NOISY), *extra], ignore_index=True)
    means = compare.run_means(table[table["metric"] == "samples_per_s"], [])["mean"]
    return means.to_numpy() - means.mean()


def quiet_steps() -> np.ndarray:
    """The H200 run's measured steps in order, as log throughput, centred."""
    rows = [json.loads(line) for line in QUIET.read_text().splitlines()]
    steps = [r for r in rows if r.get("type") == "iter" and not r.get("warmup")
             and r.get("window") == "native"]
    values = np.log([r.get("samples", 64) / r["t_iter"] for r in steps])
    return values - values.mean()


def draw(source: str, pool: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    if source == "noisy":
        return rng.choice(pool, n)
    start = rng.integers(0, len(pool) - n)
    return pool[start:start + n].copy()


# --- the rules ------------------------------------------------------------------------------

def rule_orch(x: np.ndarray) -> list[int]:
    return changes.change_points(x)


def rule_ttest(x: np.ndarray, back: int = 5, ahead: int = 5, alpha: float = 0.05
               ) -> list[int]:
    out = []
    for i in range(back, len(x) - ahead + 1):
        a, b = x[i - back:i], x[i:i + ahead]
        va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
        if va + vb == 0:
            continue
        t = (b.mean() - a.mean()) / np.sqrt(va + vb)
        df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
        if 2 * t_cdf(-abs(t), df) < alpha:
            out.append(i)
    return out


def rule_zscore(x: np.ndarray, back: int = 10, threshold: float = 5.0) -> list[int]:
    out = []
    for i in range(back, len(x)):
        ref = x[i - back:i]
        sd = ref.std(ddof=1)
        if sd > 0 and abs(x[i] - ref.mean()) > threshold * sd:
            out.append(i)
    return out


RULES = {"orch": rule_orch, "t-test": rule_ttest, "z > 5": rule_zscore}


def tally(rule, source: str, pool: np.ndarray, side: int, shift: float, trials: int,
          rng: np.random.Generator) -> tuple[float, float]:
    """(recall, false alerts per point) of a rule over ``trials`` series (``shift``: a
    fraction; 0, no shift, recall nan)."""
    found = false = 0
    for _ in range(trials):
        x = draw(source, pool, 2 * side, rng)
        x[side:] += np.log1p(shift)
        points = rule(x)
        near = [p for p in points if abs(p - side) <= TOLERANCE] if shift else []
        found += bool(near)
        false += len(points) - len(near)
    return (found / trials if shift else float("nan")), false / (trials * 2 * side)


def smallest_found(source: str, pool: np.ndarray, side: int, trials: int,
                   rng: np.random.Generator) -> float:
    """The smallest shift (a fraction, on a grid) that ``orch`` finds 90 % of the time."""
    grid = np.unique(np.round(np.geomspace(0.005, 4.0, 40), 4))
    lo, hi = 0, len(grid) - 1
    if tally(rule_orch, source, pool, side, grid[hi], trials, rng)[0] < 0.9:
        return float("nan")
    while lo < hi:  # recall rises with the shift: bisect the grid
        mid = (lo + hi) // 2
        if tally(rule_orch, source, pool, side, grid[mid], trials, rng)[0] >= 0.9:
            hi = mid
        else:
            lo = mid + 1
    return float(grid[lo])


def run_sweeps(count: int) -> list[pd.DataFrame]:
    """``count`` new identical one-run sweeps on this machine, as the fixture's were."""
    import subprocess

    from orchestrator.cli.resultset import load_result_set

    out, tables = Path(tempfile.mkdtemp(prefix="orch-cp-")), []
    for i in range(count):
        target = out / f"sweep-{i}"
        subprocess.run([sys.executable, "-m", "orchestrator", "sweep", "--model", "lenet5",
                        "--nodes", "2", "--iters", "10", "--warmup", "2", "--out",
                        str(target)], cwd=ROOT, check=True, capture_output=True)
        runs, its, _ = load_result_set(target)
        t = samples.samples(runs, its)
        tables.append(t.assign(run_id=f"new-{i}/" + t["run_id"]))
        print(f"sweep {i + 1}/{count}: {runs['samples_per_s'].iloc[0]:,.0f} samples/s",
              flush=True)
    return tables


def _pct(value: float) -> str:
    return "–" if value != value else f"{value * 100:.1f} %"


def measure(source: str, pool: np.ndarray, trials: int, rng: np.random.Generator
            ) -> tuple[dict, list[list[str]]]:
    """The figures of one source: per rule and shift, recall and false alerts."""
    sigma = float(pool.std(ddof=1))
    shifts = [*SHIFTS, ("2σ", float(np.expm1(2 * sigma)))]
    figures, rows = {"sigma": sigma}, []
    for side in (10, 20):
        for shift in shifts:
            name, size = shift if isinstance(shift, tuple) else (f"{shift:.0%}", shift)
            if side == 20 and name not in ("0%", "2σ"):
                continue
            cells = [f"{source}, {side} a side", f"{name} ({size * 100:.3g} %)"]
            for rule_name, rule in RULES.items():
                recall, false = tally(rule, source, pool, side, size, trials, rng)
                figures[f"{rule_name}/{side}/{name}"] = {"recall": recall,
                                                          "false_per_point": false}
                cells += [_pct(recall), _pct(false)]
            rows.append(cells)
            print(" | ".join(cells), flush=True)
    return figures, rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=400, help="series per figure")
    ap.add_argument("--sweeps", type=int, default=0, help="new sweeps to add to the noisy pool")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    pools = {"noisy": noisy_levels(run_sweeps(args.sweeps) if args.sweeps else []),
             "quiet": quiet_steps()}
    figures: dict = {}
    rows: list[list[str]] = []
    smallest_rows = []
    for source, pool in pools.items():
        figures[source], found = measure(source, pool, args.trials, rng)
        rows += found
        sizes = {side: smallest_found(source, pool, side, args.trials // 2, rng)
                 for side in (5, 10, 20, 40)}
        figures[source]["smallest_found_90"] = {str(k): v for k, v in sizes.items()}
        smallest_rows.append([f"{source} (σ {figures[source]['sigma'] * 100:.1f} % a "
                              f"point, {len(pool)} recorded)",
                              *(_pct(sizes[s]) for s in (5, 10, 20, 40))])
        print(smallest_rows[-1], flush=True)
    tables = [
        record.Table(title="Recall (a change point within 2 points of the shift) and false "
                     "alerts per series point, each rule at its default",
                     columns=["series", "shift", *(f"{r} {w}" for r in RULES
                                                   for w in ("recall", "false/point"))],
                     rows=rows),
        record.Table(title="The smallest shift orch history changes finds 90 % of the time",
                     columns=["series", "5 a side", "10 a side", "20 a side", "40 a side"],
                     rows=smallest_rows)]
    summary = summarize(figures)
    print(summary)
    record.write("changepoints", summary, figures, tables=tables, notes=NOTES)


def summarize(figures: dict) -> str:
    """The result's one line: each figure as noisy / quiet."""
    def both(key: str, field: str) -> str:
        return " / ".join(_pct(figures[src][key][field]) for src in ("noisy", "quiet"))

    def smallest(side: str) -> str:
        return " / ".join(_pct(figures[src]["smallest_found_90"][side])
                          for src in ("noisy", "quiet"))

    sigma = " / ".join(f"{figures[src]['sigma'] * 100:.1f} %" for src in ("noisy", "quiet"))
    return (f"noisy / quiet series (σ of a point {sigma}): false alerts per point, orch "
            f"history changes {both('orch/10/0%', 'false_per_point')}, plain t-test "
            f"{both('t-test/10/0%', 'false_per_point')}, z > 5 "
            f"{both('z > 5/10/0%', 'false_per_point')} (goal ≤ 1 %); a 2σ shift found "
            f"{both('orch/10/2σ', 'recall')} with 10 points a side, "
            f"{both('orch/20/2σ', 'recall')} with 20 (goal ≥ 90 %); the smallest shift found "
            f"90 % of the time: {smallest('10')} with 10 a side, {smallest('20')} with 20")


NOTES = """\
A point of the noisy series is one recorded sweep's level drawn at random from this
machine's identical sweeps: their spread is the machine's load (another job's, another
moment's), heavy-tailed and large, so only shifts of that order can be told from it whatever
the rule. The quiet series are consecutive steps of one H200 run, in order: closer to what a
dedicated GPU node's nightly sweeps give, though sweep-to-sweep spread on a real cluster
(other nodes, other days) is usually larger than one run's step-to-step spread. A change
point found 3 or more points away from the injected shift counts as a false alert, not as
found: at two standard deviations with 10 points a side, the place is uncertain by about 2
points (the information in the points, for any rule)."""


if __name__ == "__main__":
    main()
