"""GPU paths, checked against what ran on a real GPU and on this CPU machine.

``tests/fixtures/gpu-h200`` is a sweep recorded on one NVIDIA H200 (torch 2.11.0+cu130,
NCCL 2.28.9, Open MPI 4.1.6; ``machine.txt``) by ``scripts/gpu-check`` on the
``local-gpu`` site: torch-ddp and torch-fsdp over NCCL at 1 rank, torch-ddp over Gloo on CUDA
tensors at 2 ranks sharing the GPU, torch-fsdp over Gloo at 2 ranks (a rank died of SIGSEGV:
recorded as the failure it was), the all-reduce micro-benchmark over NCCL (1 rank) and Gloo
(2 ranks), mpi-ssgd at 1 and 2 ranks. Its run folders are kept as the ranks wrote them (only
submitit's pickles and heartbeat files left out), so ``orch results`` reads them here as it
read them there. What cannot run here (a CUDA device) is not simulated: the rank side's CPU
branch here, and the local scheduler's GPU hand-over in test_local_scheduler.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from orchestrator import fabric

from .conftest import run_orch

RECORDED = Path(__file__).parent / "fixtures" / "gpu-h200"


@pytest.fixture(scope="module")
def rows(tmp_path_factory):
    sweep = tmp_path_factory.mktemp("gpu") / "gpu-check"
    shutil.copytree(RECORDED, sweep)
    return json.loads(run_orch("results", sweep, "--format", "json", check=True).stdout)


def _one(rows, mode, ranks, backend):
    [row] = [r for r in rows if r["mode"] == mode and r["ranks"] == ranks
             and (r["options"] or {}).get("backend", "mpi") == backend]
    return row


@pytest.mark.parametrize("mode,ranks,backend", [
    ("torch-ddp", 1, "nccl"), ("torch-fsdp", 1, "nccl"), ("torch-ddp", 2, "gloo"),
    ("mpi-ssgd", 1, "mpi"), ("mpi-ssgd", 2, "mpi"),
])
def test_recorded_gpu_training_runs(rows, mode, ranks, backend):
    r = _one(rows, mode, ranks, backend)
    assert r["state"] == "COMPLETED" and r["checksums_agree"]
    assert "cu130" in r["versions"]  # it ran with the CUDA build, not a CPU fallback
    assert r["throughput_from"] == "native window" and r["samples_per_s"] > 1000
    # host-to-device copies exist on a GPU and are timed to their end (synchronised)
    assert r["t_h2d"] > 0
    assert r["peak_device_bytes"] > 100 * 2**20  # ResNet-18's weights, grads and activations
    assert r["invariant_violations"] is None
    if ranks == 1:
        assert r["t_comm"] == 0 and r["t_comm_total"] == 0
    else:
        assert 0 < r["t_comm"] <= r["t_comm_total"]


def test_recorded_fsdp_over_gloo_on_cuda_failed_and_is_now_refused(rows, tmp_path):
    r = _one(rows, "torch-fsdp", 2, "gloo")
    assert r["state"] == "FAILED" and "SIGSEGV" in r["reason"]
    proc = run_orch("sweep", "--site", "local-gpu", "--nodes", "1", "--mode", "torch-fsdp",
                    "-o", "backend=gloo", "--tasks-per-node", "2", "--out", tmp_path,
                    "--dry-run")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "backend=gloo" in proc.stderr and "use backend=nccl" in proc.stderr


def test_nccl_refuses_two_ranks_per_gpu_at_render_time(tmp_path):
    proc = run_orch("sweep", "--site", "local-gpu", "--nodes", "1", "--mode", "torch-ddp",
                    "--tasks-per-node", "2", "--out", tmp_path, "--dry-run")
    assert proc.returncode == 2
    assert "NCCL takes one rank per GPU" in proc.stderr and "backend=gloo" in proc.stderr
    ok = run_orch("sweep", "--site", "local-gpu", "--nodes", "1", "--mode", "torch-ddp",
                  "--tasks-per-node", "2", "-o", "backend=gloo", "--out", tmp_path,
                  "--dry-run")
    assert ok.returncode == 0, ok.stderr


def test_recorded_allreduce_on_cuda_tensors(rows):
    nccl, gloo = _one(rows, "allreduce-bench", 1, "nccl"), _one(rows, "allreduce-bench", 2,
                                                                 "gloo")
    assert nccl["state"] == gloo["state"] == "COMPLETED"
    # Gloo stages CUDA tensors through host memory: far slower than one GPU's NCCL no-op
    assert gloo["t_comm"] > 10 * nccl["t_comm"] > 0


def test_nccl_lines_of_the_recorded_run_are_parsed():
    out = (RECORDED / "torch-ddp-resnet18-gpu-n1-r0-f4b247fd" / "ranks" / "rank-0.out")
    got = fabric.parse_nccl(out.read_text())
    assert got == {"network": "Socket", "hcas": [], "ifaces": ["lo"], "ib_missing": False}


def test_rank_device_on_a_machine_without_cuda():
    import torch  # the local site's rank environment: orch[torch], installed by make test

    from orchestrator.rankside.torch.common import rank_device

    assert not torch.cuda.is_available()
    assert rank_device(3) == torch.device("cpu")
    with pytest.raises(RuntimeError, match=r"backend nccl needs a GPU.*backend=gloo"):
        rank_device(0, needs_gpu=True)


# ``tests/fixtures/gpu-h200-metrics``: the run dimensions with what the GPU did, recorded on one
# NVIDIA H200 on 2026-11-27 by ``scripts/gpu-check`` (its default steps, then
# ``KEEP=1 STEPS="dims-more dims-fsdp"`` for the steps the first call's budget left out):
# torch-ddp ResNet-50 and ResNet-18 (ImageNet-shaped batches of 128, 20 measured steps) over
# precision fp32,bf16 x memory_format nchw,nhwc; ResNet-50 in tf32 and fp16, with
# pin_memory=no, with cudnn_benchmark=yes and under torchrun; torch-fsdp in bf16 + nhwc.
METRICS = Path(__file__).parent / "fixtures" / "gpu-h200-metrics"


@pytest.fixture(scope="module")
def metric_rows(tmp_path_factory):
    sweep = tmp_path_factory.mktemp("gpu-metrics") / "gpu-check"
    shutil.copytree(METRICS, sweep)
    rows = json.loads(run_orch("results", sweep, "--format", "json", check=True).stdout)
    return {(r["mode"], r["model"], r["launcher"], r["precision"], r["memory_format"],
             r["pin_memory"], r["cudnn_benchmark"]): r for r in rows}


def test_recorded_dimension_runs_say_what_the_gpu_did(metric_rows):
    assert len(metric_rows) == 15
    for r in metric_rows.values():
        assert r["state"] == "COMPLETED" and r["device_source"] == "nvml"
        assert (r["gpu_indices"], r["cuda_visible_devices"]) == ("0:0", "0:0")
        assert r["gpu_pci_bus_ids"] and r["gpu_reason"] is None
        assert 0 < r["gpu_util_mean"] <= 100 and r["power_mean_w"] <= r["power_max_w"]
        assert r["sm_clock_mean_mhz"] > 0 and not r["throttle_reasons"]
        # Energy from the driver's counter at the window's edges; a window shorter than the
        # sampling interval (ResNet-18 bf16 NHWC: 20 steps in 0.27 s) has none, and says so.
        if r["energy_per_sample_j"] is None:
            assert "shorter than the sampling interval" in r["energy_reason"]
            assert (r["model"], r["precision"], r["memory_format"]) == (
                "resnet18", "bf16", "nhwc")
        else:
            assert r["energy_basis"] == "counter" and r["energy_reason"] is None


def _r50(rows, precision="bf16", fmt="nhwc", launcher="local", pin="yes", bench="no"):
    return rows[("torch-ddp", "resnet50", launcher, precision, fmt, pin, bench)]


def test_recorded_precisions_computed_as_asked_and_cost_less_energy(metric_rows):
    dtypes = {p: _r50(metric_rows, p)["activation_dtype"] for p in ("fp32", "tf32", "bf16",
                                                                     "fp16")}
    assert dtypes == {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16",
                      "fp16": "float16"}
    fp32, bf16 = _r50(metric_rows, "fp32", "nchw"), _r50(metric_rows, "bf16", "nchw")
    # as measured: 0.667 J a sample in fp32, 0.177 in bf16; half the device memory
    assert bf16["energy_per_sample_j"] < fp32["energy_per_sample_j"] / 2
    assert bf16["peak_device_bytes"] < 0.6 * fp32["peak_device_bytes"]


def test_recorded_pageable_copies_and_torchrun(metric_rows):
    pinned, pageable = _r50(metric_rows), _r50(metric_rows, pin="no")
    # a 77 MB batch: 1.6 ms from pinned memory with non_blocking, 9.8 ms from pageable
    assert pageable["t_h2d"] > 3 * pinned["t_h2d"]
    torchrun = _r50(metric_rows, launcher="torchrun")
    assert torchrun["state"] == "COMPLETED" and torchrun["gpu_indices"] == "0:0"


def test_energy_of_a_window_whose_power_still_rose_is_flagged(metric_rows, tmp_path):
    """The recorded 20-step windows began while the H200's power was still rising (150-220 W
    at their first sample, 400-550 W at their last: results.devices.POWER_RISE says how that
    is told): each energy per sample is flagged. gpu-h200-dims recorded the compiled ResNet-50
    runs after their compilation had warmed the GPU: their windows' power was steady, and
    they are not."""
    for r in metric_rows.values():
        if r["energy_per_sample_j"] is not None:
            assert r["power_rising"] is True and r["power_rise"] > 0.25, r["run_id"]
    sweep = tmp_path / "dims"
    shutil.copytree(Path(__file__).parent / "fixtures" / "gpu-h200-dims", sweep)
    dims = json.loads(run_orch("results", sweep, "--format", "json", check=True).stdout)
    steady = {r["run_id"] for r in dims if r["power_rising"] is False}
    assert steady and all(r["compile"] == "default" for r in dims if r["run_id"] in steady)
    assert all(r["power_rising"] for r in dims
               if r["compile"] == "no" and r["energy_per_sample_j"] is not None)
