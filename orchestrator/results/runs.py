"""A run's own columns of the result set (its parameters, state, attempts, study, co-tenants),
and re-checking the run records against their logs: the step callers run before a merge."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from .. import protocol
from ..runs import rundir, verdict
from ..runs.rundir import TERMINAL, JobRecord
from ..spec.api import Run, column_names
from . import cache

RUN_FIELDS = column_names()  # the Run fields marked as columns (spec.api)


def run_columns(run: Run, record: JobRecord | None, rdir: Path) -> dict:
    """The columns of a run's row that come from its run directory, not from its logs."""
    info = {f: getattr(run, f) for f in RUN_FIELDS}
    info.update(
        ranks=run.ranks,
        options=json.dumps(run.options, sort_keys=True),
        state=record.state if record else "NEW",
        reason=record.reason if record else None,
        job_id=record.job_id if record else None,
        attempt=record.attempt if record else 0,
        attempts=attempts_summary(record) if record else None,
        # Every state change of every attempt (time, attempt, state, job, nodes, reason).
        history=json.dumps([e.model_dump(mode="json") for e in record.history])
        if record else None,
        study=_study_of(rdir),
        co_tenants=_co_tenants(rdir),
    )
    return info


def _study_of(rdir: Path) -> str | None:
    """The name of the study file that planned a run (its provenance.json), or None."""
    try:
        prov = json.loads((rdir / protocol.PROVENANCE_FILE).read_text())
    except (OSError, ValueError):
        return None
    study = prov.get("study") if isinstance(prov, dict) else None
    return study.get("name") if isinstance(study, dict) else None


def _co_tenants(rdir: Path) -> str | None:
    """The runs that shared a node with this one while it ran (a --pack-shared step; its
    job-times.json names them), comma-separated; None: it had its nodes to itself. Its
    timings contend with theirs, so the result set says so beside them."""
    try:
        times = json.loads((rdir / protocol.JOB_TIMES_FILE).read_text())
    except (OSError, ValueError):
        return None
    co = times.get("co_tenants") if isinstance(times, dict) else None
    return CO_TENANTS_SEP.join(map(str, co)) if isinstance(co, list) and co else None


CO_TENANTS_SEP = ","  # the co_tenants column's run ids are joined with it (run ids have none)


def co_tenant_ids(value: object) -> list[str]:
    """The run ids of a ``co_tenants`` value of the result set, as :func:`_co_tenants` wrote
    it; [] for a run that had its nodes to itself (None, or NaN where pandas holds it)."""
    if not isinstance(value, str):
        return []
    return [c for c in value.split(CO_TENANTS_SEP) if c]


def records(runs: pd.DataFrame) -> list[dict]:
    """Runs as plain JSON-able dicts (NaN → None)."""
    if runs.empty:
        return []
    clean = runs.astype(object).where(runs.notna(), None)
    out = clean.to_dict(orient="records")
    for rec in out:
        rec["options"] = json.loads(rec["options"]) if rec.get("options") else {}
    return out


def attempts_summary(record: JobRecord) -> str:
    """How each attempt of a run ended, in order (``HUNG→COMPLETED``), from its history; the
    result set holds the last attempt's measurements, earlier ones stay in attempts/<n>/."""
    ends: dict[int, str] = {}
    for event in record.history:
        if event.state in TERMINAL:
            ends[event.attempt] = event.state
    ends[record.attempt] = record.state
    return "→".join(ends[a] for a in sorted(ends))


def recheck(out: Path) -> dict[str, str | None]:
    """Re-check every finished run of ``out`` against its rank logs as they are now, and write
    the records that change (:func:`reverify`). Run it before :func:`merge`, which only reads;
    returns each run's key (``cache.run_key``, taken before it was read) for the merge to
    reuse: None for a run whose record it rewrote (its key changed with it).

    A run none of whose files changed since it was last found consistent (its key is the one
    remembered then) is not read again: re-checking reads every byte of every log
    (``rundir.logs_digest``), which a live sweep's gathers cannot afford."""
    cache_dir = out / cache.CACHE_DIR
    memo = cache.read_checked(cache_dir)
    keys: dict[str, str | None] = {}
    for rdir in rundir.run_dirs(out):
        key = keys[rdir.name] = cache.run_key(rdir)
        if key is not None and memo.get(rdir.name) == key:
            continue
        record = rundir.read_record(rdir)
        checked = reverify(rundir.read_run(rdir), rdir, record) if record else None
        if checked != record:
            rundir.write_record(rdir, checked)
            keys[rdir.name] = None
    remembered = {run_id: key for run_id, key in keys.items() if key is not None}
    if remembered != memo:
        cache.write_checked(cache_dir, remembered)
    return keys


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
        logs = verdict.read_run_logs(rdir) if (rdir / protocol.RANKS_DIR).is_dir() else []
        ok, why = verdict.verdict(run, rdir, logs)
        state, reason = ("COMPLETED", note) if ok else ("FAILED", f"{note}: {why}")
    else:
        state, reason = record.state, f"{note}; was: {record.reason}"
    return record.model_copy(update={"state": state, "reason": reason,
                                     "logs_digest": now_digest})
