"""Rendering: golden files for every mode x interconnect, shell syntax, shell quoting.

The GPU/NCCL and InfiniBand paths cannot run on this machine: these golden files (and the
real ``sbatch --test-only`` in test_slurm.py) are how they are tested.
Regenerate after an intended change: ``ORCH_UPDATE_GOLDEN=1 pytest tests/test_render.py``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from orchestrator import modes
from orchestrator import site as sitemod
from orchestrator.render import render_run, transport_env
from orchestrator.spec.resolved import ResolvedRun
from orchestrator.sweep import SweepSpec, expand

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("ORCH_UPDATE_GOLDEN") == "1"

# (site, partition): every interconnect, CPU and GPU, local and Slurm.
TARGETS = [("local", "local"), ("testcluster", "ib"), ("testcluster", "eth"),
           ("example-gpu-cluster", "gpu-ib"), ("example-gpu-cluster", "gpu-eth")]


def rendered(site_name, partition, mode, nodes=2, **spec):
    site = sitemod.load(site_name)[0]
    run = expand(SweepSpec(nodes=(nodes,), modes=(mode,), partitions=(partition,), **spec),
                 site)[0]
    part = site.partition(partition)
    env = site.environment(run.framework)
    # A fixed interpreter path keeps the golden files machine-independent.
    env = env.model_copy(update={"python": env.python or "/opt/orch/venv/bin/python"})
    return run, render_run(ResolvedRun(run, site, part, env, modes.get(run.mode)),
                           Path("/scratch/runs") / run.run_id,
                           Path("/scratch/runs/.orch/lib-0123456789ab"))


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; run with ORCH_UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} differs from its golden file"


@pytest.mark.parametrize("mode", sorted(modes.registry()))
@pytest.mark.parametrize(("site_name", "partition"), TARGETS)
def test_golden(site_name, partition, mode):
    _, r = rendered(site_name, partition, mode)
    stem = f"{mode}.{site_name}.{partition}"
    check_golden(f"{stem}.job.sbatch", r.job_script)
    check_golden(f"{stem}.launch.sh", r.launch_script)


@pytest.mark.parametrize("mode", sorted(modes.registry()))
@pytest.mark.parametrize(("site_name", "partition"), TARGETS)
def test_scripts_are_valid_bash(tmp_path, site_name, partition, mode):
    _, r = rendered(site_name, partition, mode)
    for name, text in (("job.sbatch", r.job_script), ("launch.sh", r.launch_script)):
        path = tmp_path / name
        path.write_text(text)
        proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{name}: {proc.stderr}"
        assert text.startswith("#!/bin/bash\n")
        assert "set -euo pipefail" in text


def test_gpu_partition_uses_nccl_and_requests_gpus():
    run, r = rendered("example-gpu-cluster", "gpu-ib", "torch-ddp")
    assert run.options["backend"] == "nccl"
    assert "#SBATCH --gpus-per-node=4" in r.job_script
    assert "#SBATCH --account=dl-benchmarks" in r.job_script
    assert "#SBATCH --exclusive" in r.job_script
    assert "module load cuda/12.4" in r.job_script
    assert "--backend nccl" in r.launch_script


def test_interconnect_decides_transport():
    site = sitemod.load("example-gpu-cluster")[0]
    ib = dict(transport_env(site.partition("gpu-ib")))
    eth = dict(transport_env(site.partition("gpu-eth")))
    assert ib["NCCL_IB_DISABLE"] == "0" and ib["NCCL_IB_HCA"] == "mlx5_0,mlx5_1"
    assert ib["NCCL_SOCKET_IFNAME"] == ib["GLOO_SOCKET_IFNAME"] == "ib0"
    assert ib["OMPI_MCA_pml"] == "ucx"
    assert eth["NCCL_IB_DISABLE"] == "1" and "NCCL_IB_HCA" not in eth
    assert eth["OMPI_MCA_btl_tcp_if_include"] == "eth0"
    # A partition's own env overrides the defaults (the test cluster has no UCX).
    tc = dict(transport_env(sitemod.load("testcluster")[0].partition("ib")))
    assert tc["OMPI_MCA_pml"] == "ob1" and tc["NCCL_IB_DISABLE"] == "0"


def test_values_reaching_the_shell_are_quoted(tmp_path):
    site = sitemod.load("local")[0]
    hostile = f"$(touch {tmp_path}/pwned); `touch {tmp_path}/pwned2`; 'quote\" "
    env = site.environment("torch").model_copy(update={"env": {"EVIL": hostile},
                                                       "python": "/bin/echo"})
    run = expand(SweepSpec(nodes=(1,)), site)[0]
    r = render_run(ResolvedRun(run, site, site.partition(None), env, modes.get(run.mode)),
                   tmp_path / "run dir; rm -rf x", tmp_path / "lib")
    script = tmp_path / "check.sh"
    # Evaluate only the export lines: a quoting bug would create the files.
    exports = [ln for ln in r.job_script.splitlines() if ln.startswith("export EVIL=")]
    script.write_text("\n".join(exports) + '\nprintf %s "$EVIL"\n')
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert out.stdout == hostile
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()
    assert "RUN_DIR='" in r.job_script


def sbatch_option_record() -> dict[str, list[list]]:
    """The sbatch options of a few runs (their job script, their submission by submitit, a
    retry kept off two nodes), packs and an array: every kind of job orch asks Slurm for."""
    from orchestrator.backends.slurm import pack
    from orchestrator.backends.slurm.options import sbatch_options
    from orchestrator.render import slurm_job
    from orchestrator.rundir import JobRecord, Prepared

    out = Path("/scratch/runs")
    record = {}
    for site_name, partition, mode, spec in [
            ("testcluster", "ib", "torch-ddp", {}),
            ("testcluster", "ib", "tf-ps", {"tasks_per_node": (2,)}),
            ("example-gpu-cluster", "gpu-ib", "torch-ddp", {})]:
        site = sitemod.load(site_name)[0]
        run = expand(SweepSpec(nodes=(2,), modes=(mode,), partitions=(partition,), **spec),
                     site)[0]
        part, job = site.partition(partition), slurm_job(run, out / run.run_id)
        stem = f"run {mode} {site_name} {partition}" + (" 2 per node" if spec else "")
        record[f"{stem}: job script"] = sbatch_options(job, part)
        record[f"{stem}: submitted"] = sbatch_options(job, part, via="submitit")
        record[f"{stem}: retried, kept off n1 and n2"] = sbatch_options(
            job.model_copy(update={"exclude": ("n1", "n2")}), part, via="submitit")
    site = sitemod.load("testcluster")[0]
    for kind, nodes, repeats, spec in [
            ("pack", (1, 2, 4), 1, {}), ("pack-shared", (1, 2), 1, {}), ("array", (1,), 2, {}),
            ("pack", (1, 2), 1, {"modes": ("tf-ps",), "tasks_per_node": (2,)})]:
        runs = expand(SweepSpec(nodes=nodes, repeats=repeats, iters=3, warmup=1, **spec), site)
        prepared = [Prepared(r, out / r.run_id, JobRecord(run_id=r.run_id, scheduler="slurm"),
                             "submit") for r in runs]
        group = pack.groups(prepared, site, kind)[0]
        name = f"{group.kind}-1-ib-000000"
        what = " tf-ps 2 per node" if spec else ""
        key = f"{kind}{what} of nodes {','.join(map(str, nodes))} x{repeats} on testcluster ib"
        record[key] = pack.pack_options(group, site, out / "packs" / name, name)
    return {k: [[o, v] for o, v in opts.items()] for k, opts in record.items()}


def test_sbatch_options_golden():
    """Every sbatch option of a run, a pack and an array, in #SBATCH order, from the one
    options function (backends/slurm/options.py)."""
    import json

    check_golden("sbatch-options.json", json.dumps(sbatch_option_record(), indent=1) + "\n")
