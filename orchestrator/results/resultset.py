"""The merge: a sweep directory's run directories -> its result set, read only (re-checking
run records is :func:`runs.recheck`, run first).

    results/runs.parquet                       one row per run
    results/iterations.parquet/<run_id>.parquet  a run's iteration rows (every run has one)
    results/epochs.parquet/<run_id>.parquet      a run's epoch records (epoch runs)
    results/devices.parquet/<run_id>.parquet     a run's device samples (runs that took any)

A table of many rows per run is a directory of one Parquet file per run, read as one table
(``pd.read_parquet(directory)``, DuckDB's ``'directory/*.parquet'``): a re-merge after one run
changed writes that run's files and runs.parquet, nothing else, so its cost does not grow with
the sweep's rows (benchmarks/merge_speed.py). Appending to one file cannot replace a run's rows
(a run merged again while it runs, a retried run), and a file per batch of runs would rewrite
the batch; a run is the unit that changes. Each file is written whole under a private name
and renamed into place (files.py), so a reader, a concurrent merge or a full disk never sees
half of one, and a run's rows are never in two files.

The iteration lines of many rank logs are parsed together (``iterations.merged_iteration_table``)
and each run's metrics come from its slice of that table, ~25x faster than row by row. It
streams: the runs to merge are taken in batches of about ``BATCH_BYTES`` of logs, each batch
parsed, measured and written (by a thread, while the next batch is parsed: Arrow releases the
GIL) before the next is read, so memory stays that of one batch whatever the sweep's size.

Incremental (``cache``): a run whose key and files are those of its cache entry takes its row
from there and reads none of its files; the result set is the same as a merge from scratch.
A result set written by an older orch (each table one file) is rebuilt from the run
directories in this layout, the old file replaced once the new directory is complete.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa

from .. import files, protocol
from ..protocol import RankLog
from ..runs import fabric, rundir
from ..runs.rundir import JobRecord
from ..spec.api import Run
from . import analyze, cache, columns, convergence, devices, gather, workload
from . import iterations as iteration_table
from .dimensions import dimension_facts
from .runs import run_columns

RESULTS = "results"
ITERATIONS = "results/iterations.parquet"
RUNS = "results/runs.parquet"
# The tables of many rows per run: results/<name>.parquet/<run_id>.parquet.
TABLES = ("iterations", "epochs", "devices")
BATCH_BYTES = 64 << 20  # rank logs parsed at once: the merge's memory is about 5x this


@dataclass(frozen=True)
class RunInput:
    """A run directory to merge (nothing of its logs read yet but their size)."""

    run: Run
    rdir: Path
    record: JobRecord | None
    key: str | None  # cache.run_key: None while a file of the run may still be changing
    log_bytes: int


@dataclass(frozen=True)
class Merged:
    """What the merge keeps of a run for the runs table: its row, its epoch records."""

    row: dict
    epochs: list[dict]


def merge(out: Path, keys: dict[str, str | None] | None = None) -> pd.DataFrame:
    """Merge every run of ``out`` into its result set; return the runs table. ``keys``: the
    runs' keys as :func:`runs.recheck` took them just before (a key taken before the run is
    read is as good as one taken now: a file changed since makes the next key differ)."""
    rdirs = rundir.run_dirs(out)
    layout = Layout(out / RESULTS)
    cache_dir = out / cache.CACHE_DIR
    known = keys or {}
    try:
        run_keys = [known[r.name] if r.name in known else cache.run_key(r) for r in rdirs]
        merged: list[Merged | None] = []
        for rdir, key in zip(rdirs, run_keys, strict=True):
            entry = cache.read_entry(cache_dir, rdir.name, key, layout.tokens(rdir.name))
            merged.append(Merged(entry.row, entry.epochs) if entry is not None else None)
        missed = [i for i, m in enumerate(merged) if m is None]
        fresh = _merge_runs(layout, cache_dir,
                            [_run_input(rdirs[i], run_keys[i]) for i in missed])
        for i, m in zip(missed, fresh, strict=True):
            merged[i] = m
        layout.commit()
    except BaseException:
        layout.abandon()
        raise
    merged_ids = {rdir.name for rdir in rdirs}

    def gone(run_id: str) -> bool:  # looked at now: a run a concurrent merge has just seen stays
        return run_id not in merged_ids and not (out / run_id / protocol.RUN_FILE).is_file()

    layout.prune(gone)
    cache.prune(cache_dir, gone)
    return _write_runs(out, merged)


def _run_input(rdir: Path, key: str | None) -> RunInput:
    sizes = [os.stat(p).st_size for _, p in protocol.rank_logs(rdir / protocol.RANKS_DIR)]
    return RunInput(rundir.read_run(rdir), rdir, rundir.read_record(rdir), key, sum(sizes))


class Layout:
    """Where a merge writes the per-run tables: ``results/<table>.parquet/``; where an older
    orch left that table as one file, a private directory beside it, which replaces the file
    once the merge has written every run (:meth:`commit`), or is removed (:meth:`abandon`)."""

    def __init__(self, results: Path) -> None:
        self.results = results
        self.dirs: dict[str, Path] = {}
        self.staged: dict[str, Path] = {}
        self.listed: dict[str, set[str]] = {}  # the files each directory had as it began
        for name in TABLES:
            final = results / f"{name}.parquet"
            if final.is_file():
                self.staged[name] = results / f".{name}.parquet.{os.getpid()}.new"
            self.dirs[name] = self.staged.get(name, final)
            try:
                self.listed[name] = set(os.listdir(self.dirs[name]))
            except OSError:
                self.listed[name] = set()

    def path(self, table: str, run_id: str) -> Path:
        return self.dirs[table] / f"{run_id}.parquet"

    def tokens(self, run_id: str) -> dict[str, cache.Token | None]:
        """Each table's file of the run as the merge began (None: none)."""
        return {name: cache.file_token(self.path(name, run_id))
                if f"{run_id}.parquet" in self.listed[name] else None for name in TABLES}

    def write(self, table: str, run_id: str, data: bytes | None) -> cache.Token | None:
        """The run's file of ``table`` written (``data``), or removed (None); its token."""
        path = self.path(table, run_id)
        if data is None:
            if path.name in self.listed[table]:
                files.remove(path)
            return None
        files.make_dirs(path.parent)
        files.write_bytes_if_changed(path, data)  # a run merged again to the same rows: kept
        return cache.file_token(path)

    def commit(self) -> None:
        """Each older single file replaced by the directory written in its place."""
        for name, staged in self.staged.items():
            final = self.results / f"{name}.parquet"
            self.dirs[name] = final
            if not final.is_file():  # a concurrent merge put its directory there first: its
                shutil.rmtree(staged, ignore_errors=True)  # runs are whole (ours: misses)
                continue
            files.make_dirs(staged)
            aside = self.results / f".{name}.parquet.{os.getpid()}.old"
            try:
                os.replace(final, aside)
                try:
                    os.replace(staged, final)
                except OSError:
                    if not final.is_dir():  # else a concurrent merge's, made between the two
                        os.replace(aside, final)  # the old file back in its place
                        raise
                    shutil.rmtree(staged, ignore_errors=True)
            except OSError as exc:
                raise files.WriteFailed(final, exc, verb="replace") from exc
            files.remove(aside)  # every row it held is in the directory now
        self.staged = {}

    def abandon(self) -> None:
        for staged in self.staged.values():
            shutil.rmtree(staged, ignore_errors=True)

    def prune(self, gone) -> None:
        """Remove the files of runs that are gone (``gone(run_id)``: true for those)."""
        for directory in self.dirs.values():
            try:
                names = os.listdir(directory)
            except OSError:
                continue
            for name in names:
                if name.endswith(".parquet") and not name.startswith(".") \
                        and gone(name[:-len(".parquet")]):
                    files.remove(directory / name)


def _merge_runs(layout: Layout, cache_dir: Path, inputs: list[RunInput]) -> list[Merged]:
    """Merge ``inputs`` batch by batch: each batch's files written (by a thread, while the
    next batch is parsed) with their cache entries. Returns each run's row and epochs."""
    out: list[Merged] = []
    with ThreadPoolExecutor(1) as thread:
        writing: Future | None = None
        for batch in _batches(inputs):
            stored = _merge_batch(batch)
            out += [Merged(s.row, s.epochs) for s in stored]
            if writing is not None:
                writing.result()  # one batch written while the next is parsed, no more
            writing = thread.submit(_store, layout, cache_dir, stored)
        if writing is not None:
            writing.result()
    return out


def _batches(inputs: list[RunInput]) -> Iterator[list[RunInput]]:
    """The runs in order, cut where their logs reach ``BATCH_BYTES``."""
    batch: list[RunInput] = []
    size = 0
    for run_input in inputs:
        batch.append(run_input)
        size += run_input.log_bytes
        if size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


@dataclass(frozen=True)
class _Stored:
    """A run merged now, as it is written: its per-run tables (None: it has none), its row."""

    run_input: RunInput
    iterations: pa.Table
    devices: pa.Table | None
    epochs: list[dict]
    row: dict


def _merge_batch(inputs: list[RunInput]) -> list[_Stored]:
    """A batch of runs parsed together; each run's rows, metrics, row and other tables."""
    scanned = gather.scan_runs_logs([i.rdir for i in inputs])
    table, counts = iteration_table.merged_iteration_table(
        [(i.run, logs) for i, logs in zip(inputs, scanned, strict=True)])
    metrics = _metrics(table, counts)
    out, start = [], 0
    for run_input, logs, count, run_metrics in zip(inputs, scanned, counts, metrics,
                                                   strict=True):
        for log in logs:  # their lines are in the table now: holding them would hold the files
            log.segments = []
        samples = devices.sample_table(run_input.run.run_id, run_input.rdir / protocol.RANKS_DIR)
        out.append(_Stored(run_input, table.slice(start, count),
                           samples if samples.num_rows else None, _epoch_rows(run_input),
                           _row(run_input, run_metrics, logs)))
        start += count
    return out


def _metrics(table: pa.Table, counts: list[int]) -> list[dict]:
    """Each run's metrics from its slice of the table (``counts``: rows per run, in order)."""
    if not counts:
        return []
    # host and window stay categorical (dictionary-encoded): no million strings
    frame = table.select(list(analyze.ITER_COLUMNS)).to_pandas()
    out, start = [], 0
    for count in counts:
        out.append(analyze.run_metrics(frame.iloc[start:start + count]))
        start += count
    return out


def _row(run_input: RunInput, metrics: dict, logs: list[RankLog]) -> dict:
    """A run's row of runs.parquet, before the columns that compare runs: its columns, metrics
    and the facts of its logs."""
    run, rdir = run_input.run, run_input.rdir
    info = run_columns(run, run_input.record, rdir)
    info.update(metrics)
    info.update(gather.footer_facts(logs))
    info.update(dimension_facts(run, logs))  # precision, compile, ...
    info.update(devices.run_facts(logs, rdir / protocol.RANKS_DIR))  # devices, binding
    info.update(fabric.attest(run, rdir, logs))
    info.update(workload.run_facts(run, rdir, logs, info))  # tokens/s, MFU, memory
    return info


def _epoch_rows(run_input: RunInput) -> list[dict]:
    """An epoch run's epoch records (convergence.epoch_rows); [] for a run of iterations."""
    run = run_input.run
    if run.epochs is None:
        return []
    logs = [protocol.read_rank_log(p)
            for _, p in protocol.rank_logs(run_input.rdir / protocol.RANKS_DIR)]
    return convergence.epoch_rows(run.run_id, run.mode, run.nodes, run.ranks, logs)


def _store(layout: Layout, cache_dir: Path, stored: list[_Stored]) -> None:
    """Write each run's files, then its cache entry (a run whose files may still change, with
    no key, gets none: it is merged again next time)."""
    for s in stored:
        run_id = s.run_input.rdir.name
        tokens = {
            "iterations": layout.write("iterations", run_id, files.parquet_bytes(
                s.iterations, **iteration_table.WRITE_OPTIONS)),
            "epochs": layout.write("epochs", run_id, files.parquet_bytes(
                convergence.epoch_table(s.epochs)) if s.epochs else None),
            "devices": layout.write("devices", run_id, files.parquet_bytes(s.devices)
                                    if s.devices is not None else None),
        }
        if s.run_input.key is not None:
            cache.write_entry(cache_dir, run_id, cache.CacheEntry(
                key=s.run_input.key, files=tokens, row=s.row, epochs=s.epochs))


def _write_runs(out: Path, merged: list[Merged]) -> pd.DataFrame:
    """runs.parquet: each run's row, with the columns that compare runs (scaling, invariants,
    convergence); not rewritten where it already holds exactly that."""
    runs_df = analyze.add_invariants(analyze.add_scaling(pd.DataFrame([m.row for m in merged])))
    runs_df = convergence.summarise(runs_df, convergence.epoch_frame(
        [row for m in merged for row in m.epochs]))
    if not runs_df.empty:
        files.make_dirs(out / RESULTS)
        # In the declared types (results.columns): a column no run has a value for is typed too.
        files.write_bytes_if_changed(out / RUNS, files.parquet_bytes(columns.arrow_table(runs_df)))
    return runs_df


# --- reading a result set --------------------------------------------------------------------

def table_files(path: Path, run_ids: list[str] | None = None) -> list[Path]:
    """The files of a per-run table ``path`` (``results/<table>.parquet``): its runs' files in
    the runs' order, or the one file an older orch wrote; [] where there is none.
    ``run_ids``: only those runs' (all of an older single file, which holds every run)."""
    if path.is_file():
        return [path]
    try:
        names = os.listdir(path)
    except OSError:
        return []
    stems = sorted(n[:-len(".parquet")] for n in names
                   if n.endswith(".parquet") and not n.startswith("."))
    if run_ids is not None:
        wanted = set(run_ids)
        stems = [s for s in stems if s in wanted]
    return [path / f"{s}.parquet" for s in stems]


def read_table(path: Path, columns: list[str] | None = None,
               run_ids: list[str] | None = None) -> pd.DataFrame | None:
    """A per-run table as one DataFrame, as ``pd.read_parquet`` reads it, runs in order
    (``run_ids``: those runs only); None where there is no such table or file."""
    found = table_files(path, run_ids)
    if not found:
        return None
    filters = [("run_id", "in", run_ids)] if run_ids is not None and path.is_file() else None
    return pd.read_parquet(found if len(found) > 1 else found[0], columns=columns,
                           filters=filters)
