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
