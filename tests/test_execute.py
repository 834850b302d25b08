"""Carrying out a sweep: what the next sweep on the same --out submits again."""

from __future__ import annotations

import json
import shutil

import pytest

from .conftest import run_orch


@pytest.mark.parametrize(("state", "again"), [("NODE_FAIL", True), ("HUNG", True),
                                              ("FAILED", False)])
def test_next_sweep_resubmits_infrastructure_failures_only(tmp_path, finished_sweep, state,
                                                           again):
    """A run a node failure or a hang ended (its retries spent, or its sweep interrupted)
    says nothing about the workload: the next sweep submits it again as a new attempt. A
    failure of the workload waits for --retry-failed."""
    out = tmp_path / "sweep"
    shutil.copytree(finished_sweep, out)
    rdir = next(p for p in out.iterdir() if p.name.startswith("torch-ddp"))
    ledger = json.loads((rdir / "job.json").read_text())
    (rdir / "job.json").write_text(json.dumps({**ledger, "state": state, "reason": "test"}))
    proc = run_orch("sweep", "--nodes", "1", "--iters", "3", "--warmup", "1", "--out", out,
                    check=again)
    after = json.loads((rdir / "job.json").read_text())
    if again:
        assert "0 already finished, 1 to submit" in proc.stderr, proc.stderr
        assert (after["attempt"], after["state"]) == (2, "COMPLETED")
        assert (rdir / "attempts" / "1" / "ranks" / "rank-0.jsonl").is_file()
    else:
        assert "1 already finished, 0 to submit" in proc.stderr, proc.stderr
        assert (after["attempt"], after["state"]) == (1, state)
