"""The results history: every recorded sweep's samples (:mod:`.samples`), kept forever.

Layout of the store (``--history DIR``, ``$ORCH_HISTORY``, default
``~/.local/share/orch/history``)::

    entries/<id>.parquet   one file per recorded sweep: its sample table, with each run's
                           orch commit, framework versions, image digest and date; written
                           beside its place and renamed into it, never rewritten
    index.jsonl            one JSON line per entry (what ``orch history list`` filters on),
                           appended under an exclusive lock in one write

Parquet files, not SQLite: an entry is the sample table ``orch compare`` reads, in the format
the result sets already use (pandas, DuckDB), and an append is a new file plus one line, so no
write ever touches what is already there; SQLite would rewrite pages of a shared file, and a
store on a cluster's NFS home is where its locking is least trusted. A damaged index line (a
crash mid-append) or an unreadable entry file is skipped and reported, never fatal, and the
entries before it stay readable.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
from pydantic import BaseModel, ConfigDict, ValidationError

from .. import files
from ..errors import UserError
from .samples import key_columns

INDEX = "index.jsonl"
ENTRIES = "entries"
FILTERS = ("site", "partition", "mode", "model")  # index fields that are lists of values
_AGE = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def default_root() -> Path:
    """``$ORCH_HISTORY``, else ``$XDG_DATA_HOME/orch/history`` (``~/.local/share``)."""
    if os.environ.get("ORCH_HISTORY"):
        return Path(os.environ["ORCH_HISTORY"]).expanduser()
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "orch" / "history"


def parse_age(text: str, what: str = "--since") -> float:
    """'30d', '12h', '2w', '90m', '45s' -> seconds."""
    m = _AGE.match(text.strip())
    if not m:
        raise UserError(f"{what} {text}: give an age like 30d, 12h, 2w, 90m")
    return float(m.group(1)) * _SECONDS[m.group(2)]


class Entry(BaseModel):
    """One recorded sweep, as its index line says."""

    model_config = ConfigDict(frozen=True)

    id: str
    file: str
    sha256: str
    added_at: float
    measured_at: float  # the earliest run's preparation: when the sweep was measured
    sweep: str
    runs: int
    configurations: int
    site: list[str]
    partition: list[str]
    mode: list[str]
    model: list[str]
    commits: list[str]

    @classmethod
    def from_line(cls, line: str) -> Entry | None:
        """The entry of an index line; None for a damaged one (cut short by a crash)."""
        try:
            return cls.model_validate_json(line)
        except ValidationError:
            return None


def with_provenance(table: pd.DataFrame, sweep: Path, runs: pd.DataFrame) -> pd.DataFrame:
    """The sample table with each run's orch commit, versions, image digest and date."""
    # Imported here: reading a history (orch compare) needs neither, and provenance's imports
    # (the site, the renderer, container checks) were a tenth of that command's time.
    from .. import provenance, rundir

    meta = []
    for rdir in rundir.run_dirs(sweep):
        prov = provenance.read(rdir) or {}
        orch = prov.get("orch") or {}
        meta.append({"run_id": rdir.name, "commit": orch.get("git_commit") or "",
                     "dirty": bool(orch.get("git_dirty")),
                     "image_digest": (prov.get("container") or {}).get("digest") or "",
                     "measured_at": float(prov.get("prepared_at") or 0.0)})
    meta_frame = pd.DataFrame(meta, columns=["run_id", "commit", "dirty", "image_digest",
                                             "measured_at"])
    versions = runs[["run_id", "versions"]] if "versions" in runs.columns else runs[["run_id"]]
    return table.merge(meta_frame, on="run_id", how="left").merge(versions, on="run_id",
                                                                   how="left")


def add(root: Path, table: pd.DataFrame, sweep: Path) -> Entry:
    """Record a sweep's sample table as a new entry; an identical table already recorded is
    refused (adding the same sweep twice would count its runs twice in a selection)."""
    entry, added = record(root, table, sweep, by_sweep=False)
    if not added:
        raise UserError(f"{sweep}: already recorded as entry {entry.id} ("
                        f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(entry.added_at))})")
    return entry


def record(root: Path, table: pd.DataFrame, sweep: Path, by_sweep: bool = True
           ) -> tuple[Entry, bool]:
    """A new entry of the sweep's sample table, and True; or the entry already holding the
    same table (``by_sweep``: any entry of the same sweep directory, as ``orch gather`` asks:
    a gather repeated after a retry would count the runs both hold twice), and False. The
    check and the append hold the index's lock, so two concurrent adds record a sweep once."""
    if table.empty:
        raise UserError(f"{sweep}: no completed run with measured iterations to record")
    (root / ENTRIES).mkdir(parents=True, exist_ok=True)
    body = table.sort_values(["run_id", "metric", "iter"]).reset_index(drop=True)
    digest = hashlib.sha256(pd.util.hash_pandas_object(body, index=False).values.tobytes()
                            ).hexdigest()
    with _locked(root / INDEX) as fd:
        for old in entries(root)[0]:
            if old.sha256 == digest or (by_sweep and old.sweep == str(sweep)):
                return old, False
        entry = _entry(body, digest, sweep)
        files.replace_with(root / entry.file, lambda tmp: body.to_parquet(tmp, index=False))
        append_line(fd, root / INDEX, entry.model_dump_json())
    return entry, True


def _entry(body: pd.DataFrame, digest: str, sweep: Path) -> Entry:
    now = time.time()
    entry_id = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(now))}-{digest[:10]}"
    return Entry(
        id=entry_id, file=f"{ENTRIES}/{entry_id}.parquet", sha256=digest, added_at=now,
        measured_at=float(body["measured_at"].min()) if "measured_at" in body else now,
        sweep=str(sweep), runs=int(body["run_id"].nunique()),
        configurations=int(body[key_columns(body)].drop_duplicates().shape[0]),
        **{f: sorted(map(str, body[f].unique())) if f in body else [] for f in FILTERS},
        commits=sorted(c for c in body.get("commit", pd.Series(dtype=str)).unique() if c))


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[int]:
    """The index opened for appending, under an exclusive lock (released on close)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)


def append_line(fd: int, path: Path, line: str) -> None:
    """Append one line in one write, synced. A line left without its newline by a crash stays
    a damaged line of its own: this one starts on a fresh line."""
    size = os.fstat(fd).st_size
    lead = b""
    if size:
        with open(path, "rb") as f:
            f.seek(size - 1)
            lead = b"" if f.read(1) == b"\n" else b"\n"
    os.write(fd, lead + line.encode() + b"\n")
    os.fsync(fd)


def entries(root: Path) -> tuple[list[Entry], int]:
    """The index's entries in the order they were added, and how many lines were damaged."""
    path = root / INDEX
    if not path.is_file():
        return [], 0
    found, damaged = [], 0
    for line in path.read_text(errors="replace").splitlines():
        if not line.strip():
            continue
        entry = Entry.from_line(line)
        if entry is None:
            damaged += 1
        else:
            found.append(entry)
    return found, damaged


def matches(entry: Entry, since: float | None = None, now: float | None = None,
            **values: str | None) -> bool:
    """Whether an entry passes the filters: measured within ``since`` seconds, and each
    given field (site, partition, mode, model) among its values; ``id``: a prefix of its id."""
    if since is not None and entry.measured_at < (now or time.time()) - since:
        return False
    if values.get("id") and not entry.id.startswith(values["id"]):
        return False
    return all(v is None or v in getattr(entry, k) for k, v in values.items() if k != "id")


def load(root: Path, entry: Entry) -> pd.DataFrame | None:
    """An entry's sample table; None when its file is missing or damaged. Its run ids are
    prefixed with the entry's: a run id is a hash of the run's configuration, so the same run
    measured in two recorded sweeps has one id, and they are two runs."""
    table = _read(root, entry)
    return None if table is None else table.to_pandas()


def _read(root: Path, entry: Entry):
    """An entry's samples as an Arrow table with ``entry`` and the prefixed ``run_id``
    (:func:`load`); None when its file is missing or damaged."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    try:  # ParquetFile, one thread: read_table's dataset machinery cost more than the read
        with pq.ParquetFile(root / entry.file) as f:
            table = f.read(use_threads=False)
        run_id = pc.binary_join_element_wise(entry.id, table["run_id"].cast(pa.string()), "/")
    except (OSError, ValueError, KeyError, pa.ArrowException):  # ArrowInvalid: ValueError
        return None
    table = table.set_column(table.schema.get_field_index("run_id"), "run_id", run_id)
    return table.append_column("entry", pa.array([entry.id] * table.num_rows, pa.string()))


def _rows_of(table, entry: Entry, values: dict):
    """The rows of an entry's Arrow table whose site, partition, mode and model are those
    given (compared as text, as the index records them). A field whose only value in the
    index is the one given holds it in every row: nothing to filter (filtering copies)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for k, v in values.items():
        if v is not None and k in FILTERS and k in table.column_names and getattr(
                entry, k) != [v]:
            column = table[k] if pa.types.is_string(table[k].type) else table[k].cast(
                pa.string())
            table = table.filter(pc.fill_null(pc.equal(column, v), False))
    return table


def select(root: Path, since: float | None = None, **values: str | None
           ) -> tuple[pd.DataFrame, list[Entry], list[str]]:
    """The samples of every entry passing the filters, rows filtered by the same fields;
    the entries read and the problems met (damaged lines or files), to be reported.

    The entries are read, filtered and joined as Arrow tables and made one DataFrame once: a
    DataFrame per entry and their concatenation was half of ``orch compare``'s time on a
    history of a thousand runs."""
    import pyarrow as pa

    found, damaged = entries(root)
    problems = [f"{root / INDEX}: {damaged} damaged line(s) skipped"] if damaged else []
    tables, used = [], []
    for entry in (e for e in found if matches(e, since, **values)):
        table = _read(root, entry)
        if table is None:
            problems.append(f"{root / entry.file}: missing or damaged, entry {entry.id} skipped")
            continue
        tables.append(_rows_of(table, entry, values))
        used.append(entry)
    if not tables:
        return pd.DataFrame(), used, problems
    try:
        joined = pa.concat_tables(tables, promote_options="permissive")
    except pa.ArrowException:  # entries whose columns Arrow cannot unify: pandas can
        return pd.concat([t.to_pandas() for t in tables], ignore_index=True), used, problems
    return joined.to_pandas(), used, problems


SELECTION = "history:"
SELECT_KEYS = ("since", "id", *FILTERS)


def parse_selection(text: str) -> dict:
    """``history:since=30d,mode=torch-ddp`` -> select()'s keyword arguments (``history:``
    alone: every entry)."""
    body = text[len(SELECTION):] if text.startswith(SELECTION) else text
    out: dict = {}
    for part in filter(None, (p.strip() for p in body.split(","))):
        name, sep, value = part.partition("=")
        if not sep or name not in SELECT_KEYS or not value:
            raise UserError(f"{text}: a history selection is history:KEY=VALUE,… with KEY "
                            f"one of {', '.join(SELECT_KEYS)} (e.g. history:since=30d,"
                            "site=mycluster)")
        out[name] = parse_age(value, f"{text}: since") if name == "since" else value
    return out
