"""Slurm as real sites run it: accounting off (sacct disabled or failing), MaxArraySize, srun
lines that say --cpus-per-task and the binding themselves, --gres=gpu:N instead of
--gpus-per-node, and state queries that do not grow with the sweep.

The fast tests run the scheduler's own queries against stand-ins of squeue/sacct/scontrol put
first on PATH (real processes that log their arguments, so calls are counted, never timed),
printing recorded outputs; each recording says where it comes from. The two slow ones sweep on
the real test cluster with such a stand-in in front of one real command, leaving the shared
cluster's configuration as it is.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
from pathlib import Path

import pytest

from orchestrator import protocol
from orchestrator import site as sitemod
from orchestrator.backends import Job
from orchestrator.backends.slurm import options
from orchestrator.backends.slurm import scheduler as slurm
from orchestrator.errors import UserError
from orchestrator.execute import packs
from orchestrator.plan.sweep import SweepSpec, expand
from orchestrator.runs.rundir import JobRecord, Prepared

from .conftest import check_golden, edit_partition, orch, rendered, run_orch, site_file

# sacct where AccountingStorageType=accounting_storage/none: this line on stderr, exit status 1
# (SchedMD/slurm, src/sacct/options.c at tag slurm-22-05-8-1, line 1046; the same words at
# line 946 of the 24.11 tree). A stand-in that logs its arguments, then answers exactly so.
SACCT_DISABLED = """#!/bin/sh
echo "$*" >>"$ORCH_TEST_LOG.sacct"
echo "Slurm accounting storage is disabled" >&2
exit 1
"""

# Slurm 22.05.8, the test cluster, recorded 2026-11-27 with orch's own squeue command (-r: one
# line per array task) for a plain job, a pending array of three tasks and a running one.
SQUEUE_22_05_R = """\
1801|torch-ddp-lenet5-ib-n1-r0-aaaaaaaa|RUNNING|node1
1817_0|array-1-ib-000000|PENDING|
1817_1|array-1-ib-000000|PENDING|
1817_2|array-1-ib-000000|RUNNING|node3
"""
# Slurm 22.05.8, the test cluster, recorded 2026-11-27: sacct -X -n -P -o
# JobID,JobName,State,NodeList of an array cancelled before any task started (one line for
# the range) and of a finished job.
SACCT_22_05_RANGE = """\
1817_[0-2]|wrap|CANCELLED by 0|None assigned
1790|torch-ddp-lenet5-ib-n2-r0-bbbbbbbb|COMPLETED|node[1-2]
"""
# Slurm 22.05.8, the test cluster: the first line and some lines of `scontrol show config`,
# recorded 2026-11-27.
SCONTROL_CONFIG_22_05 = """\
Configuration data as of 2026-11-27T05:21:02
AccountingStorageType   = accounting_storage/slurmdbd
MaxArraySize            = 1001
MaxJobCount             = 10000
MinJobAge               = 600 sec
SlurmctldParameters     = (null)
SLURM_VERSION           = 22.05.8
"""


def _tool(bindir: Path, name: str, text: str) -> None:
    path = bindir / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _printing(name: str, output: str, status: int = 0) -> str:
    """A stand-in that logs its arguments and prints ``output``."""
    return (f'#!/bin/sh\necho "$*" >>"$ORCH_TEST_LOG.{name}"\n'
            f"printf '%s' {shlex.quote(output)}\nexit {status}\n")


def _calls(log: Path, name: str) -> list[str]:
    path = Path(f"{log}.{name}")
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def fake_slurm(tmp_path, monkeypatch):
    """A bin directory first on PATH for stand-ins, the log prefix they write to, and this
    process's knowledge of accounting reset (it is learnt once per process)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "calls"
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("ORCH_TEST_LOG", str(log))
    monkeypatch.setattr(slurm._Accounting, "usable", True)
    monkeypatch.setattr(slurm._Accounting, "probed", False)
    return bindir, log


# --- parsing -------------------------------------------------------------------------------


def test_array_ranges_become_tasks_and_nodes_are_kept():
    seen = slurm.parse_jobs(SACCT_22_05_RANGE)
    assert set(seen) == {"1817_0", "1817_1", "1817_2", "1790"}
    assert slurm.slurm_state(seen["1817_1"].state)[0] == "CANCELLED"
    assert seen["1817_0"].nodes == "" and seen["1790"].nodes == "node[1-2]"
    assert slurm.parse_jobs("5_[0-3%2]|a|PENDING|\n6_[x]|b|PENDING|\n") == {
        f"5_{k}": slurm.Job("a", "PENDING") for k in range(4)}


def test_scontrol_config_gives_max_array_size(fake_slurm, monkeypatch):
    bindir, log = fake_slurm
    _tool(bindir, "scontrol", _printing("scontrol", SCONTROL_CONFIG_22_05))
    slurm.slurm_config.cache_clear()
    monkeypatch.setattr(slurm, "slurm_config", slurm.slurm_config)
    try:
        assert slurm.max_array_size() == 1001
        assert slurm.slurm_config()["MinJobAge"] == "600 sec"
        assert slurm.max_array_size() == 1001
        assert _calls(log, "scontrol") == ["show config"]  # once per process
    finally:
        slurm.slurm_config.cache_clear()


# --- one query per poll ----------------------------------------------------------------------


def _records(n: int) -> tuple[list[JobRecord], list[Path | None]]:
    """n plain runs, n array tasks (two arrays) and n packed runs (one allocation)."""
    recs = [JobRecord(run_id=f"run-{k}", scheduler="slurm", job_id=str(100 + k),
                      state="PENDING") for k in range(n)]
    recs += [JobRecord(run_id=f"arr-{k}", scheduler="slurm", job_id=f"{500 + k % 2}_{k}",
                       state="PENDING", pack=f"{protocol.ARRAY_PREFIX}{k % 2}-ib-x")
             for k in range(n)]
    recs += [JobRecord(run_id=f"pk-{k}", scheduler="slurm", job_id="700", state="PENDING",
                       pack=f"{protocol.PACK_PREFIX}1-ib-x") for k in range(n)]
    return recs, [None] * len(recs)


def _listing(recs: list[JobRecord], state: str) -> str:
    lines = {f"{r.job_id}|{r.pack or r.run_id}|{state}|node1" for r in recs}
    return "".join(f"{line}\n" for line in sorted(lines))


@pytest.mark.parametrize("n", [1, 40])
def test_one_squeue_per_poll_whatever_the_number_of_runs(fake_slurm, tmp_path, n):
    bindir, log = fake_slurm
    recs, _ = _records(n)
    dirs = []
    for r in recs:
        d = tmp_path / r.run_id
        (d).mkdir()
        dirs.append(d)
    _tool(bindir, "squeue", _printing("squeue", _listing(recs, "RUNNING")))
    _tool(bindir, "sacct", _printing("sacct", ""))
    sched = slurm.SlurmScheduler()
    for _ in range(3):
        states = sched.poll(recs, dirs)
        assert {s for s, _ in states.values()} == {"RUNNING", "PENDING"}  # packed: not started
    assert len(_calls(log, "squeue")) == 3
    asked = _calls(log, "squeue")[0].split("-j ")[1].split()[0].split(",")
    assert len(asked) == n + min(n, 2) + 1  # the jobs, each array once, the allocation
    assert _calls(log, "sacct") == []  # squeue knew every job
    assert sched.nodes(recs[:n]) == {r.run_id: ["node1"] for r in recs[:n]}
    assert len(_calls(log, "squeue")) == 3  # the nodes came with the poll


def test_squeue_that_cannot_answer_changes_no_state(fake_slurm):
    bindir, log = fake_slurm
    _tool(bindir, "squeue", _printing("squeue", "", 1).replace(
        "exit 1", "echo 'slurm_load_jobs error: Unable to contact slurm controller' >&2\nexit 1"))
    recs, dirs = _records(2)
    assert slurm.SlurmScheduler().poll(recs, dirs) == {}
    assert _calls(log, "sacct") == []


# --- accounting off ---------------------------------------------------------------------------


def test_sacct_disabled_falls_back_to_squeue_and_says_so_once(fake_slurm, tmp_path, capsys):
    """squeue knows 1801 and the array 1817; 1790 and 1795 are forgotten: with accounting off
    their run directories tell (1790 ended: job-times.json; 1795 left nothing)."""
    bindir, log = fake_slurm
    _tool(bindir, "squeue", _printing("squeue", SQUEUE_22_05_R))
    _tool(bindir, "sacct", SACCT_DISABLED)
    runs = {"torch-ddp-lenet5-ib-n1-r0-aaaaaaaa": ("1801", None),
            "a0": ("1817_0", "array-1-ib-000000"), "a2": ("1817_2", "array-1-ib-000000"),
            "torch-ddp-lenet5-ib-n2-r0-bbbbbbbb": ("1790", None), "gone": ("1795", None)}
    recs = [JobRecord(run_id=rid, scheduler="slurm", job_id=jid, state="PENDING", pack=pk)
            for rid, (jid, pk) in runs.items()]
    dirs = [tmp_path / r.run_id for r in recs]
    for d in dirs:
        d.mkdir()
    (tmp_path / "torch-ddp-lenet5-ib-n2-r0-bbbbbbbb" / protocol.JOB_TIMES_FILE).write_text(
        json.dumps({"job_id": "1790", "script_ended_at": 1.0}))
    sched = slurm.SlurmScheduler()
    for _ in range(2):
        out = sched.poll(recs, dirs)
    assert out["torch-ddp-lenet5-ib-n1-r0-aaaaaaaa"] == ("RUNNING", "")
    assert out["a0"] == ("PENDING", "") and out["a2"] == ("RUNNING", "")
    assert out["torch-ddp-lenet5-ib-n2-r0-bbbbbbbb"] == ("COMPLETED", "")  # the logs judge it
    assert out["gone"][0] == "FAILED" and "no accounting" in out["gone"][1]
    assert len(_calls(log, "sacct")) == 1  # asked once, never again
    assert sched.failed_nodes(recs[-1], dirs[-1]) == ([], "")
    assert len(_calls(log, "sacct")) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == ["orch: sacct says 'Slurm accounting storage is disabled' (exit status 1): "
                   "job states come from squeue alone; a job squeue no longer lists is judged "
                   "by its run directory"]


def test_a_forgotten_pack_without_accounting_is_cut_off(fake_slurm, tmp_path):
    """A pack's allocation squeue no longer lists, accounting off: its run that ended keeps
    its end, its run that never started is cut off (and so submitted again)."""
    bindir, _ = fake_slurm
    _tool(bindir, "squeue", _printing("squeue", ""))
    _tool(bindir, "sacct", SACCT_DISABLED)
    name = f"{protocol.PACK_PREFIX}1-ib-x"
    recs = [JobRecord(run_id=rid, scheduler="slurm", job_id="700", state="RUNNING", pack=name)
            for rid in ("ended", "never")]
    dirs = [tmp_path / r.run_id for r in recs]
    for d in dirs:
        d.mkdir()
    (dirs[0] / protocol.STEP_STARTED_FILE).write_text("{}")
    (dirs[0] / protocol.JOB_TIMES_FILE).write_text(json.dumps({"exit_status": 0}))
    out = slurm.SlurmScheduler().poll(recs, dirs)
    assert out["ended"] == ("COMPLETED", "")
    state, reason = out["never"]
    assert state == "FAILED" and reason.startswith(protocol.CUT_OFF) and "700" in reason


@pytest.mark.parametrize(("times", "want"), [
    ({"exit_status": 0}, "COMPLETED"), ({"exit_status": 124}, "TIMEOUT"),
    ({"exit_status": 3}, "FAILED"), ({"script_ended_at": 2.0}, "COMPLETED"), (None, "FAILED")])
def test_a_forgotten_job_is_judged_by_its_run_directory(tmp_path, times, want):
    if times is not None:
        (tmp_path / protocol.JOB_TIMES_FILE).write_text(json.dumps(times))
    assert slurm.from_run_dir("42", tmp_path)[0] == want


def test_sacct_that_hangs_or_is_missing_counts_as_off(fake_slurm, monkeypatch, capsys):
    bindir, _ = fake_slurm
    monkeypatch.setenv("PATH", str(bindir))  # no sacct at all
    assert slurm.sacct(["-X"]) is None and not slurm.accounting_usable()
    assert "sacct cannot run" in capsys.readouterr().err


# --- MaxArraySize --------------------------------------------------------------------------------


def _prepared(repeats: int) -> tuple[sitemod.Site, list[Prepared]]:
    site = sitemod.load("testcluster")[0]
    runs = expand(SweepSpec(nodes=(1,), repeats=repeats), site)
    out = Path("/scratch/runs")
    return site, [Prepared(r, out / r.run_id, JobRecord(run_id=r.run_id, scheduler="slurm"),
                           "submit") for r in runs]


@pytest.mark.parametrize(("repeats", "limit", "sizes"), [
    (5, 2, [2, 2, 1]), (5, 5, [5]), (5, 1001, [5]), (5, None, [5]), (4, 1, [1, 1, 1, 1])])
def test_arrays_larger_than_max_array_size_are_split(repeats, limit, sizes):
    site, prepared = _prepared(repeats)
    groups = packs.groups(prepared, site, "array", limit)
    assert [len(g.members) for g in groups] == sizes
    assert [p.run.run_id for g in groups for p in g.members] == [p.run.run_id
                                                                 for p in prepared]


def test_max_array_size_zero_refuses_arrays():
    site, prepared = _prepared(2)
    with pytest.raises(UserError, match="MaxArraySize is 0"):
        packs.groups(prepared, site, "array", 0)


# --- the srun line and the GPU request ----------------------------------------------------------


def _gpu_site(**fields) -> sitemod.Site:
    site = sitemod.load("example-gpu-cluster")[0]
    parts = [p.model_copy(update=fields) if p.name == "gpu-ib" else p for p in site.partitions]
    return site.model_copy(update={"partitions": parts})


def test_srun_options_say_cpus_and_binding():
    job = Job(name="x", nodes=2, tasks=8, tasks_per_node=4, time_min=10, output="o")
    part = _gpu_site(gpus_per_task="1", gpu_bind="closest", cpu_bind="cores").partition("gpu-ib")
    assert options.srun_options(job, part) == ("--cpus-per-task=16 --gpus-per-task=1 "
                                               "--gpu-bind=closest --cpu-bind=cores")
    assert options.srun_options(job, part, packed=True).startswith(
        '--cpus-per-task="${SRUN_CPUS_PER_TASK:-16}" ')
    cpu = sitemod.load("testcluster")[0].partition("ib")
    over = job.model_copy(update={"tasks_per_node": 3})  # more tasks than the node's 2 cores
    assert options.srun_options(over, cpu) == "--cpus-per-task=1"


@pytest.mark.parametrize(("request_", "line"), [("gpus-per-node", "--gpus-per-node=4"),
                                                ("gres", "--gres=gpu:4")])
def test_gpu_request_option(request_, line):
    part = _gpu_site(gpu_request=request_).partition("gpu-ib")
    job = Job(name="x", nodes=1, tasks=4, tasks_per_node=4, time_min=10, output="o")
    opts = options.sbatch_options(job, part)
    key, _, value = line[2:].partition("=")
    assert opts[key] == value
    assert ("gres" in opts) == (request_ == "gres") and ("gpus-per-node" in opts) != (
        request_ == "gres")


@pytest.mark.parametrize("request_", ["gpus-per-node", "gres"])
def test_gpu_partition_with_binding_golden(monkeypatch, request_):
    """torch-ddp on a GPU partition that declares its binding: the sbatch line asks for the
    GPUs the site's way, the srun line binds them."""
    site = _gpu_site(gpu_request=request_, gpus_per_task="1", gpu_bind="closest",
                     cpu_bind="cores")
    monkeypatch.setattr(sitemod, "load", lambda name, *a, **k: (site, None))
    _, r = rendered("example-gpu-cluster", "gpu-ib", "torch-ddp")
    check_golden(f"torch-ddp.example-gpu-cluster.gpu-ib.binding-{request_}.job.sbatch",
                 r.job_script)
    assert ("--gres=gpu:4" in r.job_script) == (request_ == "gres")
    assert "--gpus-per-task=1 --gpu-bind=closest --cpu-bind=cores" in r.job_script


@pytest.mark.parametrize(("key", "value", "words"), [
    ("gpu_bind", "closest; rm -rf ~", "gpu_bind"),
    ("cpu_bind", "$(id)", "cpu_bind"),
    ("cpu_bind", "map_cpu:0,1 --x", "cpu_bind"),
    ("gpus_per_task", "0", "gpus_per_task"),
    ("gpus_per_task", "1", "needs GPUs"),  # the local site's partition has none
    ("gpu_request", "gpus", "gpu_request"),
])
def test_bad_binding_is_one_located_line(tmp_path, key, value, words):
    path = site_file(tmp_path, edit_partition(key, value))
    code, _, err = orch("site", "validate", path)
    assert code == 2, err
    located = [line for line in err.splitlines() if line.startswith(f"{path}:")]
    assert len(located) == 1 and words in located[0], err  # file:line: field: what is wrong


def test_good_binding_validates(tmp_path):
    def edit(d):
        d["partitions"][0].update(gpus_per_node=2, gpus_per_task="1", gpu_bind="map_gpu:0,1",
                                  cpu_bind="verbose,map_cpu:0*2,4", gpu_request="gres")
    code, _, err = orch("site", "validate", site_file(tmp_path, edit))
    assert code == 0, err


def test_site_schema_has_the_binding_fields():
    props = sitemod.schema()["$defs"]["Partition"]["properties"]
    assert props["gpu_request"]["enum"] == ["gpus-per-node", "gres"]
    assert props["gpu_bind"]["pattern"] == sitemod.GPU_BIND
    assert {"cpu_bind", "gpus_per_task"} <= set(props)


# --- on the test cluster ---------------------------------------------------------------------


@pytest.mark.slurm
@pytest.mark.ranks
def test_sweep_with_accounting_disabled(slurm_cluster, tmp_path):
    """A real sweep where sacct answers as on a cluster without accounting: it completes, says
    so once, and sacct is asked once (orch's own probe: submitit's watcher never asks)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _tool(bindir, "sacct", SACCT_DISABLED)
    log = tmp_path / "calls"
    out = tmp_path / "out"
    proc = run_orch("sweep", "--site", slurm_cluster, "--nodes", "1", "--iters", 2, "--warmup",
                    1, "--no-preflight", "--out", out, check=True,
                    env={"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}",
                         "ORCH_TEST_LOG": str(log)})
    notes = [line for line in proc.stderr.splitlines() if "sacct says" in line]
    assert notes == ["orch: sacct says 'Slurm accounting storage is disabled' (exit status 1): "
                     "job states come from squeue alone; a job squeue no longer lists is judged "
                     "by its run directory"], proc.stderr
    assert len(_calls(log, "sacct")) == 1
    (rdir,) = [d for d in out.iterdir() if (d / protocol.JOB_FILE).exists()]
    record = json.loads((rdir / protocol.JOB_FILE).read_text())
    assert record["state"] == "COMPLETED", record
    assert "--cpus-per-task=2 \\" in (rdir / "job.sbatch").read_text()


# scontrol as it is, but `scontrol show config` says MaxArraySize = 2 (the test cluster's is
# 1001): every other use of scontrol, in the jobs too, reaches the real one.
SCONTROL_SMALL_ARRAYS = """#!/bin/sh
if [ "$1 $2" = "show config" ]; then
  /usr/bin/scontrol "$@" | sed 's/^MaxArraySize .*/MaxArraySize            = 2/'
else
  exec /usr/bin/scontrol "$@"
fi
"""


@pytest.mark.slurm
@pytest.mark.ranks
def test_array_sweep_split_by_max_array_size(slurm_cluster, tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _tool(bindir, "scontrol", SCONTROL_SMALL_ARRAYS)
    out = tmp_path / "out"
    run_orch("sweep", "--site", slurm_cluster, "--nodes", "1", "--repeats", 3, "--array",
             "--iters", 2, "--warmup", 1, "--no-preflight", "--out", out, check=True,
             env={"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"})
    recs = [json.loads((d / protocol.JOB_FILE).read_text()) for d in out.iterdir()
            if (d / protocol.JOB_FILE).exists()]
    assert all(r["state"] == "COMPLETED" for r in recs), recs
    ids = sorted(r["job_id"] for r in recs)
    bases = sorted({i.split("_")[0] for i in ids}, key=int)
    assert len(bases) == 2 and len(list((out / protocol.PACKS_DIR).iterdir())) == 2
    assert sorted(i.split("_")[1] for i in ids) == ["0", "0", "1"]


@pytest.mark.parametrize(("value", "ok"), [(1, True), (2, True), (True, False), (3, False)])
def test_gpus_per_task_may_be_written_as_a_yaml_count(tmp_path, value, ok):
    def edit(d):
        d["partitions"][0].update(gpus_per_node=2, gpus_per_task=value)
    code, _, err = orch("site", "validate", site_file(tmp_path, edit))
    assert (code == 0) == ok, err


def test_the_example_gpu_sites_commented_binding_validates(tmp_path):
    """The binding the shipped GPU example shows in comments is valid once uncommented."""
    text = (sitemod.site_dir() / "example-gpu-cluster.yaml").read_text()
    lines = re.sub(r"^(\s+)# (gpu_request|gpus_per_task|gpu_bind|cpu_bind):", r"\1\2:", text,
                   flags=re.M)
    assert lines != text
    path = tmp_path / "example-gpu-cluster.yaml"
    path.write_text(lines)
    code, _, err = orch("site", "validate", str(path))
    assert code == 0, err


def test_an_array_task_slurmctld_forgot_comes_from_sacct_while_its_siblings_run(fake_slurm):
    """Task 0 of array 1817 ended and left squeue (MinJobAge) while task 1 still runs: sacct
    is asked about the array, and task 0's end is not lost (it would read as not started)."""
    bindir, log = fake_slurm
    _tool(bindir, "squeue", _printing("squeue", "1817_1|array-1-ib-000000|RUNNING|node2\n"))
    _tool(bindir, "sacct", _printing(
        "sacct", "1817_0|array-1-ib-000000|COMPLETED|node1\n"
                 "1817_1|array-1-ib-000000|PENDING|\n"))
    seen = slurm._listing(["1817_0", "1817_1"])
    assert seen["1817_0"].state == "COMPLETED"
    assert seen["1817_1"].state == "RUNNING"  # slurmctld's word wins for a live task
    assert _calls(log, "squeue")[0].split("-j ")[1].split()[0] == "1817"
    assert len(_calls(log, "sacct")) == 1


@pytest.mark.parametrize(("each", "args", "ranks"), [
    ("2", [], "(one per GPU, the default)"),
    ("1", ["--tasks-per-node", "3", "--option", "backend=gloo"], "(--tasks-per-node 3)"),
])
def test_gpus_per_task_beyond_the_nodes_gpus_is_refused_before_submit(tmp_path, each, args,
                                                                        ranks):
    """gpus_per_task × ranks a node above gpus_per_node: srun would refuse the step only after
    the job waited for its nodes; the sweep refuses it first, naming the site file's field."""
    def edit(d):
        d["partitions"][0].update(gpus_per_node=2, gpus_per_task=int(each))
    path = site_file(tmp_path, edit)
    code, _, err = orch("sweep", "--site", path, "--nodes", "1", "--dry-run", *args)
    assert code == 2, err
    (line,) = [ln for ln in err.splitlines() if ln.strip()]
    found = re.match(rf"orch: error: {re.escape(str(path))}:(\d+): partitions\[0\]\.gpus_per_task: "
                     rf"{each} GPU\(s\) a rank × \d ranks a node {re.escape(ranks)} needs \d GPUs, "
                     r"but partition 'local' has 2 \(gpus_per_node\); use --tasks-per-node \d",
                     line)
    assert found, line
    at = int(found[1])  # the line of the field itself
    assert path.read_text().splitlines()[at - 1].strip().startswith("gpus_per_task:"), line
    fits = ["--tasks-per-node", str(2 // int(each)), "--option", "backend=gloo"]
    code, _, err = orch("sweep", "--site", path, "--nodes", "1", "--dry-run", *fits)
    assert code == 0, err  # the advice holds
