"""Atomic file writes: a reader (or a crash) sees the old file or the new one, never half.

Ledger entries, run records, provenance and result sets are all rewritten while other orch
processes may read them (``orch status`` from another shell); every such write goes through
here: written beside the target under a private name, then renamed over it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


def write_bytes_atomic(path: Path, data: bytes, mode: int | None = None) -> None:
    tmp = _tmp(path)
    tmp.write_bytes(data)
    if mode is not None:
        tmp.chmod(mode)
    os.replace(tmp, path)


def write_text_atomic(path: Path, text: str, mode: int | None = None) -> None:
    write_bytes_atomic(path, text.encode(), mode)


def create_text_atomic(path: Path, text: str) -> None:
    """Write ``path`` whole where no file is there: under a private name, then hard-linked
    into place, which never replaces a file (FileExistsError where one is there or appeared
    meanwhile: an existence check before a rename would race with it)."""
    tmp = _tmp(path)
    tmp.write_text(text)
    try:
        os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_json_atomic(path: Path, data: object) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


def replace_with(path: Path, write) -> None:
    """Atomically replace ``path`` with what ``write(tmp_path)`` writes (a Parquet writer)."""
    tmp = _tmp(path)
    write(tmp)
    os.replace(tmp, path)
