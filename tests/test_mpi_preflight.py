"""The MPI modes' network: a pre-flight that measures Open MPI's all-reduce beside Gloo's.

The MPI modes (``Mode.mpi``) communicate through Open MPI, whose all-reduce on the same link
can be much slower than torch.distributed's Gloo ring: their predictions take the α–β of the
``mpi-allreduce-bench`` mode, measured by the pre-flight at both levels and cached apart, and
the other modes keep Gloo's. On the real test cluster (``slurm``): a sweep of mpi-ssgd measures
both libraries and states its prediction from MPI's fit. Without it: the benchmark chosen by
library, the cache paths, and which network a prediction of each mode is priced on, from
Preflight and Level objects built by hand. No timing thresholds.
"""

from __future__ import annotations

import pytest

from orchestrator import modes
from orchestrator.execute import ledger, preflight
from orchestrator.perfmodel.comm import allreduce_time
from orchestrator.runs import rundir

from .conftest import built_python, run_orch
from .test_model_validity import SIZES, _level, _runs

ITERS, WARMUP = 4, 1


def test_each_library_has_its_network_benchmark():
    gloo, mpi = modes.network_benchmark(), modes.network_benchmark(mpi=True)
    assert (gloo.name, mpi.name) == ("allreduce-bench", "mpi-allreduce-bench")
    assert not gloo.trains and not mpi.trains and mpi.mpi and not gloo.mpi
    assert mpi.framework == "torch-mpi" and mpi.launchers == ("srun", "mpirun")
    # the same option objects: the same sizes, measured the same way
    shared = {o.name: o for o in gloo.options}
    assert all(o is shared[o.name] for o in mpi.options)
    assert [o.name for o in mpi.options] == ["sizes", "reps"]
    # every training mode finds the benchmark of its own library
    for mode in modes.registry().values():
        if mode.trains:
            assert modes.network_benchmark(mode.mpi).mpi == mode.mpi


def test_mpi_levels_are_cached_apart_from_the_gloo_ones(tmp_path):
    gloo = preflight.cache_path("s", "p", "inter", 2, 1, tmp_path)
    mpi = preflight.cache_path("s", "p", "inter", 2, 1, tmp_path, mpi=True)
    assert gloo.name == "preflight-s-p-inter-2x1.json"  # as before: old caches still found
    assert mpi.name == "preflight-s-p-mpi-inter-2x1.json" and mpi.parent == gloo.parent


def _mpi_level(name: str, r2: float = 0.99) -> preflight.Level:
    """A level measured through MPI: 4 times Gloo's latency, a quarter of its bandwidth."""
    exact = [allreduce_time(m, 2, 4e-3, 2.5e5) for m in SIZES]
    return _level(name, 2, None, r2=r2, seconds=exact).model_copy(update={
        "alpha": 4e-3, "bandwidth": 2.5e5, "backend": "mpi", "run_id": f"mpi-{name}"})


def test_an_mpi_mode_is_priced_on_the_mpi_fit_and_the_others_on_gloo():
    gloo_inter = _level("inter", 2, None).model_copy(update={"backend": "gloo"})
    pf = preflight.Preflight(site="s", partition="p", inter=gloo_inter,
                             mpi_inter=_mpi_level("inter"))
    assert pf.network_of(True).inter == pf.mpi_inter.alpha_beta
    assert pf.network_of(False) == pf.network and pf.network.inter == gloo_inter.alpha_beta
    assert pf.corner_networks(True) == [
        type(pf.network)(inter=b, intra=None) for b in pf.mpi_inter.bounds()]
    assert pf.corner_networks(False) == pf.corner_networks()
    runs = _runs(2)
    (mpi_rec,), _ = ledger.predict_runs(runs, {"big"}, {"p": pf}, now=5.0)
    ddp = runs.assign(mode="torch-ddp", options="{}")
    (ddp_rec,), _ = ledger.predict_runs(ddp, {"big"}, {"p": pf}, now=5.0)
    grad = mpi_rec["grad_bytes"]
    assert mpi_rec["mode"] == "mpi-ssgd" and mpi_rec["network_library"] == "mpi"
    assert mpi_rec["network"]["inter"]["run_id"] == "mpi-inter"
    assert mpi_rec["t_comm_total"] == pytest.approx(allreduce_time(grad, 2, 4e-3, 2.5e5))
    assert "(mpi all-reduce)" in mpi_rec["model_text"]
    assert ddp_rec["network_library"] == "gloo" and ddp_rec["network"]["inter"]["run_id"] == "inter"
    assert ddp_rec["t_comm_total"] == pytest.approx(allreduce_time(grad, 2, 1e-3, 1e6))
    assert "(gloo all-reduce)" in ddp_rec["model_text"]
    # the interval's network part comes from the fit the point came from
    assert mpi_rec["t_iter_high"] > ddp_rec["t_iter_high"]
    # a poor MPI fit flags the MPI mode's prediction only
    poor = pf.model_copy(update={"mpi_inter": _mpi_level("inter", r2=0.5)})
    (mpi_rec,), _ = ledger.predict_runs(runs, {"big"}, {"p": poor}, now=5.0)
    (ddp_rec,), _ = ledger.predict_runs(ddp, {"big"}, {"p": poor}, now=5.0)
    assert any("mpi inter fit" in f for f in mpi_rec["flags"]) and ddp_rec["flags"] == []


def test_without_mpi_levels_an_mpi_mode_keeps_the_gloo_fit():
    pf = preflight.Preflight(site="s", partition="p", inter=_level("inter", 2, None))
    assert pf.network_of(True) == pf.network and pf.library_of(True) == "gloo"
    assert pf.corner_networks(True) == pf.corner_networks()
    (rec,), _ = ledger.predict_runs(_runs(2), {"big"}, {"p": pf}, now=5.0)
    assert rec["network_library"] == "gloo"


# --- the real test cluster -----------------------------------------------------------------


@pytest.fixture(scope="module")
def mpi_sweep(slurm_cluster, tmp_path_factory):
    """mpi-ssgd on 1 and 2 nodes of ib, with a pre-flight measured now (both libraries)."""
    built_python("torch-mpi", hint="; Horovod compiles for several minutes")
    base = tmp_path_factory.mktemp("mpi-preflight")
    env = {"ORCH_NETBENCH_DIR": str(base / "store")}
    out = base / "sweep"
    proc = run_orch("sweep", "--site", slurm_cluster, "--partition", "ib", "--nodes", "1,2",
                    "--mode", "mpi-ssgd", "--iters", ITERS, "--warmup", WARMUP,
                    "--preflight", "always", "--out", out, env=env, check=True)
    return out, base / "store", proc


@pytest.mark.slurm
@pytest.mark.ranks
def test_an_mpi_sweep_measures_the_mpi_allreduce_and_predicts_from_it(mpi_sweep, slurm_cluster,
                                                                      capsys):
    from orchestrator import site as sitemod

    out, store, proc = mpi_sweep
    assert ("pre-flight testcluster/ib mpi inter: measuring (on request): "
            "mpi-allreduce-bench on 2 node(s) x 1 task(s)") in proc.stderr
    assert "pre-flight testcluster/ib inter: measuring (on request): allreduce-bench" in (
        proc.stderr)
    pf = preflight.load_sweep(out)["ib"]
    for gloo, mpi in ((pf.inter, pf.mpi_inter), (pf.intra, pf.mpi_intra)):
        assert mpi is not None and mpi.level == gloo.level and mpi.run_id != gloo.run_id
        assert (mpi.nodes, mpi.tasks_per_node) == (gloo.nodes, gloo.tasks_per_node)
        assert (mpi.backend, gloo.backend) == ("mpi", "gloo")
        # a sensible fit: the ring model through MPI's seconds (the fit may put α at 0)
        assert mpi.alpha >= 0 and mpi.bandwidth > 0 and mpi.r2 <= 1
        assert len(mpi.sizes) >= 2 and all(t > 0 for t in mpi.seconds)
        rdir = out / "preflight" / mpi.run_id
        assert rundir.read_run(rdir).mode == "mpi-allreduce-bench"
        assert rundir.read_record(rdir).state == "COMPLETED"
        # cached under its own name, beside Gloo's
        for level, is_mpi in ((mpi, True), (gloo, False)):
            path = preflight.cache_path("testcluster", "ib", level.level, level.nodes,
                                        level.tasks_per_node, store, mpi=is_mpi)
            assert preflight.load_level(path).run_id == level.run_id
        with capsys.disabled():  # what was measured, for whoever reads the log
            print(f"\n  ib {mpi.describe()}\n  ib {gloo.describe()}")
    # the 2-node run's prediction, stated before it ran, is priced on MPI's fit
    (p,) = ledger.load(out / ledger.FILE)
    assert p["mode"] == "mpi-ssgd" and p["network_library"] == "mpi"
    assert p["network"]["inter"]["run_id"] == pf.mpi_inter.run_id
    assert "(mpi all-reduce)" in p["model_text"]
    # the cache again (auto) for the same model and batch (Gloo's across-nodes level probed
    # the sweep's compute; the MPI levels probe nothing): all four levels from it, no job
    assert pf.inter.probe and pf.mpi_inter.probe is None
    model, dataset, batch = pf.inter.probe.split("/")
    said: list[str] = []
    site, _ = sitemod.load(slurm_cluster)
    again = preflight.preflight(site, ["ib"], out.parent / "again", store=store,
                                say=said.append, mpi=True, model=model, dataset=dataset,
                                batch_size=int(batch))["ib"]
    assert again.mpi_inter.run_id == pf.mpi_inter.run_id
    assert again.mpi_intra.run_id == pf.mpi_intra.run_id
    assert len([line for line in said if "[cached" in line]) == 4
    assert not any("measuring" in line for line in said)
    assert not (out.parent / "again" / "preflight").exists()
