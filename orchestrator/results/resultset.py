"""The merge: a sweep directory's run directories -> results/iterations.parquet and
results/runs.parquet, read only (re-checking run records is :func:`runs.recheck`, run first).

The iteration lines of many rank logs are parsed together (``tables.merged_iteration_table``)
and each run's metrics come from its slice of that table: the same result set as building it
row by row, ~25x faster on big sweeps (benchmarks/merge_speed.py). It streams: runs are taken
in batches of about ``BATCH_BYTES`` of logs, each batch parsed, measured and appended to
iterations.parquet (by a thread, while the next batch is parsed: Arrow releases the GIL)
before the next is read, so memory stays that of one batch whatever the sweep's size.

Incremental (``cache``): a run whose inputs are those of its cache entry takes its rows from
the iterations.parquet written then and reads none of its logs; the result set is the same as
a merge without the cache.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .. import fabric, files, protocol, rundir
from ..protocol import RankLog
from ..rundir import JobRecord
from ..spec.api import Run
from . import analyze, cache, columns, convergence, devices, gather, tables
from .dimensions import dimension_facts
from .runs import run_columns

ITERATIONS = "results/iterations.parquet"
RUNS = "results/runs.parquet"
BATCH_BYTES = 64 << 20  # rank logs parsed at once: the merge's memory is about 5x this


@dataclass(frozen=True)
class RunInput:
    """A run directory as the merge reads it (nothing of its logs but their key and size)."""

    run: Run
    rdir: Path
    record: JobRecord | None
    key: str | None  # cache.inputs_key: None while a log may still be changing
    log_bytes: int


@dataclass(frozen=True)
class RunPart:
    """What the merge learnt of a run: its rows' count, its metrics, its logs (headers,
    footers, problems; from its cache entry when it came from there)."""

    count: int
    metrics: dict
    logs: list[RankLog]
    cached: cache.CacheEntry | None = None


def merge(out: Path) -> pd.DataFrame:
    """Read every run of ``out``, write both Parquet files, return the runs table."""
    inputs = [_run_input(rdir) for rdir in rundir.run_dirs(out)]
    parquet = out / ITERATIONS
    hits = _cache_hits(out / cache.CACHE_DIR, inputs, parquet)
    if _unchanged(hits, parquet):  # iterations.parquet is already this table, row for row
        parts = [RunPart(h.count, h.metrics, [log.rank_log() for log in h.logs], h)
                 for h in hits if h is not None]
    else:
        parts = []
        parquet.parent.mkdir(parents=True, exist_ok=True)
        files.replace_with(parquet, lambda tmp: parts.extend(
            _write_iterations(tmp, parquet, inputs, hits)))
    _write_cache(out / cache.CACHE_DIR, inputs, parts, cache.file_token(parquet))
    return _write_runs(out, inputs, parts)


def _run_input(rdir: Path) -> RunInput:
    sizes = [os.stat(p).st_size for _, p in protocol.rank_logs(rdir / protocol.RANKS_DIR)]
    return RunInput(rundir.read_run(rdir), rdir, rundir.read_record(rdir),
                    cache.inputs_key(rdir), sum(sizes))


def _cache_hits(cache_dir: Path, inputs: list[RunInput],
                parquet: Path) -> list[cache.CacheEntry | None]:
    """Each run's cache entry where it holds and its rows are in iterations.parquet."""
    generation = cache.file_token(parquet)
    hits = [cache.read_entry(cache_dir, i.run.run_id, i.key, generation) for i in inputs]
    if not any(hits):
        return hits
    try:
        rows = pq.read_metadata(parquet).num_rows
    except (OSError, pa.ArrowInvalid):
        return [None] * len(hits)
    return [h if h is not None and h.offset + h.count <= rows else None for h in hits]


def _unchanged(hits: list[cache.CacheEntry | None], parquet: Path) -> bool:
    """Every run from the cache, at the place it has in iterations.parquet, which has no
    other row."""
    offset = 0
    for h in hits:
        if h is None or h.offset != offset:
            return False
        offset += h.count
    return bool(hits) and pq.read_metadata(parquet).num_rows == offset


def _write_iterations(tmp: Path, parquet: Path, inputs: list[RunInput],
                      hits: list[cache.CacheEntry | None]) -> list[RunPart]:
    """Write the iteration table of every run to ``tmp``, batch by batch (``parquet``: the
    file the cache hits' rows are in); return each run's part."""
    parts: list[RunPart] = []
    old = _OldRows(parquet) if any(hits) else None
    with pq.ParquetWriter(tmp, tables.MERGE_SCHEMA, **tables.WRITE_OPTIONS) as writer, \
            ThreadPoolExecutor(1) as thread:
        writing: Future | None = None
        for batch in _batches(inputs, hits):
            table, batch_parts = _merge_batch([inputs[i] for i in batch],
                                              [hits[i] for i in batch], old)
            parts += batch_parts
            if writing is not None:
                writing.result()  # one batch written while the next is parsed, no more
            writing = thread.submit(writer.write_table, table) if table.num_rows else None
        if writing is not None:
            writing.result()
    return parts


def _batches(inputs: list[RunInput], hits: list[cache.CacheEntry | None]) -> Iterator[list[int]]:
    """The runs' indices in order, cut where the logs to read reach ``BATCH_BYTES``."""
    batch: list[int] = []
    size = 0
    for i, (run_input, hit) in enumerate(zip(inputs, hits, strict=True)):
        batch.append(i)
        size += run_input.log_bytes if hit is None else 0
        if size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _merge_batch(inputs: list[RunInput], hits: list[cache.CacheEntry | None],
                 old: _OldRows | None) -> tuple[pa.Table, list[RunPart]]:
    """The iteration table of a batch of runs (MERGE_SCHEMA), and each run's part: the runs
    without a cache hit parsed together, those with one taken from the old file."""
    todo = [k for k, hit in enumerate(hits) if hit is None]
    scanned = gather.scan_runs_logs([inputs[k].rdir for k in todo])
    table, counts = tables.merged_iteration_table(
        [(inputs[k].run, logs) for k, logs in zip(todo, scanned, strict=True)])
    metrics = _metrics(table, counts)
    for logs in scanned:  # their lines are in the table now: holding them would hold the files
        for log in logs:
            log.segments = []
    pieces: list[pa.Table] = []
    parts: list[RunPart] = []
    start = 0
    parsed = iter(zip(scanned, counts, metrics, strict=True))
    for hit in hits:
        if hit is None:
            logs, count, run_metrics = next(parsed)
            pieces.append(table.slice(start, count))
            parts.append(RunPart(count, run_metrics, logs))
            start += count
        else:
            pieces.append(old.rows(hit.offset, hit.count))
            parts.append(RunPart(hit.count, hit.metrics,
                                 [log.rank_log() for log in hit.logs], hit))
    if len(todo) == len(hits):
        return table, parts
    return pa.concat_tables(pieces), parts


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


class _OldRows:
    """Rows of the iterations.parquet a merge replaces, read a row group at a time."""

    def __init__(self, path: Path) -> None:
        self._file = pq.ParquetFile(path, read_dictionary=list(tables.STRING_COLUMNS))
        meta = self._file.metadata
        self._starts = [0]
        for g in range(meta.num_row_groups):
            self._starts.append(self._starts[-1] + meta.row_group(g).num_rows)
        self._group: tuple[int, pa.Table] | None = None

    def rows(self, offset: int, count: int) -> pa.Table:
        """Rows ``offset:offset + count`` (MERGE_SCHEMA)."""
        pieces = []
        while count > 0:
            g = next(k for k in range(len(self._starts) - 1) if self._starts[k + 1] > offset)
            if self._group is None or self._group[0] != g:
                self._group = (g, self._file.read_row_group(g))
            at = offset - self._starts[g]
            piece = self._group[1].slice(at, min(count, self._starts[g + 1] - offset))
            pieces.append(piece)
            offset += piece.num_rows
            count -= piece.num_rows
        if not pieces:
            return tables.as_merge_schema(tables.iteration_table([]))
        return pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)


def _write_cache(cache_dir: Path, inputs: list[RunInput], parts: list[RunPart],
                 generation: cache.Token | None) -> None:
    """An entry per run that has a key, rewritten where it changed; entries of runs gone go."""
    offset = 0
    for run_input, part in zip(inputs, parts, strict=True):
        old = part.cached
        if run_input.key is not None and generation is not None and (
                old is None or old.parquet != generation or old.offset != offset):
            cache.write_entry(cache_dir, run_input.run.run_id, cache.CacheEntry(
                key=run_input.key, parquet=generation, offset=offset, count=part.count,
                metrics=part.metrics, logs=[cache.CachedLog.of(log) for log in part.logs]))
        offset += part.count
    cache.prune(cache_dir, {i.run.run_id for i in inputs})


def _write_runs(out: Path, inputs: list[RunInput], parts: list[RunPart]) -> pd.DataFrame:
    """runs.parquet: each run's columns, metrics and facts of its logs; scaling, invariants,
    convergence."""
    rows = []
    for run_input, part in zip(inputs, parts, strict=True):
        run, rdir, logs = run_input.run, run_input.rdir, part.logs
        info = run_columns(run, run_input.record, rdir)
        info.update(part.metrics)
        info.update(gather.footer_facts(logs))
        info.update(dimension_facts(run, logs))  # precision, compile, ...
        info.update(devices.run_facts(logs))  # device metrics and binding
        info.update(fabric.attest(run, rdir, logs))
        rows.append(info)
    runs_df = analyze.add_invariants(analyze.add_scaling(pd.DataFrame(rows)))
    runs_df = convergence.write(out, runs_df)  # epoch runs: epochs.parquet, time to accuracy
    devices.write_samples(out, [(i.run.run_id, i.rdir) for i in inputs])  # devices.parquet
    if not runs_df.empty:
        # In the declared types (results.columns): a column no run has a value for is typed too.
        table = columns.arrow_table(runs_df)
        files.replace_with(out / RUNS, lambda tmp: pq.write_table(table, tmp))
    return runs_df
