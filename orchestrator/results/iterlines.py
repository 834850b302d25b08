"""The fast parse of raw ``iter`` lines: many logs' segments of one shape in one go.

``protocol.read_rank_log`` + ``tables.iteration_rows`` + ``tables.iteration_table`` build one
Python dict per iteration row: ~50 s for a sweep of 1,000 rank logs and 1,000,000 rows. This
builds the same columns (same rows, order, values and types) with Arrow's native readers:

* ``protocol.scan_lines`` parses each log's header and footer; the lines between them, the
  iteration records the harness writes (``{"type":"iter",...}``, one line each), stay raw
  bytes, cut into segments of one shape: the native window's lines, then the breakdown
  window's (their keys differ; a log of one window is one segment);
* segments whose first line has the same keys form a group, parsed in one go by pyarrow's
  multi-threaded CSV reader with ':' as the delimiter: cell k holds value k and the name of
  key k+1 (``0.0123,"t_b"``). Each segment is preceded by a marker line (its first line with
  ``M`` for ``{"type"``), so the rows of each segment are counted without counting lines;
* every cell must end with the expected key name, which proves every line has exactly those
  keys in that order; ``type``, ``window`` and ``warmup`` must be one of their literal values,
  every other value must be spelled as a JSON number (:data:`JSON_NUMBER`; or ``null`` where
  the reference reader takes one), and numbers are cast with Arrow's exact (correctly rounded)
  number parsing. Arrow's parser alone also takes spellings JSON does not (``+1``, ``01``,
  ``.5``, ``5.``, ``nan``, ``0x10``): the reference reader finds no record in such a line;
* every value must be one the reference reader keeps (:func:`possible`: finite numbers, a
  positive ``t_iter``, durations not negative, a positive sample count, an iteration number
  below its header's limit): a line with one it would refuse (``protocol.impossible``) or
  might refuse (a zero sample count: that depends on the log's other lines) goes the slow way;
* a segment with a line that fails any of this goes with its whole log through the exact
  slow path (``protocol.read_rank_log`` without ``raw_iters``): a malformed line is reported
  there as before, an impossible value as a violation. A line the CSV reader cannot split (a
  torn or foreign line) makes the group be parsed again in halves until the logs it is in
  are found.

So the fast path takes a line only where the reference reader takes it, with the same values
(tests/test_gather_fast.py mutates real rank logs to check it).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv

from ..protocol import (
    DURATIONS,
    MAX_COUNT,
    MAX_LINE_BYTES,
    PHASES,
    WINDOW,
    WINDOW_BREAKDOWN,
    WINDOW_NATIVE,
    Segment,
)

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
ITER_FIELDS = ("iter", "window", "warmup_iter", "t_start", "t_iter", "samples",
                "t_comm_total", *PHASES)
THREADS = 2  # column work (checks, casts) in parallel; Arrow releases the GIL
# A number as JSON spells it (RFC 8259), whole numbers for the integer fields; ``null`` where a
# field may be null (every field but iter, t_start and t_iter).
JSON_NUMBER = r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?"
JSON_INTEGER = r"-?(0|[1-9][0-9]*)"


def _spelling(key: str) -> str:
    """The regular expression a value of ``key`` must match whole."""
    number = JSON_INTEGER if _NUMBERS.get(key) == pa.int64() else JSON_NUMBER
    nullable = key in _NULLABLE or key not in _NUMBERS
    return f"^({number}|null)$" if nullable else f"^{number}$"


def _read_cells(keys: tuple[str, ...], segs: list[Segment]) -> pa.Table:
    """The ':'-separated cells of the segments' lines, each segment after its marker line.

    The lines are joined into one buffer (a batch of the merge's: tens of MB) that Arrow's
    reader splits into blocks for its threads; read through a Python file object instead,
    every block would be copied under the GIL, one reader at a time."""
    chunks: list[bytes | memoryview] = []
    for seg in segs:
        chunks += [_MARK_CELL + seg.first[len(_TYPE_CELL):] + b"\n", seg.raw, b"\n"]
    names = [f"c{i}" for i in range(len(keys) + 1)]
    return pcsv.read_csv(
        pa.BufferReader(b"".join(chunks)),
        read_options=pcsv.ReadOptions(column_names=names, block_size=4 << 20),
        parse_options=pcsv.ParseOptions(delimiter=":", quote_char=False, double_quote=False,
                                        escape_char=False, newlines_in_values=False),
        convert_options=pcsv.ConvertOptions(column_types=dict.fromkeys(names, pa.binary()),
                                            strings_can_be_null=False,
                                            quoted_strings_can_be_null=False),
    )


def parse_group(keys: tuple[str, ...], segs: list[Segment], batch: list[int],
                 threads: ThreadPoolExecutor, limits: list[int] | None = None
                 ) -> tuple[pa.Table | None, list[tuple[int, int]]]:
    """The iteration-level columns (:data:`ITER_FIELDS`) of segments that share their keys,
    and per segment (its first row in that table, its row count); count -1 for a segment the
    slow path must read. The table also holds rows that are no segment's (markers): callers
    take rows by those places. ``batch``: each segment's run's batch size (``samples``'
    default); ``limits``: each segment's iteration limit (``protocol.iteration_limit`` of its
    log's header; none given: MAX_COUNT)."""
    limits = [MAX_COUNT] * len(segs) if limits is None else limits
    try:
        cells = _read_cells(keys, segs)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        if len(segs) == 1:  # a line the CSV reader cannot split is in this segment
            return None, [(0, -1)]
        mid = len(segs) // 2
        a, places_a = parse_group(keys, segs[:mid], batch[:mid], threads, limits[:mid])
        b, places_b = parse_group(keys, segs[mid:], batch[mid:], threads, limits[mid:])
        shift = 0 if a is None else a.num_rows
        tables = [t for t in (a, b) if t is not None]
        return ((pa.concat_tables(tables) if tables else None),
                places_a + [(start + shift, n) for start, n in places_b])
    return _convert(keys, cells, len(segs), batch, threads, limits)


def _convert(keys: tuple[str, ...], cells: pa.Table, nseg: int, batch: list[int],
             threads: ThreadPoolExecutor, limits: list[int]
             ) -> tuple[pa.Table | None, list[tuple[int, int]]]:
    """:func:`parse_group`'s answer from the cells of its segments' lines."""
    everything_slow = None, [(0, -1)] * nseg
    if keys[0] != "type" or cells.num_rows == 0:
        return everything_slow
    first = cells.column(0)
    marker = pc.equal(first, _MARK_CELL).to_numpy(zero_copy_only=False)
    seg_of_row = np.cumsum(marker) - 1
    if marker.sum() != nseg or not marker[0]:  # cannot be: every segment has its marker
        return everything_slow
    ok, texts = _check_cells(keys, cells, threads)
    bad = np.zeros(nseg, dtype=bool)
    wrong = ~ok.to_numpy(zero_copy_only=False)
    if wrong.any():
        bad[np.unique(seg_of_row[wrong])] = True
    rows = np.bincount(seg_of_row, minlength=nseg) - 1  # each segment's marker is one
    limit_of_row = np.asarray(limits, dtype=np.int64)[seg_of_row]
    cast = _cast_good_segments(texts, bad, seg_of_row, rows, threads, limit_of_row)
    if cast is None:
        return everything_slow
    values, keep = cast
    at_row = np.cumsum(keep) - 1 if keep is not None else np.arange(len(marker))
    firsts = at_row[np.flatnonzero(marker)] + 1
    places = [(0, -1) if bad[s] else (int(firsts[s]), int(rows[s])) for s in range(nseg)]
    if bad.all():
        return None, places
    n_rows = len(next(iter(values.values()))) if values else int(
        len(marker) if keep is None else keep.sum())
    segs_kept = seg_of_row if keep is None else seg_of_row[keep]
    return _iteration_columns(values, n_rows, np.asarray(batch, dtype=np.int64)[segs_kept]), \
        places


def _check_cells(keys: tuple[str, ...], cells: pa.Table,
                 threads: ThreadPoolExecutor) -> tuple[pa.Array, dict[str, pa.Array]]:
    """(rows whose every cell is as its key says, per key the text to cast or a column)."""
    suffixes = [b"," + json.dumps(k).encode() for k in keys[1:]] + [b"}"]

    def check(k: int) -> tuple[pa.Array, pa.Array | None]:
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
        value = pc.binary_slice(cell, 0, -len(end))
        return pc.and_(pc.ends_with(cell, end),
                       pc.match_substring_regex(value, _spelling(key))), value

    checked = list(threads.map(check, range(len(keys))))
    first = cells.column(0)
    ok = pc.or_(pc.equal(first, _TYPE_CELL), pc.equal(first, _MARK_CELL))
    ok = pc.and_(ok, _within_line_bound(cells))
    for right, _ in checked:
        ok = pc.and_(ok, right)
    return ok, {keys[k]: value for k, (_, value) in enumerate(checked) if value is not None}


def _within_line_bound(cells: pa.Table) -> pa.Array:
    """Rows whose line is at most ``protocol.MAX_LINE_BYTES``: a longer one goes with its log
    to the slow path, which reports it as damaged (taken from the cells' offsets, no scan)."""
    length = pc.binary_length(cells.column(0))
    for k in range(1, cells.num_columns):
        length = pc.add(length, pc.binary_length(cells.column(k)))
    return pc.less_equal(length, MAX_LINE_BYTES - (cells.num_columns - 1))  # and the ':'s


def _cast_good_segments(texts: dict[str, pa.Array], bad, seg_of_row, rows,
                        threads: ThreadPoolExecutor,
                        limit_of_row) -> tuple[dict, object] | None:
    """The values of the rows of the segments not ``bad`` (marked in place: a segment with a
    cell that is no number, or with a value the reference reader would not keep, becomes
    bad), and which rows those are (None: all); None if that cannot be settled."""
    while True:
        keep = None if not bad.any() else ~bad[seg_of_row]
        take = None if keep is None else pa.array(np.flatnonzero(keep))
        kept = {k: (v if take is None else v.take(take)) for k, v in texts.items()}
        values = dict(zip(kept, threads.map(lambda kv: _cast(*kv), kept.items()), strict=True))
        failed = [k for k, v in values.items() if v is None]
        before = bad.sum()
        if not failed:
            limit = limit_of_row if keep is None else limit_of_row[keep]
            wrong = ~possible(values, limit)
            if not wrong.any():
                return values, keep
            segs = seg_of_row if keep is None else seg_of_row[keep]
            bad[np.unique(segs[wrong])] = True
        for name in failed:  # rare: each segment's text on its own
            at = 0
            for s in np.flatnonzero(~bad):
                n = int(rows[s]) + 1
                if _cast(name, kept[name].slice(at, n)) is None:
                    bad[s] = True
                at += n
        if bad.sum() == before:  # cannot be; never loop
            return None


def possible(values: dict[str, pa.Array], limit) -> np.ndarray:
    """Rows whose every value the reference reader keeps (``protocol.impossible``), and whose
    sample count is not 0 (a log's zero counts are judged by its other lines: the slow path
    does it). ``limit``: each row's iteration limit."""
    ok = np.ones(len(next(iter(values.values()))), dtype=bool)
    for key, column in values.items():
        if key in (WINDOW, "warmup"):
            continue
        x = column.to_numpy(zero_copy_only=False)
        if key == "iter":
            ok &= (x >= 0) & (x < limit)
        elif key == "samples":
            x = column.fill_null(1).to_numpy()
            ok &= (x > 0) & (x <= MAX_COUNT)
        elif key == "t_iter":
            ok &= np.isfinite(x) & (x > 0) & (x <= MAX_COUNT)
        else:  # a duration: never negative; any other number: finite (null stays null: NaN)
            nulls = column.is_null().to_numpy(zero_copy_only=False)
            fine = (np.abs(x) <= MAX_COUNT) & ((x >= 0) | (key not in DURATIONS))
            ok &= fine | nulls
    return ok


def _iteration_columns(values: dict[str, pa.Array], n_rows: int, batch_of_row) -> pa.Table:
    """The :data:`ITER_FIELDS` columns from the cast values, defaults where a key is absent
    (``samples``: the run's batch size, ``batch_of_row``; phases: 0.0, null in the native
    window)."""
    native = values.get(WINDOW)
    no = pa.array(np.zeros(n_rows, dtype=bool))
    out: dict[str, pa.Array] = {
        "iter": values["iter"], "t_start": values["t_start"], "t_iter": values["t_iter"],
        "window": native if native is not None else no,
        "warmup_iter": values.get("warmup", no),
        "samples": values["samples"] if "samples" in values else pa.array(batch_of_row),
        "t_comm_total": values.get("t_comm_total", pa.nulls(n_rows, pa.float64()))}
    for name in PHASES:
        if name in values:
            out[name] = values[name]
        elif native is None:
            out[name] = pa.array(np.zeros(n_rows))
        else:  # per row: null in the native window, 0.0 in the breakdown window
            out[name] = pc.if_else(native, pa.scalar(None, pa.float64()), 0.0)
    # "window" is still a bool (native or not) here: strings once, after rows are taken.
    return pa.table([out[name] for name in ITER_FIELDS], names=list(ITER_FIELDS))


def _cast(key: str, text: pa.Array) -> pa.Array | None:
    """The numbers of one field; None if a cell is not one (or, where the field may be null,
    not ``null`` either). A field orch does not read is checked, then dropped."""
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
