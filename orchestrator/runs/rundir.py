"""The sweep directory on disk: one directory per run, the ledger, the staged rank-side code.

    <out>/<run-id>/run.json      the Run record (what was asked)
    <out>/<run-id>/job.sbatch    rendered allocation script;  launch.sh: one rank
    <out>/<run-id>/job.json      ledger entry: job id, state, reason, nodes, and the history of
                                 every state change of every attempt (rewritten atomically)
    <out>/<run-id>/ranks/        rank-<k>.jsonl (measurements) and rank-<k>.out (stdout/stderr)
    <out>/<run-id>/attempts/<n>/ an earlier attempt, moved aside, never deleted
    <out>/.orch/lib-<hash>/      the rank-side code the runs import
    <out>/results/               merged result set (Parquet)
    <out>/sweep.log              what the orch processes that ran the sweep did (SWEEP_LOG)

Nothing measured is overwritten: a finished run is skipped; a retried run's old files move to
attempts/ first (``--retry-failed``, or an automatic retry after a node failure or a hang:
faults.py), so the run directory always holds the latest attempt.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .. import files, protocol
from ..errors import UserError
from ..modes.staging import lib_path, stage_lib
from ..spec.api import Run

__all__ = ["ORCH_STOPPED", "RETRYABLE", "STATES", "SWEEP_LOG", "TERMINAL", "Event", "JobRecord",
           "Prepared", "archive_attempt", "find_run", "lib_path", "log_line", "materialise",
           "next_attempt", "read_record", "read_run", "run_dir", "run_dirs", "stage_lib",
           "write_json_atomic", "write_record"]

# orch's run states, the one table: state -> (terminal, retried by --max-retries, meaning).
# The scheduler backends map their own words onto these (backends/slurm/scheduler.py SLURM_STATES).
# Retried: failures of the infrastructure, not of the workload; a run that failed by its own
# fault (FAILED, OUT_OF_MEMORY, TIMEOUT) would fail the same way again.
STATES: dict[str, tuple[bool, bool, str]] = {
    "NEW": (False, False, "prepared, not submitted"),
    "PENDING": (False, False, "submitted, waiting for its nodes"),
    "RUNNING": (False, False, "its job runs"),
    "COMPLETED": (True, False, "every rank's log proves the run finished"),
    "FAILED": (True, False, "a rank failed, or the logs do not prove the run finished"),
    "OUT_OF_MEMORY": (True, False, "the scheduler killed the job for its memory use"),
    "TIMEOUT": (True, False, "the job reached its time limit"),
    "CANCELLED": (True, False, "cancelled (by orch, or outside it: the reason says which)"),
    "HUNG": (True, True, "no iteration progress for the hang timeout; cancelled by orch"),
    "NODE_FAIL": (True, True, "a node of the job failed"),
    "BOOT_FAIL": (True, True, "a node of the job failed to boot"),
    "PREEMPTED": (True, True, "the scheduler preempted the job"),
}  # fmt: skip
State = Literal[tuple(STATES)]  # type: ignore[valid-type]
TERMINAL: frozenset[str] = frozenset(s for s, (end, _, _) in STATES.items() if end)
RETRYABLE: frozenset[str] = frozenset(s for s, (_, retry, _) in STATES.items() if retry)


# The start of a ledger's reason (a job left running) or cancel request (a job cancelled with
# it) when the orch process that followed the run was stopped: ``orch stopped by SIGTERM ...``.
ORCH_STOPPED = "orch stopped by"


class Event(BaseModel):
    """One state change of one attempt of a run (the ledger's history)."""

    model_config = ConfigDict(extra="forbid")

    at: float  # epoch seconds, when orch saw it
    attempt: int
    state: State
    job_id: str | None = None
    nodes: list[str] | None = None
    reason: str | None = None


class JobRecord(BaseModel):
    """One run's ledger entry: its current attempt, and the history of every attempt."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    attempt: int = 1
    scheduler: str
    job_id: str | None = None
    state: State = "NEW"
    reason: str | None = None
    submitted_at: float | None = None
    ended_at: float | None = None
    # Digest of the rank logs when the run was finalized: gather re-checks a run whose logs
    # changed since (truncated, emptied, deleted).
    logs_digest: str | None = None
    nodes: list[str] | None = None  # the job's nodes, once the scheduler names them
    excluded: list[str] = Field(default_factory=list)  # nodes this attempt was kept off
    retries: int = 0  # automatic retries (--max-retries) that led to this attempt
    # Set before orch itself cancels the job ("orch cancel", "hang", ...): a CANCELLED job
    # without it was cancelled outside orch (scancel, an administrator).
    cancel_requested: str | None = None
    history: list[Event] = Field(default_factory=list)
    # Packed sweeps (orch sweep --pack/--array, execute/packs.py): the pack's name (its
    # directory under packs/ and its Slurm job name), and the run's own job step (JOBID.STEP).
    pack: str | None = None
    step: str | None = None

    @property
    def cut_off(self) -> bool:
        """Ended by the end of its (packed) allocation, not by itself: submitted again by the
        next sweep into the same directory."""
        return (self.reason or "").startswith(protocol.CUT_OFF)

    @property
    def cancelled_as_orch_stopped(self) -> bool:
        """orch cancels (or cancelled) its job because the orch process that followed it was
        stopped (a signal, Ctrl-C)."""
        return (self.cancel_requested or "").startswith(ORCH_STOPPED)

    @property
    def stopped_with_orch(self) -> bool:
        """Cancelled as the orch process that followed it was stopped: says nothing about the
        workload, so the next sweep into the same directory submits it again."""
        return self.state == "CANCELLED" and self.cancelled_as_orch_stopped



def logs_digest(rdir: Path) -> str:
    """sha256 over every rank log's name and bytes (empty when there are none)."""
    import hashlib

    h = hashlib.sha256()
    for path in sorted((rdir / protocol.RANKS_DIR).glob("rank-*.jsonl")):
        h.update(path.name.encode() + b"\0")
        try:
            h.update(path.read_bytes())
        except OSError:
            h.update(b"\0unreadable")
        h.update(b"\0")
    return h.hexdigest()[:16]


def run_dir(out: Path, run: Run) -> Path:
    return out / run.run_id


write_json_atomic = files.write_json_atomic


@dataclass(frozen=True)
class Prepared:
    """A run whose directory is ready: what to do with it next."""

    run: Run
    rdir: Path
    record: JobRecord
    action: str  # "submit" | "wait" | "skip"


def materialise(rdir: Path, run: Run, scripts: dict[str, str], provenance: dict,
                record: JobRecord) -> None:
    """Write a run directory: its Run record, its scripts (job.sbatch and launch.sh; any other
    file, such as the container wrapper, executable), provenance.json, then its ledger entry
    last, so a directory with a ledger entry is always complete. The one place that writes
    them: a sweep and a rerun both come through here."""
    rdir.mkdir(parents=True, exist_ok=True)
    files.write_text_atomic(rdir / protocol.RUN_FILE, run.model_dump_json(indent=2) + "\n")
    for name, text in scripts.items():
        executable = name not in ("job.sbatch", "launch.sh")
        files.write_text_atomic(rdir / name, text, mode=0o755 if executable else None)
    files.write_json_atomic(rdir / protocol.PROVENANCE_FILE, provenance)
    write_record(rdir, record)


class DamagedFile(UserError):
    """A ledger (job.json) or run record (run.json) that cannot be read."""


def _read_model(path: Path, model, what: str):
    try:
        return model.model_validate_json(path.read_bytes())
    except ValueError as exc:
        first = exc.errors()[0]["msg"] if hasattr(exc, "errors") else str(exc)
        raise DamagedFile(f"{path}: damaged {what} ({first}); move the run directory aside, "
                          f"or delete this file and re-run the sweep (its measured files then "
                          f"move to attempts/)") from None


def read_record(rdir: Path) -> JobRecord | None:
    path = rdir / protocol.JOB_FILE
    if not path.exists():
        return None
    return _read_model(path, JobRecord, "ledger entry")


def write_record(rdir: Path, record: JobRecord) -> JobRecord:
    """Write a run's ledger entry, its history brought up to date: a change of attempt, state,
    job id or reason appends an event (with the job's nodes, once known). Returns the record
    as written (keep it: the next write starts from its history).

    Every writer of a ledger comes through here, so no state change goes unrecorded; a caller
    holding an older copy cannot drop events another writer added (the longer history on disk
    wins when it extends the caller's)."""
    history = list(record.history)
    try:
        disk = read_record(rdir)
    except DamagedFile:
        disk = None
    if disk is not None and len(disk.history) > len(history) \
            and disk.history[:len(history)] == history:
        history = list(disk.history)
    last = history[-1] if history else None
    if last is None or (last.attempt, last.state, last.job_id, last.reason) != (
            record.attempt, record.state, record.job_id, record.reason):
        history.append(Event(at=now(), attempt=record.attempt, state=record.state,
                             job_id=record.job_id, nodes=record.nodes, reason=record.reason))
    record = record.model_copy(update={"history": history})
    write_json_atomic(rdir / protocol.JOB_FILE, record.model_dump(mode="json"))
    return record


def read_run(rdir: Path) -> Run:
    return _read_model(rdir / protocol.RUN_FILE, Run, "run record")


def salvage(rdir: Path) -> int:
    """A run directory without a readable ledger: move whatever an earlier attempt left there
    (scripts, rank logs, job output, the damaged ledger) to attempts/<n>/, so nothing measured
    is ever overwritten. Returns the attempt number the new submission gets."""
    kept = (protocol.ATTEMPTS_DIR, protocol.RUN_FILE)
    leftovers = [c for c in rdir.iterdir() if c.name not in kept] if rdir.is_dir() else []
    done = [int(p.name) for p in (rdir / protocol.ATTEMPTS_DIR).glob("*") if p.name.isdigit()]
    n = max(done, default=0) + 1
    if not leftovers:
        return n
    dest = rdir / protocol.ATTEMPTS_DIR / str(n)
    dest.mkdir(parents=True, exist_ok=False)
    for child in leftovers:
        shutil.move(str(child), dest / child.name)
    return n + 1


def run_dirs(out: Path) -> list[Path]:
    """Every run directory of a sweep directory, sorted by name."""
    if not out.is_dir():
        return []
    return sorted(p for p in out.iterdir() if (p / "run.json").is_file())


def find_run(run_id: str, sweep_dir: Path | None = None, root: Path = Path("runs")) -> Path:
    """A run's directory: in ``sweep_dir`` if given, else in any sweep directory under
    ``root`` (orch's default --out is runs/<site>). Errors name what was searched."""
    from ..errors import UserError

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
    dest = rdir / protocol.ATTEMPTS_DIR / str(record.attempt)
    if dest.exists():  # a salvaged attempt took that number: keep both
        return salvage(rdir)
    dest.mkdir(parents=True, exist_ok=False)
    for child in list(rdir.iterdir()):
        if child.name not in (protocol.ATTEMPTS_DIR, protocol.RUN_FILE):
            shutil.move(str(child), dest / child.name)
    return record.attempt + 1


def next_attempt(rdir: Path, record: JobRecord, keep: tuple[str, ...] = (),
                 **updates) -> JobRecord:
    """Set up the next attempt of a run in place: this attempt's files (scripts, rank logs,
    job output, ledger) move to attempts/<n>/, and the attempt's inputs (the scripts named in
    provenance.json, provenance.json itself, and ``keep``) are copied back, so the retry runs
    the very same scripts into fresh files. Returns the new attempt's record (state NEW,
    carrying the history and ``updates``); nothing measured is touched."""
    import json

    n = archive_attempt(rdir, record)
    src = rdir / protocol.ATTEMPTS_DIR / str(n - 1)
    try:
        prov = json.loads((src / protocol.PROVENANCE_FILE).read_text())
        scripts = list(prov.get("scripts", {}).get("files", {}))
    except (OSError, ValueError, AttributeError):
        scripts = ["job.sbatch", "launch.sh"]
    for name in (*scripts, protocol.PROVENANCE_FILE, *keep):
        if (src / name).is_file() and "/" not in name:
            shutil.copy2(src / name, rdir / name)
    fresh = JobRecord(run_id=record.run_id, attempt=n, scheduler=record.scheduler,
                      history=record.history, excluded=record.excluded, retries=record.retries)
    return fresh.model_copy(update=updates)


def now() -> float:
    return time.time()


# <out>/SWEEP_LOG: what the orch processes that ran a sweep did, one timestamped line each
# (started, each run's state change, stopped by a signal and what it left running, ended),
# appended by every orch sweep on the directory: the record a controller that died leaves.
SWEEP_LOG = "sweep.log"


def log_line(out: Path, text: str) -> None:
    """Append ``text`` (one line a line of it) to the sweep's log, stamped in UTC. A log that
    cannot be written costs the log line, never the sweep."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    lines = "".join(f"{stamp} {line}\n" for line in text.splitlines() or [""])
    try:
        with open(out / SWEEP_LOG, "a", encoding="utf-8") as fh:
            fh.write(lines)
    except OSError:
        pass


_LOCKS: dict[Path, object] = {}


def lock_sweep(out: Path) -> None:
    """An exclusive lock on the sweep directory (``<out>/.orch/lock``), held until this process
    ends: a second ``orch sweep`` on the same --out would interleave its jobs into the same rank
    logs and ledger, so it is refused with a line naming the holder."""
    import fcntl
    import os

    out = out.resolve()
    if out in _LOCKS:
        return
    try:
        (out / ".orch").mkdir(parents=True, exist_ok=True)
        fh = open(out / ".orch" / "lock", "a+")  # noqa: SIM115 (held for the process's life)
    except OSError as exc:
        raise UserError(f"--out {out}: cannot create the sweep directory: "
                        f"{exc.strerror or exc}") from None
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.seek(0)
        holder = fh.read().strip() or "another process"
        fh.close()
        raise UserError(f"--out {out}: another orch sweep ({holder}) is using this sweep "
                        f"directory; wait for it to end (follow it with 'orch status {out}'), "
                        f"or choose another --out") from None
    fh.seek(0)
    fh.truncate()
    fh.write(f"pid {os.getpid()}\n")
    fh.flush()
    _LOCKS[out] = fh
