"""Fabric attestation: the parsers on recorded real log lines, the rank-side probe, the
expected bytes, the verdict rules; and, on the test cluster, the verdicts of real sweeps."""

from __future__ import annotations

import json
import socket
import threading
from types import SimpleNamespace

import pytest
import yaml

from orchestrator import protocol
from orchestrator.protocol import RankLog
from orchestrator.rankside import fabric as probe
from orchestrator.runs import fabric

from .conftest import ROOT, results, run_orch

# --- recorded real log lines ---------------------------------------------------------------

# NCCL on InfiniBand, from ROCm/rccl issue #419 (RCCL prints NCCL's lines), 2021-08-11.
NCCL_IB = """\
e05r3n09:929:929 [2] NCCL INFO Bootstrap : Using ib0:11.5.5.50<0>
e05r3n09:929:929 [2] NCCL INFO NET/Plugin : No plugin found (librccl-net.so), using internal implementation
e05r3n09:929:929 [2] NCCL INFO NET/IB : Using [0]mlx5_3:1/IB [1]mlx5_2:1/IB [2]mlx5_1:1/IB [3]mlx5_0:1/IB ; OOB ib0:11.5.5.50<0>
e05r3n09:929:929 [2] NCCL INFO Using network IB
"""  # noqa: E501
# NCCL 2.4.7 (no "Using network" line yet), from Mellanox/nv_peer_memory issue #56.
NCCL_24_IB = """\
master_node:20:289 [0] NCCL INFO NET/Socket : Using [0]ib0:192.168.11.1<0>
master_node:20:289 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so).
master_node:20:289 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 0.
master_node:20:289 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:192.168.11.1<0>
"""
# The silent fallback: no HCA, sockets on ens3. From NVIDIA/nccl issue #226.
NCCL_FALLBACK = """\
ip-172-31-12-21:45361:45361 [0] NCCL INFO NET/IB : No device found.
ip-172-31-12-21:45361:45361 [0] NCCL INFO NET/Socket : Using [0]ens3:172.31.12.21<0>
"""
# NCCL sockets on lo, from NVIDIA/nccl issue #1053.
NCCL_SOCKET_LO = """\
axa:3048391:3048566 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.
axa:3048391:3048566 [0] NCCL INFO NCCL_SOCKET_IFNAME set to lo
axa:3048391:3048566 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>
axa:3048391:3048566 [0] NCCL INFO Using network Socket
"""
# RoCE HCAs, from NVIDIA/nccl-tests issue #185.
NCCL_ROCE = """\
dgxh100-4:460770:460842 [0] NCCL INFO NET/IB : Using [0]mlx5_10:1/RoCE [1]mlx5_11:1/RoCE [RO]; OOB enp220s0np0:11.1.128.136<0>
dgxh100-4:460770:460842 [0] NCCL INFO Using network IB
"""  # noqa: E501
# UCX_LOG_LEVEL=info under Open MPI, from the UCX FAQ ("How can I tell which protocols and
# transports are being used for communication?", openucx/ucx docs).
UCX_RC = """\
[1645203303.759862] [host2:43:0]      ucp_worker.c:1877 UCX  INFO  ep_cfg[2]: tag(self/memory0 knem/memory cuda_copy/cuda rc_mlx5/mlx5_0:1)
[1645203303.805848] [host2:43:0]      ucp_worker.c:1877 UCX  INFO  ep_cfg[3]: tag(rc_mlx5/mlx5_0:1)
"""  # noqa: E501
# Open MPI 4.1.4 (Debian 12) on this machine: mpirun -np 2 --mca pml_base_verbose 10
# --mca btl_base_verbose 10 --mca btl self,tcp ... python -c "from mpi4py import MPI; ...".
OMPI_OB1_TCP = """\
[vm:05602] select: initializing pml component ob1
[vm:05602] select: init returned priority 20
[vm:05602] selected ob1 best priority 20
[vm:05602] select: component ob1 selected
[vm:05602] mca: bml: Using self btl for send to [[31011,1],0] on node vm
[vm:05602] mca: bml: Using tcp btl for send to [[31011,1],1] on node vm
"""
# The same fallback reported on the Open MPI users' list (borgr075: no HCA found, TCP used).
OMPI_TCP_LIST = ("[borgr075:14374] mca: bml: Using tcp btl for send to [[35628,1],15] on node "
                 "borgr074\n")


def test_nccl_ib():
    got = fabric.parse_nccl(NCCL_IB)
    assert got["network"] == "IB"
    assert got["hcas"] == ["mlx5_3:1", "mlx5_2:1", "mlx5_1:1", "mlx5_0:1"]
    assert not got["ib_missing"]
    old = fabric.parse_nccl(NCCL_24_IB)
    assert old["network"] == "IB" and old["hcas"] == ["mlx5_0:1"] and old["ifaces"] == ["ib0"]
    assert fabric.parse_nccl(NCCL_ROCE)["hcas"] == ["mlx5_10:1", "mlx5_11:1"]


def test_nccl_socket_fallback():
    got = fabric.parse_nccl(NCCL_FALLBACK)
    assert got == {"network": "Socket", "hcas": [], "ifaces": ["ens3"], "ib_missing": True}
    lo = fabric.parse_nccl(NCCL_SOCKET_LO)
    assert lo["network"] == "Socket" and lo["ifaces"] == ["lo"]
    assert fabric.parse_nccl("no nccl here\n") is None


def test_ucx_and_open_mpi():
    ucx = fabric.parse_ucx(UCX_RC)
    assert ucx["verbs"] == ["mlx5_0:1"] and ucx["tcp"] == []
    assert set(ucx["local"]) == {"self", "knem", "cuda_copy"}
    assert fabric.parse_ucx("[x] UCX  INFO  ep_cfg[0]: tag(tcp/eth0 self/memory0)")["tcp"] == [
        "eth0"]
    assert fabric.parse_ompi(OMPI_OB1_TCP) == {"pml": "ob1", "btls": ["tcp"]}
    assert fabric.parse_ompi(OMPI_TCP_LIST) == {"pml": None, "btls": ["tcp"]}
    assert fabric.parse_ucx("") is None and fabric.parse_ompi("") is None


# --- the rank-side probe -------------------------------------------------------------------

def test_proc_net_tcp_addresses():
    text = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
            "timeout inode\n"
            "   0: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0 "
            "       0 12345 1 0000000000000000 20 4 30 10 -1\n"
            "   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0 "
            "       0 999 1 0000000000000000 100 0 0 10 0\n")
    assert probe.parse_proc_net_tcp(text) == [(12345, ("127.0.0.1", 8080), ("127.0.0.1", 50000))]
    six = ("h\n   0: 00000000000000000000000001000000:1F90 00000000000000000000000001000000:C350 "
           "01 0:0 0:0 0 0 0 777 1\n")
    assert probe.parse_proc_net_tcp(six)[0][1] == ("::1", 8080)


def test_probe_counts_own_connection_bytes():
    """A loopback connection of this process: its bytes in the window, mapped to lo."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    client = socket.create_connection(srv.getsockname())
    peer, _ = srv.accept()
    try:
        start = probe.Snapshot()

        def drain():
            got = 0
            while got < 300_000:
                got += len(peer.recv(65536))

        reader = threading.Thread(target=drain)
        reader.start()
        client.sendall(b"x" * 300_000)
        reader.join()
        rec = probe.record(start, probe.Snapshot())
    finally:
        for s in (client, peer, srv):
            s.close()
    lo = next(e for e in rec["tcp"] if e["type"] == "loopback")
    assert lo["tx"] == 300_000 and lo["rx"] == 300_000 and lo["conns"] == 2
    assert rec["basis"] == "window" and rec["netdev"]["lo"]["tx"] >= 300_000
    json.dumps(rec)  # goes into the footer as is


# --- expected bytes and verdicts -----------------------------------------------------------

def test_expected_bytes_per_pattern():
    grad = 1000
    assert fabric.expected_sent_per_rank("allreduce", 4, grad, {}) == 1500
    assert fabric.expected_sent_per_rank("parameter-server", 4, grad, {}) == 1000
    assert fabric.expected_sent_per_rank("allgather-reducescatter", 2, grad, {}) == 1500
    assert fabric.expected_sent_per_rank("allgather-reducescatter", 2, grad,
                                         {"reshard_after_forward": "no"}) == 1000
    assert fabric.expected_sent_per_rank("allreduce", 1, grad, {}) == 0.0
    assert fabric.gradient_bytes("lenet5", "cifar") == 4 * 62_006


def _run(tmp_path, partition, interconnect, ifname, nodes=2, mode="torch-ddp",
         emulated_by=None):
    (tmp_path / protocol.RANKS_DIR).mkdir(exist_ok=True)
    prov = {"site": {"config": {"partitions": [
        {"name": partition, "interconnect": interconnect, "socket_ifname": ifname,
         "emulated_by": emulated_by}]}}}
    (tmp_path / "provenance.json").write_text(json.dumps(prov))
    tasks = [SimpleNamespace(role="worker")] * nodes
    return SimpleNamespace(partition=partition, interconnect=interconnect, nodes=nodes,
                           mode=mode, model="lenet5", dataset="cifar", iters=3, warmup=1,
                           options={}, model_params=None, tasks=lambda: tasks)


def _log(rank, iface, kind, tx):
    fab = {"basis": "window", "netns": "k:1", "host": f"node{rank}",
           "tcp": [{"iface": iface, "type": kind, "tx": tx, "rx": tx, "conns": 2}],
           "netdev": {iface: {"tx": 4 * tx, "rx": 4 * tx}}}
    return RankLog(rank, header={}, footer={"status": "ok", protocol.FABRIC: fab})


def test_verdicts(tmp_path):
    expected = 2 * 3 * 248_024  # 2 ranks x 3 iterations x 2(N-1)/N x G
    run = _run(tmp_path, "eth", "ethernet", "lo")
    logs = [_log(0, "lo", "loopback", expected // 2), _log(1, "lo", "loopback", expected // 2)]
    got = fabric.attest(run, tmp_path, logs)
    assert got["fabric"] == "verified" and got["fabric_iface"] == "lo"
    assert got["fabric_bytes_measured"] == expected and got["fabric_bytes_expected"] == expected
    assert got["fabric_host_bytes"] == 4 * expected // 2  # one shared kernel: counted once
    # Declared eth0, used lo: a mismatch.
    got = fabric.attest(_run(tmp_path, "eth", "ethernet", "eth0"), tmp_path, logs)
    assert got["fabric"] == "mismatch" and "eth0" in got["fabric_reason"]
    # InfiniBand declared, TCP on a loopback: never verified as InfiniBand.
    got = fabric.attest(_run(tmp_path, "ib", "infiniband", "lo"), tmp_path, logs)
    assert got["fabric"] == "mismatch" and "not an InfiniBand device" in got["fabric_reason"]
    # ... but TCP over IPoIB is InfiniBand.
    ipoib = [_log(0, "ib0", "infiniband", expected // 2), _log(1, "ib0", "infiniband",
                                                                expected // 2)]
    got = fabric.attest(_run(tmp_path, "ib", "infiniband", "ib0"), tmp_path, ipoib)
    assert got["fabric"] == "verified" and "IPoIB" in got["fabric_reason"]
    # Too few bytes on the interface to say the gradients crossed it.
    few = [_log(0, "lo", "loopback", 10), _log(1, "lo", "loopback", 10)]
    got = fabric.attest(_run(tmp_path, "eth", "ethernet", "lo"), tmp_path, few)
    assert got["fabric"] == "unverified" and "only 20" in got["fabric_reason"]
    # One node: nothing to attest.
    one = fabric.attest(_run(tmp_path, "eth", "ethernet", "lo", nodes=1), tmp_path, logs[:1])
    assert one["fabric"] == "unverified"
    # No evidence at all.
    bare = [RankLog(0, footer={"status": "ok"}), RankLog(1, footer={"status": "ok"})]
    got = fabric.attest(_run(tmp_path, "eth", "ethernet", "lo"), tmp_path, bare)
    assert got["fabric"] == "unverified" and "no rank recorded" in got["fabric_reason"]


def _node_log(rank, iface, tx, netdev):
    """A rank on a node of its own (its own network namespace) whose sockets sent ``tx`` over
    ``iface`` and whose node's interfaces sent ``netdev`` ({iface: bytes})."""
    fab = {"basis": "window", "netns": f"boot:{rank}", "host": f"node{rank + 1}",
           "tcp": [{"iface": iface, "type": "ethernet", "tx": tx, "rx": tx, "conns": 2}],
           "netdev": {name: {"tx": b, "rx": b} for name, b in netdev.items()},
           "ifaces": {"lo": "loopback", "eth0": "ethernet", "ib0": "ethernet"}}
    return RankLog(rank, header={}, footer={"status": "ok", protocol.FABRIC: fab})


def test_emulated_fabric_and_node_counters(tmp_path):
    """Nodes that are hosts of their own (the test cluster's namespaces): an emulated IPoIB
    link (a veth) is verified as sockets over it, not as InfiniBand, and each node's interface
    counters are summed once per node; the declared interface's counters must have moved the
    bytes, whatever the other interface did."""
    expected = 2 * 3 * 248_024
    half = expected // 2
    logs = [_node_log(k, "ib0", half, {"ib0": half + 500, "eth0": 900, "lo": 7})
            for k in range(2)]
    emu = "a veth pair shaped by tc"
    got = fabric.attest(_run(tmp_path, "ib", "infiniband", "ib0", emulated_by=emu), tmp_path,
                        logs)
    assert got["fabric"] == "verified", got["fabric_reason"]
    assert "emulated IPoIB link (a veth pair shaped by tc)" in got["fabric_reason"]
    assert "not InfiniBand verbs" in got["fabric_reason"]
    assert got["fabric_host_bytes"] == 2 * (half + 500)  # two nodes, each counted
    assert got["fabric_other_bytes"] == 2 * 900  # eth0, the busiest other; lo never counts
    assert "eth0 1,800" in got["fabric_reason"]
    # Not declared emulated: a veth is not an InfiniBand device.
    got = fabric.attest(_run(tmp_path, "ib", "infiniband", "ib0"), tmp_path, logs)
    assert got["fabric"] == "mismatch" and "not an InfiniBand device" in got["fabric_reason"]
    # The sockets say ib0, the nodes' counters of ib0 say the bytes did not cross it.
    quiet = [_node_log(k, "ib0", half, {"ib0": 1000, "eth0": half}) for k in range(2)]
    got = fabric.attest(_run(tmp_path, "ib", "infiniband", "ib0", emulated_by=emu), tmp_path,
                        quiet)
    assert got["fabric"] == "unverified" and "moved only 2,000" in got["fabric_reason"]
    # Ethernet declared on eth0, ranks on ib0: a mismatch, emulated or not.
    got = fabric.attest(_run(tmp_path, "eth", "ethernet", "eth0", emulated_by=emu), tmp_path,
                        logs)
    assert got["fabric"] == "mismatch"
    assert "declared ethernet on eth0; ranks used TCP over ib0" in got["fabric_reason"]


@pytest.mark.parametrize(("out", "interconnect", "verdict"), [
    (NCCL_IB, "infiniband", "verified"),
    (NCCL_FALLBACK, "infiniband", "mismatch"),  # the silent fallback is caught
    (NCCL_IB, "ethernet", "mismatch"),
])
def test_nccl_verdicts(tmp_path, out, interconnect, verdict):
    run = _run(tmp_path, "p", interconnect, "ens3" if interconnect == "ethernet" else "ib0")
    for k in range(2):
        (tmp_path / protocol.RANKS_DIR / protocol.rank_out_name(k)).write_text(out)
    logs = [RankLog(k, footer={"status": "ok", protocol.FABRIC: {
        "basis": "window", "netns": f"n{k}", "tcp": [],
        "ib": {"mlx5_0/1": {"tx": 900_000, "rx": 900_000}}}}) for k in range(2)]
    got = fabric.attest(run, tmp_path, logs)
    assert got["fabric"] == verdict, got["fabric_reason"]


# --- on the real 4-node test cluster (scripts/testcluster up) ---------------------------------
#
# Each node is a network namespace with eth0 on an Ethernet-like bridge and ib0 on an
# IPoIB-like one: the ``eth`` partition names eth0, the ``ib`` partition ib0 (declared
# infiniband, emulated by a shaped veth: verified as sockets over it, never as verbs). A copy of
# the site whose partition declares ``eth0`` while the transport variables put the ranks on
# ``ib0`` forces a mismatch, which ``--require-fabric`` turns into a FAILED run.

SMALL = ("--model", "lenet5", "--iters", 3, "--warmup", 1, "--nodes", 2)


@pytest.mark.slurm
@pytest.mark.ranks
def test_testcluster_sweep_tells_the_truth(slurm_cluster, tmp_path):
    """Every multi-node run is verified on its partition's own interface, its nodes' counters
    of that interface moved the bytes and the other interface's did not; no verdict names lo;
    the ib partition is said to be an emulated IPoIB link, not verbs."""
    out = tmp_path / "fabric"
    proc = run_orch("sweep", "--site", slurm_cluster, "--partition", "ib,eth", "--mode",
                    "torch-ddp,horovod,tf-ps,mxnet-kvstore", *SMALL, "--no-preflight",
                    "--out", out)
    recs = results(out)
    assert len(recs) == 8, proc.stderr
    for r in recs:
        assert r["state"] == "COMPLETED", (r["run_id"], r["reason"])
        iface = "eth0" if r["partition"] == "eth" else "ib0"
        assert r["fabric"] == "verified", (r["run_id"], r["fabric_reason"])
        assert r["fabric_iface"] == iface, (r["run_id"], r["fabric_reason"])
        assert "lo" not in r["fabric_iface"].split(",")
        expected = r["fabric_bytes_expected"]
        assert r["fabric_bytes_measured"] >= 0.5 * expected > 0, r["run_id"]
        if r["mode"] != "tf-ps":  # its workers have no window: counted since they started
            assert r["fabric_host_bytes"] >= 0.5 * expected, r["fabric_reason"]
            assert r["fabric_other_bytes"] < 0.5 * expected, r["fabric_reason"]
        if r["partition"] == "ib":
            assert "emulated IPoIB link" in r["fabric_reason"]
            assert "not InfiniBand verbs" in r["fabric_reason"]
    assert "FABRIC MISMATCH" not in proc.stderr
    report = run_orch("report", out, "--no-plots", check=True)
    assert report.returncode == 0
    text = (out / "report" / "report.md").read_text()
    assert "## Fabric" in text and "verified" in text and "ib0" in text and "eth0" in text


@pytest.mark.slurm
@pytest.mark.ranks
def test_forced_mismatch_is_caught(slurm_cluster, tmp_path):
    """A partition that declares eth0 while its ranks use ib0: all-reduce (torch-ddp),
    parameter server (tf-ps: gRPC between host names) and MPI (mpi-ssgd: Open MPI's TCP BTL)
    modes are all caught, and --require-fabric fails them."""
    site = yaml.safe_load((ROOT / "site-configs" / f"{slurm_cluster}.yaml").read_text())
    site["name"] = "fabric-mismatch"
    eth = next(p for p in site["partitions"] if p["name"] == "eth")
    eth["socket_ifname"] = "eth0"  # declared ...
    eth["env"] = {k: "ib0" for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME",  # ... but used
                                     "OMPI_MCA_btl_tcp_if_include",
                                     "OMPI_MCA_oob_tcp_if_include")}
    eth["fabric_hostname"] = "{host}-ib"  # TensorFlow's addresses on ib0 too
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
        assert "declared ethernet on eth0; ranks used TCP over ib0" in r["fabric_reason"]
        assert r["state"] == "FAILED" and "fabric mismatch (--require-fabric)" in r["reason"]
        assert r["fabric_bytes_measured"] > 0
