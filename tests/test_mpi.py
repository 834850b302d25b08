"""All-reduce over MPI (issue #4): the mpirun launcher, the mpi-ssgd and horovod modes, for real.

Local site: ranks started by mpirun on this machine. Test cluster (marked ``slurm``): mpirun
inside the allocation and srun --mpi=pmix, on 1, 2 and 4 nodes, beside torch-ddp.
No timing thresholds: what is checked is that every rank and iteration is there, the ranks
really synchronised (equal parameter checksums), and failures end as FAILED runs with the
launcher's or MPI's error in the reason, in bounded time.

The torch-mpi environment (PyTorch + mpi4py + Horovod, `orch env build torch-mpi`, minutes
of compiling) is needed by most of these: without it they skip, except under CI=true where
they fail (`make test` builds it through `make envs`).
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import yaml

from orchestrator import site as sitemod
from orchestrator.results.gather import PHASES

from .conftest import (
    ITERS,
    WARMUP,
    assert_phases_cover,
    built_python,
    check_golden,
    processes_matching,
    rendered,
    results,
    run_orch,
    sweep,
)

pytestmark = pytest.mark.ranks
SMALL_BUCKETS = "20000"  # bytes: LeNet-5's gradients (≈250 kB) then travel in several buckets
PHASE_TOLERANCE_S = 0.002
PHASE_TOLERANCE_REL = 0.05


@pytest.fixture(scope="session")
def torch_mpi() -> None:
    """The torch-mpi environment is built (skip, or under CI fail, if not)."""
    built_python("torch-mpi", hint="; Horovod compiles for several minutes")


def footer(out, run_id: str, rank: int) -> dict:
    lines = (out / run_id / "ranks" / f"rank-{rank}.jsonl").read_text().splitlines()
    return json.loads(lines[-1])


def header(out, run_id: str, rank: int) -> dict:
    lines = (out / run_id / "ranks" / f"rank-{rank}.jsonl").read_text().splitlines()
    return json.loads(lines[0])


# --- local site: mpirun ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def mpi_local_sweep(torch_mpi, tmp_path_factory):
    out = tmp_path_factory.mktemp("mpi-local")
    proc = sweep("--mode", "mpi-ssgd,horovod", "--nodes", "1,2", "--launcher", "mpirun",
                 out=out)
    return out, proc


def test_local_mpirun_sweep_completes_in_sync(mpi_local_sweep):
    out, proc = mpi_local_sweep
    assert "COMPLETED" in proc.stdout
    recs = results(out)
    assert sorted((r["mode"], r["nodes"], r["ranks"]) for r in recs) == [
        ("horovod", 1, 1), ("horovod", 2, 2), ("mpi-ssgd", 1, 1), ("mpi-ssgd", 2, 2)]
    for r in recs:
        assert r["state"] == "COMPLETED", r["reason"]
        assert r["launcher"] == "mpirun" and r["framework"] == "torch-mpi"
        assert r["iterations_measured"] == ITERS
        assert r["checksums_agree"] is True
        assert r["samples_per_s"] > 0
        versions = json.loads(r["versions"])
        assert versions["torch"].startswith("2.13.0")
        assert ("mpi4py" in versions) if r["mode"] == "mpi-ssgd" else ("horovod" in versions)
    ssgd = next(r for r in recs if r["mode"] == "mpi-ssgd")
    assert ssgd["options"] == {"overlap": "none", "bucket_size": str(25 * 1024 * 1024)}
    for r in recs:  # two windows, invariants, zero communication on one rank
        assert r["throughput_window"] == "native" and r["t_iter_native"] > 0
        assert r["invariant_violations"] is None, (r["run_id"], r["invariant_violations"])
        if r["ranks"] == 1:
            assert r["t_comm"] == 0.0 and r["t_comm_total"] == 0.0
    hvd2 = next(r for r in recs if r["mode"] == "horovod" and r["ranks"] == 2)
    assert hvd2["t_comm_total"] is None and "background thread" in hvd2["comm_total_reason"]


def test_local_mpirun_ranks_know_their_place(mpi_local_sweep):
    out, _ = mpi_local_sweep
    for r in results(out):
        for rank in range(r["ranks"]):
            h = header(out, r["run_id"], rank)
            assert (h["rank"], h["world_size"], h["node_rank"]) == (rank, r["ranks"], rank)
            assert h["env"]["OMPI_MCA_btl_tcp_if_include"] == "lo"  # forwarded with -x
            assert h["env"]["OMP_NUM_THREADS"] == "1"
            # Each rank's own output file, as srun --output gives (the mpirun wrapper).
            assert (out / r["run_id"] / "ranks" / f"rank-{rank}.out").is_file()
            assert footer(out, r["run_id"], rank)["status"] == "ok"


def test_local_mpirun_phases(mpi_local_sweep):
    out, _ = mpi_local_sweep
    df = pd.read_parquet(out / "results" / "iterations.parquet")
    # Both windows of every rank; phases only in the breakdown window.
    for _, rank_rows in df.groupby(["run_id", "rank"]):
        assert sorted(rank_rows["iter"]) == list(range(2 * (WARMUP + ITERS)))
        native = rank_rows[rank_rows["window"] == "native"]
        assert len(native) == WARMUP + ITERS and native[list(PHASES)].isna().all().all()
    measured = df[~df["warmup_iter"] & (df["window"] == "breakdown")]
    assert_phases_cover(measured, PHASES, PHASE_TOLERANCE_S, PHASE_TOLERANCE_REL)
    assert (measured[list(PHASES)] >= 0).all().all()
    ssgd = measured[(measured["mode"] == "mpi-ssgd") & (measured["ranks"] == 2)]
    assert (ssgd["t_comm_total"] > 0).all()  # every iteration all-reduced something
    assert (ssgd["t_comm"] <= ssgd["t_comm_total"]).all()
    # Horovod's background thread does not show each all-reduce: no total, only the wait
    # (on one rank there is nothing to communicate: zero).
    hvd = measured[measured["mode"] == "horovod"]
    assert hvd[hvd["ranks"] == 2]["t_comm_total"].isna().all()
    assert (hvd[hvd["ranks"] == 1][["t_comm", "t_comm_total"]] == 0).all().all()


def test_overlap_none_and_wfbp_average_the_same_gradients(torch_mpi, tmp_path):
    out = tmp_path / "overlap"
    sweep("--mode", "mpi-ssgd", "--nodes", "2", "--overlap", "none,wfbp", "--bucket-size",
          SMALL_BUCKETS, out=out)
    recs = {r["options"]["overlap"]: r for r in results(out)}
    assert set(recs) == {"none", "wfbp"}
    for overlap, r in recs.items():
        assert r["state"] == "COMPLETED", r["reason"]
        assert r["options"]["bucket_size"] == SMALL_BUCKETS
        assert r["t_comm_total"] > 0 and r["t_comm"] <= r["t_comm_total"]
        assert r["invariant_violations"] is None, r["invariant_violations"]
        f = footer(out, r["run_id"], 1)
        assert f["overlap"] == overlap and f["comm_buckets"] > 1
    # Same data, same initial weights, same averages: waiting for the buckets behind backward
    # must not change what is learnt.
    assert math.isclose(recs["none"]["param_checksum"], recs["wfbp"]["param_checksum"],
                        rel_tol=1e-6)


# --- bad input: exit 2, nothing submitted -----------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--launcher", "foo"], "--launcher foo: 'foo' is not a launcher; valid: srun, mpirun, "
                                "local"),
        (["--overlap", "maybe"], "mode 'mpi-ssgd': overlap=maybe is not valid; choices: none, "
                                 "wfbp"),
        (["--bucket-size", "0"], "mode 'mpi-ssgd': bucket_size=0 must be a whole number >= 1"),
        (["--bucket-size", "25MB"], "bucket_size=25MB must be a whole number >= 1"),
        (["--launcher", "local"], "--launcher local: mode 'mpi-ssgd' runs with srun, mpirun"),
        (["--launcher", "srun"], "--launcher srun: not available on a local site"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, args, message):
    proc = run_orch("sweep", "--mode", "mpi-ssgd", "--nodes", "2", *args,
                    "--out", tmp_path / "x")
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "x").exists()


def test_horovod_has_no_overlap_option(tmp_path):
    proc = run_orch("sweep", "--mode", "horovod", "--overlap", "wfbp", "--out", tmp_path / "x")
    assert proc.returncode == 2
    assert "--option overlap: none of the modes horovod has it" in proc.stderr


# --- failures: FAILED with MPI's or mpirun's error, not a hang --------------------------------


def site_with_env(tmp_path, extra: dict[str, str]):
    """The local site with variables added to the torch-mpi environment."""
    data = yaml.safe_load(sitemod.resolve("local").read_text())
    data["environments"]["torch-mpi"].setdefault("env", {}).update(extra)
    path = tmp_path / "local-broken.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# Open MPI 4.1.4 relays a rank's MPI_Init error to mpirun, and when several ranks fail at once
# that relay sometimes garbles the text ("ORTE_ERROR_LOG: Data unpack would read past end of
# buffer in file ../orte/util/show_help.c"): then that is the launcher's error orch can report.
GARBLED_BY_OPEN_MPI = "show_help.c"


@pytest.mark.parametrize(
    ("mode", "env", "expected"),
    [
        # MPI_Init fails inside every rank (no such point-to-point layer).
        ("mpi-ssgd", {"OMPI_MCA_pml": "nosuchpml"}, ("nosuchpml", GARBLED_BY_OPEN_MPI)),
        ("horovod", {"OMPI_MCA_pml": "nosuchpml"}, ("nosuchpml", GARBLED_BY_OPEN_MPI)),
        # mpirun itself cannot start anything (no such process launcher): no rank ever runs.
        ("mpi-ssgd", {"OMPI_MCA_plm": "nosuchplm"}, ("nosuchplm",)),
    ],
)
def test_failed_mpi_launch_is_a_failed_run_with_the_error(torch_mpi, tmp_path, mode, env,
                                                           expected):
    out = tmp_path / "broken"
    proc = run_orch("sweep", "--site", site_with_env(tmp_path, env), "--mode", mode,
                    "--nodes", "2", "--iters", ITERS, "--warmup", WARMUP, "--out", out,
                    timeout=300)  # a hang fails the test here
    assert proc.returncode == 1, proc.stderr
    rec = results(out)[0]
    assert rec["state"] == "FAILED"
    assert rec["reason"].startswith(("rank 0: ", "rank 1: "))
    assert "orch: mpirun exited with status" in rec["reason"]  # the launcher's own words
    assert any(text in rec["reason"] for text in expected), rec["reason"]
    assert processes_matching(rec["run_id"]) == []


@pytest.mark.parametrize("mode", ["mpi-ssgd", "horovod"])
def test_failed_rank_stops_the_mpi_job(torch_mpi, tmp_path, mode):
    """Rank 1 dies at iteration 2 while rank 0 waits for it in an all-reduce: mpirun must stop
    rank 0, and the reason is rank 1's own error (the root cause), not rank 0's."""
    out = tmp_path / "fail"
    extra = ["--overlap", "wfbp"] if mode == "mpi-ssgd" else []  # rank 0 waits in Waitany
    proc = run_orch("sweep", "--mode", mode, "--nodes", "2", "--launcher", "mpirun", *extra,
                    "--iters", ITERS, "--warmup", WARMUP, "--inject-failure", "1@2",
                    "--out", out, timeout=300)
    assert proc.returncode == 1, proc.stderr
    rec = results(out)[0]
    assert rec["state"] == "FAILED"
    assert rec["reason"].startswith("rank 1: ")
    assert "injected failure on rank 1 at iter 2" in rec["reason"]
    assert processes_matching(rec["run_id"]) == []


# --- rendering: mpirun on Slurm sites (golden files; test_render covers the default launchers)


@pytest.mark.parametrize(("site_name", "partition", "mode"), [
    ("testcluster", "ib", "mpi-ssgd"), ("testcluster", "eth", "horovod"),
    ("testcluster", "eth", "torch-ddp"), ("example-gpu-cluster", "gpu-ib", "horovod"),
])
def test_mpirun_scripts_golden(site_name, partition, mode):
    run, r = rendered(site_name, partition, mode, launcher="mpirun")
    assert run.launcher == "mpirun"
    stem = f"{mode}.{site_name}.{partition}.mpirun"
    check_golden(f"{stem}.job.sbatch", r.job_script)
    check_golden(f"{stem}.launch.sh", r.launch_script)
    assert '--map-by "ppr:' in r.job_script and "--bind-to none" in r.job_script


def test_srun_passes_pmix_to_mpi_modes_only():
    for mode, expected in (("mpi-ssgd", True), ("horovod", True), ("torch-ddp", False)):
        _, r = rendered("testcluster", "ib", mode)
        assert ("srun --mpi=pmix " in r.job_script) is expected, mode


# --- the test cluster: mpirun and srun --mpi=pmix on 1, 2, 4 nodes ----------------------------


@pytest.mark.slurm
@pytest.mark.parametrize("launcher", ["mpirun", "srun"])
def test_cluster_sweep(slurm_cluster, torch_mpi, tmp_path, launcher):
    out = tmp_path / launcher
    sweep("--site", slurm_cluster, "--mode", "horovod,mpi-ssgd,torch-ddp", "--nodes", "1,2,4",
          "--launcher", launcher, "--no-preflight", out=out)  # test_preflight: predictions
    recs = results(out)
    assert sorted((r["mode"], r["nodes"]) for r in recs) == sorted(
        (m, n) for m in ("horovod", "mpi-ssgd", "torch-ddp") for n in (1, 2, 4))
    for r in recs:
        assert r["state"] == "COMPLETED", (r["run_id"], r["reason"])
        assert r["launcher"] == launcher and r["job_id"]
        assert r["iterations_measured"] == ITERS and r["checksums_agree"] is True
        # One rank per node, each on its own node (node1..node4).
        hosts = r["hosts"].split(",")
        assert len(hosts) == r["nodes"] == r["distinct_hosts"], r["hosts"]
        assert all(h.startswith("node") for h in hosts)
        for rank in range(r["ranks"]):
            h = header(out, r["run_id"], rank)
            assert (h["rank"], h["world_size"], h["node_rank"]) == (rank, r["ranks"], rank)
