"""What runs inside a submitted job: execute the rendered job.sbatch and time it.

Kept apart from the scheduler backends, importing only the stdlib and orch's two stdlib-only
ground modules (files, protocol): submitit unpickles this function on the node, and every
module it drags in is start-up latency of every job.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from . import files, protocol

# Grace after SIGTERM before a job's process group is killed.
KILL_GRACE_S = 10


class JobTimeout(RuntimeError):
    pass


def job_function(run_dir: str, time_limit_s: float) -> int:
    """Runs inside the submitit job: execute job.sbatch, its output beside it.

    The script runs in its own session so that a timeout or cancel can stop every rank it
    started (kill the process group), leaving no orphans. job-times.json records when the
    batch process and the script ran, which separates the job's time from orch's overhead.
    """
    rdir = Path(run_dir)
    job_id = os.environ.get("SLURM_JOB_ID") or f"local-{os.getpid()}"
    if (rdir / protocol.JOB_TIMES_FILE).exists() and not late_times_moved(rdir, job_id):
        # A second execution of this attempt (a requeue despite --no-requeue, or a job run by
        # hand twice): never append it to the first one's rank logs.
        raise RuntimeError(f"job {job_id}: {rdir} already holds an execution of this attempt "
                           f"({protocol.JOB_TIMES_FILE}); refusing to run it again there")
    as_ranks_run()
    started = time.time()
    with open(rdir / f"slurm-{job_id}.out", "ab") as out:
        proc = subprocess.Popen(["bash", str(rdir / "job.sbatch")], stdout=out,
                                stderr=subprocess.STDOUT, cwd=rdir, start_new_session=True)
        (rdir / ".pgid").write_text(str(proc.pid))

        def stop(signum, _frame):
            killpg(proc.pid)
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        # A blocking wait, with the time limit on a timer thread: Popen.wait(timeout=...) wakes
        # every 50 ms to poll, and each wake-up beside busy ranks (this process runs on the
        # job's first node) preempts one of them and stalls a synchronous step for all.
        # benchmarks.fidelity: two such pollers cost horovod LeNet-5 ~4% of its samples/s.
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            killpg(proc.pid)

        timer = threading.Timer(time_limit_s, expire)
        timer.daemon = True
        timer.start()
        try:
            code = proc.wait()
            timer.cancel()
            if expired.is_set():
                timer.join()  # the group is gone (killpg's grace, then SIGKILL)
                raise JobTimeout(f"job exceeded its time limit of {time_limit_s:.0f} s")
        finally:
            times = {"job_id": job_id, "process_started_at": process_start(),
                     "script_started_at": started, "script_ended_at": time.time()}
            files.write_text_atomic(attempt_dir(out, rdir) / protocol.JOB_TIMES_FILE,
                                    json.dumps(times, indent=2) + "\n")
    if code != 0:
        raise RuntimeError(f"job.sbatch exited with status {code}")
    return code


def late_times_moved(rdir: Path, job_id: str) -> bool:
    """Whether the job-times.json in ``rdir`` was a dying earlier job's, written after orch
    moved that job's attempt to attempts/<n>/ (the window attempt_dir narrows but cannot
    close), and is now moved there, beside that job's output: True; False where it is this
    job's own (``job_id``: a requeue keeps its id) or its job's output is not in an attempt."""
    path = rdir / protocol.JOB_TIMES_FILE
    try:
        earlier = str(json.loads(path.read_text())["job_id"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    if earlier == job_id:
        return False
    homes = [p.parent for p in (rdir / protocol.ATTEMPTS_DIR).glob(f"*/slurm-{earlier}.out")
             if not (p.parent / protocol.JOB_TIMES_FILE).exists()]
    if len(homes) != 1:
        return False
    os.replace(path, homes[0] / protocol.JOB_TIMES_FILE)
    return True


def as_ranks_run() -> None:
    """Back to the normal CPU policy (SCHED_OTHER) before the job script starts, whose ranks
    inherit it: on the local site orch's processes above this one run SCHED_BATCH
    (backends.local.yield_to_ranks), which the ranks must not. Leaving SCHED_BATCH at the same
    nice value needs no privilege; under Slurm the policy is already the normal one."""
    try:
        if os.sched_getscheduler(0) == os.SCHED_BATCH:
            os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))
    except (AttributeError, OSError):
        pass


def attempt_dir(out, rdir: Path) -> Path:
    """Where this execution's files are now: the directory its open output file is in. orch
    moves a failed attempt to attempts/<n>/ (a retry) while a dying job may still be ending;
    the job's last file must follow it there, not land in the next attempt's files."""
    try:
        where = Path(os.readlink(f"/proc/self/fd/{out.fileno()}")).parent
    except (OSError, ValueError):
        return rdir
    return where if where.is_dir() else rdir


def process_start() -> float | None:
    """When this process started (epoch seconds, 10 ms resolution): the job's launch time.

    /proc/stat's btime has 1 s resolution; the uptime clock and the process's start tick
    have 10 ms.
    """
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def killpg(pgid: int) -> None:
    """SIGTERM a process group, then SIGKILL whatever is left after the grace period. A
    stopped process (SIGSTOP, a frozen rank) acts on SIGTERM only once continued: SIGCONT
    follows it, as Slurm's scancel sends both."""
    for sig, pause in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 0)):
        try:
            os.killpg(pgid, sig)
            if sig == signal.SIGTERM:
                os.killpg(pgid, signal.SIGCONT)
        except ProcessLookupError:
            return
        deadline = time.time() + pause
        while time.time() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)
