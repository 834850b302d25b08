"""The model's own error in the intervals (orchestrator/perfmodel/interval.py's ModelError,
orchestrator/execute/modelerror.py): recorded from each sweep's scorecard, once a prediction,
in the site's store beside the pre-flight's cache, and read back when the next predictions
state their intervals. Numbers by hand; nothing here times anything."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from orchestrator.errors import UserError
from orchestrator.execute import ledger, modelerror, preflight
from orchestrator.perfmodel import interval
from orchestrator.perfmodel.comm import allreduce_time
from orchestrator.report import scorecard
from tests.test_model_validity import SIZES, _level, _runs

# Ten recorded errors, sorted: the 10th percentile (linear interpolation, position 0.9) is
# -0.30 + 0.9 · 0.05 = -0.255, the 90th (position 8.1) 0.00 + 0.1 · 0.10 = 0.01.
ERRORS = [-0.30, -0.25, -0.20, -0.20, -0.15, -0.10, -0.10, -0.05, 0.0, 0.10]


def test_quantiles_and_sides_by_hand():
    assert interval.MIN_SCORED == 10
    found = interval.model_error_of(ERRORS, "store.jsonl")
    assert found.low == pytest.approx(-0.255) and found.high == pytest.approx(0.01)
    assert found.scored == 10 and found.basis() == "10 scored predictions in store.jsonl"
    # measured ≈ point / (1 + e): from 2 / 1.01 to 2 / 0.745
    below, above = found.sides(2.0)
    assert below == pytest.approx(2.0 - 2.0 / 1.01) and above == pytest.approx(2.0 / 0.745 - 2.0)
    z = interval.z_of()
    band = interval.combine(2.0, compute_sd=0.02, model_error=found)
    assert band.parts["model"] == (pytest.approx(below), pytest.approx(above))
    assert band.low == pytest.approx(2.0 - math.sqrt((z * 0.02) ** 2 + below ** 2))
    assert band.high == pytest.approx(2.0 + math.sqrt((z * 0.02) ** 2 + above ** 2))
    assert band.error_basis == "10 scored predictions in store.jsonl"
    # at another level, other quantiles: 5th and 95th (positions 0.45 and 8.55)
    wider = interval.model_error_of(ERRORS, level=0.9)
    assert wider.low == pytest.approx(-0.30 + 0.45 * 0.05)
    assert wider.high == pytest.approx(0.0 + 0.55 * 0.10)


def test_a_model_too_fast_widens_the_upper_side_only():
    too_fast = interval.model_error_of([-0.3, -0.2, -0.25, -0.1, -0.15] * 2)
    assert too_fast.high < 0
    below, above = too_fast.sides(1.0)
    assert below == 0.0 and above == pytest.approx(1.0 / (1 + too_fast.low) - 1.0)
    plain = interval.combine(1.0, compute_sd=0.01)
    band = interval.combine(1.0, compute_sd=0.01, model_error=too_fast)
    assert band.low == pytest.approx(plain.low) and band.high > plain.high + 0.1


def test_fewer_than_min_scored_gives_no_term_and_says_so(tmp_path):
    assert interval.model_error_of(ERRORS[:9]) is None
    assert interval.model_error_of([*ERRORS[:9], math.nan, -1.0]) is None  # unusable: left out
    band = interval.combine(1.0, compute_sd=0.01)
    assert band.parts["model"] == (0.0, 0.0) and band.error_basis == interval.NO_MODEL_ERROR
    path = modelerror.store_path("site", tmp_path)
    assert path == tmp_path / "model-error-site.jsonl"
    assert modelerror.model_error("site", tmp_path) == (None, f"none yet (no {path}; 10 needed)")
    path.write_text("".join(json.dumps({"run_id": f"r{i}", "predicted_at": 1.0,
                                        "error_t_iter": e}) + "\n"
                            for i, e in enumerate(ERRORS[:9])))
    assert modelerror.model_error("site", tmp_path) == (
        None, f"none yet (9 scored prediction(s) in {path}; 10 needed)")


def _scorecard() -> pd.DataFrame:
    """Four predictions of site ``s``: two valid and measured (errors +25 % and −20 %), one
    flagged, one whose run did not complete."""
    runs = pd.DataFrame([
        {"run_id": rid, "site": "s", "state": state, "t_iter": t, "speedup": None}
        for rid, state, t in (("a", "COMPLETED", 0.4), ("b", "COMPLETED", 0.5),
                              ("c", "COMPLETED", 0.5), ("d", "FAILED", None))])
    preds = [{"run_id": rid, "predicted_at": 10.0, "t_iter": t, "site": "s", "partition": "p",
              "mode": "torch-ddp", "workers": 2, "flags": flags}
             for rid, t, flags in (("a", 0.5, []), ("b", 0.4, []), ("c", 0.5, ["shared"]),
                                   ("d", 0.5, []))]
    return scorecard.scorecard_frame(runs, preds, {})


def test_the_store_is_appended_once_a_prediction_and_read_back(tmp_path):
    frame = _scorecard()
    assert list(frame["site"]) == ["s"] * 4
    path = modelerror.store_path("s", tmp_path)
    assert modelerror.record(frame, tmp_path, now=99.0) == {path: 2}
    assert modelerror.record(frame, tmp_path, now=100.0) == {path: 0}  # scored again: nothing
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    back = modelerror.load(path)
    assert [(r["run_id"], r["error_t_iter"]) for r in back] == [
        ("a", pytest.approx(0.25)), ("b", pytest.approx(-0.2))]
    assert back[0] == {"run_id": "a", "site": "s", "partition": "p", "mode": "torch-ddp",
                       "workers": 2, "predicted_at": 10.0, "predicted_t_iter": 0.5,
                       "measured_t_iter": 0.4, "error_t_iter": pytest.approx(0.25),
                       "recorded_at": 99.0}
    # the same run predicted again (another sweep of the same configuration) is a new error
    again = frame.assign(predicted_at=20.0)
    assert modelerror.record(again, tmp_path) == {path: 2}
    assert len(modelerror.load(path)) == 4


def test_scoring_a_sweep_records_its_errors_once(tmp_path, monkeypatch):
    store = tmp_path / "store"
    monkeypatch.setenv("ORCH_NETBENCH_DIR", str(store))
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    ledger.append(sweep, [{"run_id": "a", "predicted_at": 10.0, "t_iter": 0.5, "site": "s",
                           "partition": "p", "mode": "torch-ddp", "nodes": 2, "workers": 2}])
    runs = pd.DataFrame([{"run_id": "a", "site": "s", "state": "COMPLETED", "t_iter": 0.4}])
    lines = scorecard.scorecard_lines(sweep, runs)
    path = store / "model-error-s.jsonl"
    assert lines[-1].startswith(f"Model error: 1 scored valid prediction(s) recorded in {path}")
    scorecard.scorecard_of_sweep(sweep, runs)
    assert not any(line.startswith("Model error") for line in
                   scorecard.scorecard_lines(sweep, runs))
    assert len(path.read_text().splitlines()) == 1


def test_a_damaged_line_names_the_file_and_line(tmp_path):
    path = modelerror.store_path("s", tmp_path)
    good = json.dumps({"run_id": "a", "predicted_at": 1.0, "error_t_iter": 0.1})
    path.write_text(good + "\n{not json\n")
    with pytest.raises(UserError, match=f"^{path}:2: not valid JSON"):
        modelerror.load(path)
    path.write_text(good + "\n\n" + json.dumps({"run_id": "b", "predicted_at": 1.0,
                                                "error_t_iter": "x"}) + "\n")
    with pytest.raises(UserError, match=f"^{path}:3: field 'error_t_iter': got 'x'"):
        modelerror.load(path)
    # scoring stops on it; stating a prediction goes on without the term and says why
    with pytest.raises(UserError, match=f"{path}:3"):
        modelerror.record(_scorecard(), tmp_path)
    error, basis = modelerror.model_error("s", tmp_path)
    assert error is None and basis.startswith(f"none: {path}:3: field 'error_t_iter'")


def _predict(monkeypatch, store) -> dict:
    monkeypatch.setenv("ORCH_NETBENCH_DIR", str(store))
    noisy = [t * (1.1 if i % 2 else 0.9) for i, t in
             enumerate(allreduce_time(m, 2, 1e-3, 1e6) for m in SIZES)]
    pf = preflight.Preflight(site="s", partition="p",
                             inter=_level("inter", 2, None, seconds=noisy))
    (rec,), _ = ledger.predict_runs(_runs(2), {"big"}, {"p": pf}, now=5.0)
    return rec


def test_the_ledger_widens_the_side_the_recorded_errors_say(tmp_path, monkeypatch):
    before = _predict(monkeypatch, tmp_path)
    path = modelerror.store_path("s", tmp_path)
    assert before["model_error_basis"] == f"none yet (no {path}; 10 needed)"
    assert before["model_error_scored"] is None and before["interval_parts"]["model"] == [0, 0]
    # ten predictions of site s, all too fast (e from −0.30 to −0.05)
    too_fast = [-0.30, -0.25, -0.25, -0.20, -0.20, -0.15, -0.15, -0.10, -0.10, -0.05]
    path.write_text("".join(json.dumps({"run_id": f"r{i}", "predicted_at": 1.0,
                                        "error_t_iter": e}) + "\n"
                            for i, e in enumerate(too_fast)))
    rec = _predict(monkeypatch, tmp_path)
    low, high = -0.30 + 0.9 * 0.05, -0.10 + 0.1 * 0.05  # their 10th and 90th percentiles
    assert rec["model_error_basis"] == f"10 scored predictions in {path}"
    assert rec["model_error_scored"] == 10
    assert rec["model_error_quantiles"] == [pytest.approx(low), pytest.approx(high)]
    t = rec["t_iter"]
    assert t == before["t_iter"]
    assert rec["interval_parts"]["model"] == [0.0, pytest.approx(t / (1 + low) - t)]
    others = [v for k, v in rec["interval_parts"].items() if k != "model"]
    assert rec["t_iter_high"] == pytest.approx(
        t + math.sqrt(sum(hi ** 2 for _, hi in others) + (t / (1 + low) - t) ** 2))
    assert rec["t_iter_low"] == pytest.approx(before["t_iter_low"])  # errors < 0: below as was
    assert rec["t_iter_high"] > before["t_iter_high"]


def test_orch_predict_on_a_result_set_carries_the_sites_model_error(tmp_path, monkeypatch):
    from orchestrator.report import whatif

    from .test_predict import write_result_set

    d = write_result_set(tmp_path / "sweep")
    runs = pd.read_parquet(d / "results" / "runs.parquet")
    site, part = str(runs["site"].iloc[0]), str(runs["partition"].iloc[0])
    level = _level("inter", 2, None).model_copy(update={"partition": part})
    pf = preflight.Preflight(site=site, partition=part, inter=level, mpi_inter=level)
    (d / "preflight.json").write_text(json.dumps({part: pf.model_dump(mode="json")}))
    monkeypatch.setenv("ORCH_NETBENCH_DIR", str(tmp_path / "store"))
    ask, two = whatif.Ask(workers="4"), whatif.TwoLevel(1, None, None, None, None, None)
    (before,) = whatif.two_level_results(two, ask, runs, d, d).rows
    path = modelerror.store_path(site, tmp_path / "store")
    assert before["model_error_basis"] == f"none yet (no {path}; 10 needed)"
    path.parent.mkdir()
    path.write_text("".join(json.dumps({"run_id": f"r{i}", "predicted_at": 1.0,
                                        "error_t_iter": -0.2}) + "\n" for i in range(10)))
    (after,) = whatif.two_level_results(two, ask, runs, d, d).rows
    # the same point; the site's errors (all too fast) widen its upper side only, as the
    # ledger's intervals
    assert after["model_error_basis"] == f"10 scored predictions in {path}"
    assert after["t_iter"] == before["t_iter"]
    assert after["t_iter_high"] > before["t_iter_high"]
    assert after["t_iter_low"] == pytest.approx(before["t_iter_low"])
