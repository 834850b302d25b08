"""The rank-side code staged beside the runs, where any environment's Python imports it.

Ranks run with their framework environment's Python (a TensorFlow venv, CNTK's Python 3.6, a
container's python), not orch's: they import orch's rank side from a copy under
``<out>/.orch/lib-<hash>/``, named by its content hash so it is never stale and a rerun finds
exactly the code a run used. What is copied: the package's ``__init__``, the rank-log contract
(protocol), errors, the model catalogue (zoo), the rank-side helpers (rankside/) and every
mode folder's Python (its descriptor and rank).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from ..resources import package_dir

# Rank-side files staged for the ranks: importable by any environment's Python.
_RANK_SIDE = ("__init__.py", "errors.py", "protocol.py", "zoo.py", "rankside", "modes")


def _rank_side_files() -> list[Path]:
    src = package_dir()
    files: list[Path] = []
    for name in _RANK_SIDE:
        p = src / name
        files += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    return files


def lib_path(out: Path) -> Path:
    """Where the rank-side code is staged: named by its content hash, so it is never stale."""
    src = package_dir()
    digest = hashlib.sha256()
    for f in _rank_side_files():
        digest.update(str(f.relative_to(src)).encode() + b"\0" + f.read_bytes())
    return (out / ".orch" / f"lib-{digest.hexdigest()[:12]}").resolve()


def stage_lib(out: Path) -> Path:
    """Copy the rank-side code to :func:`lib_path` (once; concurrent orch processes agree)."""
    src = package_dir()
    lib = lib_path(out)
    if not lib.exists():
        tmp = lib.with_name(lib.name + f".{os.getpid()}.tmp")
        for f in _rank_side_files():
            target = tmp / "orchestrator" / f.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, target)
        try:
            os.replace(tmp, lib)
        except OSError:  # staged concurrently by another orch: theirs is identical
            shutil.rmtree(tmp, ignore_errors=True)
    return lib
