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
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from . import files, protocol
from .protocol import PHASES, RankLog, read_rank_log
from .sweep import Run
from .verdict import CHECKSUM_RTOL, failure_reason, read_run_logs, tail, verdict

__all__ = ["CHECKSUM_RTOL", "PHASES", "RankLog", "failure_reason", "merged_iteration_table",
           "read_rank_log", "read_run_logs", "scan_run_logs", "tail", "verdict"]


# --- merging -------------------------------------------------------------------------------

RUN_COLUMNS = ("run_id", "site", "partition", "interconnect", "mode", "framework", "launcher",
               "model", "dataset", "nodes", "tasks_per_node", "batch_size", "warmup", "repeat")


def iteration_rows(run: Run, logs: list[RankLog]) -> list[dict]:
    rows = []
    for log in logs:
        header = log.header or {}
        for rec in log.iters:
            row = {c: getattr(run, c) for c in RUN_COLUMNS}
            row.update(
                ranks=run.ranks, rank=log.rank, host=header.get("host"),
                node=header.get("node"), node_rank=header.get("node_rank"),
                iter=rec["iter"], warmup_iter=bool(rec.get("warmup")), t_start=rec["t_start"],
                t_iter=rec["t_iter"], samples=rec.get("samples", run.batch_size),
                t_comm_total=rec.get("t_comm_total"),
                window=rec.get(protocol.WINDOW, protocol.WINDOW_BREAKDOWN),
            )
            for name in PHASES:
                row[name] = rec.get(name, 0.0)
            rows.append(row)
    return rows


ITER_SCHEMA = pa.schema(
    [(c, pa.string()) for c in RUN_COLUMNS[:9]]
    + [(c, pa.int64()) for c in ("nodes", "tasks_per_node", "batch_size", "warmup", "repeat")]
    + [("ranks", pa.int64()), ("rank", pa.int64()), ("host", pa.string()),
       ("node", pa.string()), ("node_rank", pa.int64()), ("iter", pa.int64()),
       ("warmup_iter", pa.bool_()), ("t_start", pa.float64()), ("t_iter", pa.float64()),
       ("samples", pa.int64()), ("t_comm_total", pa.float64())]
    + [(p, pa.float64()) for p in PHASES]
    + [("window", pa.string())]  # native | breakdown (protocol.WINDOWS, issue 14)
)


def iteration_table(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=ITER_SCHEMA)


def write_parquet(table: pa.Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Dictionary pages for the repeated strings only: trying them on every column (the
    # default) costs a third of the write on random floats, for nothing.
    strings = [f.name for f in table.schema if pa.types.is_string(f.type)]
    files.replace_with(path, lambda tmp: pq.write_table(table, tmp, use_dictionary=strings))


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
# builds the same table (same rows, order, values and schema) in a few seconds:
#
# * each log's header and footer are parsed with json.loads as before; the lines between them,
#   the iteration records the harness writes (``{"type":"iter",...}``, one line each, the same
#   keys in the same order on every line) stay raw bytes;
# * logs whose first iteration line has the same keys form a group, parsed in one go by
#   pyarrow's multi-threaded CSV reader with ':' as the delimiter: cell k holds value k and the
#   name of key k+1 (``0.0123,"t_b"``). Checking that every cell ends with the expected key name
#   proves every line has exactly those keys in that order; the values are cast with Arrow's
#   exact (correctly rounded) number parsing;
# * if that check fails, the group goes through pyarrow's JSON reader, and if a field the slow
#   path would fill with a default is missing or null there, or anything is malformed, through
#   the exact slow path. Per-run and per-rank columns are repeated with ``take``.

_ITER_PREFIX = b'{"type":"iter",'
# The iteration fields of ITER_SCHEMA as they are named in a log record.
_ITER_TYPES = {"iter": pa.int64(), "warmup": pa.bool_(), "t_start": pa.float64(),
               "t_iter": pa.float64(), "samples": pa.int64(), "t_comm_total": pa.float64(),
               **{p: pa.float64() for p in PHASES}, "window": pa.string()}
# Fields the slow path requires (KeyError) or fills with a default when missing: where one is
# missing or null the fast paths cannot tell which, so the slow path decides.
_NO_NULLS = ("iter", "t_start", "t_iter", "samples", *PHASES)


@dataclass
class ScannedLog:
    """One rank log: header/footer parsed (``log``); iteration lines raw, or in ``log.iters``.

    ``raw`` holds ``lines`` newline-separated iteration records the harness wrote, all starting
    with ``{"type":"iter",``; ``keys`` are the keys of the first one, in order.
    """

    path: Path
    log: RankLog
    raw: bytes | memoryview = b""
    lines: int = 0
    keys: tuple[str, ...] = ()


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
    start = head_end + 1
    if end <= start:
        return ScannedLog(path, out)
    if not data.startswith(_ITER_PREFIX, start):
        return _slow_scan(path)
    first_end = data.find(b"\n", start, end)
    record = _loads(data[start:first_end if first_end >= 0 else end])
    if not isinstance(record, dict):
        return _slow_scan(path)
    # A view, not a copy: the bytes go from the file's buffer straight to the parser.
    raw = memoryview(data)[start:end]
    return ScannedLog(path, out, raw, data.count(b"\n", start, end) + 1, tuple(record))


def _loads(line: bytes) -> object:
    return protocol.parse_record(line)


def _slow_scan(path: Path) -> ScannedLog:
    return ScannedLog(path, read_rank_log(path))


def scan_run_logs(rdir: Path) -> list[ScannedLog]:
    return [scan_rank_log(Path(p)) for _, p in protocol.rank_logs(rdir / protocol.RANKS_DIR)]


def merged_iteration_table(
    runs: list[tuple[Run, list[ScannedLog]]],
) -> tuple[pa.Table, list[int]]:
    """The iteration table (:data:`ITER_SCHEMA`) of many runs, and each run's row count.

    Rows are in run, rank, line order: the table equals ``iteration_table`` of the
    ``iteration_rows`` of every run's ``read_run_logs``, concatenated.
    """
    files = [(run, s) for run, scanned in runs for s in scanned]
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, (_, s) in enumerate(files):
        if s.raw:
            groups.setdefault(s.keys, []).append(i)
    fast: dict[int, tuple[pa.Table, int]] = {}  # file index -> (its group's table, offset)
    for members in groups.values():
        table = _parse_group([files[i] for i in members])
        if table is None:  # not exact this way: those logs are read the slow way
            for i in members:
                run, s = files[i]
                files[i] = (run, ScannedLog(s.path, read_rank_log(s.path)))
            continue
        offset = 0
        for i in members:
            fast[i] = (table, offset)
            offset += files[i][1].lines
    pieces: list[pa.Table] = []
    counts: dict[int, int] = {}
    for i, (run, s) in enumerate(files):
        if i in fast:
            table, offset = fast[i]
            pieces.append(table.slice(offset, s.lines))
        elif s.log.iters:
            pieces.append(iteration_table(iteration_rows(run, [s.log])))
        else:
            continue
        counts[id(run)] = counts.get(id(run), 0) + pieces[-1].num_rows
    per_run = [counts.get(id(run), 0) for run, _ in runs]
    if len(groups) == 1 and len(fast) == len(pieces):  # the usual case: one parse, in order
        return next(iter(fast.values()))[0], per_run
    if not pieces:
        return iteration_table([]), per_run
    return pa.concat_tables(pieces).combine_chunks(), per_run


def _parse_group(files: list[tuple[Run, ScannedLog]]) -> pa.Table | None:
    """ITER_SCHEMA table of logs whose iteration lines share their keys; None if not exact."""
    import numpy as np
    import pyarrow.compute as pc

    keys = files[0][1].keys
    rows = sum(s.lines for _, s in files)
    values = _parse_csv(_Lines([s.raw for _, s in files]), keys, rows)
    if values is None:
        values = _parse_json(b"\n".join(s.raw for _, s in files), rows)
    if values is None:
        return None
    index = pa.array(np.repeat(np.arange(len(files), dtype=np.int32),
                               [s.lines for _, s in files]))

    def per_file(items: list, type_: pa.DataType) -> pa.Array:
        return pc.take(pa.array(items, type=type_), index)

    if "samples" not in values:  # the slow path's default: the run's batch size
        values["samples"] = per_file([run.batch_size for run, _ in files], pa.int64())
    for name in PHASES:  # ... and 0.0 for a phase the workload does not time
        if name not in values:
            values[name] = pa.array(np.zeros(rows))
    if "t_comm_total" not in values:
        values["t_comm_total"] = pa.nulls(rows, pa.float64())
    window = values.get("window", pa.nulls(rows, pa.string()))
    values["window"] = (pc.fill_null(window, protocol.WINDOW_BREAKDOWN) if window.null_count
                        else window)
    warmup = values.get("warmup", pa.nulls(rows, pa.bool_()))
    values["warmup_iter"] = pc.fill_null(warmup, False) if warmup.null_count else warmup
    columns: dict[str, pa.Array] = {}
    for name in RUN_COLUMNS:
        columns[name] = per_file([getattr(run, name) for run, _ in files],
                                 ITER_SCHEMA.field(name).type)
    ranks = {id(run): run.ranks for run, _ in files}  # run.ranks builds the task table
    columns["ranks"] = per_file([ranks[id(run)] for run, _ in files], pa.int64())
    columns["rank"] = per_file([s.log.rank for _, s in files], pa.int64())
    for name in ("host", "node", "node_rank"):
        columns[name] = per_file([(s.log.header or {}).get(name) for _, s in files],
                                 ITER_SCHEMA.field(name).type)
    try:
        return pa.table([columns.get(f.name, values.get(f.name)) for f in ITER_SCHEMA],
                        schema=ITER_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return None


class _Lines(io.RawIOBase):
    """A readable stream of byte chunks joined by newlines, without joining them in memory."""

    def __init__(self, chunks: list[bytes | memoryview]) -> None:
        self._parts: list[memoryview] = []
        for i, chunk in enumerate(chunks):
            if i:
                self._parts.append(memoryview(b"\n"))
            self._parts.append(memoryview(chunk).cast("B"))
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


def _parse_csv(stream: io.RawIOBase, keys: tuple[str, ...],
               rows: int) -> dict[str, pa.Array] | None:
    """Parse lines that all have exactly ``keys`` in this order; None if any line does not."""
    import pyarrow.compute as pc
    import pyarrow.csv as pcsv

    names = [f"c{i}" for i in range(len(keys) + 1)]
    try:
        cells = pcsv.read_csv(
            pa.PythonFile(stream, mode="r"),
            read_options=pcsv.ReadOptions(column_names=names, block_size=8 << 20),
            parse_options=pcsv.ParseOptions(delimiter=":", quote_char=False,
                                            double_quote=False, escape_char=False),
            convert_options=pcsv.ConvertOptions(
                # Bytes are compared and cast to numbers below (a cast validates them).
                column_types=dict.fromkeys(names, pa.string()), check_utf8=False,
                strings_can_be_null=False, quoted_strings_can_be_null=False),
        )
        if cells.num_rows != rows:
            return None
        # Cell 0 is '{"type"'; cell k (k >= 1) is value k-1 then ',"<key k>"' (or '}').
        if not pc.all(pc.equal(cells.column(0), "{" + json.dumps(keys[0]))).as_py():
            return None
        out: dict[str, pa.Array] = {}
        for k, key in enumerate(keys):
            cell = cells.column(k + 1)
            suffix = "," + json.dumps(keys[k + 1]) if k + 1 < len(keys) else "}"
            if not pc.all(pc.ends_with(cell, suffix)).as_py():
                return None
            if key == "type" or key in _ITER_TYPES:
                text = pc.utf8_slice_codeunits(cell, 0, -len(suffix))
                if key == "type":
                    if not pc.all(pc.equal(text, '"iter"')).as_py():
                        return None
                elif key == "window":  # a JSON string: '"native"' -> 'native'
                    quoted = pa.array([json.dumps(w) for w in protocol.WINDOWS])
                    if not pc.all(pc.is_in(text, value_set=quoted)).as_py():
                        return None  # not one of protocol.WINDOWS: the slow path decides
                    out[key] = pc.utf8_slice_codeunits(text, 1, -1).combine_chunks()
                else:
                    out[key] = pc.cast(text, _ITER_TYPES[key]).combine_chunks()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    return out


def _parse_json(buf: bytes, rows: int) -> dict[str, pa.Array] | None:
    """pyarrow's JSON reader: any key order; None where the slow path must decide."""
    import pyarrow.compute as pc
    import pyarrow.json as pj

    try:
        parsed = pj.read_json(
            pa.BufferReader(buf),
            parse_options=pj.ParseOptions(
                explicit_schema=pa.schema([("type", pa.string()), *_ITER_TYPES.items()]),
                unexpected_field_behavior="ignore"),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if parsed.num_rows != rows or any(parsed.column(n).null_count for n in _NO_NULLS):
        return None
    windows = parsed.column("window").drop_null()  # an unknown window: the slow path
    if len(windows) and not pc.all(pc.is_in(windows, value_set=pa.array(
            protocol.WINDOWS))).as_py():
        return None
    kinds = parsed.column("type")  # a record of another type among them: the slow path
    if kinds.null_count or (parsed.num_rows and kinds.unique().to_pylist() != ["iter"]):
        return None
    return {name: parsed.column(name).combine_chunks() for name in _ITER_TYPES}
