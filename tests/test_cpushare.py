"""The CPU share a rank reads on its node (rankside.cpushare): cgroup v1 and v2 quotas up the
hierarchy, the affinity mask, and what the test cluster's nodes really give their ranks."""

from __future__ import annotations

import json
import subprocess

import pytest

from orchestrator.rankside import cpushare

from .conftest import ROOT

V1_MOUNTS = "cgroup /cg/cpu cgroup rw,nosuid,relatime,cpu 0 0\n"
V2_MOUNTS = "cgroup2 /cg2 cgroup2 rw,nosuid,relatime 0 0\n"


def _v1(root, path, quota, period=100_000):
    d = root.joinpath(*[p for p in path.split("/") if p])
    d.mkdir(parents=True, exist_ok=True)
    (d / "cpu.cfs_quota_us").write_text(f"{quota}\n")
    (d / "cpu.cfs_period_us").write_text(f"{period}\n")


def test_v1_quota_the_tightest_up_the_tree(tmp_path):
    root = tmp_path / "cpu"
    _v1(root, "/", -1)
    _v1(root, "/site", 150_000)  # 1.5 cores for the whole subtree ...
    _v1(root, "/site/node1", 45_000)  # ... 0.45 for this node
    mounts = V1_MOUNTS.replace("/cg/cpu", str(root))
    got = cpushare.probe(proc_cgroup="4:memory:/x\n1:cpu,cpuacct:/site/node1\n0::/\n",
                         mounts=mounts, cpus=2)
    assert got["limited"] and got["cores"] == 0.45 and got["quota_cores"] == 0.45
    assert got["cgroup"] == str(root / "site" / "node1")
    assert "cgroup v1 cpu quota 0.45 core(s)" in got["basis"]
    # A parent's limit holds a child without one of its own.
    _v1(root, "/site/node1", -1)
    got = cpushare.probe(proc_cgroup="1:cpu:/site/node1\n", mounts=mounts, cpus=2)
    assert got["cores"] == 1.5 and got["cgroup"] == str(root / "site")


def test_v2_cpu_max_and_affinity(tmp_path):
    root = tmp_path / "cg2"
    (root / "job" / "step").mkdir(parents=True)
    (root / "cpu.max").write_text("max 100000\n")
    (root / "job" / "cpu.max").write_text("400000 100000\n")  # 4 cores
    (root / "job" / "step" / "cpu.max").write_text("max 100000\n")
    mounts = V2_MOUNTS.replace("/cg2", str(root))
    got = cpushare.probe(proc_cgroup="0::/job/step\n", mounts=mounts, cpus=16)
    assert got["limited"] and got["cores"] == 4.0 and "cgroup v2 cpu.max" in got["basis"]
    # A quota above the CPUs the process may run on: the affinity sets the share.
    got = cpushare.probe(proc_cgroup="0::/job/step\n", mounts=mounts, cpus=2)
    assert not got["limited"] and got["cores"] == 2.0 and got["quota_cores"] == 4.0
    assert "affinity: 2 CPU(s), below the cgroup v2 cpu.max" in got["basis"]


def test_no_quota_and_unmounted_hierarchy(tmp_path):
    got = cpushare.probe(proc_cgroup="1:cpu:/\n", mounts="", cpus=8)
    assert not got["limited"] and got["cores"] == 8.0
    assert "not mounted here" in got["basis"]
    root = tmp_path / "cpu"
    _v1(root, "/", -1)
    got = cpushare.probe(proc_cgroup="1:cpu:/\n", mounts=V1_MOUNTS.replace("/cg/cpu", str(root)),
                         cpus=8)
    assert got == {"cores": 8.0, "affinity_cpus": 8, "quota_cores": None, "cgroup": None,
                   "limited": False, "basis": "affinity: 8 CPU(s)"}
    assert cpushare.quota_v2("garbage") is None and cpushare.quota_v1("x", "100") is None


@pytest.mark.slurm
def test_testcluster_nodes_have_their_share(slurm_cluster):
    """On the test cluster each node's ranks run under the node's cgroup quota and see it as a
    real host's ranks do: `testcluster status` and the probe on the node agree."""
    text = subprocess.run([str(ROOT / "scripts" / "testcluster"), "status"], text=True,
                          capture_output=True, check=True).stdout
    share = next(line.split()[-1] for line in text.splitlines()
                 if line.strip().startswith("node2 "))
    probe = subprocess.run(
        ["srun", "-p", "eth", "-w", "node2", "-N1", "-n1", "python3", "-c",
         "import json, sys; sys.path.insert(0, sys.argv[1]);"
         "from orchestrator.rankside import cpushare; print(json.dumps(cpushare.probe()))",
         str(ROOT)], text=True, capture_output=True, timeout=120, check=True).stdout
    got = json.loads(probe)
    if share == "none":
        assert not got["limited"]
    else:
        assert got["limited"] and got["cores"] == pytest.approx(float(share), rel=1e-3)
        assert got["cgroup"].endswith("/orch-testcluster/node2")
