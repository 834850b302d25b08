"""The scorecard: how wrong the predictions stated before the runs were.

``scorecard_frame`` joins every run with the latest prediction of the ledger
(:mod:`orchestrator.execute.ledger`) made before the run started (one row per predicted run:
that prediction and what the run measured); ``scorecard_of_sweep`` reads a sweep's ledger and
keeps the frame in its result set (``results/predictions.parquet``); the rest is pure: frames
in, a Table and summary lines out.
Per mode × partition × node count: predicted and measured ``t_iter`` and speedup and their
errors ((predicted − measured) / measured), the predicted interval and any flag; the sweep's
median absolute ``t_iter`` error and the intervals' coverage (the share of measured ``t_iter``
inside their interval, against its nominal level), for valid and flagged predictions apart (a
flagged prediction said before its run why it may not hold: orchestrator.perfmodel.validity).
Making a sweep's scorecard also records its scored, valid predictions' errors in their site's
model-error store (orchestrator.execute.modelerror), which the next sweep's intervals read.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from .. import files, protocol
from ..errors import UserError
from ..execute import modelerror
from ..execute.ledger import FILE, T_ITER, load
from ..perfmodel import interval, validity
from ..runs import rundir
from .fmt import as_float, fmt_num, fmt_signed, ms
from .overview import split_flags
from .tables import Table

PARQUET = "predictions.parquet"  # in results/
COLUMNS = ["run_id", "predicted_at", "run_started_at", "before_run", "site", "mode", "partition",
           "nodes", "tasks_per_node", "workers", "from_run_id", "from_workers", "pattern",
           "overlap", "servers", "grad_bytes", "predicted_t_iter", "predicted_speedup",
           "measured_t_iter", "measured_speedup", "error_t_iter", "error_speedup",
           "t_comm_predicted", "network", "predicted_t_iter_low", "predicted_t_iter_high",
           "level", "inside", "flags", "valid"]


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
             "per-iteration spread, repeats, and the model's own error once the site's earlier "
             "scorecards recorded enough of it); check: 'valid', or why the prediction was "
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


def run_started_at(rdir: Path) -> float | None:
    """When a run's job script started (job-times.json), else when it was submitted."""
    path = rdir / protocol.JOB_TIMES_FILE
    if path.exists():
        try:
            value = json.loads(path.read_text()).get("script_started_at")
            if isinstance(value, (int, float)):
                return float(value)
        except (OSError, json.JSONDecodeError, AttributeError):
            pass
    try:
        record = rundir.read_record(rdir)
    except UserError:
        return None
    return record.submitted_at if record else None


def scorecard_frame(runs: pd.DataFrame, preds: list[dict],
                    started: dict[str, float | None]) -> pd.DataFrame:
    """One row per predicted run: the latest prediction made before the run started, next to
    what was measured. ``error_*`` = (predicted − measured) / measured."""
    by_run: dict[str, dict] = {}
    for rec in preds:
        start = started.get(rec["run_id"])
        if start is not None and rec["predicted_at"] >= start:
            continue  # not stated before the run: never scored
        old = by_run.get(rec["run_id"])
        if old is None or rec["predicted_at"] >= old["predicted_at"]:
            by_run[rec["run_id"]] = rec
    rows = []
    table = runs.set_index("run_id") if not runs.empty else runs
    for rid, rec in by_run.items():
        run = table.loc[rid] if rid in table.index else None
        done = run is not None and run["state"] == "COMPLETED" and pd.notna(run[T_ITER])
        meas_t = float(run[T_ITER]) if done else None
        meas_s = (float(run["speedup"]) if done and "speedup" in run.index
                  and pd.notna(run["speedup"]) else None)
        pred_s = rec.get("speedup")
        rows.append({
            "run_id": rid, "predicted_at": rec["predicted_at"],
            "run_started_at": started.get(rid),
            "before_run": started.get(rid) is not None,
            "site": _site_of(rec, run), "mode": rec.get("mode"), "partition": rec.get("partition"),
            "nodes": rec.get("nodes"), "tasks_per_node": rec.get("tasks_per_node"),
            "workers": rec.get("workers"), "from_run_id": rec.get("from_run_id"),
            "from_workers": rec.get("from_workers"), "pattern": rec.get("pattern"),
            "overlap": rec.get("overlap"), "servers": rec.get("servers"),
            "grad_bytes": rec.get("grad_bytes"),
            "predicted_t_iter": rec["t_iter"], "predicted_speedup": pred_s,
            "measured_t_iter": meas_t, "measured_speedup": meas_s,
            "error_t_iter": (rec["t_iter"] - meas_t) / meas_t if meas_t else None,
            "error_speedup": (pred_s - meas_s) / meas_s if meas_s and pred_s else None,
            "t_comm_predicted": rec.get("t_comm_exposed"),
            "network": json.dumps(rec.get("network"), sort_keys=True),
            **_scored_interval(rec, meas_t, run),
        })
    return pd.DataFrame(rows, columns=COLUMNS)


def _site_of(rec: dict, run: pd.Series | None) -> str | None:
    """A scored prediction's site: the one its record names (the runs table's when it was
    stated), else its run's in the runs table now."""
    site = rec.get("site")
    if site is None and run is not None and "site" in run.index and pd.notna(run["site"]):
        site = run["site"]
    return str(site) if site is not None else None


def _scored_interval(rec: dict, measured: float | None, run: pd.Series | None) -> dict:
    """A scorecard row's interval, whether the measured t_iter fell in it, and its flags:
    those stated before the run and a shared node found after it."""
    low, high = rec.get("t_iter_low"), rec.get("t_iter_high")
    flags = [str(f) for f in rec.get("flags") or []]
    after = validity.shared_after(run.get("co_tenants")) if run is not None else None
    if after:
        flags.append(after)
    inside = (low <= measured <= high if measured is not None and low is not None
              and high is not None else None)
    return {"predicted_t_iter_low": low, "predicted_t_iter_high": high,
            "level": rec.get("level"), "inside": inside, "flags": "; ".join(flags),
            "valid": not flags}


def scorecard_of_sweep(sweep_dir: Path, runs: pd.DataFrame) -> pd.DataFrame | None:
    """The scorecard of a sweep directory (None if it stated no predictions); also writes
    ``results/predictions.parquet`` so the result set keeps the predictions, and records the
    scored, valid predictions' errors in their sites' model-error stores (modelerror.record:
    each prediction once, however often the sweep is scored)."""
    scored = _score_sweep(sweep_dir, runs)
    return scored[0] if scored is not None else None


def _score_sweep(sweep_dir: Path, runs: pd.DataFrame,
                 ) -> tuple[pd.DataFrame, dict[Path, int]] | None:
    """(the scorecard, how many errors each model-error store got), None without a ledger."""
    path = sweep_dir / FILE
    if not path.exists():
        return None
    preds = load(path)
    started = {rec["run_id"]: run_started_at(sweep_dir / rec["run_id"]) for rec in preds}
    frame = scorecard_frame(runs, preds, started)
    target = sweep_dir / "results" / PARQUET
    files.make_dirs(target.parent)
    files.write_bytes_if_changed(target, files.parquet_bytes(frame))
    return frame, modelerror.record(frame)


def scorecard_lines(sweep_dir: Path, runs: pd.DataFrame) -> list[str]:
    """The sweep's scorecard in a line (writes results/predictions.parquet and records the
    model's errors), and where the errors went; [] without stated predictions."""
    scored = _score_sweep(sweep_dir, runs)
    if scored is None:
        return []
    frame, added = scored
    lines = scorecard_summary(frame) or ["Scorecard: no stated prediction could be scored"]
    return lines + [f"Model error: {n} scored valid prediction(s) recorded in {store} (the "
                    "next sweep's intervals on the site carry it)"
                    for store, n in added.items() if n]
