"""``orch results``, ``gather``, ``status`` and ``cancel``: what a sweep directory holds."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from ._common import (
    STATE_STYLE,
    err_console,
    out_console,
    print_runs,
    renamed,
    schedulers,
    sweep_dir,
)

SWEEP = typer.Argument(metavar="SWEEP", help="Sweep directory.", show_default=False)


def results_cmd(
    directory: Annotated[Path, SWEEP],
    format: Annotated[str, typer.Option("--format", "-f", help="table, csv, json or parquet.")]
    = "table",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write to this file "
                                             "(required for parquet).")] = None,
    old_output: Annotated[Path | None, typer.Option("--output", hidden=True)] = None,
) -> None:
    """One record per run: parameters, state, samples/s, speedup, efficiency, phases."""
    from .. import results

    output = renamed(out, old_output, "--out", "--output")
    if format not in ("table", "csv", "json", "parquet"):
        raise UserError(f"--format {format}: valid: table, csv, json, parquet")
    if format == "parquet" and output is None:
        raise UserError("--format parquet needs --output to a file: give --out FILE")
    keys = results.recheck(sweep_dir(directory))  # the run records first: merge only reads
    runs_df = results.merge(sweep_dir(directory), keys)
    if output is not None:
        if format == "parquet":
            runs_df.to_parquet(output, index=False)
        elif format == "csv":
            runs_df.to_csv(output, index=False)
        else:
            output.write_text(json.dumps(results.records(runs_df), indent=2, default=str) + "\n")
        err_console.print(f"wrote {len(runs_df)} run(s) to {output}")
        return
    recs = results.records(runs_df)
    if format == "json":
        sys.stdout.write(json.dumps(recs, indent=2, default=str) + "\n")
    elif format == "csv":
        runs_df.to_csv(sys.stdout, index=False)
    else:
        print_runs(recs)


def gather(directory: Annotated[Path, SWEEP]) -> None:
    """Update states from the scheduler, then merge every run into results/*.parquet.

    A finished sweep is recorded in the history its site config names (history:), once; a
    rerun says whether it falls inside its original's spread (orch compare's test)."""
    from .. import execute, results
    from . import history

    d = sweep_dir(directory)
    for scheduler in schedulers(d):
        execute.refresh(d, scheduler)
    keys = results.recheck(d)  # the run records first: merge only reads
    runs_df = results.merge(d, keys)
    err_console.print(f"merged {len(runs_df)} run(s) into {d / 'results'}")
    print_runs(results.records(runs_df))
    for line in history.gathered(d):  # the site's history, each rerun against its original
        err_console.print(line, highlight=False, markup=False)


def status(
    directory: Annotated[Path, SWEEP],
    history: Annotated[bool, typer.Option("--history", help="Every state change of every "
                                          "attempt: time (UTC), attempt, state, job id, nodes, "
                                          "reason.")] = False,
    format: Annotated[str, typer.Option("--format", "-f", help="table or json (json: each "
                                        "run's ledger entry, its history included).")]
    = "table",
) -> None:
    """Each run's state from the ledger and the scheduler, with job ids and attempts."""
    from rich.table import Table

    from .. import execute

    if format not in ("table", "json"):
        raise UserError(f"--format {format}: valid: table, json")
    d = sweep_dir(directory)
    entries = [entry for scheduler in schedulers(d) for entry in execute.refresh(d, scheduler)]
    if format == "json":
        sys.stdout.write(json.dumps([{"run_id": run.run_id, **record.model_dump(mode="json")}
                                     for run, record, _ in entries], indent=2) + "\n")
        return
    if history:
        _print_history(entries)
        return
    table = Table("run", "job", "attempt", "state", "reason", box=None)
    counts: dict[str, int] = {}
    for run, record, _ in entries:
        counts[record.state] = counts.get(record.state, 0) + 1
        style = STATE_STYLE.get(record.state, "")
        reason = (record.reason or "").splitlines()[0][:80] if record.reason else ""
        job = record.step or record.job_id or "-"  # a packed run: its own step
        table.add_row(run.run_id, job, str(record.attempt), f"[{style}]{record.state}[/]",
                      reason)
    out_console.print(table)
    out_console.print(", ".join(f"{n} {s}" for s, n in sorted(counts.items())))


def _print_history(entries) -> None:
    """One row per recorded state change, run by run."""
    import datetime as dt

    from rich.table import Table

    from ..runs.rundir import Event

    table = Table("run", "time (UTC)", "attempt", "state", "job", "nodes", "reason", box=None)
    for run, record, _ in entries:
        # A ledger written before histories were kept: its current state is all there is.
        events = record.history or [Event(at=record.ended_at or record.submitted_at or 0.0,
                                          attempt=record.attempt, state=record.state,
                                          job_id=record.job_id, nodes=record.nodes,
                                          reason=record.reason)]
        for i, event in enumerate(events):
            when = dt.datetime.fromtimestamp(event.at, dt.timezone.utc).strftime(
                "%Y-%m-%d %H:%M:%S")
            style = STATE_STYLE.get(event.state, "")
            table.add_row(run.run_id if i == 0 else "", when, str(event.attempt),
                          f"[{style}]{event.state}[/]", event.job_id or "-",
                          ",".join(event.nodes or []) or "-",
                          (event.reason or "").splitlines()[0][:100] if event.reason else "")
    out_console.print(table)


def cancel(
    directory: Annotated[Path, SWEEP],
    run_ids: Annotated[list[str] | None, typer.Argument(
        metavar="RUN_ID", help="Runs to cancel (default: all unfinished).")] = None,
) -> None:
    """Cancel unfinished runs of a sweep."""
    from .. import execute
    from ..runs import rundir

    d = sweep_dir(directory)
    known = {p.name for p in rundir.run_dirs(d)}
    for rid in run_ids or []:
        if rid not in known:
            raise UserError(f"{d}: no run '{rid}'")
    done: list[str] = []
    for scheduler in schedulers(d):
        done += execute.cancel(d, scheduler, run_ids)
    err_console.print(f"cancelled {len(done)} run(s)" + (": " + ", ".join(done) if done else ""))
