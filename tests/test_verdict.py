"""A run's verdict: the rank that failed first is the reason, locally and on Slurm."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, frozen_rank, run_orch, wait_until


def _kill_rank_when_running(out: Path, rank: int, sig: int, nodes: str = "2",
                            site: str = "local") -> dict:
    """A 2-rank run; signal one rank mid-training; the run's result record. The rank freezes
    itself at iteration 3 (no hang timeout) and is signalled once it has: surely mid-training,
    three iterations logged (a run watched for three logged iterations could be past them, or
    done, by the time the signal came)."""
    proc = subprocess.Popen([sys.executable, "-m", "orchestrator", "sweep", "--site", site,
                             "--nodes", nodes,
                             "--iters", "100000", "--warmup", "1", "--time-limit", "3",
                             "--inject-failure", f"{rank}@3:stop", "--hang-timeout", "0",
                             "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        pid = wait_until(f"rank {rank} to freeze", lambda: frozen_rank(out, rank), timeout=300,
                         proc=proc)
        log = next(out.glob(f"*/ranks/rank-{rank}.jsonl")).read_text()
        assert log.count('"type":"iter"') == 3, log  # its records, written before it froze
        os.kill(pid, sig)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
        stuck = frozen_rank(out, rank)  # the test failed before it signalled the rank
        if stuck:
            os.kill(stuck, signal.SIGKILL)
    return json.loads(run_orch("results", out, "--format", "json", check=True).stdout)[0]


def test_sigkilled_rank_is_the_reason_not_rank_0(tmp_path):
    rec = _kill_rank_when_running(tmp_path / "kill", 1, signal.SIGKILL)
    assert rec["state"] == "FAILED"
    first_line = rec["reason"].splitlines()[0]
    assert first_line.startswith("rank 1: "), rec["reason"]
    assert first_line.endswith("[first to fail: killed by SIGKILL]"), rec["reason"]


@pytest.mark.slurm
def test_sigkilled_rank_is_the_reason_on_slurm(slurm_cluster, tmp_path):
    """srun's first 'task N:' error line names the rank that died first."""
    rec = _kill_rank_when_running(tmp_path / "kill", 1, signal.SIGKILL, site=slurm_cluster)
    assert rec["state"] == "FAILED"
    first_line = rec["reason"].splitlines()[0]
    # after Slurm's own word ("Slurm state FAILED; ")
    assert re.search(r"(^|; )rank 1: .*\[first to fail: Killed\]$", first_line), rec["reason"]


# --- a failed rank's reason, as a person reads it (synthetic rank logs) -------------------------

MISSING = "ModuleNotFoundError: No module named 'mpi4py'"
TRACEBACK = f"""Traceback (most recent call last):
  File "/opt/orch/modes/mpi_ssgd/rank.py", line 40, in main
    comm = world()
  File "/opt/orch/modes/mpi_ssgd/rank.py", line 12, in world
    from mpi4py import MPI
{MISSING}
"""


def _one_rank_run(tmp_path: Path, footer: dict | None, output: str = ""):
    """A 1-rank local run whose rank wrote a header on node1 and ``footer`` (None: no log)."""
    from orchestrator import site as sitemod
    from orchestrator.plan.sweep import SweepSpec, expand

    run = expand(SweepSpec(nodes=(1,)), sitemod.load("local")[0])[0]
    ranks = tmp_path / "run" / "ranks"
    ranks.mkdir(parents=True)
    if footer is not None:
        header = {"type": "header", "run_id": run.run_id, "task": 0, "rank": 0,
                  "role": "worker", "host": "node1", "node": "node1"}
        lines = [header, {"type": "footer", "ended_at": 1.0, **footer}]
        (ranks / "rank-0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    if output:
        (ranks / "rank-0.out").write_text(output)
    return run, tmp_path / "run"


def _reason(run, rdir: Path) -> str:
    from orchestrator.runs import verdict

    ok, reason = verdict.verdict(run, rdir, verdict.read_run_logs(rdir))
    assert not ok and reason
    return reason


def test_reason_is_the_exception_line_with_rank_and_node_and_points_at_the_traceback(tmp_path):
    run, rdir = _one_rank_run(tmp_path, {"status": "error", "error": TRACEBACK[-200:],
                                         "exception": MISSING}, output=TRACEBACK)
    lines = _reason(run, rdir).splitlines()
    assert lines == [f"rank 0: {MISSING} (on node1)", f"traceback: {rdir}/ranks/rank-0.out"]


def test_reason_from_a_footer_with_only_the_traceback_tail(tmp_path):
    """Logs written before the footer held the exception's line apart: read from the tail; with
    no rank output here to point at, the tail itself follows the first line."""
    run, rdir = _one_rank_run(tmp_path, {"status": "error", "error": TRACEBACK})
    lines = _reason(run, rdir).splitlines()
    assert lines[0] == f"rank 0: {MISSING} (on node1)"
    assert lines[1] == "traceback ends:" and lines[-1] == MISSING


def test_reason_of_an_error_that_is_no_traceback_is_kept(tmp_path):
    run, rdir = _one_rank_run(tmp_path, {"status": "error", "error": "failed"})
    assert _reason(run, rdir) == "rank 0: failed"


def test_reason_of_a_rank_without_log_leads_with_the_exception_in_its_output(tmp_path):
    run, rdir = _one_rank_run(tmp_path, None, output=TRACEBACK)
    first = _reason(run, rdir).splitlines()[0]
    assert first == f"rank 0: no log ({MISSING}); its output ends:"


def test_a_rank_that_never_started_is_explained_by_the_job_output(tmp_path):
    """No log and no output of its own: the job script or srun failed before the rank ran, and
    the job's output says why; a retry's (the later job id) is read, not the first attempt's."""
    from orchestrator.runs import verdict

    run, rdir = _one_rank_run(tmp_path, None)
    (rdir / "slurm-99.out").write_text("an earlier job's line\n")
    (rdir / "slurm-100.out").write_text("srun: error: Unable to create step for job 100: "
                                        "Invalid node name specified\n")
    reason = verdict.failure_reason(rdir, run, verdict.read_run_logs(rdir))
    assert reason.splitlines() == ["rank 0: no log; the job's output ends:",
                                   "srun: error: Unable to create step for job 100: Invalid "
                                   "node name specified"]
    # the job's controller failed before job.sbatch ran: submitit's log says why
    (rdir / "slurm-99.out").unlink()
    (rdir / "slurm-100.out").unlink()
    (rdir / "submitit").mkdir()
    (rdir / "submitit" / "100_0_log.out").write_text(
        "submitit ERROR - Submitted job triggered an exception\nRuntimeError: job 100: "
        "already holds an execution of this attempt\n")
    (rdir / "submitit" / "99_0_log.out").write_text("an earlier job's line\n")
    reason = verdict.failure_reason(rdir, run, [])
    assert reason.splitlines()[0] == "rank 0: no log; the job's output ends:"
    assert reason.splitlines()[-1] == ("RuntimeError: job 100: already holds an execution of "
                                       "this attempt")
    for log in (rdir / "submitit").iterdir():
        log.unlink()
    assert verdict.failure_reason(rdir, run, []) == "rank 0: no log"


@pytest.mark.parametrize(("text", "line"), [
    (TRACEBACK, MISSING),
    # The last lines of a deep traceback (no header), as the footer's error keeps them.
    ("\n".join(TRACEBACK.splitlines()[-3:]), MISSING),
    # Chained: the last exception is the one that ended the rank.
    ("Traceback (most recent call last):\n  File \"a.py\", line 1, in f\n    x[1]\n"
     "KeyError: 1\n\nDuring handling of the above exception, another exception occurred:\n\n"
     "Traceback (most recent call last):\n  File \"a.py\", line 3, in f\n    raise ValueError\n"
     "ValueError: bad value\n", "ValueError: bad value"),
    ("RuntimeError: a message without a traceback", None),
    ("mpirun exited with status 1:\nsome text", None),
])
def test_exception_line(text, line):
    from orchestrator.runs import verdict

    assert verdict.exception_line(text) == line
