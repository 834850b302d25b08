"""torch-fsdp for real: PyTorch FSDP2 (fully_shard) ranks over Gloo, on the local site and on
the test Slurm cluster, at 1, 2 and 4 nodes, through the CLI.

What is checked is what every mode must give: every rank and measured iteration, the phases
accounting for each iteration, FSDP's all-gathers and reduce-scatters counted as communication
(exposed never above total; none at all on one rank), ranks agreeing on the checksum of the
unsharded parameters, and a scaling table. No timing thresholds.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from orchestrator.protocol import PHASES

from .conftest import assert_phases_cover, run_orch

pytestmark = pytest.mark.ranks
ITERS, WARMUP = 5, 2
NODES = (1, 2, 4)
# Timer resolution and loop bookkeeping between the timers (see test_local.py).
SLACK_S = 0.002


def _sweep(out, *extra):
    return run_orch("sweep", "--mode", "torch-fsdp", "--nodes", ",".join(map(str, NODES)),
                    "--iters", ITERS, "--warmup", WARMUP, "--out", out, *extra, check=True,
                    timeout=900)


def _check(out, proc, site: str):
    for word in ("nodes", "samples/s", "speedup", "efficiency", "COMPLETED"):
        assert word in proc.stdout, proc.stdout
    recs = json.loads(run_orch("results", out, "--format", "json", check=True).stdout)
    assert sorted((r["nodes"], r["ranks"], r["state"]) for r in recs) == [
        (n, n, "COMPLETED") for n in NODES]
    for r in recs:
        assert r["mode"] == "torch-fsdp" and r["site"] == site
        assert r["options"]["backend"] == "gloo"
        assert r["options"]["reshard_after_forward"] == "yes"
        assert r["checksums_agree"] is True and r["param_checksum"] is not None
        assert r["samples_per_s"] > 0 and r["speedup"] > 0
        assert r["iterations_measured"] == ITERS
        assert r["throughput_window"] == "native" and r["t_iter_native"] > 0  # two windows
        assert r["invariant_violations"] is None, r["invariant_violations"]
    by_nodes = {r["nodes"]: r for r in recs}
    assert by_nodes[1]["speedup"] == pytest.approx(1.0)
    # The same seed, the same data, the same optimizer: one rank of FSDP trains the same model
    # as one rank of anything; 2 and 4 ranks each agree among themselves (verdict above).
    iters = pd.read_parquet(out / "results" / "iterations.parquet")
    assert iters[iters["window"] == "native"][list(PHASES)].isna().all().all()  # none timed
    assert len(iters[iters["window"] == "native"]) == len(iters) / 2
    measured = iters[~iters["warmup_iter"] & (iters["window"] == "breakdown")]
    for nodes, run in measured.groupby("nodes"):
        assert sorted(run["rank"].unique()) == list(range(nodes))
        total, exposed = run["t_comm_total"], run["t_comm"]
        assert total.notna().all()
        assert (exposed <= total + SLACK_S).all(), "exposed communication above the total"
        if nodes == 1:
            assert (total == 0).all() and (exposed == 0).all(), "communication on one rank"
        else:
            assert (total > 0).all(), "FSDP's all-gathers/reduce-scatters not counted"
    assert_phases_cover(measured, PHASES, 0.002, 0.05)


def test_fsdp_local_site(tmp_path):
    out = tmp_path / "fsdp-local"
    _check(out, _sweep(out), "local")


@pytest.mark.slurm
def test_fsdp_test_cluster(slurm_cluster, tmp_path):
    out = tmp_path / "fsdp-cluster"
    proc = _sweep(out, "--site", slurm_cluster, "--partition", "eth")
    _check(out, proc, "testcluster")
    recs = json.loads(run_orch("results", out, "--format", "json", check=True).stdout)
    four = next(r for r in recs if r["nodes"] == 4)
    assert four["distinct_hosts"] == 4  # one rank per node, on four nodes


def test_fsdp_options_come_from_the_descriptor():
    """A wrong option value is one line at plan time, naming the choices."""
    proc = run_orch("sweep", "--mode", "torch-fsdp", "--option", "reshard_after_forward=maybe",
                    "--dry-run")
    assert proc.returncode == 2
    assert "reshard_after_forward=maybe is not valid; choices: yes, no" in proc.stderr
    assert "Traceback" not in proc.stderr
