"""The incremental cache of the merge: ``results/.cache/<run_id>.json``, one entry per run.

A run's key (:func:`run_key`) is the identity (name, size, mtime, inode) of every file of its
run directory and of its ``ranks/``, and the digest of this orch's code: whatever its row of
runs.parquet and its rows of the per-run tables are computed from. An entry remembers the key
the run was merged at, the identity of each per-run file written then (its generation), its
row of runs.parquet (before the columns that compare runs: scaling, invariants, convergence)
and its epoch records. A run whose key and files still match is taken from there and reads
none of its files; anything else (another key, a file rewritten, removed or appearing, an
entry of another version or a damaged one) is a miss, and the run is merged again.

``_checked.json`` remembers, per run, the key at which :func:`runs.recheck` last found its
ledger entry consistent with its logs, so a re-check reads no log of a run that has not changed.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from .. import files, protocol

CACHE_DIR = "results/.cache"
CACHE_VERSION = 6  # bump when this format changes (code changes change every key anyway)
RACY_S = 2.0  # a log written this recently may change again within its mtime's resolution
CHECKED = "_checked.json"  # no run id starts with "_" (a mode's name does)

Token = tuple[int, int, int]  # a file's (size, mtime ns, inode)


class CacheEntry(BaseModel):
    """One run's entry: its key, its per-run files as written (table -> identity, None where
    the run has no such file), its row of runs.parquet and its epoch records."""

    model_config = ConfigDict(frozen=True)

    version: Literal[6] = CACHE_VERSION
    key: str
    files: dict[str, Token | None]
    row: dict[str, Any]
    epochs: list[dict[str, Any]]


def file_token(path: Path) -> Token | None:
    """The file's (size, mtime, inode), None if there is none: it changes when it is rewritten."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino)


@functools.cache
def code_digest() -> str:
    """A digest of orch's own code (every module of the package): a merge by another version
    of orch, or by a checkout edited since, never takes what this one cached, whichever
    function of the row changed."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(f"{path.relative_to(root)}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def run_key(rdir: Path) -> str | None:
    """What a run's rows depend on: the identity (name, size, mtime, inode) of every file of
    its run directory and its ``ranks/``, and orch's code. Taken before the run is read: a file
    that changes after that changes the key.

    None while a file changed in the last ``RACY_S`` seconds. A file's mtime has the resolution
    of the kernel's clock tick, not 1 ns: a file rewritten with the same size within one tick
    would keep its key. So, as git does with its index, such a run gets no key: it is merged
    again next time, and kept once its files have been still for a while."""
    digest = hashlib.sha256(f"v{CACHE_VERSION} {code_digest()}\n".encode())
    racy = time.time_ns() - int(RACY_S * 1e9)
    # os.scandir and plain strings: a key per run of a sweep of thousands, at every gather
    for prefix, directory in (("", rdir), (protocol.RANKS_DIR + "/", rdir / protocol.RANKS_DIR)):
        try:
            with os.scandir(directory) as found:
                entries = sorted((e for e in found if e.is_file()), key=lambda e: e.name)
            for entry in entries:
                st = entry.stat()
                if st.st_mtime_ns >= racy:
                    return None
                digest.update(f"\n{prefix}{entry.name} {st.st_size} {st.st_mtime_ns} "
                              f"{st.st_ino}".encode())
        except FileNotFoundError:  # no ranks/ yet, or a file gone between listing and stat
            if prefix == "" or directory.exists():
                return None
    return digest.hexdigest()


def read_entry(cache: Path, run_id: str, key: str | None,
               tokens: dict[str, Token | None]) -> CacheEntry | None:
    """The run's entry if it was made at ``key`` and its per-run files are still those it
    wrote (``tokens``: each table's file now), else None."""
    if key is None:
        return None
    try:
        entry = CacheEntry.model_validate(json.loads((cache / f"{run_id}.json").read_bytes()))
    except (OSError, ValueError, ValidationError):  # ValueError: not JSON
        return None
    if entry.key != key or entry.files != tokens:
        return None
    return entry


def write_entry(cache: Path, run_id: str, entry: CacheEntry) -> None:
    files.make_dirs(cache)
    # Python's json, not model_dump_json nor mode="json": a metric may be NaN, which those
    # write as null; json writes NaN and reads it back as NaN.
    files.write_text_atomic(cache / f"{run_id}.json", json.dumps(entry.model_dump()))


def read_checked(cache: Path) -> dict[str, str]:
    """run id -> the key at which its ledger entry was last found consistent with its logs."""
    try:
        memo = json.loads((cache / CHECKED).read_bytes())
    except (OSError, ValueError):
        return {}
    ok = isinstance(memo, dict) and all(isinstance(v, str) for v in memo.values())
    return memo if ok else {}


def write_checked(cache: Path, memo: dict[str, str]) -> None:
    files.make_dirs(cache)
    files.write_text_atomic(cache / CHECKED, json.dumps(memo, sort_keys=True))


def prune(cache: Path, gone) -> None:
    """Remove the entries of runs that are gone (``gone(run_id)``: true for those)."""
    try:
        names = os.listdir(cache)
    except OSError:
        return
    for name in names:
        if name.endswith(".json") and not name.startswith("_") and gone(name[:-5]):
            files.remove(cache / name)
