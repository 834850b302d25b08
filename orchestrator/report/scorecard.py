"""The scorecard: how wrong the predictions stated before the runs were (pure: frames in, a
Table and summary lines out).

Input is the frame ``orchestrator.predictions.scorecard_frame`` builds (one row per predicted
run: the latest prediction made before the run started, and what the run measured).
Per mode × partition × node count: predicted and measured ``t_iter`` and speedup and their
errors ((predicted − measured) / measured); the sweep's median absolute ``t_iter`` error, in
all and per mode.
"""

from __future__ import annotations

import pandas as pd

from .fmt import as_float, fmt_num, fmt_signed, ms
from .tables import Table


def _scored(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["error_t_iter"].notna()] if not frame.empty else frame


def median_abs_error(frame: pd.DataFrame, column: str = "error_t_iter") -> float | None:
    """Median of |error| over the scored rows (None when nothing was scored)."""
    scored = frame[frame[column].notna()] if not frame.empty else frame
    if scored.empty:
        return None
    return float(scored[column].astype(float).abs().median())


def scorecard_table(frame: pd.DataFrame) -> Table:
    rows = []
    ordered = frame.sort_values(["mode", "partition", "nodes", "tasks_per_node"]) \
        if not frame.empty else frame
    for _, r in ordered.iterrows():
        rows.append([str(r["mode"]), str(r["partition"]), str(r["nodes"]),
                     str(r["workers"]), f"{r['from_workers']} rank(s)",
                     f"{r['pattern']}/{r['overlap']}",
                     ms(r["predicted_t_iter"]), ms(r["measured_t_iter"]),
                     fmt_signed(_pct(r["error_t_iter"]), ".1f"),
                     fmt_num(r["predicted_speedup"], ".2f"),
                     fmt_num(r["measured_speedup"], ".2f"),
                     fmt_signed(_pct(r["error_speedup"]), ".1f")])
    overall = median_abs_error(frame)
    note = ("error = (predicted − measured) / measured, in %. Each run is scored against the "
            "latest prediction stated before its job started (predictions.jsonl), made from "
            "the largest smaller run of its configuration and the pre-flight α–β. ")
    note += ("Median absolute t_iter error over the sweep: "
             f"{overall:.1%}." if overall is not None else "No prediction could be scored.")
    return Table("scorecard", "Scorecard: predictions stated before the runs vs measured",
                 ["mode", "partition", "nodes", "ranks", "from", "model", "pred. t_iter ms",
                  "t_iter ms", "error %", "pred. speedup", "speedup", "error %"],
                 rows, note, key_columns=2, text_columns=(4, 5))


def _pct(value) -> float | None:
    v = as_float(value)
    return None if v is None else 100 * v


def scorecard_summary(frame: pd.DataFrame) -> list[str]:
    """One line: the sweep's median absolute error, and per mode (with the largest node
    count, where it matters most)."""
    scored = _scored(frame)
    if scored.empty:
        return []
    parts = []
    for mode, g in scored.groupby("mode", sort=True):
        top = g[g["nodes"] == g["nodes"].max()]
        parts.append(f"{mode} {median_abs_error(g):.1%} (at {int(top['nodes'].iloc[0])} "
                     f"nodes {median_abs_error(top):.1%})")
    return [f"Scorecard: median absolute error of predicted t_iter "
            f"{median_abs_error(scored):.1%} over {len(scored)} run(s); per mode: "
            + "; ".join(parts) + "."]
