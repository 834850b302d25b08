"""The two windows' analysis on recorded rank logs (no ranks run here): throughput from the native
window, the breakdown beside it, instrumentation overhead, phase gap, memory per rank, and the
invariants every run is checked against (exposed <= total communication, none on 1 rank, a
stated reason where a mode cannot see its total).

The logs under tests/golden/ranklogs are real torch-ddp runs of the local site (LeNet-5, 1 and 2
ranks, 3 warm-up + 10 measured iterations per window), headers trimmed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from orchestrator import protocol
from orchestrator.protocol import PHASES
from orchestrator.report.tables import comm_table, measurement_table
from orchestrator.results import analyze, gather
from orchestrator.results import iterations as tables
from orchestrator.runs import rundir, verdict

LOGS = Path(__file__).parent / "golden" / "ranklogs"


def recorded(name: str):
    rdir = LOGS / name
    return rundir.read_run(rdir), verdict.read_run_logs(rdir), rdir


def frame(run, logs) -> pd.DataFrame:
    return pd.DataFrame(tables.iteration_rows(run, logs))


def test_throughput_comes_from_the_native_window():
    run, logs, _ = recorded("ddp-n2")
    df = frame(run, logs)
    m = analyze.run_metrics(df)
    native = df[(df["window"] == "native") & ~df["warmup_iter"]]
    breakdown = df[(df["window"] == "breakdown") & ~df["warmup_iter"]]
    # The job's samples over the longest rank's native window, each rank on its own clock.
    spans = native.groupby("rank").apply(
        lambda g: (g["t_start"] + g["t_iter"]).max() - g["t_start"].min(), include_groups=False)
    assert m["throughput_window"] == "native"
    assert m["samples_per_s"] == pytest.approx(native["samples"].sum() / spans.max())
    assert m["t_iter_native"] == pytest.approx(native["t_iter"].mean())
    assert m["t_iter"] == pytest.approx(breakdown["t_iter"].mean())
    assert m["instrumentation_overhead"] == pytest.approx(m["t_iter"] / m["t_iter_native"] - 1)
    assert m["phase_gap"] == pytest.approx(
        breakdown["t_iter"].mean() - sum(breakdown[p].mean() for p in PHASES))
    assert m["t_comm"] == pytest.approx(breakdown["t_comm"].mean())  # phases: breakdown only
    assert m["iterations_measured"] == run.iters
    assert m["comm_exceeds_total"] == 0


def test_logs_without_windows_fall_back_to_the_breakdown():
    """A log written before the two windows: every record is a breakdown record."""
    run, logs, _ = recorded("ddp-n2")
    for log in logs:
        log.iters = [{k: v for k, v in r.items() if k != "window"} for r in log.iters
                     if r.get("window") == "breakdown"]
    m = analyze.run_metrics(frame(run, logs))
    assert m["throughput_window"] == "breakdown" and m["samples_per_s"] > 0
    assert m["t_iter_native"] is None and m["instrumentation_overhead"] is None


def test_fast_merge_carries_the_window_like_the_slow_path():
    run, logs, rdir = recorded("ddp-n2")
    table, counts = tables.merged_iteration_table([(run, gather.scan_run_logs(rdir))])
    slow = tables.iteration_table(tables.iteration_rows(run, logs))
    assert counts == [slow.num_rows] and tables.plain_strings(table).equals(slow)
    assert set(table.column("window").to_pylist()) == set(protocol.WINDOWS)


def test_verdict_counts_each_window(tmp_path):
    run, logs, rdir = recorded("ddp-n2")
    assert verdict.verdict(run, rdir, logs) == (True, None)
    # A rank that lost a native iteration is not a complete run.
    copy = tmp_path / "run"
    shutil.copytree(rdir, copy)
    path = copy / "ranks" / "rank-1.jsonl"
    lines = path.read_text().splitlines()
    gone = next(i for i, line in enumerate(lines)
                if '"window":"native"' in line and '"warmup":false' in line)
    path.write_text("\n".join(lines[:gone] + lines[gone + 1:]) + "\n")
    ok, reason = verdict.verdict(run, copy, verdict.read_run_logs(copy))
    assert not ok and reason == (f"rank 1: {run.iters - 1} of {run.iters} measured iterations "
                                 "logged in the native window")


def row(**kw) -> dict:
    base = {"mode": "torch-ddp", "ranks": 2, "iterations_measured": 10, "t_comm": 0.002,
            "t_comm_total": 0.003, "comm_exceeds_total": 0, "comm_total_reason": None}
    return {**base, **kw}


@pytest.mark.parametrize(("fields", "expected"), [
    ({}, []),
    ({"comm_exceeds_total": 2}, ["exposed communication exceeds total in 2 measured "
                                 "iteration(s)"]),
    ({"t_comm": 0.004}, ["hidden communication is negative (-1.000 ms)"]),
    ({"ranks": 1, "t_comm": 0.00058, "t_comm_total": 0.0003, "comm_exceeds_total": 10},
     ["exposed communication exceeds total in 10 measured iteration(s)",
      "hidden communication is negative (-0.280 ms)",
      "1-rank run reports communication (0.580 ms exposed, 0.300 ms total)"]),
    ({"ranks": 1, "t_comm": 0.0, "t_comm_total": 0.0}, []),
    ({"ranks": 1, "t_comm": 0.0, "t_comm_total": None}, []),
    ({"t_comm_total": None}, ["no t_comm_total and no comm_total_reason saying why"]),
    ({"t_comm_total": None, "comm_total_reason": "a background thread"}, []),
    ({"t_comm": 0.003, "t_comm_total": 0.003 - analyze.TIMER_TOLERANCE / 2}, []),
    ({"mode": "allreduce-bench", "ranks": 1, "t_comm": 1.0}, []),  # measures the network
    ({"iterations_measured": 0, "t_comm": None}, []),  # nothing measured, nothing to check
])
def test_invariants(fields, expected):
    assert analyze.invariants(row(**fields)) == expected


def test_recorded_runs_hold_every_invariant_and_one_rank_has_no_communication():
    """The issue's 1-rank figure (0.58 ms exposed, 0.30 ms total) is gone: zero, both."""
    runs = []
    for name in ("ddp-n1", "ddp-n2"):
        run, logs, _ = recorded(name)
        runs.append({"mode": run.mode, "ranks": run.ranks, "model": run.model,
                     "dataset": run.dataset, "nodes": run.nodes, "options": json.dumps(
                         run.options), "_label": "torch-ddp lenet5",
                     **analyze.run_metrics(frame(run, logs)), **gather.footer_facts(logs)})
    df = analyze.add_invariants(pd.DataFrame(runs))
    assert df["invariant_violations"].isna().all()
    one = df[df["ranks"] == 1].iloc[0]
    assert one["t_comm"] == 0.0 and one["t_comm_total"] == 0.0
    two = df[df["ranks"] == 2].iloc[0]
    assert 0 < two["t_comm"] <= two["t_comm_total"]
    assert two["peak_rss_bytes"] >= two["peak_rss_bytes_mean"] > 0
    # The report's tables show them: overhead, phase gap, memory, invariants; overlap per mode.
    meas = measurement_table(df)
    assert meas.columns[3:] == ["throughput from", "t_iter native ms", "t_iter breakdown ms",
                                "overhead", "phase gap ms", "host MiB max / mean",
                                "device MiB max / mean", "invariants"]
    assert all(r[3] == "native" and r[-1] == "hold" for r in meas.rows)
    assert meas.rows[1][6] == f"{two['instrumentation_overhead']:+.1%}"
    comm = comm_table(df)
    # LeNet-5's gradient fits DDP's first bucket: sent after backward, whatever DDP declares.
    assert [r[3] for r in comm.rows] == ["none", "none"] and comm.rows[1][-1] == ""
    reasoned = df.assign(t_comm_total=None, comm_total_reason="not seen by the rank")
    assert comm_table(reasoned).rows[1][5:7] == ["-", "-"]
    assert comm_table(reasoned).rows[1][-1] == "not seen by the rank"


def test_native_window_drains_a_queued_framework_inside_its_clock(tmp_path, monkeypatch):
    """MXNet's and TF-PS's native windows only queue their steps (as their own loops do); the
    harness drains the queue inside the last warm-up iteration, every NATIVE_CHUNK measured
    ones and the last one, so the measured window holds all of its own work and none of the
    warm-up's, and each iteration of a chunk records an equal share of the chunk's wall time.

    The harness reads a fake clock that moves only when a step is queued or the queue drained:
    a real sleep's length is the machine's (a loaded one overslept the bound on a share), and
    the chunk sizes follow the measured pace."""
    from orchestrator import modes
    from orchestrator.rankside import harness

    # Binary fractions: every sum and difference of the clock's readings is exact.
    queue_s, drain_s = 2.0 ** -10, 2.0 ** -5  # ~1 ms to queue a step, ~31 ms of queued work
    clock = FakeClock(wall=1.7e9, perf=1000.0)
    monkeypatch.setattr(harness, "time", clock)
    monkeypatch.setattr(harness, "NATIVE_CHUNK", 2)
    args = harness.mode_parser(modes.get("mxnet-kvstore")).parse_args(
        ["--run-id", "r", "--log-dir", str(tmp_path), "--model", "lenet5", "--batch-size", "4",
         "--iters", "5", "--warmup", "3", "--kvstore", "dist_sync", "--update", "worker"])
    log = harness.RankLogWriter(str(tmp_path / "rank-0.jsonl"))
    s = harness.Session(args, harness.RankInfo({}), log)
    drained, bodies = [], []

    def drain():  # the queued work, seen only by whoever waits for it
        drained.append(bodies[-1])
        clock.advance(drain_s)

    started = clock.time()
    for it in s.native_iterations(drain=drain):
        bodies.append(it)
        clock.advance(queue_s)
    assert bodies == list(range(8))
    log.close()
    # Inside iterations 2 (last warm-up), 4 and 6 (every 2 measured), 7 (last).
    assert drained == [2, 4, 6, 7]
    rows = [json.loads(x) for x in (tmp_path / "rank-0.jsonl").read_text().splitlines()]
    assert [r["iter"] for r in rows] == list(range(8)) and all(r["queued"] for r in rows)
    assert [r["warmup"] for r in rows] == [True] * 3 + [False] * 5
    chunks = [(0, 1, 2), (3, 4), (5, 6), (7,)]
    for chunk in chunks:
        share = rows[chunk[0]]["t_iter"]
        assert share == (len(chunk) * queue_s + drain_s) / len(chunk)  # all of its own work
        assert drain_s / len(chunk) <= share < drain_s / len(chunk) + 0.01
        for i, k in enumerate(chunk):  # equal shares, spaced by them from the chunk's start
            assert rows[k]["t_iter"] == share
            assert rows[k]["t_start"] == pytest.approx(rows[chunk[0]]["t_start"] + i * share)
    assert started <= rows[0]["t_start"] and rows[3]["t_start"] >= rows[0]["t_start"] + drain_s
    # The throughput analysis sees every measured second: the window's span is the sum.
    measured = rows[3:]
    span = measured[-1]["t_start"] + measured[-1]["t_iter"] - measured[0]["t_start"]
    assert span == pytest.approx(sum(r["t_iter"] for r in measured), abs=2e-3)


class FakeClock:
    """Stands in for the ``time`` module where a test reads a clock: ``time()`` (wall) and
    ``perf_counter()`` move together, by ``advance`` only."""

    def __init__(self, wall: float, perf: float) -> None:
        self.wall, self.perf = wall, perf

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.perf += seconds

    def time(self) -> float:
        return self.wall

    def perf_counter(self) -> float:
        return self.perf

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)


def test_a_gpu_native_window_queues_its_steps_as_pytorchs_loop_does(tmp_path, monkeypatch):
    """On a GPU, PyTorch's loop never waits for its kernels: the torch modes' native window
    synchronizes only where the harness drains (the warm-up's end, every chunk, the end), not
    after each step, which on an H100 cost torch-ddp LeNet-5 ~12% of its samples/s
    (benchmarks.fidelity: 0.885 per-step, 0.992 queued). On the CPU nothing is queued."""
    import torch

    from orchestrator import modes
    from orchestrator.rankside import harness
    from orchestrator.rankside.torch import common as torch_common

    monkeypatch.setattr(harness, "NATIVE_CHUNK", 2)
    # A clock that never moves: the chunks' sizes follow the measured pace (a step slower than
    # NATIVE_CHUNK_S / 2 would shrink them), which here is the machine's, not the test's.
    monkeypatch.setattr(harness, "time", FakeClock(wall=1.7e9, perf=1000.0))
    for gpu in (True, False):
        log_dir = tmp_path / str(gpu)
        log_dir.mkdir()
        args = harness.mode_parser(modes.get("torch-ddp")).parse_args(
            ["--run-id", "r", "--log-dir", str(log_dir), "--model", "lenet5", "--batch-size",
             "4", "--iters", "5", "--warmup", "3", "--backend", "gloo"])
        log = harness.RankLogWriter(str(log_dir / "rank-0.jsonl"))
        s = harness.Session(args, harness.RankInfo({}), log)
        events = []
        source = iter([(torch.zeros(1), torch.zeros(1))] * 8)

        def step(x, y, events=events):
            events.append("step")
            return x.sum(), x

        sync = (lambda events=events: events.append("sync")) if gpu else None
        torch_common.native_window(s, source, torch.device("cpu"), step, sync)
        log.close()
        rows = [json.loads(x) for x in (log_dir / "rank-0.jsonl").read_text().splitlines()]
        assert len(rows) == 8
        if gpu:  # synchronized after steps 2 (warm-up's last), 4, 6 and 7 (the last) only
            assert "".join("s" if e == "step" else "|" for e in events) == "sss|ss|ss|s|"
            assert all(r["queued"] for r in rows)
        else:
            assert events == ["step"] * 8 and not any(r.get("queued") for r in rows)


def test_a_queued_chunk_is_bounded_in_iterations_and_in_time():
    """At most NATIVE_CHUNK iterations, at most ~NATIVE_CHUNK_S at the last chunk's pace (its
    records reach the hang watch only once drained), one when the pace is not known yet."""
    from orchestrator.rankside.harness import NATIVE_CHUNK, NATIVE_CHUNK_S, chunk_limit

    assert chunk_limit(None) == 1
    assert chunk_limit(0.01) == NATIVE_CHUNK == chunk_limit(0.0)  # LeNet-5: 100 steps, ~1 s
    assert chunk_limit(1.2) == int(NATIVE_CHUNK_S / 1.2)  # ResNet-18 on 2 cores: 8 steps
    assert chunk_limit(60.0) == 1  # a step slower than a chunk: drained after each


def test_the_fidelity_table_reads_a_median_of_rounds_with_its_confidence_interval():
    """benchmarks.fidelity reads the goal (orch/native >= 0.97) with a distribution-free
    interval for the median of the rounds' ratios, since one process of a job runs up to 2x
    faster or slower than the next on these 2 vCPUs: a median under 0.97 whose interval spans
    0.97 is noise, one whose interval lies wholly under it a measured miss."""
    from benchmarks.fidelity import median_interval, verdict

    # 5 rounds: min-max covers the median with 1 - 2/32; 10: 2nd to 9th, 1 - 2*11/1024.
    assert median_interval([1.0, 0.9, 1.1, 0.95, 1.05]) == (0.9, 1.1, 1 - 2 / 32)
    low, high, cover = median_interval([float(x) for x in range(10)])
    assert (low, high) == (1.0, 8.0) and cover == pytest.approx(1 - 2 * 11 / 1024)
    assert median_interval([0.9, 1.1, 1.0])[2] == 0.75  # too few rounds for 90%: all of them
    assert verdict(0.946, 0.842, 1.121) == "NOT met (interval spans 0.97: within the noise)"
    assert verdict(0.93, 0.90, 0.96) == "NOT met (interval wholly under 0.97)"
    assert verdict(1.01, 0.98, 1.03) == "met (interval wholly above 0.97)"
