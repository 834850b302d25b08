"""Why: each run's speedup predicted from its configuration's 1-node breakdown.

Communication at N workers comes either from an α–β fit of the partition (ring all-reduce of
the model's float32 gradient, exposed per the mode's overlap policy: both computed by
orchestrator.perfmodel's ``predict``, shaped by :func:`from_baseline`) or, without one, as
measured in that run.
Iteration times follow the model's phase rule. Per-mode knowledge (the overlap policy) is read
from the mode descriptors (``perfmodel.overlap_of``).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd

from ..perfmodel.comm import AlphaBeta, CommModel
from ..perfmodel.compute import iteration_time
from ..perfmodel.inputs import (
    PHASES,
    Breakdown,
    ModelInputError,
    gradient_bytes,
    overlap_of,  # noqa: F401 - the report's tables take the declared overlap from here
    priced_overlap,
)
from ..perfmodel.predict import predict
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
        overlap = priced_overlap(first["mode"], first.get("options"), grad)
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
                pred = from_baseline(phases, base_w, [w], alpha_beta=ab,
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


def from_baseline(
    base: dict[str, float],
    base_workers: int,
    workers: list[int],
    *,
    alpha_beta: AlphaBeta | None = None,
    grad_bytes: int | None = None,
    measured_comm: dict[int, tuple[float, float | None]] | None = None,
    overlap: str = "none",
    prefetch: bool = False,
) -> list[dict]:
    """Predict iteration time and speedup at ``workers`` from one measured breakdown.

    ``base``: the phases (seconds) measured with ``base_workers`` workers (usually the 1-node
    run); its ``t_comm`` is the exposed communication measured there. Communication at ``w``:

    * with ``alpha_beta`` and ``grad_bytes``: total ``allreduce(grad_bytes, w)`` (α–β ring),
      exposed per ``overlap`` (``wfbp``: ``max(0, total − t_b)``), both from the model's
      ``predict``;
      the baseline's own exposed communication is kept and only the α–β difference to
      ``base_workers`` is added;
    * else ``measured_comm[w] = (exposed, total)``, as measured at ``w`` ("scaled as measured").

    Iteration times use the phase rule (``prefetch``: pipelined I/O);
    ``speedup = (w / base_workers) · t_iter(base_workers) / t_iter(w)``.
    """
    if alpha_beta is not None and grad_bytes is None:
        raise ModelInputError("alpha_beta needs grad_bytes (the gradient size)")
    counts = sorted({base_workers, *workers})
    compute = {p: float(base[p]) for p in PHASES if p != "t_comm"}
    if alpha_beta is not None:
        comms = _alpha_beta_comm(base, base_workers, counts, compute, alpha_beta, grad_bytes,
                                 overlap)
    else:
        comms = {w: _measured_comm(base, base_workers, w, measured_comm) for w in counts}
    breakdown = Breakdown(**compute, t_comm={w: comms[w][0] for w in counts})
    t_base = iteration_time(breakdown, base_workers, prefetch=prefetch)
    out = []
    for w in workers:
        t = iteration_time(breakdown, w, prefetch=prefetch)
        s = (w / base_workers) * t_base / t if t > 0 else math.nan
        out.append({"workers": w, "t_iter": t, "speedup": s, "efficiency": s / (w / base_workers),
                    "t_comm_exposed": comms[w][0], "t_comm_total": comms[w][1],
                    **compute,
                    "overlap": overlap, "prefetch": prefetch,
                    "source": "breakdown+alpha-beta" if alpha_beta is not None
                    else "breakdown+measured-comm"})
    return out


def _alpha_beta_comm(base: dict[str, float], base_workers: int, counts: list[int],
                     compute: dict[str, float], alpha_beta: AlphaBeta,
                     grad_bytes: int, overlap: str) -> dict[int, tuple[float, float]]:
    """(exposed, total) communication at every count: the α–β ring all-reduce of the
    gradient, exposed per ``overlap``, shifted so that at ``base_workers`` it is the exposed
    communication measured there."""
    ring = {p.workers: p for p in predict(
        Breakdown(**compute, t_comm=0.0), counts, overlap=overlap,
        alpha_beta=alpha_beta, grad_bytes=grad_bytes)}
    at_base = ring[base_workers].t_comm_exposed
    return {w: (max(0.0, base["t_comm"] + (ring[w].t_comm_exposed - at_base)),
                ring[w].t_comm_total) for w in counts}


def _measured_comm(base: dict[str, float], base_workers: int, w: int,
                   measured_comm: dict[int, tuple[float, float | None]] | None,
                   ) -> tuple[float, float | None]:
    if w == base_workers:
        return base["t_comm"], base.get("t_comm_total")
    if measured_comm is None or w not in measured_comm:
        raise ModelInputError(
            f"no α–β and no measured communication at {w} worker(s): run "
            "'orch netbench' on the partition or give --bandwidth and --latency")
    return measured_comm[w]
