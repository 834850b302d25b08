"""Submit: the only module that talks to a scheduler (through submitit).

Both backends run the *same* rendered ``job.sbatch``: submitit starts one controller task
(``use_srun=False`` on Slurm; LocalExecutor here) that executes it. The job's real geometry
(nodes, tasks per node) goes to Slurm through ``additional_parameters`` so that submitit still
waits for one result, while the script's own ``srun``/``mpirun`` starts the ranks. That is how
orch supports MPI-style launchers, which submitit alone does clumsily.

States: one map from Slurm's job states to orch's (PENDING, RUNNING, COMPLETED, FAILED,
CANCELLED, TIMEOUT). A scheduler's COMPLETED is then checked against the rank logs (gather).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from . import gather, rundir
from .errors import SubmitError
from .jobscript import job_function, killpg
from .render import sbatch_options
from .rundir import JobRecord
from .site import Partition
from .sweep import Run

SLURM_STATES = {
    "PENDING": "PENDING", "CONFIGURING": "PENDING", "REQUEUED": "PENDING",
    "REQUEUE_FED": "PENDING", "REQUEUE_HOLD": "PENDING", "RESV_DEL_HOLD": "PENDING",
    "RUNNING": "RUNNING", "COMPLETING": "RUNNING", "STAGE_OUT": "RUNNING",
    "SUSPENDED": "RUNNING", "RESIZING": "RUNNING", "SIGNALING": "RUNNING",
    "COMPLETED": "COMPLETED",
    "FAILED": "FAILED", "NODE_FAIL": "FAILED", "BOOT_FAIL": "FAILED", "OUT_OF_MEMORY": "FAILED",
    "CANCELLED": "CANCELLED", "PREEMPTED": "CANCELLED", "REVOKED": "CANCELLED",
    "TIMEOUT": "TIMEOUT", "DEADLINE": "TIMEOUT",
}  # fmt: skip



# --- backends ------------------------------------------------------------------------------


class LocalBackend:
    """The local site: submitit's LocalExecutor, one job at a time."""

    scheduler = "local"

    def __init__(self) -> None:
        self._jobs: dict[str, object] = {}

    def check(self, partition: Partition) -> None:
        """Nothing to reach."""

    def submit(self, run: Run, rdir: Path, partition: Partition) -> str:
        import submitit

        executor = submitit.LocalExecutor(folder=rdir / "submitit")
        executor.update_parameters(timeout_min=run.time_limit_min + 1, tasks_per_node=1)
        job = executor.submit(job_function, str(rdir), run.time_limit_min * 60)
        self._jobs[job.job_id] = job
        return str(job.job_id)

    def poll(self, records: list[JobRecord], rdirs: list[Path]) -> dict[str, tuple[str, str]]:
        """run_id → (state, reason) for local jobs this process started."""
        out = {}
        for record, rdir in zip(records, rdirs, strict=True):
            job = self._jobs.get(record.job_id or "")
            if job is None:
                out[record.run_id] = _orphaned_local(record, rdir)
                continue
            if not job.done():
                out[record.run_id] = ("RUNNING", "")
                continue
            try:
                job.result()
                out[record.run_id] = ("COMPLETED", "")
            except Exception as exc:
                # Its text is a traceback and log paths: the rank logs explain better (finalize).
                text = str(exc)
                timeout = "JobTimeout" in text or "time limit" in text
                out[record.run_id] = ("TIMEOUT", "") if timeout else ("FAILED", "")
        return out

    def cancel(self, record: JobRecord, rdir: Path) -> None:
        pgid = rdir / ".pgid"
        if pgid.exists():
            killpg(int(pgid.read_text()))
        job = self._jobs.get(record.job_id or "")
        if job is not None:
            job.cancel(check=False)


def _orphaned_local(record: JobRecord, rdir: Path) -> tuple[str, str]:
    """A local job started by an orch process that is gone: alive, or finished without us."""
    pgid = rdir / ".pgid"
    if pgid.exists():
        try:
            os.killpg(int(pgid.read_text()), 0)
            return ("RUNNING", "")
        except ProcessLookupError:
            pass
    return ("FAILED", "the orch process that ran this local job exited before it finished")


class SlurmBackend:
    """A Slurm cluster: submitit's SlurmExecutor; state from sacct, cancel with scancel."""

    scheduler = "slurm"

    def check(self, partition: Partition) -> None:
        """Fail before anything is submitted if Slurm or the partition cannot be reached."""
        try:
            res = subprocess.run(["sinfo", "-h", "-p", partition.name, "-o", "%P %D"],
                                 capture_output=True, text=True, timeout=30)
        except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
            raise SubmitError(f"Slurm is not reachable from here (sinfo: {exc})") from None
        if res.returncode != 0:
            raise SubmitError(f"Slurm is not reachable: {res.stderr.strip() or res.stdout}")
        if not res.stdout.strip():
            raise SubmitError(f"Slurm has no partition '{partition.name}' (sinfo -p shows none)")

    def submit(self, run: Run, rdir: Path, partition: Partition) -> str:
        import submitit

        opts = sbatch_options(run, partition, rdir)
        for key in ("job-name", "partition", "output"):
            opts.pop(key, None)
        # submitit always asks for --signal=USR2@90 (its checkpoint/requeue warning), sent to
        # every task: ranks die of it 90 s before the limit, a FAILED run instead of TIMEOUT.
        # orch does not requeue, so the warning goes to the batch shell only, as SIGURG,
        # whose default action is to ignore it (job.sbatch by hand has no --signal at all).
        opts["signal"] = "B:URG@90"
        executor = submitit.SlurmExecutor(folder=rdir / "submitit", python=sys.executable)
        executor.update_parameters(
            job_name=run.run_id, partition=partition.name, use_srun=False,
            stderr_to_stdout=True, additional_parameters=opts,
        )
        try:
            job = executor.submit(job_function, str(rdir), run.time_limit_min * 60 + 60)
        except Exception as exc:
            raise SubmitError(f"sbatch refused run {run.run_id}: {exc}") from None
        return str(job.job_id)

    def poll(self, records: list[JobRecord], rdirs: list[Path]) -> dict[str, tuple[str, str]]:
        """State of each run's job: slurmctld (squeue) first, accounting (sacct) after.

        slurmctld is authoritative for live jobs and for finished ones it still remembers
        (MinJobAge); slurmdbd lags, and shows a running job as a placeholder named
        'allocation' in state PENDING. Only jobs slurmctld has forgotten come from sacct.
        """
        ids = [r.job_id for r in records if r.job_id]
        if not ids:
            return {}
        seen = _squeue(ids)
        missing = [i for i in ids if i not in seen]
        if missing:
            seen.update(_sacct(missing))
        out = {}
        for record in records:
            name, raw = seen.get(record.job_id or "", (None, None))
            if raw is None:  # neither knows it yet (just submitted)
                out[record.run_id] = ("PENDING", "")
            elif name != record.run_id:
                # Job ids restart after a cluster reset: this id now belongs to another job.
                out[record.run_id] = ("FAILED", f"job {record.job_id} is no longer this run's "
                                      f"(Slurm knows it as '{name}')")
            else:
                state = SLURM_STATES.get(raw, "FAILED")
                out[record.run_id] = (state, "" if state != "FAILED" else f"Slurm state {raw}")
        return out

    def cancel(self, record: JobRecord, rdir: Path) -> None:
        if record.job_id:
            subprocess.run(["scancel", record.job_id], capture_output=True, timeout=30)


def _query(cmd: list[str]) -> dict[str, tuple[str, str]]:
    """job id -> (job name, state word) from a '|'-separated squeue/sacct listing."""
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    seen: dict[str, tuple[str, str]] = {}
    for line in res.stdout.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[2]:
            seen[parts[0]] = (parts[1], parts[2].split()[0])
    return seen


def _squeue(ids: list[str]) -> dict[str, tuple[str, str]]:
    return _query(["squeue", "-h", "--states=all", "-j", ",".join(ids), "-o", "%i|%j|%T"])


def _sacct(ids: list[str]) -> dict[str, tuple[str, str]]:
    return _query(["sacct", "-X", "-n", "-P", "-j", ",".join(ids), "-o",
                   "JobIDRaw,JobName,State"])


def backend_for(scheduler: str) -> LocalBackend | SlurmBackend:
    return LocalBackend() if scheduler == "local" else SlurmBackend()


# --- finishing a run -----------------------------------------------------------------------


def finalize(run: Run, rdir: Path, record: JobRecord, state: str, reason: str) -> JobRecord:
    """Turn the scheduler's terminal state into orch's, checked against the rank logs."""
    logs = gather.read_run_logs(rdir) if (rdir / "ranks").is_dir() else []
    if state == "COMPLETED":
        ok, why = gather.verdict(run, rdir, logs)
        if not ok:
            state, reason = "FAILED", why or "rank logs incomplete"
    elif state == "FAILED":
        # The scheduler's word (e.g. NODE_FAIL, a reused job id) and the root cause in the logs.
        found = gather.failure_reason(rdir, run, logs)
        reason = "; ".join(r for r in (reason, found) if r)
    elif state == "TIMEOUT":
        reason = reason or f"time limit of {run.time_limit_min} min reached"
    elif state == "CANCELLED":
        reason = reason or "cancelled"
    return record.model_copy(update={"state": state, "reason": reason or None,
                                     "ended_at": rundir.now()})
