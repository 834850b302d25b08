"""Convergence of epoch runs (time to accuracy): the epochs table, time to accuracy, the sync check.

Throughput says how fast a mode moves samples, not whether it learns; an asynchronous
parameter server can win on samples/s and lose on accuracy. For runs with ``--epochs`` this
module reads each rank's ``epoch`` records (training loss and accuracy over the samples that
rank trained on, held-out accuracy of the whole held-out split, epoch and evaluation time) and
derives:

* ``results/epochs.parquet``: one row per (run, rank, epoch), a file per run (the merge
  writes it, :func:`epoch_table`);
* per run: ``epochs_done``, ``final_test_acc``, ``best_test_acc``, and time to accuracy
  ``tta_s`` — from the first epoch's start (earliest rank) to the end of the evaluation of the
  first epoch whose held-out accuracy reached ``target_accuracy`` (latest rank), evaluation
  time included as MLPerf counts it — or null with ``tta_reason``; ``tta_speedup`` against the
  configuration's baseline (its run with the fewest ranks), beside the samples/s speedup;
* the sync-correctness check: a synchronous run of W ranks at batch B per rank must follow the
  loss curve of a 1-rank run of the same configuration at batch W·B (same seed, same sampler:
  the same samples step by step, so only floating-point order differs). Its epoch-mean training
  loss (sample-weighted over ranks) must be within ``SYNC_RTOL`` of the 1-rank run's at every
  epoch, and its held-out accuracy within ``SYNC_ACC_TOL``. A mode whose ranks do not really
  synchronise drifts apart at once. Asynchronous runs are reported (``async``), not failed.
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pyarrow as pa

from .. import modes, protocol
from ..spec.api import group_names

# Measured on the local site (torch-ddp, LeNet-5, digits, 4 epochs): 2 ranks x 64 vs 1 x 128
# differ by < 0.01 % in training loss and not at all in held-out accuracy; ranks that train
# apart differ by whole percents within the first epoch.
SYNC_RTOL = 0.005
SYNC_ACC_TOL = 0.01
EPOCH_COLUMNS = ("run_id", "mode", "nodes", "ranks", "rank", "epoch", "t_start", "t_epoch",
                 "t_eval", "train_loss", "train_acc", "test_acc", "test_loss", "samples")
# A language model's held-out loss per token (``test_loss``) and its exponential, perplexity.
RUN_COLUMNS = ("epochs_done", "final_test_acc", "best_test_acc", "final_test_loss",
               "final_perplexity", "tta_s", "tta_epochs", "tta_reason", "tta_speedup",
               "sync_check", "sync_detail")
# Apart from size and per-rank batch: what makes two epoch runs the same configuration (the
# sync check compares W ranks at batch B with one rank at W·B, so the batch may differ).
_SAME = tuple(k for k in group_names() if k != "batch_size")


def epoch_rows(run_id: str, mode: str, nodes: int, ranks: int, logs) -> list[dict]:
    """The epoch records of one run's rank logs as rows."""
    rows = []
    for log in logs:
        for rec in log.epochs:
            row = {"run_id": run_id, "mode": mode, "nodes": nodes, "ranks": ranks,
                   "rank": log.rank, "epoch": rec["epoch"]}
            row.update({k: rec.get(k) for k in (*protocol.EPOCH_FIELDS, "test_loss",
                                                "samples")})
            rows.append(row)
    return rows


# epochs.parquet's types, declared (not inferred from one run's rows: a run whose records all
# lack a field would write a column of nulls of no type, which no other run's file matches).
EPOCH_SCHEMA = pa.schema([(c, pa.string() if c in ("run_id", "mode")
                           else pa.float64() if c in protocol.EPOCH_FIELDS else pa.int64())
                          for c in EPOCH_COLUMNS])


def epoch_frame(rows: list[dict]) -> pd.DataFrame:
    """Epoch rows (:func:`epoch_rows`) as the table :func:`summarise` takes."""
    return pd.DataFrame(rows, columns=list(EPOCH_COLUMNS))


def epoch_table(rows: list[dict]) -> pa.Table:
    """Epoch rows as a run's file of ``results/epochs.parquet`` holds them."""
    return pa.Table.from_pylist(rows, schema=EPOCH_SCHEMA)


def per_epoch(ep: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, epoch): sample-weighted training loss/accuracy over the ranks, the
    held-out accuracy (the same on every rank; the mean, should one differ), and the epoch's
    end on the wall clock (latest rank, evaluation included) since the run's first start."""
    if ep.empty:
        return pd.DataFrame(columns=["run_id", "epoch", "train_loss", "train_acc", "test_acc",
                                     "test_loss", "elapsed_s"])
    ep = ep.assign(loss_x=ep["train_loss"] * ep["samples"], acc_x=ep["train_acc"] * ep["samples"],
                   end=ep["t_start"] + ep["t_epoch"] + ep["t_eval"])
    g = ep.groupby(["run_id", "epoch"], sort=True)
    out = g.agg(loss_x=("loss_x", "sum"), acc_x=("acc_x", "sum"), samples=("samples", "sum"),
                test_acc=("test_acc", "mean"), test_loss=("test_loss", "mean"),
                end=("end", "max")).reset_index()
    out["train_loss"] = out["loss_x"] / out["samples"]
    out["train_acc"] = out["acc_x"] / out["samples"]
    start = ep.groupby("run_id")["t_start"].min()
    out["elapsed_s"] = out["end"] - out["run_id"].map(start)
    return out[["run_id", "epoch", "train_loss", "train_acc", "test_acc", "test_loss",
                "elapsed_s"]]


def run_summary(run: dict, curve: pd.DataFrame) -> dict:
    """epochs done, final/best held-out accuracy and time to accuracy of one run."""
    out: dict = dict.fromkeys(RUN_COLUMNS)
    if curve.empty:
        out["tta_reason"] = "no epoch logged"
        return out
    out.update(epochs_done=int(curve["epoch"].max()),
               final_test_acc=float(curve["test_acc"].iloc[-1]),
               best_test_acc=float(curve["test_acc"].max()))
    if "test_loss" in curve and curve["test_loss"].notna().any():
        loss = float(curve["test_loss"].dropna().iloc[-1])
        out.update(final_test_loss=loss, final_perplexity=math.exp(min(loss, 700.0)))
    target = run.get("target_accuracy")
    if target is None or pd.isna(target):
        out["tta_reason"] = "no --target-accuracy given"
        return out
    reached = curve[curve["test_acc"] >= target]
    if reached.empty:
        out["tta_reason"] = (f"not reached in {out['epochs_done']} epoch(s): best held-out "
                             f"accuracy {out['best_test_acc']:.3f} < {target}")
        return out
    first = reached.iloc[0]
    out.update(tta_s=float(first["elapsed_s"]), tta_epochs=int(first["epoch"]))
    return out


def _config(row: dict) -> tuple:
    return tuple(row.get(k) for k in _SAME)


def sync_check(run: dict, curve: pd.DataFrame, reference: dict | None,
               ref_curve: pd.DataFrame | None) -> tuple[str | None, str | None]:
    """('pass' | 'fail' | 'async' | None, detail) for one multi-rank epoch run."""
    if run.get("ranks", 1) < 2:
        return None, None
    if not modes.get(run["mode"]).is_synchronous(json.loads(run.get("options") or "{}")):
        return "async", "asynchronous mode: reported, not checked"
    if reference is None or ref_curve is None or ref_curve.empty or curve.empty:
        return None, (f"no 1-rank run at batch {run['batch_size'] * run['ranks']} (the same "
                      f"global batch) to check against")
    both = curve.merge(ref_curve, on="epoch", suffixes=("", "_ref"))
    if both.empty:
        return None, "no epoch in common with the 1-rank run"
    rel = ((both["train_loss"] - both["train_loss_ref"]).abs() / both["train_loss_ref"]).max()
    dacc = (both["test_acc"] - both["test_acc_ref"]).abs().max()
    ok = rel <= SYNC_RTOL and dacc <= SYNC_ACC_TOL
    detail = (f"vs {reference['run_id']} (1 rank, batch {reference['batch_size']}) over "
              f"{len(both)} epoch(s): training loss differs by at most {rel:.3%} (tolerance "
              f"{SYNC_RTOL:.1%}), held-out accuracy by {dacc:.3f} (tolerance {SYNC_ACC_TOL})")
    return ("pass" if ok else "fail"), detail


def summarise(runs: pd.DataFrame, ep: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with the convergence columns (None for runs of iterations)."""
    runs = runs.copy()
    for col in RUN_COLUMNS:
        runs[col] = None
    if "epochs" not in runs or ep.empty:
        return runs
    curves = {k: c.reset_index(drop=True) for k, c in per_epoch(ep).groupby("run_id")}
    empty = pd.DataFrame(columns=["epoch", "train_loss", "test_acc", "elapsed_s"])
    rows = runs.to_dict("records")
    done = [r for r in rows if r.get("epochs") is not None and not pd.isna(r["epochs"])
            and r.get("state") == "COMPLETED"]
    for r in done:
        r.update(run_summary(r, curves.get(r["run_id"], empty)))
    for r in done:
        ref = next((c for c in done if c["ranks"] == 1 and _config(c) == _config(r)
                    and c["batch_size"] == r["batch_size"] * r["ranks"]), None)
        r["sync_check"], r["sync_detail"] = sync_check(
            r, curves.get(r["run_id"], empty), ref,
            curves.get(ref["run_id"]) if ref else None)
        base = min((c for c in done if _config(c) == _config(r)
                    and c["batch_size"] == r["batch_size"] and c["tta_s"] is not None),
                   key=lambda c: c["ranks"], default=None)
        if base is not None and r["tta_s"] is not None:
            r["tta_speedup"] = base["tta_s"] / r["tta_s"]
    return pd.DataFrame(rows, columns=runs.columns)
