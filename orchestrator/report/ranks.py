"""Who is slow: per-rank spread of the iteration and of its compute part (pure)."""

from __future__ import annotations

import pandas as pd

#: The compute part of an iteration (t_iter without the exposed communication).
COMPUTE = ("t_io", "t_h2d", "t_f", "t_b", "t_u")
#: A straggler's compute is at least this much above the run's median rank.
STRAGGLER_THRESHOLD = 0.10


def rank_stats(iters: pd.DataFrame) -> pd.DataFrame:
    """Per (run, rank) over measured iterations: mean t_iter, compute, exposed comm (s)."""
    cols = ["run_id", "rank", "host", "t_iter", "t_iter_std", "compute", "t_comm", "n"]
    if iters.empty:
        return pd.DataFrame(columns=cols)
    m = iters[~iters["warmup_iter"]]
    m = m.assign(compute=m[list(COMPUTE)].sum(axis=1))
    g = m.groupby(["run_id", "rank"], sort=True)
    out = g.agg(host=("host", "first"), t_iter=("t_iter", "mean"), t_iter_std=("t_iter", "std"),
                compute=("compute", "mean"), t_comm=("t_comm", "mean"), n=("t_iter", "size"))
    return out.reset_index()[cols]


def stragglers(ranks: pd.DataFrame) -> pd.DataFrame:
    """Per run: spread of per-rank compute and the straggler (if any).

    spread = (max − min) / median of the ranks' mean compute time; the straggler is the rank
    with the most compute if that is >= STRAGGLER_THRESHOLD above the median.
    """
    rows = []
    for run_id, g in ranks.groupby("run_id", sort=False):
        med = float(g["compute"].median())
        slow = g.loc[g["compute"].idxmax()]
        excess = (float(slow["compute"]) / med - 1.0) if med > 0 else 0.0
        rows.append({
            "run_id": run_id, "ranks": len(g),
            "t_iter_min": float(g["t_iter"].min()), "t_iter_max": float(g["t_iter"].max()),
            "compute_min": float(g["compute"].min()), "compute_max": float(g["compute"].max()),
            "spread": (float(g["compute"].max() - g["compute"].min()) / med) if med > 0 else 0.0,
            "slowest_rank": int(slow["rank"]), "slowest_host": slow["host"],
            "excess": excess,
            "straggler": bool(len(g) > 1 and excess >= STRAGGLER_THRESHOLD),
        })
    return pd.DataFrame(rows, columns=["run_id", "ranks", "t_iter_min", "t_iter_max",
                                       "compute_min", "compute_max", "spread", "slowest_rank",
                                       "slowest_host", "excess", "straggler"])
