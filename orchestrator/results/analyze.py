"""Analyze: per-run throughput, phase statistics, speedup and scaling efficiency.

Definitions (docs/measurements.md, from the source papers):
- Throughput is the *job's* samples/s over the measured window: all ranks' measured samples
  divided by the longest rank's measured wall time (from the start of its first measured
  iteration to the end of its last), each on its own clock so node clock skew cannot distort it.
- Its spread (``samples_per_s_std``) is the standard deviation of the per-iteration global rate:
  the global batch of iteration k over the slowest rank's time for k.
- The compute rate (``samples_per_s_compute``) is NVIDIA DeepLearningExamples' ``compute_ips``
  (``samples_per_s`` is their ``total_ips``): samples/s without waiting for input,
  ``samples_per_s`` times the breakdown window's sum over iterations of the slowest rank's
  ``t_iter`` over that of its ``t_iter - t_io``. The input share is measured where phases are
  timed (the breakdown window) and applied to the run's reported rate (the native window's
  where it has one), so the compute rate is never below ``samples_per_s``, equal where no time
  went to input; the phase timers' own cost, which a breakdown window's rate includes, is not
  mistaken for compute. ``t_h2d`` stays in compute: orch copies each batch as its own
  synchronous step (no prefetcher overlaps it, which is why DLE's data time holds the copy),
  and the model's ``t_gpu`` counts it. None without a breakdown window or without ``t_io``.
- Phase means and standard deviations are over every measured (rank, iteration).
- Speedup S(N) = throughput(N) / throughput(baseline) of the same configuration, the baseline
  being its run(s) with the fewest ranks (the papers' one-GPU run: 1 node x 1 task when the
  sweep has it, else the 1-node run); efficiency = S(N) / (ranks(N) / ranks(baseline)).
  Repeats of the baseline are averaged; ``baseline_ranks`` names it in every row.

Two windows per run (protocol.WINDOWS): throughput (samples/s, hence speedup and
efficiency) comes from the *native* window, where the framework ran its own step with only a
wall clock around it; where a run has none (older logs, a mode without one), from the
breakdown window, and ``throughput_window`` says which (``throughput_from`` in words, and
``epoch steps`` for an epoch run, whose native window is its epochs' training steps). Phases
and ``t_iter`` come from the breakdown window; ``t_iter_native`` is the native window's mean
iteration, ``instrumentation_overhead`` = t_iter / t_iter_native - 1 (what orch's phase timers
cost), ``phase_gap`` = t_iter - the sum of the phases (time the phases do not account for;
shown, not hidden). ``t_comm_hidden`` = t_comm_total - t_comm where the total is seen.

Invariants checked on every run (:func:`add_invariants`, column ``invariant_violations``):
exposed communication never exceeds total communication in any measured iteration (within
:data:`TIMER_TOLERANCE`), hence hidden >= 0; a run of one process that exchanges gradients
communicates nothing (one worker of a parameter-server mode talks to its servers: workers and
servers count, :func:`exchanging`); a run without ``t_comm_total`` says why (its footer's
``comm_total_reason``).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import protocol
from ..protocol import PHASES
from ..spec.api import group_names

# Timer resolution allowed when comparing two measured intervals (exposed vs total
# communication, communication vs zero): perf_counter reads in ns, the intervals are taken
# around different calls; 10 µs is far below any all-reduce and far above rounding.
TIMER_TOLERANCE = 1e-5

# What makes two runs "the same configuration" apart from their size (nodes x tasks per node:
# ranks per node is a size dimension, so 1, 2, 4 ranks on one node and 8 on 4 nodes scale from
# the same 1-rank baseline): the Run fields marked GROUP (spec.api).
GROUP_KEYS = group_names()


# Every column run_metrics can fill: a run with no measured iteration has them all as None.
METRICS = ("iterations_measured", "samples_per_s", "samples_per_s_std", "samples_per_s_compute",
           "t_iter", "t_iter_std", "hosts", "distinct_hosts", *PHASES,
           *(f"{p}_std" for p in PHASES), "t_comm_total", "t_unaccounted", "throughput_window",
           "t_iter_native", "t_iter_native_std",
           "instrumentation_overhead", "phase_gap", "t_comm_hidden", "comm_exceeds_total")


# The iteration columns run_metrics reads (``window``: protocol.WINDOWS).
ITER_COLUMNS = ("rank", "host", "iter", "warmup_iter", "t_start", "t_iter", "samples",
                *PHASES, "t_comm_total", "window")


def split_windows(iters: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(native, breakdown) rows of one run; a table without ``window`` is all breakdown."""
    if "window" not in iters.columns:
        return iters.iloc[0:0], iters
    native = (iters["window"] == protocol.WINDOW_NATIVE).to_numpy()
    return iters[native], iters[~native]


def run_metrics(iters: pd.DataFrame) -> dict:
    """Throughput from the native window (else the breakdown window), phases, ``t_iter``,
    overhead and phase gap from the breakdown window (see the module docstring)."""
    cols = _columns(iters)
    native = _is_native(iters)
    out = _window_metrics(cols, ~native)
    out["throughput_window"] = protocol.WINDOW_BREAKDOWN if out["samples_per_s"] is not None \
        else None
    out.update(t_iter_native=None, t_iter_native_std=None, instrumentation_overhead=None)
    if (native & ~cols["warmup_iter"]).any():
        rates = _window_metrics(cols, native, phases=False)
        if out["samples_per_s_compute"] is not None and rates["samples_per_s"] is not None:
            # the breakdown window's input share, applied to the rate reported (docstring)
            out["samples_per_s_compute"] *= rates["samples_per_s"] / out["samples_per_s"]
        out.update(samples_per_s=rates["samples_per_s"],
                   samples_per_s_std=rates["samples_per_s_std"],
                   throughput_window=protocol.WINDOW_NATIVE if rates["samples_per_s"]
                   is not None else out["throughput_window"],
                   t_iter_native=rates["t_iter"], t_iter_native_std=rates["t_iter_std"])
        if out["t_iter"] is not None and rates["t_iter"]:
            out["instrumentation_overhead"] = out["t_iter"] / rates["t_iter"] - 1
        if out["iterations_measured"] == 0:  # a native window alone still has a throughput
            for key in ("iterations_measured", "hosts", "distinct_hosts"):
                out[key] = rates[key]
    return out


def window_metrics(iters: pd.DataFrame) -> dict:
    """Throughput and phase statistics of one window of a run from its iteration rows.

    A mode that moves no samples (the all-reduce micro-benchmark) has no throughput:
    ``samples_per_s`` and its spread are None, never 0.
    """
    return _window_metrics(_columns(iters), np.ones(len(iters), dtype=bool))


# The metrics are computed on numpy arrays, not on pandas objects: a big merge computes them for
# hundreds of runs, and pandas' per-call overhead (boolean indexing of frames, Series
# reductions) was most of it. _mean and _std are pandas' Series.mean/std (skipna) operation for
# operation (nanops: NaN filled with 0 in place, pairwise sums over the same array), so every
# figure is the one pandas gives, bit for bit.

def _columns(iters: pd.DataFrame) -> dict:
    """The columns run_metrics reads, as numpy arrays; ``host`` as codes (-1: none) into
    ``host_names``. Works on plain and categorical (dictionary) string columns alike."""
    cols = {c: iters[c].to_numpy() for c in ("rank", "iter", "t_start", "t_iter", "samples")}
    for c in (*PHASES, "t_comm_total"):
        cols[c] = iters[c].to_numpy(dtype=np.float64, na_value=np.nan)
    cols["warmup_iter"] = iters["warmup_iter"].to_numpy(dtype=bool)
    codes, names = pd.factorize(iters["host"])
    cols["host"], cols["host_names"] = codes, np.asarray(names, dtype=object)
    return cols


def _is_native(iters: pd.DataFrame) -> np.ndarray:
    if "window" not in iters.columns:
        return np.zeros(len(iters), dtype=bool)
    return (iters["window"] == protocol.WINDOW_NATIVE).to_numpy(dtype=bool)


def _mean(x: np.ndarray) -> float:
    """``pd.Series(x).mean()``."""
    x, count = _nan_as_zero(x)
    return float(x.sum(dtype=np.float64) / count) if count > 0 else float("nan")


def _std(x: np.ndarray) -> float:
    """``pd.Series(x).std(ddof=1)`` (nanops.nanvar's two passes, then the square root)."""
    nan = np.isnan(x) if x.dtype.kind == "f" else None
    x, count = _nan_as_zero(x, nan)
    if count <= 1:
        return float("nan")
    sqr = (x.sum(dtype=np.float64) / count - x) ** 2
    if nan is not None:
        np.putmask(sqr, nan, 0)
    return float(np.sqrt(sqr.sum(dtype=np.float64) / (count - 1)))


def _nan_as_zero(x: np.ndarray, nan: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    if x.dtype.kind != "f":
        return x.astype(np.float64), float(len(x))
    nan = np.isnan(x) if nan is None else nan
    n = int(nan.sum())
    if n:
        x = x.copy()
        np.putmask(x, nan, 0)
    return x, float(len(x) - n)


def _unique(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(x, return_inverse=True)``; for integers of a small range (ranks, iteration
    numbers) by counting, not sorting."""
    if x.dtype.kind not in "iu" or not len(x):
        return np.unique(x, return_inverse=True)
    low = x.min()
    span = int(x.max()) - int(low) + 1
    if span > 4 * len(x) + 1024:
        return np.unique(x, return_inverse=True)
    present = np.bincount(x - low, minlength=span) > 0
    return np.flatnonzero(present) + low, (np.cumsum(present) - 1)[x - low]


def _window_metrics(cols: dict, rows: np.ndarray, phases: bool = True) -> dict:
    """window_metrics of the rows ``rows`` (a mask) of ``cols``; ``phases=False``: the phase
    statistics are left out (None), for a window that has none."""
    keep = rows & ~cols["warmup_iter"]
    if not keep.any():
        return {**dict.fromkeys(METRICS), "iterations_measured": 0}
    m = {k: v[keep] for k, v in cols.items() if k != "host_names"}
    n = len(m["t_iter"])
    # Per-rank and per-iteration min/max/sum/count with numpy (exact, like pandas' groupby,
    # which costs ~40 ms a run in named aggregations: most of a big merge).
    t_start, t_iter = m["t_start"], m["t_iter"]
    ranks, rank_of = _unique(m["rank"])
    first = np.full(len(ranks), np.inf)
    last = np.full(len(ranks), -np.inf)
    np.minimum.at(first, rank_of, t_start)
    np.maximum.at(last, rank_of, t_start + t_iter)
    window = float((last - first).max())
    samples = int(_nan_as_zero(m["samples"])[0].sum() if m["samples"].dtype.kind == "f"
                  else m["samples"].sum())
    iter_ids, iter_of = _unique(m["iter"])
    iter_samples = np.zeros(len(iter_ids), dtype=np.int64)
    slowest = np.full(len(iter_ids), -np.inf)
    np.add.at(iter_samples, iter_of, m["samples"])
    np.maximum.at(slowest, iter_of, t_iter)
    rates = iter_samples / slowest
    moved = samples > 0
    hosts = np.unique(m["host"])
    hosts = hosts[hosts >= 0]
    out = {
        "iterations_measured": int(np.bincount(rank_of).min()),
        "samples_per_s": samples / window if window > 0 and moved else None,
        "samples_per_s_std": (_std(rates) if len(rates) > 1 else 0.0) if moved else None,
        "t_iter": _mean(t_iter),
        "t_iter_std": _std(t_iter) if n > 1 else 0.0,
        "hosts": ",".join(sorted(cols["host_names"][hosts])),
        "distinct_hosts": len(hosts),
    }
    if not phases:
        return {**dict.fromkeys(METRICS), **out}
    for p in PHASES:
        out[p] = _mean(m[p])
        out[f"{p}_std"] = _std(m[p]) if n > 1 else 0.0
    out["samples_per_s_compute"] = _compute_rate(m, iter_of, slowest, out["samples_per_s"])
    seen = ~np.isnan(m["t_comm_total"])
    out["t_comm_total"] = _mean(m["t_comm_total"][seen]) if seen.any() else None
    # Phases should account for the iteration; the rest is loop overhead we did not time.
    out["t_unaccounted"] = out["t_iter"] - sum(out[p] for p in PHASES)
    out["phase_gap"] = out["t_unaccounted"]
    out["t_comm_hidden"] = (out["t_comm_total"] - out["t_comm"]
                            if out["t_comm_total"] is not None else None)
    out["comm_exceeds_total"] = int(
        (m["t_comm"][seen] > m["t_comm_total"][seen] + TIMER_TOLERANCE).sum())
    return out


def _compute_rate(m: dict, iter_of: np.ndarray, slowest: np.ndarray,
                  rate: float | None) -> float | None:
    """DLE's ``compute_ips`` of a window's measured rows ``m`` whose rate is ``rate`` (module
    docstring): the rate times the sum of ``slowest`` (per iteration, the slowest rank's
    ``t_iter``) over that of the slowest rank's ``t_iter - t_io`` (a synchronous step waits for
    its slowest rank). None where no sample moved or a row has no ``t_io`` (a partial figure
    would pass for a whole one)."""
    io = m["t_io"]
    if rate is None or np.isnan(io).any():
        return None
    busy = np.full(len(slowest), -np.inf)
    np.maximum.at(busy, iter_of, m["t_iter"] - io)
    return rate * float(slowest.sum()) / float(busy.sum()) if busy.sum() > 0 else None


def add_scaling(runs: pd.DataFrame) -> pd.DataFrame:
    """Speedup and efficiency against the smallest run (fewest ranks) of each configuration.

    The baseline is the configuration's run(s) with the fewest ranks; if none of them
    completed with a throughput, the configuration has no speedup (a failed 1-rank run is not
    replaced by a bigger one). ``baseline_ranks`` says which size each speedup is relative to.
    """
    runs = runs.copy()
    runs["speedup"] = None
    runs["efficiency"] = None
    runs["baseline_ranks"] = None
    if runs.empty:
        return runs
    # the two columns throughput_from reads: all of them cost a dict of every column per run
    read = runs[[c for c in ("throughput_window", "epochs") if c in runs.columns]]
    runs["throughput_from"] = [throughput_from(r) for r in read.to_dict("records")]
    # str() each value: pandas' string dtype would keep None (in-memory data) as missing.
    keys = [k for k in GROUP_KEYS if k in runs.columns]
    key = runs[keys].apply(lambda row: "|".join(map(str, row)), axis=1)
    # numpy arrays, by position: indexing the frame per group cost ~10 ms a group.
    ranks = runs["ranks"].to_numpy()
    completed = (runs["state"] == "COMPLETED").to_numpy(dtype=bool)
    rate = runs["samples_per_s"].to_numpy(dtype=np.float64, na_value=np.nan)
    speedup, efficiency, baseline = ([None] * len(runs) for _ in range(3))
    for idx in runs.groupby(key).indices.values():
        smallest = idx[ranks[idx] == ranks[idx].min()]
        base = smallest[completed[smallest] & (rate[smallest] > 0)]  # NaN > 0 is False
        if not len(base):
            continue
        base_rate = _mean(rate[base])
        base_ranks = float(ranks[base[0]])
        for i in idx:
            if not completed[i] or np.isnan(rate[i]):
                continue
            speedup[i] = float(rate[i]) / base_rate
            efficiency[i] = speedup[i] / (ranks[i] / base_ranks)
            baseline[i] = int(base_ranks)
    for name, values in (("speedup", speedup), ("efficiency", efficiency),
                         ("baseline_ranks", baseline)):
        runs[name] = pd.Series(values, index=runs.index, dtype=object)
    return runs


# Where a run's samples/s comes from (``throughput_from``): the native window, the breakdown
# window (a run without a native one), or the steps of an epoch run's epochs (``--epochs``):
# those are logged as its native window — the mode's own step, wall clock only, the first
# epoch's warm-up steps left out, held-out evaluation outside them — and it has no breakdown
# window, so no t_iter and no phases.
THROUGHPUT_FROM = {protocol.WINDOW_NATIVE: "native window",
                   protocol.WINDOW_BREAKDOWN: "breakdown window"}
FROM_EPOCHS = "epoch steps"


FROM_SCRIPT = "script output"  # a user's own trainer: the figures its output printed


def throughput_from(run: dict) -> str | None:
    from .. import modes

    window = run.get("throughput_window")
    if window is None or (isinstance(window, float) and np.isnan(window)):
        return None
    mode = modes.registry().get(run.get("mode"))
    if mode is not None and not mode.phases:
        return FROM_SCRIPT
    epochs = run.get("epochs")
    if epochs is not None and not pd.isna(epochs) and window == protocol.WINDOW_NATIVE:
        return FROM_EPOCHS
    return THROUGHPUT_FROM.get(window, window)


def invariants(run: dict) -> list[str]:
    """What one run's measurements contradict (module docstring), as messages; [] if none.

    ``run`` is a runs-table row: run_metrics' columns, ``ranks``, ``mode`` and the footer's
    ``comm_total_reason``. Modes that do not train (the all-reduce micro-benchmark) and runs
    with no measured breakdown iteration are not checked."""
    from .. import modes

    def num(key: str) -> float | None:
        value = run.get(key)
        return None if value is None or pd.isna(value) else float(value)

    mode = run.get("mode")
    if not run.get("iterations_measured") or num("t_comm") is None or (
            mode in modes.registry() and not modes.get(mode).trains):
        return []
    out = []
    exposed, total = num("t_comm"), num("t_comm_total")
    exceeds = int(num("comm_exceeds_total") or 0)
    if exceeds:
        out.append(f"exposed communication exceeds total in {exceeds} measured iteration(s)")
    if total is not None and total - exposed < -TIMER_TOLERANCE:
        out.append(f"hidden communication is negative ({(total - exposed) * 1e3:.3f} ms)")
    if exchanging(run) == 1:
        if exposed > TIMER_TOLERANCE or (total is not None and total > TIMER_TOLERANCE):
            seen = f"{exposed * 1e3:.3f} ms exposed" + (
                f", {total * 1e3:.3f} ms total" if total is not None else "")
            out.append(f"1-rank run reports communication ({seen})")
    elif total is None and not run.get(protocol.COMM_TOTAL_REASON):
        out.append("no t_comm_total and no comm_total_reason saying why")
    return out


def exchanging(run: dict) -> int | None:
    """How many processes of a runs-table row exchange gradients: its ranks, or for a mode
    whose servers exchange them too (``Mode.exchange_roles``), the workers and servers of its
    task table; None where the row lacks what that needs."""
    import json

    from .. import modes

    mode = modes.registry().get(run.get("mode"))
    if mode is None or mode.exchange_roles is None:
        return run.get("ranks")
    nodes, per_node, options = (run.get(k) for k in ("nodes", "tasks_per_node", "options"))
    if nodes is None or per_node is None or pd.isna(nodes) or pd.isna(per_node):
        return None
    options = json.loads(options) if isinstance(options, str) else dict(options or {})
    return mode.exchanging(int(nodes), int(per_node), options)


def add_invariants(runs: pd.DataFrame) -> pd.DataFrame:
    """``invariant_violations`` (messages joined by '; ', None when every invariant holds)
    for every run; the report and ``orch results`` show it."""
    runs = runs.copy()
    found = [invariants(row) for row in runs.to_dict("records")] if not runs.empty else []
    runs["invariant_violations"] = ["; ".join(v) if v else None for v in found]
    return runs
