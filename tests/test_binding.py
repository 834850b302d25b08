"""Where each rank was bound (the header's ``binding``, rankside.sampler.probe) as result-set
columns (results/devices.py): the GPU index of every rank, and why a rank had none.

The GPU side comes from recordings: NVML's answers from one NVIDIA H200
(tests/fixtures/nvml/h200.json, made by scripts/nvml-record, replayed by tests/fake_pynvml.py)
and the two runs whose ranks ran on that GPU (tests/fixtures/gpu-h200-devmetrics, kept from
scripts/gpu-check). Real CPU ranks record theirs too: tests/test_devmetrics.py checks ranks
started by the local launcher, tests/test_torchrun.py ranks started by torchrun.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from orchestrator import protocol
from orchestrator.rankside import sampler as smp
from orchestrator.results import devices

from .conftest import run_orch
from .fake_pynvml import FakeNvml

RECORDED_RUNS = Path(__file__).parent / "fixtures" / "gpu-h200-devmetrics"


def _log(task: int, binding: dict) -> protocol.RankLog:
    return protocol.RankLog(task, header={"type": "header", "node": "n1",
                                          protocol.BINDING: binding}, footer={})


def test_a_rank_on_a_gpu_has_no_reason_and_one_without_says_why(tmp_path):
    on_gpu = smp.probe(0, {"CUDA_VISIBLE_DEVICES": "0"}, nvml=FakeNvml(),
                      powercap=str(tmp_path / "none")).binding
    assert on_gpu["gpu_index"] == 0 and on_gpu["gpu_reason"] is None
    hidden = smp.probe(0, {"CUDA_VISIBLE_DEVICES": ""}, nvml=FakeNvml(),
                      powercap=str(tmp_path / "none")).binding
    assert hidden["gpu_index"] is None and hidden["gpu_pci_bus_id"] is None
    assert hidden["gpu_reason"].startswith("no GPU: ") and "hides every GPU" in \
        hidden["gpu_reason"]


def test_gpu_index_and_reason_columns():
    """GPU 0 is shown as 0 (not as an empty value), and ranks without a GPU give the run
    their distinct reasons."""
    gpu = {"gpu_index": 0, "gpu_reason": None, "cuda_visible_devices": "0,1"}
    out = devices.run_facts([_log(0, gpu), _log(1, dict(gpu, gpu_index=1))])
    assert out["gpu_indices"] == "0:0 1:1" and out["gpu_reason"] is None
    why = "no NVML: pynvml (nvidia-ml-py) is not installed"
    cpu = {"gpu_index": None, "gpu_reason": why, "cuda_visible_devices": ""}
    out = devices.run_facts([_log(0, cpu), _log(1, cpu)])
    assert out["gpu_indices"] is None and out["gpu_reason"] == why
    assert out["cuda_visible_devices"] == '0:"" 1:""'  # set and empty: every GPU hidden
    assert devices.run_facts([_log(0, {})])["gpu_indices"] is None  # logs from before


def test_recorded_gpu_runs_give_each_ranks_gpu(tmp_path):
    sweep = tmp_path / "gpu"
    shutil.copytree(RECORDED_RUNS, sweep)
    rows = json.loads(run_orch("results", sweep, "--format", "json", check=True).stdout)
    by_ranks = {r["ranks"]: r for r in rows}
    assert by_ranks[1]["gpu_indices"] == "0:0"
    assert by_ranks[2]["gpu_indices"] == "0:0 1:0"  # two ranks sharing the one GPU
    for row in rows:
        assert row["gpu_pci_bus_ids"] == "00000000:00:06.0"
        assert row["gpu_reason"] is None  # recorded before the field: absent, not a reason
