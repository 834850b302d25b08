"""The results history: every recorded sweep's samples (:mod:`.samples`), kept forever.

Layout of the store (``--history DIR``, ``$ORCH_HISTORY``, default
``~/.local/share/orch/history``)::

    entries/<id>.parquet   one file per recorded sweep: its sample table, with each run's
                           orch commit, framework versions, image digest, site config, nodes
                           and date; written beside its place and renamed into it, never
                           rewritten
    records/<key>.json     the entry's record (what ``orch history list`` filters on), under
                           the names that make it unique: ``table-<sha256>`` (its samples) and,
                           for a gathered sweep, ``sweep-<sha256 of its path>``; each name is
                           a hard link to one complete file, made after the entry file
    index.jsonl            the records of a history written by an orch before records/: read,
                           never written
    cache/                 what is derived from the entries (each run's level per metric, for
                           ``orch history changes``): rebuilt when missing, never the only copy

No lock anywhere. A history is shared by a team on a cluster's file system (a nightly account
and the users, 64 array tasks gathering at once), where locks are least trusted: flock() is
refused on a Lustre mounted without ``-o flock`` and SQLite's locks fail on NFS ("database is
locked"). An entry is published by ``link(2)`` of its complete record under its unique name:
a link never replaces a file, so of two sweeps recording the same table (or gathering the
same sweep) one gets the name and the other learns it was recorded, on NFS and Lustre alike
(a link whose reply NFS lost and retried reports EEXIST though it was made: the link count
of the writer's own file says whose it is, as open(2) advises). A reader lists records/ and
sees an entry whole or not at all: its parquet file was renamed into place before its
record was linked.

In a directory with the set-group-ID bit (``chmod 2775``: a team's history) every file and
folder orch creates there is group-writable and folders keep the bit, whatever the writer's
umask, so that the next member of the group can record into it.

Parquet files, not SQLite: an entry is the sample table ``orch compare`` reads, in the format
the result sets already use (pandas, DuckDB), and an append is new files, so no write ever
touches what is already there. A damaged record or an unreadable entry file is skipped and
reported, never fatal, and the other entries stay readable.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import stat
import time
import uuid
from pathlib import Path

import pandas as pd
from pydantic import BaseModel, ConfigDict, ValidationError

from ..errors import UserError
from .samples import key_columns

INDEX = "index.jsonl"  # an older orch's records, one JSON line each: read, never written
RECORDS = "records"
ENTRIES = "entries"
CACHE = "cache"
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


# What the runs table says of each run that the history keeps beside its samples: the
# framework and library versions (rank footers) and the hosts it ran on.
RUN_FACTS = ("versions", "hosts")


def with_provenance(table: pd.DataFrame, sweep: Path, runs: pd.DataFrame) -> pd.DataFrame:
    """The sample table with each run's orch commit, versions, hosts, image digest, site
    config (and its sha256) and date: what ``orch history changes`` says changed."""
    # Imported here: reading a history (orch compare) needs neither, and provenance's imports
    # (the site, the renderer, container checks) were a tenth of that command's time.
    import json

    from ..runs import provenance, rundir

    meta = []
    for rdir in rundir.run_dirs(sweep):
        prov = provenance.read(rdir) or {}
        orch = prov.get("orch") or {}
        site = prov.get("site") or {}
        meta.append({"run_id": rdir.name, "commit": orch.get("git_commit") or "",
                     "dirty": bool(orch.get("git_dirty")),
                     "image_digest": (prov.get("container") or {}).get("digest") or "",
                     "site_sha256": site.get("sha256") or "",
                     "site_config": json.dumps(site.get("config") or {}, sort_keys=True),
                     "measured_at": float(prov.get("prepared_at") or 0.0)})
    meta_frame = pd.DataFrame(meta, columns=["run_id", "commit", "dirty", "image_digest",
                                             "site_sha256", "site_config", "measured_at"])
    return with_run_facts(table.merge(meta_frame, on="run_id", how="left"), runs)


def with_run_facts(table: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The sample table with the runs table's RUN_FACTS of each run (those it has)."""
    facts = [c for c in RUN_FACTS if c in runs.columns and c not in table.columns]
    return table.merge(runs[["run_id", *facts]], on="run_id", how="left") if facts else table


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
    a gather repeated after a retry would count the runs both hold twice), and False. Two
    concurrent records of the same table or sweep record it once (the module's docstring)."""
    if table.empty:
        raise UserError(f"{sweep}: no completed run with measured iterations to record")
    body = table.sort_values(["run_id", "metric", "iter"]).reset_index(drop=True)
    digest = hashlib.sha256(pd.util.hash_pandas_object(body, index=False).values.tobytes()
                            ).hexdigest()
    for old in entries(root)[0]:  # the common case, read without writing anything
        if old.sha256 == digest or (by_sweep and old.sweep == str(sweep)):
            return old, False
    for folder in (root, root / ENTRIES, root / RECORDS):
        make_dir(folder)
    entry = _entry(body, digest, sweep)
    write_new(root / entry.file, lambda tmp: body.to_parquet(tmp, index=False))
    keys = [f"table-{digest}"] + ([f"sweep-{_sweep_key(sweep)}"] if by_sweep else [])
    won = _publish(root, entry, keys)
    if won is not None:  # recorded meanwhile by another: ours is withdrawn
        if won.id != entry.id:
            (root / entry.file).unlink(missing_ok=True)
        return won, False
    if not by_sweep:  # so that a later gather of the same directory finds it
        _publish(root, entry, [f"sweep-{_sweep_key(sweep)}"], optional=True)
    return entry, True


def _sweep_key(sweep: Path) -> str:
    return hashlib.sha256(str(sweep).encode()).hexdigest()


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


def _publish(root: Path, entry: Entry, keys: list[str], optional: bool = False
             ) -> Entry | None:
    """Link the entry's record under each of ``keys`` in records/; None when every name is
    its own, else the entry that holds a name first (``optional``: a name already taken is
    left to its holder). A record whose second name was taken is withdrawn from its first:
    each name then belongs to one entry."""
    tmp = _private(root / RECORDS / "record.json")
    tmp.write_text(entry.model_dump_json() + "\n")
    _share(tmp)
    made: list[Path] = []
    try:
        for key in keys:
            name = root / RECORDS / f"{key}.json"
            if link_claim(tmp, name):
                made.append(name)
            elif not optional:
                for mine in made:
                    mine.unlink(missing_ok=True)
                holder = _holder(name)
                if holder is None:
                    raise UserError(f"{name}: a damaged record holds this name; move it "
                                    "out of the history and record again")
                return holder
        return None
    finally:
        tmp.unlink(missing_ok=True)


def _holder(name: Path) -> Entry | None:
    """The entry a record name holds (None: unreadable, and so nobody's)."""
    try:
        return Entry.from_line(name.read_text())
    except OSError:
        return None


def link_claim(tmp: Path, name: Path) -> bool:
    """Whether ``name`` is now a hard link to ``tmp`` made by this call: link(2) never
    replaces a file, on a local file system, NFS or Lustre. NFS may report EEXIST for a link
    it made (a retried request whose reply was lost): the inode decides, not the error."""
    with contextlib.suppress(FileExistsError):
        os.link(tmp, name)
    try:
        return os.stat(name).st_ino == os.stat(tmp).st_ino
    except FileNotFoundError:
        return False


def _private(path: Path) -> Path:
    """A name beside ``path`` no other writer uses, on this host or another (a pid alone is
    not unique on a shared file system)."""
    return path.with_name(f".{path.name}.{socket.gethostname()}.{os.getpid()}."
                          f"{uuid.uuid4().hex[:8]}.tmp")


def write_new(path: Path, write) -> None:
    """``write(tmp)`` beside ``path``, then renamed into it, shared with the group where the
    history is (:func:`_share`)."""
    tmp = _private(path)
    try:
        write(tmp)
        _share(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _share(path: Path) -> None:
    """Group-writable where the folder it is in has the set-group-ID bit (a team's history:
    the group owns what is created there), whatever the writer's umask; a folder keeps the
    bit. Nothing changes elsewhere: a private history stays as the umask makes it."""
    try:
        if not os.stat(path.parent).st_mode & stat.S_ISGID:
            return
        mode = os.stat(path).st_mode
        extra = stat.S_IRGRP | stat.S_IWGRP | (
            stat.S_IXGRP | stat.S_ISGID if stat.S_ISDIR(mode) else 0)
        if mode & extra != extra:
            os.chmod(path, stat.S_IMODE(mode) | extra)
    except OSError:  # another member's file: theirs to share
        pass


def make_dir(path: Path) -> None:
    """``path`` and its parents, each new one shared like the files (:func:`_share`)."""
    if path.is_dir():
        return
    make_dir(path.parent)
    try:
        path.mkdir()
    except FileExistsError:  # made meanwhile by another writer
        return
    _share(path)


def entries(root: Path) -> tuple[list[Entry], int]:
    """The history's entries in the order they were added, and how many records were
    damaged (an older orch's index lines included)."""
    found: dict[str, Entry] = {}
    damaged = 0
    lines = (root / INDEX).read_text(errors="replace").splitlines() if (
        root / INDEX).is_file() else []
    texts = [line for line in lines if line.strip()]
    for path in _record_files(root / RECORDS):
        try:
            texts.append(path.read_text(errors="replace"))
        except FileNotFoundError:  # withdrawn meanwhile (a duplicate)
            continue
    for text in texts:
        entry = Entry.from_line(text)
        if entry is None:
            damaged += 1
        else:
            found.setdefault(entry.id, entry)
    return sorted(found.values(), key=lambda e: (e.added_at, e.id)), damaged


def _record_files(folder: Path) -> list[Path]:
    """One name of each record file in ``folder`` (an entry's names are links to one file:
    its inode, which listing the folder gives without a stat, says which are the same)."""
    if not folder.is_dir():
        return []
    seen: dict[int, Path] = {}
    with os.scandir(folder) as found:
        for item in found:
            if item.name.endswith(".json") and not item.name.startswith("."):
                seen.setdefault(item.inode(), Path(item.path))
    return sorted(seen.values())


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
    problems = [f"{root}: {damaged} damaged record(s) skipped"] if damaged else []
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
