"""Analyze: per-run throughput, phase statistics, speedup and scaling efficiency.

Definitions (DESIGN.md, from the source papers):
- Throughput is the *job's* samples/s over the measured window: all ranks' measured samples
  divided by the longest rank's measured wall time (from the start of its first measured
  iteration to the end of its last), each on its own clock so node clock skew cannot distort it.
- Its spread (``samples_per_s_std``) is the standard deviation of the per-iteration global rate:
  the global batch of iteration k over the slowest rank's time for k.
- Phase means and standard deviations are over every measured (rank, iteration).
- Speedup S(N) = throughput(N) / throughput(baseline) of the same configuration, the baseline
  being its run(s) with the fewest ranks (the papers' one-GPU run: 1 node x 1 task when the
  sweep has it, else the 1-node run); efficiency = S(N) / (ranks(N) / ranks(baseline)).
  Repeats of the baseline are averaged; ``baseline_ranks`` names it in every row.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .protocol import PHASES

# What makes two runs "the same configuration" apart from their size (nodes x tasks per node:
# ranks per node is a size dimension, so 1, 2, 4 ranks on one node and 8 on 4 nodes scale from
# the same 1-rank baseline).
GROUP_KEYS = ("site", "partition", "mode", "model", "dataset", "batch_size", "launcher",
              "options", "data", "prefetch", "epochs", "target_accuracy")


# Every column run_metrics can fill: a run with no measured iteration has them all as None.
METRICS = ("iterations_measured", "samples_per_s", "samples_per_s_std", "t_iter", "t_iter_std",
           "hosts", "distinct_hosts", *PHASES, *(f"{p}_std" for p in PHASES), "t_comm_total",
           "t_unaccounted")


# The iteration columns run_metrics reads.
ITER_COLUMNS = ("rank", "host", "iter", "window", "warmup_iter", "t_start", "t_iter", "samples",
                *PHASES, "t_comm_total")


def run_metrics(iters: pd.DataFrame) -> dict:
    """Throughput and phase statistics of one run from its measured iteration rows.

    A mode that moves no samples (the all-reduce micro-benchmark) has no throughput:
    ``samples_per_s`` and its spread are None, never 0.
    """
    m = iters[~iters["warmup_iter"]] if not iters.empty else iters
    if m.empty:
        return {**dict.fromkeys(METRICS), "iterations_measured": 0}
    # Per-rank and per-iteration min/max/sum/count with numpy (exact, like pandas' groupby,
    # which costs ~40 ms a run in named aggregations: most of a big merge).
    t_start, t_iter = m["t_start"].to_numpy(), m["t_iter"].to_numpy()
    ranks, rank_of = np.unique(m["rank"].to_numpy(), return_inverse=True)
    first = np.full(len(ranks), np.inf)
    last = np.full(len(ranks), -np.inf)
    np.minimum.at(first, rank_of, t_start)
    np.maximum.at(last, rank_of, t_start + t_iter)
    window = float((last - first).max())
    samples = int(m["samples"].sum())
    iter_ids, iter_of = np.unique(m["iter"].to_numpy(), return_inverse=True)
    iter_samples = np.zeros(len(iter_ids), dtype=np.int64)
    slowest = np.full(len(iter_ids), -np.inf)
    np.add.at(iter_samples, iter_of, m["samples"].to_numpy())
    np.maximum.at(slowest, iter_of, t_iter)
    rates = pd.Series(iter_samples / slowest)
    moved = samples > 0
    out = {
        "iterations_measured": int(np.bincount(rank_of).min()),
        "samples_per_s": samples / window if window > 0 and moved else None,
        "samples_per_s_std": (float(rates.std(ddof=1)) if len(rates) > 1 else 0.0) if moved
        else None,
        "t_iter": float(m["t_iter"].mean()),
        "t_iter_std": float(m["t_iter"].std(ddof=1)) if len(m) > 1 else 0.0,
        "hosts": ",".join(sorted(m["host"].dropna().unique())),
        "distinct_hosts": int(m["host"].nunique()),
    }
    for p in PHASES:
        out[p] = float(m[p].mean())
        out[f"{p}_std"] = float(m[p].std(ddof=1)) if len(m) > 1 else 0.0
    total = m["t_comm_total"].dropna()
    out["t_comm_total"] = float(total.mean()) if not total.empty else None
    # Phases should account for the iteration; the rest is loop overhead we did not time.
    out["t_unaccounted"] = out["t_iter"] - sum(out[p] for p in PHASES)
    return out


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
    # str() each value: pandas' string dtype would keep None (in-memory data) as missing.
    keys = [k for k in GROUP_KEYS if k in runs.columns]
    key = runs[keys].apply(lambda row: "|".join(map(str, row)), axis=1)
    for _, idx in runs.groupby(key).groups.items():
        group = runs.loc[idx]
        smallest = group[group["ranks"] == group["ranks"].min()]
        base = smallest[smallest["state"] == "COMPLETED"]
        base = base[base["samples_per_s"].notna() & (base["samples_per_s"] > 0)]
        if base.empty:
            continue
        base_rate = float(base["samples_per_s"].mean())
        base_ranks = float(base["ranks"].iloc[0])
        for i in idx:
            rate = runs.at[i, "samples_per_s"]
            if runs.at[i, "state"] != "COMPLETED" or rate is None or pd.isna(rate):
                continue
            speedup = float(rate) / base_rate
            runs.at[i, "speedup"] = speedup
            runs.at[i, "efficiency"] = speedup / (runs.at[i, "ranks"] / base_ranks)
            runs.at[i, "baseline_ranks"] = int(base_ranks)
    return runs
