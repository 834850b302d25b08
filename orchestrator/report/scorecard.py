"""The scorecard: how wrong the predictions stated before the runs were (pure: frames in, a
Table and summary lines out).

Input is the frame ``orchestrator.predictions.scorecard_frame`` builds (one row per predicted
run: the latest prediction made before the run started, and what the run measured).
Per mode × partition × node count: predicted and measured ``t_iter`` and speedup and their
errors ((predicted − measured) / measured), the predicted interval and any flag; the sweep's
median absolute ``t_iter`` error and the intervals' coverage (the share of measured ``t_iter``
inside their interval, against its nominal level), for valid and flagged predictions apart (a
flagged prediction said before its run why it may not hold: orchestrator.perfmodel.validity).
"""

from __future__ import annotations

import pandas as pd

from ..perfmodel import interval
from .fmt import as_float, fmt_num, fmt_signed, ms
from .overview import split_flags
from .tables import Table


def _scored(frame: pd.DataFrame) -> pd.DataFrame:
    return frame[frame["error_t_iter"].notna()] if not frame.empty else frame


def median_abs_error(frame: pd.DataFrame, column: str = "error_t_iter") -> float | None:
    """Median of |error| over the scored rows (None when nothing was scored)."""
    scored = frame[frame[column].notna()] if not frame.empty else frame
    if scored.empty:
        return None
    return float(scored[column].astype(float).abs().median())


def _flagged(frame: pd.DataFrame) -> pd.Series:
    """Rows whose prediction was flagged (a frame without the column: none)."""
    if "valid" not in frame.columns:
        return pd.Series(False, index=frame.index)
    return frame["valid"].eq(False)


def coverage(frame: pd.DataFrame) -> tuple[int, int]:
    """(inside, scored with an interval) of the rows."""
    if frame.empty or "inside" not in frame.columns:
        return 0, 0
    known = frame["inside"].dropna()
    return int(known.astype(bool).sum()), len(known)


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
                     fmt_signed(_pct(r["error_speedup"]), ".1f"), _band(r),
                     str(r.get("flags") or "") or "valid"])
    flagged = _flagged(frame) if not frame.empty else None
    overall = median_abs_error(frame[~flagged] if flagged is not None else frame)
    apart = median_abs_error(frame[flagged]) if flagged is not None and flagged.any() else None
    note = ("error = (predicted − measured) / measured, in %. Each run is scored against the "
            "latest prediction stated before its job started (predictions.jsonl), made from "
            "the largest smaller run of its configuration and the pre-flight α–β. ")
    note += ("Median absolute t_iter error over the sweep's valid predictions: "
             f"{overall:.1%}." if overall is not None else "No valid prediction could be scored.")
    if apart is not None:
        note += f" Over the flagged ones (check column), scored apart: {apart:.1%}."
    note += (" interval: the prediction's interval at its nominal level (network fit, "
             "per-iteration spread, repeats); check: 'valid', or why the prediction was "
             "flagged before its run.")
    return Table("scorecard", "Scorecard: predictions stated before the runs vs measured",
                 ["mode", "partition", "nodes", "ranks", "from", "model", "pred. t_iter ms",
                  "t_iter ms", "error %", "pred. speedup", "speedup", "error %",
                  "interval ms", "check"],
                 rows, note, key_columns=2, text_columns=(4, 5, 12, 13))


def _band(r) -> str:
    low, high, level = (as_float(r.get(k)) for k in ("predicted_t_iter_low",
                                                      "predicted_t_iter_high", "level"))
    if low is None or high is None:
        return "-"
    return f"{ms(low)}-{ms(high)} ({level:.0%})" if level else f"{ms(low)}-{ms(high)}"


def _pct(value) -> float | None:
    v = as_float(value)
    return None if v is None else 100 * v


def scorecard_summary(frame: pd.DataFrame) -> list[str]:
    """The valid predictions' median absolute error (per mode, with the largest node count,
    where it matters most) and coverage; then the flagged ones apart: each reason once, with the
    runs it covers and their errors."""
    scored = _scored(frame)
    if scored.empty:
        return []
    flagged = _flagged(scored)
    valid, bad = scored[~flagged], scored[flagged]
    if valid.empty:
        lines = [f"Scorecard: no valid prediction to score ({len(bad)} flagged, below)."]
    else:
        parts = []
        for mode, g in valid.groupby("mode", sort=True):
            top = g[g["nodes"] == g["nodes"].max()]
            parts.append(f"{mode} {median_abs_error(g):.1%} (at {int(top['nodes'].iloc[0])} "
                         f"nodes {median_abs_error(top):.1%})")
        lines = [f"Scorecard: median absolute error of predicted t_iter "
                 f"{median_abs_error(valid):.1%} over {len(valid)} valid run(s); per mode: "
                 + "; ".join(parts) + "." + _coverage_text(valid)]
    if not bad.empty:
        lines.append(f"Flagged before their runs, scored apart: {len(bad)} run(s), median "
                     f"absolute error {median_abs_error(bad):.1%}." + _coverage_text(bad))
        # each reason once, with the runs it covers and their errors
        groups: dict[str, list[str]] = {}
        for _, r in bad.sort_values(["mode", "nodes"]).iterrows():
            for reason in split_flags(str(r["flags"])):
                groups.setdefault(reason, []).append(
                    f"{r['mode']} at {r['nodes']} node(s) ({r['workers']} ranks) "
                    f"{fmt_signed(_pct(r['error_t_iter']), '.1f')}%")
        lines += [f"  {reason}: {', '.join(runs)}" for reason, runs in groups.items()]
    return lines


def _coverage_text(frame: pd.DataFrame) -> str:
    inside, known = coverage(frame)
    if not known:
        return ""
    level = as_float(frame["level"].dropna().iloc[0]) if frame["level"].notna().any() else None
    text = interval.coverage_text(inside, known, level)
    return f" {text[0].upper()}{text[1:]}."
