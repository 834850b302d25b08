"""Time to accuracy: epochs of a real labelled set, held-out accuracy, the sync check.

One small real sweep on the local site: torch-ddp and torch-fsdp (the same epoch loop over a
replicated and a sharded model) on the embedded digits, 1 rank at batch 128 and 2 ranks at
batch 64 (the same global batch), 3 epochs — then the epochs table, time to accuracy, the sync
check and the report's convergence part are read back from it.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from orchestrator import modes
from orchestrator.errors import UserError
from orchestrator.plan.sweep import SweepSpec, _check_epochs
from orchestrator.results import convergence

from .conftest import run_orch


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    out = tmp_path_factory.mktemp("digits")
    run_orch("data", "make", "--out", out, "--from", "digits", check=True)
    return out


@pytest.fixture(scope="module")
def sweep(digits, tmp_path_factory):
    out = tmp_path_factory.mktemp("tta") / "sweep"
    for nodes, batch in ((1, 128), (2, 64)):
        run_orch("sweep", "--mode", "torch-ddp,torch-fsdp", "--nodes", nodes, "--batch-size",
                 batch, "--epochs", 3,
                 "--target-accuracy", "0.4", "--data", digits, "--warmup", 1, "--out", out,
                 check=True)
    return out


@pytest.mark.ranks
def test_epochs_accuracy_time_to_accuracy_and_sync_check(sweep):
    recs = {(r["mode"], r["ranks"]): r for r in json.loads(
        run_orch("results", sweep, "--format", "json", check=True).stdout)}
    assert len(recs) == 4
    ep = pd.read_parquet(sweep / "results" / "epochs.parquet")
    assert set(ep.columns) >= set(convergence.EPOCH_COLUMNS)
    stopped = {rid: int(g["epoch"].max()) for rid, g in ep.groupby("run_id")}
    for mode in ("torch-ddp", "torch-fsdp"):
        one, two = recs[mode, 1], recs[mode, 2]
        for r in (one, two):
            assert r["state"] == "COMPLETED", r["reason"]
            assert r["epochs"] == 3 and r["target_accuracy"] == 0.4
            # LeNet-5 learns the digits: far above chance (0.1) after at most 3 epochs
            assert r["best_test_acc"] >= 0.4 and r["tta_epochs"] <= 3 and r["tta_s"] > 0
            assert r["samples_per_s"] > 0  # throughput from the epochs' steps (native window)
            assert stopped[r["run_id"]] == r["epochs_done"]
        # fsdp's reduce-scattered shards follow the 1-rank curve as ddp's all-reduce does
        assert two["sync_check"] == "pass", (mode, two["sync_detail"])
        assert one["run_id"] in two["sync_detail"]
        assert len(ep[ep["run_id"] == two["run_id"]]) == 2 * two["epochs_done"]  # both ranks
        # each rank trained on its half of the training split each epoch
        halves = ep[ep["run_id"] == two["run_id"]].groupby("epoch")["samples"].sum()
        assert (halves == ep[ep["run_id"] == one["run_id"]].groupby("epoch")["samples"].sum()
                .loc[halves.index]).all()
    # every rank of a run records the same held-out accuracy (the whole split, summed counts)
    assert ep.groupby(["run_id", "epoch"])["test_acc"].nunique().max() == 1

    report = run_orch("report", sweep, check=True)
    assert "Time to accuracy" in report.stdout and "Synchronisation check" in report.stdout
    assert (sweep / "report" / "accuracy.png").stat().st_size > 10_000
    assert "accuracy.png" in (sweep / "report" / "report.md").read_text()


def _cifar100_dir(root, train=300, test=100, bad_label=None):
    """A tiny CIFAR-100 "python version" directory: ``train``, ``test`` and ``meta`` pickles
    with the real files' keys (bytes, as Python 2 wrote them), every class in both splits."""
    import pickle

    import numpy as np

    root.mkdir()
    rng = np.random.default_rng(4)
    for name, n in (("train", train), ("test", test)):
        fine = [k % 100 for k in range(n)]
        if bad_label is not None:
            fine[-1] = bad_label
        batch = {b"batch_label": name.encode(), b"filenames": [b"img.png"] * n,
                 b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                 b"fine_labels": fine, b"coarse_labels": [k // 5 for k in fine]}
        (root / name).write_bytes(pickle.dumps(batch, protocol=2))
    (root / "meta").write_bytes(pickle.dumps(
        {b"fine_label_names": [f"c{k}".encode() for k in range(100)],
         b"coarse_label_names": [f"s{k}".encode() for k in range(20)]}, protocol=2))
    return root


@pytest.mark.ranks
def test_cifar100_trains_with_100_outputs(tmp_path):
    # labels up to 99 in both splits: a model of the dataset's 10 outputs could not take them
    # (cross entropy refuses a target outside its width), so the run completing says the
    # manifest's 100 classes reached the model
    src = _cifar100_dir(tmp_path / "cifar-100-python")
    run_orch("data", "make", "--out", tmp_path / "c100", "--from", src, check=True)
    manifest = json.loads((tmp_path / "c100" / "manifest.json").read_text())
    assert (manifest["classes"], manifest["samples"], manifest["test_samples"]) == (100, 300, 100)
    out = tmp_path / "sweep"
    run_orch("sweep", "--nodes", 1, "--batch-size", 32, "--epochs", 1, "--data",
             tmp_path / "c100", "--warmup", 1, "--out", out, check=True)
    (rec,) = json.loads(run_orch("results", out, "--format", "json", check=True).stdout)
    assert rec["state"] == "COMPLETED" and rec["epochs_done"] == 1, rec["reason"]
    assert "--classes 100" in next(out.glob("*/launch.sh")).read_text()
    ep = pd.read_parquet(out / "results" / "epochs.parquet")
    assert len(ep) == 1 and ep["samples"].iloc[0] == 9 * 32  # whole batches of 300

    bad = _cifar100_dir(tmp_path / "bad", bad_label=100)
    proc = run_orch("data", "make", "--out", tmp_path / "bad-out", "--from", bad)
    assert proc.returncode == 2 and "label 100 outside the 100 classes" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def _curve(losses, accs):
    return pd.DataFrame({"epoch": range(1, len(losses) + 1), "train_loss": losses,
                         "test_acc": accs, "elapsed_s": range(1, len(losses) + 1)})


def test_sync_check_fails_ranks_that_drift_apart():
    run = {"run_id": "b", "mode": "torch-ddp", "options": "{}", "ranks": 2, "batch_size": 64}
    ref = {"run_id": "a", "batch_size": 128}
    same = _curve([2.3, 2.2, 1.9], [0.2, 0.35, 0.55])
    close = _curve([2.3 * 1.001, 2.2, 1.9], [0.2, 0.35, 0.55])
    apart = _curve([2.3, 2.15, 1.8], [0.2, 0.37, 0.6])  # what unsynchronised ranks look like
    assert convergence.sync_check(run, close, ref, same)[0] == "pass"
    verdict, detail = convergence.sync_check(run, apart, ref, same)
    assert verdict == "fail" and "5.263%" in detail
    async_run = {**run, "mode": "mxnet-kvstore", "options": '{"kvstore": "dist_async"}'}
    assert convergence.sync_check(async_run, apart, ref, same)[0] == "async"
    assert convergence.sync_check(run, apart, None, None)[0] is None


def test_time_to_accuracy_reached_and_not():
    curve = _curve([2.3, 2.2, 1.9], [0.2, 0.35, 0.55])
    got = convergence.run_summary({"target_accuracy": 0.3}, curve)
    assert (got["tta_s"], got["tta_epochs"], got["best_test_acc"]) == (2.0, 2, 0.55)
    got = convergence.run_summary({"target_accuracy": 0.9}, curve)
    assert got["tta_s"] is None and "not reached in 3 epoch(s)" in got["tta_reason"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--epochs", "2"], "--epochs: needs --data DIR of a labelled data set"),
        (["--target-accuracy", "0.5"], "--target-accuracy: give --epochs N too"),
        (["--epochs", "2", "--data", "DIGITS", "--target-accuracy", "0"], "in (0, 1]"),
        (["--epochs", "0", "--data", "DIGITS"], "--epochs 0: between 1 and"),
    ],
)
def test_bad_epoch_input(digits, tmp_path, args, message):
    args = [str(digits) if a == "DIGITS" else a for a in args]
    proc = run_orch("sweep", "--nodes", "1", *args, "--out", tmp_path / "x", "--dry-run")
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_epochs_refuse_a_mode_that_trains_none(digits):
    # every training mode trains epochs now; the guard stays for the next mode added
    spec = SweepSpec(epochs=2, data=str(digits))
    with pytest.raises(UserError, match="mode 'allreduce-bench' does not train epochs yet"):
        _check_epochs(spec, [modes.get("allreduce-bench")])


def test_epochs_refuse_random_images(tmp_path):
    run_orch("data", "make", "--out", tmp_path / "rand", "--samples", 50, check=True)
    proc = run_orch("sweep", "--nodes", "1", "--epochs", "1", "--data", tmp_path / "rand",
                    "--out", tmp_path / "x", "--dry-run")
    assert proc.returncode == 2 and "random images without a held-out split" in proc.stderr


# --- every mode that trains epochs, on the test cluster ---------------------------------------

# Every epoch mode but torch-ddp (above), each with its own sharding, reader and evaluation.
CLUSTER_MODES = ("horovod", "mpi-ssgd", "tf-allreduce", "tf-ps", "mxnet-kvstore", "cntk",
                 "chainermn")


@pytest.fixture(scope="module")
def cluster_epochs(slurm_cluster, digits, tmp_path_factory):
    """2 nodes x batch 64, 2 epochs of digits, every mode (mxnet-kvstore: dist_sync and
    dist_async); and cntk (the quickest synchronous one to start) on 1 node at batch 128, the
    sync check's reference."""
    from .test_cntk_chainer import need

    need("torch-mpi", "tensorflow", "mxnet", "cntk", "chainer")
    data = digits  # raw records are there: add the other frameworks' formats
    run_orch("data", "make", "--out", data, "--from", "digits", "--format",
             "raw,tfrecord,recordio", check=True)
    out = tmp_path_factory.mktemp("tta-cluster") / "sweep"
    common = ("--site", slurm_cluster, "--epochs", 2, "--data", data, "--warmup", 1,
              "--out", out)
    run_orch("sweep", "--mode", ",".join(CLUSTER_MODES), "--option",
             "kvstore=dist_sync,dist_async", "--nodes", 2, "--batch-size", 64, *common,
             check=True, timeout=900)
    run_orch("sweep", "--mode", "cntk", "--nodes", 1, "--batch-size", 128, *common,
             check=True, timeout=600)
    return out


@pytest.mark.slurm
@pytest.mark.ranks
def test_every_mode_trains_epochs_on_the_cluster(cluster_epochs):
    recs = json.loads(run_orch("results", cluster_epochs, "--format", "json",
                               check=True).stdout)
    two = [r for r in recs if r["ranks"] == 2]
    kinds = sorted((r["mode"], r["options"].get("kvstore")) for r in two)
    assert kinds == sorted([(m, None) for m in CLUSTER_MODES if m != "mxnet-kvstore"]
                           + [("mxnet-kvstore", "dist_sync"), ("mxnet-kvstore", "dist_async")])
    ep = pd.read_parquet(cluster_epochs / "results" / "epochs.parquet")
    for r in recs:
        assert r["state"] == "COMPLETED", (r["run_id"], r["reason"])
        assert r["epochs_done"] == 2 and r["samples_per_s"] > 0, r["run_id"]
        rows = ep[ep["run_id"] == r["run_id"]]
        # every logging rank (workers; tf-ps: the chief) wrote both epochs
        assert len(rows) == 2 * (1 if r["mode"] == "tf-ps" else r["ranks"]), r["run_id"]
        synchronous = r["mode"] != "tf-ps" and r["options"].get("kvstore") != "dist_async"
        if synchronous:  # LeNet-5 learns the digits: clearly above chance (0.1)
            assert r["final_test_acc"] >= 0.2, (r["run_id"], r["final_test_acc"])
            # the whole held-out split, counts summed over ranks: the same on every rank
            assert rows.groupby("epoch")["test_acc"].nunique().max() == 1, r["run_id"]
        elif r["ranks"] == 2:
            assert r["sync_check"] == "async", r["run_id"]
    cntk = next(r for r in two if r["mode"] == "cntk")
    assert cntk["sync_check"] == "pass", cntk["sync_detail"]


@pytest.mark.ranks
def test_epoch_runs_are_in_the_throughput_and_speedup_tables(sweep):
    """Epoch runs have no breakdown window (no t_iter, no phases) but a samples/s from their
    epochs' steps: the runs table says so (throughput_from) and the report's throughput and
    speedup tables show them, marked."""
    from orchestrator import report

    runs = pd.read_parquet(sweep / "results" / "runs.parquet")
    assert (runs["throughput_from"] == "epoch steps").all()
    assert runs["t_iter"].isna().all() and runs["t_io"].isna().all()  # phases stay null
    ep = pd.read_parquet(sweep / "results" / "epochs.parquet")
    for r in runs.itertuples():  # the figure is the epochs' rate (warm-up and evaluation out)
        mine = ep[ep["run_id"] == r.run_id].groupby("epoch").agg(n=("samples", "sum"),
                                                                   t=("t_epoch", "max"))
        assert 0.5 < r.samples_per_s / (mine["n"].sum() / mine["t"].sum()) < 2
    rep = report.build(runs, pd.read_parquet(sweep / "results" / "iterations.parquet"),
                       lambda site, part: report.CommModel(None, "none"), figures=False)
    tables = {t.key: t for t in rep.tables}
    cells = [c for row in tables["throughput"].rows for c in row[1:] if c]
    assert len(cells) == len(runs) and all(c.endswith(" (epochs)") for c in cells)
    assert "(epochs): an epoch run's figure" in tables["throughput"].note
    speedups = [c for row in tables["speedup"].rows for c in row[1:-1] if c]
    assert speedups == ["1.00 (100%)"] * len(runs)  # each its own configuration's baseline
    assert tables["phases"].rows == []
