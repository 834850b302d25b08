"""Device metrics and binding (rankside.energy, .binding, .sources, .sampler;
orchestrator.results.devices), on this CPU machine.

NVML's answers come from a recording made on one NVIDIA H200 (tests/fake_pynvml.py replays
tests/fixtures/nvml/h200.json); tests/fixtures/gpu-h200-devmetrics holds two runs whose ranks
sampled that GPU for real. RAPL is a fake sysfs tree in tmp_path. No assertion depends on how
fast this machine is: the sampler takes a sample when it starts and one when it stops, so a
window has at least two whatever the period, and nothing counts samples per second.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from orchestrator import protocol
from orchestrator.rankside import binding as bnd
from orchestrator.rankside import energy as en
from orchestrator.rankside import sampler as smp
from orchestrator.rankside import sources as src
from orchestrator.results import devices

from .conftest import run_orch
from .fake_pynvml import FakeNvml

RECORDED_RUNS = Path(__file__).parent / "fixtures" / "gpu-h200-devmetrics"


# --- pure parts -----------------------------------------------------------------------------

def test_throttle_bitmask_decodes_to_names():
    assert src.throttle_names(0) == [] and src.throttle_names(None) == []
    assert src.throttle_names(0x1) == ["gpu_idle"]  # what the recorded H200 said when idle
    assert src.throttle_names(0x4) == ["sw_power_cap"]  # ... and under load
    assert src.throttle_names(0x1 | 0x40) == ["gpu_idle", "hw_thermal_slowdown"]
    assert src.throttle_names(0x800 | 0x8) == ["hw_slowdown", "0x800"]  # a bit NVML adds later


def test_counter_delta_wraps_once_at_its_range():
    assert en.counter_delta(100, 250, 1000) == 150
    assert en.counter_delta(990, 15, 1000) == 25  # past max_energy_range_uj and on from 0
    assert en.counter_delta(990, 15, None) == -975  # no range known: never guessed


def test_energy_from_the_counter_else_from_integrated_power():
    # NVML's counter (mJ) wins where every sample has it: 3.5 J, whatever the power says.
    samples = [{"t": 0.0, "energy_mj": 1000, "power_w": 100.0},
               {"t": 1.0, "energy_mj": 2500, "power_w": 100.0},
               {"t": 2.0, "energy_mj": 4500, "power_w": 300.0}]
    assert en.window_energy(samples) == (pytest.approx(3.5), "counter")
    # One sample without it: trapezoids of power over time, 100 W for 1 s + 100→300 W for 1 s.
    samples[1]["energy_mj"] = None
    assert en.window_energy(samples) == (pytest.approx(300.0), "integrated power")
    assert en.window_energy([{"t": 0.0}, {"t": 1.0}]) == (None, None)
    assert en.window_energy([{"t": 0.0, "energy_mj": 5}]) == (None, None)  # one sample: none


def test_window_energy_is_edge_energy_over_the_samples_span():
    # The footer's energy over all its samples and the energy between the window's edges are
    # one computation: with the edges at the first and last sample they agree, counter or
    # power; an NVML counter that went back (a driver reload) is not a counter for either.
    samples = [{"t": 0.0, "energy_mj": 1000, "power_w": 100.0},
               {"t": 1.0, "energy_mj": 2500, "power_w": 100.0},
               {"t": 2.0, "energy_mj": 4500, "power_w": 300.0}]
    for case in (samples, [dict(s, energy_mj=None) for s in samples],
                 [dict(s, energy_mj=e) for s, e in zip(samples, (1000, 2500, 400), strict=True)]):
        joules, basis = en.window_energy(case)
        assert en.edge_energy(case, 0.0, 2.0, period=0.5) == (pytest.approx(joules), basis, None)
    assert en.window_energy(case) == (pytest.approx(300.0), "integrated power")
    assert en.counter_total([{"t": 0.0, "nvlink_tx_kib": 9}, {"t": 1.0, "nvlink_tx_kib": 4}],
                            "nvlink_tx_kib", 1.0) is None  # went back: no total, not -5


def test_rapl_energy_sums_packages_and_survives_a_wraparound():
    ranges = {"intel-rapl:0": 1000, "intel-rapl:1": 1000}
    samples = [{"t": 0.0, "rapl_uj": {"intel-rapl:0": 900, "intel-rapl:1": 10}},
               {"t": 1.0, "rapl_uj": {"intel-rapl:0": 100, "intel-rapl:1": 60}},  # 0 wrapped
               {"t": 2.0, "rapl_uj": {"intel-rapl:0": 300, "intel-rapl:1": 160}}]
    joules, basis = en.window_energy(samples, ranges)
    assert basis == "counter" and joules == pytest.approx((200 + 200 + 50 + 100) * 1e-6)


def test_aggregate_says_why_when_nothing_was_read():
    out = smp.aggregate([{"t": 1.0, "cpu_util": None}, {"t": 2.0, "cpu_util": 50.0}],
                       {"source": None, "reason": "no NVML: x; no RAPL: y"})
    assert out["samples"] == 2 and out["cpu_util_mean"] == 50.0
    assert out["energy_j"] is None and out["energy_basis"] is None
    assert out["reason"] == "no NVML: x; no RAPL: y"


def test_cpulists_and_numa_nodes(tmp_path):
    assert bnd.parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert bnd.parse_cpulist("\n") == []  # a NUMA node without CPUs
    for bad in ("0-3,,8", "1-", "a", "0-3;8"):
        with pytest.raises(ValueError, match="not a CPU list"):
            bnd.parse_cpulist(bad)
    assert bnd.compact_cpus([8, 0, 1, 2, 3, 10, 11]) == "0-3,8,10-11"
    assert bnd.compact_cpus([5]) == "5"
    for node, cpus in (("node0", "0-3"), ("node1", "4-7")):
        (tmp_path / node).mkdir()
        (tmp_path / node / "cpulist").write_text(cpus + "\n")
    (tmp_path / "node2").mkdir()
    (tmp_path / "node2" / "cpulist").write_text("\n")  # memory only, no CPUs
    (tmp_path / "possible").write_text("0-1\n")  # not a node
    assert bnd.numa_nodes([0, 1], str(tmp_path)) == [0]
    assert bnd.numa_nodes([3, 4], str(tmp_path)) == [0, 1]
    assert bnd.numa_nodes([0], str(tmp_path / "absent")) is None


@pytest.mark.parametrize("env,local_rank,count,expected", [
    (None, 3, 2, ("index", 1)),  # no CUDA_VISIBLE_DEVICES: round-robin over NVML's devices
    ("2,5", 1, 8, ("index", 5)),
    ("GPU-b2895d9d-ff0f-948b-82b4-aaff32f4a8b8", 0, 1,
     ("uuid", "GPU-b2895d9d-ff0f-948b-82b4-aaff32f4a8b8")),
    ("1,-1,0", 1, 2, ("index", 1)),  # CUDA stops at the first invalid entry
])
def test_visible_gpu_follows_cuda_visible_devices(env, local_rank, count, expected):
    assert bnd.visible_gpu(env, local_rank, count) == expected


@pytest.mark.parametrize("env,count", [("", 1), ("-1", 1), (None, 0)])
def test_visible_gpu_none_says_why(env, count):
    kind, why = bnd.visible_gpu(env, 0, count)
    assert kind is None and ("hides every GPU" in why or "no GPU" in why)


# --- NVML, replayed from the H200 recording ------------------------------------------------

def test_nvml_samples_replay_the_recorded_h200():
    nvml = FakeNvml()
    recorded = nvml.samples
    source, why = src.open_nvml(0, {"CUDA_VISIBLE_DEVICES": "0"}, nvml)
    assert why is None and nvml.initialised
    samples = [dict(source.sample(), t=float(i)) for i in range(len(recorded))]
    out = smp.aggregate(samples, {"source": "nvml", "device_id": source.device_id()})
    assert out["device_id"] == "gpu:00000000:00:06.0"
    util = [c["nvmlDeviceGetUtilizationRates"]["gpu"] for c in recorded]
    assert out["gpu_util_mean"] == pytest.approx(sum(util) / len(util))
    assert out["power_max_w"] == pytest.approx(
        max(c["nvmlDeviceGetPowerUsage"] for c in recorded) / 1000)  # mW -> W
    energy = [c["nvmlDeviceGetTotalEnergyConsumption"] for c in recorded]
    assert out["energy_basis"] == "counter"
    assert out["energy_j"] == pytest.approx((energy[-1] - energy[0]) / 1000)  # mJ -> J
    assert out["throttle_reasons"] == ["gpu_idle", "sw_power_cap"]  # idle, then power-capped
    assert out["sm_clock_mean_mhz"] > 0 and out["temp_max_c"] >= 39
    assert source.unread == {"nvlink": "NVLink throughput fields not supported"}
    assert out["nvlink_tx_kib"] is None  # the recorded GPU answered NOT_SUPPORTED


def test_nvml_without_an_energy_counter_integrates_power():
    # The recording, with the energy counter answering as GPUs before Volta do (NVML's docs:
    # nvmlDeviceGetTotalEnergyConsumption is Volta and newer): "Not Supported".
    nvml = FakeNvml(answers={"nvmlDeviceGetTotalEnergyConsumption": [{"error": "Not Supported"}]})
    source, _ = src.open_nvml(0, {}, nvml)
    samples = [dict(source.sample(), t=float(i)) for i in range(4)]
    out = smp.aggregate(samples, {"source": "nvml"})
    assert out["energy_basis"] == "integrated power" and out["energy_j"] > 0
    assert source.unread["energy"] == "Not Supported"
    assert nvml.cursor.get("nvmlDeviceGetTotalEnergyConsumption") == 1  # not asked again


def test_probe_binds_the_rank_to_its_gpu_and_cpus(tmp_path):
    found = smp.probe(0, {"CUDA_VISIBLE_DEVICES": "0"}, nvml=FakeNvml(),
                     powercap=str(tmp_path / "none"))
    assert found.source.name == "nvml" and found.reason is None
    b = found.binding
    assert (b["cuda_visible_devices"], b["gpu_index"], b["gpu_pci_bus_id"], b["gpu_name"]) == \
        ("0", 0, "00000000:00:06.0", "NVIDIA H200")
    assert bnd.parse_cpulist(b["cpu_affinity"]) == sorted(os.sched_getaffinity(0))
    hidden = smp.probe(0, {"CUDA_VISIBLE_DEVICES": ""}, nvml=FakeNvml(),
                      powercap=str(tmp_path / "none"))
    assert hidden.source is None and hidden.binding["gpu_index"] is None
    assert "hides every GPU" in hidden.reason and "no RAPL" in hidden.reason


# --- RAPL on a fake sysfs tree --------------------------------------------------------------

def _powercap(root: Path, zones: dict) -> Path:
    for zone, (energy, top) in zones.items():
        (root / zone).mkdir(parents=True, exist_ok=True)
        (root / zone / "energy_uj").write_text(f"{energy}\n")
        (root / zone / "max_energy_range_uj").write_text(f"{top}\n")
    return root


def test_rapl_source_reads_package_zones_only(tmp_path, monkeypatch):
    clock = iter([100.0, 102.0])  # two readings 2 s apart, whatever this machine's clock does
    monkeypatch.setattr(src, "time", SimpleNamespace(time=lambda: next(clock)))
    root = _powercap(tmp_path / "powercap", {"intel-rapl:0": (900, 1000),
                                             "intel-rapl:0:0": (5, 1000),  # a part of it
                                             "intel-rapl:1": (10, 1000)})
    source, why = src.open_rapl(str(root))
    assert why is None and source.zones == ["intel-rapl:0", "intel-rapl:1"]
    first = dict(source.sample(), t=0.0)
    _powercap(root, {"intel-rapl:0": (100, 1000), "intel-rapl:1": (60, 1000)})
    last = dict(source.sample(), t=1.0)
    joules, basis = en.window_energy([first, last], source.ranges)
    assert basis == "counter" and joules == pytest.approx(250e-6)
    assert first["power_w"] is None  # power: the slope since the last reading
    assert last["power_w"] == pytest.approx(250e-6 / 2)
    assert src.rapl_power_w((10.0, {"z": 990}), (12.0, {"z": 10}), {"z": 1000}) == \
        pytest.approx(10e-6)  # 20 µJ across the wrap in 2 s


def test_rapl_absent_or_unreadable_says_why(tmp_path, monkeypatch):
    assert src.open_rapl(str(tmp_path / "nope")) == (
        None, f"no RAPL: {tmp_path / 'nope'} absent")
    root = _powercap(tmp_path / "powercap", {"intel-rapl:0": (1, 1000)})
    real = src.read_int

    def denied(path):  # root reads a mode-000 file anyway: the kernel's refusal, simulated
        if path.endswith("energy_uj"):
            raise PermissionError(13, "Permission denied", path)
        return real(path)

    monkeypatch.setattr(src, "read_int", denied)
    source, why = src.open_rapl(str(root))
    assert source is None and why.startswith("no RAPL: permission denied")


# --- the sampler thread ---------------------------------------------------------------------

class _CountingSource:
    name, unread = "fake", {}

    def __init__(self):
        self.n = 0

    def device_id(self):
        return "fake:0"

    def sample(self):
        self.n += 1
        return {"power_w": 100.0, "energy_mj": 1000 * self.n}


def test_sampler_writes_a_sample_at_start_and_stop(tmp_path):
    path = tmp_path / protocol.device_log_name(3)
    found = smp.Probe(_CountingSource(), None, {})
    sampler = smp.Sampler(str(path), found, period=3600.0).start()  # one, then waits
    out = sampler.stop(window_samples=640)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0]["type"] == "meta" and lines[0]["source"] == "fake"
    samples = [rec for rec in lines if rec["type"] == "sample"]
    assert len(samples) >= 2 and out["samples"] == len(samples) == found.source.n
    # The first sample before the window, the last after it: its edges lie between samples.
    start, end = out["window"]
    assert samples[0]["t"] <= start <= end <= samples[-1]["t"]
    # No sample inside a window shorter than the period: no energy, and why.
    assert out["energy_j"] is None and out["energy_reason"] == en.SHORT_WINDOW
    assert out["window_samples"] == 640 and out["source"] == "fake"
    assert not sampler._thread.is_alive()


def test_a_long_window_is_folded_into_the_same_aggregates(tmp_path, monkeypatch):
    samples = [{"t": float(i), "power_w": 100.0 + 10 * (i % 3), "energy_mj": 1000 * i,
                "gpu_util": 50, "throttle_reasons": ["sw_power_cap"] if i == 1 else []}
               for i in range(7)]
    whole = smp.aggregate(samples, {})
    folded = smp.combine(smp.aggregate(samples[:3], {}), smp.aggregate(samples[2:], {}))
    for key in ("samples", "seconds", "energy_j", "energy_basis", "power_max_w",
                "throttle_reasons", "gpu_util_mean"):
        assert folded[key] == whole[key], key
    assert folded["power_mean_w"] == pytest.approx(whole["power_mean_w"], rel=0.05)
    # The sampler folds every MAX_KEPT samples; its footer still counts every sample once.
    monkeypatch.setattr(smp, "MAX_KEPT", 2)
    path = tmp_path / protocol.device_log_name(0)
    sampler = smp.Sampler(str(path), smp.Probe(_CountingSource(), None, {}), period=3600.0)
    sampler.start()
    out = sampler.stop(window_samples=1)
    written = [line for line in path.read_text().splitlines() if '"sample"' in line]
    assert out["samples"] == len(written) >= 2 and out["energy_j"] > 0


def test_sampler_never_fails_its_rank(tmp_path):
    assert smp.start_sampler(str(tmp_path / "no" / "such" / "dir"), 0, 0) is None
    assert smp.stop_sampler(None, 10) is None


# --- the result set: from written logs, from the recorded GPU runs, from a real local run -----

def _log(task, node, metrics, binding):
    return protocol.RankLog(rank=task, header={"type": "header", "node": node,
                                               protocol.BINDING: binding},
                            footer={"type": "footer", "status": "ok",
                                    protocol.DEVICE_METRICS: metrics})


def _metrics(device, energy, samples, **extra):
    return {"source": "nvml", "device_id": device, "energy_j": energy, "energy_basis": "counter",
            "window_samples": samples, "power_mean_w": 300.0, "power_max_w": 400.0,
            "gpu_util_mean": 80.0, "samples": 5, "throttle_reasons": ["sw_power_cap"],
            "reason": None, **extra}


def test_run_columns_count_a_shared_device_once():
    gpu = {"cpu_affinity": "0-3", "numa_nodes": [0], "cuda_visible_devices": "0",
           "gpu_pci_bus_id": "00000000:00:06.0"}
    logs = [_log(0, "n1", _metrics("gpu:A", 1000.0, 6400), gpu),
            _log(1, "n1", _metrics("gpu:A", 1010.0, 6400), dict(gpu, cpu_affinity="4-7")),
            _log(2, "n2", _metrics("gpu:A", 500.0, 6400,  # same bus id, another node
                                   throttle_reasons=["gpu_idle"]), dict(gpu, numa_nodes=[1]))]
    out = devices.run_facts(logs)
    assert set(out) == set(devices.RUN_COLUMNS)
    assert out["energy_j"] == 1500.0  # n1's GPU once (its lowest task's), n2's
    assert out["energy_per_sample_j"] == pytest.approx(1500.0 / (3 * 6400))
    assert out["power_max_w"] == 400.0 and out["energy_basis"] == "counter"
    assert out["throttle_reasons"] == "gpu_idle,sw_power_cap"
    assert out["cpu_affinity"] == "0:0-3 1:4-7 2:0-3" and out["numa_nodes"] == "0,1"
    assert out["gpu_pci_bus_ids"] == "00000000:00:06.0"


def test_run_columns_without_energy_stay_null():
    cpu = {"source": None, "device_id": None, "energy_j": None, "window_samples": 640,
           "samples": 2, "cpu_util_mean": 40.0,
           "reason": "no NVML: pynvml (nvidia-ml-py) is not installed; no RAPL: x absent"}
    out = devices.run_facts([_log(0, "n1", cpu, {"cpu_affinity": "0-1"}),
                             _log(1, "n1", dict(cpu, cpu_util_mean=60.0), {})])
    assert out["energy_j"] is None and out["energy_per_sample_j"] is None
    assert out["cpu_util_mean"] == 50.0 and out["device_samples"] == 4
    assert out["device_metrics_reason"].startswith("no NVML")
    partial = devices.run_facts([_log(0, "n1", _metrics("gpu:A", 10.0, 64), {}),
                                 _log(1, "n2", cpu, {})])
    assert partial["energy_j"] is None  # one rank's device unread: no partial energy
    assert devices.run_facts([_log(0, "n1", {}, {})])["device_source"] is None  # old logs


@pytest.fixture(scope="module")
def recorded_rows(tmp_path_factory):
    sweep = tmp_path_factory.mktemp("dm") / "gpu"
    shutil.copytree(RECORDED_RUNS, sweep)
    rows = json.loads(run_orch("results", sweep, "--format", "json", check=True).stdout)
    return {r["ranks"]: r for r in rows}, sweep


def test_recorded_h200_runs_give_energy_per_sample(recorded_rows):
    rows, sweep = recorded_rows
    for ranks, row in rows.items():
        assert row["state"] == "COMPLETED" and row["device_source"] == "nvml"
        assert row["energy_basis"] == "counter" and row["energy_j"] > 0
        assert row["power_max_w"] >= row["power_mean_w"] > 80  # above the idle 80 W
        assert 0 < row["gpu_util_mean"] <= 100 and row["device_samples"] >= 2 * ranks
        assert row["gpu_pci_bus_ids"] == "00000000:00:06.0" and row["numa_nodes"] == "0"
        logs = [protocol.read_rank_log(p) for _, p in protocol.rank_logs(
            sweep / row["run_id"] / protocol.RANKS_DIR)]
        footers = [log.footer[protocol.DEVICE_METRICS] for log in logs]
        window = sum(f["window_samples"] for f in footers)
        assert window == row["iterations_measured"] * row["batch_size"] * ranks
        # Two ranks on one GPU: its energy once, over both ranks' samples.
        assert row["energy_j"] == pytest.approx(footers[0]["energy_j"])
        assert row["energy_per_sample_j"] == pytest.approx(row["energy_j"] / window)
    assert rows[2]["cuda_visible_devices"] == "0:0 1:0"


def test_report_shows_device_energy_and_survives_cpu_runs(recorded_rows, tmp_path):
    from orchestrator.report import devices as report_devices

    rows, _ = recorded_rows
    runs = pd.DataFrame(list(rows.values()))
    table = report_devices.table(runs)
    assert table is not None and len(table.rows) == 2
    # both recorded windows (devmetrics-fixture H200 runs) began with the GPU's power rising
    per_sample = table.columns.index("mJ per sample")
    assert all(row[per_sample].endswith(" (power rising)") for row in table.rows)
    assert report_devices.figure(runs)[:4] == b"\x89PNG"
    cpu = runs.assign(energy_j=None, energy_per_sample_j=None, device_source=None,
                      power_mean_w=None, power_max_w=None, gpu_util_mean=None)
    assert report_devices.figure(cpu) is None
    assert report_devices.table(cpu) is not None  # the why is worth a row
    assert report_devices.table(pd.DataFrame()) is None


@pytest.mark.ranks
def test_local_run_records_binding_and_device_log(tmp_path):
    out = tmp_path / "sweep"
    run_orch("sweep", "--nodes", "2", "--iters", 4, "--warmup", 1, "--out", out, check=True)
    [row] = json.loads(run_orch("results", out, "--format", "json", check=True).stdout)
    ranks = out / row["run_id"] / protocol.RANKS_DIR
    for task in range(2):
        log = protocol.read_rank_log(ranks / protocol.rank_log_name(task))
        binding = log.header[protocol.BINDING]
        assert set(binding) >= {"cuda_visible_devices", "gpu_index", "gpu_pci_bus_id",
                                "cpu_affinity", "numa_nodes"}
        assert bnd.parse_cpulist(binding["cpu_affinity"])  # a cpulist, not empty
        metrics = log.footer[protocol.DEVICE_METRICS]
        assert metrics["samples"] >= 2 and metrics["window_samples"] == 4 * row["batch_size"]
        lines = (ranks / protocol.device_log_name(task)).read_text().splitlines()
        assert len(lines) == 1 + metrics["samples"]  # the meta line, then every sample
        if metrics["energy_j"] is None:
            assert log.footer[protocol.DEVICE_METRICS_REASON] or metrics["reason"]
    assert row["cpu_affinity"].startswith("0:") and " 1:" in row["cpu_affinity"]
    assert row["device_samples"] >= 4


@pytest.mark.parametrize(("powers", "rise"), [
    ([150.0, 300.0, 450.0, 550.0], 550 / 150 - 1),  # a GPU waking up: the first vs last sample
    ([600.0, 610.0, 605.0, 598.0], 598 / 600 - 1),  # steady
    ([200.0] * 4 + [400.0] * 4, 1.0),  # quarters of two samples each
    ([300.0, 320.0], 320 / 300 - 1), ([300.0], None), ([], None), ([0.0, 10.0], None)])
def test_window_rise_compares_the_last_quarter_of_power_samples_with_the_first(powers, rise):
    got = devices.window_rise(powers)
    assert got == (None if rise is None else pytest.approx(rise))
    flagged = got is not None and got > devices.POWER_RISE
    assert flagged == (rise is not None and rise > 0.1)


def test_power_rise_reads_each_devices_log_once(tmp_path):
    """A device shared by two ranks: its lowest task's device log; an unreadable sample line
    or one without power is left out."""
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for task, powers in ((0, [200, 420, 550]), (1, [900, 100, 50])):
        lines = [json.dumps({"type": "meta", "device_id": "gpu:A"})]
        lines += [json.dumps({"type": "sample", "t": 1.0 + i, "power_w": p})
                  for i, p in enumerate(powers)]
        (ranks / protocol.device_log_name(task)).write_text(
            "\n".join([*lines, '{"type":"sample","t":9', '{"type":"sample","t":9.5}']) + "\n")
    logs = [_log(0, "n1", _metrics("gpu:A", 10.0, 64), {}),
            _log(1, "n1", _metrics("gpu:A", 10.0, 64), {})]
    out = devices.run_facts(logs, ranks)
    assert out["power_rise"] == pytest.approx(550 / 200 - 1) and out["power_rising"] is True
    assert devices.run_facts(logs)["power_rise"] is None  # no device logs given: not known


# --- the PCIe counters: ~20 ms each in the driver, off unless asked, then read apart ---------

def test_pcie_counters_are_off_by_default_and_say_why(tmp_path):
    nvml = FakeNvml()
    source, _ = src.open_nvml(0, {}, nvml)
    assert source.pcie is False and "pcie_tx_kb_s" not in source.sample()
    sampler = smp.Sampler(str(tmp_path / "device-0.jsonl"), smp.Probe(source, None, {}),
                         period=3600.0).start()
    out = sampler.stop(window_samples=64)
    assert out["pcie_reason"] == src.PCIE_OFF and out["pcie_tx_mean_kb_s"] is None
    assert not any(name.startswith("nvmlDeviceGetPcieThroughput") for name in nvml.cursor)


def test_pcie_counters_apart_are_read_in_their_own_thread(tmp_path):
    """ORCH_NVML_PCIE=apart: the PCIe counters in ``pcie`` records of the device log, from a
    thread of their own (its first reading at the window's start, then every PCIE_PERIOD_S);
    the other samples carry none, and the footer has their means."""
    nvml = FakeNvml(answers={"nvmlDeviceGetPcieThroughput/TX": [1000, 3000],
                             "nvmlDeviceGetPcieThroughput/RX": [500, 700]})
    source, _ = src.open_nvml(0, {src.PCIE_ENV: "apart"}, nvml)
    assert source.pcie is True
    path = tmp_path / "device-0.jsonl"
    sampler = smp.Sampler(str(path), smp.Probe(source, None, {}), period=3600.0).start()
    out = sampler.stop(window_samples=64)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    pcie = [rec for rec in lines if rec["type"] == "pcie"]
    samples = [rec for rec in lines if rec["type"] == "sample"]
    assert len(pcie) >= 1 and all("pcie_tx_kb_s" not in rec for rec in samples)
    assert out["pcie_samples"] == len(pcie) and "pcie_reason" not in out
    tx = [rec["pcie_tx_kb_s"] for rec in pcie]
    assert out["pcie_tx_mean_kb_s"] == pytest.approx(sum(tx) / len(tx))
    assert tx[0] == 1000 and pcie[0]["pcie_rx_kb_s"] == 500
    # the merge's device samples leave the PCIe records out: they are no power samples
    assert len(devices.read_device_log(path)) == len(samples)
