"""What the device did over time: energy at the measured window's exact edges
(rankside.energy.edge_energy), the samples in the result set (results/devices.parquet) and
the report's timeline (report.devices.timeline).

Synthetic sample series whose answer is known exactly; the recorded H200 runs of
tests/fixtures/gpu-h200-devmetrics (two torch-ddp ResNet-18 runs whose ranks sampled one
NVIDIA H200 through NVML, see its README); and a real CPU run of the local site. No assertion
depends on how fast this machine is: the CPU run is asked for its figure, not for a count of
samples per second.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from orchestrator import protocol, results
from orchestrator.rankside import energy as en
from orchestrator.report import devices as report_devices
from orchestrator.results import cache, devices

from .conftest import run_orch

RECORDED_RUNS = Path(__file__).parent / "fixtures" / "gpu-h200-devmetrics"
PERIOD = 0.5


def _series(power, t_end: float = 5.0, counter=None) -> list[dict]:
    """Samples every PERIOD s from 0 to t_end: power(t) W, and the counter(t) the caller
    gives (its own units), or NVML's mJ of the power's exact integral where ``counter`` is
    None and ``power`` is a constant."""
    out = []
    for i in range(int(t_end / PERIOD) + 1):
        t = i * PERIOD
        sample = {"t": t, "power_w": power(t)}
        sample.update(counter(t) if counter else {"energy_mj": round(power(0) * t * 1000)})
        out.append(sample)
    return out


# --- energy at the window's edges: exact answers ---------------------------------------------

def test_constant_power_counter_is_read_at_the_edges_not_at_the_nearest_samples():
    samples = _series(lambda t: 200.0)
    # [1.2, 3.7] s at 200 W is 500 J; the samples nearest inside it (1.5, 3.5) would say 400.
    assert en.edge_energy(samples, 1.2, 3.7) == (pytest.approx(500.0), "counter", None)
    no_counter = [dict(s, energy_mj=None) for s in samples]
    assert en.edge_energy(no_counter, 1.2, 3.7) == (
        pytest.approx(500.0), "integrated power", None)


def test_a_linear_ramp_integrates_exactly_with_clipped_trapezoids():
    ramp = _series(lambda t: 100.0 + 20.0 * t, counter=lambda t: {})
    # ∫ 100 + 20 t dt over [0.7, 3.3] = 100 · 2.6 + 10 · (3.3² − 0.7²) = 364 J.
    assert en.edge_energy(ramp, 0.7, 3.3) == (pytest.approx(364.0), "integrated power", None)
    # The counter of that ramp (100 t + 10 t² J, in mJ): exact at sample times, and between
    # them linear interpolation of a parabola is off by at most 10 · PERIOD² / 4 J an edge.
    counted = _series(lambda t: 100.0 + 20.0 * t,
                      counter=lambda t: {"energy_mj": (100 * t + 10 * t * t) * 1000})
    assert en.edge_energy(counted, 1.0, 3.0)[0] == pytest.approx(280.0)
    joules, basis, _ = en.edge_energy(counted, 0.7, 3.3)
    assert basis == "counter" and abs(joules - 364.0) <= 2 * 10 * PERIOD ** 2 / 4


def test_a_rapl_counter_wrapping_inside_the_window():
    wrap = 60_000_000  # µJ: max_energy_range_uj; 50 W wraps it every 1.2 s
    samples = _series(lambda t: None, counter=lambda t: {
        "rapl_uj": {"intel-rapl:0": round(50 * t * 1e6) % wrap}})
    # 50 W over [0.25, 2.75] s: 125 J across two wraparounds.
    assert en.edge_energy(samples, 0.25, 2.75, {"intel-rapl:0": wrap}) == (
        pytest.approx(125.0), "counter", None)


def test_an_nvml_counter_going_back_falls_back_to_power():
    # NVML's counter is an unsigned 64-bit count of mJ since the driver loaded (nvml.h,
    # nvmlDeviceGetTotalEnergyConsumption): it never wraps in practice, and goes back only
    # when the driver reloads; then the counter is not used.
    samples = _series(lambda t: 100.0)
    samples[4]["energy_mj"] = 10
    assert en.edge_energy(samples, 1.0, 4.0) == (pytest.approx(300.0), "integrated power", None)


def test_a_window_shorter_than_the_sampling_interval_has_no_energy():
    samples = _series(lambda t: 200.0)
    for start, end in ((1.1, 1.4), (1.1, 1.6), (2.0, 2.0)):  # no sample inside, or one
        assert en.edge_energy(samples, start, end) == (None, None, en.SHORT_WINDOW)
    assert "raise --iters" in en.SHORT_WINDOW
    assert en.edge_energy(samples, 1.1, 2.1)[0] == pytest.approx(200.0)  # two inside
    # The sampler's own: a sample just before the window and one just after it (its start
    # and stop) hold it, however few come between.
    held = [{"t": t, "energy_mj": 200 * t * 1000} for t in (-0.001, 0.5, 0.902)]
    assert en.edge_energy(held, 0.0, 0.9)[0] == pytest.approx(180.0)
    assert en.edge_energy(held, 0.0, 0.9, period=1.0) == (None, None, en.SHORT_WINDOW)
    nothing = [{"t": s["t"], "cpu_util": 50.0} for s in samples]  # a CPU host without RAPL
    assert en.edge_energy(nothing, 1.1, 1.4) == (None, None, en.NO_ENERGY)


def test_an_edge_past_the_samples_continues_the_nearest_interval():
    # The first sample came just after the window opened: the first interval's power
    # continues back to the edge (and the last one's forward).
    samples = _series(lambda t: 200.0)
    assert en.edge_energy(samples, -0.1, 5.1) == (pytest.approx(1040.0), "counter", None)
    no_counter = [dict(s, energy_mj=None) for s in samples]
    assert en.edge_energy(no_counter, -0.1, 5.1)[0] == pytest.approx(1040.0)


# --- on the recorded H200 runs ---------------------------------------------------------------

def _recorded(run: str, task: int) -> tuple[list[dict], tuple[float, float], dict]:
    """The device samples, the native window's measured edges and the footer's
    device_metrics of one rank of a recorded run."""
    ranks = RECORDED_RUNS / run / protocol.RANKS_DIR
    log = protocol.read_rank_log(ranks / protocol.rank_log_name(task))
    measured = [r for r in log.iters if r.get("window") == protocol.WINDOW_NATIVE
                and not r.get("warmup")]
    edges = (min(r["t_start"] for r in measured),
             max(r["t_start"] + r["t_iter"] for r in measured))
    samples = devices.read_device_log(ranks / protocol.device_log_name(task))
    return samples, edges, log.footer[protocol.DEVICE_METRICS]


@pytest.mark.parametrize("run", sorted(p.name for p in RECORDED_RUNS.iterdir() if p.is_dir()))
def test_recorded_h200_energy_at_the_edges(run):
    samples, (start, end), footer = _recorded(run, 0)
    joules, basis, why = en.edge_energy(samples, start, end)
    assert basis == "counter" and why is None
    # The footer's figure spans first to last sample, which bracket the window by a few ms:
    # the edges' figure is inside it, short of it by at most those ms at twice the top power.
    gaps = (start - samples[0]["t"]) + (samples[-1]["t"] - end)
    assert 0 <= gaps < 0.05
    assert footer["energy_j"] - 2 * footer["power_max_w"] * gaps <= joules <= footer["energy_j"]
    # 0.3 s of it holds no sample: no figure; 2 s of it: the counter's and power's agree
    # within the recorded power's own ramp (NVML's power is a running average).
    assert en.edge_energy(samples, start + 1.0, start + 1.3)[0] is None
    counter = en.edge_energy(samples, start + 1.0, start + 3.0)
    power = en.edge_energy([dict(s, energy_mj=None) for s in samples], start + 1.0, start + 3.0)
    assert counter[1] == "counter" and power[1] == "integrated power"
    assert power[0] == pytest.approx(counter[0], rel=0.1)


def test_recorded_h200_window_under_a_second_keeps_its_energy():
    # tests/fixtures/gpu-h200-dims: ResNet-18, 20 measured iterations, 0.94 s: 3 samples
    # (at the start, inside, at the stop); the counter read at the edges stands.
    ranks = (Path(__file__).parent / "fixtures" / "gpu-h200-dims"
             / "torch-ddp-resnet18-gpu-n1-r0-17f3ea2b" / protocol.RANKS_DIR)
    log = protocol.read_rank_log(ranks / protocol.rank_log_name(0))
    measured = [r for r in log.iters if r.get("window") == protocol.WINDOW_NATIVE
                and not r.get("warmup")]
    start = min(r["t_start"] for r in measured)
    end = max(r["t_start"] + r["t_iter"] for r in measured)
    samples = devices.read_device_log(ranks / protocol.device_log_name(0))
    assert len(samples) == 3 and en.SAMPLE_PERIOD_S <= end - start < 1.0
    joules, basis, _ = en.edge_energy(samples, start, end)
    footer = log.footer[protocol.DEVICE_METRICS]
    assert basis == "counter" and joules == pytest.approx(footer["energy_j"], rel=0.01)


@pytest.fixture(scope="module")
def recorded_sweep(tmp_path_factory):
    sweep = tmp_path_factory.mktemp("dmt") / "gpu"
    shutil.copytree(RECORDED_RUNS, sweep)
    rows = json.loads(run_orch("results", sweep, "--format", "json", check=True).stdout)
    return sweep, rows


def test_merge_keeps_every_device_sample(recorded_sweep):
    sweep, rows = recorded_sweep
    frame = pd.read_parquet(sweep / devices.SAMPLES_FILE)
    assert list(frame.columns) == ["run_id", "task", *devices.SAMPLE_FIELDS]
    for row in rows:
        ranks = sweep / row["run_id"] / protocol.RANKS_DIR
        for task in range(row["ranks"]):
            written = devices.read_device_log(ranks / protocol.device_log_name(task))
            mine = frame[(frame["run_id"] == row["run_id"]) & (frame["task"] == task)]
            assert list(mine["t"]) == [s["t"] for s in written]
            assert list(mine["power_w"]) == [s["power_w"] for s in written]
        assert "energy_reason" in row and row["energy_reason"] is None


def test_a_merge_reads_only_the_device_logs_it_has_not_merged(tmp_path):
    first, second = sorted(RECORDED_RUNS.glob("torch-ddp-*"))
    sweep, fresh = tmp_path / "sweep", tmp_path / "fresh"
    shutil.copytree(first, sweep / first.name)  # copied with their times: not being written
    results.merge(sweep)
    path = sweep / devices.SAMPLES_FILE
    mine = path / f"{first.name}.parquet"  # a file per run
    written = cache.file_token(mine)
    results.merge(sweep)
    assert cache.file_token(mine) == written  # nothing new: not rewritten
    shutil.copytree(second, sweep / second.name)
    results.merge(sweep)
    assert cache.file_token(mine) == written  # another run merged: this one's file stays
    for run in (first, second):
        shutil.copytree(run, fresh / run.name)
    results.merge(fresh)
    merged = pd.read_parquet(path)
    pd.testing.assert_frame_equal(merged, pd.read_parquet(fresh / devices.SAMPLES_FILE))
    assert set(merged["run_id"]) == {first.name, second.name}
    # A merged run's log is not read again while it is the same file (name, size, mtime,
    # inode): rewritten in place to the same size, its mtime put back, its rows stay; once
    # its mtime differs, it is read again.
    log = sweep / first.name / protocol.RANKS_DIR / protocol.device_log_name(0)
    st = log.stat()
    text = log.read_text()
    with log.open("r+") as fh:
        fh.write(text.replace('"power_w":', '"power_W":', 1))  # one sample's power unread
    os.utime(log, ns=(st.st_atime_ns, st.st_mtime_ns))
    results.merge(sweep)
    pd.testing.assert_frame_equal(pd.read_parquet(path), merged)
    os.utime(log, ns=(st.st_atime_ns, st.st_mtime_ns - 10**9))
    results.merge(sweep)
    again = pd.read_parquet(path)
    assert again["power_w"].isna().sum() == merged["power_w"].isna().sum() + 1
    assert again.drop(columns="power_w").equals(merged.drop(columns="power_w"))


def test_report_draws_the_recorded_runs_over_time(recorded_sweep, tmp_path):
    sweep, _ = recorded_sweep
    run_orch("report", sweep, "--out", tmp_path / "report", check=True)
    assert (tmp_path / "report" / "devices.png").read_bytes()[:4] == b"\x89PNG"
    assert "devices.png" in (tmp_path / "report" / "report.md").read_text()
    runs = pd.read_parquet(sweep / "results" / "runs.parquet")
    iters = pd.read_parquet(sweep / "results" / "iterations.parquet")
    edges = report_devices.window_edges(iters, runs["run_id"].iloc[0])
    assert set(edges) == {"native", "breakdown"}
    assert edges["native"][1] <= edges["breakdown"][0]  # the native window runs first here
    assert report_devices.timeline(runs, iters, None) is None  # a set older than the sampler


def test_window_edges_split_the_windows_as_the_metrics_do():
    # A row without a window (an iteration table older than the native window, or one
    # concatenated with such a table: NaN) is the breakdown window's, as in the run's metrics.
    iters = pd.DataFrame({"run_id": ["a"] * 4, "t_start": [0.0, 1.0, 2.0, 3.0],
                          "t_iter": [0.5] * 4, "warmup_iter": [True, False, False, False],
                          "window": ["native", "native", None, "breakdown"]})
    assert report_devices.window_edges(iters, "a") == {"native": (1.0, 1.5),
                                                       "breakdown": (2.0, 3.5)}
    assert report_devices.window_edges(iters.drop(columns="window"), "a") == {
        "breakdown": (1.0, 3.5)}


def test_timeline_picks_each_configurations_median_run_and_names_the_rest(recorded_sweep):
    sweep, _ = recorded_sweep
    runs = pd.read_parquet(sweep / "results" / "runs.parquet")
    samples = pd.read_parquet(sweep / devices.SAMPLES_FILE)
    iters = pd.read_parquet(sweep / "results" / "iterations.parquet")
    one = runs[runs["ranks"] == 1].iloc[0]
    copies, sampled = [], []
    for k in range(9):  # 3 batch sizes x 3 repeats of the one-rank run: 3 configurations
        copy = one.copy()
        copy["run_id"], copy["batch_size"], copy["repeat"] = f"r{k}", 32 << (k // 3), k % 3
        copy["samples_per_s"] = 1000.0 + k % 3  # repeat 1 is each configuration's median
        copies.append(copy)
        sampled.append(samples[samples["run_id"] == one["run_id"]].assign(run_id=f"r{k}"))
    many = pd.DataFrame(copies).reset_index(drop=True)
    picked, rest = report_devices.timeline_runs(many, pd.concat(sampled))
    assert sorted(rid for _, rid in picked) == ["r1", "r4", "r7"] and rest == []
    for k in range(9, 9 + 3 * report_devices.MAX_PANELS):  # more configurations than panels
        copy = one.copy()
        copy["run_id"], copy["batch_size"] = f"r{k}", 1000 + k
        copies.append(copy)
        sampled.append(samples[samples["run_id"] == one["run_id"]].assign(run_id=f"r{k}"))
    many = pd.DataFrame(copies).reset_index(drop=True)
    picked, rest = report_devices.timeline_runs(many, pd.concat(sampled))
    assert len(picked) == report_devices.MAX_PANELS
    assert len(picked) + len(rest) == 3 + 3 * report_devices.MAX_PANELS
    png = report_devices.timeline(many, iters, pd.concat(sampled))
    assert png[:4] == b"\x89PNG"


# --- on a real CPU run -------------------------------------------------------------------------

@pytest.mark.ranks
def test_cpu_run_reports_the_host_over_time(tmp_path):
    out = tmp_path / "sweep"
    run_orch("sweep", "--nodes", "1", "--iters", 4, "--warmup", 1, "--out", out, check=True)
    [row] = json.loads(run_orch("results", out, "--format", "json", check=True).stdout)
    samples = pd.read_parquet(out / devices.SAMPLES_FILE)
    assert samples["cpu_util"].notna().any()  # every sample past the first has it
    assert samples["sm_clock_mhz"].isna().all()  # no GPU here
    if row["energy_j"] is None:  # no RAPL readable, or a window shorter than the sampling
        assert row["energy_reason"] or row["device_metrics_reason"]
    runs = pd.read_parquet(out / "results" / "runs.parquet")
    iters = pd.read_parquet(out / "results" / "iterations.parquet")
    assert report_devices.timeline(runs, iters, samples)[:4] == b"\x89PNG"
    rows = [r for r in report_devices.TIMELINE_ROWS
            if any(samples[c].notna().any() for c, _, _ in r[1])]
    assert "SM clock MHz" not in [label for label, _ in rows]  # the CPU host's rows only
    run_orch("report", out, "--out", tmp_path / "report", check=True)
    assert (tmp_path / "report" / "devices.png").is_file()


def test_recorded_footers_without_edges_keep_the_rule(tmp_path):
    # tests/fixtures/gpu-h200-dims was written before footers recorded their window's edges:
    # a footer whose samples span less than the sampling period (ResNet-18 bf16, 0.25 s) has
    # its energy dropped, with the reason; every longer one keeps its counter figure.
    sweep = tmp_path / "dims"
    shutil.copytree(Path(__file__).parent / "fixtures" / "gpu-h200-dims", sweep)
    rows = json.loads(run_orch("results", sweep, "--format", "json", check=True).stdout)
    short = {r["run_id"] for r in rows if r["energy_reason"] == en.SHORT_WINDOW}
    assert "torch-ddp-resnet18-gpu-n1-r0-77bda94f" in short
    for row in rows:
        ranks = sweep / row["run_id"] / protocol.RANKS_DIR
        footer = protocol.read_rank_log(ranks / protocol.rank_log_name(0)).footer
        seconds = footer[protocol.DEVICE_METRICS]["seconds"]
        assert (row["run_id"] in short) == (seconds < en.SAMPLE_PERIOD_S)
        assert (row["energy_j"] is None) == (row["energy_per_sample_j"] is None) == (
            row["run_id"] in short)
