"""Gather: read every rank log of a run, decide whether the run really succeeded, merge a sweep.

A scheduler's COMPLETED only means the job script exited 0. A run is COMPLETED for orch when
every rank wrote a header, every measured iteration and an ``ok`` footer, and (for synchronous
modes) all ranks ended with the same parameter checksum. Anything else is FAILED with a reason
taken from the logs, so a failure is data in the result set, not a guess.
"""

from __future__ import annotations

import io
import json
import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from . import files, protocol
from .protocol import PHASES, WINDOW, WINDOW_BREAKDOWN, WINDOW_NATIVE, RankLog, read_rank_log
from .sweep import Run
from .verdict import CHECKSUM_RTOL, failure_reason, read_run_logs, tail, verdict

__all__ = ["CHECKSUM_RTOL", "PHASES", "RankLog", "failure_reason", "merged_iteration_table",
           "read_rank_log", "read_run_logs", "scan_run_logs", "tail", "verdict"]


# --- merging -------------------------------------------------------------------------------

RUN_COLUMNS = ("run_id", "site", "partition", "interconnect", "mode", "framework", "launcher",
               "model", "dataset", "nodes", "tasks_per_node", "batch_size", "warmup", "repeat")


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
    [(c, pa.string()) for c in RUN_COLUMNS[:9]]
    + [(c, pa.int64()) for c in ("nodes", "tasks_per_node", "batch_size", "warmup", "repeat")]
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
    import pyarrow.compute as pc

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


def read_iterations(path: Path) -> pa.Table:
    """iterations.parquet in MERGE_SCHEMA."""
    return pq.read_table(path, read_dictionary=list(STRING_COLUMNS))


def write_parquet(table: pa.Table, path: Path) -> None:
    """Write an ITER_SCHEMA or MERGE_SCHEMA table; it reads back in ITER_SCHEMA."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Dictionary pages for the repeated strings only: trying them on every column (the
    # default) costs a third of the write on random floats, for nothing. Min/max statistics
    # for the numbers only: on the dictionary-encoded strings they cost a third of the write
    # (a comparison of strings per row), for a file of one row group.
    files.replace_with(path, lambda tmp: pq.write_table(
        table, tmp, use_dictionary=list(STRING_COLUMNS), store_schema=False,
        write_statistics=[f.name for f in ITER_SCHEMA if f.name not in STRING_COLUMNS]))


def footer_facts(logs: list[RankLog]) -> dict:
    """Per-run facts from the rank footers: memory, versions, checksum agreement."""
    footers = [log.footer for log in logs if log.footer]
    rss = [f.get("peak_rss_bytes") for f in footers if f.get("peak_rss_bytes")]
    device = [f.get("peak_device_bytes") for f in footers if f.get("peak_device_bytes")]
    sums = [f.get("param_checksum") for f in footers if f.get("param_checksum") is not None]
    first = footers[0] if footers else {}
    reasons = sorted({f[protocol.COMM_TOTAL_REASON] for f in footers
                      if f.get(protocol.COMM_TOTAL_REASON)})
    return {
        # Peak host memory per rank: the largest rank's and the mean over ranks.
        "peak_rss_bytes": max(rss) if rss else None,
        "peak_rss_bytes_mean": sum(rss) / len(rss) if rss else None,
        "peak_device_bytes": max(device) if device else None,  # GPU memory, where CUDA exists
        "peak_device_bytes_mean": sum(device) / len(device) if device else None,
        # Why the run has no t_comm_total (a mode that cannot see it), issue 14.
        protocol.COMM_TOTAL_REASON: "; ".join(reasons) if reasons else None,
        "versions": json.dumps(first.get("versions") or {}, sort_keys=True),
        "param_checksum": sums[0] if sums else None,
        "checksums_agree": (all(math.isclose(s, sums[0], rel_tol=CHECKSUM_RTOL, abs_tol=1e-9)
                                for s in sums) if sums else None),
    }



# --- fast merge ----------------------------------------------------------------------------
#
# ``read_rank_log`` + ``iteration_rows`` + ``iteration_table`` build one Python dict per
# iteration row: ~50 s for a sweep of 1,000 rank logs and 1,000,000 rows. The merge below
# builds the same table (same rows, order, values and schema) with Arrow's native readers:
#
# * each log's header and footer are parsed with ``protocol.parse_record`` as before; the lines
#   between them, the iteration records the harness writes (``{"type":"iter",...}``, one line
#   each), stay raw bytes, cut into segments of one shape: the native window's lines, then the
#   breakdown window's (their keys differ; a log of one window is one segment);
# * segments whose first line has the same keys form a group, parsed in one go by pyarrow's
#   multi-threaded CSV reader with ':' as the delimiter: cell k holds value k and the name of
#   key k+1 (``0.0123,"t_b"``). Each segment is preceded by a marker line (its first line with
#   ``M`` for ``{"type"``), so the rows of each segment are counted without counting lines;
# * every cell must end with the expected key name, which proves every line has exactly those
#   keys in that order; ``type``, ``window`` and ``warmup`` must be one of their literal values,
#   and numbers are cast with Arrow's exact (correctly rounded) number parsing;
# * a segment with a line that fails any of this goes with its whole log through the exact
#   slow path (``read_rank_log``): a malformed line is reported there as before. A line the CSV
#   reader cannot split (a torn or foreign line) makes the group be parsed again in halves
#   until the logs it is in are found.
#
# Arrow's number parser also takes a few spellings JSON does not (``+1``, ``01``, ``.5``,
# ``5.``, ``nan``); Python's json, which writes the logs, never writes them.

_ITER_PREFIX = b'{"type":"iter",'
_TYPE_CELL = b'{"type"'
_MARK_CELL = b"M"
_BREAKDOWN_AT = b'"' + WINDOW.encode() + b'":"' + WINDOW_BREAKDOWN.encode() + b'"'
# The iteration fields of ITER_SCHEMA as they are named in a log record (window and warmup are
# matched as literals, not cast).
_NUMBERS = {"iter": pa.int64(), "t_start": pa.float64(), "t_iter": pa.float64(),
            "samples": pa.int64(), "t_comm_total": pa.float64(),
            **{p: pa.float64() for p in PHASES}}
# Fields that may be JSON null (the slow path keeps the null); iter, t_start and t_iter may not.
_NULLABLE = ("samples", "t_comm_total", *PHASES)
# The iteration-level columns of ITER_SCHEMA, in its order.
_ITER_FIELDS = ("iter", "window", "warmup_iter", "t_start", "t_iter", "samples",
                "t_comm_total", *PHASES)
_THREADS = 2  # column work (checks, casts) in parallel; Arrow releases the GIL


@dataclass
class Segment:
    """Newline-separated iteration lines of one shape (``keys``, in order) of one log."""

    raw: bytes | memoryview
    keys: tuple[str, ...]
    first: bytes  # its first line


@dataclass
class ScannedLog:
    """One rank log: header/footer parsed (``log``); iteration lines raw (``segments``), or
    parsed in ``log.iters`` when the log was read the slow way."""

    path: Path
    log: RankLog
    segments: list[Segment] = field(default_factory=list)


def scan_rank_log(path: Path) -> ScannedLog:
    """Like :func:`read_rank_log`, but leaves the harness' iteration lines unparsed.

    A log that is not header, iteration lines, footer (or a torn last line) is read by
    :func:`read_rank_log` entirely, so rows of one log always come from one parser.
    """
    data = path.read_bytes()
    size = len(data) - 1 if data.endswith(b"\n") else len(data)  # without the final newline
    head_end = data.find(b"\n", 0, size)
    if head_end < 0:
        return _slow_scan(path)
    out = RankLog(rank=protocol.task_of(path.name))
    header = _loads(data[:head_end])
    if not (isinstance(header, dict) and header.get("type") == "header"):
        return _slow_scan(path)
    out.header = header
    tail_start = data.rfind(b"\n", 0, size) + 1
    last = data[tail_start:size]
    end = tail_start - 1  # the iteration lines end before the last line...
    if last.startswith(_ITER_PREFIX) and last.endswith(b"}"):
        end = size  # ... or include it (a rank killed between two records)
    else:
        rec = _loads(last)
        if rec is None and last.strip():  # torn by a kill mid-write: a problem, as before
            lineno = data.count(b"\n", 0, size) + 1
            out.problems.append(f"{path.name}:{lineno}: unreadable line")
        elif isinstance(rec, dict) and rec.get("type") == "footer":
            out.footer = rec
        elif last.strip():
            return _slow_scan(path)
    scanned = ScannedLog(path, out)
    start = head_end + 1
    view = memoryview(data)  # slices of it go from the file's buffer straight to the parser
    while start < end:  # one segment per window: native lines first, then breakdown
        if not data.startswith(_ITER_PREFIX, start):
            return _slow_scan(path)
        first_end = data.find(b"\n", start, end)
        first_end = end if first_end < 0 else first_end
        first = data[start:first_end]
        record = _loads(first)
        if not (isinstance(record, dict) and record.get("type") == protocol.ITER):
            return _slow_scan(path)
        stop = end
        if record.get(WINDOW) == WINDOW_NATIVE:
            switch = data.find(_BREAKDOWN_AT, first_end, end)
            if switch >= 0:
                stop = data.rfind(b"\n", first_end, switch)
        scanned.segments.append(Segment(view[start:stop], tuple(record), first))
        start = stop + 1
    return scanned


def _loads(line: bytes) -> object:
    return protocol.parse_record(line)


def _slow_scan(path: Path) -> ScannedLog:
    return ScannedLog(path, read_rank_log(path))


def scan_run_logs(rdir: Path) -> list[ScannedLog]:
    return [scan_rank_log(Path(p)) for _, p in protocol.rank_logs(rdir / protocol.RANKS_DIR)]


def scan_runs_logs(rdirs: list[Path]) -> list[list[ScannedLog]]:
    """:func:`scan_run_logs` of many runs, the files read by threads (reading releases the
    GIL, and page faults on fresh buffers are half of reading)."""
    paths = [[Path(p) for _, p in protocol.rank_logs(rdir / protocol.RANKS_DIR)]
             for rdir in rdirs]
    flat = [p for ps in paths for p in ps]
    if len(flat) < 8:
        scanned = [scan_rank_log(p) for p in flat]
    else:
        with ThreadPoolExecutor(4) as pool:
            scanned = list(pool.map(lambda p: scan_rank_log(p), flat))
    out, i = [], 0
    for ps in paths:
        out.append(scanned[i:i + len(ps)])
        i += len(ps)
    return out


def merged_iteration_table(
    runs: list[tuple[Run, list[ScannedLog]]],
) -> tuple[pa.Table, list[int]]:
    """The iteration table (in :data:`MERGE_SCHEMA`) of many runs, and each run's row count.

    Rows are in run, rank, line order: the table equals ``iteration_table`` of the
    ``iteration_rows`` of every run's ``read_run_logs``, concatenated (strings aside).
    """
    import numpy as np
    import pyarrow.compute as pc

    files = [(run, s) for run, scanned in runs for s in scanned]
    groups: dict[tuple[str, ...], list[tuple[int, int]]] = {}  # keys -> (file, segment)
    for i, (_, s) in enumerate(files):
        for j, seg in enumerate(s.segments):
            groups.setdefault(seg.keys, []).append((i, j))
    pool: list[pa.Table] = []  # iteration-level columns; rows are taken from them by place
    place: dict[tuple[int, int], tuple[int, int]] = {}  # (file, segment) -> (first row, n)
    slow: set[int] = set()
    base = 0
    with ThreadPoolExecutor(_THREADS) as threads:
        for keys, members in groups.items():
            batch = [files[i][0].batch_size for i, _ in members]
            table, places = _parse_group(keys, [files[i][1].segments[j] for i, j in members],
                                         batch, threads)
            for (i, j), (start, n) in zip(members, places, strict=True):
                if n < 0:
                    slow.add(i)
                else:
                    place[i, j] = (base + start, n)
            if table is not None:
                pool.append(table)
                base += table.num_rows
    starts: list[int] = []
    lengths: list[int] = []
    per_file: list[int] = []
    for i, (run, s) in enumerate(files):
        if i in slow:  # in place: the caller's logs get the slow parse's problems too
            s.log, s.segments = read_rank_log(s.path), []
        if not s.segments:
            table = iteration_table(iteration_rows(run, [s.log]) if s.log.iters else [])
            if table.num_rows:
                native = pc.equal(table.column(WINDOW), WINDOW_NATIVE)
                pool.append(table.select(list(_ITER_FIELDS)).set_column(
                    _ITER_FIELDS.index(WINDOW), WINDOW, native))
                starts.append(base)
                lengths.append(table.num_rows)
                base += table.num_rows
            per_file.append(table.num_rows)
            continue
        for j in range(len(s.segments)):
            start, count = place[i, j]
            starts.append(start)
            lengths.append(count)
        per_file.append(sum(lengths[len(lengths) - len(s.segments):]))
    total = sum(lengths)
    if not pool:
        values = as_merge_schema(iteration_table([])).select(list(_ITER_FIELDS))
    else:
        values = pool[0] if len(pool) == 1 else pa.concat_tables(pool)
        shift = np.cumsum([0, *lengths[:-1]]) - np.asarray(starts, dtype=np.int64)
        if shift.any() or values.num_rows != total:  # not already the rows, in file order
            index = np.arange(total, dtype=np.int64) - np.repeat(shift, lengths)
            values = values.take(pa.array(index))
        native = values.column(WINDOW).combine_chunks()  # native or not, until now
        window = pa.DictionaryArray.from_arrays(
            pc.cast(native, pa.int32()), pa.array([WINDOW_BREAKDOWN, WINDOW_NATIVE]))
        values = values.set_column(_ITER_FIELDS.index(WINDOW), WINDOW, window)
    table = _with_file_columns(values, files, np.asarray(per_file, dtype=np.int64))
    counts_by_run: dict[int, int] = {}
    for (run, _), n in zip(files, per_file, strict=True):
        counts_by_run[id(run)] = counts_by_run.get(id(run), 0) + n
    return table, [counts_by_run.get(id(run), 0) for run, _ in runs]


def _with_file_columns(values: pa.Table, files: list[tuple[Run, ScannedLog]],
                       per_file) -> pa.Table:
    """MERGE_SCHEMA table: the per-run and per-rank columns repeated over each log's rows."""
    import numpy as np
    import pyarrow.compute as pc

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
    columns["rank"] = repeat([s.log.rank for _, s in files], pa.int64())
    for name in ("host", "node", "node_rank"):
        columns[name] = repeat([(s.log.header or {}).get(name) for _, s in files],
                               ITER_SCHEMA.field(name).type)
    return pa.table([columns[f.name] if f.name in columns else values.column(f.name)
                     for f in MERGE_SCHEMA], schema=MERGE_SCHEMA)


class _Lines(io.RawIOBase):
    """A readable stream of byte chunks, without joining them in memory."""

    def __init__(self, chunks: list[bytes | memoryview]) -> None:
        self._parts = [memoryview(c).cast("B") for c in chunks]
        self._index = self._offset = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        out = memoryview(buffer).cast("B")
        filled = 0
        while filled < len(out) and self._index < len(self._parts):
            part = self._parts[self._index]
            n = min(len(out) - filled, len(part) - self._offset)
            out[filled:filled + n] = part[self._offset:self._offset + n]
            filled += n
            self._offset += n
            if self._offset == len(part):
                self._index, self._offset = self._index + 1, 0
        return filled


def _read_cells(keys: tuple[str, ...], segs: list[Segment]) -> pa.Table:
    """The ':'-separated cells of the segments' lines, each segment after its marker line."""
    import pyarrow.csv as pcsv

    chunks: list[bytes | memoryview] = []
    for seg in segs:
        chunks += [_MARK_CELL + seg.first[len(_TYPE_CELL):] + b"\n", seg.raw, b"\n"]
    names = [f"c{i}" for i in range(len(keys) + 1)]
    return pcsv.read_csv(
        pa.PythonFile(_Lines(chunks), mode="r"),
        read_options=pcsv.ReadOptions(column_names=names, block_size=4 << 20),
        parse_options=pcsv.ParseOptions(delimiter=":", quote_char=False, double_quote=False,
                                        escape_char=False, newlines_in_values=False),
        convert_options=pcsv.ConvertOptions(column_types=dict.fromkeys(names, pa.binary()),
                                            strings_can_be_null=False,
                                            quoted_strings_can_be_null=False),
    )


def _parse_group(keys: tuple[str, ...], segs: list[Segment], batch: list[int],
                 threads: ThreadPoolExecutor) -> tuple[pa.Table | None, list[tuple[int, int]]]:
    """The iteration-level columns (:data:`_ITER_FIELDS`) of segments that share their keys,
    and per segment (its first row in that table, its row count); count -1 for a segment the
    slow path must read. The table also holds rows that are no segment's (markers): callers
    take rows by those places. ``batch``: each segment's run's batch size (``samples``'
    default)."""
    try:
        cells = _read_cells(keys, segs)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        if len(segs) == 1:  # a line the CSV reader cannot split is in this segment
            return None, [(0, -1)]
        mid = len(segs) // 2
        a, places_a = _parse_group(keys, segs[:mid], batch[:mid], threads)
        b, places_b = _parse_group(keys, segs[mid:], batch[mid:], threads)
        shift = 0 if a is None else a.num_rows
        tables = [t for t in (a, b) if t is not None]
        return ((pa.concat_tables(tables) if tables else None),
                places_a + [(start + shift, n) for start, n in places_b])
    return _convert(keys, cells, len(segs), batch, threads)


def _convert(keys: tuple[str, ...], cells: pa.Table, nseg: int, batch: list[int],
             threads: ThreadPoolExecutor) -> tuple[pa.Table | None, list[tuple[int, int]]]:
    import numpy as np
    import pyarrow.compute as pc

    everything_slow = None, [(0, -1)] * nseg
    if keys[0] != "type" or cells.num_rows == 0:
        return everything_slow
    first = cells.column(0)
    marker = pc.equal(first, _MARK_CELL).to_numpy(zero_copy_only=False)
    seg_of_row = np.cumsum(marker) - 1
    if marker.sum() != nseg or not marker[0]:  # cannot be: every segment has its marker
        return everything_slow
    suffixes = [b"," + json.dumps(k).encode() for k in keys[1:]] + [b"}"]

    def check(k: int) -> tuple[pa.Array | None, object]:
        """Cell k+1: (rows where it is right, its value: text to cast, or a column)."""
        key, cell, end = keys[k], cells.column(k + 1), suffixes[k]
        if key == "type":
            return pc.equal(cell, b'"iter"' + end), None
        if key == WINDOW:
            native = pc.equal(cell, b'"' + WINDOW_NATIVE.encode() + b'"' + end)
            other = pc.equal(cell, b'"' + WINDOW_BREAKDOWN.encode() + b'"' + end)
            return pc.or_(native, other), native
        if key == "warmup":
            true = pc.equal(cell, b"true" + end)
            return pc.or_(true, pc.equal(cell, b"false" + end)), true
        return pc.ends_with(cell, end), pc.binary_slice(cell, 0, -len(end))

    checked = list(threads.map(check, range(len(keys))))
    ok = pc.or_(pc.equal(first, _TYPE_CELL), pc.equal(first, _MARK_CELL))
    for right, _ in checked:
        ok = pc.and_(ok, right)
    bad = np.zeros(nseg, dtype=bool)
    wrong = ~ok.to_numpy(zero_copy_only=False)
    if wrong.any():
        bad[np.unique(seg_of_row[wrong])] = True
    rows = np.bincount(seg_of_row, minlength=nseg) - 1  # each segment's marker is one
    texts = {keys[k]: value for k, (_, value) in enumerate(checked) if value is not None}
    while True:  # cast the rows of the good segments; a cast that fails finds its segments
        keep = None if not bad.any() else ~bad[seg_of_row]
        take = None if keep is None else pa.array(np.flatnonzero(keep))
        kept = {k: (v if take is None else v.take(take)) for k, v in texts.items()}
        values = dict(zip(kept, threads.map(lambda kv: _cast(*kv), kept.items()), strict=True))
        failed = [k for k, v in values.items() if v is None]
        if not failed:
            break
        before = bad.sum()
        for name in failed:  # rare: each segment's text on its own
            at = 0
            for s in np.flatnonzero(~bad):
                n = int(rows[s]) + 1
                if _cast(name, kept[name].slice(at, n)) is None:
                    bad[s] = True
                at += n
        if bad.sum() == before:  # cannot be; never loop
            return everything_slow
    at_row = np.cumsum(keep) - 1 if keep is not None else np.arange(len(marker))
    firsts = at_row[np.flatnonzero(marker)] + 1
    places = [(0, -1) if bad[s] else (int(firsts[s]), int(rows[s])) for s in range(nseg)]
    if bad.all():
        return None, places
    n_rows = len(next(iter(values.values()))) if values else int(
        len(marker) if keep is None else keep.sum())
    native = values.get(WINDOW)
    out: dict[str, pa.Array] = {
        "iter": values["iter"], "t_start": values["t_start"], "t_iter": values["t_iter"]}
    out["window"] = native if native is not None else pa.array(np.zeros(n_rows, dtype=bool))
    warm = values.get("warmup")
    out["warmup_iter"] = warm if warm is not None else pa.array(np.zeros(n_rows, dtype=bool))
    if "samples" in values:
        out["samples"] = values["samples"]
    else:
        segs_kept = seg_of_row if keep is None else seg_of_row[keep]
        out["samples"] = pa.array(np.asarray(batch, dtype=np.int64)[segs_kept])
    out["t_comm_total"] = values.get("t_comm_total", pa.nulls(n_rows, pa.float64()))
    for name in PHASES:
        if name in values:
            out[name] = values[name]
        elif native is None:
            out[name] = pa.array(np.zeros(n_rows))
        else:  # per row: null in the native window, 0.0 in the breakdown window
            out[name] = pc.if_else(native, pa.scalar(None, pa.float64()), 0.0)
    # "window" is still a bool (native or not) here: strings once, after rows are taken.
    return pa.table([out[name] for name in _ITER_FIELDS], names=list(_ITER_FIELDS)), places


def _cast(key: str, text: pa.Array) -> pa.Array | None:
    """The numbers of one field; None if a cell is not one (or, where the field may be null,
    not ``null`` either). A field orch does not read is checked, then dropped."""
    import pyarrow.compute as pc

    if key in (WINDOW, "warmup"):
        return text  # matched as literals already
    type_ = _NUMBERS.get(key, pa.float64())
    try:
        return pc.cast(text, type_)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    if key in _NUMBERS and key not in _NULLABLE:
        return None
    try:  # an explicit null: kept as null, as the slow path keeps it
        return pc.cast(pc.if_else(pc.equal(text, b"null"), pa.scalar(None, pa.binary()),
                                  text), type_)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
