"""The report's convergence part: time to accuracy beside throughput, the sync
check, and held-out accuracy against wall time and against epochs, sync and async told apart.

Pure: the runs table and ``results/epochs.parquet`` in, Tables and PNG bytes out. Only runs
with ``--epochs`` appear; a result set without them adds nothing to the report.
"""

from __future__ import annotations

import json

import pandas as pd

from .. import modes
from ..results import convergence
from .fmt import as_float, fmt_num
from .tables import Table


def epoch_runs(runs: pd.DataFrame) -> pd.DataFrame:
    if runs.empty or "epochs_done" not in runs.columns:
        return runs.iloc[0:0]
    return runs[runs["epochs_done"].notna()].sort_values(["mode", "model", "batch_size",
                                                          "ranks", "repeat"])


def _synchronous(row) -> bool:
    return modes.get(row["mode"]).is_synchronous(json.loads(row.get("options") or "{}"))


def label(row) -> str:
    opts = json.loads(row.get("options") or "{}")
    extra = f" {opts['kvstore']}" if "kvstore" in opts else ""
    return (f"{row['mode']}{extra} {row['model']} {int(row['ranks'])}x{int(row['batch_size'])}"
            f"{'' if _synchronous(row) else ' (async)'}")


def tables(runs: pd.DataFrame) -> list[Table]:
    done = epoch_runs(runs)
    if done.empty:
        return []
    rows = []
    # Language models: their held-out loss per token and perplexity beside the accuracy.
    lm = "final_perplexity" in done.columns and done["final_perplexity"].notna().any()
    for _, r in done.iterrows():
        tta = as_float(r.get("tta_s"))
        rows.append([
            label(r), str(int(r["nodes"])), str(int(r["epochs_done"])),
            fmt_num(r.get("final_test_acc"), ".3f"), fmt_num(r.get("best_test_acc"), ".3f"),
            *([fmt_num(r.get("final_test_loss"), ".3f"),
               fmt_num(r.get("final_perplexity"), ".2f")] if lm else []),
            "-" if tta is None else f"{tta:.1f} s ({int(r['tta_epochs'])} ep.)",
            fmt_num(r.get("tta_speedup"), ".2f"), fmt_num(r.get("samples_per_s"), ",.0f"),
            fmt_num(r.get("speedup"), ".2f"),
            str(r.get("tta_reason") or "") if tta is None else "",
        ])
    out = [Table("tta", "Time to accuracy: held-out accuracy reached, and the speedup in time "
                 "to accuracy beside the speedup in samples/s",
                 ["run", "nodes", "epochs", "final acc.", "best acc.",
                  *(["held-out loss", "perplexity"] if lm else []), "time to acc.",
                  "speedup (tta)", "samples/s", "speedup (samples/s)", "why no time"], rows,
                 key_columns=1, text_columns=(7, 11) if lm else (5, 9),
                 note="Time to accuracy runs from the first epoch's start to the end of the "
                 "evaluation of the first epoch at or above --target-accuracy (evaluation "
                 "included). Speedup in time to accuracy is against the configuration's run "
                 "with the fewest ranks at the same per-rank batch." + (
                     " A language model's accuracy is its next-token (masked-token) accuracy "
                     "over the held-out tokens; its held-out loss is per token, perplexity its "
                     "exponential." if lm else ""))]
    checked = done[done["sync_check"].notna() | done["sync_detail"].notna()] \
        if "sync_check" in done.columns else done.iloc[0:0]
    if not checked.empty:
        out.append(Table(
            "sync", "Synchronisation check: a synchronous W-rank run must follow the loss "
            "curve of the 1-rank run at the same global batch",
            ["run", "check", "detail"],
            [[label(r), str(r.get("sync_check") or "not checked"), str(r.get("sync_detail"))]
             for _, r in checked.iterrows()], key_columns=1, text_columns=(1, 2),
            note=f"Tolerance: {convergence.SYNC_RTOL:.1%} in epoch-mean training loss, "
            f"{convergence.SYNC_ACC_TOL} in held-out accuracy; asynchronous modes are reported, "
            "not failed."))
    return out


def figure(runs: pd.DataFrame, epochs: pd.DataFrame) -> bytes | None:
    """Held-out accuracy against wall time (left) and against epochs (right), a line per run;
    synchronous runs solid, asynchronous ones dashed."""
    from .plots import CONFIG_COLORS, MARKERS, _figure, _png

    done = epoch_runs(runs)
    if done.empty or epochs is None or epochs.empty:
        return None
    curves = convergence.per_epoch(epochs[epochs["run_id"].isin(set(done["run_id"]))])
    fig = _figure(12.0, 4.6)
    by_time, by_epoch = fig.subplots(1, 2)
    for i, (_, r) in enumerate(done.iterrows()):
        c = curves[curves["run_id"] == r["run_id"]]
        if c.empty:
            continue
        style = dict(color=CONFIG_COLORS[i % len(CONFIG_COLORS)],
                     marker=MARKERS[i % len(MARKERS)], markersize=4,
                     linestyle="-" if _synchronous(r) else "--", label=label(r))
        by_time.plot(c["elapsed_s"], c["test_acc"], **style)
        by_epoch.plot(c["epoch"], c["test_acc"], **style)
    targets = done["target_accuracy"].dropna().unique() if "target_accuracy" in done else []
    for ax, xlabel in ((by_time, "wall time since the first epoch's start (s)"),
                       (by_epoch, "epoch")):
        for t in targets:
            ax.axhline(float(t), color="#7f7f7f", linewidth=0.8, linestyle=":")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("held-out accuracy")
        ax.set_ylim(0, 1)
        ax.grid(True, alpha=0.3)
    from matplotlib.ticker import MaxNLocator

    by_epoch.xaxis.set_major_locator(MaxNLocator(integer=True))
    by_epoch.legend(fontsize=7, loc="lower right")
    return _png(fig)
