"""The local site's scheduler for real: what the job script is started with.

Each test submits a one-line job.sbatch through LocalScheduler (submitit's LocalExecutor and
orch's job function, as a sweep does) and reads back what the script saw.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from orchestrator.backends.local import LocalScheduler

from .conftest import ROOT, frozen_rank, orch, wait_until


def submit_and_wait(rdir: Path, script: str, gpus: int = 0) -> tuple[str, list[int | None]]:
    """Run ``script`` as a local job; what it wrote to ``seen``, and the scheduling policy
    of submitit's controller sampled every 0.1 s while the job ran. The job waits for the test
    to sample once before it runs ``script``: at least one sample is of a running job, however
    slow or fast the machine (a job that slept 1 s could end before a loaded test looked)."""
    (rdir / "job.sbatch").write_text("until [ -e go ]; do sleep 0.05; done\n" + script)
    sched = LocalScheduler()
    try:
        job_id = sched.submit(SimpleNamespace(time_limit_min=1), rdir,
                              SimpleNamespace(gpus_per_node=gpus), {})
        job = sched._jobs[job_id]
        controller = job._process.pid
        policies = [_policy(controller)]  # the job waits for "go": the controller is there
        (rdir / "go").touch()
        deadline = time.monotonic() + 300  # bounds a broken job's wait, not the job's pace
        while not job.done():
            assert time.monotonic() < deadline, "the local job did not end"
            policies.append(_policy(controller))
            time.sleep(0.1)
        return (rdir / "seen").read_text(), policies
    finally:  # this test process was the submitter: put it back as it was
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def _policy(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[38])
    except (OSError, IndexError, ValueError):
        return None


@pytest.mark.parametrize("gpus,visible", [(2, "0,1"), (0, "")])
def test_local_scheduler_hands_the_partition_gpus_to_the_job(tmp_path, gpus, visible):
    """submitit's LocalExecutor hides every GPU unless told the count (seen on the H200:
    torch.cuda.is_available() was False in every rank until this was passed)."""
    seen, _ = submit_and_wait(tmp_path, 'printf "%s|ok" "${CUDA_VISIBLE_DEVICES-unset}" > seen\n',
                              gpus)
    assert seen == f"{visible}|ok"


def test_orch_and_submitit_yield_to_the_ranks_and_the_job_runs_normally(tmp_path):
    """orch's follow loop and submitit's controller (24 polls a second) run SCHED_BATCH, so
    their wake-ups never preempt a rank; the job script, and so the ranks, SCHED_OTHER."""
    seen, policies = submit_and_wait(
        tmp_path, 'python3 -c "import os; print(os.sched_getscheduler(0))" > seen\n')
    assert int(seen) == os.SCHED_OTHER
    assert os.SCHED_BATCH in policies and os.SCHED_OTHER not in policies


def test_status_after_orch_was_killed_says_what_really_runs(tmp_path):
    """orch killed outright (SIGKILL: nothing to handle) while its local run's rank is frozen:
    orch status shows the run RUNNING while its processes live; continued, the run ends by
    itself, and orch status judges it by its rank logs: COMPLETED, not 'the orch process
    exited before it finished'."""
    out = tmp_path / "sweep"
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "sweep", "--nodes", "1",
                             "--iters", "3", "--warmup", "1", "--inject-failure", "0@1:stop",
                             "--hang-timeout", "0", "--no-preflight", "--out", str(out)],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pid = None
    try:
        pid = wait_until("the rank to freeze", lambda: frozen_rank(out, 0), proc=proc)
        proc.kill()
        proc.wait()
        code, shown, err = orch("status", out, "--format", "json")
        assert code == 0 and json.loads(shown)[0]["state"] == "RUNNING", err
        os.kill(pid, signal.SIGCONT)  # the rank goes on as if nothing happened

        def ended():
            state = json.loads(orch("status", out, "--format", "json")[1])[0]
            return state if state["state"] != "RUNNING" else None

        final = wait_until("the run to end", ended, every=1.0)
    finally:
        if proc.poll() is None:
            proc.kill()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
    assert (final["state"], final["reason"]) == ("COMPLETED", None), final
