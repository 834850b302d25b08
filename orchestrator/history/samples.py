"""The samples a comparison reads: one row per (run, metric, iteration) of a result set, with
the run's configuration key, in a long table that the history stores and ``orch compare``
tests.

Each metric is declared once in :data:`METRICS`, with the direction that is better for it.
Per-iteration values come from the iterations table after the warm-up, aggregated over the
ranks of each iteration: the throughput is the step's samples over its slowest rank's time (a
synchronous step is as slow as that rank); the iteration time and its phases are the ranks'
mean, as in the runs table. Run-level metrics (the compute throughput, tokens/s, MFU, energy
per sample: those the runs table has) have one value per run, at ``iter`` -1.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import modes
from ..errors import UserError


@dataclass(frozen=True)
class Metric:
    """A compared quantity: its column, its name in reports, its unit and which way is better."""

    name: str
    label: str
    unit: str
    higher_is_better: bool
    per_run: bool = False  # one value per run (from the runs table), not one per iteration


METRICS: tuple[Metric, ...] = (
    Metric("samples_per_s", "throughput", "samples/s", True),
    Metric("t_iter", "iteration time", "s", False),
    Metric("t_io", "input", "s", False),
    Metric("t_h2d", "host-to-device copy", "s", False),
    Metric("t_f", "forward", "s", False),
    Metric("t_b", "backward", "s", False),
    Metric("t_u", "update", "s", False),
    Metric("compute", "compute", "s", False),
    Metric("t_comm", "exposed communication", "s", False),
    Metric("t_comm_total", "total communication", "s", False),
    # Run-level figures of the runs table, one value per run, each taken where the runs
    # table has its column: a metric a workload adds joins the history by a line here.
    Metric("samples_per_s_compute", "compute throughput", "samples/s", True, per_run=True),
    Metric("tokens_per_s", "tokens/s", "tokens/s", True, per_run=True),
    Metric("mfu", "model FLOPs utilisation", "fraction", True, per_run=True),
    Metric("energy_per_sample_j", "energy per sample", "J/sample", False, per_run=True),
    # The field's figures (results.workload): one value per run.
    Metric("tokens_per_s", "tokens/s", "tokens/s", True, per_run=True),
    Metric("model_flops_per_s_per_device", "model FLOP/s per device", "FLOP/s", True,
           per_run=True),
    Metric("mfu", "MFU", "", True, per_run=True),
    Metric("peak_memory_bytes", "peak memory per rank", "bytes", False, per_run=True),
)
BY_NAME = {m.name: m for m in METRICS}
PHASES = ("t_iter", "t_io", "t_h2d", "t_f", "t_b", "t_u", "t_comm", "t_comm_total")
COMPUTE = ("t_f", "t_b", "t_u")  # 'compute' is their sum per iteration

# What makes two runs the same configuration (those of these columns the result set has).
KEY = ("site", "partition", "mode", "model", "dataset", "nodes", "tasks_per_node",
       "batch_size", "options", "precision", "memory_format", "compile")
COLUMNS = ("run_id", "repeat", "metric", "iter", "value")


def key_columns(frame: pd.DataFrame) -> list[str]:
    return [k for k in KEY if k in frame.columns]


# The run dimensions among KEY: a mode that declares one gives its runs a value for it.
DIMENSIONS = ("precision", "memory_format", "compile")


def with_mode_defaults(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each run dimension its mode declares but the run left null (a run
    recorded before its mode declared it, e.g. TensorFlow's precision) set to the declared
    default, which is what the mode did before it could be chosen: so that such a run and a
    newer one at the default are one configuration, not two that never meet."""
    dims = [d for d in DIMENSIONS if d in frame.columns]
    if not dims or "mode" not in frame.columns or not frame[dims].isna().any().any():
        return frame
    frame = frame.copy()
    for name in frame["mode"].dropna().unique():
        try:
            declared = {o.name: o.default for o in modes.get(name).options}
        except UserError:  # a mode this orch no longer has: leave its runs as recorded
            continue
        of_mode = frame["mode"] == name
        for d in dims:
            if d in declared:
                frame.loc[of_mode & frame[d].isna(), d] = str(declared[d])
    return frame


def without_options(options: str, names: tuple[str, ...]) -> str:
    """A run's options column (JSON) without the named options: what --ignore-option matches."""
    if not names:
        return options
    data = {k: v for k, v in json.loads(options or "{}").items() if k not in names}
    return json.dumps(data, sort_keys=True)


def samples(runs: pd.DataFrame, iters: pd.DataFrame) -> pd.DataFrame:
    """The long sample table of a result set's completed runs (see the module's docstring)."""
    done = runs[runs["state"] == "COMPLETED"]
    keys = key_columns(done)
    measured = iters[(~iters["warmup_iter"].astype(bool)) & iters["run_id"].isin(done["run_id"])]
    parts = [_throughput(measured), _phases(measured), _per_run(done)]
    long = pd.concat([p for p in parts if not p.empty], ignore_index=True) if any(
        not p.empty for p in parts) else pd.DataFrame(columns=list(COLUMNS))
    long = long[np.isfinite(long["value"].astype(float))]
    head = done[["run_id", *keys, "repeat"]].astype({k: str for k in ("options",) if k in keys})
    return long.drop(columns=["repeat"], errors="ignore").merge(head, on="run_id")


def _window(measured: pd.DataFrame, preferred: str) -> pd.DataFrame:
    """Each run's rows of its ``preferred`` window, or all its rows where it has none."""
    if "window" not in measured.columns:
        return measured
    has = measured.groupby("run_id")["window"].transform(lambda w: (w == preferred).any())
    return measured[(measured["window"] == preferred) | ~has]


def _throughput(measured: pd.DataFrame) -> pd.DataFrame:
    """Per iteration: the step's samples over its slowest rank's time."""
    rows = _window(measured, "native").groupby(["run_id", "iter"]).agg(
        samples=("samples", "sum"), t_iter=("t_iter", "max")).reset_index()
    rows = rows[rows["t_iter"] > 0]
    rate = rows.assign(metric="samples_per_s", value=rows["samples"] / rows["t_iter"])
    return rate[["run_id", "metric", "iter", "value"]]


def _phases(measured: pd.DataFrame) -> pd.DataFrame:
    """Per iteration of the breakdown window: the iteration time and each phase, the ranks'
    mean (as the runs table's), and compute (forward + backward + update)."""
    present = [p for p in PHASES if p in measured.columns]
    if not present:
        return pd.DataFrame(columns=["run_id", "metric", "iter", "value"])
    rows = _window(measured, "breakdown").groupby(["run_id", "iter"])[present].mean()
    if all(p in present for p in COMPUTE):
        rows["compute"] = rows[list(COMPUTE)].sum(axis=1, min_count=len(COMPUTE))
    long = rows.reset_index().melt(id_vars=["run_id", "iter"], var_name="metric",
                                   value_name="value")
    return long.dropna(subset=["value"])


def _per_run(done: pd.DataFrame) -> pd.DataFrame:
    frames = []
    for metric in (m for m in METRICS if m.per_run and m.name in done.columns):
        values = pd.to_numeric(done[metric.name], errors="coerce")
        frames.append(pd.DataFrame({"run_id": done["run_id"], "metric": metric.name,
                                    "iter": -1, "value": values}).dropna(subset=["value"]))
    return pd.concat(frames) if frames else pd.DataFrame()
