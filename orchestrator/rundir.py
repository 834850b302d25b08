"""The sweep directory on disk: one directory per run, the ledger, the staged rank-side code.

    <out>/<run-id>/run.json      the Run record (what was asked)
    <out>/<run-id>/job.sbatch    rendered allocation script;  launch.sh: one rank
    <out>/<run-id>/job.json      ledger entry: job id, state, reason (rewritten atomically)
    <out>/<run-id>/ranks/        rank-<k>.jsonl (measurements) and rank-<k>.out (stdout/stderr)
    <out>/<run-id>/attempts/<n>/ an earlier attempt, moved aside, never deleted
    <out>/.orch/lib-<hash>/      the rank-side code the runs import
    <out>/results/               merged result set (Parquet)

Nothing measured is overwritten: a finished run is skipped; a retried run's old files move to
attempts/ first.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from .resources import package_dir
from .sweep import Run

State = Literal["NEW", "PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"]
TERMINAL: frozenset[str] = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"})

# Rank-side files staged for the ranks: importable by any environment's Python.
_RANK_SIDE = ("__init__.py", "zoo.py", "workloads")


class JobRecord(BaseModel):
    """One run's ledger entry."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    attempt: int = 1
    scheduler: str
    job_id: str | None = None
    state: State = "NEW"
    reason: str | None = None
    submitted_at: float | None = None
    ended_at: float | None = None


def run_dir(out: Path, run: Run) -> Path:
    return out / run.run_id


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def read_record(rdir: Path) -> JobRecord | None:
    path = rdir / "job.json"
    if not path.exists():
        return None
    return JobRecord.model_validate_json(path.read_text())


def write_record(rdir: Path, record: JobRecord) -> None:
    write_json_atomic(rdir / "job.json", record.model_dump(mode="json"))


def read_run(rdir: Path) -> Run:
    return Run.model_validate_json((rdir / "run.json").read_text())


def run_dirs(out: Path) -> list[Path]:
    """Every run directory of a sweep directory, sorted by name."""
    if not out.is_dir():
        return []
    return sorted(p for p in out.iterdir() if (p / "run.json").is_file())


def find_run(run_id: str, sweep_dir: Path | None = None, root: Path = Path("runs")) -> Path:
    """A run's directory: in ``sweep_dir`` if given, else in any sweep directory under
    ``root`` (orch's default --out is runs/<site>). Errors name what was searched."""
    from .errors import UserError

    dirs = [sweep_dir] if sweep_dir else sorted(p for p in root.glob("*") if p.is_dir())
    found = [d / run_id for d in dirs if (d / run_id / "run.json").is_file()]
    if not found:
        where = str(sweep_dir) if sweep_dir else f"{root}/*"
        raise UserError(f"no run '{run_id}' in {where}; give its sweep directory with --dir")
    if len(found) > 1:
        raise UserError(f"run '{run_id}' is in several sweep directories "
                        f"({', '.join(str(f.parent) for f in found)}); choose one with --dir")
    return found[0].resolve()


def archive_attempt(rdir: Path, record: JobRecord) -> int:
    """Move an earlier attempt's files to attempts/<n>/ and return the next attempt number."""
    dest = rdir / "attempts" / str(record.attempt)
    dest.mkdir(parents=True, exist_ok=False)
    for child in list(rdir.iterdir()):
        if child.name not in ("attempts", "run.json"):
            shutil.move(str(child), dest / child.name)
    return record.attempt + 1


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


def now() -> float:
    return time.time()
