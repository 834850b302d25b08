"""The result set of a sweep directory: merged from the run directories, written as Parquet.

    results/iterations.parquet  one row per (run, rank, iteration), warm-up rows flagged
    results/runs.parquet        one row per run: parameters, state, throughput, phases, scaling

Failed and cancelled runs are rows too, with their state and reason. Merging only reads the
run directories, so it can be redone at any time (``orch gather``) and never loses data.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from . import analyze, fabric, files, gather, rundir, verdict
from .rundir import TERMINAL, JobRecord
from .sweep import Run

RUN_FIELDS = ("run_id", "site", "partition", "interconnect", "mode", "framework", "launcher",
              "model", "dataset", "nodes", "tasks_per_node", "batch_size", "iters", "warmup",
              "repeat", "data", "prefetch")


def merge(out: Path) -> pd.DataFrame:
    """Read every run of ``out``, write both Parquet files, return the runs table.

    The iteration lines of all rank logs are parsed together (``gather.merged_iteration_table``)
    and each run's metrics come from its slice of that one table: the same result set as
    building it row by row, ~20x faster on big sweeps (benchmarks/merge_speed.py).
    """
    scanned: list[tuple] = []
    runs: list[dict] = []
    for rdir in rundir.run_dirs(out):
        run = rundir.read_run(rdir)
        record = rundir.read_record(rdir)
        if record is not None:
            checked = reverify(run, rdir, record)
            if checked != record:
                rundir.write_record(rdir, checked)
                record = checked
        logs = gather.scan_run_logs(rdir) if (rdir / "ranks").is_dir() else []
        scanned.append((run, logs, rdir))
        entry = {f: getattr(run, f) for f in RUN_FIELDS}
        entry.update(
            ranks=run.ranks,
            options=json.dumps(run.options, sort_keys=True),
            state=record.state if record else "NEW",
            reason=record.reason if record else None,
            job_id=record.job_id if record else None,
            attempt=record.attempt if record else 0,
        )
        runs.append(entry)
    table, counts = gather.merged_iteration_table([(run, logs) for run, logs, _ in scanned])
    frame = table.select(list(analyze.ITER_COLUMNS)).to_pandas()
    start = 0
    for entry, (run, logs, rdir), count in zip(runs, scanned, counts, strict=True):
        entry.update(analyze.run_metrics(frame.iloc[start:start + count]))
        entry.update(gather.footer_facts([s.log for s in logs]))
        entry.update(fabric.attest(run, rdir, [s.log for s in logs]))
        start += count
    gather.write_parquet(table, out / "results" / "iterations.parquet")
    runs_df = analyze.add_scaling(pd.DataFrame(runs))
    if not runs_df.empty:
        files.replace_with(out / "results" / "runs.parquet",
                           lambda tmp: runs_df.to_parquet(tmp, index=False))
    return runs_df


def records(runs: pd.DataFrame) -> list[dict]:
    """Runs as plain JSON-able dicts (NaN → None)."""
    if runs.empty:
        return []
    clean = runs.astype(object).where(runs.notna(), None)
    out = clean.to_dict(orient="records")
    for rec in out:
        rec["options"] = json.loads(rec["options"]) if rec.get("options") else {}
    return out


def reverify(run: Run, rdir: Path, record: JobRecord) -> JobRecord:
    """A finished run whose rank logs changed since it was finalized (truncated, emptied,
    deleted): its verdict again, from the logs as they are now, saying so."""
    if record.state not in TERMINAL or record.logs_digest is None:
        return record
    now_digest = rundir.logs_digest(rdir)
    if now_digest == record.logs_digest:
        return record
    note = "rank logs changed after the run was finalized"
    if record.state == "COMPLETED":
        logs = verdict.read_run_logs(rdir) if (rdir / "ranks").is_dir() else []
        ok, why = verdict.verdict(run, rdir, logs)
        state, reason = ("COMPLETED", note) if ok else ("FAILED", f"{note}: {why}")
    else:
        state, reason = record.state, f"{note}; was: {record.reason}"
    return record.model_copy(update={"state": state, "reason": reason,
                                     "logs_digest": now_digest})

