"""Against the real 4-node test Slurm cluster (scripts/testcluster up): sweeps, failures,
cancel, status/gather from another process, and every rendered script through sbatch.

Under CI=true these run (a missing cluster fails them); elsewhere they skip without one.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from orchestrator import modes
from orchestrator import site as sitemod
from orchestrator.plan.resolved import ResolvedRun
from orchestrator.plan.sweep import SweepSpec, expand
from orchestrator.render import render_run

from .conftest import (
    frozen_rank,
    model_of,
    processes_matching,
    results,
    run_orch,
    wait_processes_gone,
    wait_until,
)

pytestmark = [pytest.mark.slurm, pytest.mark.ranks]
ITERS, WARMUP = 6, 2


@pytest.fixture(scope="module")
def torch_cluster_sweep(slurm_cluster, tmp_path_factory):
    out = tmp_path_factory.mktemp("slurm-sweep")
    proc = run_orch("sweep", "--site", slurm_cluster, "--nodes", "1,2,4", "--partition",
                    "ib,eth", "--iters", ITERS, "--warmup", WARMUP, "--out", out, check=True)
    return out, proc


def test_sweep_runs_each_job_on_its_nodes(torch_cluster_sweep):
    out, _ = torch_cluster_sweep
    recs = results(out)
    assert len(recs) == 6
    assert {(r["partition"], r["interconnect"]) for r in recs} == {("ib", "infiniband"),
                                                                   ("eth", "ethernet")}
    for r in recs:
        assert r["state"] == "COMPLETED", r["reason"]
        assert r["site"] == "testcluster" and r["launcher"] == "srun"
        assert r["job_id"] and r["samples_per_s"] > 0 and r["iterations_measured"] == ITERS
        hosts = r["hosts"].split(",")
        assert len(hosts) == r["nodes"] == r["distinct_hosts"]
        assert all(h.startswith("node") for h in hosts)
        assert r["checksums_agree"] is True
        assert r["speedup"] is not None and r["efficiency"] is not None
        assert r["comm_tail_bytes"] == 248_024  # LeNet-5's gradient: one DDP bucket, all of it


def test_interconnect_reaches_the_ranks(torch_cluster_sweep):
    out, _ = torch_cluster_sweep
    for rdir in (p for p in out.iterdir() if (p / "run.json").exists()):
        run = json.loads((rdir / "run.json").read_text())
        header = json.loads((rdir / "ranks" / "rank-0.jsonl").read_text().splitlines()[0])
        env = header["env"]
        expected = "0" if run["interconnect"] == "infiniband" else "1"
        assert env["NCCL_IB_DISABLE"] == expected
        # each test-cluster node's own interface of the partition's fabric
        assert env["GLOO_SOCKET_IFNAME"] == ("ib0" if run["interconnect"] == "infiniband"
                                             else "eth0")
        assert env["SLURM_JOB_ID"] == json.loads((rdir / "job.json").read_text())["job_id"]
        assert (rdir / f"slurm-{env['SLURM_JOB_ID']}.out").is_file()


def test_preflight_measures_across_each_node_count_it_predicts(torch_cluster_sweep):
    """A sweep over 1, 2 and 4 nodes measures each partition across 4 nodes (the compute
    probe with it) and again across 2, and prices each run on the fit of its own count."""
    from orchestrator.execute import ledger, preflight

    out, _ = torch_cluster_sweep
    networks = preflight.load_sweep(out)
    for part in ("ib", "eth"):
        pf = networks[part]
        assert (pf.inter.nodes, sorted(pf.inter_at)) == (4, [2])
        two = pf.inter_at[2]
        assert (two.nodes, two.tasks_per_node, two.probe) == (2, 1, None)
        assert two.bandwidth > 0 and two.run_id != pf.inter.run_id
        assert pf.across(False, 2) == two and pf.across(False, 4) == pf.inter
    priced = {(r["partition"], r["nodes"]): r["network"]["inter"]
              for r in ledger.load(out / ledger.FILE)}
    assert {k: v["nodes"] for k, v in priced.items()} == {
        (p, n): n for p in ("ib", "eth") for n in (2, 4)}


def test_rerun_submits_nothing(torch_cluster_sweep, slurm_cluster):
    out, _ = torch_cluster_sweep
    proc = run_orch("sweep", "--site", slurm_cluster, "--nodes", "1,2,4", "--partition",
                    "ib,eth", "--iters", ITERS, "--warmup", WARMUP, "--out", out, check=True)
    assert "6 already finished, 0 to submit" in proc.stderr


def test_failed_rank_fails_its_run_only(slurm_cluster, tmp_path):
    out = tmp_path / "fail"
    proc = run_orch("sweep", "--site", slurm_cluster, "--nodes", "1,2", "--iters", 4,
                    "--warmup", 1, "--inject-failure", "1@2", "--out", out)
    assert proc.returncode == 1
    recs = {r["nodes"]: r for r in results(out)}
    assert recs[1]["state"] == "COMPLETED"  # there is no rank 1 to fail in a 1-rank run
    assert recs[2]["state"] == "FAILED"
    assert "rank 1: " in recs[2]["reason"]
    assert "injected failure on rank 1 at iter 2" in recs[2]["reason"]


def test_no_wait_then_status_gather_and_cancel(slurm_cluster, tmp_path):
    # Rank 1 freezes itself at iteration 2 (rank 0 then waits for it in the all-reduce): the
    # run is RUNNING until cancelled, however fast the machine (a run of many iterations is
    # only long on a slow one).
    out = tmp_path / "cancel"
    run_orch("sweep", "--site", slurm_cluster, "--nodes", "2", "--iters", 100000, "--warmup",
             1, "--inject-failure", "1@2:stop", "--out", out, "--no-wait", check=True)
    rdir = next(p for p in out.iterdir() if (p / "run.json").exists())
    # Another process, later: status follows the job until it is running.
    status = ""

    def running():
        nonlocal status
        status = run_orch("status", out, check=True).stdout
        return "RUNNING" in status and frozen_rank(out, 1)

    wait_until(lambda: f"the run to freeze while RUNNING; status:\n{status}", running,
               timeout=600, every=1)
    assert "RUNNING" in status
    cancelled = run_orch("cancel", out, check=True)
    assert "cancelled 1 run(s)" in cancelled.stderr
    rec = results(out)[0]
    assert rec["state"] == "CANCELLED"
    # Slurm signals, waits KillWait (5 s here), then kills; the job script's group gets orch's
    # own SIGTERM, grace and SIGKILL: nothing of the job may outlive that.
    wait_processes_gone(rdir.name)
    assert processes_matching(rdir.name) == []
    merged = run_orch("gather", out, check=True)
    assert "merged 1 run(s)" in merged.stderr
    assert (out / "results" / "runs.parquet").is_file()


@pytest.mark.parametrize("mode", sorted(modes.registry()))
@pytest.mark.parametrize("partition", ["ib", "eth"])
def test_rendered_scripts_pass_sbatch_test_only(slurm_cluster, tmp_path, mode, partition):
    site = sitemod.load(slurm_cluster)[0]
    spec = model_of(mode, {"nodes": (1, 4), "modes": (mode,), "partitions": (partition,)})
    for run in expand(SweepSpec(**spec), site):
        rendered = render_run(ResolvedRun.of(run, site), tmp_path / run.run_id,
                              tmp_path / "lib")
        (tmp_path / run.run_id).mkdir()
        script = tmp_path / run.run_id / "job.sbatch"
        script.write_text(rendered.job_script)
        proc = subprocess.run(["sbatch", "--test-only", str(script)], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert "to start at" in proc.stderr


def test_unreachable_scheduler_submits_nothing(slurm_cluster, tmp_path):
    out = tmp_path / "unreachable"
    proc = run_orch("sweep", "--site", slurm_cluster, "--nodes", "1", "--out", out,
                    env={"SLURM_CONF": str(tmp_path / "no-such-slurm.conf")})
    assert proc.returncode == 2
    assert "Slurm is not reachable" in proc.stderr
    assert not list(out.glob("*/job.json")) or all(
        json.loads(p.read_text())["job_id"] is None for p in out.glob("*/job.json"))


def test_partition_unknown_to_slurm(slurm_cluster, tmp_path):
    text = sitemod.resolve(slurm_cluster).read_text().replace("name: eth", "name: gpu")
    site_file = tmp_path / "renamed.yaml"
    site_file.write_text(text)
    proc = run_orch("sweep", "--site", site_file, "--partition", "gpu", "--nodes", "1",
                    "--out", tmp_path / "x")
    assert proc.returncode == 2
    assert "Slurm has no partition 'gpu'" in proc.stderr


def test_reused_job_id_is_not_mistaken_for_the_run(torch_cluster_sweep, tmp_path):
    """After a cluster reset job ids restart: a ledger entry must not adopt another job."""
    out, _ = torch_cluster_sweep
    src = next(p for p in Path(out).iterdir() if (p / "run.json").exists())
    other = subprocess.run(["sbatch", "--parsable", "-J", "someone-else", "--wrap", "sleep 30"],
                           capture_output=True, text=True, check=True).stdout.strip()
    try:
        copy = tmp_path / "stale" / src.name
        copy.mkdir(parents=True)
        (copy / "run.json").write_text((src / "run.json").read_text())
        record = json.loads((src / "job.json").read_text())
        record.update(state="RUNNING", job_id=other.split(";")[0], reason=None, ended_at=None)
        (copy / "job.json").write_text(json.dumps(record))
        status = run_orch("status", copy.parent, check=True).stdout
        assert "FAILED" in status
        rec = json.loads((copy / "job.json").read_text())
        assert rec["state"] == "FAILED" and "someone-else" in rec["reason"]
    finally:
        subprocess.run(["scancel", other], check=False)


def test_time_limit_gives_timeout_not_failed(slurm_cluster, tmp_path):
    """A run that exceeds its limit ends TIMEOUT, cleanly; submitit's default early warning
    signal (USR2 90 s before the limit, to every task) would have killed the ranks first."""
    out = tmp_path / "timeout"
    proc = run_orch("sweep", "--site", slurm_cluster, "--nodes", "1", "--iters", 10**7,
                    "--warmup", 0, "--time-limit", 1, "--out", out, timeout=300)
    assert proc.returncode == 1
    rec = results(out)[0]
    assert rec["state"] == "TIMEOUT", rec["reason"]
    rdir = out / rec["run_id"]
    script = next((rdir / "submitit").glob("*_submission.sh")).read_text()
    assert "#SBATCH --signal=B:URG@90" in script
    wait_processes_gone(rdir.name)  # nothing of the job outlives it
    assert processes_matching(rdir.name) == []


@pytest.mark.slurm
def test_slurm_jobs_are_not_requeued(slurm_cluster, tmp_path):
    out = tmp_path / "nq"
    run_orch("sweep", "--site", slurm_cluster, "--nodes", "1", "--iters", "100000",
             "--warmup", "1", "--out", out, "--no-wait", check=True)
    rdir = next(p for p in out.iterdir() if (p / "run.json").exists())
    job = json.loads((rdir / "job.json").read_text())["job_id"]
    try:
        shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True,
                               text=True, timeout=30).stdout
        assert "Requeue=0" in shown, shown
    finally:
        run_orch("cancel", out)


# --- Slurm's time limits, read in one place (backends/slurm/timelimit.py) --------------------

@pytest.mark.parametrize(("text", "seconds"), [
    ("30", 1800),                 # minutes
    ("30:15", 1815),              # minutes:seconds
    ("2:00:01", 7201),            # hours:minutes:seconds
    ("1-12", 129600),             # days-hours: a day and a half, not a day and 12 minutes
    ("1-12:30", 131400),          # days-hours:minutes
    ("2-01:00:05", 176405),       # days-hours:minutes:seconds
    ("UNLIMITED", None), ("infinite", None),
])
def test_every_slurm_time_format(text, seconds):
    from orchestrator.backends.slurm import timelimit
    from orchestrator.site.detect import minutes_of

    assert timelimit.seconds(text) == seconds
    expect = None if seconds is None else -(-seconds // 60)
    assert timelimit.minutes(text) == expect
    assert minutes_of(text) == expect  # orch site detect's MaxTime reads the same


def test_a_time_that_is_none_of_slurms_forms_is_refused(tmp_path):
    from orchestrator.backends.slurm import timelimit

    for bad in ("1:2:3:4", "1-", "-5", "1.5", "30m", ""):
        with pytest.raises(ValueError, match="not a Slurm time"):
            timelimit.seconds(bad)
    from orchestrator.site.detect import minutes_of

    assert minutes_of("n/a") is None


@pytest.mark.parametrize(("text", "ok"), [
    ("90", True), ("30:59", True), ("30:60", False), ("2:59:59", True), ("2:60:00", False),
    ("1-30", True), ("1-12:59", True), ("1-12:60", False), ("1-12:30:60", False),
])
def test_a_site_time_keeps_minutes_and_seconds_to_the_clock(text, ok):
    """A site config's time: minutes and seconds 00-59 (the first field and D-H's hours are
    free), checked on the one parser's fields."""
    from orchestrator.backends.slurm import timelimit

    if ok:
        timelimit.check_fields(text)
    else:
        with pytest.raises(ValueError, match="00-59"):
            timelimit.check_fields(text)


# `scontrol -o show node` of two test-cluster nodes (slurmd 22.05 in network namespaces of
# this machine), trimmed to the fields same_kernel reads.
_SHOW_NODES = (
    "NodeName=node1 Arch=x86_64 NodeAddr=10.210.0.1 OS=Linux 6.18.44-fc-v669 #1 SMP "
    "PREEMPT_DYNAMIC @0 BootTime=2026-11-28T11:44:49 SlurmdStartTime=2026-11-28T15:52:06\n"
    "NodeName=node2 Arch=x86_64 NodeAddr=10.210.0.2 OS=Linux 6.18.44-fc-v669 #1 SMP "
    "PREEMPT_DYNAMIC @0 BootTime=2026-11-28T11:44:50 SlurmdStartTime=2026-11-28T15:52:06\n")


def test_nodes_sharing_this_kernel_are_this_machine():
    import datetime

    from orchestrator.backends.slurm.scheduler import same_kernel

    boot = datetime.datetime(2026, 11, 28, 11, 44, 49).timestamp()
    assert same_kernel(_SHOW_NODES, (int(boot), "6.18.44-fc-v669"))
    assert not same_kernel(_SHOW_NODES, (int(boot), "6.1.0-13-amd64"))  # another kernel
    assert not same_kernel(_SHOW_NODES, (int(boot) - 3600, "6.18.44-fc-v669"))  # booted apart
    assert not same_kernel("", (int(boot), "6.18.44-fc-v669"))


@pytest.mark.slurm
def test_test_cluster_nodes_are_this_machine_but_not_on_loopback(slurm_cluster):
    from orchestrator.backends.slurm import SlurmScheduler

    sched = SlurmScheduler()
    assert sched.nodes_are_this_machine("eth") and not sched.nodes_on_loopback("eth")
    assert not sched.nodes_are_this_machine("no-such-partition")
