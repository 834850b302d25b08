"""Predictions orch can be held to, on the real test cluster: a sweep runs its
pre-flight (α–β inside a node and across nodes, real allreduce-bench jobs), states the 2-node
run's prediction before that run's job starts, and its report shows the scorecard. The
pre-flight's cache, and the partition's min_busbw checked against it. Bad input: one line, exit 2.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from orchestrator.errors import UserError
from orchestrator.execute import ledger as predictions
from orchestrator.execute import preflight
from orchestrator.report import scorecard
from orchestrator.runs import rundir

from .conftest import run_orch

ITERS, WARMUP = 4, 1


@pytest.fixture(scope="module")
def staged(slurm_cluster, tmp_path_factory):
    """One small sweep, torch-ddp on 1 and 2 nodes, with a pre-flight measured now."""
    base = tmp_path_factory.mktemp("preflight")
    env = {"ORCH_NETBENCH_DIR": str(base / "store")}
    out = base / "sweep"
    proc = run_orch("sweep", "--site", slurm_cluster, "--nodes", "1,2", "--mode", "torch-ddp",
                    "--iters", ITERS, "--warmup", WARMUP, "--preflight", "always", "--out", out,
                    env=env, check=True)
    return out, env, proc


@pytest.mark.slurm
@pytest.mark.ranks
def test_sweep_states_predictions_before_the_runs(staged):
    out, env, proc = staged
    # the pre-flight measured both levels as real jobs and cached them with their fit quality
    assert "pre-flight testcluster/ib intra: measuring" in proc.stderr
    assert "pre-flight testcluster/ib inter: measuring" in proc.stderr
    used = preflight.load_sweep(out)["ib"]
    assert (used.intra.nodes, used.intra.tasks_per_node) == (1, 2)
    assert (used.inter.nodes, used.inter.tasks_per_node) == (2, 1)
    for level in (used.intra, used.inter):
        assert level.alpha >= 0 and level.bandwidth > 0 and level.r2 <= 1
        # the ranks recorded their machine's physical cores beside its logical CPUs
        assert 1 <= level.machine_cores <= level.machine_cpus
        assert rundir.read_record(out / "preflight" / level.run_id).state == "COMPLETED"
        # how long its job ran, in which limit: what a second measurement's limit comes from
        assert 0 < level.job_seconds < 60 * level.time_limit_min and level.time_limit_min == 10
    # one prediction per larger run, stated before that run's job script started
    preds = predictions.load(out / predictions.FILE)
    assert len(preds) == 1
    p = preds[0]
    two = out / p["run_id"]
    started = scorecard.run_started_at(two)
    assert started is not None and p["predicted_at"] < started
    assert p["workers"] == 2 and p["from_workers"] == 1 and p["pattern"] == "allreduce"
    assert p["network"]["inter"]["run_id"] == used.inter.run_id
    # the across-nodes job probed the nodes' compute alone and both at once (not the intra
    # job), and the prediction scaled the 1-rank run's compute by what it found
    assert set(used.inter.compute_probe) == {1, 2} and used.intra.compute_probe is None
    assert all(seconds > 0 for seconds in used.inter.compute_probe.values())
    assert used.inter.shares_fit()
    assert p["compute_scale"] == pytest.approx(used.inter.compute_slowdown(2))
    assert set(p["inputs"]) >= {"t_f", "t_b", "t_comm", "t_iter"} and p["t_iter"] > 0
    # its interval: the 1-rank run's few measured iterations are too few for quantiles
    assert p["interval_basis"] == "normal" and p["t_iter_low"] <= p["t_iter"] <= p["t_iter_high"]
    # the report: scorecard table, its median error, and the result set keeps the predictions
    rep = run_orch("report", out, "--no-plots", env=env, check=True)
    assert "Scorecard: predictions stated before the runs vs measured" in rep.stdout
    # scored in its group: valid, or flagged before its run (the test cluster's 2 nodes share
    # 2 cores with the CI: whether the fit across them holds depends on the load, not on orch)
    group = ("Over the flagged ones (check column), scored apart" if p["flags"] else
             "Median absolute t_iter error over the sweep's valid predictions")
    assert group in rep.stdout
    import pandas as pd

    frame = pd.read_parquet(out / "results" / scorecard.PARQUET)
    assert list(frame["run_id"]) == [p["run_id"]] and bool(frame["before_run"].iloc[0])
    measured = pd.read_parquet(out / "results" / "runs.parquet").set_index("run_id")
    assert frame["measured_t_iter"].iloc[0] == pytest.approx(measured.loc[p["run_id"],
                                                                          "t_iter"])
    err = frame["error_t_iter"].iloc[0]
    assert err == pytest.approx((p["t_iter"] - frame["measured_t_iter"].iloc[0])
                                / frame["measured_t_iter"].iloc[0])
    # extrapolation from the result set to 1,024 workers, 4 per node, naming model and inputs
    pr = run_orch("predict", "--results", out, "--workers", "64,256,1024", "--tasks-per-node",
                  4, "--format", "json", env=env, check=True)
    rows = {r["workers"]: r for r in json.loads(pr.stdout)}
    assert rows[1024]["nodes"] == 256 and rows[1024]["pattern"] == "allreduce"
    assert "pre-flight of" in rows[64]["network"]
    assert rows[1024]["t_comm_total"] > rows[64]["t_comm_total"] > 0
    # no pre-flight: said, and nothing predicted (the same sweep again: every run is done,
    # no job is submitted, and the stated predictions are left as they were)
    stated = (out / predictions.FILE).read_bytes()
    again = run_orch("sweep", "--site", "testcluster", "--nodes", "1,2", "--mode", "torch-ddp",
                     "--iters", ITERS, "--warmup", WARMUP, "--no-preflight", "--out", out,
                     env=env, check=True)
    assert "the sweep states no predictions" in again.stderr
    assert (out / predictions.FILE).read_bytes() == stated


def test_preflight_cache_is_used_when_fresh_and_damage_is_named(tmp_path, monkeypatch):
    from orchestrator import site as sitemod

    site, _ = sitemod.load("testcluster")
    store = tmp_path / "store"
    now = time.time()
    # pre-flight's clock stays at ``now``: the entries are 60 s old when it reads them, not
    # 60 s plus however long a loaded machine took to get there ("1.1 min ago" after 3 s)
    monkeypatch.setattr(preflight, "time", _Pinned(now))
    for level, (nodes, tasks) in preflight.layouts(site, "eth").items():
        path = preflight.cache_path(site.name, "eth", level, nodes, tasks, store)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({
            "level": level, "site": site.name, "partition": "eth", "nodes": nodes,
            "tasks_per_node": tasks, "alpha": 1e-4, "bandwidth": 1e9, "r2": 0.99,
            "max_rel_residual": 0.05, "sizes": [4, 1024], "seconds": [1e-4, 2e-4],
            "measured_at": now - 60, "run_id": f"x-{level}", "run_dir": "/nowhere",
            # what the sweep's probe would run (the across-nodes level of a CPU partition)
            "probe": preflight.probe_of(site, "eth", level, "lenet5", "cifar",
                                        preflight.PROBE_BATCH)}))
    said: list[str] = []
    got = preflight.preflight(site, ["eth"], tmp_path / "sweep", store=store, say=said.append)
    assert got["eth"].inter.run_id == "x-inter" and got["eth"].intra.run_id == "x-intra"
    assert all("[cached" in line and "measured 1.0 min ago" in line for line in said)
    assert not (tmp_path / "sweep" / "preflight").exists()  # no job was run
    # a level whose compute probe ran another model is measured again, not served
    assert preflight.probe_of(site, "eth", "inter", "resnet18", "cifar", 8) != \
        preflight.probe_of(site, "eth", "inter", "lenet5", "cifar", 8)
    bad = preflight.cache_path(site.name, "eth", "inter", 2, 1, store)
    bad.write_text(json.dumps({"level": "inter", "alpha": "fast"}))
    with pytest.raises(UserError, match=r"preflight-testcluster-eth-inter-2x1\.json: field "):
        preflight.preflight(site, ["eth"], tmp_path / "sweep", store=store)


class _Pinned:
    """The time module, with time() pinned at ``t``."""

    def __init__(self, t: float) -> None:
        self.t = t

    def time(self) -> float:
        return self.t

    def __getattr__(self, name: str):
        return getattr(time, name)


def preflight_level(level: str, nodes: int, tasks: int, machines: int | None) -> preflight.Level:
    return preflight.Level(level=level, site="s", partition="p", nodes=nodes,
                           tasks_per_node=tasks, alpha=1e-3, bandwidth=1e6, r2=1.0,
                           max_rel_residual=0.0, sizes=[4, 8], seconds=[1e-3, 1e-3],
                           measured_at=0.0, run_id=level, run_dir="/x", machines=machines,
                           machine_cpus=2)


def _site_with_min_busbw(tmp_path, value: str):
    """The local site, its partition declaring ``min_busbw: value``."""
    import yaml

    from orchestrator.resources import data_dir

    doc = yaml.safe_load((data_dir("site-configs") / "local.yaml").read_text())
    doc["partitions"][0]["min_busbw"] = value
    path = tmp_path / f"local-{len(list(tmp_path.glob('local-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_min_busbw_is_checked_against_the_preflight_and_stops_the_sweep_below_it(tmp_path):
    # one scale (nothing to predict): the pre-flight still runs, for the fabric check
    env = {"ORCH_NETBENCH_DIR": str(tmp_path / "store")}
    out = tmp_path / "sweep"
    args = ("--nodes", "2", "--mode", "torch-ddp", "--iters", ITERS, "--warmup", WARMUP,
            "--out", out)
    high = run_orch("sweep", "--site", _site_with_min_busbw(tmp_path, "1000TB/s"), *args,
                    env=env)
    assert high.returncode == 1, high.stderr
    line = high.stderr.strip().splitlines()[-1]
    assert "local/local: all-reduce busbw across 2 nodes " in line and \
        "site minimum 1000TB/s (1e+06 GB/s), pre-flight run allreduce-bench-" in line
    assert "below the minimum, the sweep stops before its runs" in line
    (rdir,) = [p for p in out.iterdir() if p.name.startswith("torch-ddp")]  # prepared only
    assert rundir.read_record(rdir).state == "NEW" and not (rdir / "ranks").exists()
    # a minimum the link meets: checked (from the fresh cache: no second measurement), runs go on
    low = run_orch("sweep", "--site", _site_with_min_busbw(tmp_path, "1kB/s"), *args, env=env)
    assert low.returncode == 0, low.stderr
    assert "site minimum 1kB/s (1e-06 GB/s), pre-flight run allreduce-bench-" in low.stderr
    assert ": ok" in low.stderr and "measuring" not in low.stderr
    assert rundir.read_record(rdir).state == "COMPLETED"
    # without a pre-flight the minimum cannot be checked, and the sweep says so
    never = run_orch("sweep", "--site", _site_with_min_busbw(tmp_path, "1kB/s"), *args,
                     "--no-preflight", env=env)
    assert "min_busbw of local not checked" in never.stderr


def test_min_busbw_must_be_a_bandwidth(tmp_path):
    path = _site_with_min_busbw(tmp_path, "fast")
    bad = run_orch("site", "validate", path)
    assert bad.returncode == 2
    located = bad.stderr.strip().splitlines()[-1]  # under the site config's one-line heading
    assert located.startswith(f"{path}:") and "partitions[0].min_busbw: " in located
    assert "expected a bandwidth such as 10Gb/s" in located


def test_check_busbw_names_the_partition_and_both_figures():
    from orchestrator.errors import FabricBelowMinimum
    from orchestrator.site import Site

    inter = preflight_level("inter", 2, 1, 2)  # 2 ranks: busbw = algbw = 8 B / 1 ms
    site = Site.model_validate({
        "name": "s", "scheduler": "slurm", "partitions": [
            {"name": "p", "interconnect": "ethernet", "nodes": 2, "cpus_per_node": 2,
             "socket_ifname": "eth0", "min_busbw": "100Gb/s"}], "environments": {}})
    pf = preflight.Preflight(site="s", partition="p", inter=inter)
    assert inter.busbw == pytest.approx(8e3)
    with pytest.raises(FabricBelowMinimum) as exc:
        preflight.check_busbw(site, {"p": pf})
    assert exc.value.exit_code == 1
    assert str(exc.value).startswith("s/p: all-reduce busbw across 2 nodes 8e-06 GB/s, site "
                                     "minimum 100Gb/s (12.5 GB/s), pre-flight run inter: below")
    slow = site.model_copy(update={"partitions": [
        site.partitions[0].model_copy(update={"min_busbw": "1kB/s"})]})
    assert preflight.check_busbw(slow, {"p": pf}) == [
        "s/p: all-reduce busbw across 2 nodes 8e-06 GB/s, site minimum 1kB/s (1e-06 GB/s), "
        "pre-flight run inter: ok"]


def test_a_failed_second_measurement_keeps_the_first_flagged(tmp_path, monkeypatch):
    """A level whose fit fails validity's thresholds is measured once more; when that job
    fails (a slow link's job past its time limit) the first measurement stands, flagged and
    cached as such, and the next sweep does not try again within the cache's age."""
    from orchestrator import site as sitemod

    site, _ = sitemod.load("testcluster")
    path = tmp_path / "level.json"
    poor = preflight_level("inter", 2, 1, None).model_copy(update={"max_rel_residual": 0.77})
    assert poor.problem() is not None
    tries = []

    def slow_link(where, path, say, factor=1, time_limit_min=None):
        tries.append(factor)
        raise UserError("the mpi-allreduce-bench run is TIMEOUT: time limit of 10 min reached")

    monkeypatch.setattr(preflight, "_measured", slow_link)
    said: list[str] = []
    where = {"site": site, "partition": "eth"}
    kept = preflight._checked(poor, where, path, said.append)
    assert tries == [preflight.RETRY_FACTOR] and kept.retry_failed and kept.problem()
    assert "measuring again failed (the mpi-allreduce-bench run is TIMEOUT" in said[-1]
    cached = preflight.load_level(path)
    assert cached.retry_failed and cached.alpha == poor.alpha
    assert preflight._checked(cached, where, path, said.append) is cached and tries == [3]


def test_a_second_measurement_gets_the_time_its_repeats_need(tmp_path, monkeypatch):
    """Recorded on the test cluster (pre-flight run mpi-allreduce-bench-alexnet-eth-n2-r0-
    6216a6b3: Open MPI across 2 nodes of the 250 Mbit/s eth with AlexNet's 228 MB gradient, its
    job script 233 s in the site's 10 minutes): measured again with 3x the repeats it needs
    about 700 s, so its job gets 18 minutes (in the site's 10 it ran out of time and every
    prediction from the level was flagged); a short first job keeps the first's limit, and a
    level that did not record its job leaves the site's."""
    from orchestrator import site as sitemod

    site, _ = sitemod.load("testcluster")
    job = tmp_path / "run"
    job.mkdir()
    (job / "job-times.json").write_text(json.dumps(
        {"job_id": "3888", "script_started_at": 1795943656.2333987,
         "script_ended_at": 1795943889.2732303}))
    first = preflight_level("inter", 2, 1, None).model_copy(update={
        "max_rel_residual": 0.77, "job_seconds": preflight.job_seconds(job),
        "time_limit_min": 10})
    assert first.job_seconds == pytest.approx(233.04, abs=0.01)
    assert preflight.retry_time_limit(first) == 18
    assert preflight.retry_time_limit(first.model_copy(update={"job_seconds": 40.0})) == 10
    assert preflight.retry_time_limit(first.model_copy(update={"job_seconds": None})) is None
    assert preflight.job_seconds(tmp_path) is None  # no job-times.json: not recorded
    asked = []

    def measured(where, path, say, factor=1, time_limit_min=None):
        asked.append((factor, time_limit_min))
        return first.model_copy(update={"reps": preflight.REPS * factor,
                                        "max_rel_residual": 0.1})

    monkeypatch.setattr(preflight, "_measured", measured)
    said: list[str] = []
    again = preflight._checked(first, {"site": site, "partition": "eth"}, tmp_path / "l.json",
                               said.append)
    assert asked == [(preflight.RETRY_FACTOR, 18)] and again.problem() is None
    assert said[0].endswith("measuring again with 3x the repeats (time limit 18 min)")


def test_a_fit_the_small_sizes_break_is_taken_from_the_bandwidth_regime(monkeypatch):
    """Recorded on the test cluster (pre-flight run mpi-allreduce-bench-resnet18-eth-n2-r0-
    caf98ea9, Open MPI across 2 nodes of the tbf-shaped 250 Mbit/s eth): the 64 KiB and
    256 KiB all-reduces beat the link's rate (the token bucket's burst), the fit over every
    size misses the smallest by 77 % and fails validity's 50 %; from 1 MiB up the same
    measurements fit within 15 %, at the bandwidth the 44.7 MB gradient met, and the level
    says which sizes it took. A fit that holds over every size keeps them all."""
    from orchestrator.execute import netbench

    sizes = [65536, 262144, 1048576, 4194304, 16777216, 44695848]
    seconds = [0.002355, 0.010112, 0.059291, 0.272938, 1.025583, 2.737932]

    def fit_run(rdir, fit_from=netbench.FIT_FROM, seconds=seconds):
        kept = netbench.fit_range(sizes, seconds, fit_from)
        ab = netbench.fit_measured(*kept, 2).alpha_beta
        return netbench.NetbenchResult(
            site="testcluster", partition="eth", interconnect="ethernet", backend="mpi",
            workers=2, nodes=2, tasks_per_node=1, alpha=ab.alpha, bandwidth=ab.bandwidth,
            sizes=sizes, seconds=seconds, iterations=5, run_id="r", run_dir=str(rdir),
            fit_from=fit_from if len(kept[0]) < len(sizes) else 0)

    monkeypatch.setattr(netbench, "fit_run", fit_run)
    everything = fit_run(Path("r"))
    assert everything.r2()[1] > 0.5  # the burst: fails validity's worst residual
    fit = preflight.bandwidth_fit(Path("r"))
    assert fit.fit_from == preflight.BANDWIDTH_FROM and fit.r2()[1] < 0.2
    assert fit.alpha_beta.allreduce(44695848, 2) == pytest.approx(2.738, rel=0.02)
    assert fit.fitted()[0] == sizes[2:]
    linear = [1e-4 + m / 30e6 for m in sizes]  # a link that follows α–β all the way
    monkeypatch.setattr(netbench, "fit_run", lambda rdir, fit_from=netbench.FIT_FROM:
                        fit_run(rdir, fit_from, linear))
    assert preflight.bandwidth_fit(Path("r")).fit_from == 0
    # from 1 MiB up the times fall with the size: no fit there, the poor one over all stands
    falling = [1e-4, 2e-4, 1.0, 0.9, 0.8, 0.7]
    monkeypatch.setattr(netbench, "fit_run", lambda rdir, fit_from=netbench.FIT_FROM:
                        fit_run(rdir, fit_from, falling))
    kept = preflight.bandwidth_fit(Path("r"))
    assert kept.fit_from == 0 and kept.r2()[1] > 0.5
