"""The hang watch's rules, on rank logs and heartbeats written as ranks write them, with a fake
clock (no cluster, no waiting): a frozen rank is named with its node, the timeout grows with slow
iterations, epoch records are progress, a run that never starts is caught at the start-up
timeout."""

from __future__ import annotations

import json
import time
from pathlib import Path

from orchestrator import protocol
from orchestrator.runs import watch
from orchestrator.spec.api import Run


def _run(nodes: int = 2, mode: str = "torch-ddp") -> Run:
    return Run(site="t", scheduler="slurm", partition="p", interconnect="ethernet", mode=mode,
               framework="torch", launcher="srun", model="lenet5", dataset="cifar", nodes=nodes,
               tasks_per_node=1, batch_size=32, iters=100, warmup=1, repeat=0,
               time_limit_min=10, options={"backend": "gloo"})


class Ranks:
    """Rank logs and heartbeats as a run's ranks write them."""

    def __init__(self, rdir: Path, n: int) -> None:
        self.dir = rdir / protocol.RANKS_DIR
        self.dir.mkdir(parents=True)
        self.seq = dict.fromkeys(range(n), 0)
        for k in range(n):
            self.write(k, {"type": "header", "task": k, "node": f"node{k + 1}", "pid": 1})

    def write(self, k: int, rec: dict) -> None:
        with open(self.dir / protocol.rank_log_name(k), "a") as fh:
            fh.write(json.dumps(rec) + "\n")

    def iteration(self, k: int, it: int, t_iter: float = 0.05) -> None:
        self.write(k, {"type": "iter", "iter": it, "t_start": 1.0, "t_iter": t_iter,
                       "samples": 32})

    def beat(self, k: int, down: tuple[str, ...] = ()) -> None:
        self.seq[k] += 1
        (self.dir / protocol.heartbeat_name(k)).write_bytes(
            protocol.heartbeat_line(self.seq[k], time.time(), down))


def test_hang_names_the_frozen_rank_and_its_node(tmp_path):
    ranks = Ranks(tmp_path, 2)
    w = watch.RunWatch(_run(), tmp_path, watch.HangPolicy(timeout_s=10, startup_s=60), now=0.0)
    for it in range(5):
        for k in (0, 1):
            ranks.iteration(k, it)
            ranks.beat(k)
        assert w.observe(float(it)) is None
    # rank 1 stops (SIGSTOP): no iteration, no heartbeat; rank 0 waits in the all-reduce
    t = 4.0
    while t < 14.0:
        t += 1.0
        ranks.beat(0)
        assert w.observe(t) is None
    ranks.beat(0)
    hang = w.observe(15.5)
    assert hang is not None
    assert hang.reason.startswith("no iteration progress for 12 s (hang timeout 10 s): "
                                  "rank 1 on node2 stalled at iteration 4 (no heartbeat for")
    assert "rank 0 on node1 waiting at iteration 4 (heartbeat alive)" in hang.reason
    assert hang.nodes == ["node2"]


def test_hang_timeout_grows_with_slow_iterations_and_footers_end_the_watch(tmp_path):
    ranks = Ranks(tmp_path, 2)
    w = watch.RunWatch(_run(), tmp_path, watch.HangPolicy(timeout_s=10, startup_s=60), now=0.0)
    for k in (0, 1):
        ranks.iteration(k, 0, t_iter=3.0)  # 10 x median = 30 s > 10 s
    assert w.observe(1.0) is None
    assert w.observe(30.0) is None
    hang = w.observe(31.5)
    assert hang is not None and "(hang timeout 30 s)" in hang.reason
    # no heartbeats, same iteration: nobody to blame, nothing to exclude
    assert "rank 0 on node1 stalled at iteration 0" in hang.reason and hang.nodes == []
    for k in (0, 1):
        ranks.write(k, {"type": "footer", "status": "ok"})
    assert w.observe(100.0) is None  # every logging rank ended: not a hang


def test_epoch_records_are_progress_not_iterations(tmp_path):
    # --epochs runs log an epoch record after each epoch's iterations: the watch reads it as
    # progress (it once took it for an iteration record and failed on its missing "iter").
    ranks = Ranks(tmp_path, 1)
    w = watch.RunWatch(_run(nodes=1), tmp_path, watch.HangPolicy(timeout_s=10, startup_s=60),
                       now=0.0)
    ranks.iteration(0, 0)
    assert w.observe(1.0) is None
    ranks.write(0, {"type": "epoch", "epoch": 1, "t_start": 1.0, "t_epoch": 0.5, "t_eval": 0.1,
                    "train_loss": 2.3, "train_acc": 0.1, "test_acc": 0.2, "samples": 32})
    assert w.observe(9.0) is None
    assert w.observe(18.0) is None  # the epoch record at 9 s was progress: 9 s since, not 17
    hang = w.observe(19.5)
    assert hang is not None and "stalled at iteration 0" in hang.reason


def test_startup_timeout_before_the_first_iteration(tmp_path):
    ranks = Ranks(tmp_path, 2)
    (ranks.dir / protocol.rank_log_name(1)).unlink()  # rank 1 never started
    w = watch.RunWatch(_run(), tmp_path, watch.HangPolicy(timeout_s=10, startup_s=60), now=0.0)
    assert w.observe(59.0) is None
    hang = w.observe(61.0, nodes=["node1", "node7"])
    assert hang is not None
    assert hang.reason.startswith("no first iteration within the start-up timeout of 60 s: ")
    assert "rank 1 on node7 stalled with no log" in hang.reason
    assert watch.RunWatch(_run(), tmp_path, watch.HangPolicy(timeout_s=0), 0.0).observe(1e6) \
        is None  # --hang-timeout 0: never


def test_a_rank_whose_link_is_down_hangs_the_run_at_once(tmp_path):
    """A rank's heartbeat says its fabric interface is down: after LINK_DOWN_S without
    progress the run is hung (long before the hang timeout), naming the node and interface,
    and that node is the one to keep off; a link that comes back sooner is a flap."""
    ranks = Ranks(tmp_path, 2)
    w = watch.RunWatch(_run(), tmp_path, watch.HangPolicy(timeout_s=300, startup_s=600),
                       now=0.0)
    for it in range(3):
        for k in (0, 1):
            ranks.iteration(k, it)
            ranks.beat(k)
        assert w.observe(float(it)) is None
    # A flap: ib0 down on node2 for a few seconds, then up again and progress goes on.
    ranks.beat(1, down=("ib0",))
    assert w.observe(3.0) is None
    ranks.beat(1)
    assert w.observe(3.0 + watch.LINK_DOWN_S + 1) is None
    # Down for good: the ranks stop progressing; both still beat.
    t = 20.0
    ranks.beat(1, down=("ib0",))
    assert w.observe(t) is None
    for _ in range(int(watch.LINK_DOWN_S)):
        t += 1.0
        ranks.beat(0)
        ranks.beat(1, down=("ib0",))
        if t - 20.0 < watch.LINK_DOWN_S:
            assert w.observe(t) is None
    hang = w.observe(t + 1.0)
    assert hang is not None
    assert hang.reason.startswith("ib0 down on node2 for 16 s (rank 1's heartbeat), no "
                                  "iteration progress since: ")
    assert "rank 1 on node2 stalled at iteration 2 (ib0 down)" in hang.reason
    assert "rank 0 on node1 waiting at iteration 2 (heartbeat alive)" in hang.reason
    assert hang.nodes == ["node2"]
    # A heartbeat line of an older orch (31 bytes, no link field) says nothing is down.
    assert protocol.heartbeat_links_down(b"000000000001 00001700000000.000\n") == []
    assert len(protocol.heartbeat_line(1, 1.0, ("ib0", "eth0"))) == protocol.HEARTBEAT_BYTES


def test_the_rank_knows_its_fabric_links(tmp_path):
    from orchestrator.rankside import harness

    env = {"GLOO_SOCKET_IFNAME": "ib0", "NCCL_SOCKET_IFNAME": "ib0",
           "OMPI_MCA_btl_tcp_if_include": "ib0,eth0", "DMLC_INTERFACE": "lo"}
    assert harness.fabric_ifnames(env) == ["ib0"]  # lists and loopback say nothing of a link
    for name, state in (("ib0", "down"), ("eth0", "up"), ("lo", "unknown")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "operstate").write_text(state + "\n")
    assert harness.links_down(["ib0", "eth0", "lo", "gone0"], root=str(tmp_path)) == \
        ["ib0", "gone0"]
