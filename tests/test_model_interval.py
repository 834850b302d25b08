"""Prediction intervals from what was measured (orchestrator/perfmodel/interval.py): the compute
part from the measured run's per-iteration quantiles where its iterations are at hand (the
normal approximation from ``t_iter_std`` only where they are not), and coverage said with its
count, and as no calibration figure below 10 scored intervals. Synthetic iterations whose
answer is known by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from orchestrator.perfmodel import interval


@pytest.mark.parametrize(("inside", "n", "expect"), [
    (1, 2, "interval coverage 1 of 2 inside = 50% (nominal 80%); n = 2 < 10: n too small to "
           "judge calibration"),
    (7, 9, "interval coverage 7 of 9 inside = 78% (nominal 80%); n = 9 < 10: n too small to "
           "judge calibration"),
    (8, 10, "interval coverage 8 of 10 inside = 80% (nominal 80%)"),
    (0, 0, ""),
])
def test_coverage_says_its_count_and_when_it_is_too_small_to_judge(inside, n, expect):
    assert interval.coverage_text(inside, n, 0.8) == expect


def test_quantile_spread_by_hand():
    # 1..11 ms: 10th percentile 2 ms, median 6 ms, 90th 10 ms, mean 6 ms -> 4/6 each side
    spread = interval.quantile_spread([i * 1e-3 for i in range(1, 12)])
    assert spread.basis == "quantiles" and spread.iterations == 11
    assert spread.below == pytest.approx(4 / 6) and spread.above == pytest.approx(4 / 6)
    # under 10 iterations the percentiles are no estimate
    assert interval.quantile_spread([1e-3] * 9) is None
    assert interval.quantile_spread([float("nan")] * 5 + [1e-3] * 9) is None


def test_a_few_slow_iterations_widen_the_upper_side_only():
    # 17 iterations of 10 ms and 3 of 30 ms (15 %): median and 10th percentile 10 ms, 90th
    # 30 ms, mean 13 ms -> nothing below, 20/13 above
    steps = [0.010] * 17 + [0.030] * 3
    spread = interval.quantile_spread(steps)
    assert spread.below == 0.0 and spread.above == pytest.approx(0.020 / 0.013)
    band = interval.combine(0.013, spread=spread)
    assert band.low == pytest.approx(0.013) and band.high == pytest.approx(0.033)
    assert band.basis == "quantiles" and band.parts["compute"] == (0.0, pytest.approx(0.020))
    # the normal approximation of the same steps widens both sides alike
    sd = float(np.std(steps, ddof=1))
    normal = interval.normal_spread(sd, float(np.mean(steps)))
    assert normal.basis == "normal" and normal.below == normal.above > 0
    assert interval.combine(0.013, spread=normal).low < 0.013


def test_spread_scales_to_the_predicted_iteration():
    # a spread of +-10 % of the measured iteration: +-10 % of the predicted one, whatever it is
    spread = interval.Spread(below=0.1, above=0.1, basis="quantiles", iterations=20)
    for point in (0.01, 0.05):
        band = interval.combine(point, spread=spread)
        assert (band.low, band.high) == (pytest.approx(0.9 * point), pytest.approx(1.1 * point))
    assert interval.normal_spread(None, 0.01) == interval.Spread()
    assert interval.mean_spread([spread, interval.Spread()]) == interval.Spread()


def _iterations(path, run_id: str, steps: list[float]) -> None:
    """An iterations.parquet of one 1-rank run: two warm-up and a native-window row that must
    not count (their t_iter 1 s), then ``steps``."""
    rows = [{"run_id": run_id, "window": "breakdown", "warmup_iter": True, "t_iter": 1.0}] * 2
    rows += [{"run_id": run_id, "window": "native", "warmup_iter": False, "t_iter": 1.0}]
    rows += [{"run_id": run_id, "window": "breakdown", "warmup_iter": False, "t_iter": t}
             for t in steps]
    pd.DataFrame(rows).to_parquet(path, index=False)


def test_a_stated_prediction_takes_its_compute_spread_from_the_measured_iterations(tmp_path):
    from orchestrator.execute import ledger, preflight

    from .test_model_validity import _level, _runs

    pf = preflight.Preflight(site="s", partition="p", inter=_level("inter", 2, None))
    path = tmp_path / "iterations.parquet"
    _iterations(path, "n1", [0.030] * 17 + [0.040] * 3)
    (rec,), _ = ledger.predict_runs(_runs(2), {"big"}, {"p": pf}, now=5.0, iterations=path)
    assert rec["interval_basis"] == "quantiles" and rec["interval_iterations"] == 20
    mean = (17 * 0.030 + 3 * 0.040) / 20
    below, above = rec["interval_parts"]["compute"]
    assert below == 0.0 and above == pytest.approx(0.010 / mean * rec["t_iter"])
    # the run's own iterations are never read: only the completed run it is predicted from
    assert ledger.read_iterations(path, ["big"]) is None
    # too few measured iterations, or no file: the normal approximation, said
    _iterations(path, "n1", [0.030] * 9)
    (rec,), _ = ledger.predict_runs(_runs(2), {"big"}, {"p": pf}, now=5.0, iterations=path)
    assert rec["interval_basis"] == "normal" and rec["interval_iterations"] is None
    (rec,), _ = ledger.predict_runs(_runs(2), {"big"}, {"p": pf}, now=5.0,
                                    iterations=tmp_path / "none.parquet")
    assert rec["interval_basis"] == "normal"


@pytest.mark.parametrize("steps", [None, [0.030] * 17 + [0.040] * 3])
def test_the_what_if_and_the_ledger_give_one_run_the_same_interval(tmp_path, steps):
    # the 2-node run of a result set, predicted from its 1-node run by orch predict --results
    # (a what-if link) and by the ledger (a pre-flight fit without residuals: no network
    # part): the same compute spread as fractions of each prediction, the same basis
    from orchestrator.execute import ledger, preflight
    from orchestrator.report import whatif

    from .test_model_validity import _level
    from .test_predict import write_result_set

    d = write_result_set(tmp_path / "sweep")
    runs = pd.read_parquet(d / "results" / "runs.parquet")
    runs["t_iter_std"] = 0.002
    iters = None
    if steps is not None:
        iters = pd.DataFrame({"run_id": str(runs["run_id"].iloc[0]), "window": "breakdown",
                              "warmup_iter": False, "t_iter": steps})
        iters.to_parquet(tmp_path / "iterations.parquet", index=False)
    pf = preflight.Preflight(site="siteA", partition="ib",
                             inter=_level("inter", 2, None).model_copy(
                                 update={"site": "siteA", "partition": "ib"}))
    target = str(runs["run_id"].iloc[1])
    (rec,), _ = ledger.predict_runs(runs, {target}, {"ib": pf}, now=5.0,
                                    iterations=tmp_path / "iterations.parquet")
    ask = whatif.Ask(workers="2", bandwidth="1GB/s", latency="100us")
    (row,) = whatif.from_results(ask, runs, None, d, iters).rows
    assert row["interval_basis"] == rec["interval_basis"] == (
        "normal" if steps is None else "quantiles")
    assert rec["interval_parts"]["network"] == [pytest.approx(0.0), pytest.approx(0.0)]
    for side in ("t_iter_low", "t_iter_high"):
        assert row[side] / row["t_iter"] == pytest.approx(rec[side] / rec["t_iter"])
    assert row["t_iter_low"] <= row["t_iter"] < row["t_iter_high"]
