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

from orchestrator.results import devices, peaks
from orchestrator.runs import fabric

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


# ``tests/fixtures/gpu-h200-lm``: transformers and energy at working power, recorded on one
# NVIDIA H200 on 2026-11-28 by two calls of ``scripts/gpu-check``:
# ``STEPS="lm dims-energy dims-compile" BUDGET_S=530`` (torch-ddp gpt2-small and gpt2-medium on
# webtext, batch 16, bf16, compile=default, 5 warm-up and 20 measured steps; ResNet-50 fp32 NCHW
# and bf16 NHWC with 60 warm-up and 150 measured steps; ResNet-18 compiled in bf16 NHWC and fp32
# NHWC, 20 steps), then ``STEPS="lm-energy fidelity-lm" BUDGET_S=390`` (gpt2-medium with 60
# warm-up and 150 measured steps; the fidelity rounds' log is logs/fidelity-lm.log, its runs are
# not kept). machine.txt holds both calls' machine descriptions, table.txt both tables.
LM = Path(__file__).parent / "fixtures" / "gpu-h200-lm"
SEQUENCE = 1024  # webtext's tokens a sample (GPT-2's context)


@pytest.fixture(scope="module")
def lm_rows(tmp_path_factory):
    sweep = tmp_path_factory.mktemp("gpu-lm") / "gpu-check"
    shutil.copytree(LM, sweep)
    rows = json.loads(run_orch("results", sweep, "--format", "json", check=True).stdout)
    return {(r["model"], r["precision"], r["memory_format"], r["compile"],
             r["iterations_measured"]): r for r in rows}


def _medium(rows, steps):
    return rows[("gpt2-medium", "bf16", "nchw", "default", steps)]


def test_recorded_lm_runs_are_read_with_their_memory(lm_rows):
    assert sorted(lm_rows) == [
        ("gpt2-medium", "bf16", "nchw", "default", 20),
        ("gpt2-medium", "bf16", "nchw", "default", 150),
        ("gpt2-small", "bf16", "nchw", "default", 20),
        ("resnet18", "bf16", "nhwc", "default", 20),
        ("resnet18", "fp32", "nhwc", "default", 20),
        ("resnet50", "bf16", "nhwc", "no", 150),
        ("resnet50", "fp32", "nchw", "no", 150)]
    for r in lm_rows.values():
        assert r["state"] == "COMPLETED" and r["checksums_agree"], r["run_id"]
        assert r["device_name"] == "NVIDIA H200" and "cu130" in r["versions"]
        assert r["device_source"] == "nvml" and r["throughput_from"] == "native window"
        # CUDA's allocated peak, and the caching allocator's reserve above it
        assert 0 < r["peak_device_bytes"] <= r["peak_device_reserved_bytes"], r["run_id"]
    small = lm_rows[("gpt2-small", "bf16", "nchw", "default", 20)]
    short, long = _medium(lm_rows, 20), _medium(lm_rows, 150)
    # as measured: 19.1 GiB for gpt2-small, 30.6 GiB for gpt2-medium in either window
    assert 15 * 2**30 < small["peak_device_bytes"] < 25 * 2**30
    assert short["peak_device_bytes"] == long["peak_device_bytes"] > 1.4 * small[
        "peak_device_bytes"]


def test_recorded_gpt2_medium_meets_the_mfu_goal(lm_rows):
    """MFU = model FLOP/s per device over the H200's dense bf16 peak in orch's table; goal
    MFU >= 40 % for gpt2-medium (scripts/gpu-check): 40.1 % in the 20-step window, 40.7 % in
    the 150-step one at working power. gpt2-small reached 31.4 %."""
    peak, source = peaks.lookup("NVIDIA H200", "bf16")
    assert peak == 989.4e12 and "H200" in source
    for steps in (20, 150):
        r = _medium(lm_rows, steps)
        assert r["mfu"] >= 0.40 and r["mfu_reason"] is None, steps
        assert r["peak_flops_per_device"] == peak
        assert r["model_flops_per_s_per_device"] == pytest.approx(r["mfu"] * peak, rel=1e-9)
        assert r["model_flops_per_s_per_device"] == pytest.approx(
            r["samples_per_s"] * r["flops_per_sample"], rel=1e-3)
        assert r["tokens_per_sample"] == SEQUENCE
        assert r["tokens_per_s"] == pytest.approx(r["samples_per_s"] * SEQUENCE, rel=1e-9)
        assert r["flops_basis"] == "6N + 12LHQT per token (PaLM)"
    small = lm_rows[("gpt2-small", "bf16", "nchw", "default", 20)]
    assert 0.30 < small["mfu"] < _medium(lm_rows, 20)["mfu"] - 0.05
    assert small["tokens_per_s"] == pytest.approx(small["samples_per_s"] * SEQUENCE, rel=1e-9)
    # the two gpt2-medium windows agree (163,808 and 166,198 tokens/s)
    assert _medium(lm_rows, 150)["tokens_per_s"] == pytest.approx(
        _medium(lm_rows, 20)["tokens_per_s"], rel=0.03)


def test_recorded_long_windows_ran_at_working_power(lm_rows):
    """The 150-step windows (after 60 warm-up steps) had steady power: ResNet-50's rose 0.4 %
    and 0.6 %, gpt2-medium's 0.04 %, so their energy is not flagged. Every 20-step window
    (5 warm-up steps) still rose past results.devices.POWER_RISE (ResNet-18 compiled 14 % and
    25 %, gpt2-medium 58 %, gpt2-small 161 %) and is."""
    for key, r in lm_rows.items():
        if r["iterations_measured"] == 150:
            assert r["warmup"] == 60 and r["power_rising"] is False, key
            assert 0 <= r["power_rise"] < 0.02, key
            # at steady power, the energy counter agrees with mean power x the window's time
            assert r["energy_per_sample_j"] == pytest.approx(
                r["power_mean_w"] / r["samples_per_s"], rel=0.02), key
        else:
            assert r["warmup"] == 5 and r["power_rising"] is True, key
            assert r["power_rise"] > devices.POWER_RISE, key
    for model in ("gpt2-small", "gpt2-medium"):
        assert lm_rows[(model, "bf16", "nchw", "default", 20)]["power_rise"] > 0.5


def test_recorded_energy_per_sample_at_working_power(lm_rows):
    fp32 = lm_rows[("resnet50", "fp32", "nchw", "no", 150)]
    bf16 = lm_rows[("resnet50", "bf16", "nhwc", "no", 150)]
    assert fp32["energy_basis"] == bf16["energy_basis"] == "counter"
    # as measured: 0.680 J a sample (863 samples/s at 586 W) against 0.139 J (4,018 at 559 W)
    assert bf16["energy_per_sample_j"] < fp32["energy_per_sample_j"] / 3
    assert 0.5 < fp32["energy_per_sample_j"] < 0.9 and bf16["samples_per_s"] > 4 * fp32[
        "samples_per_s"]
    medium = _medium(lm_rows, 150)  # 4.23 J a sample at 692 W: 4.1 mJ a token
    assert 3.5e-3 < medium["energy_per_sample_j"] / SEQUENCE < 5e-3
    assert medium["throttle_reasons"] == "sw_power_cap" and medium["power_mean_w"] > 650


def test_recorded_compiled_runs_time_their_compile(lm_rows):
    for key, r in lm_rows.items():
        if r["compile"] == "default":
            assert 15 < r["t_compile"] < 60, key  # 21-41 s as measured
        else:
            assert r["t_compile"] is None, key
    # gpt2-medium took about twice gpt2-small's compile (40.7 s against 21.0)
    assert _medium(lm_rows, 20)["t_compile"] > 1.5 * lm_rows[
        ("gpt2-small", "bf16", "nchw", "default", 20)]["t_compile"]
    # compiled ResNet-18 bf16 NHWC: 20 steps in 0.36 s, shorter than the sampling interval
    fast = lm_rows[("resnet18", "bf16", "nhwc", "default", 20)]
    assert fast["energy_per_sample_j"] is None
    assert "shorter than the sampling interval" in fast["energy_reason"]


def test_recorded_lm_fidelity_rounds_miss_the_goal():
    """The fidelity-lm step's rounds, read back from its log: orch's torch-ddp loop ran at
    0.950 of the native nanoGPT-style twin on gpt2-small (bf16 + compile), each of 3 rounds
    under the goal, as its result file under benchmarks/results/fidelity says."""
    from benchmarks import fidelity

    rounds = fidelity.rounds_from_log((LM / "logs" / "fidelity-lm.log").read_text())
    [row] = fidelity.summarize(rounds)
    assert (row["mode"], row["model"], row["rounds"]) == ("torch-ddp", "gpt2-small", 3)
    assert 0.92 < row["min"] <= row["max"] < fidelity.GOAL
    assert fidelity.verdict(row["ratio"], row["low"], row["high"]) == (
        "NOT met (interval wholly under 0.97)")
    recorded = json.loads((Path(__file__).resolve().parents[1] / "benchmarks" / "results"
                           / "fidelity" / "2026-11-28-60896c7.json").read_text())
    assert recorded["figures"]["torch-ddp/gpt2-small"] == pytest.approx(row["ratio"], abs=1e-3)
