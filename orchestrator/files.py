"""Atomic file writes: a reader (or a crash) sees the old file or the new one, never half.

Ledger entries, run records, provenance, result sets and caches are all rewritten while other
orch processes may read them (``orch status`` from another shell); every such write goes
through here: written beside the target under a private name, then renamed over it.

A write that fails (a full disk, a quota, a read-only or unwritable directory) leaves the
target as it was and no private file behind, and raises :class:`WriteFailed`: one line naming
the file, its directory, why, and the space it needed against the space there was.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
from collections.abc import Callable
from pathlib import Path

from .errors import UserError

_SERIAL = itertools.count()  # private names unique per thread too: pid alone is not


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{next(_SERIAL)}.tmp")


# What each errno means for a write, and what to do about it.
_WHY = {
    errno.ENOSPC: ("no space left on the device", "free space there"),
    errno.EDQUOT: ("disk quota exceeded", "free space within your quota there"),
    errno.EROFS: ("the file system is read-only", "make it writable or move the sweep"),
    errno.EACCES: ("permission denied", "make the directory writable for you"),
    errno.EPERM: ("operation not permitted", "make the directory writable for you"),
    errno.ENOENT: ("the directory does not exist", "create it"),
}


def _free_bytes(directory: Path) -> int | None:
    try:
        st = os.statvfs(directory)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


class WriteFailed(UserError, OSError):
    """A file could not be written; nothing there changed. Its message is one line: the file,
    its directory, why, the space needed where known, and what to do. Also an OSError, so
    callers that shrug off a failed write of a cache still do."""

    def __init__(self, path: Path, cause: OSError, need: int | None = None,
                 verb: str = "write") -> None:
        code = cause.errno if cause.errno is not None else _errno_in(str(cause))
        why, fix = _WHY.get(code, (cause.strerror or str(cause), "fix that"))
        directory = path.parent
        space = ""
        if code in (errno.ENOSPC, errno.EDQUOT):
            free = _free_bytes(directory)
            space = (f" (it needs {_size(need)}" if need is not None else " (") + (
                f"{', ' if need is not None else ''}{_size(free)} free there)"
                if free is not None else ")")
        self.message = (f"cannot {verb} {path.name} in {directory}: {why}{space}; "
                        f"{path.name} is as it was and no partial file is left: {fix}, then "
                        f"run the command again")
        super().__init__(code, self.message, str(path))
        self.need = need

    def __str__(self) -> str:
        return self.message


def _errno_in(text: str) -> int | None:
    """The errno an Arrow error names in its text ("... [errno 28] ..."), if any."""
    import re

    found = re.search(r"\[errno (\d+)\]", text, re.IGNORECASE)
    return int(found.group(1)) if found else None


def _discard(tmp: Path) -> None:
    with contextlib.suppress(OSError):  # its directory went read-only meanwhile: nothing to do
        tmp.unlink(missing_ok=True)


def make_dirs(directory: Path) -> None:
    """``mkdir -p``; a directory that cannot be made is a :class:`WriteFailed`."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteFailed(directory, exc, verb="create") from exc


def remove(path: Path) -> None:
    """Remove ``path`` if it is there; one that cannot be removed is a :class:`WriteFailed`."""
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise WriteFailed(path, exc, verb="remove") from exc


def write_bytes_atomic(path: Path, data: bytes, mode: int | None = None) -> None:
    tmp = _tmp(path)
    try:
        with open(tmp, "wb") as fh:  # close() inside: NFS reports a full disk there
            fh.write(data)
        if mode is not None:
            tmp.chmod(mode)
        os.replace(tmp, path)
    except OSError as exc:
        _discard(tmp)
        raise WriteFailed(path, exc, len(data)) from exc
    except BaseException:
        _discard(tmp)
        raise


def write_text_atomic(path: Path, text: str, mode: int | None = None) -> None:
    write_bytes_atomic(path, text.encode(), mode)


def write_bytes_if_changed(path: Path, data: bytes) -> bool:
    """:func:`write_bytes_atomic` unless ``path`` already holds exactly ``data``; True if it
    wrote (a reader's file keeps its identity when nothing changed)."""
    try:
        if path.stat().st_size == len(data) and path.read_bytes() == data:
            return False
    except OSError:
        pass
    write_bytes_atomic(path, data)
    return True


def create_text_atomic(path: Path, text: str) -> None:
    """Write ``path`` whole where no file is there: under a private name, then hard-linked
    into place, which never replaces a file (FileExistsError where one is there or appeared
    meanwhile: an existence check before a rename would race with it)."""
    tmp = _tmp(path)
    data = text.encode()
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.link(tmp, path)
    except FileExistsError:
        raise
    except OSError as exc:
        raise WriteFailed(path, exc, len(data)) from exc
    finally:
        _discard(tmp)


def write_json_atomic(path: Path, data: object) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def replace_with(path: Path, write: Callable[[Path], object]) -> None:
    """Atomically replace ``path`` with what ``write(tmp_path)`` writes (a Parquet writer).
    The space needed is not known beforehand: a failure says what was written so far."""
    tmp = _tmp(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as exc:  # Arrow's IOError is an OSError, its errno only in its text
        written = tmp.stat().st_size if tmp.exists() else None
        _discard(tmp)
        # Its frames hold the failed writer, whose open file keeps the removed file's space
        # taken until they go: let them go now, not when the error is collected.
        exc.__traceback__ = None
        raise WriteFailed(path, exc, written) from exc
    except BaseException:
        _discard(tmp)
        raise


def parquet_bytes(table, **options) -> bytes:
    """A pyarrow Table or a pandas DataFrame as the bytes of a Parquet file: written in
    memory first, so that writing it to disk is one :func:`write_bytes_atomic`, which knows
    the space it needs."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not isinstance(table, pa.Table):  # a DataFrame: as pandas' to_parquet converts it
        table = pa.Table.from_pandas(table, preserve_index=False)
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **options)
    return sink.getvalue().to_pybytes()


def append_text(path: Path, text: str) -> None:
    """Append ``text`` to ``path`` (a ledger of lines), flushed and synced; on a failure the
    file is cut back to what it held before, never left with a torn last line."""
    data = text.encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    except OSError as exc:
        raise WriteFailed(path, exc, len(data)) from exc
    try:
        before = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, before)
            raise WriteFailed(path, exc, len(data)) from exc
    finally:
        os.close(fd)
