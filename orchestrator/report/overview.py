"""What a report says first: a summary of a few lines, one overview row per configuration, and
the flagged predictions' reasons grouped (pure: frames in, lines and a Table out).

The summary answers, over the whole sweep: how many runs and how many did not complete; the
best scale of each configuration and its efficiency at the largest; where the time goes at the
largest scale; whether the predictions held (the scorecard's, stated before the runs, else the
model's after the fact). The overview table says the same per configuration. Every flag a
prediction carried is said once, with the runs it covers (a sweep at 4 ranks on 2 cores flags
every 4-rank run with the same words).
"""

from __future__ import annotations

import re

import pandas as pd

from ..perfmodel.validity import BROKEN, UNRELIABLE
from .fmt import PHASE_LABELS, PHASE_ORDER, as_float, fmt_num, nodes_word
from .tables import Table


def largest(g: pd.DataFrame) -> pd.Series:
    """A configuration's run at its largest size (most ranks, then most nodes)."""
    return g.sort_values(["ranks", "nodes"]).iloc[-1]


def best(g: pd.DataFrame) -> pd.Series:
    """A configuration's run with the highest throughput."""
    return g.loc[g["samples_per_s"].astype(float).idxmax()]


def time_shares(run: pd.Series, top: int = 2, skip: tuple[str, ...] = ()) -> list[
        tuple[str, float]]:
    """The ``top`` phases (less ``skip``) that take most of a run's iteration, with their
    share of t_iter."""
    t_iter = as_float(run.get("t_iter"))
    if not t_iter:
        return []
    parts = [(p, as_float(run.get(p)) or 0.0) for p in (*PHASE_ORDER, "t_unaccounted")
             if p not in skip]
    parts = [(p, max(v, 0.0) / t_iter) for p, v in parts]
    return sorted(parts, key=lambda pv: -pv[1])[:top]


def shares_text(run: pd.Series, top: int = 2, skip: tuple[str, ...] = ()) -> str:
    return ", ".join(f"{PHASE_LABELS[p]} {share:.0%}"
                     for p, share in time_shares(run, top, skip)) or "-"


def _prediction_cell(run: pd.Series, pred_by: pd.DataFrame, stated: pd.DataFrame) -> str:
    """How the prediction of a run did: the one stated before it (scorecard), else the model's
    after the fact."""
    if not stated.empty and run["run_id"] in stated.index:
        s = stated.loc[run["run_id"]]
        error = as_float(s.get("error_t_iter"))
        if error is not None:
            held = "held" if abs(error) <= HELD else "missed"
            flag = "" if bool(s.get("valid", True)) else " (flagged before the run)"
            return f"{held}: t_iter {error:+.0%}{flag}"
    if run["run_id"] in pred_by.index:
        p = pred_by.loc[run["run_id"]]
        predicted, measured = as_float(p.get("predicted_speedup")), as_float(run["speedup"])
        if predicted and measured:
            error = predicted / measured - 1
            held = "held" if abs(error) <= HELD else "missed"
            return f"{held}: speedup {predicted:.2f} predicted, {measured:.2f} measured"
    return "-"


# A prediction within this share of what was measured "held" in the summary's words.
HELD = 0.10


def overview_table(done: pd.DataFrame, pred_by: pd.DataFrame,
                   scorecard: pd.DataFrame | None) -> Table:
    """One row per configuration: its best scale, its efficiency at its largest, where the time
    goes there and how its prediction did."""
    stated = (scorecard.set_index("run_id") if scorecard is not None and not scorecard.empty
              and "run_id" in scorecard.columns else pd.DataFrame())
    rows = []
    for label, g in done.groupby("_label", sort=True):
        top, peak = largest(g), best(g)
        rows.append([label, nodes_word(int(peak["nodes"])),
                     fmt_num(peak["samples_per_s"], ",.0f"),
                     f"{fmt_num(top['efficiency'], '.0%')} at {nodes_word(int(top['nodes']))}",
                     shares_text(top), _prediction_cell(top, pred_by, stated)])
    return Table("overview", "Each configuration at a glance",
                 ["configuration", "best at", "samples/s there", "efficiency at the largest",
                  "where the time goes there", "prediction there"], rows,
                 "efficiency = speedup / (ranks / baseline ranks), the baseline being the "
                 "configuration's run with the fewest ranks; a prediction held when it was "
                 f"within {HELD:.0%} of what was measured", key_columns=1,
                 text_columns=(1, 3, 4, 5))


def summary_lines(runs: pd.DataFrame, done: pd.DataFrame, pred_by: pd.DataFrame,
                  scorecard: pd.DataFrame | None) -> list[str]:
    """A few lines over the whole sweep (see the module's docstring)."""
    lines = [_runs_line(runs, done)]
    if done.empty:
        return lines
    tops = [largest(g) for _, g in done.groupby("_label", sort=True)]
    lines += _scaling_lines(done, tops)
    lines.append(_time_line(tops))
    held = _predictions_line(tops, pred_by, scorecard)
    if held:
        lines.append(held)
    return lines


def _runs_line(runs: pd.DataFrame, done: pd.DataFrame) -> str:
    """How many training runs of how many configurations, and how many did not complete."""
    train = runs[runs["run_id"].isin(set(done["run_id"]))] if not done.empty else done
    configs = done["_label"].nunique() if not done.empty else 0
    failed = int((runs["state"] != "COMPLETED").sum()) if not runs.empty else 0
    others = len(runs) - len(train) - failed
    text = f"{len(train)} completed training run(s) of {configs} configuration(s)"
    if others > 0:
        text += f", {others} other run(s) (network benchmarks)"
    return text + (f"; {failed} did not complete (listed below)." if failed else ".")


def _scaling_lines(done: pd.DataFrame, tops: list[pd.Series]) -> list[str]:
    scaled = [t for t in tops if as_float(t["efficiency"]) is not None
              and int(t["ranks"]) > int(as_float(t.get("baseline_ranks")) or 1)]
    if not scaled:
        return ["Only one size was measured per configuration: no scaling to show."]
    ranked = sorted(scaled, key=lambda t: float(t["efficiency"]))
    worst, top = ranked[0], ranked[-1]
    line = (f"Efficiency at the largest scale: {top['_label']} {float(top['efficiency']):.0%} "
            f"at {nodes_word(int(top['nodes']))}")
    if len(ranked) > 1:
        line += (f", down to {worst['_label']} {float(worst['efficiency']):.0%} at "
                 f"{nodes_word(int(worst['nodes']))}")
    below = sum(1 for _, g in done.groupby("_label") if int(best(g)["ranks"]) < int(
        largest(g)["ranks"]))
    line += "."
    if below:
        line += (f" {below} of {len(tops)} configuration(s) ran fastest below their largest "
                 "size.")
    return [line]


def _time_line(tops: list[pd.Series]) -> str:
    comm = [(as_float(t.get("t_comm")) or 0.0) / float(t["t_iter"]) for t in tops
            if as_float(t.get("t_iter"))]
    if not comm:
        return "No phase breakdown was measured."
    worst = max(zip(comm, tops, strict=False), key=lambda ct: ct[0])
    return (f"Where the time goes at the largest scale: exposed communication takes "
            f"{sum(comm) / len(comm):.0%} of an iteration on average, most in {worst[1]['_label']}"
            f" ({worst[0]:.0%}, then {shares_text(worst[1], 1, ('t_comm',))}).")


def _predictions_line(tops: list[pd.Series], pred_by: pd.DataFrame,
                      scorecard: pd.DataFrame | None) -> str | None:
    if scorecard is not None and not scorecard.empty and "error_t_iter" in scorecard.columns:
        scored = scorecard[scorecard["error_t_iter"].notna()]
        if scored.empty:
            return None
        flagged = scored["valid"].eq(False) if "valid" in scored.columns else \
            pd.Series(False, index=scored.index)
        valid, bad = scored[~flagged], scored[flagged]
        reasons = len(flagged_groups(scored))
        if valid.empty:
            return (f"Predictions stated before the runs: all {len(bad)} were flagged before "
                    f"their runs, for {reasons} reason(s) (below), and are scored apart: median "
                    f"error {bad['error_t_iter'].astype(float).abs().median():.0%}.")
        held = int((valid["error_t_iter"].astype(float).abs() <= HELD).sum())
        text = (f"Predictions stated before the runs: {held} of {len(valid)} valid one(s) held "
                f"(within {HELD:.0%} of the measured iteration time), median error "
                f"{valid['error_t_iter'].astype(float).abs().median():.0%}")
        if not bad.empty:
            text += (f"; {len(bad)} flagged before their runs for {reasons} reason(s), scored "
                     "apart (below)")
        return text + "."
    errors = []
    for t in tops:
        if t["run_id"] in pred_by.index:
            p = as_float(pred_by.loc[t["run_id"]].get("predicted_speedup"))
            m = as_float(t["speedup"])
            if p and m and int(t["ranks"]) > 1:
                errors.append(abs(p / m - 1))
    if not errors:
        return None
    held = sum(e <= HELD for e in errors)
    return (f"The model, from each configuration's smallest run: {held} of {len(errors)} "
            f"largest-scale speedup(s) within {HELD:.0%}.")


# A scorecard's flags are joined by "; ", which a flag's own words may hold too: a new flag
# starts with its kind (model.validity).
_FLAG_START = re.compile(rf"; (?=(?:{re.escape(UNRELIABLE)}|{re.escape(BROKEN)}):)")


def split_flags(text: str) -> list[str]:
    return [f.strip() for f in _FLAG_START.split(text or "") if f.strip()]


def flagged_groups(scorecard: pd.DataFrame | None) -> list[tuple[str, list[str]]]:
    """Each reason a prediction was flagged for, once, with the runs it covers, in the order
    first met."""
    if scorecard is None or scorecard.empty or "flags" not in scorecard.columns:
        return []
    groups: dict[str, list[str]] = {}
    ordered = scorecard.sort_values(["mode", "nodes"]) if "nodes" in scorecard.columns \
        else scorecard
    for _, r in ordered.iterrows():
        for reason in split_flags(str(r.get("flags") or "")):
            groups.setdefault(reason, []).append(str(r["run_id"]))
    return list(groups.items())
