"""The job function around job.sbatch: one execution per attempt, a blocking wait that still
stops the script at its time limit."""

from __future__ import annotations

import contextlib
import os
import signal

import pytest


def test_second_execution_of_an_attempt_is_refused(tmp_path):
    """A requeued job runs the batch script again in the same directory: job_function refuses
    it (job-times.json shows the attempt already ran) and runs nothing."""
    from orchestrator import jobscript

    mark = tmp_path / "ran"
    (tmp_path / "job.sbatch").write_text(f"touch {mark}\n")
    (tmp_path / "job-times.json").write_text("{}")
    with pytest.raises(RuntimeError, match="already holds an execution"):
        jobscript.job_function(str(tmp_path), 30)
    assert not mark.exists()


def test_an_earlier_jobs_late_times_go_to_its_attempt_and_the_retry_runs(tmp_path,
                                                                           monkeypatch):
    """A retry's job starts while the cancelled first job is still dying: the first job's
    job-times.json, written after orch moved its attempt to attempts/1/, is moved beside that
    job's output there, and the retry runs; the same job id (a requeue) is still refused."""
    import json

    from orchestrator import jobscript

    (tmp_path / "attempts" / "1").mkdir(parents=True)
    (tmp_path / "attempts" / "1" / "slurm-4150.out").write_text("")
    late = json.dumps({"job_id": "4150", "script_ended_at": 1.0})
    (tmp_path / "job-times.json").write_text(late)
    (tmp_path / "job.sbatch").write_text("echo ran\n")
    monkeypatch.setenv("SLURM_JOB_ID", "4151")
    assert jobscript.job_function(str(tmp_path), 30) == 0
    assert (tmp_path / "attempts" / "1" / "job-times.json").read_text() == late
    assert json.loads((tmp_path / "job-times.json").read_text())["job_id"] == "4151"
    assert (tmp_path / "slurm-4151.out").read_text() == "ran\n"
    monkeypatch.setenv("SLURM_JOB_ID", "4151")  # run again under the same id: a requeue
    with pytest.raises(RuntimeError, match="already holds an execution"):
        jobscript.job_function(str(tmp_path), 30)


def test_job_function_waits_without_polling_and_still_times_out(tmp_path):
    """job_function waits for job.sbatch in a blocking wait (no 50 ms polls beside the ranks):
    a script within the limit returns at once with its status, one past it is stopped (its
    whole process group) at the limit, and both leave job-times.json.

    Neither script would end in the test's time by itself: the quick one's limit is a day, the
    slow one's child sleeps a day. So that each call returns at all shows it returned on the
    script's exit, or stopped the script's group at the limit, with no bound on how long it
    took (a loaded machine is slow); an alarm only turns a broken wait into a failure."""
    from orchestrator import jobscript

    day = 86400
    quick, slow = tmp_path / "quick", tmp_path / "slow"
    for d, body in ((quick, "exit 0\n"),
                    (slow, f"sleep {day} & echo $! > {tmp_path}/child\nwait\n")):
        d.mkdir()
        (d / "job.sbatch").write_text(body)
    with _alarm(600, "job_function did not return: it waited for the limit or the child"):
        assert jobscript.job_function(str(quick), day) == 0
        with pytest.raises(jobscript.JobTimeout, match="time limit of 1 s"):
            jobscript.job_function(str(slow), 1)
    child = int((tmp_path / "child").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)
    assert (quick / "job-times.json").is_file() and (slow / "job-times.json").is_file()


@contextlib.contextmanager
def _alarm(seconds: int, what: str):
    """Fail (SIGALRM interrupts the main thread's wait) if the block runs past ``seconds``:
    a bound on a wait that a correct program ends, so that a broken one fails, not hangs."""
    def fail(_signum, _frame):
        raise AssertionError(f"{what} (after {seconds} s)")

    previous = signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
