"""The papers' own frameworks (issue #9): CNTK 2.7 and ChainerMN as benchmark modes, for real.

Local site: ranks started by mpirun on this machine, beside torch-ddp. Test cluster (marked
``slurm``): srun --mpi=pmix on 1, 2 and 4 nodes. No timing thresholds: every rank and
iteration is there, the ranks really synchronised (equal parameter checksums), the phases add
up, the model zoo's parameter counts are reproduced exactly, and a missing or broken
environment is refused before anything is submitted.

The cntk (Python 3.6) and chainer environments (`orch env build cntk chainer`, about a minute)
are needed by most of these: without them they skip, except under CI=true where they fail.
"""

from __future__ import annotations

import json
import os
import subprocess

import pandas as pd
import pytest
import yaml

from orchestrator import site as sitemod
from orchestrator import zoo
from orchestrator.results.gather import PHASES
from orchestrator.site import envs

from .conftest import (
    ITERS,
    ROOT,
    WARMUP,
    assert_phases_cover,
    assert_two_windows,
    built_python,
    results,
    run_orch,
    sweep,
)

pytestmark = pytest.mark.ranks
MODELS = ("lenet5", "alexnet", "resnet18", "resnet50")


def need(*names: str) -> None:
    """The named environments of the local site are built (skip, or under CI fail, if not)."""
    for name in names:
        built_python(name)


@pytest.fixture(scope="session")
def cntk_env() -> None:
    need("cntk")


@pytest.fixture(scope="session")
def chainer_env() -> None:
    need("chainer")


def jsonl(out, run_id: str, rank: int) -> list[dict]:
    lines = (out / run_id / "ranks" / f"rank-{rank}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def env_python(name: str) -> str:
    return envs.python_of(sitemod.load("local")[0].environment(name))


# --- model zoo: the same networks as PyTorch ---------------------------------------------------


def test_chainer_models_match_the_zoo(chainer_env):
    code = ("import json\nfrom orchestrator import zoo\n"
            "from orchestrator.rankside.chainer import models as M\n"
            "print(json.dumps({f'{m}/{d}': M.count_params(M.build(m, d)) "
            "for m in M.MODELS for d in zoo.get(m).datasets}))")
    proc = subprocess.run([env_python("chainer"), "-c", code], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    counts = json.loads(proc.stdout.splitlines()[-1])
    expected = {f"{m}/{d}": zoo.get(m).params(d) for m in MODELS for d in zoo.get(m).datasets}
    assert counts == expected


def test_cntk_models_match_the_zoo(cntk_env):
    """On CNTK's Python 3.6: every count, CIFAR output shapes, and the geometry models_cntk
    carries (it cannot import the zoo) equal to the zoo's."""
    python = env_python("cntk")
    shim = os.path.join(os.path.dirname(os.path.dirname(python)), "lib", "mpi-shim")
    proc = subprocess.run([python, "-m", "orchestrator.rankside.cntk.models"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "LD_LIBRARY_PATH": shim, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    expected = {(m, d) for m in MODELS for d in zoo.get(m).datasets}
    assert {(r["model"], r["dataset"]) for r in rows} == expected
    for r in rows:
        assert r["params"] == zoo.get(r["model"]).params(r["dataset"]), r
        ds = zoo.get_dataset(r["dataset"])
        assert r["geometry"] == [list(ds.shape_chw), ds.num_classes]
        if r["dataset"] == "cifar":
            assert r["output_shape"] == [1, ds.num_classes]


# --- local site: mpirun, beside torch-ddp -------------------------------------------------------


@pytest.fixture(scope="module")
def cntk_chainer_local_sweep(cntk_env, chainer_env, tmp_path_factory):
    out = tmp_path_factory.mktemp("cntk-chainer-local")
    proc = sweep("--mode", "cntk,chainermn,torch-ddp", "--nodes", "1,2", "--launcher",
                 "mpirun", out=out)
    return out, proc


def test_local_sweep_completes_in_sync(cntk_chainer_local_sweep):
    out, proc = cntk_chainer_local_sweep
    assert "COMPLETED" in proc.stdout
    recs = results(out)
    assert sorted((r["mode"], r["nodes"], r["ranks"]) for r in recs) == [
        (m, n, n) for m in ("chainermn", "cntk", "torch-ddp") for n in (1, 2)]
    for r in recs:
        assert r["state"] == "COMPLETED", (r["run_id"], r["reason"])
        assert r["launcher"] == "mpirun"
        assert r["iterations_measured"] == ITERS
        assert r["checksums_agree"] is True and r["param_checksum"] is not None
        assert r["samples_per_s"] > 0
    by_mode = {r["mode"]: r for r in recs if r["nodes"] == 2}
    assert by_mode["cntk"]["framework"] == "cntk"
    assert by_mode["cntk"]["options"] == {"learner": "data_parallel"}
    assert json.loads(by_mode["cntk"]["versions"])["cntk"].startswith("2.7")
    assert json.loads(by_mode["cntk"]["versions"])["python"].startswith("3.6.")
    assert by_mode["chainermn"]["framework"] == "chainer"
    assert by_mode["chainermn"]["options"] == {"communicator": "naive"}  # CPU partition
    assert json.loads(by_mode["chainermn"]["versions"])["chainer"] == "7.8.1"


def test_local_sweep_ranks_and_checksums(cntk_chainer_local_sweep):
    """Every rank's footer carries a checksum, and the 2-rank runs' ranks agree exactly."""
    out, _ = cntk_chainer_local_sweep
    for r in results(out):
        if r["mode"] == "torch-ddp":
            continue
        sums = set()
        for rank in range(r["ranks"]):
            log = jsonl(out, r["run_id"], rank)
            head, foot = log[0], log[-1]
            assert (head["rank"], head["world_size"]) == (rank, r["ranks"])
            assert foot["type"] == "footer" and foot["status"] == "ok", foot
            assert_two_windows(log, ITERS, WARMUP)  # the framework's own step, then phases
            sums.add(foot["param_checksum"])
        assert len(sums) == 1, (r["run_id"], sums)


def test_local_sweep_phases(cntk_chainer_local_sweep):
    out, _ = cntk_chainer_local_sweep
    df = pd.read_parquet(out / "results" / "iterations.parquet")
    measured = df[~df["warmup_iter"] & df["mode"].isin(["cntk", "chainermn"])
                  & (df["window"] == "breakdown")]
    assert len(measured) == 2 * (1 + 2) * ITERS
    assert_phases_cover(measured, PHASES, 0.002, 0.05)
    assert (measured[list(PHASES)] >= 0).all().all()
    for mode in ("cntk", "chainermn"):
        two = measured[(measured["mode"] == mode) & (measured["ranks"] == 2)]
        assert (two["t_f"] > 0).all() and (two["t_b"] > 0).all()
        assert (two["t_comm"] > 0).all()  # exposed: neither framework hides it
        one = measured[(measured["mode"] == mode) & (measured["ranks"] == 1)]
        assert (one["t_comm"] == 0).all()  # one rank: nothing to communicate
    # ChainerMN: the communicator's all-reduce, timed, is all the communication there is;
    # CNTK's aggregation is inside its C++ update: not seen, and the runs say why.
    chainer = measured[measured["mode"] == "chainermn"]
    assert (chainer["t_comm_total"] == chainer["t_comm"]).all()
    assert measured[measured["mode"] == "cntk"]["t_comm_total"].isna().all()
    for r in results(out):
        if r["mode"] in ("cntk", "chainermn"):
            assert r["throughput_window"] == "native" and r["invariant_violations"] is None
            assert (r["comm_total_reason"] is None) == (r["mode"] == "chainermn")
    # CNTK applies the update inside its distributed learner's call: it is in t_comm.
    cntk2 = measured[(measured["mode"] == "cntk") & (measured["ranks"] == 2)]
    assert (cntk2["t_u"] == 0).all()


@pytest.mark.parametrize("learner", ["one_bit_sgd", "block_momentum"])
def test_cntk_learners_stay_in_sync(cntk_env, tmp_path, learner):
    out = tmp_path / learner
    sweep("--mode", "cntk", "--option", f"learner={learner}", "--nodes", "2", out=out)
    rec = results(out)[0]
    assert rec["state"] == "COMPLETED", rec["reason"]
    assert rec["launcher"] == "mpirun"  # the local site's only launcher for MPI modes
    assert rec["options"] == {"learner": learner} and rec["checksums_agree"] is True


# --- environments: refused before anything is submitted -----------------------------------------


def site_with(tmp_path, name: str, **changes) -> str:
    data = yaml.safe_load(sitemod.resolve("local").read_text())
    data["environments"][name].update(changes)
    path = tmp_path / "local-envs.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


@pytest.mark.parametrize(("mode", "env"), [("cntk", "cntk"), ("chainermn", "chainer")])
def test_missing_environment_is_refused(tmp_path, mode, env):
    site = site_with(tmp_path, env, venv=str(tmp_path / "no-such-venv"))
    out = tmp_path / "x"
    proc = run_orch("sweep", "--site", site, "--mode", mode, "--nodes", "1", "--out", out)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"environment '{env}'" in proc.stderr and "not built" in proc.stderr
    assert f"orch env build {env}" in proc.stderr
    assert not (out / "results").exists()


def test_broken_mpi_shim_is_refused(cntk_env, tmp_path):
    """A built cntk venv whose Open MPI shim points nowhere (Open MPI removed since): named."""
    real = envs.expand(sitemod.load("local")[0].environment("cntk").venv)
    venv = tmp_path / "cntk-venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(real / "bin" / "python")
    (venv / envs.STAMP).write_text((real / envs.STAMP).read_text())
    (venv / "lib" / "mpi-shim").mkdir(parents=True)
    (venv / "lib" / "mpi-shim" / "libmpi.so.12").symlink_to(tmp_path / "gone" / "libmpi.so.40")
    out = tmp_path / "x"
    proc = run_orch("sweep", "--site", site_with(tmp_path, "cntk", venv=str(venv)),
                    "--mode", "cntk", "--nodes", "1", "--out", out)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "environment 'cntk'" in proc.stderr and "libmpi.so.12" in proc.stderr
    assert "libopenmpi-dev" in proc.stderr
    assert not (out / "results").exists()


def test_missing_python_names_the_environment(tmp_path):
    site = site_with(tmp_path, "cntk", venv=str(tmp_path / "v"),
                     build={"python": "3.1", "packages": []})
    proc = run_orch("env", "build", "cntk", "--site", site)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "environment 'cntk'" in proc.stderr and "Python 3.1 is not installed" in proc.stderr


def test_mpi_modes_have_no_local_launcher(tmp_path):
    for mode in ("cntk", "chainermn"):
        proc = run_orch("sweep", "--mode", mode, "--launcher", "local", "--out", tmp_path / "x")
        assert proc.returncode == 2 and f"mode '{mode}' runs with srun, mpirun" in proc.stderr


# --- the test cluster: srun --mpi=pmix on 1, 2, 4 nodes ------------------------------------------


@pytest.mark.slurm
def test_cluster_sweep(slurm_cluster, cntk_env, chainer_env, tmp_path):
    out = tmp_path / "cluster"
    args = ("--site", slurm_cluster, "--mode", "cntk,chainermn,torch-ddp", "--nodes", "1,2,4",
            "--no-preflight")  # about launchers: test_preflight covers predictions
    if sweep(*args, out=out, check=False).returncode != 0:
        # CNTK 2.7's process now and then dies of SIGSEGV as a rank of a 4-node job starts,
        # before its first step (seen in 2 of 9 CI logs kept on one machine: "Signal:
        # Segmentation fault (11)" in the rank's output, no frame of Python's). orch records it
        # as the crash it is (no footer: no exception of orch's rank code), and a user submits
        # the run again with --retry-failed, as here, once; any other failure fails the test.
        failed = [r for r in results(out) if r["state"] != "COMPLETED"]
        assert failed and all(r["mode"] == "cntk" and "log ends without a footer" in
                              (r["reason"] or "") for r in failed), failed
        sweep(*args, "--retry-failed", out=out)
    recs = results(out)
    assert sorted((r["mode"], r["nodes"]) for r in recs) == sorted(
        (m, n) for m in ("chainermn", "cntk", "torch-ddp") for n in (1, 2, 4))
    for r in recs:
        assert r["state"] == "COMPLETED", (r["run_id"], r["reason"])
        assert r["launcher"] == "srun" and r["job_id"]
        assert r["iterations_measured"] == ITERS and r["checksums_agree"] is True
        hosts = r["hosts"].split(",")
        assert len(hosts) == r["nodes"] == r["distinct_hosts"], r["hosts"]
        assert all(h.startswith("node") for h in hosts)
