"""The ledger of predictions (orchestrator/execute/ledger.py): a prediction comes only from a
smaller run of the configuration that had already finished, never from the run's own
measurements; the scorecard never scores a prediction made after its run started; a damaged
predictions file is named with its line and field."""

from __future__ import annotations

import json

import pytest

from orchestrator.errors import UserError
from orchestrator.execute import ledger as predictions
from orchestrator.execute import preflight
from orchestrator.report import scorecard

from .test_preflight import preflight_level


@pytest.mark.parametrize(("line", "match"), [
    ("{not json", r"predictions\.jsonl:2: not valid JSON"),
    (json.dumps({"run_id": "r", "predicted_at": 1.0, "t_iter": -1.0}),
     r"predictions\.jsonl:2: field 't_iter': got -1\.0"),
    (json.dumps({"run_id": "r", "predicted_at": 1.0}), r"field 't_iter': got None"),
])
def test_bad_predictions_file_names_line_and_field(tmp_path, line, match):
    path = tmp_path / predictions.FILE
    good = json.dumps({"run_id": "a", "predicted_at": 1.0, "t_iter": 0.1})
    path.write_text(good + "\n" + line + "\n")
    with pytest.raises(UserError, match=match):
        predictions.load(path)


def test_scorecard_never_scores_a_prediction_made_after_the_run_started():
    import pandas as pd

    runs = pd.DataFrame([{"run_id": "r", "state": "COMPLETED", "t_iter": 0.2, "speedup": 1.5}])
    early = {"run_id": "r", "predicted_at": 10.0, "t_iter": 0.1, "speedup": 2.0}
    late = {"run_id": "r", "predicted_at": 30.0, "t_iter": 0.2, "speedup": 1.5}
    frame = scorecard.scorecard_frame(runs, [early, late], {"r": 20.0})
    assert list(frame["predicted_t_iter"]) == [0.1]
    assert frame["error_t_iter"].iloc[0] == pytest.approx(-0.5)
    assert frame["error_speedup"].iloc[0] == pytest.approx(0.5 / 1.5)


def _mpi_ssgd_runs(*runs: dict):
    """A runs table of mpi-ssgd LeNet-5 runs (overlap none, 1 task a node): ``runs``' own
    fields over the phases of a rank that computes 30 ms."""
    import pandas as pd

    phases = {"t_io": 0.0, "t_h2d": 0.0, "t_f": 0.01, "t_b": 0.02, "t_u": 0.0}
    stds = {f"{p}_std": 0.0 for p in phases}
    common = {"site": "s", "partition": "p", "mode": "mpi-ssgd", "model": "lenet5",
              "dataset": "cifar", "batch_size": 32, "launcher": "srun",
              "options": '{"overlap": "none"}', "data": None, "prefetch": True,
              "tasks_per_node": 1, **phases, **stds}
    return pd.DataFrame([{**common, **run} for run in runs])


def test_predictions_come_only_from_smaller_finished_runs_by_hand():

    runs = _mpi_ssgd_runs(
        {"run_id": "n1", "nodes": 1, "ranks": 1, "state": "COMPLETED",
         "t_iter": 0.031, "t_comm": 0.0},
        {"run_id": "n2", "nodes": 2, "ranks": 2, "state": "NEW", "t_iter": None,
         "t_comm": None},
    )
    own = preflight.Preflight(site="s", partition="p", inter=preflight_level("inter", 2, 1, 2))
    records, notes = predictions.predict_runs(runs, {"n2"}, {"p": own}, now=5.0)
    assert notes == [] and len(records) == 1
    rec = records[0]
    # ring of 2 over α = 1 ms, B = 1e6: 2·1e-3 + 248,024/1e6 s; nothing else changes
    grad = 248024
    assert rec["grad_bytes"] == grad and rec["compute_scale"] == 1.0
    assert rec["t_iter"] == pytest.approx(0.031 + 2e-3 + grad / 1e6)
    assert rec["speedup"] == pytest.approx(2 * 0.031 / rec["t_iter"])
    # the run's own measurement (had it one) changes nothing: it is never an input
    runs.loc[1, ["state", "t_iter", "t_comm"]] = ["COMPLETED", 9.9, 9.0]
    again, _ = predictions.predict_runs(runs, {"n2"}, {"p": own}, now=5.0)
    assert again[0]["t_iter"] == rec["t_iter"]
    # nodes found on one machine of 2 cores: 2 ranks -> 1 per core, no slowdown; from 2 to 4
    shared = preflight.Preflight(site="s", partition="p", inter=preflight_level("inter", 4, 1, 1))
    assert shared.compute_load(2) == 1.0 and shared.compute_load(4) == 2.0
    # no pre-flight for the partition: said, not guessed
    _, notes = predictions.predict_runs(runs, {"n2"}, {}, now=5.0)
    assert notes and "no pre-flight network for partition p" in notes[0]


def test_measured_t_iter_takes_the_runs_tables_rows():
    """The rows of one run the runs table's t_iter comes from: the breakdown window (a row
    without a window is one, as the merge reads it), warm-up left out."""
    import pandas as pd

    rows = pd.DataFrame({
        "run_id": ["a", "a", "a", "a", "a", "b"],
        "window": ["native", "breakdown", None, "breakdown", "breakdown", "breakdown"],
        "warmup_iter": [False, True, False, False, None, False],
        "t_iter": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]})
    assert predictions.measured_t_iter(rows, "a").tolist() == [3.0, 4.0, 5.0]
    assert predictions.measured_t_iter(rows.drop(columns=["window", "warmup_iter"]),
                                       "a").tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_each_node_count_is_priced_on_the_fit_measured_at_it():
    """A prediction from 2 nodes to 4 prices the 2-node run's communication on the level
    measured across 2 nodes and the 4-node run's on the one across 4 (Open MPI's all-reduce
    between 2 nodes need not follow the α–β of 4); a count measured nowhere takes the next
    larger one's, beyond the largest the largest's."""

    runs = _mpi_ssgd_runs(
        {"run_id": "n2", "nodes": 2, "ranks": 2, "state": "COMPLETED",
         "t_iter": 0.5, "t_comm": 0.45},
        {"run_id": "n4", "nodes": 4, "ranks": 4, "state": "NEW", "t_iter": None,
         "t_comm": None},
    )
    four = preflight_level("inter", 4, 1, None)  # α = 1 ms, B = 1e6 B/s
    two = preflight_level("inter", 2, 1, None).model_copy(update={"bandwidth": 0.5e6})
    pf = preflight.Preflight(site="s", partition="p", inter=four, mpi_inter=four,
                             mpi_inter_at={2: two})
    assert pf.across(True, 2) is two and pf.across(True, 3) is four
    assert pf.across(True, 8) is four and pf.across(True) is four
    assert pf.across(False, 2) is four  # torch.distributed's: only the largest measured
    rec = predictions.predict_runs(runs, {"n4"}, {"p": pf}, now=5.0)[0][0]
    grad = 248024
    ring = {2: 2 * 1e-3 + grad / 0.5e6, 4: 6 * 1e-3 + 1.5 * grad / 1e6}  # 2(n-1)α + 2(n-1)/n·m/B
    assert rec["t_iter"] == pytest.approx(0.5 + ring[4] - ring[2])
    assert rec["network"]["inter"]["nodes"] == 4
    # one fit for both counts (the largest's) prices the change as the ring's alone
    one = predictions.predict_runs(
        runs, {"n4"}, {"p": pf.model_copy(update={"mpi_inter_at": {}})}, now=5.0)[0][0]
    assert one["t_iter"] == pytest.approx(0.5 + 4e-3 + 0.5 * grad / 1e6)


def test_ddps_last_bucket_is_priced_after_backward():
    """A torch-ddp prediction from a run that recorded its last bucket's bytes
    (``comm_tail_bytes``): the whole gradient's all-reduce fits behind backward, the last
    bucket's cannot, and the prediction says so; without the column it hides it all."""
    ddp = {"mode": "torch-ddp", "model": "resnet18", "options": "{}", "t_b": 0.04,
           "comm_tail_bytes": 16_000_000}
    runs = _mpi_ssgd_runs(
        {**ddp, "run_id": "n1", "nodes": 1, "ranks": 1, "state": "COMPLETED", "t_iter": 0.06,
         "t_comm": 0.0},
        {**ddp, "run_id": "n2", "nodes": 2, "ranks": 2, "state": "NEW", "t_iter": None,
         "t_comm": None},
    )
    fast = preflight_level("inter", 2, 1, None).model_copy(update={"bandwidth": 1e9})
    pf = preflight.Preflight(site="s", partition="p", inter=fast)
    rec = predictions.predict_runs(runs, {"n2"}, {"p": pf}, now=5.0)[0][0]
    grad = 44_695_848  # ring of 2: 2α + m/B; all of it fits behind 40 ms of backward
    assert rec["grad_bytes"] == grad and 2e-3 + grad / 1e9 - 0.04 < 2e-3 + 16e6 / 1e9
    assert rec["tail_bytes"] == 16_000_000 and "last bucket" in rec["model_text"]
    assert rec["t_iter"] == pytest.approx(0.06 + 2e-3 + 16e6 / 1e9)
    hidden = predictions.predict_runs(runs.drop(columns=["comm_tail_bytes"]), {"n2"},
                                      {"p": pf}, now=5.0)[0][0]
    assert hidden["tail_bytes"] is None
    assert hidden["t_iter"] == pytest.approx(0.06 + 2e-3 + grad / 1e9 - 0.04)


def test_a_run_predicted_past_its_time_limit_is_warned_before_it_is_submitted():
    """Two windows of warm-up + measured iterations at the predicted t_iter, or at its
    interval's upper end, against the run's time limit. The case that asked for it: AlexNet
    across 4 Ethernet nodes of the test cluster, a 10-iteration Horovod run predicted at
    20.35 s took 23 s an iteration and ended TIMEOUT at the site's 10 minutes."""
    from orchestrator import site as sitemod
    from orchestrator.plan.sweep import SweepSpec, expand

    site = sitemod.load("testcluster")[0]
    run = expand(SweepSpec(nodes=(4,), modes=("horovod",), models=("alexnet",), iters=10,
                           warmup=2), site)[0]
    assert run.time_limit_min == 10
    assert predictions.past_time_limit({"t_iter": 20.35}, run) is None  # 8.1 min: inside
    assert predictions.past_time_limit({"t_iter": 20.35, "t_iter_high": 26.0}, run) == (
        f"{run.run_id}: its 24 iterations at the predicted 20.4 s take 8.1 min (10.4 min at "
        "its interval's upper end), past its time limit of 10 min: it may end TIMEOUT "
        "(--time-limit 16 gives it room)")
    assert predictions.past_time_limit({"t_iter": 26.0, "t_iter_high": 20.0}, run) == (
        f"{run.run_id}: its 24 iterations at the predicted 26 s take 10.4 min, past its time "
        "limit of 10 min: it will likely end TIMEOUT (--time-limit 16 gives it room)")
    longer = run.model_copy(update={"time_limit_min": 20})
    assert predictions.past_time_limit({"t_iter": 26.0, "t_iter_high": 40.0}, longer) is None
    epochs = run.model_copy(update={"epochs": 2})
    assert predictions.past_time_limit({"t_iter": 260.0}, epochs) is None
