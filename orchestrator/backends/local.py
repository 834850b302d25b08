"""The local site's scheduler: this machine, submitit's LocalExecutor, one job at a time."""

from __future__ import annotations

import atexit
import contextlib
import os
from pathlib import Path

from .. import protocol
from ..jobscript import job_function, killpg
from .base import Scheduler, register_scheduler, scheduler


@register_scheduler
class LocalScheduler(Scheduler):
    """Runs each job as a local process group; the orch process that submits it follows it."""

    name = "local"
    sequential = True  # concurrent ranks of two runs would distort both
    allocation = False  # every "node" is this machine
    cancel_is_final = True
    runs_here = True
    hand_verb = "Run by hand"
    hand_command = "bash"
    hand_note = "(local site: no scheduler, ranks are local processes)"
    # excludes_nodes stays False: every "node" is this machine, there is nothing to avoid.
    # A stopped orch (SIGTERM, SIGHUP, Ctrl-C) cancels its local run: the run's ranks are
    # processes of this machine that nothing would follow (no hang watch, no next run: the
    # sweep's controller runs them one at a time), computing beside whatever runs next on it
    # (a new sweep on the same directory, the CI job's next step) until their time limit. The
    # next orch sweep into the directory submits the run again (JobRecord.stopped_with_orch).
    outlives_orch = False

    def __init__(self) -> None:
        self._jobs: dict[str, object] = {}
        # The registry keeps this scheduler, and so its submitit jobs, alive until the
        # interpreter shuts down; a job's __del__ run then, after pathlib's globals are gone,
        # prints a TypeError traceback after orch's last line (seen when a sweep stops early).
        # Dropped at exit instead, while every module is still whole.
        atexit.register(self._jobs.clear)

    # The local site's job script is a Slurm job script that bash runs (its #SBATCH lines are
    # comments), the same one a cluster's sbatch would take: its request and step options are
    # Slurm's.
    def job_options(self, job, partition) -> dict[str, str | bool]:
        return scheduler("slurm").job_options(job, partition)

    def request_lines(self, job, partition) -> list[str]:
        return scheduler("slurm").request_lines(job, partition)

    def step_options(self, job, partition, packed: bool = False) -> str:
        return scheduler("slurm").step_options(job, partition, packed)

    def agent_binding(self, partition) -> str:
        return scheduler("slurm").agent_binding(partition)

    def submit(self, run, rdir: Path, partition, job) -> str:
        import submitit

        yield_to_ranks()

        executor = submitit.LocalExecutor(folder=rdir / "submitit")
        # Every virtual node is this machine, so each sees the partition's GPUs, as Slurm's
        # --gpus-per-node gives each node its own. Said explicitly: submitit's LocalExecutor
        # sets CUDA_VISIBLE_DEVICES to the first gpus_per_node devices, and to none (every
        # GPU hidden, a CUDA build of torch finds no device) when it is not given.
        executor.update_parameters(timeout_min=run.time_limit_min + 1, tasks_per_node=1,
                                   gpus_per_node=partition.gpus_per_node or 0)
        job = executor.submit(job_function, str(rdir), run.time_limit_min * 60)
        self._jobs[job.job_id] = job
        return str(job.job_id)

    def poll(self, records, rdirs) -> dict[str, tuple[str, str]]:
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

    def cancel(self, record, rdir: Path) -> None:
        pgid = rdir / ".pgid"
        if pgid.exists():
            killpg(int(pgid.read_text()))
        job = self._jobs.get(record.job_id or "")
        if job is not None:
            job.cancel(check=False)


def _orphaned_local(record, rdir: Path) -> tuple[str, str]:
    """A local job started by an orch process that is gone (killed outright: a stopped orch
    cancels its job): still running while its job script's process group or submitit's
    controller (its pid is the job id) lives; else ended, judged by its rank logs
    (execute.finalize) when the job script recorded its end (job-times.json, written however
    it ended), FAILED when it did not get that far."""
    pgid = rdir / ".pgid"
    if pgid.exists():
        try:
            os.killpg(int(pgid.read_text()), 0)
            return ("RUNNING", "")
        except (ProcessLookupError, ValueError):
            pass
        except PermissionError:  # a live group of another user's: still running
            return ("RUNNING", "")
    if (record.job_id or "").isdigit() and _alive(int(record.job_id)):
        return ("RUNNING", "")  # the job function still ends (writes job-times.json)
    if (rdir / protocol.JOB_TIMES_FILE).exists():
        return ("COMPLETED", "")
    return ("FAILED", "the orch process that ran this local job exited before it finished")


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie, ended but not reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def yield_to_ranks() -> None:
    """Put this process (orch's follow loop) under SCHED_BATCH, and with it what it starts:
    submitit's local controller, which polls its job 24 times a second.

    On the local site these share the cores with the ranks they watch. Under SCHED_OTHER each
    wake-up preempts a running rank, and one rank held up holds up every rank of a synchronous
    step (benchmarks.fidelity measured the cost: 3-8%). Linux's fair scheduler never lets a
    waking SCHED_BATCH task preempt a running one: it runs when a core is free or at the
    running task's next tick, while still getting its fair share, so orch is never starved.
    The job script itself goes back to SCHED_OTHER (jobscript.as_ranks_run), so the ranks
    run as they would without orch. Lowering one's own policy needs no privilege; where the
    call is missing or refused, nothing changes."""
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
