"""The compute rate (``samples_per_s_compute``: NVIDIA DeepLearningExamples' ``compute_ips``, the
samples/s without the time waiting for input) on iteration tables built here, and on the
recorded torch-ddp rank logs of tests/golden/ranklogs (see test_measurement.py) and on the runs
recorded on an H200 (tests/fixtures/gpu-h200-metrics, see test_gpu_recorded.py); the check on a
real run that reads its data from disk is in test_data.py."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from orchestrator.protocol import PHASES
from orchestrator.report.tables import throughput_table
from orchestrator.results import analyze
from orchestrator.results import iterations as tables
from orchestrator.runs import rundir, verdict

from .conftest import orch

LOGS = Path(__file__).parent / "golden" / "ranklogs"
RECORDED = Path(__file__).parent / "fixtures" / "gpu-h200-metrics"


def iteration_table(ranks: int, iters: int, t_iter: float, io_share: float, batch: int = 8,
                    window: str = "breakdown") -> pd.DataFrame:
    """Rows of one window where every iteration takes ``t_iter`` and ``io_share`` of it is
    input I/O; rank r's iterations take (1 + r/10) times longer (so the slowest is the last)."""
    rows = []
    for rank in range(ranks):
        slow = 1 + rank / 10
        t = 1000.0
        for it in range(iters + 1):  # the first is warm-up
            dt = t_iter * slow
            row = {"rank": rank, "host": "h0", "iter": it, "warmup_iter": it == 0,
                   "t_start": t, "t_iter": dt, "samples": batch, "t_comm_total": np.nan,
                   "window": window, **dict.fromkeys(PHASES, 0.0)}
            row["t_io"] = io_share * dt
            row["t_f"] = dt - row["t_io"]
            rows.append(row)
            t += dt
    return pd.DataFrame(rows)


@pytest.mark.parametrize("ranks", [1, 3])
def test_compute_rate_leaves_out_the_input_share(ranks):
    df = iteration_table(ranks, iters=5, t_iter=0.2, io_share=0.25)
    m = analyze.run_metrics(df)
    slowest = 0.2 * (1 + (ranks - 1) / 10)
    # samples per iteration (all ranks) over the slowest rank's time without its input
    assert m["samples_per_s_compute"] == pytest.approx(8 * ranks / (0.75 * slowest))
    # the breakdown window's own rate is the total: the compute rate exceeds it by 1/(1-0.25)
    assert m["samples_per_s_compute"] == pytest.approx(m["samples_per_s"] / 0.75)


def test_slowest_rank_is_taken_per_iteration():
    """The rank with the most compute is slowest in each iteration, even where another rank
    waited longer for its input."""
    df = iteration_table(2, iters=2, t_iter=1.0, io_share=0.0)
    df.loc[df["rank"] == 0, "t_io"] = 0.9  # rank 0: 1.0 s, 0.1 of it compute
    df.loc[df["rank"] == 1, "t_io"] = 0.0  # rank 1: 1.1 s, all compute
    m = analyze.run_metrics(df)
    assert m["samples_per_s_compute"] == pytest.approx(16 / 1.1)


def test_no_io_time_means_compute_equals_the_breakdown_rate():
    df = iteration_table(1, iters=4, t_iter=0.1, io_share=0.0)
    m = analyze.run_metrics(df)
    assert m["samples_per_s_compute"] == pytest.approx(m["samples_per_s"])


def test_without_t_io_or_breakdown_window_there_is_none():
    df = iteration_table(2, iters=3, t_iter=0.1, io_share=0.5)
    df["t_io"] = np.nan  # a workload that did not time its input
    assert analyze.run_metrics(df)["samples_per_s_compute"] is None
    df.loc[0, "t_io"] = 0.01  # one row with it is not the window's figure
    assert analyze.run_metrics(df)["samples_per_s_compute"] is None
    native = iteration_table(2, iters=3, t_iter=0.1, io_share=0.0, window="native")
    for p in PHASES:
        native[p] = np.nan  # native rows have no phases
    m = analyze.run_metrics(native)
    assert m["samples_per_s"] > 0 and m["samples_per_s_compute"] is None
    moved_nothing = iteration_table(1, iters=3, t_iter=0.1, io_share=0.5, batch=0)
    assert analyze.run_metrics(moved_nothing)["samples_per_s_compute"] is None


def breakdown_rate(iters: pd.DataFrame) -> float:
    """The total rate counterpart of the compute rate: the breakdown window's samples over the
    sum of each iteration's slowest rank's t_iter."""
    rows = iters[(iters["window"] == "breakdown") & ~iters["warmup_iter"]]
    per_iter = rows.groupby("iter").agg(samples=("samples", "sum"), t_iter=("t_iter", "max"))
    return per_iter["samples"].sum() / per_iter["t_iter"].sum()


def test_compute_rate_of_a_recorded_run_exceeds_its_breakdown_rate():
    rdir = LOGS / "ddp-n2"
    df = pd.DataFrame(tables.iteration_rows(rundir.read_run(rdir), verdict.read_run_logs(rdir)))
    m = analyze.run_metrics(df)
    assert m["throughput_window"] == "native"  # samples_per_s is the native window's
    rows = df[(df["window"] == "breakdown") & ~df["warmup_iter"]]
    assert rows["t_io"].gt(0).all()
    slowest = rows.groupby("iter")["t_iter"].max().sum()
    busy = (rows["t_iter"] - rows["t_io"]).groupby(rows["iter"]).max().sum()
    # the native rate with the breakdown window's input share taken out
    assert m["samples_per_s_compute"] == pytest.approx(m["samples_per_s"] * slowest / busy)
    assert m["samples_per_s_compute"] > m["samples_per_s"]  # t_io > 0 in every iteration


def test_recorded_gpu_runs_have_a_compute_rate(tmp_path):
    sweep = tmp_path / "gpu"
    shutil.copytree(RECORDED, sweep)
    code, out, err = orch("results", sweep, "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    iters = pd.read_parquet(sweep / "results" / "iterations.parquet")
    assert len(rows) == 15
    for r in rows:  # never below the total; t_io took a few µs a step there
        assert r["samples_per_s"] <= r["samples_per_s_compute"] < 1.01 * r["samples_per_s"]
        mine = iters[iters["run_id"] == r["run_id"]]
        assert r["samples_per_s_compute"] > breakdown_rate(mine), r["run_id"]
    code, out, _ = orch("results", sweep)
    assert code == 0 and "compute" in out  # the table's column


def test_throughput_table_shows_the_compute_rate():
    done = pd.DataFrame([
        {"_label": "a", "nodes": 1, "tasks_per_node": 1, "ranks": 1, "samples_per_s": 1000.0,
         "samples_per_s_std": 10.0, "samples_per_s_compute": 1500.0},
        {"_label": "a", "nodes": 2, "tasks_per_node": 1, "ranks": 2, "samples_per_s": 1900.0,
         "samples_per_s_std": 20.0, "samples_per_s_compute": math.nan}])
    table = throughput_table(done)
    assert table.rows == [["a", "1,000 ± 10 (compute 1,500)", "1,900 ± 20"]]
    assert "compute_ips" in table.note
