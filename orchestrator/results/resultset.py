"""The result set of a sweep directory: merged from the run directories, written as Parquet.

    results/iterations.parquet  one row per (run, rank, iteration), warm-up rows flagged
    results/runs.parquet        one row per run: parameters, state, throughput, phases, scaling

Failed and cancelled runs are rows too, with their state and reason. Merging only reads the
run directories, so it can be redone at any time (``orch gather``) and never loses data.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from . import analyze, convergence, devices, fabric, files, gather, protocol, rundir, verdict
from .dimensions import dimension_facts
from .rundir import TERMINAL, JobRecord
from .sweep import Run

RUN_FIELDS = ("run_id", "site", "partition", "interconnect", "mode", "framework", "launcher",
              "model", "dataset", "nodes", "tasks_per_node", "batch_size", "iters", "warmup",
              "repeat", "data", "prefetch", "epochs", "target_accuracy")


def merge(out: Path) -> pd.DataFrame:
    """Read every run of ``out``, write both Parquet files, return the runs table.

    The iteration lines of all rank logs are parsed together (``gather.merged_iteration_table``)
    and each run's metrics come from its slice of that one table: the same result set as
    building it row by row, ~25x faster on big sweeps (benchmarks/merge_speed.py). The logs are
    read by threads, and iterations.parquet is written by a thread while the metrics are
    computed (Arrow releases the GIL).

    Incremental: ``results/.cache/<run_id>.json`` remembers, per run, the key of its inputs
    (run.json's bytes; each rank log's name, size, mtime and inode), its rows' place in the
    ``iterations.parquet`` written then, its metrics and its logs' headers and footers. A run
    whose key is unchanged takes its rows from that file and reads none of its logs; only the
    others are parsed. The result set is the same as a merge without the cache.
    """
    cache = out / CACHE_DIR
    parquet = out / "results" / "iterations.parquet"
    generation = _file_token(parquet)
    old_rows: int | None = None
    todo: list[int] = []  # the entries of runs whose logs are read
    entries: list[dict] = []  # per run: run, rdir, key, and table/count/metrics/logs
    runs: list[dict] = []
    for rdir in rundir.run_dirs(out):
        run = rundir.read_run(rdir)
        record = rundir.read_record(rdir)
        if record is not None:
            checked = reverify(run, rdir, record)
            if checked != record:
                rundir.write_record(rdir, checked)
                record = checked
        key = _inputs_key(rdir)
        hit = _read_entry(cache, run.run_id, key, generation)
        if hit is not None and old_rows is None:
            try:
                old_rows = pq.read_metadata(parquet).num_rows
            except (OSError, pa.ArrowInvalid):
                hit, generation = None, None
        if hit is not None and hit["offset"] + hit["count"] > old_rows:
            hit = None
        entry = {"run": run, "rdir": rdir, "key": key}
        if hit is not None:
            entry.update(offset=hit["offset"], count=hit["count"], metrics=hit["metrics"],
                         logs=[_log_from_json(d) for d in hit["logs"]], cached=hit)
        else:
            todo.append(len(entries))
        entries.append(entry)
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
        runs.append(info)
    if todo:
        scanned = gather.scan_runs_logs([entries[i]["rdir"] for i in todo])
        table, counts = gather.merged_iteration_table(
            [(entries[i]["run"], logs) for i, logs in zip(todo, scanned, strict=True)])
        start = 0
        for i, logs, count in zip(todo, scanned, counts, strict=True):
            entries[i].update(table=table.slice(start, count), start=start, count=count,
                              logs=[s.log for s in logs])
            start += count
    offsets = [0]
    for e in entries:
        offsets.append(offsets[-1] + e["count"])
    writing = None
    if todo or old_rows != offsets[-1] or any(
            e["offset"] != o for e, o in zip(entries, offsets, strict=False)):
        if todo and len(todo) == len(entries):
            full = table  # nothing from the cache: the one parsed table, in run order
        else:
            old_table = gather.read_iterations(parquet) if len(todo) < len(entries) else None
            pieces = [e["table"] if "table" in e else old_table.slice(e["offset"], e["count"])
                      for e in entries if e["count"]]
            full = pa.concat_tables(pieces) if pieces else gather.iteration_table([])
        # Written by a thread (Arrow's writer releases the GIL) while the metrics are computed.
        writing = ThreadPoolExecutor(1)
        written = writing.submit(gather.write_parquet, full, parquet)
    # else nothing changed: iterations.parquet is already this table, row for row
    try:
        if todo:
            # host and window stay categorical (dictionary-encoded): no million strings
            frame = table.select(list(analyze.ITER_COLUMNS)).to_pandas()
            for i in todo:
                start, count = entries[i]["start"], entries[i]["count"]
                entries[i]["metrics"] = analyze.run_metrics(frame.iloc[start:start + count])
        for info, entry in zip(runs, entries, strict=True):
            logs = entry["logs"]
            info.update(entry["metrics"])
            info.update(gather.footer_facts(logs))
            info.update(dimension_facts(entry["run"], logs))  # precision, compile, ...
            info.update(devices.run_facts(logs))  # device metrics and binding
            info.update(fabric.attest(entry["run"], entry["rdir"], logs))
    finally:
        if writing is not None:
            writing.shutdown(wait=True)
    if writing is not None:
        written.result()
    _write_entries(cache, entries, _file_token(parquet))
    runs_df = analyze.add_invariants(analyze.add_scaling(pd.DataFrame(runs)))
    runs_df = convergence.write(out, runs_df)  # epoch runs: epochs.parquet, time to accuracy
    if not runs_df.empty:
        files.replace_with(out / "results" / "runs.parquet",
                           lambda tmp: runs_df.to_parquet(tmp, index=False))
    return runs_df


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
    return ",".join(map(str, co)) if isinstance(co, list) and co else None


# --- the incremental cache -------------------------------------------------------------------

CACHE_DIR = "results/.cache"
CACHE_VERSION = 2  # bump when the table, the metrics or this format change


def _file_token(path: Path) -> list[int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino]


RACY_S = 2.0  # a log written this recently may change again within its mtime's resolution


def _inputs_key(rdir: Path) -> str:
    """What a run's rows and metrics depend on: run.json, and each rank log's identity.

    A file's mtime has the resolution of the kernel's clock tick, not 1 ns: a log rewritten
    with the same size within one tick would keep its key. So, as git does with its index, a
    run whose log changed in the last ``RACY_S`` seconds gets a key that never matches: it is
    read again next time, and cached once its logs have been still for a while.
    """
    digest = hashlib.sha256(f"v{CACHE_VERSION}\n".encode())
    digest.update((rdir / "run.json").read_bytes())
    racy = time.time_ns() - int(RACY_S * 1e9)
    for _, path in protocol.rank_logs(rdir / protocol.RANKS_DIR):
        st = os.stat(path)
        if st.st_mtime_ns >= racy:
            return "racy"
        digest.update(f"\n{os.path.basename(path)} {st.st_size} {st.st_mtime_ns} "
                      f"{st.st_ino}".encode())
    return digest.hexdigest()


def _read_entry(cache: Path, run_id: str, key: str, generation) -> dict | None:
    if generation is None:
        return None
    try:
        entry = json.loads((cache / f"{run_id}.json").read_text())
    except (OSError, ValueError):
        return None
    if (not isinstance(entry, dict) or entry.get("version") != CACHE_VERSION or key == "racy"
            or entry.get("key") != key or entry.get("parquet") != generation):
        return None
    return entry


def _write_entries(cache: Path, entries: list[dict], generation) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    keep = set()
    offset = 0
    for e in entries:
        name = f"{e['run'].run_id}.json"
        keep.add(name)
        old = e.get("cached")
        if old is None or old["parquet"] != generation or old["offset"] != offset:
            files.write_text_atomic(cache / name, json.dumps({
                "version": CACHE_VERSION, "key": e["key"], "parquet": generation,
                "offset": offset, "count": e["count"], "metrics": e["metrics"],
                "logs": [_log_to_json(log) for log in e["logs"]]}))
        offset += e["count"]
    for stale in cache.glob("*.json"):
        if stale.name not in keep:
            stale.unlink(missing_ok=True)


def _log_to_json(log) -> dict:
    return {"rank": log.rank, "header": log.header, "footer": log.footer,
            "problems": log.problems}


def _log_from_json(d: dict):
    return protocol.RankLog(rank=d["rank"], header=d["header"], footer=d["footer"],
                            problems=d["problems"])


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

