"""Why: each run's speedup predicted from its configuration's 1-node breakdown.

Communication at N workers comes either from an α–β fit of the partition (ring all-reduce of
the model's float32 gradient, exposed per the mode's overlap policy: both computed by
orchestrator.perfmodel, ``predict_from_baseline``) or, without one, as measured in that run.
Iteration times follow the model's phase rule. Per-mode knowledge (the overlap policy) is read
from the mode descriptors (``perfmodel.overlap_of``).
"""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from ..perfmodel.comm import CommModel
from ..perfmodel.inputs import gradient_bytes, overlap_of
from ..perfmodel.predict import predict_from_baseline
from ..results.select import baseline, config_of, training_runs
from .fmt import as_float


def predictions(runs: pd.DataFrame, comm: Callable[[str, str], CommModel]) -> pd.DataFrame:
    """Predicted speedup and t_iter of every run of a training mode, with the residuals.

    ``comm(site, partition)`` gives the α–β to use (or none). Columns: run_id,
    predicted_speedup, predicted_t_iter, residual_speedup (measured − predicted),
    residual_t_iter, t_comm_predicted, comm_model ('α–β' or 'measured'), overlap, note.
    """
    cols = ["run_id", "predicted_speedup", "predicted_t_iter", "residual_speedup",
            "residual_t_iter", "t_comm_predicted", "comm_model", "overlap", "note"]
    runs = training_runs(runs)
    if runs.empty:
        return pd.DataFrame(columns=cols)
    rows = []
    configs = config_of(runs)
    for _, group in runs.groupby(configs, sort=False):
        first = group.iloc[0]
        base = baseline(group)
        model = comm(str(first["site"]), str(first["partition"]))
        grad = gradient_bytes(str(first["model"]), str(first["dataset"]),
                              first.get("model_params"))
        overlap = overlap_of(first["mode"], first.get("options"), grad)
        ab = model.alpha_beta if grad is not None else None
        for _, run in group.iterrows():
            row = dict.fromkeys(cols)
            row.update(run_id=run["run_id"], overlap=overlap)
            if run["state"] != "COMPLETED":
                row["note"] = f"not predicted: run {run['state']}"
            elif pd.isna(run["t_iter"]):  # an epoch run: samples/s from its epochs' steps
                row["note"] = "not predicted: no breakdown window (phases) in this run"
            elif base is None:
                row["note"] = "not predicted: no completed 1-node run of this configuration"
            else:
                phases, base_w = base
                w = int(run["ranks"])
                measured = {w: (float(run["t_comm"]), as_float(run.get("t_comm_total")))}
                pred = predict_from_baseline(phases, base_w, [w], alpha_beta=ab,
                                             grad_bytes=grad, measured_comm=measured,
                                             overlap=overlap)[0]
                row.update(predicted_speedup=pred["speedup"], predicted_t_iter=pred["t_iter"],
                           t_comm_predicted=pred["t_comm_exposed"],
                           comm_model="α–β" if ab is not None else "measured")
                if as_float(run.get("speedup")) is not None:
                    row["residual_speedup"] = float(run["speedup"]) - pred["speedup"]
                row["residual_t_iter"] = float(run["t_iter"]) - pred["t_iter"]
            rows.append(row)
    return pd.DataFrame(rows, columns=cols)
