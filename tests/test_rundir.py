"""Run directories: --out refused where no sweep directory can be, one orch sweep at a time
per directory (its lock), and a new attempt never overwriting the files of an earlier one."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from orchestrator.runs import rundir

from .conftest import ROOT, frozen_rank, orch, rank0_log, run_orch, wait_until

OUT_CASES = ["file", "under-file", "/proc/orchx", "/sys/orchx", "/dev/orchx"]


@pytest.mark.parametrize("where", OUT_CASES)
def test_fuzz_out_path(tmp_path, where):
    (tmp_path / "file").write_text("x")
    out = {"file": tmp_path / "file", "under-file": tmp_path / "file" / "x"}.get(where, where)
    code, _, err = orch("sweep", "--nodes", "1", "--iters", "1", "--out", out)
    assert code == 2 and err.startswith("orch: error: --out"), err
    assert len(err.strip().splitlines()) == 1


def test_second_sweep_on_same_out_is_refused(tmp_path):
    # The first sweep's rank freezes itself at its first measured iteration (no hang timeout):
    # its sweep surely holds the lock while the second one tries (a 3-iteration run could end
    # before a second orch had started), and goes on to complete once the test continues it.
    out = tmp_path / "sweep"
    args = ("sweep", "--nodes", "1", "--iters", "3", "--warmup", "1", "--inject-failure",
            "0@1:stop", "--hang-timeout", "0", "--out", str(out))
    first = subprocess.Popen([sys.executable, "-m", "orchestrator", *args],
                             cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    pid = None
    try:
        lock = out / ".orch" / "lock"
        wait_until("the first sweep to take the lock", lambda: lock.exists()
                   and lock.read_text().startswith("pid"), proc=first)
        pid = wait_until("the first sweep's rank to freeze", lambda: frozen_rank(out, 0),
                         proc=first)
        second = run_orch(*args)
        assert second.returncode == 2, second.stderr
        assert f"another orch sweep (pid {first.pid})" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGCONT)  # the rank goes on as if nothing happened
        else:  # the test failed before: no sweep and no stopped rank left behind
            first.kill()
            for log in out.glob("*/ranks/rank-0.jsonl"):
                with contextlib.suppress(ProcessLookupError, PermissionError, TypeError,
                                         IndexError, ValueError):
                    os.kill(json.loads(log.read_text().splitlines()[0]).get("pid"),
                            signal.SIGKILL)
        _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    logs = list(out.glob("*/ranks/rank-0.jsonl"))
    assert len(logs) == 1 and logs[0].read_text().count('"type":"header"') == 1


def test_deleted_ledger_never_overwrites_measured_files(tmp_path, finished_sweep):
    out = tmp_path / "sweep"
    shutil.copytree(finished_sweep, out)
    rdir = next(p for p in out.iterdir() if p.name.startswith("torch-ddp"))
    before = {p.relative_to(rdir): p.read_bytes() for p in rdir.rglob("*")
              if p.is_file() and p.name != "job.json"}
    (rdir / "job.json").unlink()
    run_orch("sweep", "--nodes", "1", "--iters", "3", "--warmup", "1", "--out", out,
             check=True)
    kept = rdir / "attempts" / "1"
    for rel, data in before.items():
        if rel.parts[0] == "run.json":
            continue
        assert (kept / rel).read_bytes() == data, rel  # the first attempt, untouched
    log = rank0_log(rdir).read_text()
    assert log.count('"type":"header"') == 1  # the new attempt's own log, nothing appended
    assert json.loads((rdir / "job.json").read_text())["attempt"] == 2
    rec = json.loads(run_orch("results", out, "--format", "json", check=True).stdout)[0]
    assert rec["attempt"] == 2 and rec["state"] == "COMPLETED"


def test_history_records_every_state_change_and_survives_stale_copies(tmp_path):
    rec = rundir.write_record(tmp_path, rundir.JobRecord(run_id="r", scheduler="slurm"))
    stale = rec
    rec = rundir.write_record(tmp_path, rec.model_copy(update={"state": "PENDING",
                                                               "job_id": "7"}))
    rec = rundir.write_record(tmp_path, rec.model_copy(update={"state": "PENDING",
                                                               "job_id": "7"}))  # no change
    rundir.write_record(tmp_path, stale.model_copy(update={"state": "RUNNING", "job_id": "7",
                                                           "nodes": ["node1"]}))
    disk = rundir.read_record(tmp_path)
    assert [(e.state, e.job_id, e.nodes) for e in disk.history] == [
        ("NEW", None, None), ("PENDING", "7", None), ("RUNNING", "7", ["node1"])]
