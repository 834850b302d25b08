"""Slurm for packed sweeps (``orch sweep --pack/--array``, execute/packs.py): submit a
pack's or array's job script, tell each run's state, cancel one run.

A packed run's state comes from three places: the allocation's state (squeue, then sacct),
the files the pack script writes in the run directory (started, step, ended with its exit
status, cut off by the allocation's end), and, for a run that ended badly, its step's state in
sacct (CANCELLED by someone's scancel JOBID.STEP). An array run is a job of its own to Slurm
(JOBID_k): its state is Slurm's, from the scheduler's one query (scheduler.py).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from ... import protocol
from ...errors import SubmitError

# orch's terminal states an allocation can be in (scheduler.SLURM_STATES' values; rundir.STATES).
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL",
            "PREEMPTED", "OUT_OF_MEMORY")
# An allocation that ended so leaves its cut-off runs in the same state (a node failure is
# retried by orch sweep --max-retries); any other end leaves them FAILED.
_PASSED_ON = ("TIMEOUT", "CANCELLED", "NODE_FAIL", "BOOT_FAIL", "PREEMPTED")
Jobs = Callable[[list[str]], dict[str, tuple[str, str]]]
StateOf = Callable[[str], tuple[str, str]]
# timeout(1)'s exit status when the run's own time limit ended it.
TIMEOUT_STATUS = 124


def submit_script(script: Path, name: str) -> str:
    """``sbatch --parsable`` the script (its #SBATCH lines are the whole request)."""
    try:
        res = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True,
                             text=True, timeout=60, cwd=script.parent)
    except (OSError, subprocess.SubprocessError) as exc:
        raise SubmitError(f"sbatch could not submit {name}: {exc}") from None
    if res.returncode != 0:
        raise SubmitError(f"sbatch refused {name} ({script}): "
                          f"{res.stderr.strip() or res.stdout.strip()}")
    return res.stdout.strip().split(";")[0]


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def packed_state(job_id: str, alloc: tuple[str, str] | None, times: dict | None,
                 started: bool, cancel_requested: bool,
                 step_state: str | None) -> tuple[str, str]:
    """orch's (state, reason) of one packed run. ``alloc``: the allocation's (orch state,
    Slurm's word) or None while Slurm does not list it yet; ``times``: job-times.json as the
    pack script wrote it when the run ended; ``step_state``: its step's orch state in sacct."""
    alloc_state, alloc_word = alloc or ("PENDING", "")
    if times is not None:
        status = int(times.get("exit_status", 1))
        if times.get("cut_off"):  # its shell got the allocation's end signal
            if alloc_state not in TERMINAL:  # the allocation is still ending: wait for its word
                return "RUNNING", ""
            return _cut_off(job_id, alloc_state, alloc_word, "while this run was running")
        if times.get("cancelled") or (status != 0 and (cancel_requested
                                                       or step_state == "CANCELLED")):
            return "CANCELLED", ("cancelled before it started" if "script_started_at"
                                 not in times else "cancelled (orch cancel)" if
                                 cancel_requested else "cancelled (scancel of its step)")
        if status == 0:
            return "COMPLETED", ""
        if status == TIMEOUT_STATUS:
            return "TIMEOUT", ""
        return "FAILED", f"job.sbatch exited with status {status}"
    if cancel_requested and not started:
        return "CANCELLED", "cancelled before it started"
    if alloc_state in TERMINAL:
        return _cut_off(job_id, alloc_state, alloc_word,
                        "before this run ended" if started else "before this run started")
    return ("RUNNING", "") if started else ("PENDING", "")


def _cut_off(job_id: str, alloc_state: str, word: str, when: str) -> tuple[str, str]:
    """A run the allocation's end cut off: TIMEOUT, CANCELLED, NODE_FAIL, ... as the
    allocation; an allocation that ended otherwise (its script died) leaves it FAILED.
    Either way the reason starts with CUT_OFF, so the next sweep submits it again."""
    state = alloc_state if alloc_state in _PASSED_ON else "FAILED"
    how = word or alloc_state
    return state, f"{protocol.CUT_OFF}: allocation {job_id} ended ({how}) {when}"


def poll_packs(records: list, rdirs: list[Path], jobs: Jobs, slurm_state: StateOf,
               sacct: Callable[[list[str]], str | None]) -> dict[str, tuple[str, str]]:
    """State of each packed run. ``jobs(ids)``: job id -> (job name, state field) of the
    allocations (the scheduler's own squeue-then-sacct query); ``slurm_state``: Slurm's
    state field -> orch's (state, reason), the one table in scheduler.py; ``sacct(args)``:
    sacct's output, None where accounting cannot answer."""
    ids = sorted({r.job_id for r in records if r.job_id})
    allocs = jobs(ids) if ids else {}
    out = {}
    for record, rdir in zip(records, rdirs, strict=True):
        name, raw = allocs.get(record.job_id or "", (None, None))
        if raw is not None and name != record.pack:
            out[record.run_id] = ("FAILED", f"job {record.job_id} is no longer this run's "
                                  f"pack (Slurm knows it as '{name}')")
            continue
        alloc = None
        if raw is not None:
            state, _reason = slurm_state(raw)
            alloc = (state, raw.split()[0] if raw.split() else raw)
        times = _read_json(rdir / protocol.JOB_TIMES_FILE)
        step_state = None
        if times is not None and int(times.get("exit_status", 0)) not in (0, TIMEOUT_STATUS):
            step = _step(rdir)
            step_state = _step_state(step, slurm_state, sacct) if step else None
        out[record.run_id] = packed_state(
            record.job_id or "?", alloc, times, (rdir / protocol.STEP_STARTED_FILE).exists(),
            (rdir / protocol.CANCEL_FILE).exists(), step_state)
    return out


def _step(rdir: Path) -> str | None:
    try:
        return (rdir / protocol.STEP_FILE).read_text().strip() or None
    except OSError:
        return None


def _step_state(step: str, slurm_state: StateOf,
                sacct: Callable[[list[str]], str | None]) -> str | None:
    """The step's orch state in accounting; None where accounting cannot say."""
    for line in (sacct(["-n", "-P", "-j", step, "-o", "JobID,State"]) or "").splitlines():
        parts = line.split("|")
        if len(parts) == 2 and parts[0] == step:
            return slurm_state(parts[1])[0]
    return None


def named_states(records: list, seen: dict[str, tuple[str, str]], name_of: Callable,
                 slurm_state: StateOf) -> dict[str, tuple[str, str]]:
    """run id -> orch's (state, reason) of each record's job in ``seen`` (job id -> (job
    name, state field)), whose name must be ``name_of(record)``."""
    out = {}
    for record in records:
        name, raw = seen.get(record.job_id or "", (None, None))
        if raw is None:  # neither squeue nor sacct knows it yet (just submitted)
            out[record.run_id] = ("PENDING", "")
        elif name != name_of(record):
            # Job ids restart after a cluster reset: this id now belongs to another job.
            out[record.run_id] = ("FAILED", f"job {record.job_id} is no longer this run's "
                                  f"(Slurm knows it as '{name}')")
        else:
            out[record.run_id] = slurm_state(raw)
    return out


def cancel_packed(record, rdir: Path) -> None:
    """Cancel one packed run: leave CANCEL_FILE, which the pack script checks before it
    starts the run (then skips it) and while it runs (then stops it), and scancel the run's
    own step if it has one. The other runs of the pack go on."""
    (rdir / protocol.CANCEL_FILE).touch()
    step = _step(rdir)
    if step and not (rdir / protocol.JOB_TIMES_FILE).exists():
        subprocess.run(["scancel", step], capture_output=True, timeout=30)
