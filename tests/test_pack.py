"""Packed sweeps (orch sweep --pack / --array) on the real 4-node test Slurm cluster, and the
pack and array job scripts as golden files.

One packed sweep does most of the work: submitted without waiting (--pack, a node to one
run at a time), its allocation is cancelled once its first run has started (every run is then
cut off, the others never started: its 3 nodes were the largest run's alone), and the same
sweep run again with --pack-shared resubmits them all as one new pack, in which the three runs
share nodes by CPUs and run at once (one wave, not two: the module's slowest part) and one
failing step does not stop the run beside it. Under CI=true these run (a missing cluster
fails them); elsewhere they skip.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from orchestrator import modes, protocol
from orchestrator import site as sitemod
from orchestrator.backends.slurm import SlurmScheduler, pack
from orchestrator.backends.slurm.packed import packed_state
from orchestrator.execute import packs as packing
from orchestrator.plan.resolved import ResolvedRun
from orchestrator.plan.sweep import SweepSpec, expand
from orchestrator.render import render_run
from orchestrator.runs.rundir import JobRecord, Prepared

from .conftest import check_golden, run_orch, wait_until

ITERS, WARMUP = 3, 1
# n3 and n2 have a rank 1, which fails at its first iteration; n1 has not and completes.
SWEEP = ("sweep", "--site", "testcluster", "--nodes", "1,2,3", "--iters", ITERS,
         "--warmup", WARMUP, "--inject-failure", "1@1", "--no-preflight")


def ledger(out: Path) -> dict[str, dict]:
    return {d.name: json.loads((d / protocol.JOB_FILE).read_text())
            for d in sorted(out.iterdir()) if (d / protocol.JOB_FILE).exists()}


def packs(out: Path) -> list[Path]:
    return sorted((out / protocol.PACKS_DIR).iterdir())


def by_nodes(out: Path) -> dict[int, Path]:
    return {json.loads((d / "run.json").read_text())["nodes"]: d
            for d in out.iterdir() if (d / "run.json").exists()}


# srun's prolog (SLURM_PROLOG, which sbatch passes on from the sweep's environment to the pack
# and every srun in it) in the first packed sweep: the run's step waits there, before any rank
# starts, until the test removes the hold file, so the allocation is cancelled while its first
# run is surely running and before any other has started. (Cancelled once its log showed it
# started, the run, whose rank 1 fails at iteration 1, could end first and the next one start.)
# The prolog's wait is bounded too, so that a test killed outright leaves no job waiting long.
HOLD_PROLOG = """#!/bin/sh
touch "$ORCH_TEST_HOLD.reached"
n=0
while [ -e "$ORCH_TEST_HOLD" ] && [ $n -lt 6000 ]; do sleep 0.1; n=$((n + 1)); done
"""


@pytest.fixture(scope="module")
def packed(slurm_cluster, tmp_path_factory):
    """The packed sweep, cut off once and resubmitted sharing nodes: (out, first ledger,
    second run)."""
    out = tmp_path_factory.mktemp("packed")
    held = tmp_path_factory.mktemp("hold")
    prolog, hold = held / "prolog.sh", held / "hold"
    prolog.write_text(HOLD_PROLOG)
    prolog.chmod(0o755)
    hold.touch()
    job = set()
    try:
        run_orch(*SWEEP, "--pack", "--out", out, "--no-wait", check=True,
                 env={"SLURM_PROLOG": str(prolog), "ORCH_TEST_HOLD": str(hold)})
        job = {r["job_id"] for r in ledger(out).values()}
        assert len(job) == 1, job  # one allocation for the three runs
        first = by_nodes(out)[3]  # the largest run starts first
        wait_until("the pack's first run to start", lambda: (  # its queue wait included
            first / protocol.STEP_STARTED_FILE).exists() and Path(f"{hold}.reached").exists(),
            timeout=300, every=0.5)
    finally:
        if job:  # also when the test failed: no pack left on the shared cluster
            subprocess.run(["scancel", *job], check=True, timeout=30)
            # Held until Slurm has ended the allocation (killed its processes): a step let go
            # before would fail to start in it and the next run could start in its place.
            wait_until("the cancelled allocation to end", lambda: not subprocess.run(
                ["squeue", "-h", "-j", *job], capture_output=True, text=True,
                timeout=30).stdout.strip(), timeout=120, every=0.5)
        hold.unlink()
    cut = {}

    def finalized():  # status (from another process) finalizes the ledger
        run_orch("status", out, check=True)
        cut.update(ledger(out))
        return all(r["state"] in ("CANCELLED", "TIMEOUT", "FAILED") for r in cut.values())

    wait_until(lambda: f"the cancelled pack's runs to end: {cut}", finalized, timeout=90,
               every=2)
    second = run_orch(*SWEEP, "--pack-shared", "--out", out)
    return out, cut, second


def test_cut_off_runs_are_recorded_and_resubmitted(packed):
    out, cut, second = packed
    for rec in cut.values():
        assert rec["state"] == "CANCELLED", rec
        assert rec["reason"].startswith(protocol.CUT_OFF), rec
    started = {rid: rec for rid, rec in cut.items() if (out / rid / "attempts" / "1" /
                                                       protocol.STEP_STARTED_FILE).exists()}
    assert len(started) == 1 and "this run" in next(iter(started.values()))["reason"]
    # --pack kept the allocation's 3 nodes to the largest run: nothing started beside it.
    rid = next(iter(started))
    first = json.loads((out / rid / "attempts" / "1" / protocol.STEP_STARTED_FILE).read_text())
    assert first["pack_mode"] == "exclusive" and first["step_cpus_per_node"] == "all", first
    assert len(first["hosts"].split(",")) == 3
    # The next sweep submitted all three again, as one new pack (one sbatch), and kept the
    # first attempt's files.
    assert "0 already finished, 3 to submit" in second.stderr, second.stderr
    assert len(packs(out)) == 2
    assert all((out / rid / "attempts" / "1" / "job.sbatch").exists() for rid in cut)


def test_each_run_is_its_own_step_and_a_failing_step_does_not_stop_the_others(packed):
    out, _, second = packed
    assert second.returncode == 1, second.stderr  # two runs fail: exit 1, not a crash
    recs = ledger(out)
    jobs = {r["job_id"] for r in recs.values()}
    assert len(jobs) == 1
    job = jobs.pop()
    assert len({r["pack"] for r in recs.values()}) == 1
    steps = {r["step"] for r in recs.values()}
    assert len(steps) == 3 and all(s.startswith(f"{job}.") for s in steps), steps
    nodes = by_nodes(out)
    state = {n: recs[d.name]["state"] for n, d in nodes.items()}
    assert state == {3: "FAILED", 2: "FAILED", 1: "COMPLETED"}, recs
    # --pack-shared: one CPU a rank, so on the 2-CPU nodes n2 (first fit) and n1 (the CPU
    # left) ran beside n3 on its nodes, all three at once, and each says with whom.
    times = {n: json.loads((d / protocol.JOB_TIMES_FILE).read_text()) for n, d in nodes.items()}
    hosts = {n: set(t["hosts"].split(",")) for n, t in times.items()}
    assert len(hosts[3]) == 3 and len(hosts[2]) == 2 and len(hosts[1]) == 1
    assert hosts[2] < hosts[3] and hosts[1] < hosts[3] and not hosts[2] & hosts[1]
    assert max(t["script_started_at"] for t in times.values()) < min(
        t["script_ended_at"] for t in times.values()), times  # they overlapped in time
    rid = {n: d.name for n, d in nodes.items()}
    assert all(t["pack_mode"] == "shared" and t["step_cpus_per_node"] == "1"
               for t in times.values()), times
    assert sorted(times[3]["co_tenants"]) == sorted([rid[2], rid[1]]), times[3]
    assert times[2]["co_tenants"] == [rid[3]] and times[1]["co_tenants"] == [rid[3]]
    assert sorted(times[2]["beside"]) == sorted([rid[3], rid[1]]), times[2]
    # ... and the result set carries it beside their numbers; the runs table counts them.
    co = {r["run_id"]: r["co_tenants"] for r in json.loads(
        run_orch("results", out, "--format", "json", check=True).stdout)}
    assert sorted(co[rid[3]].split(",")) == sorted([rid[2], rid[1]]) and co[rid[1]] == rid[3]
    assert "shared with" in run_orch("results", out, check=True).stdout
    for d in nodes.values():
        assert (d / f"slurm-{job}.out").exists() and (d / protocol.PROVENANCE_FILE).exists()
    # Slurm agrees: one job, one step per run, named after the run.
    res = subprocess.run(["sacct", "-n", "-P", "-j", job, "-o", "JobID,JobName,AllocCPUS"],
                         capture_output=True, text=True, timeout=60)
    named = dict(line.split("|")[:2] for line in res.stdout.split())
    assert {named[r["step"]] for r in recs.values()} == set(recs)
    # ... and each step held one CPU on each of its nodes (srun --exact, one CPU a rank).
    cpus = dict(line.split("|")[::2] for line in res.stdout.split())
    assert {n: int(cpus[recs[d.name]["step"]]) for n, d in nodes.items()} == {3: 3, 2: 2, 1: 1}
    # gather: a row per run, the failed ones with their reason.
    gathered = json.loads(run_orch("results", out, "--format", "json", check=True).stdout)
    assert len(gathered) == 3
    failed = [r for r in gathered if r["state"] == "FAILED"]
    assert len(failed) == 2 and all(r["reason"] for r in failed)


def test_array_runs_same_shape_runs_as_one_job_array(slurm_cluster, tmp_path):
    out = tmp_path / "array"
    run_orch("sweep", "--site", slurm_cluster, "--nodes", "1", "--repeats", 2, "--array",
             "--iters", ITERS, "--warmup", WARMUP, "--out", out, check=True)
    recs = ledger(out)
    assert len(recs) == 2 and len(packs(out)) == 1
    ids = sorted(r["job_id"] for r in recs.values())
    base = ids[0].split("_")[0]
    assert ids == [f"{base}_0", f"{base}_1"]
    assert all(r["state"] == "COMPLETED" for r in recs.values()), recs
    for rid, rec in recs.items():
        assert (out / rid / f"slurm-{rec['job_id']}.out").exists()


@pytest.mark.parametrize(("args", "words"), [
    (("--site", "testcluster", "--pack-shared", "--array"), "--pack, --pack-shared and --array "
                                                              "exclude each other"),
    (("--site", "local", "--pack"), "--pack: site 'local'"),
    (("--site", "testcluster", "--pack", "--nodes", "8"), "8"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, words):
    proc = run_orch("sweep", *args, "--out", tmp_path / "out")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()


def _group(kind: str, nodes: tuple[int, ...], repeats: int = 1):
    site = sitemod.load("testcluster")[0]
    runs = expand(SweepSpec(nodes=nodes, repeats=repeats, iters=ITERS, warmup=WARMUP), site)
    out = Path("/scratch/runs")
    prepared = [Prepared(r, out / r.run_id, JobRecord(run_id=r.run_id, scheduler="slurm"),
                         "submit") for r in runs]
    return site, out, packing.groups(prepared, site, kind)


@pytest.mark.parametrize(("kind", "nodes", "repeats"), [("pack", (1, 2, 4), 1),
                                                        ("array", (1,), 2)])
def test_pack_and_array_scripts_golden(tmp_path, kind, nodes, repeats):
    site, out, groups = _group(kind, nodes, repeats)
    assert len(groups) == 1
    name = f"{kind}-1-ib-000000"
    text = packing.render(groups[0], site, out, out / "packs" / name, name)
    check_golden(f"{kind}.testcluster.ib.sbatch", text)
    script = tmp_path / "s.sh"
    script.write_text(text)
    subprocess.run(["bash", "-n", str(script)], check=True)


def test_packed_job_script_golden():
    """A packed run's srun keeps to the nodes its pack gave it and is named after the run."""
    site = sitemod.load("testcluster")[0]
    run = expand(SweepSpec(nodes=(2,)), site)[0]
    env = site.environment(run.framework)
    env = env.model_copy(update={"python": env.python or "/opt/orch/venv/bin/python"})
    r = render_run(ResolvedRun(run, site, site.partition("ib"), env, modes.get(run.mode)),
                   Path("/scratch/runs") / run.run_id, Path("/scratch/runs/.orch/lib-0123456789ab"),
                   packed=True)
    check_golden("torch-ddp.testcluster.ib.packed.job.sbatch", r.job_script)
    assert '--nodelist="$SLURM_JOB_NODELIST"' in r.job_script


def test_pack_order_and_time():
    """Largest first; the allocation's time is what the runs need in that order."""
    _, _, groups = _group("pack", (1, 2, 4), 2)
    assert [p.run.nodes for p in groups[0].members] == [4, 4, 2, 2, 1, 1]
    # 4, 4 one after another, then 2 beside 2, then 1 beside 1: four slots of 11 min; and
    # 4, then 2 beside 1: two.
    sizes = [(p.run.nodes, 11) for p in groups[0].members]
    assert pack.makespan_min(sizes, 4) == 44
    assert pack.makespan_min([(4, 11), (2, 11), (1, 11)], 4) == 22
    _, _, arrays = _group("array", (1, 2), 2)
    assert sorted(len(g.members) for g in arrays) == [2, 2]


@pytest.mark.parametrize(("alloc", "times", "started", "cancel", "step", "want"), [
    (("RUNNING", "RUNNING"), None, False, False, None, "PENDING"),
    (("RUNNING", "RUNNING"), None, True, False, None, "RUNNING"),
    (("RUNNING", "RUNNING"), {"exit_status": 0}, True, False, None, "COMPLETED"),
    (("RUNNING", "RUNNING"), {"exit_status": 124}, True, False, None, "TIMEOUT"),
    (("RUNNING", "RUNNING"), {"exit_status": 1}, True, False, None, "FAILED"),
    (("RUNNING", "RUNNING"), {"exit_status": 143}, True, False, "CANCELLED", "CANCELLED"),
    (("RUNNING", "RUNNING"), None, False, True, None, "CANCELLED"),
    (("RUNNING", "RUNNING"), {"exit_status": 143, "cut_off": True}, True, False, None,
     "RUNNING"),
    (("TIMEOUT", "TIMEOUT"), {"exit_status": 143, "cut_off": True}, True, False, None,
     "TIMEOUT cut"),
    (("CANCELLED", "CANCELLED"), {"exit_status": 143, "cut_off": True}, True, False,
     "CANCELLED", "CANCELLED cut"),
    (("CANCELLED", "CANCELLED"), None, False, False, None, "CANCELLED cut"),
    (("COMPLETED", "COMPLETED"), None, True, False, None, "FAILED cut"),
])
def test_packed_run_state(alloc, times, started, cancel, step, want):
    state, reason = packed_state("7", alloc, times, started, cancel, step)
    assert state == want.split()[0]
    assert reason.startswith(protocol.CUT_OFF) == want.endswith("cut"), reason


@pytest.mark.parametrize(("text", "want"), [("infinite", None), ("30", 30), ("30:00", 30),
                                            ("01:30:00", 90), ("2-00:00:00", 2880),
                                            ("1-12", 2160), ("00:10:30", 11), ("UNLIMITED", None),
                                            ("n/a", None), ("", None)])
def test_partition_time_limits(monkeypatch, text, want):
    """sinfo's %l, which a pack's time must fit (else: one line, exit 2), read by Slurm's one
    time parser (backends/slurm/timelimit.py); a word that is no time is no known limit."""
    shown = subprocess.CompletedProcess(["sinfo"], 0, stdout=f"{text}\n", stderr="")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: shown)
    part = sitemod.load("testcluster")[0].partition("eth")
    assert SlurmScheduler().max_time_min(part) == want


@pytest.mark.parametrize("kind", ["pack", "pack-shared"])
def test_pack_script_places_runs_side_by_side_where_they_fit(tmp_path, kind):
    """The pack script itself, outside Slurm (scontrol and squeue stubbed, each run's
    job.sbatch a barrier): --pack runs n3 alone, then n2 beside n1 on other nodes;
    --pack-shared (2 CPUs a node, one a rank) runs all three at once, sharing n3's nodes, and
    each run's job-times.json names its co-tenants.

    Each run's job.sbatch waits until the runs it should run beside have started too, so those
    overlap in time whatever the machine's speed (a short sleep did not: on a loaded machine
    n3 could end before n1 started), and a placement that never starts them together ends
    the run with status 1."""
    site = sitemod.load("testcluster")[0]
    runs = expand(SweepSpec(nodes=(1, 2, 3), iters=ITERS, warmup=WARMUP), site)
    prepared = [Prepared(r, tmp_path / r.run_id, JobRecord(run_id=r.run_id, scheduler="slurm"),
                         "submit") for r in runs]
    group = packing.groups(prepared, site, kind)[0]
    pack_dir = tmp_path / "packs" / "p"
    pack_dir.mkdir(parents=True)
    script = pack_dir / "pack.sbatch"
    script.write_text(packing.render(group, site, tmp_path, pack_dir, "p"))
    nodes = {p.run.nodes: p.rdir for p in prepared}
    together = {3: (), 2: (1,), 1: (2,)} if kind == "pack" else {3: (2, 1), 2: (3, 1), 1: (3, 2)}
    arrived = tmp_path / "arrived"
    arrived.mkdir()
    for n, rdir in nodes.items():
        rdir.mkdir()
        peers = " ".join(f"{arrived}/n{m}" for m in together[n])
        (rdir / "job.sbatch").write_text(
            f"touch {arrived}/n{n}\n"
            f"for _ in $(seq 1000); do\n"  # a bound: a wrong placement fails, never hangs
            f"  ok=1; for p in {peers}; do [ -e $p ] || ok=0; done\n"
            f"  [ $ok = 1 ] && exit 0; sleep 0.1\n"
            f"done\n"
            f"echo 'the runs beside it never started' >&2; exit 1\n")
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "scontrol").write_text('#!/bin/sh\necho "$3" | tr , "\\n"\n')  # show hostnames
    (stubs / "squeue").write_text("#!/bin/sh\n")  # lists no step
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "SLURM_JOB_ID": "7",
           "SLURM_JOB_NODELIST": "a,b,c", "SLURM_JOB_CPUS_PER_NODE": "2(x3)"}
    subprocess.run(["bash", str(script)], env=env, check=True, timeout=300, capture_output=True)
    times = {n: json.loads((d / protocol.JOB_TIMES_FILE).read_text()) for n, d in nodes.items()}
    hosts = {n: t["hosts"] for n, t in times.items()}
    rid = {n: d.name for n, d in nodes.items()}
    assert all(t["exit_status"] == 0 for t in times.values()), times
    assert hosts == {3: "a,b,c", 2: "a,b", 1: "c"}  # first fit, in either mode
    if kind == "pack":
        assert times[2]["script_started_at"] >= times[3]["script_ended_at"]
        assert times[1]["beside"] == [rid[2]] and times[3]["beside"] == []
        assert all(t["co_tenants"] == [] and t["step_cpus_per_node"] == "all"
                   for t in times.values())
    else:
        assert times[1]["script_started_at"] < times[3]["script_ended_at"]
        assert sorted(times[3]["co_tenants"]) == sorted([rid[2], rid[1]])
        assert times[1]["co_tenants"] == [rid[3]]
    log = (pack_dir / protocol.PACK_STEPS_LOG).read_text().split("\n")
    assert sum(line.startswith("start ") for line in log) == 3


def test_pack_longer_than_the_partition_allows_is_refused(monkeypatch):
    """A pack whose runs need more minutes one after another than the partition's MaxTime is
    refused before anything is written; one that fits is not."""
    from orchestrator import backends
    from orchestrator.errors import UserError

    site, out, groups = _group("pack", (1, 2, 4), 2)
    need = packing.pack_job(groups[0], out, "check").time_min
    runs = [p.run for p in groups[0].members]
    sched = type(backends.scheduler(site.scheduler))
    monkeypatch.setattr(sched, "max_time_min", lambda self, partition: need - 1)
    with pytest.raises(UserError, match=rf"need {need} min in one allocation.*limit of "
                                        rf"{need - 1} min"):
        packing.check(runs, site, "pack", out)
    monkeypatch.setattr(sched, "max_time_min", lambda self, partition: need)
    packing.check(runs, site, "pack", out)
