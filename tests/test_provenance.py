"""Provenance beside every run (orchestrator/runs/provenance.py) and orch rerun from it, for a plain
run; a container's part of it (image digest, rerun in the image) is in test_containers."""

from __future__ import annotations

import json

from .conftest import results, run_orch


def test_no_container_run_can_be_rerun_too(tmp_path):
    """Provenance and rerun do not depend on containers: a plain local run."""
    out = tmp_path / "plain"
    run_orch("sweep", "--nodes", "1", "--iters", 2, "--warmup", 1, "--out", out, check=True)
    [rec] = results(out)
    prov = json.loads((out / rec["run_id"] / "provenance.json").read_text())
    assert prov["container"] is None and set(prov["scripts"]["files"]) == {"job.sbatch",
                                                                          "launch.sh"}
    run_orch("rerun", rec["run_id"], "--dir", out, check=True)
    [again] = results(out / "reruns" / "1")
    assert again["state"] == "COMPLETED" and again["run_id"] == rec["run_id"]
