"""Today's workloads on real ranks of the local site: gpt-nano in the torch modes with the
field's figures, a user's own model with every phase measured, gpt-nano in the MPI modes."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from .conftest import results, sweep
from .test_mpi import torch_mpi  # noqa: F401 - the fixture: the torch-mpi environment is built

pytestmark = pytest.mark.ranks


@pytest.fixture(scope="module")
def gpt_sweep(tmp_path_factory) -> Path:
    """The issue's sweep: gpt-nano in torch-ddp and torch-fsdp at 1 and 2 nodes."""
    out = tmp_path_factory.mktemp("gpt") / "sweep"
    sweep("--model", "gpt-nano", "--mode", "torch-ddp,torch-fsdp", "--nodes", "1,2",
          "--batch-size", "4", out=out)
    return out


def test_gpt_nano_gives_tokens_flops_mfu_and_memory(gpt_sweep):
    recs = results(gpt_sweep)
    assert len(recs) == 4 and {r["state"] for r in recs} == {"COMPLETED"}
    for r in recs:
        assert r["dataset"] == "bytes" and r["tokens_per_sample"] == 128
        assert r["tokens_per_s"] == pytest.approx(r["samples_per_s"] * 128)
        assert r["tokens_per_s_per_device"] == pytest.approx(r["tokens_per_s"] / r["ranks"])
        assert r["model_flops_per_s_per_device"] > 0 and r["flops_basis"].startswith("6N")
        assert r["mfu"] is None and "peak_tflops" in r["mfu_reason"]  # a CPU: no peak known
        assert r["peak_memory_bytes"] == r["peak_rss_bytes"] > 0
        assert r["checksums_agree"] is not False
        assert r["t_f"] > 0 and r["t_b"] > 0 and r["t_u"] > 0
        if r["ranks"] == 2:
            assert r["t_comm_total"] > 0


def test_transformer_runs_are_predicted_from_the_models_gradient(gpt_sweep):
    """The 2-node runs were predicted before they ran, like the CNNs': gradient bytes from
    gpt-nano's parameters, DDP's all-reduce and FSDP's all-gather/reduce-scatter pattern."""
    preds = [json.loads(line) for line in
             (gpt_sweep / "predictions.jsonl").read_text().splitlines()]
    assert {(p["mode"], p["pattern"]) for p in preds} == {
        ("torch-ddp", "allreduce"), ("torch-fsdp", "allgather-reducescatter")}
    assert {p["grad_bytes"] for p in preds} == {4 * 445_952}


def test_the_report_has_the_workload_table(gpt_sweep):
    from .conftest import run_orch

    run_orch("report", gpt_sweep, check=True)
    text = (gpt_sweep / "report" / "report.md").read_text()
    assert "Workload per device: tokens/s · model FLOP/s · MFU · peak memory" in text
    assert "6N + 12LHQT" in text and "no MFU: the peak FLOP/s of a CPU" in text


def test_a_user_model_is_measured_like_a_zoo_model(tmp_path):
    (tmp_path / "mymodel.py").write_text(textwrap.dedent("""
        from torch import nn


        def build():
            return nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 64), nn.ReLU(),
                                 nn.Linear(64, 10))
    """))
    out = tmp_path / "runs"
    sweep("--model", f"{tmp_path / 'mymodel.py'}:build", "--nodes", "2", out=out)
    recs = results(out)
    assert {r["state"] for r in recs} == {"COMPLETED"} and len(recs) == 1
    for r in recs:
        assert r["model"] == f"{tmp_path / 'mymodel.py'}:build"
        assert r["model_params"] == 3 * 32 * 32 * 64 + 64 + 64 * 10 + 10
        assert r["throughput_window"] == "native" and r["t_f"] > 0 and r["t_b"] > 0
        assert r["model_flops_per_s_per_device"] > 0 and r["flops_basis"].startswith("counted")
        prov = json.loads((out / r["run_id"] / "provenance.json").read_text())
        assert prov["model"]["sha256"] == r["model_sha256"] and prov["model"]["params"]
        assert r["t_comm_total"] > 0 and r["checksums_agree"]


def test_gpt_nano_runs_in_the_mpi_modes(torch_mpi, tmp_path):  # noqa: F811
    out = tmp_path / "runs"
    sweep("--model", "gpt-nano", "--mode", "mpi-ssgd,horovod", "--nodes", "2",
          "--launcher", "mpirun", "--batch-size", "4", out=out)
    recs = results(out)
    assert {r["mode"] for r in recs} == {"mpi-ssgd", "horovod"}
    for r in recs:
        assert r["state"] == "COMPLETED" and r["checksums_agree"] and r["tokens_per_s"] > 0


def test_gpt_nano_runs_in_the_tensorflow_modes(tmp_path):
    from .conftest import built_python

    built_python("tensorflow")
    out = tmp_path / "runs"
    sweep("--model", "gpt-nano", "--mode", "tf-allreduce,tf-ps", "--nodes", "2",
          "--batch-size", "4", out=out)
    recs = results(out)
    assert {r["mode"] for r in recs} == {"tf-allreduce", "tf-ps"}
    for r in recs:
        assert r["state"] == "COMPLETED" and r["tokens_per_s"] > 0 and r["dataset"] == "bytes"


def test_the_run_dimensions_apply_to_a_transformer(tmp_path):
    """bf16 autocast computes gpt-nano's logits in bfloat16; nhwc, which has no 4-D tensor to
    reorder there, says so in the footer instead of passing for a change."""
    out = tmp_path / "runs"
    sweep("--model", "gpt-nano", "--nodes", "1", "--batch-size", "2", "-o", "precision=bf16",
          "-o", "memory_format=nhwc", out=out)
    (r,) = results(out)
    assert r["state"] == "COMPLETED" and r["activation_dtype"] == "bfloat16"
    footer = json.loads((out / r["run_id"] / "ranks" / "rank-0.jsonl").read_text()
                        .splitlines()[-1])
    assert "no 4-D tensor" in footer["memory_format_note"]
