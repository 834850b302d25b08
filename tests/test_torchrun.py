"""torchrun as a launcher (backends/launchers.py, templates/launchers/torchrun.j2) of the torch
modes: one agent per node starts the node's ranks through its c10d rendezvous.

The GPU partitions cannot run here: their job scripts are golden files. Real CPU/Gloo runs on
the local site and the test cluster show that a torchrun-started run gives the result set of
an srun-started one (the same columns, ranks and iterations), its ranks placed by torchrun's
own variables.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from orchestrator import backends, modes, protocol
from orchestrator import site as sitemod
from orchestrator.errors import UserError
from orchestrator.plan.resolved import ResolvedRun
from orchestrator.plan.sweep import SweepSpec, expand
from orchestrator.protocol import rank_logs, read_rank_log
from orchestrator.rankside import binding as bnd
from orchestrator.render import render_run
from orchestrator.runs.verdict import first_failure
from orchestrator.site import Container, load

from .conftest import check_golden, orch, rendered, run_orch

TORCH_MODES = ("torch-ddp", "torch-fsdp")
ITERS, WARMUP = 4, 1


# --- rendered (fast) -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", TORCH_MODES)
def test_golden_gpu_partition(mode):
    run, r = rendered("example-gpu-cluster", "gpu-ib", mode, launcher="torchrun")
    assert run.launcher == "torchrun"
    check_golden(f"{mode}.example-gpu-cluster.gpu-ib.torchrun.job.sbatch", r.job_script)
    check_golden(f"{mode}.example-gpu-cluster.gpu-ib.torchrun.launch.sh", r.launch_script)


def test_one_agent_per_node_starts_the_nodes_ranks():
    """On a GPU partition torchrun starts one rank per GPU (the run's tasks per node, which
    the partition's GPUs make), from one srun task per node, rendezvous named by the job."""
    run, r = rendered("example-gpu-cluster", "gpu-ib", "torch-ddp", launcher="torchrun")
    gpus = load("example-gpu-cluster")[0].partition("gpu-ib").gpus_per_node
    assert run.tasks_per_node == gpus
    job = r.job_script
    assert f"--nnodes=2 --nproc-per-node={gpus}" in job
    assert '--rdzv-backend=c10d --rdzv-endpoint="$MASTER_ADDR:$MASTER_PORT" ' \
           '--rdzv-id="$rdzv_id"' in job
    assert 'rdzv_id="$SLURM_JOB_ID"' in job
    assert "srun --nodes=2 --ntasks-per-node=1 " in job
    # The ranks take their place from torchrun's variables, not from srun's task ones.
    assert 'ORCH_TASK_ID="${RANK:?' in r.launch_script
    assert 'NODE_RANK="$GROUP_RANK"' in r.launch_script
    assert "${SLURM_PROCID" not in r.launch_script and "SLURM_LOCALID" not in r.launch_script


def test_local_site_starts_one_agent_per_virtual_node(local):
    run = expand(SweepSpec(nodes=(2,), tasks_per_node=(2,), modes=("torch-ddp",),
                           launcher="torchrun"), local)[0]
    assert run.launcher == "torchrun" and run.ranks == 4
    _, r = rendered("local", "local", "torch-ddp", tasks_per_node=(2,), launcher="torchrun")
    assert "for ((node = 0; node < 2; node++))" in r.job_script
    assert "--nnodes=2 --nproc-per-node=2" in r.job_script
    assert "srun --" not in r.job_script


def test_local_site_golden_pins_each_agent_to_its_nodes_block():
    """On the local site each agent runs under taskset on its virtual node's block of cores,
    as the local launcher places a node's tasks (its ranks inherit the agent's cores)."""
    _, r = rendered("local", "local", "torch-ddp", tasks_per_node=(2,), launcher="torchrun")
    check_golden("torch-ddp.local.local.torchrun.job.sbatch", r.job_script)
    assert "task_nodes=(0 0 1 1)" in r.job_script
    assert 'start=(taskset -c "${node_cpus[node]}" "${start[@]}")' in r.job_script


def test_agent_srun_line_takes_the_partitions_cpu_bind_only(monkeypatch):
    """The agent's srun line binds its CPUs as the partition says (its ranks inherit them); the
    GPU binding, one task a rank, stays off it (each rank takes its GPU by LOCAL_RANK)."""
    site = load("example-gpu-cluster")[0]
    parts = [p.model_copy(update={"gpus_per_task": "1", "gpu_bind": "closest",
                                  "cpu_bind": "verbose,cores"}) for p in site.partitions]
    site = site.model_copy(update={"partitions": parts})
    monkeypatch.setattr("orchestrator.site.load", lambda name, *a, **k: (site, None))
    _, r = rendered("example-gpu-cluster", "gpu-ib", "torch-ddp", launcher="torchrun")
    (line,) = [ln for ln in r.job_script.splitlines() if ln.startswith("srun ")]
    assert line.endswith("--ntasks-per-node=1 --cpus-per-task=\"$SLURM_CPUS_ON_NODE\" "
                         "--cpu-bind=verbose,cores --kill-on-bad-exit=1 \\"), line
    assert "--gpu-bind" not in r.job_script and "--gpus-per-task" not in r.job_script


def test_a_cpu_list_binding_is_refused_for_per_node_agents(tmp_path):
    """map_cpu: names a CPU per task; torchrun's one task a node would pin every rank of the
    node to the first: one located line, exit 2."""
    text = (sitemod.site_dir() / "example-gpu-cluster.yaml").read_text()
    path = tmp_path / "gpus.yaml"
    path.write_text(text.replace("name: example-gpu-cluster", "name: gpus").replace(
        "    # cpu_bind: cores", "    cpu_bind: map_cpu:0,16", 1))
    args = ("sweep", "--site", path, "--partition", "gpu-ib", "--mode", "torch-ddp",
            "--dry-run", "--out", tmp_path / "x")
    code, _, err = orch(*args, "--launcher", "torchrun")
    assert code == 2, err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"orch: error: {path}:") and "].cpu_bind: map_cpu:0,16 lists CPUs " \
        "task by task, but launcher 'torchrun'" in line, line
    code, _, err = orch(*args, "--launcher", "srun")  # one task a rank: the list is right
    assert code == 0, err


@pytest.mark.parametrize(("exits", "want"), [
    (["exit 3", "exit 1"], (1, "exited with status 3")),
    (["kill -KILL $$", "exit 1"], (1, "killed by SIGKILL")),
    (["exit 0"], None),
])
def test_the_first_rank_to_fail_records_itself(tmp_path, exits, want):
    """The rank command the agents start (rendered) runs launch.sh and, where it exits non-zero
    and no rank has yet, writes ranks/first-failure: here rank 1 fails first, rank 0 after it
    (stopped by torchrun, say), and the verdict names rank 1."""
    import subprocess

    _, r = rendered("local", "local", "torch-ddp", tasks_per_node=(2,), launcher="torchrun")
    lines = r.job_script.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("rank_command=("))
    end = next(i for i in range(start, len(lines)) if lines[i].endswith(")"))
    (tmp_path / "ranks").mkdir()
    for rank, body in zip((1, 0), exits, strict=False):
        (tmp_path / "launch.sh").write_text(body + "\n")
        script = "\n".join([*lines[start:end + 1], '"${rank_command[@]}"'])
        subprocess.run(["bash", "-c", script], env={"PATH": "/usr/bin:/bin", "RANK": str(rank),
                                                    "RUN_DIR": str(tmp_path)})
    assert first_failure(tmp_path, 2) == want


def test_in_a_container_the_ranks_run_the_images_python(local):
    """torchrun runs in the container (ORCH_PYTHON is its wrapper); the ranks it starts are
    in it already, so they run the image's Python, and find their run directory by its path
    (the container passes no RUN_DIR). Checked for real by hand: a local charliecloud sweep
    of 2 nodes x 2 ranks completed, every rank's header naming the image."""
    env = local.environments["torch"].model_copy(update={"container": Container(
        image="/images/torch", runtime="charliecloud")})
    site = local.model_copy(update={"environments": {**local.environments, "torch": env}})
    run = expand(SweepSpec(nodes=(2,), modes=("torch-ddp",), launcher="torchrun"), site)[0]
    rdir = Path("/scratch/runs") / run.run_id
    r = render_run(ResolvedRun(run, site, site.partition("local"), env, modes.get(run.mode)),
                   rdir, Path("/scratch/runs/.orch/lib-0123456789ab"))
    python = env.container.python
    assert f"rank_command=(env ORCH_PYTHON={python} bash -c 'bash \"$1/launch.sh\" " in r.job_script
    assert f"exit \"$status\"' rank {rdir})" in r.job_script  # its launch.sh, by path
    assert 'export ORCH_PYTHON="$RUN_DIR/container-python"' in r.job_script
    assert f"exec >{rdir}/ranks/rank-" in r.launch_script and "$RUN_DIR" not in \
        r.launch_script


def test_registered_like_the_other_launchers():
    assert backends.launcher("torchrun").per_node
    assert "torchrun" in backends.scheduler("slurm").launchers
    assert "torchrun" in backends.scheduler("local").launchers
    users = sorted(m.name for m in modes.registry().values() if "torchrun" in m.launchers)
    assert users == sorted([*TORCH_MODES, "trainer"])  # a user's torchrun-style script too


@pytest.mark.parametrize("mode", ["tf-allreduce", "mxnet-kvstore", "mpi-ssgd", "horovod",
                                  "cntk"])
def test_refused_for_modes_that_are_not_torchs_own(tmp_path, mode):
    """One line, exit 2, nothing written: the modes that are not torch (and the MPI modes,
    whose ranks are an MPI world that torchrun does not make)."""
    code, _, err = orch("sweep", "--mode", mode, "--launcher", "torchrun", "--dry-run",
                        "--out", tmp_path / "x")
    assert code == 2
    assert f"--launcher torchrun: mode '{mode}' runs with" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "x").exists()


def test_a_partitions_torchrun_default_leaves_other_modes_their_own(local):
    """A partition whose default launcher is torchrun: torch modes take it, the others their
    own first launcher, the way every launcher is chosen (sweep._launcher)."""
    part = local.partitions[0].model_copy(update={"launcher": "torchrun"})
    site = local.model_copy(update={"partitions": [part]})
    runs = {r.mode: r.launcher for r in expand(
        SweepSpec(nodes=(1,), modes=("torch-ddp", "torch-fsdp", "tf-allreduce")), site)}
    assert runs == {"torch-ddp": "torchrun", "torch-fsdp": "torchrun", "tf-allreduce": "local"}


def test_unknown_launcher_lists_torchrun(local):
    with pytest.raises(UserError, match="valid: srun, mpirun, local, torchrun"):
        expand(SweepSpec(nodes=(1,), modes=("torch-ddp",), launcher="nope"), local)


# --- real runs (CPU, Gloo) -------------------------------------------------------------------


def _sweep(out, *extra):
    return run_orch("sweep", "--mode", "torch-ddp", "--model", "lenet5", "--iters", ITERS,
                    "--warmup", WARMUP, "--out", out, *extra, check=True, timeout=600)


def _tables(out):
    return (pd.read_parquet(out / "results" / "runs.parquet"),
            pd.read_parquet(out / "results" / "iterations.parquet"))


def _assert_same_shape(torchrun_out, srun_out, ranks):
    (runs_t, iters_t), (runs_s, iters_s) = _tables(torchrun_out), _tables(srun_out)
    assert list(runs_t.columns) == list(runs_s.columns)
    assert list(iters_t.columns) == list(iters_s.columns)
    assert runs_t["launcher"].tolist() == ["torchrun"]
    assert runs_t["state"].tolist() == runs_s["state"].tolist() == ["COMPLETED"]
    assert sorted(iters_t["rank"].unique()) == sorted(iters_s["rank"].unique()) == \
        list(range(ranks))
    # The same iterations of every rank (in each of the run's windows).
    shape = ["rank", "node_rank", "window", "iter", "warmup_iter"]
    assert iters_t[shape].sort_values(shape).values.tolist() == \
        iters_s[shape].sort_values(shape).values.tolist()
    # What a run's result set says is missing is missing from both alike.
    nulls = [c for c in runs_t.columns if runs_t[c].isna().iloc[0] != runs_s[c].isna().iloc[0]]
    assert nulls == []


def _assert_ranks_placed_by_torchrun(out, nodes, per_node):
    rdir = next(p for p in out.iterdir() if (p / "ranks").is_dir())
    logs = [read_rank_log(path) for _, path in rank_logs(rdir / "ranks")]
    places = sorted((log.header["rank"], log.header["local_rank"], log.header["node_rank"],
                     log.header["world_size"]) for log in logs)
    assert places == [(k, k % per_node, k // per_node, nodes * per_node)
                      for k in range(nodes * per_node)]
    for log in logs:  # where each rank started by torchrun was bound (test_binding.py)
        binding = log.header[protocol.BINDING]
        assert bnd.parse_cpulist(binding["cpu_affinity"]) and "numa_nodes" in binding
        assert (binding["gpu_index"] is None) == bool(binding["gpu_reason"])  # a GPU or why
    for node in range(nodes):  # each agent's own output, beside its ranks' outputs
        assert (rdir / "ranks" / f"torchrun-{node}.out").is_file()
    for k in range(nodes * per_node):
        assert (rdir / "ranks" / f"rank-{k}.out").is_file()


@pytest.mark.ranks
def test_local_torchrun_run_is_shaped_like_a_local_launcher_one(tmp_path):
    size = ("--nodes", "2", "--tasks-per-node", "2")
    _sweep(tmp_path / "torchrun", *size, "--launcher", "torchrun")
    _sweep(tmp_path / "local", *size, "--launcher", "local")
    _assert_same_shape(tmp_path / "torchrun", tmp_path / "local", ranks=4)
    _assert_ranks_placed_by_torchrun(tmp_path / "torchrun", nodes=2, per_node=2)


@pytest.mark.slurm
@pytest.mark.ranks
def test_cluster_torchrun_run_is_shaped_like_an_srun_one(slurm_cluster, tmp_path):
    size = ("--site", slurm_cluster, "--partition", "eth", "--nodes", "2")
    _sweep(tmp_path / "torchrun", *size, "--launcher", "torchrun")
    _sweep(tmp_path / "srun", *size, "--launcher", "srun")
    _assert_same_shape(tmp_path / "torchrun", tmp_path / "srun", ranks=2)
    _assert_ranks_placed_by_torchrun(tmp_path / "torchrun", nodes=2, per_node=1)
    recs = json.loads(run_orch("results", tmp_path / "torchrun", "--format", "json",
                               check=True).stdout)
    assert recs[0]["distinct_hosts"] == 2  # one agent on each of two nodes


@pytest.mark.parametrize(("srun_cpus", "want"), [("1", "4"), ("", "64")])
def test_a_packed_agent_takes_one_cpu_per_rank_where_the_pack_shares_nodes(srun_cpus, want):
    """Under --pack-shared (SRUN_CPUS_PER_TASK=1: a CPU a rank) the agent asks for one CPU per
    rank it starts, not the whole node other runs of the pack share; else the node's CPUs."""
    import subprocess

    site = load("example-gpu-cluster")[0]
    run = expand(SweepSpec(nodes=(2,), modes=("torch-ddp",), partitions=("gpu-ib",),
                           launcher="torchrun"), site)[0]
    env = site.environment(run.framework).model_copy(update={"python": "/opt/venv/bin/python"})
    r = render_run(ResolvedRun(run, site, site.partition("gpu-ib"), env, modes.get(run.mode)),
                   Path("/scratch/runs") / run.run_id, Path("/scratch/runs/.orch/lib-0"),
                   packed=True)
    lines = r.job_script.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("agent_cpus="))
    script = "\n".join([*lines[start:start + 2], 'echo "$agent_cpus"'])
    env_vars = {"PATH": "/usr/bin:/bin", "SLURM_CPUS_ON_NODE": "64"}
    if srun_cpus:
        env_vars["SRUN_CPUS_PER_TASK"] = srun_cpus
    out = subprocess.run(["bash", "-c", script], env=env_vars, capture_output=True, text=True)
    assert out.stdout.strip() == want, out.stderr
    assert '--cpus-per-task="$agent_cpus"' in r.job_script
