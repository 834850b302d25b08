"""Fabric attestation on the real 4-node test cluster (scripts/testcluster up).

Its four nodes share one kernel, and every rank really talks over loopback: the ``eth``
partition declares ``lo`` (verified), the ``ib`` partition declares InfiniBand and has no HCA
(its runs are a mismatch: TCP over a loopback device is not InfiniBand). A copy of the site
whose partition declares ``eth0`` while the transport variables keep the ranks on ``lo`` forces
a mismatch, which ``--require-fabric`` turns into a FAILED run.
"""

from __future__ import annotations

import pytest
import yaml

from .conftest import ROOT, results, run_orch

pytestmark = [pytest.mark.slurm, pytest.mark.ranks]
SMALL = ("--model", "lenet5", "--iters", 3, "--warmup", 1, "--nodes", 2)


def test_testcluster_sweep_tells_the_truth(slurm_cluster, tmp_path):
    """Every multi-node run has a verdict and measured/expected bytes; eth is verified on lo,
    ib is never verified as InfiniBand."""
    out = tmp_path / "fabric"
    proc = run_orch("sweep", "--site", slurm_cluster, "--partition", "ib,eth", "--mode",
                    "torch-ddp,horovod,tf-ps,mxnet-kvstore", *SMALL, "--out", out)
    recs = results(out)
    assert len(recs) == 8, proc.stderr
    for r in recs:
        assert r["state"] == "COMPLETED", (r["run_id"], r["reason"])
        assert r["fabric_iface"] == "lo", (r["run_id"], r["fabric_reason"])
        assert r["fabric_bytes_measured"] > 0 and r["fabric_bytes_expected"] > 0, r["run_id"]
        if r["partition"] == "eth":
            assert r["fabric"] == "verified", (r["run_id"], r["fabric_reason"])
            assert r["fabric_bytes_measured"] >= 0.5 * r["fabric_bytes_expected"]
        else:
            assert r["fabric"] == "mismatch", (r["run_id"], r["fabric_reason"])
            assert "not an InfiniBand device" in r["fabric_reason"]
    assert "FABRIC MISMATCH in 4 run(s)" in proc.stderr
    report = run_orch("report", out, "--no-plots", check=True)
    assert report.returncode == 0
    text = (out / "report" / "report.md").read_text()
    assert "## Fabric" in text and "verified" in text and "mismatch" in text


def test_forced_mismatch_is_caught(slurm_cluster, tmp_path):
    """A partition that declares eth0 while its ranks use lo: all-reduce (torch-ddp), parameter
    server (tf-ps: gRPC between host names) and MPI (mpi-ssgd: Open MPI's TCP BTL) modes are
    all caught, and --require-fabric fails them."""
    site = yaml.safe_load((ROOT / "site-configs" / f"{slurm_cluster}.yaml").read_text())
    site["name"] = "fabric-mismatch"
    eth = next(p for p in site["partitions"] if p["name"] == "eth")
    eth["socket_ifname"] = "eth0"  # declared ...
    eth["env"] = {k: "lo" for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME",  # ... but used
                                    "OMPI_MCA_btl_tcp_if_include", "OMPI_MCA_oob_tcp_if_include")}
    site["partitions"] = [eth]
    site["default_partition"] = "eth"
    path = tmp_path / "fabric-mismatch.yaml"
    path.write_text(yaml.safe_dump(site))
    out = tmp_path / "forced"
    proc = run_orch("sweep", "--site", path, "--mode", "torch-ddp,tf-ps,mpi-ssgd", *SMALL,
                    "--require-fabric", "--out", out)
    assert proc.returncode == 1
    assert "FABRIC MISMATCH in 3 run(s)" in proc.stderr
    recs = {r["mode"]: r for r in results(out)}
    assert set(recs) == {"torch-ddp", "tf-ps", "mpi-ssgd"}
    for mode, r in recs.items():
        assert r["fabric"] == "mismatch", (mode, r["fabric_reason"])
        assert "declared ethernet on eth0; ranks used TCP over lo" in r["fabric_reason"]
        assert r["state"] == "FAILED" and "fabric mismatch (--require-fabric)" in r["reason"]
        assert r["fabric_bytes_measured"] > 0
