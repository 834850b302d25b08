"""Faults while a sweep waits: hangs, node failures, cancels from outside.

On the test cluster (real Slurm, real torch-ddp ranks; a "node" is a slurmd in its own network,
hostname and cgroup namespaces on this machine): a rank frozen by ``--inject-failure
RANK@ITER:stop`` (it SIGSTOPs itself) is cancelled as HUNG naming its task and node, and retried
elsewhere; a node set down mid-run is NODE_FAIL, retried with that node excluded; a node's ib0
set down mid-run is HUNG at once, naming the node and the link, and retried without that node;
an external scancel is CANCELLED, said to come from outside orch, not retried. The hang watch's
rules run on written rank logs with a fake clock (no cluster, no waiting).
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

import pytest

from orchestrator import protocol
from orchestrator.backends.slurm import expand_hostlist
from orchestrator.runs import faults, rundir

from .conftest import ROOT, run_orch

HANG_S = "10"  # the tests' hang timeout: long enough for a heartbeat to tell frozen from waiting


# --- the state table ---------------------------------------------------------------------------

def test_state_table_and_reasons():
    assert {"NODE_FAIL", "BOOT_FAIL", "PREEMPTED", "HUNG"} == rundir.RETRYABLE
    assert {"FAILED", "OUT_OF_MEMORY", "TIMEOUT", "CANCELLED"} <= rundir.TERMINAL - \
        rundir.RETRYABLE
    rec = rundir.JobRecord(run_id="r", scheduler="slurm")
    assert faults.cancel_reason(rec, "Slurm state CANCELLED by 0").startswith(
        "cancelled outside orch by user root (uid 0)")
    asked = rec.model_copy(update={"cancel_requested": "Ctrl-C"})
    assert faults.cancel_reason(asked, "Slurm state CANCELLED by 0") == \
        "cancelled by orch (Ctrl-C)"
    assert expand_hostlist("node[1-2,4],gpu[08-10]") == [
        "node1", "node2", "node4", "gpu08", "gpu09", "gpu10"]


# --- on the test cluster ---------------------------------------------------------------------
#
# Each fault happens where the test wants it, whatever the machine's speed: rank 1 freezes
# itself (``--inject-failure 1@ITER:stop``: SIGSTOP at that iteration, in the run's first
# attempt only) instead of being signalled from here once its log showed progress, which a fast
# machine outran. It freezes in the breakdown window, whose records are written as each
# iteration ends (iterations are numbered on from the native window's ITERS + WARMUP), so both
# ranks' logs show where they are: rank 0 waits in the all-reduce of the iteration rank 1 never
# starts. With ``--hang-timeout 0`` the frozen run cannot end by itself (until its process
# group's 5-minute timeout), so a test acting on it (scancel, a node set down) waits for a state
# the run is sure to reach and keep.

ITERS, WARMUP = 20, 1
FROZEN_AT = ITERS + WARMUP + 3  # the breakdown window's fourth iteration
STOP = f"1@{FROZEN_AT}:stop"


def _sweep(out: Path, *extra: str, inject: str = STOP) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "orchestrator", "sweep", "--site",
                             "testcluster", "--nodes", "2", "--iters", str(ITERS), "--warmup",
                             str(WARMUP),
                             "--inject-failure", inject, "--max-retries", "1", "--out", str(out),
                             *extra], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait(what: str, check, proc: subprocess.Popen, timeout: float = 600):
    """Poll ``check`` until it returns something. Only for states the run is sure to reach
    and stay in (a frozen run's RUNNING, its rank's header): the timeout is a bound on a busy
    cluster's queueing, not a bet on how fast the run goes."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = check()
        if found:
            return found
        if proc.poll() is not None:
            raise AssertionError(f"orch sweep ended before {what}: {proc.communicate()}")
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _frozen(out: Path) -> dict | None:
    """The header of rank 1 of the sweep's run once orch records the run RUNNING and rank 1
    has stopped itself: its log ends at the iteration before FROZEN_AT, for good."""
    for rdir in out.glob("*-r0-*"):
        log = rdir / protocol.RANKS_DIR / protocol.rank_log_name(1)
        if not (rdir / "job.json").exists() or not log.exists():
            continue
        text = log.read_text()
        if _record(rdir)["state"] == "RUNNING" and f'"iter":{FROZEN_AT - 1},' in text:
            return json.loads(text.splitlines()[0])
    return None


def _record(rdir: Path) -> dict:
    return json.loads((rdir / "job.json").read_text())


def _headers(rdir: Path) -> list[dict]:
    return [json.loads(Path(p).read_text().splitlines()[0])
            for _, p in protocol.rank_logs(rdir / protocol.RANKS_DIR)]


@contextlib.contextmanager
def _cleanup(proc: subprocess.Popen, out: Path):
    """Whatever the test saw: no stopped rank and no orch sweep left behind."""
    try:
        yield
    finally:
        for log in out.glob(f"*/**/{protocol.RANKS_DIR}/{protocol.rank_log_name(1)}"):
            pid = json.loads(log.read_text().splitlines()[0]).get("pid")
            for sig in (signal.SIGCONT, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError, PermissionError, TypeError):
                    os.kill(pid, sig)
        if proc.poll() is None:
            proc.kill()
            run_orch("cancel", out)


@pytest.fixture(scope="module")
def hung(slurm_cluster, tmp_path_factory):
    """One run whose rank 1 freezes at iteration 3 of its first attempt: the hang watch must
    cancel it as HUNG, and the retry (which runs clean) complete on other nodes."""
    out = tmp_path_factory.mktemp("faults") / "hang"
    proc = _sweep(out, "--hang-timeout", HANG_S)
    with _cleanup(proc, out):
        _, err = proc.communicate(timeout=600)
    r0 = next(out.glob("*-r0-*"))
    node = json.loads((r0 / "attempts" / "1" / protocol.RANKS_DIR / protocol.rank_log_name(1))
                      .read_text().splitlines()[0])["node"]
    return out, r0, node, proc.returncode, err


@pytest.mark.slurm
def test_stopped_rank_is_hung_named_and_retried_elsewhere(hung):
    out, r0, node, code, err = hung
    assert code == 0, err
    first = json.loads((r0 / "attempts" / "1" / "job.json").read_text())
    assert first["state"] == "HUNG", first
    assert first["cancel_requested"] == "hang"
    assert f"rank 1 on {node} stalled at iteration {FROZEN_AT - 1} (no heartbeat for" in \
        first["reason"], first["reason"]
    assert f"waiting at iteration {FROZEN_AT - 1} (heartbeat alive)" in first["reason"]
    now = _record(r0)
    assert now["state"] == "COMPLETED" and now["attempt"] == 2 and now["retries"] == 1, now
    assert now["excluded"] == [node] and node not in now["nodes"]
    assert node not in {h["node"] for h in _headers(r0)}
    # both attempts' measurements kept, apart: the hung one's logs end without a footer, rank
    # 1's at the iteration where it froze
    old_logs = [protocol.read_rank_log(p) for _, p in
                protocol.rank_logs(r0 / "attempts" / "1" / protocol.RANKS_DIR)]
    assert len(old_logs) == 2 and all(log.iters and log.footer is None for log in old_logs)
    assert [r["iter"] for r in old_logs[1].iters] == list(range(FROZEN_AT))
    assert all(log.footer for log in (protocol.read_rank_log(p) for _, p in
                                      protocol.rank_logs(r0 / protocol.RANKS_DIR)))
    states = [(e["attempt"], e["state"]) for e in now["history"]]
    assert states[:2] == [(1, "NEW"), (1, "PENDING")] and (1, "HUNG") in states
    assert states[-1] == (2, "COMPLETED") and (2, "RUNNING") in states
    assert all(e["nodes"] for e in now["history"] if e["state"] in ("RUNNING", "HUNG"))
    # what a user sees: status --history, status --format json, the results' attempts
    shown = run_orch("status", out, "--history", check=True).stdout
    assert "HUNG" in shown and f"excluding {node}" in shown, shown
    listed = json.loads(run_orch("status", out, "--format", "json", check=True).stdout)
    assert {r["run_id"]: len(r["history"]) for r in listed}[r0.name] == len(now["history"])
    recs = {r["run_id"]: r for r in
            json.loads(run_orch("results", out, "--format", "json", check=True).stdout)}
    assert recs[r0.name]["attempts"] == "HUNG→COMPLETED" and recs[r0.name]["attempt"] == 2
    kept = json.loads(recs[r0.name]["history"])  # the result set keeps every state change
    assert [e["state"] for e in kept] == [e["state"] for e in now["history"]]
    assert recs[r0.name]["samples_per_s"] > 0


@pytest.mark.slurm
def test_scancel_from_outside_is_cancelled_and_not_retried(slurm_cluster, tmp_path):
    # frozen with no hang timeout, the run stays RUNNING until the scancel: it cannot end first
    out = tmp_path / "scancel"
    proc = _sweep(out, "--hang-timeout", "0")
    with _cleanup(proc, out):
        _wait("the run to freeze", lambda: _frozen(out), proc)
        r0 = next(out.glob("*-r0-*"))
        subprocess.run(["scancel", _record(r0)["job_id"]], check=True, timeout=30)
        _, err = proc.communicate(timeout=600)
    assert proc.returncode == 1, err
    rec = _record(r0)
    assert rec["state"] == "CANCELLED" and rec["attempt"] == 1, rec
    assert rec["reason"].startswith("cancelled outside orch"), rec["reason"]
    assert "not retried" in rec["reason"] and not (r0 / "attempts").exists()
    assert rec["cancel_requested"] is None
    assert "Traceback" not in err


@pytest.mark.slurm
def test_node_down_mid_run_is_node_fail_retried_without_that_node(slurm_cluster, tmp_path):
    # frozen with no hang timeout, the run is still on its nodes when one is set down
    out = tmp_path / "down"
    proc = _sweep(out, "--hang-timeout", "0")
    node = None
    with _cleanup(proc, out):
        try:
            node = _wait("the run to freeze", lambda: _frozen(out), proc)["node"]
            subprocess.run(["scontrol", "update", f"nodename={node}", "state=down",
                            "reason=orch-test_faults"], check=True, timeout=30)
            _, err = proc.communicate(timeout=600)
        finally:
            if node is not None:  # back to service (ReturnToService=2 may have done it already)
                subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"],
                               capture_output=True, timeout=30)
    assert proc.returncode == 0, err
    rdir = next(out.glob("*-r0-*"))
    first = json.loads((rdir / "attempts" / "1" / "job.json").read_text())
    assert first["state"] == "NODE_FAIL", first
    assert first["reason"].startswith(f"node {node} failed ("), first["reason"]
    now = _record(rdir)
    assert now["state"] == "COMPLETED" and now["attempt"] == 2, now
    assert now["excluded"] == [node] and node not in now["nodes"]
    assert node not in {h["node"] for h in _headers(rdir)}
    assert len(list((rdir / "attempts" / "1" / protocol.RANKS_DIR).glob("rank-*.jsonl"))) == 2
    assert [e["state"] for e in now["history"] if e["attempt"] == 1][-1] == "NODE_FAIL"


def _node_link(node: str, iface: str, state: str) -> None:
    subprocess.run([str(ROOT / "scripts" / "testcluster"), "exec", node, "ip", "link", "set",
                    iface, state], check=True, timeout=30, capture_output=True)


@pytest.mark.slurm
def test_link_down_mid_run_is_hung_naming_node_and_link_and_retried(slurm_cluster, tmp_path):
    """A run on the ib partition held still mid-window (rank 1 holds at FROZEN_AT, alive and
    beating: it cannot end before the link goes); ib0 of rank 1's node is then set down: the
    run is HUNG at once (not after the 600 s hang timeout) with a reason that names the node
    and the interface, and the retry completes on other nodes."""
    out = tmp_path / "link"
    proc = _sweep(out, "--partition", "ib", "--hang-timeout", "600",
                  inject=f"1@{FROZEN_AT}:hold")
    node = None
    with _cleanup(proc, out):
        try:
            node = _wait("rank 1 to hold", lambda: _frozen(out), proc)["node"]
            _node_link(node, "ib0", "down")
            _, err = proc.communicate(timeout=900)
        finally:
            if node is not None:
                _node_link(node, "ib0", "up")
    assert proc.returncode == 0, err
    rdir = next(out.glob("*-r0-*"))
    first = json.loads((rdir / "attempts" / "1" / "job.json").read_text())
    assert first["state"] == "HUNG", first
    assert first["reason"].startswith(f"ib0 down on {node} for "), first["reason"]
    assert f"rank 1 on {node} stalled at iteration {FROZEN_AT - 1} (ib0 down)" in \
        first["reason"], first["reason"]
    now = _record(rdir)
    assert now["state"] == "COMPLETED" and now["attempt"] == 2, now
    assert now["excluded"] == [node] and node not in now["nodes"]
    assert node not in {h["node"] for h in _headers(rdir)}
