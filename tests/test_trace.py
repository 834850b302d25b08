"""Layer-wise trace of a real 2-rank DDP run, in the source paper's format, readable by the
performance model."""

from __future__ import annotations

import csv

import pytest

from orchestrator import perfmodel as model
from orchestrator import zoo

from .conftest import run_orch

pytestmark = pytest.mark.ranks


def test_trace_rows_match_the_model_and_feed_the_performance_model(tmp_path):
    out = tmp_path / "sweep"
    run_orch("sweep", "--nodes", "2", "--option", "trace=yes", "--iters", 3, "--warmup", 1,
             "--out", out, check=True)
    run_id = next(p.name for p in out.iterdir() if p.name.startswith("torch-ddp"))
    proc = run_orch("trace", run_id, "--dir", out, check=True)
    rows = list(csv.DictReader(proc.stdout.splitlines()))
    assert list(rows[0]) == ["id", "name", "forward_us", "backward_us", "comm_us", "size_bytes"]
    assert rows[0]["name"] == "data"
    names = [r["name"] for r in rows[1:]]
    assert names[:3] == ["conv1", "relu1", "pool1"] and names[-1] == "fc3"
    # Every parameter is in exactly one layer's gradient: bytes add up to the model's size.
    assert sum(int(r["size_bytes"]) for r in rows) == zoo.get("lenet5").params("cifar") * 4
    for r in rows[1:]:
        sends = int(r["size_bytes"]) > 0
        assert (float(r["comm_us"]) > 0) == sends
        assert (float(r["backward_us"]) > 0) == sends
        assert float(r["forward_us"]) > 0
    saved = tmp_path / "trace.csv"
    run_orch("trace", run_id, "--dir", out, "--output", saved, check=True)
    trace = model.load_trace_csv(saved)
    assert len(trace.layers) == len(rows) - 1
    wfbp = model.schedule_wfbp(trace)
    none = model.schedule_none(trace)
    assert none.exposed_comm_us >= wfbp.exposed_comm_us


def test_trace_of_a_run_without_one(tmp_path):
    out = tmp_path / "sweep"
    run_orch("sweep", "--nodes", "1", "--iters", 2, "--warmup", 0, "--out", out, check=True)
    run_id = next(p.name for p in out.iterdir() if p.name.startswith("torch-ddp"))
    proc = run_orch("trace", run_id, "--dir", out)
    assert proc.returncode == 2 and "--option trace=yes" in proc.stderr
