"""On-disk data: orch data make writes the formats, and --data makes t_io real."""

from __future__ import annotations

import json

import numpy as np
import pytest

from .conftest import run_orch


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    out = tmp_path_factory.mktemp("data")
    run_orch("data", "make", "--out", out, "--samples", 300, check=True)
    return out


def test_make_writes_manifest_and_records(dataset):
    manifest = json.loads((dataset / "manifest.json").read_text())
    assert manifest == {"dataset": "cifar", "samples": 300, "seed": 0, "formats": ["raw"]}
    records = np.fromfile(dataset / "raw" / "shard-00000.bin", dtype=np.uint8)
    assert records.size == 300 * (1 + 3 * 32 * 32)
    labels = records.reshape(300, -1)[:, 0]
    assert labels.max() < 10 and len(set(labels)) > 1
    again = run_orch("data", "make", "--out", dataset, "--samples", 300, check=True)
    assert "raw: already there" in again.stderr


@pytest.mark.ranks
def test_sweep_reads_from_disk_with_and_without_prefetch(dataset, tmp_path):
    out = tmp_path / "sweep"
    run_orch("sweep", "--nodes", "2", "--data", dataset, "--prefetch", "yes,no", "--iters", 4,
             "--warmup", 1, "--out", out, check=True)
    recs = json.loads(run_orch("results", out, "--format", "json", check=True).stdout)
    assert sorted(r["prefetch"] for r in recs) == [False, True]
    for r in recs:
        assert r["state"] == "COMPLETED" and r["data"] == str(dataset)
    no_prefetch = next(r for r in recs if not r["prefetch"])
    assert no_prefetch["t_io"] > 0  # reading and decoding are in the training loop
    header = json.loads((out / no_prefetch["run_id"] / "ranks" / "rank-0.jsonl")
                        .read_text().splitlines()[0])
    assert header["argv"][-4:] == ["--data", f"{dataset}/raw", "--prefetch", "no"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--data", "/nonexistent"], "no manifest.json there"),
        (["--dataset", "imagenet", "--model", "resnet18"], "holds cifar images"),
        (["--prefetch", "maybe"], "expected yes, no or yes,no"),
    ],
)
def test_bad_data_input(dataset, tmp_path, args, message):
    if "--data" not in args:
        args = [*args, "--data", str(dataset)]
    proc = run_orch("sweep", "--nodes", "1", *args, "--out", tmp_path / "x")
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr


def test_bad_make_input(tmp_path):
    proc = run_orch("data", "make", "--out", tmp_path, "--format", "jpeg")
    assert proc.returncode == 2 and "unknown data format 'jpeg'" in proc.stderr


def need_env(framework: str) -> None:
    """Skip without the framework's environment, except under CI (make test builds it)."""
    from orchestrator import envs
    from orchestrator import site as sitemod

    from .conftest import IN_CI

    env = sitemod.load("local")[0].environment(framework)
    if not envs.is_built(env):
        if IN_CI:
            pytest.fail(f"CI=true but environment {framework} is not built")
        pytest.skip(f"environment {framework} not built (orch env build {framework})")


@pytest.fixture(scope="module")
def native(tmp_path_factory):
    need_env("tensorflow")
    need_env("mxnet")
    out = tmp_path_factory.mktemp("native")
    run_orch("data", "make", "--out", out, "--samples", 200, "--format",
             "raw,tfrecord,recordio", check=True)
    return out


def test_native_formats_hold_the_same_images(native):
    manifest = json.loads((native / "manifest.json").read_text())
    assert manifest["formats"] == ["raw", "tfrecord", "recordio"]
    assert (native / "tfrecord" / "shard-00000.tfrecord").stat().st_size > 200 * 3072
    rec = (native / "recordio" / "data.rec").read_bytes()
    raw = np.fromfile(native / "raw" / "shard-00000.bin", dtype=np.uint8).reshape(200, -1)
    assert raw[7, 1:].tobytes() in rec and raw[199, 1:].tobytes() in rec


@pytest.mark.ranks
@pytest.mark.parametrize("mode", ["tf-allreduce", "mxnet-kvstore"])
def test_frameworks_read_their_native_format(native, tmp_path, mode):
    out = tmp_path / "sweep"
    run_orch("sweep", "--mode", mode, "--nodes", "2", "--data", native, "--prefetch", "no,yes",
             "--iters", 3, "--warmup", 1, "--out", out, check=True)
    recs = json.loads(run_orch("results", out, "--format", "json", check=True).stdout)
    assert sorted(r["prefetch"] for r in recs) == [False, True]
    for r in recs:
        assert r["state"] == "COMPLETED", r["reason"]
    assert next(r for r in recs if not r["prefetch"])["t_io"] > 0


def test_mode_without_a_reader_refuses_data(dataset, tmp_path):
    proc = run_orch("sweep", "--mode", "tf-ps", "--nodes", "1", "--data", dataset,
                    "--out", tmp_path / "x")
    assert proc.returncode == 2 and "mode 'tf-ps' reads no on-disk data yet" in proc.stderr
