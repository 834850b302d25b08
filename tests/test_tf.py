"""TensorFlow (issue #5): the tf-allreduce and tf-ps modes and the TensorFlow model zoo, for real.

Local site and test cluster (marked ``slurm``): real TensorFlow tasks through ``orch sweep``.
No timing thresholds: what is checked is that every task ran in its role on its node, every
measured iteration is there, the all-reduce workers stayed in sync, the chief of a PS job logs
the global samples of each step, the servers are stopped after the chief, nothing is left
running, and a failed task fails its run in bounded time with its error as the reason.

The tensorflow environment (`orch env build tensorflow`, about a minute) is needed by most of
these: without it they skip, except under CI=true where they fail (`make test` builds it).
"""

from __future__ import annotations

import json
import os
import subprocess

import hostlist
import pandas as pd
import pytest

from orchestrator import modes, render, zoo
from orchestrator.results.gather import PHASES

from .conftest import (
    ITERS,
    WARMUP,
    assert_phases_cover,
    assert_two_windows,
    built_python,
    processes_matching,
    rendered,
    results,
    run_orch,
    sweep,
    wait_processes_gone,
)

PHASE_TOLERANCE_S = 0.002
PHASE_TOLERANCE_REL = 0.05


@pytest.fixture(scope="session")
def tensorflow() -> str:
    """The tensorflow environment's Python (skip, or under CI fail, if it is not built)."""
    return built_python("tensorflow")


def rank_log(out, run_id: str, task: int) -> list[dict]:
    path = out / run_id / "ranks" / f"rank-{task}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def wait_for_no_processes(text: str) -> list[str]:
    """What is left of a run's processes once they have ended (conftest.wait_processes_gone:
    a bounded wait for a state a correct run reaches, not a bet on how fast its kill is)."""
    wait_processes_gone(text)
    return processes_matching(text)


# --- placement, TF_CONFIG and ports: rendering only ------------------------------------------


def test_ps_placement_puts_the_chief_first_and_ps_beside_workers():
    tasks = modes.get("tf-ps").tasks(2, 2, {"ps_per_node": "2"})
    assert [(t.role, t.index, t.node) for t in tasks] == [
        ("chief", 0, 0),
        ("worker", 0, 0), ("worker", 1, 0), ("ps", 0, 0), ("ps", 1, 0),
        ("worker", 2, 1), ("worker", 3, 1), ("ps", 2, 1), ("ps", 3, 1),
    ]  # fmt: skip
    assert not render.is_uniform(tasks, 2)  # placed from a hostfile (srun arbitrary)
    assert modes.get("tf-allreduce").tasks(2, 1, {}) == modes.workers_only(2, 1, {})


def test_option_defaults_follow_the_partition():
    run, r = rendered("example-gpu-cluster", "gpu-ib", "tf-allreduce")
    assert run.options == {"implementation": "nccl"} and "--implementation nccl" in r.launch_script
    run, r = rendered("testcluster", "eth", "tf-allreduce")
    assert run.options == {"implementation": "ring"}
    run, _ = rendered("local", "local", "tf-ps")
    assert run.options == {"ps_per_node": "1"} and run.ranks == 2  # workers only
    assert "module load tensorflow/2.21.0-cuda12" in rendered(
        "example-gpu-cluster", "gpu-eth", "tf-ps")[1].job_script


def tf_configs(tmp_path, site_name, partition, mode, nodes, env):
    """Run the rendered launch.sh of every task with a stub Python: each task's TF_CONFIG."""
    _, r = rendered(site_name, partition, mode, nodes=nodes)
    launch = tmp_path / "launch.sh"
    launch.write_text(r.launch_script)
    stub = tmp_path / "python"
    stub.write_text('#!/bin/sh\nprintf "%s" "$TF_CONFIG"\n')
    stub.chmod(0o755)
    ntasks = len(modes.get(mode).tasks(nodes, 1, {"ps_per_node": "1"}))
    out = []
    for k in range(ntasks):
        proc = subprocess.run(["bash", str(launch)], capture_output=True, text=True,
                              env={**os.environ, **env, "SLURM_PROCID": str(k),
                                   "ORCH_PYTHON": str(stub)}, check=True)
        out.append(json.loads(proc.stdout))
    return out


def test_local_tf_config_lists_every_task_once(tmp_path):
    configs = tf_configs(tmp_path, "local", "local", "tf-ps", 2, {"MASTER_PORT": "40000"})
    cluster = configs[0]["cluster"]
    assert cluster == {"chief": ["127.0.0.1:40000"],
                       "worker": ["127.0.0.1:40001", "127.0.0.1:40003"],
                       "ps": ["127.0.0.1:40002", "127.0.0.1:40004"]}
    assert all(c["cluster"] == cluster for c in configs)
    assert [c["task"] for c in configs] == [
        {"type": "chief", "index": 0}, {"type": "worker", "index": 0}, {"type": "ps", "index": 0},
        {"type": "worker", "index": 1}, {"type": "ps", "index": 1}]


@pytest.mark.skipif(not any(os.access(os.path.join(p, "scontrol"), os.X_OK)
                            for p in os.environ.get("PATH", "").split(os.pathsep)),
                    reason="scontrol (Slurm's client) is not installed")
def test_slurm_tf_config_uses_node_names_and_a_port_block_per_job(tmp_path):
    def ports(job_id, mode="tf-allreduce", partition="eth"):
        configs = tf_configs(tmp_path, "testcluster", partition, mode, 4,
                             {"SLURM_JOB_NODELIST": "node[3-6]", "SLURM_JOB_ID": str(job_id)})
        addrs = [a for role in configs[0]["cluster"].values() for a in role]
        assert all(c["cluster"] == configs[0]["cluster"] for c in configs)
        return addrs

    addrs = ports(4242)
    assert [a.split(":")[0] for a in addrs] == ["node3", "node4", "node5", "node6"]
    # the ib partition's ranks address each other by the nodes' names on that fabric
    # (fabric_hostname "{host}-ib": the test cluster's ib0 addresses)
    assert [a.split(":")[0] for a in ports(4242, partition="ib")] == [
        "node3-ib", "node4-ib", "node5-ib", "node6-ib"]
    ps_addrs = ports(4242, "tf-ps")
    # chief, worker and ps on node3; a worker and a ps on each of the others
    assert sorted(a.split(":")[0] for a in ps_addrs) == sorted(
        ["node3", *hostlist.expand_hostlist("node[3-6]") * 2])
    # Jobs that may share nodes get disjoint ports, below the MASTER_PORT and ephemeral ranges.
    blocks = [{int(a.split(":")[1]) for a in ports(job, "tf-ps")} for job in (4242, 4243)]
    assert not blocks[0] & blocks[1]
    assert all(10000 <= p < 20000 for block in blocks for p in block)


# --- the model zoo ----------------------------------------------------------------------------

ZOO_SCRIPT = """
import json
import tensorflow as tf
from orchestrator import zoo
from orchestrator.rankside.tf import models as mt
out = {"counts": {}, "shapes": {}, "pools": []}
for name in zoo.names():
    if zoo.get(name).libraries is not None and "tensorflow" not in zoo.get(name).libraries:
        continue
    for ds in zoo.get(name).datasets:
        model = mt.build(name, ds)
        out["counts"][f"{name}/{ds}"] = mt.count_params(model)
        if ds == "cifar" or name == "resnet18":
            y = model(tf.random.normal((2, *mt.input_shape(ds))), training=True)
            finite = bool(tf.reduce_all(tf.math.is_finite(y)))
            out["shapes"][f"{name}/{ds}"] = [list(y.shape), finite]
# PyTorch's MaxPool2d output sizes (floor and ceil_mode), as in the zoo's networks
for h, k, s, pad, ceil in [(112, 3, 2, 0, True), (56, 3, 2, 0, True), (28, 3, 2, 0, True),
                           (14, 2, 2, 0, True), (32, 3, 2, 0, True), (16, 2, 2, 0, True),
                           (28, 3, 1, 1, True), (112, 3, 2, 1, False), (55, 3, 2, 0, False),
                           (15, 3, 2, 0, False)]:
    y = mt.max_pool(tf.random.normal((1, h, h, 1)), k, s, pad, ceil)
    out["pools"].append([h, k, s, pad, ceil, int(y.shape[1])])
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def zoo_report(tensorflow):
    from orchestrator.resources import package_dir

    proc = subprocess.run([tensorflow, "-c", ZOO_SCRIPT], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": str(package_dir().parent),
                                            "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# The zoo's models TensorFlow builds (ModelSpec.libraries: BERT and ViT are PyTorch's only).
TF_MODELS = [n for n in zoo.names()
             if zoo.get(n).libraries is None or "tensorflow" in zoo.get(n).libraries]
PAIRS = [(name, ds) for name in TF_MODELS for ds in zoo.get(name).datasets]


@pytest.mark.parametrize(("name", "dataset"), PAIRS, ids=[f"{n}-{d}" for n, d in PAIRS])
def test_tf_param_count_matches_zoo(zoo_report, name, dataset):
    assert zoo_report["counts"][f"{name}/{dataset}"] == zoo.get(name).expected_params[dataset]


def test_tf_models_run_forward(zoo_report):
    shapes = zoo_report["shapes"]
    assert set(shapes) == {f"{n}/cifar" for n in TF_MODELS if "cifar" in zoo.get(n).datasets} \
        | {"resnet18/imagenet"}
    for key, (shape, finite) in shapes.items():
        assert shape == [2, 1000 if key.endswith("imagenet") else 10] and finite, key


def test_tf_max_pool_has_pytorch_geometry(zoo_report):
    for h, k, s, pad, ceil, got in zoo_report["pools"]:
        span = h + 2 * pad - k
        out = (-(-span // s) if ceil else span // s) + 1
        if ceil and (out - 1) * s >= h + pad:
            out -= 1
        assert got == out, (h, k, s, pad, ceil)


@pytest.mark.parametrize(("mode", "option", "fix"), [
    ("tf-allreduce", "implementation=nccl", "implementation=ring"),
    ("chainermn", "communicator=pure_nccl", "communicator=naive")])
def test_nccl_option_on_a_cpu_partition_is_refused_at_render_time(tmp_path, mode, option, fix):
    """No step of the mode can run there: one line naming option and fix, exit 2."""
    proc = run_orch("sweep", "--mode", mode, "--option", option, "--nodes", "1", "--dry-run",
                    "--out", tmp_path / "out")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and f"--option {option}" in line and f"use {fix}" in line


# --- local site -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tf_local_sweep(tensorflow, tmp_path_factory):
    out = tmp_path_factory.mktemp("tf-local")
    proc = sweep("--mode", "tf-allreduce,tf-ps", "--nodes", "1,2", out=out)
    return out, proc


def test_local_sweep_completes(tf_local_sweep):
    out, _ = tf_local_sweep
    recs = {(r["mode"], r["nodes"]): r for r in results(out)}
    assert set(recs) == {(m, n) for m in ("tf-allreduce", "tf-ps") for n in (1, 2)}
    for (_, nodes), r in recs.items():
        assert r["state"] == "COMPLETED", r["reason"]
        assert r["framework"] == "tensorflow" and r["ranks"] == nodes  # workers
        assert r["iterations_measured"] == ITERS and r["samples_per_s"] > 0
        assert r["speedup"] is not None and r["efficiency"] is not None
        assert json.loads(r["versions"])["tensorflow"] == "2.21.0"
    assert recs[("tf-allreduce", 2)]["checksums_agree"] is True


def test_local_roles_and_nodes(tf_local_sweep):
    out, _ = tf_local_sweep
    for rdir in (p for p in out.iterdir() if (p / "run.json").exists()):
        run = json.loads((rdir / "run.json").read_text())
        tasks = modes.get(run["mode"]).tasks(run["nodes"], run["tasks_per_node"], run["options"])
        for k, task in enumerate(tasks):
            log = rank_log(out, rdir.name, k)
            header, footer = log[0], log[-1]
            assert (header["role"], header["role_index"]) == (task.role, task.index)
            assert header["node_rank"] == task.node  # the local launcher's virtual node
            assert footer["type"] == "footer" and footer["status"] == "ok", footer
            assert footer["peak_rss_bytes"] > 0
            config = json.loads(header["env"]["TF_CONFIG"])
            assert config["task"] == {"type": task.role, "index": task.index}


def test_local_two_windows_and_communication(tf_local_sweep):
    """Two windows: every logging task ran TensorFlow's own step (native window) and then the
    instrumented one; throughput comes from the native window; total communication is the
    measured collective (tf-allreduce) or null with the reason (tf-ps); 1 worker of
    tf-allreduce communicates nothing."""
    out, _ = tf_local_sweep
    for r in results(out):
        mode = modes.get(r["mode"])
        tasks = mode.tasks(r["nodes"], 1, {"ps_per_node": "1"})
        for k, task in enumerate(tasks):
            log = rank_log(out, r["run_id"], k)
            if task.role not in mode.logging_roles:
                assert not [x for x in log if x["type"] == "iter"]
                continue
            breakdown = assert_two_windows(log, ITERS, WARMUP)
            if r["mode"] == "tf-ps":
                assert all("t_comm_total" not in x for x in breakdown)
                assert "overlapped" in log[-1]["comm_total_reason"]
            else:
                assert "comm_total_reason" not in log[-1]
                assert all(x["t_comm_total"] == x["t_comm"] for x in breakdown)
                if r["nodes"] == 1:
                    assert all(x["t_comm"] == 0 for x in breakdown)
        assert r["throughput_window"] == "native" and r["t_iter_native"] > 0
        assert r["instrumentation_overhead"] is not None
        assert (r["t_comm_total"] is None) == (r["mode"] == "tf-ps")
        assert (r["comm_total_reason"] is None) == (r["mode"] == "tf-allreduce")
    assert modes.get("tf-allreduce").overlap == "none"  # one packed all-reduce after backward


def test_local_allreduce_phases_and_sync(tf_local_sweep):
    out, _ = tf_local_sweep
    df = pd.read_parquet(out / "results" / "iterations.parquet")
    m = df[(df["mode"] == "tf-allreduce") & ~df["warmup_iter"] & (df["window"] == "breakdown")]
    assert_phases_cover(m, PHASES, PHASE_TOLERANCE_S, PHASE_TOLERANCE_REL)
    assert (m["t_comm_total"] == m["t_comm"]).all() and (m["t_b"] > 0).all()
    two = next(p.name for p in out.iterdir() if p.name.startswith("tf-allreduce-lenet5-local-n2"))
    footers = [rank_log(out, two, k)[-1] for k in (0, 1)]
    assert footers[0]["param_checksum"] == footers[1]["param_checksum"]
    assert footers[0]["checksum_sum"] == pytest.approx(2 * footers[0]["param_checksum"])


def test_local_ps_chief_logs_global_steps_and_stops_servers(tf_local_sweep):
    out, _ = tf_local_sweep
    df = pd.read_parquet(out / "results" / "iterations.parquet")
    ps = df[df["mode"] == "tf-ps"]
    assert set(ps["rank"]) == {0}  # only the chief logs iterations
    for nodes, rows in ps.groupby("nodes"):
        assert (rows["samples"] == nodes * rows["batch_size"]).all()  # every worker's batch
        measured = rows[~rows["warmup_iter"] & (rows["window"] == "breakdown")]
        assert (measured["t_comm"] > 0).all() and (measured["t_u"] == 0).all()
        assert measured["t_comm_total"].isna().all()  # not seen: comm_total_reason says why
    two = next(p.name for p in out.iterdir() if p.name.startswith("tf-ps-lenet5-local-n2"))
    chief = rank_log(out, two, 0)
    assert chief[-1]["servers_stopped"] == 4 and chief[-1]["workers"] == 2
    assert len(chief[-1]["variables_per_ps"]) == 2  # the variables are spread over both ps
    assert all("t_pull" in rec and "t_push" in rec for rec in chief
               if rec["type"] == "iter" and rec["window"] == "breakdown")
    for k in range(1, 5):
        assert rank_log(out, two, k)[-1]["stopped_by"] == "chief done"
    assert (out / two / "ranks" / "chief.done").is_file()


def test_local_failed_worker_fails_the_run(tensorflow, tmp_path):
    out = tmp_path / "fail"
    proc = sweep("--mode", "tf-allreduce,tf-ps", "--nodes", "2", "--inject-failure", "1@2",
                 "--time-limit", "5", out=out, check=False)
    assert proc.returncode == 1
    for r in results(out):
        assert r["state"] == "FAILED", r
        # stopped, not timed out: a run its time limit ends is TIMEOUT, "time limit ... reached"
        assert "time limit" not in r["reason"], r["reason"]
        assert "rank 1: " in r["reason"] and "injected failure on rank 1 at iter 2" in r["reason"]
        assert wait_for_no_processes(r["run_id"]) == []


# --- test cluster ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tf_cluster_sweep(slurm_cluster, tensorflow, tmp_path_factory):
    out = tmp_path_factory.mktemp("tf-slurm")
    proc = sweep("--site", slurm_cluster, "--mode", "tf-ps,tf-allreduce", "--nodes", "1,2,4",
                 "--no-preflight", out=out)  # test_preflight covers predictions
    return out, proc


@pytest.mark.slurm
def test_cluster_sweep_places_every_role_on_its_node(tf_cluster_sweep):
    out, _ = tf_cluster_sweep
    recs = results(out)
    assert sorted((r["mode"], r["nodes"]) for r in recs) == sorted(
        (m, n) for m in ("tf-allreduce", "tf-ps") for n in (1, 2, 4))
    for r in recs:
        assert r["state"] == "COMPLETED", r["reason"]
        assert r["launcher"] == "srun" and r["ranks"] == r["nodes"]
        run = json.loads((out / r["run_id"] / "run.json").read_text())
        tasks = modes.get(r["mode"]).tasks(r["nodes"], 1, run["options"])
        logs = [rank_log(out, r["run_id"], k) for k in range(len(tasks))]
        allocation = hostlist.expand_hostlist(logs[0][0]["env"]["SLURM_JOB_NODELIST"])
        assert len(allocation) == r["nodes"]
        for task, log in zip(tasks, logs, strict=True):
            header, footer = log[0], log[-1]
            assert (header["role"], header["role_index"]) == (task.role, task.index)
            assert header["node"] == allocation[task.node], (r["run_id"], task)
            assert footer["status"] == "ok" and footer["peak_rss_bytes"] > 0
            address = json.loads(header["env"]["TF_CONFIG"])["cluster"][task.role][task.index]
            fabric = "-ib" if r["partition"] == "ib" else ""  # testcluster.yaml's fabric_hostname
            assert address.split(":")[0] == header["node"] + fabric
        if r["mode"] == "tf-allreduce":
            assert r["checksums_agree"] is True and r["distinct_hosts"] == r["nodes"]


@pytest.mark.slurm
def test_cluster_sweep_leaves_no_process(tf_cluster_sweep):
    out, _ = tf_cluster_sweep
    for rdir in (p for p in out.iterdir() if (p / "run.json").exists()):
        assert wait_for_no_processes(rdir.name) == []


@pytest.mark.slurm
def test_cluster_failed_worker_fails_the_run_in_time(slurm_cluster, tensorflow, tmp_path):
    out = tmp_path / "fail"
    proc = sweep("--site", slurm_cluster, "--mode", "tf-ps,tf-allreduce", "--nodes", "2",
                 "--inject-failure", "1@2", "--time-limit", "5", out=out, check=False)
    assert proc.returncode == 1
    for r in results(out):
        assert r["state"] == "FAILED", r
        # stopped, not timed out: a run its time limit ends is TIMEOUT, "time limit ... reached"
        assert "time limit" not in r["reason"], r["reason"]
        assert "rank 1: " in r["reason"] and "injected failure on rank 1 at iter 2" in r["reason"]
        assert r["job_id"]
        assert wait_for_no_processes(r["run_id"]) == []
