"""The rank-side harness (orchestrator.rankside.harness): the fault injection testing aid.

``--inject-failure RANK@ITER:stop`` freezes a rank at an iteration; the tests wait for the
child to stop with ``waitpid(WUNTRACED)``, which returns when it has, so nothing here depends on
how fast the machine runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from orchestrator import protocol
from orchestrator.rankside import harness

from .conftest import ROOT

# A rank's two windows (native, then breakdown) around an empty step, as a mode's rank runs them.
RANK = """
import sys
from orchestrator.rankside import harness
args = harness.base_parser("test").parse_args(sys.argv[1:])
log = harness.RankLogWriter(args.log_dir + "/rank-0.jsonl")
s = harness.Session(args, harness.RankInfo({}), log)
for _ in s.native_iterations():
    pass
for _ in s.iterations():
    pass
log.close()
"""


def _rank(log_dir, inject: str) -> subprocess.Popen:
    os.makedirs(log_dir, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-c", RANK, "--run-id", "r", "--log-dir", str(log_dir), "--model",
         "lenet5", "--batch-size", "4", "--iters", "3", "--warmup", "1", "--inject-failure",
         inject], cwd=ROOT)


def _iters(log_dir) -> list[int]:
    return [json.loads(line)["iter"] for line in
            (log_dir / protocol.rank_log_name(0)).read_text().splitlines()]


def test_stop_freezes_the_rank_at_its_iteration_with_what_it_measured_written(tmp_path):
    # native window: iterations 0-3 (1 warm-up + 3); breakdown window: 4-7
    log_dir = tmp_path / "run" / protocol.RANKS_DIR
    proc = _rank(log_dir, "0@2:stop")
    try:
        _, status = os.waitpid(proc.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status) and os.WSTOPSIG(status) == signal.SIGSTOP
        # the native window buffers its records: they are written before the rank stops
        assert _iters(log_dir) == [0, 1]
        os.kill(proc.pid, signal.SIGCONT)  # woken up, it goes on as if nothing happened
        assert proc.wait(timeout=60) == 0
        assert _iters(log_dir) == list(range(8))
    finally:
        if proc.poll() is None:
            proc.kill()


def test_stop_is_for_the_first_attempt_only_and_fail_for_every_attempt(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / protocol.ATTEMPTS_DIR / "1").mkdir(parents=True)  # a retry: it runs clean
    proc = _rank(run_dir / protocol.RANKS_DIR, "0@5:stop")
    assert proc.wait(timeout=60) == 0
    assert _iters(run_dir / protocol.RANKS_DIR) == list(range(8))
    args = harness.base_parser("t").parse_args(
        ["--run-id", "r", "--log-dir", str(run_dir / protocol.RANKS_DIR), "--model", "lenet5",
         "--batch-size", "4", "--iters", "3", "--warmup", "1", "--inject-failure", "0@5"])
    log = harness.RankLogWriter(str(tmp_path / "fail.jsonl"))
    s = harness.Session(args, harness.RankInfo({}), log)
    with pytest.raises(harness.InjectedFailure, match="injected failure on rank 0 at iter 5"):
        for _ in s.native_iterations():
            pass
        for _ in s.iterations():
            pass
    log.close()


@pytest.mark.parametrize(("text", "parsed"), [
    ("1@3", (1, 3, "fail")), ("0@12:fail", (0, 12, "fail")), ("2@0:stop", (2, 0, "stop"))])
def test_failure_spec(text, parsed):
    assert harness.parse_failure(text) == parsed
    assert protocol.FAILURE_SPEC.match(text)
    for bad in ("1@3:hang", "1@", "@3", "1@3:", "x"):
        assert not protocol.FAILURE_SPEC.match(bad)


def test_breakdown_runs_the_declared_steps_in_order_each_timed_into_its_phase(tmp_path):
    """Each step gets the previous one's result (the first the iteration number); a step
    without a phase splits itself with Session.add; one record per iteration, warm-up first."""
    args = harness.base_parser("t").parse_args(
        ["--run-id", "r", "--log-dir", str(tmp_path), "--model", "lenet5", "--batch-size", "4",
         "--iters", "2", "--warmup", "1"])
    log = harness.RankLogWriter(str(tmp_path / "rank-0.jsonl"))
    s = harness.Session(args, harness.RankInfo({}), log)
    seen = []

    def backward(loss):
        s.add("t_b", 0.5)
        s.add("t_comm", 0.25)
        return loss + 1

    last = s.breakdown([("t_io", lambda it: seen.append(it) or it * 10),
                        ("t_f", lambda batch: batch + 1),
                        (None, backward),
                        ("t_u", lambda loss: loss)])
    log.close()
    records = [json.loads(line) for line in (tmp_path / "rank-0.jsonl").read_text().splitlines()]
    assert seen == [0, 1, 2] and last == 22
    assert [r["warmup"] for r in records] == [True, False, False]
    for r in records:
        assert r["window"] == protocol.WINDOW_BREAKDOWN
        assert (r["t_b"], r["t_comm"]) == (0.5, 0.25)
        assert r["t_h2d"] == 0.0 and r["t_io"] >= 0 and r["t_u"] >= 0
        assert list(r)[-len(protocol.PHASES):] == list(protocol.PHASES)


FAILING_RANK = """
import sys
from orchestrator.rankside import harness
args = harness.base_parser("test").parse_args(sys.argv[1:])
with harness.rank_log(args, "test", "test"):
    import mpi4py_is_not_installed_here  # noqa: F401
"""


def test_a_rank_that_raises_records_the_exception_line_and_prints_the_whole_traceback(tmp_path):
    """The footer holds the exception's own line apart from the traceback's last lines; the
    rank's output (stderr) holds the whole traceback."""
    proc = subprocess.run(
        [sys.executable, "-c", FAILING_RANK, "--run-id", "r", "--log-dir", str(tmp_path),
         "--model", "lenet5", "--batch-size", "4", "--iters", "3", "--warmup", "1"],
        cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 1
    footer = json.loads((tmp_path / protocol.rank_log_name(0)).read_text().splitlines()[-1])
    line = "ModuleNotFoundError: No module named 'mpi4py_is_not_installed_here'"
    assert footer["status"] == protocol.STATUS_ERROR and footer[protocol.EXCEPTION] == line
    assert footer["error"].rstrip().endswith(line)
    assert proc.stderr.startswith("Traceback (most recent call last):\n")
    assert proc.stderr.rstrip().endswith(line) and 'File "<string>"' in proc.stderr
