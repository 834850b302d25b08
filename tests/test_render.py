"""Rendering: golden files for every mode x interconnect, shell syntax, shell quoting.

The GPU/NCCL and InfiniBand paths cannot run on this machine: these golden files (and the
real ``sbatch --test-only`` in test_slurm.py) are how they are tested.
Regenerate after an intended change: ``ORCH_UPDATE_GOLDEN=1 pytest tests/test_render.py``.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from orchestrator import modes
from orchestrator import site as sitemod
from orchestrator.plan.resolved import ResolvedRun
from orchestrator.plan.sweep import SweepSpec, expand
from orchestrator.render import render_run, transport_env

from .conftest import (
    check_golden,
    edit_container,
    edit_environment,
    edit_partition,
    edit_sbatch,
    orch,
    rendered,
    site_file,
)

# (site, partition): every interconnect, CPU and GPU, local and Slurm.
TARGETS = [("local", "local"), ("testcluster", "ib"), ("testcluster", "eth"),
           ("example-gpu-cluster", "gpu-ib"), ("example-gpu-cluster", "gpu-eth")]


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
    from orchestrator.backends.slurm.options import sbatch_options
    from orchestrator.execute import packs
    from orchestrator.render import run_job
    from orchestrator.runs.rundir import JobRecord, Prepared

    out = Path("/scratch/runs")
    record = {}
    for site_name, partition, mode, spec in [
            ("testcluster", "ib", "torch-ddp", {}),
            ("testcluster", "ib", "tf-ps", {"tasks_per_node": (2,)}),
            ("example-gpu-cluster", "gpu-ib", "torch-ddp", {})]:
        site = sitemod.load(site_name)[0]
        run = expand(SweepSpec(nodes=(2,), modes=(mode,), partitions=(partition,), **spec),
                     site)[0]
        part, job = site.partition(partition), run_job(run, out / run.run_id)
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
        group = packs.groups(prepared, site, kind)[0]
        name = f"{group.kind}-1-ib-000000"
        what = " tf-ps 2 per node" if spec else ""
        key = f"{kind}{what} of nodes {','.join(map(str, nodes))} x{repeats} on testcluster ib"
        record[key] = packs.pack_options(group, site, out / "packs" / name, name)
    return {k: [[o, v] for o, v in opts.items()] for k, opts in record.items()}


def test_sbatch_options_golden():
    """Every sbatch option of a run, a pack and an array, in #SBATCH order, from the one
    options function (backends/slurm/options.py)."""
    import json

    check_golden("sbatch-options.json", json.dumps(sbatch_option_record(), indent=1) + "\n")


# No value runs as shell: every payload, through every site-config field and CLI value that
# reaches a script, is refused or rendered inert; the rendered job script is run for real
# (ranks are /bin/true) and no marker file appears.

def payloads(mark: Path) -> list[str]:
    return [f"$(touch {mark})", f"`touch {mark}`", f";touch {mark}", f"x\ntouch {mark}",
            f"x'\";touch {mark};#", f"x\rtouch {mark}", f"x\x00touch {mark}"]


def _partname(value):
    def edit(d):
        d["partitions"][0]["name"] = value
        d["default_partition"] = value
    return edit


SITE_FIELDS = {
    "socket_ifname": lambda p: edit_partition("socket_ifname", p),
    "sbatch.account": lambda p: edit_sbatch("account", p),
    "sbatch.qos": lambda p: edit_sbatch("qos", p),
    "sbatch.constraint": lambda p: edit_sbatch("constraint", p),
    "sbatch.reservation": lambda p: edit_sbatch("reservation", p),
    "sbatch.extra value": lambda p: edit_sbatch("extra", [f"--comment={p}"]),
    "sbatch.extra name": lambda p: edit_sbatch("extra", [f"--{p}"]),
    "partition.env value": lambda p: edit_partition("env", {"X_VAL": p}),
    "partition.env key": lambda p: edit_partition("env", {p: "1"}),
    "partition name": _partname,
    "environment.env value": lambda p: edit_environment("env", {"Y_VAL": p}),
    "environment.env key": lambda p: edit_environment("env", {p: "1"}),
    "environment.modules": lambda p: edit_environment("modules", [p]),
    "container.image": lambda p: edit_container("image", p),
    "container.python": lambda p: edit_container("python", p),
    "container.binds": lambda p: edit_container("binds", [p]),
}


def run_rendered(stdout: str, tmp: Path) -> None:
    """Write the scripts a dry run printed where it says, and execute job.sbatch (and a
    container wrapper) for real."""
    parts = re.split(r"^# ===== (.+)\n", stdout, flags=re.M)
    written: dict[str, Path] = {}
    for name, text in zip(parts[1::2], parts[2::2], strict=True):
        path = Path(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written[path.name] = path
    job = written["job.sbatch"]
    env = {**os.environ, "SLURM_JOB_ID": "1"}
    subprocess.run(["bash", str(job)], cwd=job.parent, capture_output=True, timeout=60,
                   env=env)
    if "container-python" in written:
        subprocess.run(["bash", str(written["container-python"]), "-c", "pass"],
                       cwd=job.parent, capture_output=True, timeout=60, env=env)


def _assert_refused_or_inert(code: int, stdout: str, stderr: str, tmp: Path, mark: Path,
                             what: str) -> None:
    if code == 2:
        assert stderr.startswith("orch: error:"), (what, stderr)
    else:
        assert code == 0, (what, code, stderr)
        run_rendered(stdout, tmp)
    assert not mark.exists(), f"{what}: payload executed"


@pytest.mark.parametrize("field", sorted(SITE_FIELDS))
def test_site_field_payloads_never_execute(tmp_path, field):
    mark = tmp_path / "MARK"
    for i, payload in enumerate(payloads(mark)):
        case = tmp_path / f"c{i}"
        case.mkdir()
        site = site_file(case, SITE_FIELDS[field](payload))
        code, out, err = orch("sweep", "--site", site, "--nodes", "1", "--iters", "1",
                              "--warmup", "0", "--dry-run", "--out", case / "out")
        _assert_refused_or_inert(code, out, err, case, mark, f"{field} {payload!r}")
        if code == 2 and "\n" in payload:
            assert re.search(rf"{re.escape(str(site))}:\d+", err), err  # located


CLI_VALUES = {
    "--out": lambda case, p: ["--out", case / f"o{p}"],
    "--partition": lambda case, p: ["--partition", p, "--out", case / "out"],
    "--mode": lambda case, p: ["--mode", p, "--out", case / "out"],
    "--model": lambda case, p: ["--model", p, "--out", case / "out"],
    "--option": lambda case, p: ["--option", f"backend={p}", "--out", case / "out"],
    "--data": lambda case, p: ["--data", case / p, "--out", case / "out"],
    "--inject-failure": lambda case, p: ["--inject-failure", p, "--out", case / "out"],
    "--launcher": lambda case, p: ["--launcher", p, "--out", case / "out"],
}


@pytest.mark.parametrize("flag", sorted(CLI_VALUES))
def test_cli_value_payloads_never_execute(tmp_path, flag):
    mark = tmp_path / "MARK"
    site = site_file(tmp_path, lambda d: None)
    for i, payload in enumerate(payloads(mark)):
        case = tmp_path / f"c{i}"
        case.mkdir()
        code, out, err = orch("sweep", "--site", site, "--nodes", "1", "--iters", "1",
                              "--warmup", "0", "--dry-run", *CLI_VALUES[flag](case, payload))
        _assert_refused_or_inert(code, out, err, case, mark, f"{flag} {payload!r}")


def test_injection_harness_runs_the_rendered_job(tmp_path):
    """The harness really executes the job script: a payload in a quoted value is inert, but a
    run directory it made proves the script ran."""
    code, out, _ = orch("sweep", "--site", site_file(tmp_path, lambda d: None), "--nodes", "1",
                        "--dry-run", "--out", tmp_path / "out")
    assert code == 0
    run_rendered(out, tmp_path)
    assert list((tmp_path / "out").glob("*/ranks")), "job.sbatch did not run"
