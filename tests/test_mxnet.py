"""MXNet KVStore parameter server for real: models, sweeps on the local site and the test
cluster, roles on their nodes, and a worker that dies.

The rank side runs in the ``mxnet`` environment (MXNet 1.9.1 + numpy 1.23.5, built by
``orch env build mxnet``). Without it these tests skip, saying so; under CI=true they fail.
No timing thresholds: "in time" means the run ended FAILED before its time limit (a hang
would end as TIMEOUT).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from orchestrator import site as sitemod
from orchestrator import zoo
from orchestrator.results.gather import PHASES
from orchestrator.spec.api import Run

from .conftest import (
    ROOT,
    assert_two_windows,
    built_python,
    frozen_rank,
    processes_matching,
    results,
    run_orch,
    wait_processes_gone,
    wait_until,
)

pytestmark = pytest.mark.ranks
ITERS, WARMUP = 4, 1
FAST = ("--model", "lenet5", "--iters", ITERS, "--warmup", WARMUP)
# The zoo's models MXNet builds (the transformers are PyTorch's only: ModelSpec.libraries).
PAIRS = [(name, ds) for name in zoo.names() for ds in zoo.get(name).datasets
         if zoo.get(name).libraries is None or "mxnet" in zoo.get(name).libraries]


@pytest.fixture(scope="session")
def mxnet_python() -> str:
    """The mxnet environment's Python, once it is built."""
    return built_python("mxnet")


def run_dirs(out: Path) -> list[Path]:
    return sorted(p for p in out.iterdir() if (p / "run.json").is_file())


def rank_logs(rdir: Path) -> dict[int, list[dict]]:
    return {int(p.stem.split("-")[1]): [json.loads(line) for line in p.read_text().splitlines()]
            for p in (rdir / "ranks").glob("rank-*.jsonl")}


# --- the model zoo, in the mxnet environment ---------------------------------------------------

ZOO_CHECK = """
import json, sys
import mxnet as mx
from orchestrator import zoo
from orchestrator.rankside.mxnet import models as mm
out = {}
for name in zoo.names():
    if zoo.get(name).libraries is not None and "mxnet" not in zoo.get(name).libraries:
        continue
    for ds in zoo.get(name).datasets:
        net = mm.build(name, ds)
        net.initialize(mx.init.Xavier())
        x = mx.nd.random.normal(shape=(1, *mm.input_shape(ds)))
        stages = mm.trace(net, x)
        y = stages[-1][1]
        out[f"{name}/{ds}"] = {"params": mm.param_count(net), "out": list(y),
                               "stages": {n: list(s) for n, s in stages}}
try:
    mm.build("lenet5", "imagenet")
except KeyError as exc:
    out["error"] = str(exc)
json.dump(out, sys.stdout)
"""


@pytest.fixture(scope="module")
def mxnet_zoo(mxnet_python) -> dict:
    proc = subprocess.run([mxnet_python, "-c", ZOO_CHECK], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT),
                                                      "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize(("name", "dataset"), PAIRS, ids=[f"{n}-{d}" for n, d in PAIRS])
def test_model_params_match_the_zoo(mxnet_zoo, name, dataset):
    got = mxnet_zoo[f"{name}/{dataset}"]
    assert got["params"] == zoo.get(name).expected_params[dataset]
    assert got["out"] == [1, zoo.get_dataset(dataset).num_classes]


# Output (C, H, W) of named stages on a 32x32 input: the zoo's CIFAR rule, as in PyTorch.
CIFAR_STAGES = {
    "lenet5": {"conv1": [6, 28, 28], "pool1": [6, 14, 14], "conv2": [16, 10, 10],
               "pool2": [16, 5, 5]},
    "alexnet": {"conv1": [64, 32, 32], "pool2": [192, 15, 15], "pool5": [256, 7, 7],
                "avgpool": [256, 6, 6]},
    "googlenet": {"conv3": [192, 32, 32], "inception3b": [480, 32, 32],
                  "inception4e": [832, 16, 16], "inception5b": [1024, 8, 8]},
    "resnet18": {"conv1": [64, 32, 32], "layer1": [64, 32, 32], "layer2": [128, 16, 16],
                 "layer3": [256, 8, 8], "layer4": [512, 4, 4]},
    "resnet50": {"conv1": [64, 32, 32], "layer1": [256, 32, 32], "layer4": [2048, 4, 4]},
}


# The stem max-pools the CIFAR variants drop (the ImageNet variants have them).
STEM_POOLS = {"lenet5": [], "alexnet": ["pool1"], "googlenet": ["maxpool1", "maxpool2"],
              "resnet18": ["maxpool"], "resnet50": ["maxpool"]}


@pytest.mark.parametrize("name", sorted(CIFAR_STAGES))
def test_cifar_variants_follow_the_zoo_rule(mxnet_zoo, name):
    stages = mxnet_zoo[f"{name}/cifar"]["stages"]
    for stage, chw in CIFAR_STAGES[name].items():
        assert stages[stage] == [1, *chw], stage
    for pool in STEM_POOLS[name]:
        assert pool not in stages
        assert pool in mxnet_zoo[f"{name}/imagenet"]["stages"]


def test_lenet5_has_no_imagenet_variant(mxnet_zoo):
    assert "does not support dataset 'imagenet'" in mxnet_zoo["error"]


# --- input checks (no environment needed) -------------------------------------------------------


def test_async_updates_only_on_servers(tmp_path):
    proc = run_orch("sweep", "--mode", "mxnet-kvstore", "--kvstore", "dist_sync,dist_async",
                    "--option", "update=worker", "--dry-run", "--out", tmp_path / "x")
    assert proc.returncode == 2
    assert "update=worker is not possible with kvstore=dist_async" in proc.stderr
    proc = run_orch("sweep", "--mode", "mxnet-kvstore", "--kvstore", "dist_syn",
                    "--dry-run", "--out", tmp_path / "x")
    assert proc.returncode == 2 and "kvstore=dist_syn is not valid" in proc.stderr


def test_dry_run_places_roles_and_sets_dmlc(tmp_path):
    proc = run_orch("sweep", "--mode", "mxnet-kvstore", "--nodes", "2", "--option",
                    "servers_per_node=2", "--dry-run", "--out", tmp_path / "x", check=True)
    assert "task_roles=(scheduler:0 server:0 server:1 server:2 server:3 worker:0 worker:1)" \
        in proc.stdout
    assert "task_nodes=(0 0 0 1 1 0 1)" in proc.stdout
    for line in ("export DMLC_NUM_SERVER=4", "export DMLC_NUM_WORKER=2",
                 'export DMLC_ROLE="$ORCH_ROLE"', "export DMLC_INTERFACE=lo",
                 'export DMLC_PS_ROOT_PORT="$MASTER_PORT"'):
        assert line in proc.stdout


def test_missing_environment_is_named_before_submitting(tmp_path):
    text = sitemod.resolve("local").read_text().replace(
        "venv: ~/.cache/orch/envs/mxnet", f"venv: {tmp_path / 'nowhere'}")
    assert str(tmp_path / "nowhere") in text
    site_file = tmp_path / "local.yaml"
    site_file.write_text(text)
    proc = run_orch("sweep", "--site", site_file, "--mode", "mxnet-kvstore", "--out",
                    tmp_path / "x")
    assert proc.returncode == 2
    assert "environment 'mxnet' of site 'local' is not built" in proc.stderr
    assert "orch env build mxnet" in proc.stderr
    assert not list((tmp_path / "x").glob("*/job.json"))


# --- the local site ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mxnet_local_sweep(mxnet_python, tmp_path_factory):
    out = tmp_path_factory.mktemp("mxnet-local")
    run_orch("sweep", "--mode", "mxnet-kvstore", "--kvstore", "dist_sync,dist_async",
             "--nodes", "1,2", *FAST, "--out", out, check=True)
    return out


def test_local_sweep_completes(mxnet_local_sweep):
    recs = results(mxnet_local_sweep)
    got = sorted((r["options"]["kvstore"], r["options"]["update"], r["nodes"], r["ranks"],
                  r["state"]) for r in recs)
    assert got == [("dist_async", "server", 1, 1, "COMPLETED"),
                   ("dist_async", "server", 2, 2, "COMPLETED"),
                   ("dist_sync", "worker", 1, 1, "COMPLETED"),
                   ("dist_sync", "worker", 2, 2, "COMPLETED")]
    for r in recs:
        assert r["framework"] == "mxnet" and r["mode"] == "mxnet-kvstore"
        assert r["iterations_measured"] == ITERS and r["samples_per_s"] > 0
        assert json.loads(r["versions"])["mxnet"] == "1.9.1"
        assert r["speedup"] is not None
        for p in PHASES:
            assert r[p] >= 0
        assert r["t_f"] > 0 and r["t_b"] > 0
        if r["options"]["update"] == "worker":
            assert r["t_u"] > 0  # the update is timed apart from communication
        else:
            assert r["t_u"] == 0  # it runs on the servers, inside t_comm
        if r["options"]["kvstore"] == "dist_sync":
            assert r["checksums_agree"] is True  # the workers really synchronised
        # Two windows: throughput from Gluon's own step; pushes overlap backward, so the total
        # communication (keys in flight) holds the exposed part and more.
        assert r["throughput_window"] == "native" and r["instrumentation_overhead"] is not None
        assert r["t_comm_total"] >= r["t_comm"] > 0 and r["comm_total_reason"] is None


def test_local_roles_where_the_mode_puts_them(mxnet_local_sweep):
    for rdir in run_dirs(mxnet_local_sweep):
        run = Run.model_validate_json((rdir / "run.json").read_text())
        tasks = run.tasks()
        logs = rank_logs(rdir)
        assert sorted(logs) == list(range(len(tasks)))
        assert tasks[0].role == "scheduler" and tasks[0].node == 0
        assert sum(t.role == "server" for t in tasks) == run.nodes  # one per node
        assert sum(t.role == "worker" for t in tasks) == run.nodes * run.tasks_per_node
        for k, task in enumerate(tasks):
            header, footer = logs[k][0], logs[k][-1]
            assert (header["role"], header["role_index"]) == (task.role, task.index)
            assert header["node_rank"] == task.node  # the local launcher's virtual node
            assert header["env"]["DMLC_ROLE"] == task.role
            assert header["env"]["DMLC_NUM_WORKER"] == str(run.ranks)
            assert footer["type"] == "footer" and footer["status"] == "ok"
            assert footer["peak_rss_bytes"] > 0
            iters = [rec for rec in logs[k] if rec["type"] == "iter"]
            if task.role == "worker":
                breakdown = assert_two_windows(logs[k], ITERS, WARMUP)
                assert all(rec["t_comm_total"] >= rec["t_comm"] for rec in breakdown)
                assert footer["params"] == zoo.get("lenet5").expected_params["cifar"]
            else:
                assert iters == [] and footer["served_s"] > 0
            if task.role == "server":
                # update=server: the workers' optimizer runs here, and its time is recorded.
                assert (footer["server_updates"] > 0) == (run.options["update"] == "server")


def test_async_workers_are_not_held_to_equal_checksums(mxnet_local_sweep):
    two = next(r for r in results(mxnet_local_sweep)
               if r["nodes"] == 2 and r["options"]["kvstore"] == "dist_async")
    assert two["state"] == "COMPLETED"
    rdir = mxnet_local_sweep / two["run_id"]
    workers = [log[-1]["param_checksum"] for log in rank_logs(rdir).values()
               if log[0]["role"] == "worker"]
    assert len(workers) == 2  # they may or may not agree: it is data, not a verdict


def test_only_workers_are_ranks_of_the_result_set(mxnet_local_sweep):
    df = pd.read_parquet(mxnet_local_sweep / "results" / "iterations.parquet")
    for _, run in df.groupby("run_id"):
        nodes = int(run["nodes"].iloc[0])
        # Task ids: scheduler 0, servers 1..nodes, workers after them.
        assert sorted(run["rank"].unique()) == list(range(1 + nodes, 1 + 2 * nodes))


def test_local_failed_worker_fails_the_run_in_time(mxnet_python, tmp_path):
    out = tmp_path / "fail"
    # 2 nodes: scheduler 0, servers 1-2, workers 3-4; worker 1 (task 4) raises at iteration 2.
    proc = run_orch("sweep", "--mode", "mxnet-kvstore", "--nodes", "2", *FAST,
                    "--inject-failure", "4@2", "--time-limit", "2", "--out", out)
    assert proc.returncode == 1
    rec = results(out)[0]
    assert rec["state"] == "FAILED"  # not TIMEOUT: the others were stopped, not waited for
    assert rec["reason"].startswith("rank 4: ")
    assert "injected failure on rank 4 at iter 2" in rec["reason"]
    assert processes_matching(rec["run_id"]) == []


def test_local_killed_worker_is_named_in_the_reason(mxnet_python, tmp_path):
    """A worker killed by a signal writes no footer itself: its launch.sh records the death.

    Worker 1 freezes itself at iteration 2 (no hang timeout) and is killed once it has: surely
    mid-training (a worker watched for two logged iterations could be past them by then)."""
    out = tmp_path / "kill"
    cmd = [sys.executable, "-m", "orchestrator", "sweep", "--mode", "mxnet-kvstore", "--nodes",
           "2", "--iters", "100000", "--warmup", "1", "--time-limit", "3",
           "--inject-failure", "4@2:stop", "--hang-timeout", "0", "--out", str(out)]
    orch = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        pid = wait_until("worker 1 to freeze", lambda: frozen_rank(out, 4), timeout=300,
                         proc=orch)
        log = next(out.glob("*/ranks/rank-4.jsonl")).read_text()
        assert log.count('"type":"iter"') >= 2, log  # it trained, and wrote so before freezing
        os.kill(pid, signal.SIGKILL)
        orch.communicate(timeout=150)
    finally:
        if orch.poll() is None:
            orch.kill()
            orch.communicate()
        stuck = frozen_rank(out, 4)  # the test failed before it killed the worker
        if stuck:
            os.kill(stuck, signal.SIGKILL)
    assert orch.returncode == 1
    rec = results(out)[0]
    assert rec["state"] == "FAILED"
    assert rec["reason"].startswith("rank 4: task 4 (worker 1)")
    assert "killed by signal 9 (SIGKILL)" in rec["reason"]
    assert processes_matching(rec["run_id"]) == []


# --- the test cluster ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mxnet_cluster_sweep(slurm_cluster, mxnet_python, tmp_path_factory):
    out = tmp_path_factory.mktemp("mxnet-slurm")
    run_orch("sweep", "--site", slurm_cluster, "--mode", "mxnet-kvstore", "--kvstore",
             "dist_sync,dist_async", "--nodes", "1,2,4", *FAST, "--no-preflight", "--out", out,
             check=True)  # about kvstores: test_preflight covers predictions
    return out


@pytest.mark.slurm
def test_cluster_sweep_completes(mxnet_cluster_sweep):
    recs = results(mxnet_cluster_sweep)
    assert sorted((r["options"]["kvstore"], r["nodes"]) for r in recs) == [
        (kv, n) for kv in ("dist_async", "dist_sync") for n in (1, 2, 4)]
    for r in recs:
        assert r["state"] == "COMPLETED", r["reason"]
        assert r["launcher"] == "srun" and r["job_id"]
        assert r["ranks"] == r["nodes"] and r["iterations_measured"] == ITERS
        assert r["distinct_hosts"] == r["nodes"]  # one worker per node, each on its own
        if r["options"]["kvstore"] == "dist_sync":
            assert r["checksums_agree"] is True


@pytest.mark.slurm
def test_cluster_roles_on_their_nodes(mxnet_cluster_sweep):
    for rdir in run_dirs(mxnet_cluster_sweep):
        run = Run.model_validate_json((rdir / "run.json").read_text())
        tasks = run.tasks()
        logs = rank_logs(rdir)
        assert sorted(logs) == list(range(len(tasks)))
        node_of: dict[int, str] = {}  # task table node -> Slurm node name
        for k, task in enumerate(tasks):
            header = logs[k][0]
            assert (header["role"], header["role_index"]) == (task.role, task.index)
            assert header["node"].startswith("node")
            assert header["node_rank"] == task.node
            assert node_of.setdefault(task.node, header["node"]) == header["node"]
            assert logs[k][-1]["status"] == "ok"
            if task.role == "scheduler":
                # Every task was told the scheduler's address and the job's port.
                uri = {logs[j][0]["env"]["DMLC_PS_ROOT_URI"] for j in logs}
                port = {logs[j][0]["env"]["DMLC_PS_ROOT_PORT"] for j in logs}
                assert len(uri) == 1 and len(port) == 1
        assert len(set(node_of.values())) == run.nodes  # distinct nodes, one per table node
        if (rdir / "hostfile").exists():  # placed by srun --distribution=arbitrary
            hosts = (rdir / "hostfile").read_text().split()
            assert [logs[k][0]["node"] for k in range(len(tasks))] == hosts


@pytest.mark.slurm
def test_cluster_failed_worker_fails_the_run_in_time(slurm_cluster, mxnet_python, tmp_path):
    out = tmp_path / "fail"
    proc = run_orch("sweep", "--site", slurm_cluster, "--mode", "mxnet-kvstore", "--nodes", "2",
                    *FAST, "--inject-failure", "4@2", "--time-limit", "3", "--out", out)
    assert proc.returncode == 1
    rec = results(out)[0]
    assert rec["state"] == "FAILED"  # srun --kill-on-bad-exit stopped the others
    assert "rank 4: " in rec["reason"]
    assert "injected failure on rank 4 at iter 2" in rec["reason"]
    # Slurm signals, waits KillWait (5 s here), then kills; the job script's group gets orch's
    # own SIGTERM, grace and SIGKILL: nothing may outlive that.
    wait_processes_gone(rec["run_id"])
    assert processes_matching(rec["run_id"]) == []
