"""Shared fixtures: run the real ``orch`` CLI, and reach the real test Slurm cluster.

Slurm-backed tests need ``scripts/testcluster up`` (root). Under ``CI=true`` a missing cluster
is a test failure, never a skip: CI must prove the Slurm paths for real.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def run_orch(*args: str, timeout: float = 600, check: bool = False, cwd: Path | None = None,
             env: dict[str, str] | None = None):
    """Run ``orch`` as a user would (a separate process) and return the CompletedProcess."""
    proc = subprocess.run([sys.executable, "-m", "orchestrator", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd or ROOT,
                          env={**os.environ, **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"orch {' '.join(map(str, args))} exited {proc.returncode}\n"
                             f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


@pytest.fixture(scope="session")
def slurm_cluster() -> str:
    """The test cluster's site name, once ``sinfo`` shows its 4 nodes."""
    problem = None
    if shutil.which("sinfo") is None:
        problem = "Slurm is not installed (run scripts/testcluster up as root)"
    else:
        res = subprocess.run(["sinfo", "-h", "-o", "%D %P"], capture_output=True, text=True,
                             timeout=30)
        if res.returncode != 0:
            problem = f"the test cluster is not up: {res.stderr.strip()}"
    if problem:
        if IN_CI:
            pytest.fail(f"CI=true but {problem}")
        pytest.skip(problem)
    return "testcluster"


def processes_matching(text: str) -> list[str]:
    """Command lines of live processes (other than this one) that mention ``text``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().split(") ", 1)[1][0]
        except OSError:
            continue
        if text in cmd and state != "Z":
            found.append(f"{proc.name}: {cmd}")
    return found


def assert_two_windows(records: list[dict], iters: int, warmup: int) -> list[dict]:
    """A logging rank's records (issue 14): a native window (``warmup + iters`` records, wall
    clock only, no phase) and then a breakdown window (as many, every phase), iteration numbers
    running on across both. Returns the breakdown window's measured records."""
    from orchestrator import protocol

    its = [r for r in records if r["type"] == protocol.ITER]
    windows = [r.get(protocol.WINDOW) for r in its]
    per = warmup + iters
    assert windows == [protocol.WINDOW_NATIVE] * per + [protocol.WINDOW_BREAKDOWN] * per, windows
    assert [r["iter"] for r in its] == list(range(2 * per))
    assert [r["warmup"] for r in its] == ([True] * warmup + [False] * iters) * 2
    assert all(r["t_iter"] > 0 and not set(protocol.PHASES) & set(r) for r in its[:per])
    assert all(set(protocol.PHASES) <= set(r) for r in its[per:])
    return [r for r in its[per:] if not r["warmup"]]
