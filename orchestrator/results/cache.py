"""The incremental cache of the merge: ``results/.cache/<run_id>.json``, one entry per run.

An entry remembers the key of a run's inputs (run.json's bytes; each rank log's name, size,
mtime and inode), its rows' place in the ``iterations.parquet`` written then (that file's size,
mtime and inode: its generation), its metrics and its logs' headers and footers. A run whose
key and generation still match takes its rows from that file and reads none of its logs.
An entry that cannot be read as this version's (an older format, a corrupt file) is a miss.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from .. import files, protocol
from ..protocol import RankLog

CACHE_DIR = "results/.cache"
CACHE_VERSION = 6  # bump when the table, the metrics or this format change
RACY_S = 2.0  # a log written this recently may change again within its mtime's resolution

Token = tuple[int, int, int]  # a file's (size, mtime ns, inode)


class CachedLog(BaseModel):
    """What the merge keeps of a rank log besides its rows."""

    model_config = ConfigDict(frozen=True)

    rank: int | None
    header: dict[str, Any] | None
    footer: dict[str, Any] | None
    problems: list[str]

    @classmethod
    def of(cls, log: RankLog) -> CachedLog:
        return cls(rank=log.rank, header=log.header, footer=log.footer, problems=log.problems)

    def rank_log(self) -> RankLog:
        return RankLog(rank=self.rank, header=self.header, footer=self.footer,
                       problems=list(self.problems))


class CacheEntry(BaseModel):
    """One run's entry: its inputs' key, where its rows are in which iterations.parquet, its
    metrics and its logs."""

    model_config = ConfigDict(frozen=True)

    version: Literal[6] = CACHE_VERSION
    key: str
    parquet: Token
    offset: int
    count: int
    metrics: dict[str, Any]
    logs: list[CachedLog]


def file_token(path: Path) -> Token | None:
    """The file's (size, mtime, inode), None if there is none: it changes when it is rewritten."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino)


def files_key(paths, seed: bytes = b"") -> str | None:
    """A key of ``seed`` and each file's identity (name, size, mtime, inode); None where a file
    is missing or was written in the last ``RACY_S`` seconds.

    A file's mtime has the resolution of the kernel's clock tick, not 1 ns: a file rewritten
    with the same size within one tick would keep its key. So, as git does with its index, such
    a file gives no key: what depends on it is read again next time, and kept once the file
    has been still for a while.
    """
    digest = hashlib.sha256(seed)
    racy = time.time_ns() - int(RACY_S * 1e9)
    for path in paths:
        token = file_token(Path(path))
        if token is None or token[1] >= racy:
            return None
        size, mtime, inode = token
        digest.update(f"\n{os.path.basename(path)} {size} {mtime} {inode}".encode())
    return digest.hexdigest()


def inputs_key(rdir: Path) -> str | None:
    """What a run's rows and metrics depend on: run.json, and each rank log's identity
    (:func:`files_key`); None for a run whose log changed in the last ``RACY_S`` seconds."""
    seed = f"v{CACHE_VERSION}\n".encode() + (rdir / protocol.RUN_FILE).read_bytes()
    return files_key((path for _, path in protocol.rank_logs(rdir / protocol.RANKS_DIR)), seed)


def read_entry(cache: Path, run_id: str, key: str | None,
               generation: Token | None) -> CacheEntry | None:
    """The run's entry if it holds for these inputs and this iterations.parquet, else None."""
    if generation is None or key is None:
        return None
    try:
        entry = CacheEntry.model_validate(json.loads((cache / f"{run_id}.json").read_text()))
    except (OSError, ValueError, ValidationError):  # ValueError: not JSON
        return None
    if entry.key != key or entry.parquet != generation:
        return None
    return entry


def write_entry(cache: Path, run_id: str, entry: CacheEntry) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    # Python's json, not model_dump_json nor mode="json": a metric may be NaN, which those
    # write as null; json writes NaN and reads it back as NaN.
    files.write_text_atomic(cache / f"{run_id}.json", json.dumps(entry.model_dump()))


def prune(cache: Path, run_ids: set[str]) -> None:
    """Remove the entries of runs that are gone."""
    for stale in cache.glob("*.json"):
        if stale.stem not in run_ids:
            stale.unlink(missing_ok=True)
