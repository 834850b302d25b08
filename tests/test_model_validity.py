"""Predictions that say how sure they are and when they do not hold (orchestrator/perfmodel/
interval.py, validity.py): every stated prediction carries an interval at a nominal level; a
pre-flight fit that fails its thresholds, ranks over the cores given, a shared node or an
I/O-bound run flag the prediction before its run; the scorecard scores flagged runs apart, with
error and coverage for each group. Numbers by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from orchestrator.execute import ledger, preflight
from orchestrator.perfmodel import interval, validity
from orchestrator.perfmodel.comm import AlphaBeta, allreduce_time, fit_ring
from orchestrator.report import scorecard
from orchestrator.report.scorecard import scorecard_summary, scorecard_table

SIZES = [4, 1024, 16384, 262144, 1048576, 4194304]


def test_z_of_the_nominal_level():
    assert interval.LEVEL == 0.8
    assert interval.z_of() == pytest.approx(1.2816, abs=1e-4)
    assert interval.z_of(0.9) == pytest.approx(1.6449, abs=1e-4)


def test_combine_adds_the_sources_in_quadrature_by_hand():
    z = interval.z_of()
    band = interval.combine(1.0, network=[0.97, 1.04], compute_sd=0.02, repeats_sd=0.01)
    below = math.sqrt(0.03 ** 2 + (z * 0.02) ** 2 + (z * 0.01) ** 2)
    above = math.sqrt(0.04 ** 2 + (z * 0.02) ** 2 + (z * 0.01) ** 2)
    assert band.low == pytest.approx(1.0 - below) and band.high == pytest.approx(1.0 + above)
    assert band.parts["network"] == (pytest.approx(0.03), pytest.approx(0.04))
    assert band.contains(1.0) and not band.contains(1.0 + above + 1e-9)
    # nothing uncertain: the interval is the point; never below 0 s
    assert interval.combine(0.5).low == interval.combine(0.5).high == 0.5
    assert interval.combine(0.01, compute_sd=1.0).low == 0.0


def test_alpha_beta_bounds_from_the_fit_residuals():
    centre = AlphaBeta(alpha=1e-4, bandwidth=1e9)
    exact = [allreduce_time(m, 2, centre.alpha, centre.bandwidth) for m in SIZES]
    fast, slow = interval.alpha_beta_bounds(fit_ring(SIZES, exact, 2, relative=True), centre)
    # a fit with no residual is certain: both corners are the centre
    assert fast.alpha == pytest.approx(centre.alpha) and slow.bandwidth == pytest.approx(1e9)
    noisy = [t * (1.2 if i % 2 else 0.8) for i, t in enumerate(exact)]
    fit = fit_ring(SIZES, noisy, 2, relative=True)
    fast, slow = interval.alpha_beta_bounds(fit, centre)
    assert fast.alpha < centre.alpha < slow.alpha
    assert fast.bandwidth > centre.bandwidth > slow.bandwidth
    # the standard errors are the weighted least squares' (numpy.polyfit of t = 2α + β·m at
    # 2 ranks, each row weighted 1/t as the relative fit, its covariance scaled by χ²/dof)
    (beta, two_alpha), cov = np.polyfit(SIZES, noisy, 1, w=1 / np.asarray(noisy), cov=True)
    assert fit.alpha_beta.alpha == pytest.approx(two_alpha / 2)
    assert fit.alpha_beta.beta == pytest.approx(beta)
    assert fit.se_alpha == pytest.approx(math.sqrt(cov[1, 1]) / 2)
    assert fit.se_beta == pytest.approx(math.sqrt(cov[0, 0]))
    # the corners are z of them away (around the fit's own α–β by default)
    z = interval.z_of()
    _, own_slow = interval.alpha_beta_bounds(fit)
    assert own_slow.alpha == pytest.approx(fit.alpha_beta.alpha + z * fit.se_alpha)
    assert 1 / own_slow.bandwidth == pytest.approx(fit.alpha_beta.beta + z * fit.se_beta)
    # two sizes leave no degree of freedom: no standard errors, no bounds
    two = fit_ring([4, 4194304, 4194304], [exact[0], exact[-1], 1.1 * exact[-1]], 2,
                   relative=True)
    assert two.se_alpha is None and interval.alpha_beta_bounds(two, centre) is None


def test_fit_problem_thresholds():
    assert validity.fit_problem("inter", 0.95, 0.2) is None
    bad = validity.fit_problem("inter", -0.499, 0.63)
    assert bad.startswith("network model unreliable: R² = -0.499, worst residual 63%")
    assert validity.fit_problem("intra", 0.99, 0.51) is not None
    assert validity.fit_problem("intra", float("nan"), 0.1) is not None


@pytest.mark.parametrize(("ranks", "tasks", "cpus", "gpus", "shared", "expect"), [
    (2, 1, 2, 0, 2, None),                     # 2 ranks on the 2-core machine: 1 a core
    (4, 1, 2, 0, 2, "4 ranks on 2 cores"),     # make sweep's 4 nodes on a 2-core machine
    (8, 4, 2, 0, None, "4 ranks a node on 2 cores a node"),
    (8, 2, 64, 1, None, "2 ranks a node on 1 GPU(s)"),
    (64, 4, 64, 4, None, None),
])
def test_oversubscribed(ranks, tasks, cpus, gpus, shared, expect):
    got = validity.oversubscribed(ranks, tasks, cpus_per_node=cpus, gpus_per_node=gpus,
                                  shared_machine_cpus=shared)
    assert (got is None) if expect is None else (expect in got and got.startswith(
        "assumption broken: "))


def _level(name: str, nodes: int, machines: int | None, r2: float = 0.99,
           seconds: list[float] | None = None) -> preflight.Level:
    exact = [allreduce_time(m, nodes, 1e-3, 1e6) for m in SIZES]
    return preflight.Level(level=name, site="s", partition="p", nodes=nodes, tasks_per_node=1,
                           alpha=1e-3, bandwidth=1e6, r2=r2, max_rel_residual=0.05,
                           sizes=SIZES, seconds=seconds or exact, measured_at=0.0, run_id=name,
                           run_dir="/x", machines=machines, machine_cpus=2)


def _runs(top_ranks: int, **base_extra) -> pd.DataFrame:
    phases = {"t_io": 0.0, "t_h2d": 0.0, "t_f": 0.01, "t_b": 0.02, "t_u": 0.0}
    common = {"site": "s", "partition": "p", "mode": "mpi-ssgd", "model": "lenet5",
              "dataset": "cifar", "batch_size": 32, "launcher": "srun",
              "options": '{"overlap": "none"}', "data": None, "prefetch": True,
              "tasks_per_node": 1, **phases, **{f"{p}_std": 0.0 for p in phases}}
    return pd.DataFrame([
        {**common, "run_id": "n1", "nodes": 1, "ranks": 1, "state": "COMPLETED",
         "t_iter": 0.031, "t_iter_std": 0.002, "t_comm": 0.0, **base_extra},
        {**common, "run_id": "big", "nodes": top_ranks, "ranks": top_ranks, "state": "NEW",
         "t_iter": None, "t_iter_std": None, "t_comm": None},
    ])


def _mpi_preflight(inter: preflight.Level) -> preflight.Preflight:
    """The pre-flight of a sweep with an MPI mode (``_runs``' mpi-ssgd): both libraries
    measured, here with the same fit."""
    return preflight.Preflight(site="s", partition="p", inter=inter,
                               mpi_inter=inter.model_copy(update={"backend": "mpi"}))


def test_every_stated_prediction_has_an_interval_by_hand():
    noisy = [t * (1.1 if i % 2 else 0.9) for i, t in
             enumerate(allreduce_time(m, 2, 1e-3, 1e6) for m in SIZES)]
    pf = _mpi_preflight(_level("inter", 2, None, seconds=noisy))
    (rec,), notes = ledger.predict_runs(_runs(2), {"big"}, {"p": pf}, now=5.0)
    assert notes == [] and rec["flags"] == [] and rec["level"] == 0.8
    assert rec["t_iter_low"] < rec["t_iter"] < rec["t_iter_high"]
    # the compute part (no iterations at hand: the normal approximation): z times the
    # measured run's per-iteration spread, as a fraction of its t_iter, times the prediction
    assert rec["interval_basis"] == "normal" and rec["interval_iterations"] is None
    assert rec["interval_parts"]["compute"][0] == pytest.approx(
        interval.z_of() * 0.002 / 0.031 * rec["t_iter"])
    # the network part: the prediction again on the fit's slow corner, minus the point
    slow = pf.corner_networks()[1].inter
    grad = rec["grad_bytes"]
    slow_t = 0.031 + allreduce_time(grad, 2, slow.alpha, slow.bandwidth)
    assert rec["interval_parts"]["network"][1] == pytest.approx(slow_t - rec["t_iter"])


def test_predictions_are_flagged_before_their_runs():
    shared = _mpi_preflight(_level("inter", 4, 1))
    (rec,), _ = ledger.predict_runs(_runs(4), {"big"}, {"p": shared}, now=5.0)
    assert rec["flags"] == ["assumption broken: 4 ranks on 2 cores (the nodes are one machine):"
                            " 2 ranks a core"]
    (rec,), _ = ledger.predict_runs(_runs(2), {"big"}, {"p": shared}, now=5.0)
    assert rec["flags"] == []  # 2 ranks on 2 cores hold
    unreliable = _mpi_preflight(_level("inter", 2, None, r2=-0.499))
    (rec,), _ = ledger.predict_runs(_runs(2), {"big"}, {"p": unreliable}, now=5.0)
    assert rec["flags"][0].startswith("network model unreliable: R² = -0.499")
    own = _mpi_preflight(_level("inter", 2, None))
    (rec,), _ = ledger.predict_runs(_runs(2, t_io=0.02, co_tenants="other"), {"big"},
                                    {"p": own}, now=5.0)
    assert len(rec["flags"]) == 2
    assert rec["flags"][0].startswith("assumption broken: the 1-rank run it is predicted from "
                                      "shared its node(s) with other (co_tenants)")
    assert rec["flags"][1].startswith("assumption broken: input I/O is 65% of t_iter in the "
                                      "1-rank run (above 50%)")


def test_a_library_the_preflight_did_not_measure_flags_predictions_from_one_node():
    gloo = _level("inter", 4, None)
    only_gloo = preflight.Preflight(site="s", partition="p", inter=gloo)
    # an MPI mode with only torch.distributed's fit: 2 nodes from 1 is flagged, naming both
    (rec,), _ = ledger.predict_runs(_runs(2), {"big"}, {"p": only_gloo}, now=5.0)
    assert rec["flags"] == [
        "network model unreliable: the pre-flight measured gloo's all-reduce, not MPI's own "
        "communication, and the run it is predicted from ran on one node: how fast MPI moves "
        "the gradient between nodes is not known before a run of it across nodes"]
    # ... and not once MPI's own all-reduce was measured
    (rec,), _ = ledger.predict_runs(_runs(2), {"big"}, {"p": _mpi_preflight(gloo)}, now=5.0)
    assert rec["flags"] == []
    # TensorFlow's collectives: no pre-flight measures them; a run across nodes did
    tf = _runs(4)
    tf["mode"], tf["options"] = "tf-allreduce", None
    (rec,), _ = ledger.predict_runs(tf, {"big"}, {"p": only_gloo}, now=5.0)
    assert rec["flags"][0].startswith("network model unreliable: the pre-flight measured "
                                      "gloo's all-reduce, not tensorflow's own communication")
    two = pd.concat([tf.iloc[[0]].assign(run_id="n2", nodes=2, ranks=2), tf])
    (rec,), _ = ledger.predict_runs(two, {"big"}, {"p": only_gloo}, now=5.0)
    assert rec["from_workers"] == 2 and rec["flags"] == []
    # torch.distributed's own modes are what the pre-flight measures
    ddp = _runs(2)
    ddp["mode"], ddp["options"] = "torch-ddp", None
    (rec,), _ = ledger.predict_runs(ddp, {"big"}, {"p": only_gloo}, now=5.0)
    assert rec["flags"] == []


def test_a_fit_flags_only_the_runs_whose_communication_crosses_its_level():
    bad_intra = _level("intra", 1, None, r2=0.5).model_copy(update={"tasks_per_node": 2})
    pf = _mpi_preflight(_level("inter", 4, None)).model_copy(
        update={"intra": bad_intra, "mpi_intra": bad_intra})
    assert pf.flags(True)[0].startswith("network model unreliable: R² = 0.500")
    assert pf.flags(True, nodes=4, tasks=1) == []  # one task a node: no intra-node traffic
    assert pf.flags(True, nodes=2, tasks=2) == pf.flags(True)
    assert pf.flags(True, nodes=1, tasks=2) == pf.flags(True)
    (rec,), _ = ledger.predict_runs(_runs(2), {"big"}, {"p": pf}, now=5.0)
    assert rec["flags"] == []


def test_scorecard_keeps_flagged_runs_apart_with_coverage():
    runs = pd.DataFrame([
        {"run_id": r, "state": "COMPLETED", "t_iter": t, "speedup": 1.0, "co_tenants": co}
        for r, t, co in (("a", 0.10, None), ("b", 0.12, None), ("c", 0.20, None),
                         ("d", 0.10, "x"))])

    def rec(rid, t, low, high, flags=(), nodes=2):
        return {"run_id": rid, "predicted_at": 1.0, "t_iter": t, "t_iter_low": low,
                "t_iter_high": high, "level": 0.8, "flags": list(flags), "mode": "m",
                "nodes": nodes, "workers": nodes, "partition": "p", "tasks_per_node": 1,
                "from_workers": 1, "pattern": "allreduce", "overlap": "none"}

    preds = [rec("a", 0.11, 0.09, 0.13), rec("b", 0.10, 0.09, 0.11),
             rec("c", 0.12, 0.10, 0.14, ["assumption broken: 4 ranks on 2 cores"], nodes=4),
             rec("d", 0.10, 0.09, 0.11)]
    frame = scorecard.scorecard_frame(runs, preds, {})
    by = frame.set_index("run_id")
    assert list(by["inside"]) == [True, False, False, True]
    assert list(by["valid"]) == [True, True, False, False]  # d: its node was shared
    assert "co_tenants, found after it ran" in by.loc["d", "flags"]
    lines = scorecard_summary(frame)
    # valid: |+10 %|, |-16.7 %| -> median 13.3 %; 1 of 2 inside
    assert lines[0].startswith("Scorecard: median absolute error of predicted t_iter 13.3% "
                               "over 2 valid run(s)")
    assert ("Interval coverage 1 of 2 inside = 50% (nominal 80%); n = 2 < 10: n too small "
            "to judge calibration.") in lines[0]
    assert lines[1].startswith("Flagged before their runs, scored apart: 2 run(s)")
    assert "  assumption broken: 4 ranks on 2 cores: m at 4 node(s) (4 ranks) -40.0%" in lines
    table = scorecard_table(frame)
    assert table.columns[-2:] == ["interval ms", "check"]
    assert "valid predictions: 13.3%" in table.note and "scored apart: 20.0%" in table.note


def test_orch_predict_prints_the_interval_and_the_flags(tmp_path):
    from .conftest import run_orch
    from .test_predict import write_result_set

    d = write_result_set(tmp_path / "sweep")
    runs = pd.read_parquet(d / "results" / "runs.parquet")
    runs["t_iter_std"] = 0.001
    runs.to_parquet(d / "results" / "runs.parquet", index=False)
    noisy = [t * (1.1 if i % 2 else 0.9) for i, t in
             enumerate(allreduce_time(m, 2, 1e-3, 1e6) for m in SIZES)]
    part = str(runs["partition"].iloc[0])
    level = _level("inter", 2, 1, seconds=noisy).model_copy(update={"partition": part})
    pf = preflight.Preflight(site=str(runs["site"].iloc[0]), partition=part, inter=level)
    (d / "preflight.json").write_text(json.dumps({part: pf.model_dump(mode="json")}))
    # the sweep's pre-flight (nodes on one machine of 2 cores): fit intervals and flags
    from orchestrator.report import whatif

    ask = whatif.Ask(workers="2,4")
    two = whatif.TwoLevel(1, None, None, None, None, None)
    rows = {r["workers"]: r for r in whatif.two_level_results(two, ask, runs, d, d).rows}
    for row in rows.values():
        assert row["t_iter_low"] < row["t_iter"] < row["t_iter_high"] and row["level"] == 0.8
    assert rows[2]["flags"] == []
    assert rows[4]["flags"][0].startswith("assumption broken: 4 ranks on 2 cores")
    # with the result set's iterations (a slow tail in the measured run's): quantiles, and
    # nothing of the compute spread below the point
    top = str(runs.loc[runs["ranks"].idxmax(), "run_id"])
    iters = pd.DataFrame({"run_id": top, "window": "breakdown", "warmup_iter": False,
                          "t_iter": [0.010] * 17 + [0.020] * 3})
    tail = {r["workers"]: r for r in whatif.two_level_results(two, ask, runs, d, d, iters).rows}
    assert rows[4]["interval_basis"] == "normal" and tail[4]["interval_basis"] == "quantiles"
    assert tail[4]["t_iter"] - tail[4]["t_iter_low"] < rows[4]["t_iter"] - rows[4]["t_iter_low"]
    # the command prints the interval column (here with a what-if link: no pre-flight)
    env = {"ORCH_NETBENCH_DIR": str(tmp_path / "empty")}
    proc = run_orch("predict", "--results", d, "--workers", "2,4", "--tasks-per-node", 1,
                    "--bandwidth", "1GB/s", "--latency", "10us", env=env, check=True)
    assert "80% interval ms" in proc.stdout


def test_preflight_ring_keeps_one_rank_a_core_on_the_local_site():
    import os

    from orchestrator import site as sitemod
    from orchestrator.rankside import cores as coremod

    local, _ = sitemod.load("local")
    cores = coremod.count(os.sched_getaffinity(0)).physical  # hyper-threads counted once
    assert preflight.local_cores(local) == cores
    assert preflight.layouts(local, local.partitions[0].name, 64)["inter"] == (
        max(2, min(64, cores)), 1)
    cluster, _ = sitemod.load("testcluster")  # Slurm: its nodes are not this machine
    assert preflight.local_cores(cluster) is None
    assert preflight.layouts(cluster, "eth", 64)["inter"] == (64, 1)


def test_contention_measured_from_1_and_2_ranks_scales_compute_by_hand():
    runs = _runs(4)
    two = runs.iloc[0].copy()
    # the 2-rank run (its own core each on the 2-core machine): compute 0.036 s, not 0.030
    two.update({"run_id": "n2", "nodes": 2, "ranks": 2, "t_f": 0.012, "t_b": 0.024,
                "t_iter": 0.040})
    runs = pd.concat([runs, two.to_frame().T], ignore_index=True)
    for col in ("nodes", "ranks", "tasks_per_node"):
        runs[col] = runs[col].astype(int)
    factor = ledger.contention_factor(runs[runs["ranks"] <= 2])
    assert factor == pytest.approx(0.036 / 0.030)
    # nodes on one machine of 2 cores: 2 -> 4 ranks takes turns (x2), the ranks running at
    # once stay 2 (no more contention); 1 -> 2 adds it once; 2 -> 8 on 16 cores twice
    shared = preflight.Preflight(site="s", partition="p", inter=_level("inter", 4, 1))
    assert ledger.compute_scale(shared, 2, 4, factor) == pytest.approx(2.0)
    assert ledger.compute_scale(shared, 1, 2, factor) == pytest.approx(1.2)
    big = shared.model_copy(update={"inter": _level("inter", 8, 1).model_copy(
        update={"machine_cpus": 16})})
    assert ledger.compute_scale(big, 2, 8, factor) == pytest.approx(1.2 ** 2)
    own = preflight.Preflight(site="s", partition="p", inter=_level("inter", 4, None))
    assert ledger.compute_scale(own, 2, 8, factor) == 1.0  # machines of their own
    # bounded: noise below 1 is no speed-up, above 2 no model
    assert ledger.contention_factor(runs[runs["ranks"] == 1]) is None
    (rec,), _ = ledger.predict_runs(runs, {"big"}, {"p": shared}, now=5.0)
    assert rec["from_workers"] == 2 and rec["compute_scale"] == pytest.approx(2.0)
    assert rec["contention_factor"] == pytest.approx(1.2)


@pytest.mark.ranks
def test_a_failing_preflight_fit_is_measured_once_more_with_more_repeats(tmp_path):
    import time

    from orchestrator import site as sitemod

    local, _ = sitemod.load("local")
    part = local.partitions[0].name
    store = tmp_path / "store"
    for level, (nodes, tasks) in preflight.layouts(local, part, 2).items():
        path = preflight.cache_path(local.name, part, level, nodes, tasks, store)
        path.parent.mkdir(parents=True, exist_ok=True)
        bad = level == "inter"  # the fit a loaded 2-core machine gave: used as it was before
        path.write_text(json.dumps({
            "level": level, "site": local.name, "partition": part, "nodes": nodes,
            "tasks_per_node": tasks, "alpha": 1e-4, "bandwidth": 1e9,
            "r2": -0.499 if bad else 0.99, "max_rel_residual": 0.63 if bad else 0.05,
            "sizes": [4, 1024], "seconds": [1e-4, 2e-4], "measured_at": time.time(),
            "run_id": f"x-{level}", "run_dir": "/nowhere",
            "probe": preflight.probe_of(local, part, level, "lenet5", "cifar",
                                        preflight.PROBE_BATCH)}))
    said: list[str] = []
    got = preflight.preflight(local, [part], tmp_path / "sweep", store=store, say=said.append)
    pf = got[part]
    assert any("inter: network model unreliable: R² = -0.499" in line
               and "measuring again with 3x the repeats" in line for line in said)
    assert pf.intra.run_id == "x-intra"  # the good level is kept
    assert pf.inter.run_id != "x-inter" and pf.inter.reps == 3 * preflight.REPS
    # whatever the new fit is, the predictions say so when it fails, and it is not measured
    # a third time: the cache now holds the second measurement
    assert bool(pf.flags()) == (pf.inter.problem() is not None)
    said.clear()
    again = preflight.preflight(local, [part], tmp_path / "sweep2", store=store,
                                say=said.append)[part]
    assert again.inter.run_id == pf.inter.run_id
    assert not any("measuring" in line for line in said)


def _sysfs(root, siblings: dict[int, str], name: str = "core_cpus_list"):
    """A fake /sys/devices/system/cpu: ``cpuN/topology/<name>`` holding each CPU's list."""
    for cpu, text in siblings.items():
        topo = root / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        if text is not None:
            (topo / name).write_text(text + "\n")
    (root / "cpufreq").mkdir()  # not a CPU
    return root


def test_physical_cores_from_a_fake_sysfs_tree(tmp_path):
    from orchestrator.rankside import cores

    # 2 cores with 2 hyper-threads each, numbered as Linux does (thread siblings 0,2 and 1,3)
    smt = _sysfs(tmp_path / "smt", {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3"})
    assert cores.count(root=smt) == (2, 4, cores.PHYSICAL)
    assert cores.count(root=smt).describe() == "2 physical cores (4 logical)"
    assert cores.count([0, 2], root=smt) == (1, 2, cores.PHYSICAL)  # both threads of one core
    assert cores.count([0, 1], root=smt).describe() == "2 cores"
    # older kernels: thread_siblings_list, ranges
    old = _sysfs(tmp_path / "old", {0: "0-1", 1: "0-1"}, name="thread_siblings_list")
    assert cores.count(root=old) == (1, 2, cores.PHYSICAL)
    # a CPU without its topology: the logical count, and the basis says so
    part = _sysfs(tmp_path / "part", {0: "0,1", 1: None})
    assert cores.count(root=part) == (2, 2, cores.LOGICAL)
    import os

    assert cores.count(root=tmp_path / "none") == (os.cpu_count(), os.cpu_count(),
                                                   cores.LOGICAL)


def test_oversubscription_counts_physical_cores_and_says_the_logical_ones():
    ht = _level("inter", 4, 1).model_copy(update={"machine_cpus": 4, "machine_cores": 2})
    pf = _mpi_preflight(ht)
    assert pf.shared_machine_cpus() == 2 and pf.compute_load(4) == 2.0
    assert "1 machine(s) of 2 physical cores (4 logical)" in ht.describe(0.0)
    (rec,), _ = ledger.predict_runs(_runs(4), {"big"}, {"p": pf}, now=5.0)
    assert rec["flags"] == ["assumption broken: 4 ranks on 2 physical cores (4 logical) (the "
                            "nodes are one machine): 2 ranks a core"]
    # 3 ranks on 4 logical CPUs of 2 cores: oversubscribed (not by the logical count)
    assert validity.oversubscribed(3, 1, cpus_per_node=None, gpus_per_node=0,
                                   shared_machine_cpus=2, shared_machine_logical=4) is not None
    # a level recorded before its physical cores were: the logical count, as before
    old = preflight.Preflight(site="s", partition="p", inter=_level("inter", 4, 1))
    assert old.shared_machine_cores() == (2, 2, "logical CPUs (no CPU topology in sysfs)")


def test_the_sweep_says_each_flag_once_with_its_runs():
    from orchestrator.execute.staged import flag_groups

    cores = "assumption broken: 4 ranks on 2 cores (the nodes are one machine): 2 ranks a core"
    fit = "network model unreliable: R² = -0.016"
    records = [{"run_id": "a-n4", "workers": 4, "flags": [fit, cores]},
               {"run_id": "b-n2", "workers": 2, "flags": [fit]},
               {"run_id": "c-n4", "workers": 4, "flags": [cores]},
               {"run_id": "d-n2", "workers": 2, "flags": []}]
    assert flag_groups(records) == [(fit, ["a-n4 (4 ranks)", "b-n2 (2 ranks)"]),
                                    (cores, ["a-n4 (4 ranks)", "c-n4 (4 ranks)"])]


def test_nodes_confined_to_shares_that_fit_are_machines_of_their_own():
    """The test cluster's nodes: four on one 2-core machine, each in a 0.45-core cgroup. Their
    shares fit the machine (1.8 <= 2), so no 'N ranks on C cores' flag and no contention
    scaling; shares that do not fit (0.6 each) are one machine again; more ranks a node than
    its share is flagged."""
    fits = _level("inter", 4, 1).model_copy(update={"node_cpu_share": 0.45,
                                                    "rank_cpu_cores": 0.45})
    pf = preflight.Preflight(site="s", partition="p", inter=fits, cpus_per_node=2)
    assert fits.shares_fit() and pf.shared_machine_cores() is None
    assert pf.compute_load(4) == 1.0 and "each confined to 0.45 cores (they fit)" in \
        fits.describe(0.0)
    assert ledger.run_flags(pf, 4, 1, _runs(4).iloc[:1]) == []
    over = ledger.run_flags(pf, 8, 2, _runs(8).iloc[:1])
    assert over == ["assumption broken: 2 ranks a node on 0.45 cores a node (the CPU share its "
                    "ranks run under): 4.44 ranks a core"]
    crowded = fits.model_copy(update={"node_cpu_share": 0.6})
    pf2 = preflight.Preflight(site="s", partition="p", inter=crowded, cpus_per_node=2)
    assert not crowded.shares_fit() and pf2.shared_machine_cpus() == 2


def test_communication_takes_a_cpu_ranks_share_from_backward():
    """On a rank of at most one core (a CPU share, or a core of its own), the all-reduce's CPU
    (the cores it keeps busy while running, over the rank's cores) is what hidden
    communication takes from backward; 0 with cores to spare, on GPUs, or unmeasured."""
    level = _level("inter", 4, 1).model_copy(update={"node_cpu_share": 0.45,
                                                     "rank_cpu_cores": 0.45,
                                                     "comm_cpu_cores": 0.09})
    pf = preflight.Preflight(site="s", partition="p", inter=level, cpus_per_node=2)
    assert pf.comm_cpu() == pytest.approx(0.2)
    bound = level.model_copy(update={"comm_cpu_cores": 0.6})  # CPU-bound: nothing hidden
    assert preflight.Preflight(site="s", partition="p", inter=bound).comm_cpu() == 1.0
    spare = level.model_copy(update={"rank_cpu_cores": 8.0})
    assert preflight.Preflight(site="s", partition="p", inter=spare).comm_cpu() == 0.0
    gpu = preflight.Preflight(site="s", partition="p", inter=level, gpus_per_node=4)
    assert gpu.comm_cpu() == 0.0
    unknown = level.model_copy(update={"comm_cpu_cores": None})
    assert preflight.Preflight(site="s", partition="p", inter=unknown).comm_cpu() == 0.0
    # an MPI mode's: measured through MPI (Open MPI polls while it waits: the whole share)
    polled = level.model_copy(update={"comm_cpu_cores": 0.45, "backend": "mpi"})
    both = pf.model_copy(update={"mpi_inter": polled})
    assert both.comm_cpu(True) == 1.0 and both.comm_cpu() == pytest.approx(0.2)


def test_wait_free_backprop_over_polled_mpi_is_priced_after_backward():
    from orchestrator.perfmodel.inputs import overlap_of, priced_overlap

    wfbp = {"overlap": "wfbp"}
    # the run declares wfbp (the report's communication table says so) ...
    assert overlap_of("mpi-ssgd", wfbp) == "wfbp"
    # ... but Open MPI advances the buckets only at the hooks' polls: priced as exposed
    assert priced_overlap("mpi-ssgd", wfbp) == "none"
    assert priced_overlap("mpi-ssgd", {"overlap": "none"}) == "none"
    # Horovod's own background thread drives its MPI calls: its overlap holds
    assert priced_overlap("horovod", {}, 10**8) == overlap_of("horovod", {}, 10**8) == "wfbp"
    assert priced_overlap("torch-ddp", {}, 10**8) == "wfbp"
    (rec,), _ = ledger.predict_runs(_runs(2).assign(options='{"overlap": "wfbp"}'), {"big"},
                                    {"p": _mpi_preflight(_level("inter", 2, None))}, now=5.0)
    assert rec["overlap"] == "none" and rec["t_comm_exposed"] == pytest.approx(
        rec["t_comm_total"])
