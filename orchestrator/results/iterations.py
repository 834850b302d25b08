"""The iteration table: one row per (run, rank, iteration), its schema, and how it is built.

``iteration_rows`` + ``iteration_table`` build it row by row from parsed rank logs (the
reference); ``merged_iteration_table`` builds the same table from logs whose iteration lines
were left raw (``protocol.read_rank_log(..., raw_iters=True)``), with Arrow's native readers
(``iterlines``), ~25x faster; ``WRITE_OPTIONS`` say how the merge writes it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..protocol import (
    MAX_COUNT,
    PHASES,
    WINDOW,
    WINDOW_BREAKDOWN,
    WINDOW_NATIVE,
    RankLog,
    iteration_limit,
    read_rank_log,
)
from ..spec.api import Run, column_names
from . import iterlines
from .iterlines import ITER_FIELDS

# The Run fields each iteration row repeats (spec.api marks them), strings or whole numbers.
RUN_COLUMNS = column_names(iterations=True)


def phase_default(window: str) -> float | None:
    """A phase an ``iter`` record leaves out: 0.0 in the breakdown window (a phase the workload
    does not time), null in the native window (nothing there is split into phases)."""
    return None if window == WINDOW_NATIVE else 0.0


def iteration_rows(run: Run, logs: list[RankLog]) -> list[dict]:
    """The exact (row-by-row) iteration rows of parsed rank logs: the reference the fast merge
    below must equal."""
    rows = []
    for log in logs:
        header = log.header or {}
        for rec in log.iters:
            window = rec.get(WINDOW, WINDOW_BREAKDOWN)
            row = {c: getattr(run, c) for c in RUN_COLUMNS}
            row.update(
                ranks=run.ranks, rank=log.rank, host=header.get("host"),
                node=header.get("node"), node_rank=header.get("node_rank"),
                iter=rec["iter"], window=window, warmup_iter=bool(rec.get("warmup")),
                t_start=rec["t_start"], t_iter=rec["t_iter"],
                samples=rec.get("samples", run.batch_size),
                t_comm_total=rec.get("t_comm_total"),
            )
            default = phase_default(window)
            for name in PHASES:
                row[name] = rec.get(name, default)
            rows.append(row)
    return rows


ITER_SCHEMA = pa.schema(
    [(c, pa.int64() if c != "run_id" and Run.model_fields[c].annotation is int
      else pa.string()) for c in RUN_COLUMNS]
    + [("ranks", pa.int64()), ("rank", pa.int64()), ("host", pa.string()),
       ("node", pa.string()), ("node_rank", pa.int64()), ("iter", pa.int64()),
       ("window", pa.string()), ("warmup_iter", pa.bool_()), ("t_start", pa.float64()),
       ("t_iter", pa.float64()),
       ("samples", pa.int64()), ("t_comm_total", pa.float64())]
    + [(p, pa.float64()) for p in PHASES]
)


# In memory the merge keeps the string columns dictionary-encoded (a few distinct values over a
# million rows): repeating them per row, reading them back from iterations.parquet and writing
# them again is then a matter of indices. On disk they are plain Parquet strings
# (ITER_SCHEMA): the file is written without the Arrow schema, so every reader gets strings.
STRING_COLUMNS = tuple(f.name for f in ITER_SCHEMA if pa.types.is_string(f.type))
_DICT = pa.dictionary(pa.int32(), pa.string())
MERGE_SCHEMA = pa.schema([pa.field(f.name, _DICT) if f.name in STRING_COLUMNS else f
                          for f in ITER_SCHEMA])


def iteration_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=ITER_SCHEMA)


def as_merge_schema(table: pa.Table) -> pa.Table:
    """An ITER_SCHEMA (or MERGE_SCHEMA) table in MERGE_SCHEMA."""
    for name in STRING_COLUMNS:
        i = table.schema.get_field_index(name)
        if table.schema.field(i).type != _DICT:
            table = table.set_column(i, name, pc.dictionary_encode(table.column(i)))
    return table


def plain_strings(table: pa.Table) -> pa.Table:
    """Dictionary-encoded string columns back to strings (for pandas: str, not category)."""
    for i, f in enumerate(table.schema):
        if f.type == _DICT:
            table = table.set_column(i, f.name, table.column(i).cast(pa.string()))
    return table


# Dictionary pages for the repeated strings only: trying them on every column (the default)
# costs a third of the write on random floats, for nothing. Min/max statistics for the numbers
# only: on the dictionary-encoded strings they cost a third of the write (a comparison of
# strings per row). Without the Arrow schema, every reader gets plain strings (ITER_SCHEMA).
WRITE_OPTIONS = {"use_dictionary": list(STRING_COLUMNS), "store_schema": False,
                 "write_statistics": [f.name for f in ITER_SCHEMA
                                      if f.name not in STRING_COLUMNS]}


def merged_iteration_table(
    runs: list[tuple[Run, list[RankLog]]],
) -> tuple[pa.Table, list[int]]:
    """The iteration table (in :data:`MERGE_SCHEMA`) of many runs, and each run's row count.

    The logs were read with ``raw_iters``; one whose lines the fast parse cannot take exactly
    (or whose ``segments`` are None) is read again exactly, in its place in the run's list, so
    the caller's logs carry that parse's problems too. Rows are in run, rank, line order: the
    table equals ``iteration_table`` of the ``iteration_rows`` of every run's exactly read
    logs, concatenated (strings aside).
    """
    files = [(run, logs, k) for run, logs in runs for k in range(len(logs))]
    pool, place, slow = _parse_groups(files)
    base = sum(t.num_rows for t in pool)
    starts: list[int] = []
    lengths: list[int] = []
    per_file: list[int] = []
    for i, (run, logs, k) in enumerate(files):
        if i in slow:
            logs[k] = read_rank_log(logs[k].path)
        segments = logs[k].segments
        if i in slow or not segments:  # parsed exactly (or no iteration at all)
            exact = _exact_columns(run, logs[k])
            if exact.num_rows:
                pool.append(exact)
                starts.append(base)
                lengths.append(exact.num_rows)
                base += exact.num_rows
            per_file.append(exact.num_rows)
            continue
        for j in range(len(segments)):
            start, count = place[i, j]
            starts.append(start)
            lengths.append(count)
        per_file.append(sum(lengths[len(lengths) - len(segments):]))
    values = _in_file_order(pool, starts, lengths)
    table = _with_file_columns(values, [(run, logs[k]) for run, logs, k in files],
                               np.asarray(per_file, dtype=np.int64))
    counts_by_run: dict[int, int] = {}
    for (run, _, _), n in zip(files, per_file, strict=True):
        counts_by_run[id(run)] = counts_by_run.get(id(run), 0) + n
    return table, [counts_by_run.get(id(run), 0) for run, _ in runs]


def _parse_groups(files: list[tuple[Run, list[RankLog], int]]) -> tuple[
        list[pa.Table], dict[tuple[int, int], tuple[int, int]], set[int]]:
    """The segments of every log, parsed by groups of one shape: (the groups' tables, per
    (log, segment) its (first row, row count) in those tables concatenated, the logs that
    must be read exactly)."""
    groups: dict[tuple[str, ...], list[tuple[int, int]]] = {}  # keys -> (log, segment)
    slow: set[int] = set()
    for i, (_, logs, k) in enumerate(files):
        if logs[k].segments is None:
            slow.add(i)
            continue
        for j, seg in enumerate(logs[k].segments):
            groups.setdefault(seg.keys, []).append((i, j))
    pool: list[pa.Table] = []  # iteration-level columns; rows are taken from them by place
    place: dict[tuple[int, int], tuple[int, int]] = {}
    base = 0
    with ThreadPoolExecutor(iterlines.THREADS) as threads:
        for keys, members in groups.items():
            logs = [files[i][1][files[i][2]] for i, _ in members]
            segs = [log.segments[j] for log, (_, j) in zip(logs, members, strict=True)]
            batch = [files[i][0].batch_size for i, _ in members]
            limits = [MAX_COUNT if "epoch" in keys else iteration_limit(log.header)
                      for log in logs]
            table, places = iterlines.parse_group(keys, segs, batch, threads, limits)
            for (i, j), (start, n) in zip(members, places, strict=True):
                if n < 0:
                    slow.add(i)
                else:
                    place[i, j] = (base + start, n)
            if table is not None:
                pool.append(table)
                base += table.num_rows
    return pool, place, slow


def _exact_columns(run: Run, log: RankLog) -> pa.Table:
    """The iteration-level columns of an exactly parsed log (``window``: native or not)."""
    table = iteration_table(iteration_rows(run, [log]) if log.iters else [])
    native = pc.equal(table.column(WINDOW), WINDOW_NATIVE)
    return table.select(list(ITER_FIELDS)).set_column(ITER_FIELDS.index(WINDOW), WINDOW, native)


def _in_file_order(pool: list[pa.Table], starts: list[int], lengths: list[int]) -> pa.Table:
    """The rows ``starts[i]:starts[i] + lengths[i]`` of the pool, one piece after the other,
    with ``window`` as dictionary-encoded strings."""
    if not pool:
        return as_merge_schema(iteration_table([])).select(list(ITER_FIELDS))
    total = sum(lengths)
    values = pool[0] if len(pool) == 1 else pa.concat_tables(pool)
    shift = np.cumsum([0, *lengths[:-1]]) - np.asarray(starts, dtype=np.int64)
    if shift.any() or values.num_rows != total:  # not already the rows, in file order
        index = np.arange(total, dtype=np.int64) - np.repeat(shift, lengths)
        values = values.take(pa.array(index))
    native = values.column(WINDOW).combine_chunks()  # native or not, until now
    window = pa.DictionaryArray.from_arrays(
        pc.cast(native, pa.int32()), pa.array([WINDOW_BREAKDOWN, WINDOW_NATIVE]))
    return values.set_column(ITER_FIELDS.index(WINDOW), WINDOW, window)


def _with_file_columns(values: pa.Table, files: list[tuple[Run, RankLog]],
                       per_file) -> pa.Table:
    """MERGE_SCHEMA table: the per-run and per-rank columns repeated over each log's rows."""
    index = pa.array(np.repeat(np.arange(len(files), dtype=np.int32), per_file))

    def repeat(items: list, type_: pa.DataType) -> pa.Array:
        if type_ != pa.string():
            return pc.take(pa.array(items, type=type_), index)
        codes: dict = {}
        for item in items:
            if item is not None:
                codes.setdefault(item, len(codes))
        code = np.array([-1 if item is None else codes[item] for item in items],
                        dtype=np.int32)[index.to_numpy()]
        return pa.DictionaryArray.from_arrays(
            pa.array(code, mask=code < 0) if (code < 0).any() else pa.array(code),
            pa.array(list(codes), type=pa.string()))

    columns: dict[str, pa.Array] = {}
    for name in RUN_COLUMNS:
        columns[name] = repeat([getattr(run, name) for run, _ in files],
                               ITER_SCHEMA.field(name).type)
    ranks = {id(run): run.ranks for run, _ in files}  # run.ranks builds the task table
    columns["ranks"] = repeat([ranks[id(run)] for run, _ in files], pa.int64())
    columns["rank"] = repeat([log.rank for _, log in files], pa.int64())
    for name in ("host", "node", "node_rank"):
        columns[name] = repeat([(log.header or {}).get(name) for _, log in files],
                               ITER_SCHEMA.field(name).type)
    return pa.table([columns[f.name] if f.name in columns else values.column(f.name)
                     for f in MERGE_SCHEMA], schema=MERGE_SCHEMA)


