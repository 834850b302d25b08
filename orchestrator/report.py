"""Report: from a result set to answers. Pure functions: DataFrames in, tables/figures/text out.

What a report answers, for every configuration (mode, model, partition, batch, options …):

* how fast: samples/s per node count, speedup and efficiency against the 1-node run;
* where the time goes: phase breakdown (mean ± std over measured rank-iterations), exposed vs
  total communication (how much was hidden behind backward);
* who is slow: per-rank spread of the iteration and of its compute part; a straggler is a rank
  whose compute is >= 10 % above the run's median rank (the others wait for it in ``t_comm``);
* why: the performance model (orchestrator/perfmodel.py) predicts every run's speedup from
  the *1-node* measured breakdown of the same configuration, with communication at N workers
  either from an α–β fit of the partition (``orch netbench``: ring all-reduce of the model's
  float32 gradient) or, without one, taken as measured in that run. Measured − predicted is
  the residual: what the model does not explain (contention, stragglers, oversubscription).

Plots (PNG, matplotlib's Agg backend, imported only when figures are drawn): throughput vs
nodes with the ideal line, measured vs predicted speedup, stacked phase bars, per-rank t_iter
boxes. ``to_markdown`` links them; ``to_html`` embeds them (base64): one self-contained file.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from . import analyze, modes, perfmodel, zoo
from .protocol import PHASES

# Phases as stacked in plots and tables, bottom to top (the order of one iteration).
PHASE_ORDER = PHASES
PHASE_LABELS = {"t_io": "I/O", "t_h2d": "host→device", "t_f": "forward", "t_b": "backward",
                "t_comm": "comm (exposed)", "t_u": "update", "t_unaccounted": "other"}
PHASE_COLORS = {"t_io": "#8c564b", "t_h2d": "#e377c2", "t_f": "#1f77b4", "t_b": "#ff7f0e",
                "t_comm": "#d62728", "t_u": "#2ca02c", "t_unaccounted": "#7f7f7f"}
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
CONFIG_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf",
                 "#bcbd22", "#7f7f7f", "#d62728")
STRAGGLER_THRESHOLD = 0.10
COMPUTE = ("t_io", "t_h2d", "t_f", "t_b", "t_u")


@dataclass
class Table:
    """A titled table of preformatted cells (first ``key_columns`` columns are labels)."""

    key: str
    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""
    key_columns: int = 1
    text_columns: tuple[int, ...] = ()  # left-aligned besides the key columns

    def is_text(self, i: int) -> bool:
        return i < self.key_columns or i in self.text_columns


@dataclass
class CommModel:
    """Where the α–β of one site/partition comes from (or that there is none)."""

    alpha_beta: perfmodel.AlphaBeta | None
    source: str


@dataclass
class Report:
    title: str
    summary: list[str]
    tables: list[Table]
    figures: dict[str, bytes] = field(default_factory=dict)  # file name -> PNG
    figure_titles: dict[str, str] = field(default_factory=dict)


# --- selecting and labelling ---------------------------------------------------------------


def training_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs of training modes (the all-reduce micro-benchmark has no throughput)."""
    if runs.empty:
        return runs
    trains = {name for name, m in modes.registry().items() if m.trains}
    known = set(modes.registry())
    return runs[runs["mode"].isin(trains) | ~runs["mode"].isin(known)]


def group_keys(runs: pd.DataFrame) -> list[str]:
    return [k for k in analyze.GROUP_KEYS if k in runs.columns]


def config_of(runs: pd.DataFrame) -> pd.Series:
    """One string per run naming its configuration (same as analyze.add_scaling's groups)."""
    if runs.empty:
        return pd.Series([], dtype=str)
    keys = group_keys(runs)
    return runs[keys].astype(object).where(runs[keys].notna(), "").astype(str).agg(
        "|".join, axis=1)


def config_labels(runs: pd.DataFrame) -> dict[str, str]:
    """Short readable labels: only the dimensions that differ between configurations."""
    if runs.empty:
        return {}
    configs = config_of(runs)
    first = runs.groupby(configs, sort=True).head(1).copy()
    first["_config"] = configs.loc[first.index]
    shown = ["mode", "model"] + [
        k for k in ("dataset", "partition", "batch_size", "tasks_per_node", "options",
                    "launcher", "site", "data", "prefetch")
        if k in first.columns and first[k].astype(str).nunique() > 1]
    labels = {}
    for _, row in first.iterrows():
        parts = []
        for k in shown:
            value = row[k]
            if k == "options":
                opts = json.loads(value) if isinstance(value, str) and value else {}
                value = ",".join(f"{a}={b}" for a, b in sorted(opts.items())) or "-"
            elif k == "batch_size":
                value = f"batch {value}"
            elif k == "tasks_per_node":
                value = f"{value}/node"
            elif k == "prefetch":
                value = "prefetch" if value else "no prefetch"
            parts.append(str(value))
        labels[row["_config"]] = " ".join(parts)
    return labels


def _completed(runs: pd.DataFrame) -> pd.DataFrame:
    ok = runs[(runs["state"] == "COMPLETED") & runs["t_iter"].notna()]
    return ok.sort_values(["nodes", "repeat"] if "repeat" in ok.columns else ["nodes"])


# --- prediction ----------------------------------------------------------------------------


def gradient_bytes(model: str, dataset: str) -> int | None:
    """float32 gradient bytes of a zoo model, or None if the zoo does not know it."""
    try:
        return 4 * int(zoo.get(model).expected_params[dataset])
    except (KeyError, ValueError, TypeError):
        return None


def overlap_of(mode: str, options: str | dict | None, grad_bytes: int | None = None) -> str:
    """The overlap policy the model assumes for a run, as its mode declares it
    (``Mode.overlap_for``: "wfbp", sent while backward goes on, exposed = max(0, total − t_b);
    or "none", after backward): a run's own overlap option (mpi-ssgd) wins, and a gradient
    that fits DDP's first bucket (1 MiB) is one bucket, sent after backward."""
    opts = json.loads(options) if isinstance(options, str) and options else (options or {})
    opts = opts if isinstance(opts, dict) else {}
    if mode not in modes.registry():  # a result set from a mode this orch does not know
        return opts.get("overlap") if opts.get("overlap") in modes.OVERLAPS else "none"
    return modes.get(mode).overlap_for(opts, grad_bytes)


def _exposed(total: float, t_b: float, overlap: str) -> float:
    return total if overlap == "none" else max(0.0, total - t_b)


def predict_from_baseline(
    base: dict[str, float],
    base_workers: int,
    workers: list[int],
    *,
    alpha_beta: perfmodel.AlphaBeta | None = None,
    grad_bytes: int | None = None,
    measured_comm: dict[int, tuple[float, float | None]] | None = None,
    overlap: str = "none",
    prefetch: bool = False,
) -> list[dict]:
    """Predict iteration time and speedup at ``workers`` from one measured breakdown.

    ``base``: the phases (seconds) measured with ``base_workers`` workers (usually the 1-node
    run); its ``t_comm`` is the exposed communication measured there. Communication at ``w``:

    * with ``alpha_beta`` and ``grad_bytes``: total ``allreduce(grad_bytes, w)`` (α–β ring),
      exposed per ``overlap`` (``wfbp``: ``max(0, total − t_b)``); the baseline's own exposed
      communication is kept and only the α–β difference to ``base_workers`` is added;
    * else ``measured_comm[w] = (exposed, total)``, as measured at ``w`` ("scaled as measured").

    Iteration times use perfmodel's phase rule (``prefetch``: pipelined I/O);
    ``speedup = (w / base_workers) · t_iter(base_workers) / t_iter(w)``.
    """
    if alpha_beta is not None and grad_bytes is None:
        raise perfmodel.ModelInputError("alpha_beta needs grad_bytes (the gradient size)")
    counts = sorted({base_workers, *workers})

    def comm(w: int) -> tuple[float, float | None]:
        if alpha_beta is not None:
            total = alpha_beta.allreduce(float(grad_bytes), w)
            delta = (_exposed(total, base["t_b"], overlap)
                     - _exposed(alpha_beta.allreduce(float(grad_bytes), base_workers),
                                base["t_b"], overlap))
            return max(0.0, base["t_comm"] + delta), total
        if w == base_workers:
            return base["t_comm"], base.get("t_comm_total")
        if measured_comm is None or w not in measured_comm:
            raise perfmodel.ModelInputError(
                f"no α–β and no measured communication at {w} worker(s): run "
                "'orch netbench' on the partition or give --bandwidth and --latency")
        return measured_comm[w]

    comms = {w: comm(w) for w in counts}
    breakdown = perfmodel.Breakdown(
        **{p: float(base[p]) for p in PHASES if p != "t_comm"},
        t_comm={w: comms[w][0] for w in counts},
    )
    t_base = perfmodel.iteration_time(breakdown, base_workers, prefetch=prefetch)
    out = []
    for w in workers:
        t = perfmodel.iteration_time(breakdown, w, prefetch=prefetch)
        s = (w / base_workers) * t_base / t if t > 0 else math.nan
        out.append({"workers": w, "t_iter": t, "speedup": s, "efficiency": s / (w / base_workers),
                    "t_comm_exposed": comms[w][0], "t_comm_total": comms[w][1],
                    **{p: float(base[p]) for p in PHASES if p != "t_comm"},
                    "overlap": overlap, "prefetch": prefetch,
                    "source": "breakdown+alpha-beta" if alpha_beta is not None
                    else "breakdown+measured-comm"})
    return out


def baseline(group: pd.DataFrame) -> tuple[dict[str, float], int] | None:
    """Mean phases of a configuration's completed 1-node run(s), and its worker count."""
    base = _completed(group)
    base = base[base["nodes"] == 1]
    if base.empty:
        return None
    phases = {p: float(base[p].mean()) for p in PHASES}
    total = base["t_comm_total"].dropna() if "t_comm_total" in base else pd.Series([], float)
    phases["t_comm_total"] = float(total.mean()) if not total.empty else None
    phases["t_iter"] = float(base["t_iter"].mean())
    return phases, int(base["ranks"].iloc[0])


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
        grad = gradient_bytes(str(first["model"]), str(first["dataset"]))
        overlap = overlap_of(first["mode"], first.get("options"), grad)
        ab = model.alpha_beta if grad is not None else None
        for _, run in group.iterrows():
            row = dict.fromkeys(cols)
            row.update(run_id=run["run_id"], overlap=overlap)
            if run["state"] != "COMPLETED" or pd.isna(run["t_iter"]):
                row["note"] = f"not predicted: run {run['state']}"
            elif base is None:
                row["note"] = "not predicted: no completed 1-node run of this configuration"
            else:
                phases, base_w = base
                w = int(run["ranks"])
                measured = {w: (float(run["t_comm"]), _num(run.get("t_comm_total")))}
                pred = predict_from_baseline(phases, base_w, [w], alpha_beta=ab,
                                             grad_bytes=grad, measured_comm=measured,
                                             overlap=overlap)[0]
                row.update(predicted_speedup=pred["speedup"], predicted_t_iter=pred["t_iter"],
                           t_comm_predicted=pred["t_comm_exposed"],
                           comm_model="α–β" if ab is not None else "measured")
                if _num(run.get("speedup")) is not None:
                    row["residual_speedup"] = float(run["speedup"]) - pred["speedup"]
                row["residual_t_iter"] = float(run["t_iter"]) - pred["t_iter"]
            rows.append(row)
    return pd.DataFrame(rows, columns=cols)


def _num(value) -> float | None:
    if value is None:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


# --- per-rank spread -----------------------------------------------------------------------


def rank_stats(iters: pd.DataFrame) -> pd.DataFrame:
    """Per (run, rank) over measured iterations: mean t_iter, compute, exposed comm (s)."""
    cols = ["run_id", "rank", "host", "t_iter", "t_iter_std", "compute", "t_comm", "n"]
    if iters.empty:
        return pd.DataFrame(columns=cols)
    m = iters[~iters["warmup_iter"]]
    m = m.assign(compute=m[list(COMPUTE)].sum(axis=1))
    g = m.groupby(["run_id", "rank"], sort=True)
    out = g.agg(host=("host", "first"), t_iter=("t_iter", "mean"), t_iter_std=("t_iter", "std"),
                compute=("compute", "mean"), t_comm=("t_comm", "mean"), n=("t_iter", "size"))
    return out.reset_index()[cols]


def stragglers(ranks: pd.DataFrame) -> pd.DataFrame:
    """Per run: spread of per-rank compute and the straggler (if any).

    spread = (max − min) / median of the ranks' mean compute time; the straggler is the rank
    with the most compute if that is >= STRAGGLER_THRESHOLD above the median.
    """
    rows = []
    for run_id, g in ranks.groupby("run_id", sort=False):
        med = float(g["compute"].median())
        slow = g.loc[g["compute"].idxmax()]
        excess = (float(slow["compute"]) / med - 1.0) if med > 0 else 0.0
        rows.append({
            "run_id": run_id, "ranks": len(g),
            "t_iter_min": float(g["t_iter"].min()), "t_iter_max": float(g["t_iter"].max()),
            "compute_min": float(g["compute"].min()), "compute_max": float(g["compute"].max()),
            "spread": (float(g["compute"].max() - g["compute"].min()) / med) if med > 0 else 0.0,
            "slowest_rank": int(slow["rank"]), "slowest_host": slow["host"],
            "excess": excess,
            "straggler": bool(len(g) > 1 and excess >= STRAGGLER_THRESHOLD),
        })
    return pd.DataFrame(rows, columns=["run_id", "ranks", "t_iter_min", "t_iter_max",
                                       "compute_min", "compute_max", "spread", "slowest_rank",
                                       "slowest_host", "excess", "straggler"])


# --- formatting ----------------------------------------------------------------------------


def ms(value, digits: int = 2) -> str:
    v = _num(value)
    return "-" if v is None else f"{v * 1e3:.{digits}f}"


def ms_pm(mean, std) -> str:
    m, s = _num(mean), _num(std)
    if m is None:
        return "-"
    return f"{m * 1e3:.2f} ± {(s or 0.0) * 1e3:.2f}"


def _fmt(value, spec: str) -> str:
    v = _num(value)
    return "-" if v is None else format(v, spec)


def _signed(value, spec: str) -> str:
    v = _num(value)
    return "-" if v is None else format(v, "+" + spec)


def _nodes_word(n: int) -> str:
    return f"{n} node" if n == 1 else f"{n} nodes"


# --- the report ----------------------------------------------------------------------------


def build(runs: pd.DataFrame, iters: pd.DataFrame, comm: Callable[[str, str], CommModel],
          *, title: str = "orch report", figures: bool = True) -> Report:
    """Every table (and, with ``figures``, every PNG) of a report on one result set."""
    train = training_runs(runs)
    labels = config_labels(train)
    configs = config_of(train)
    label_of = {rid: labels[c] for rid, c in zip(train["run_id"], configs, strict=True)}
    preds = predictions(train, comm)
    pred_by = preds.set_index("run_id") if not preds.empty else preds
    rstats = rank_stats(iters[iters["run_id"].isin(set(train["run_id"]))]
                        if not iters.empty else iters)
    strag = stragglers(rstats)
    done = _completed(train).copy()
    done["_label"] = done["run_id"].map(label_of)
    done = done.sort_values(["_label", "nodes", "repeat"])

    tables = [
        _throughput_table(done),
        _speedup_table(done),
        _prediction_table(train, label_of, pred_by),
        _phase_table(done),
        _comm_table(done),
        _rank_table(done, strag),
    ]
    tables += _netbench_tables(runs, comm)
    failed = runs[runs["state"] != "COMPLETED"] if not runs.empty else runs
    if not failed.empty:
        tables.append(Table(
            "failed", "Runs that did not complete (recorded as data, not in the tables above)",
            ["run", "state", "reason"],
            [[r["run_id"], r["state"], (str(r["reason"] or "").splitlines() or [""])[0][:120]]
             for _, r in failed.iterrows()], key_columns=3))
    report = Report(title=title, summary=_summary(done, pred_by, strag, comm), tables=tables)
    if figures and not done.empty:
        report.figures, report.figure_titles = draw_figures(done, iters, pred_by, strag)
    return report


def _pivot(done: pd.DataFrame, cell: Callable[[pd.Series], str], title: str, key: str,
           note: str = "") -> Table:
    nodes = sorted(done["nodes"].unique()) if not done.empty else []
    rows = []
    for label, g in done.groupby("_label", sort=True):
        row = [label]
        for n in nodes:
            at = g[g["nodes"] == n]
            row.append(" / ".join(cell(r) for _, r in at.iterrows()) if not at.empty else "")
        rows.append(row)
    return Table(key, title, ["configuration", *(_nodes_word(int(n)) for n in nodes)], rows, note)


def _throughput_table(done: pd.DataFrame) -> Table:
    return _pivot(done, lambda r: (f"{r['samples_per_s']:,.0f} ± {r['samples_per_s_std']:,.0f}"
                                   if _num(r["samples_per_s"]) is not None else "-"),
                  "Throughput (samples/s, whole job; ± spread of per-iteration rate)",
                  "throughput")


def _speedup_table(done: pd.DataFrame) -> Table:
    return _pivot(done, lambda r: f"{_fmt(r['speedup'], '.2f')} ({_fmt(r['efficiency'], '.0%')})",
                  "Speedup vs the 1-node run (efficiency)", "speedup",
                  "speedup = throughput(N) / throughput(1 node); efficiency = speedup / "
                  "(ranks(N) / ranks(1 node))")


def _prediction_table(train: pd.DataFrame, label_of: dict, pred_by: pd.DataFrame) -> Table:
    rows = []
    for _, r in train.sort_values(["nodes"]).iterrows():
        p = pred_by.loc[r["run_id"]] if r["run_id"] in pred_by.index else None
        if p is None:
            continue
        rows.append([label_of.get(r["run_id"], r["run_id"]), str(r["nodes"]), str(r["ranks"]),
                     _fmt(r.get("speedup"), ".2f"), _fmt(p["predicted_speedup"], ".2f"),
                     _signed(p["residual_speedup"], ".2f"), ms(r["t_iter"]),
                     ms(p["predicted_t_iter"]), _signed(_ms_value(p["residual_t_iter"]), ".2f"),
                     ms(r["t_comm"]), ms(p["t_comm_predicted"]),
                     p["comm_model"] or "-", p["overlap"] or "-", p["note"] or ""])
    rows.sort(key=lambda row: (row[0], int(row[1])))
    return Table("prediction", "Measured vs predicted (model: 1-node breakdown of the same "
                 "configuration + communication at N)",
                 ["configuration", "nodes", "ranks", "speedup", "predicted", "residual",
                  "t_iter ms", "pred. ms", "resid. ms", "t_comm ms", "pred. comm ms",
                  "comm", "overlap", "note"], rows,
                 "residual = measured − predicted. comm α–β: ring all-reduce of the model's "
                 "float32 gradient with the partition's netbench α, B; comm measured: no netbench "
                 "result, the run's own exposed t_comm is used, so the residual is what compute "
                 "lost at N (contention, oversubscription, stragglers). overlap wfbp: "
                 "exposed = max(0, total − t_b).", text_columns=(11, 12, 13))


def _ms_value(value) -> float | None:
    v = _num(value)
    return None if v is None else v * 1e3


def _phase_table(done: pd.DataFrame) -> Table:
    rows = []
    for _, r in done.iterrows():
        rows.append([r["_label"], str(r["nodes"]), str(r["ranks"]),
                     *(ms_pm(r[p], r.get(f"{p}_std")) for p in PHASE_ORDER),
                     ms_pm(r["t_iter"], r.get("t_iter_std")), ms(r.get("t_unaccounted"), 3)])
    return Table("phases", "Phase breakdown per iteration (ms, mean ± std over measured "
                 "rank-iterations)",
                 ["configuration", "nodes", "ranks", *(PHASE_LABELS[p] for p in PHASE_ORDER),
                  "t_iter", "other"], rows,
                 "t_iter = I/O + host→device + forward + backward + exposed comm + update + "
                 "other (loop overhead no phase timer saw)")


def _comm_table(done: pd.DataFrame) -> Table:
    rows = []
    for _, r in done.iterrows():
        exposed, total = _num(r["t_comm"]), _num(r.get("t_comm_total"))
        hidden = max(0.0, total - exposed) if total is not None and exposed is not None else None
        share = exposed / r["t_iter"] if exposed is not None and r["t_iter"] else None
        rows.append([r["_label"], str(r["nodes"]), str(r["ranks"]), ms(exposed), ms(total),
                     ms(hidden), _fmt(hidden / total if hidden is not None and total else None,
                                      ".0%"),
                     _fmt(share, ".0%")])
    return Table("communication", "Communication: exposed vs total (ms per iteration)",
                 ["configuration", "nodes", "ranks", "exposed", "total", "hidden", "hidden %",
                  "exposed % of t_iter"], rows,
                 "exposed = t_comm (after backward compute, on the critical path); total = "
                 "t_comm_total (every all-reduce from launch to completion, where the mode can "
                 "see it); hidden = total − exposed, overlapped with backward")


def _rank_table(done: pd.DataFrame, strag: pd.DataFrame) -> Table:
    by = strag.set_index("run_id") if not strag.empty else strag
    rows = []
    for _, r in done.iterrows():
        if r["run_id"] not in by.index:
            continue
        s = by.loc[r["run_id"]]
        verdict = (f"rank {s['slowest_rank']} ({s['slowest_host']}): compute "
                   f"+{s['excess']:.0%} vs median" if s["straggler"] else "none")
        rows.append([r["_label"], str(r["nodes"]), str(int(s["ranks"])),
                     f"{ms(s['t_iter_min'])} – {ms(s['t_iter_max'])}",
                     f"{ms(s['compute_min'])} – {ms(s['compute_max'])}",
                     _fmt(s["spread"], ".0%"), verdict])
    return Table("ranks", "Per-rank spread and stragglers (per-rank means, ms)",
                 ["configuration", "nodes", "ranks", "t_iter min – max",
                  "compute min – max", "compute spread", "straggler"], rows,
                 "compute = I/O + host→device + forward + backward + update of one rank; "
                 f"spread = (max − min) / median; a straggler's compute is >= "
                 f"{STRAGGLER_THRESHOLD:.0%} above the median rank's: the others wait for it "
                 "in their exposed communication", text_columns=(6,))


def _netbench_tables(runs: pd.DataFrame, comm: Callable[[str, str], CommModel]) -> list[Table]:
    if runs.empty:
        return []
    rows = []
    for (site, part), _ in runs.groupby(["site", "partition"], sort=True):
        model = comm(str(site), str(part))
        if model.alpha_beta is None:
            rows.append([f"{site}/{part}", "-", "-", model.source])
        else:
            ab = model.alpha_beta
            rows.append([f"{site}/{part}", f"{ab.alpha * 1e6:.1f} µs",
                         f"{ab.bandwidth / 1e9:.3g} GB/s ({ab.bandwidth * 8 / 1e9:.3g} Gb/s)",
                         model.source])
    return [Table("network", "Network model per partition (α–β of a ring all-reduce)",
                  ["site/partition", "latency α", "bandwidth B", "source"], rows,
                  "without a netbench result the model uses each run's measured communication "
                  "('comm measured'); measure one with: orch netbench --site S --partition P",
                  text_columns=(3,))]


def _summary(done: pd.DataFrame, pred_by: pd.DataFrame, strag: pd.DataFrame,
             comm: Callable[[str, str], CommModel]) -> list[str]:
    """A few sentences per configuration: how it scales and where the time went."""
    lines = []
    by_strag = strag.set_index("run_id") if not strag.empty else strag
    for label, g in done.groupby("_label", sort=True):
        g = g.sort_values("nodes")
        one, top = g.iloc[0], g.iloc[-1]
        if len(g) == 1 or int(top["nodes"]) == int(one["nodes"]):
            lines.append(f"{label}: only {_nodes_word(int(one['nodes']))} measured "
                         f"({_fmt(one['samples_per_s'], ',.0f')} samples/s).")
            continue
        best = g.loc[g["samples_per_s"].astype(float).idxmax()]
        text = (f"{label}: {_fmt(one['samples_per_s'], ',.0f')} samples/s on "
                f"{_nodes_word(int(one['nodes']))}, {_fmt(top['samples_per_s'], ',.0f')} on "
                f"{_nodes_word(int(top['nodes']))} (speedup {_fmt(top['speedup'], '.2f')}, "
                f"efficiency {_fmt(top['efficiency'], '.0%')}); best at "
                f"{_nodes_word(int(best['nodes']))}.")
        d_iter = float(top["t_iter"] - one["t_iter"])
        d_comm = float(top["t_comm"] - one["t_comm"])
        d_comp = float(sum(top[p] - one[p] for p in COMPUTE))
        text += (f" From {_nodes_word(int(one['nodes']))} to {int(top['nodes'])}, t_iter "
                 f"{ms(one['t_iter'])} → {ms(top['t_iter'])} ms: {d_comm * 1e3:+.2f} ms exposed "
                 f"communication, {d_comp * 1e3:+.2f} ms compute.")
        if d_iter > 0.05 * float(one["t_iter"]):
            cause = "communication" if d_comm >= d_comp else "compute slowing down"
            text += f" The iteration got longer mostly through {cause}."
        p = pred_by.loc[top["run_id"]] if top["run_id"] in pred_by.index else None
        if p is not None and _num(p["predicted_speedup"]) is not None:
            text += (f" The model predicts speedup {p['predicted_speedup']:.2f} "
                     f"(comm {p['comm_model']}); residual {_signed(p['residual_speedup'], '.2f')}.")
        if top["run_id"] in by_strag.index and by_strag.loc[top["run_id"]]["straggler"]:
            s = by_strag.loc[top["run_id"]]
            text += (f" Straggler at {int(top['nodes'])} nodes: rank {s['slowest_rank']} "
                     f"({s['slowest_host']}), compute +{s['excess']:.0%}.")
        lines.append(text)
    return lines


# --- figures -------------------------------------------------------------------------------


def _figure(width: float, height: float):
    """A matplotlib Figure on the Agg canvas (no pyplot, no global state, no display)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def draw_figures(done: pd.DataFrame, iters: pd.DataFrame, pred_by: pd.DataFrame,
                 strag: pd.DataFrame) -> tuple[dict[str, bytes], dict[str, str]]:
    """PNG bytes of every figure, by file name, and their titles."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    labels = sorted(done["_label"].unique())
    color = {lab: CONFIG_COLORS[i % len(CONFIG_COLORS)] for i, lab in enumerate(labels)}
    marker = {lab: MARKERS[i % len(MARKERS)] for i, lab in enumerate(labels)}
    figs = {
        "throughput.png": (_plot_throughput(done, color, marker),
                           "Throughput vs nodes (dashed: ideal linear scaling)"),
        "speedup.png": (_plot_speedup(done, pred_by, color, marker),
                        "Speedup: measured vs predicted"),
        "phases.png": (_plot_phases(done), "Where the time goes: phases per iteration"),
        "ranks.png": (_plot_ranks(done, iters, strag), "Per-rank iteration time"),
    }
    return ({name: png for name, (png, _) in figs.items()},
            {name: t for name, (_, t) in figs.items()})


def _node_axis(ax, nodes) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(nodes)
    ax.set_xticklabels([str(n) for n in nodes])
    ax.minorticks_off()
    ax.set_xlabel("nodes")
    ax.grid(True, alpha=0.3)


def _legend(ax, handles=None, names=None) -> None:
    """Inside the axes for a few configurations, outside on the right for many."""
    if handles is None:
        handles, names = ax.get_legend_handles_labels()
    many = len(names) > 8
    ax.legend(handles, names, fontsize=7 if many else 8,
              loc="upper left", bbox_to_anchor=(1.01, 1.0) if many else None,
              ncols=2 if len(names) > 30 else 1)


def _plot_throughput(done: pd.DataFrame, color: dict, marker: dict) -> bytes:
    fig = _figure(12.0 if done["_label"].nunique() > 4 else 7.5, 4.8)
    ax = fig.subplots()
    nodes = sorted(int(n) for n in done["nodes"].unique())
    for label, g in done.groupby("_label", sort=True):
        agg = g.groupby("nodes").agg(rate=("samples_per_s", "mean"),
                                     std=("samples_per_s_std", "mean"),
                                     ranks=("ranks", "first")).reset_index()
        ax.errorbar(agg["nodes"], agg["rate"], yerr=agg["std"], marker=marker[label], capsize=4,
                    color=color[label], label=label, linewidth=2)
        base = agg[agg["nodes"] == 1]
        if not base.empty:
            rate1, ranks1 = float(base["rate"].iloc[0]), float(base["ranks"].iloc[0])
            xs = np.array(nodes, dtype=float)
            ideal = rate1 * (xs * agg["ranks"].iloc[0] / agg["nodes"].iloc[0]) / ranks1
            ax.plot(xs, ideal, linestyle="--", color=color[label], alpha=0.7, linewidth=1.5,
                    label=f"{label} ideal")
    _node_axis(ax, nodes)
    ax.set_ylabel("samples/s (whole job)")
    ax.set_ylim(bottom=0)
    ax.set_title("Throughput vs nodes (dashed: ideal linear scaling)")
    handles, names = ax.get_legend_handles_labels()
    order = sorted(range(len(names)), key=lambda i: (names[i].removesuffix(" ideal"),
                                                     names[i].endswith(" ideal")))
    _legend(ax, [handles[i] for i in order], [names[i] for i in order])
    return _png(fig)


def _plot_speedup(done: pd.DataFrame, pred_by: pd.DataFrame, color: dict,
                  marker: dict) -> bytes:
    fig = _figure(12.0 if done["_label"].nunique() > 4 else 7.5, 4.8)
    ax = fig.subplots()
    nodes = sorted(int(n) for n in done["nodes"].unique())
    top = 1.0
    for label, g in done.groupby("_label", sort=True):
        g = g.sort_values("nodes")
        s = g["speedup"].astype(float)
        ax.plot(g["nodes"], s, marker=marker[label], color=color[label], linewidth=2,
                label=f"{label} measured")
        pred = [(_num(pred_by.loc[r]["predicted_speedup"]) if r in pred_by.index else None)
                for r in g["run_id"]]
        px = [n for n, p in zip(g["nodes"], pred, strict=True) if p is not None]
        py = [p for p in pred if p is not None]
        if py:
            ax.plot(px, py, marker=marker[label], markerfacecolor="white", linestyle=":",
                    linewidth=1.5,
                    color=color[label], label=f"{label} predicted")
        ideal = g["ranks"].astype(float) / float(g["ranks"].iloc[0]) * float(g["nodes"].iloc[0])
        top = max(top, float(np.nanmax(s)) if s.notna().any() else 1.0, float(ideal.max()),
                  max(py) if py else 1.0)
    xs = np.array(nodes, dtype=float)
    ax.plot(xs, xs, color="black", linestyle="--", linewidth=1, alpha=0.6, label="ideal")
    _node_axis(ax, nodes)
    ax.set_ylabel("speedup vs 1 node")
    ax.set_ylim(0, top * 1.1)
    ax.set_title("Speedup: measured (filled) vs predicted (hollow)")
    _legend(ax)
    return _png(fig)


MAX_BARS = 40
MAX_RANK_PANELS = 12
MAX_DOTS = 50  # measured iterations drawn per rank


def _few_runs(done: pd.DataFrame, limit: int) -> tuple[pd.DataFrame, str]:
    """At most ``limit`` runs for a figure: all, else each configuration's smallest and
    largest node count, else the first ``limit`` of those; and a note saying so."""
    runs = done.sort_values(["_label", "nodes", "repeat"])
    if len(runs) <= limit:
        return runs, ""
    ends = runs.groupby("_label")["nodes"].transform
    keep = runs[(runs["nodes"] == ends("min")) | (runs["nodes"] == ends("max"))]
    keep = keep.drop_duplicates(["_label", "nodes"]).head(limit)
    return keep, f" ({len(keep)} of {len(runs)} runs: fewest and most nodes per configuration)"


def _plot_phases(done: pd.DataFrame) -> bytes:
    bars, shown = _few_runs(done, MAX_BARS)
    multi = bars["_label"].nunique() > 1
    rotate = multi and len(bars) > 4
    fig = _figure(min(24.0, max(6.0, 0.8 * len(bars) + 3.5)), 6.0 if rotate else 5.0)
    ax = fig.subplots()
    x = np.arange(len(bars))
    bottom = np.zeros(len(bars))
    parts = [*PHASE_ORDER, "t_unaccounted"]
    for p in parts:
        values = bars[p].astype(float).clip(lower=0).fillna(0).to_numpy() * 1e3
        ax.bar(x, values, bottom=bottom, color=PHASE_COLORS[p], label=PHASE_LABELS[p],
               width=0.7, edgecolor="white", linewidth=0.5)
        bottom += values
    for xi, total in zip(x, bottom, strict=True):
        ax.text(xi, total, f"{total:.1f}", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x)
    ax.set_xticklabels([(f"{r['_label']}\n" if multi else "") + _nodes_word(int(r["nodes"]))
                        for _, r in bars.iterrows()], fontsize=8,
                       rotation=30 if rotate else 0, ha="right" if rotate else "center")
    ax.set_ylabel("ms per iteration (mean over ranks and iterations)")
    ax.set_ylim(0, float(bottom.max()) * 1.12 if len(bottom) and bottom.max() > 0 else 1)
    ax.set_title("Where the time goes: phases per iteration" + shown)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(True, axis="y", alpha=0.3)
    return _png(fig)


def _plot_ranks(done: pd.DataFrame, iters: pd.DataFrame, strag: pd.DataFrame) -> bytes:
    runs, shown = _few_runs(done, MAX_RANK_PANELS)
    ids = list(runs["run_id"])
    m = iters[iters["run_id"].isin(ids) & ~iters["warmup_iter"]] if not iters.empty else iters
    n = max(1, len(ids))
    cols = min(3, n)
    rows = math.ceil(n / cols)
    fig = _figure(max(4.6 * cols, 9.0), 3.4 * rows + 0.5)
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    by_strag = strag.set_index("run_id") if not strag.empty else strag
    rng = np.random.default_rng(0)
    for ax, (_, run) in zip(axes, runs.iterrows(), strict=False):
        data = m[m["run_id"] == run["run_id"]]
        ranks = sorted(int(r) for r in data["rank"].unique())
        values = [data[data["rank"] == r]["t_iter"].to_numpy() * 1e3 for r in ranks]
        slow = None
        if run["run_id"] in by_strag.index and by_strag.loc[run["run_id"]]["straggler"]:
            slow = int(by_strag.loc[run["run_id"]]["slowest_rank"])
        if values:
            box = ax.boxplot(values, positions=range(len(ranks)), widths=0.6,
                             patch_artist=True, showfliers=False)
            for k, patch in enumerate(box["boxes"]):
                patch.set_facecolor("#f4a3a3" if ranks[k] == slow else "#aec7e8")
            for k, v in enumerate(values):
                if len(v) > MAX_DOTS:  # a sample: thousands of dots would hide the box
                    v = v[rng.choice(len(v), MAX_DOTS, replace=False)]
                ax.scatter(k + rng.uniform(-0.18, 0.18, len(v)), v, s=8, color="#1f4e79",
                           alpha=0.5, zorder=3)
            compute = [float(data[data["rank"] == r][list(COMPUTE)].sum(axis=1).mean()) * 1e3
                       for r in ranks]
            ax.plot(range(len(ranks)), compute, linestyle="none", marker="D", markersize=6,
                    color="black", zorder=4)
            ax.set_xticks(range(len(ranks)))
            ax.set_xticklabels([str(r) for r in ranks], fontsize=8)
        ax.set_title(f"{run['_label']} · {_nodes_word(int(run['nodes']))}"
                     + (f" · straggler rank {slow}" if slow is not None else ""), fontsize=9)
        ax.set_xlabel("rank")
        ax.set_ylabel("t_iter (ms)")
        ax.grid(True, axis="y", alpha=0.3)
    for ax in axes[n:]:
        ax.set_visible(False)
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig.legend(handles=[Patch(facecolor="#aec7e8", edgecolor="black", label="t_iter of a rank"),
                        Patch(facecolor="#f4a3a3", edgecolor="black", label="straggler rank"),
                        Line2D([], [], color="#1f4e79", marker="o", linestyle="none",
                               markersize=4, label="one measured iteration"),
                        Line2D([], [], color="black", marker="D", linestyle="none",
                               label="mean compute of the rank (t_iter without exposed comm)")],
               loc="outside lower center", ncols=4, fontsize=8, frameon=False)
    fig.suptitle("Per-rank iteration time (box: quartiles of all measured iterations; dots: "
                 f"up to {MAX_DOTS} of them)" + shown)
    return _png(fig)


# --- documents -----------------------------------------------------------------------------


def to_markdown(report: Report, image_dir: str = ".") -> str:
    """The report as Markdown; figures are linked (``image_dir``/<name>.png)."""
    out = [f"# {report.title}", ""]
    if report.summary:
        out += ["## Summary", ""] + [f"- {line}" for line in report.summary] + [""]
    for t in report.tables:
        out += [f"## {t.title}", ""]
        if not t.rows:
            out += ["(no runs)", ""]
        else:
            out.append("| " + " | ".join(_md(c) for c in t.columns) + " |")
            out.append("|" + "|".join("---" if t.is_text(i) else "---:"
                                      for i in range(len(t.columns))) + "|")
            out += ["| " + " | ".join(_md(c) for c in row) + " |" for row in t.rows]
            out.append("")
        if t.note:
            out += [f"*{_md(t.note)}*", ""]
    if report.figures:
        out += ["## Figures", ""]
        for name in report.figures:
            title = report.figure_titles.get(name, name)
            out += [f"### {title}", "", f"![{title}]({image_dir.rstrip('/')}/{name})", ""]
    return "\n".join(out)


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


_CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 2em auto;
       max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 0.3em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 3px 8px; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
p.note { color: #555; font-size: 0.85em; max-width: 1100px; }
img { max-width: 100%; border: 1px solid #eee; }
""".strip()


def to_html(report: Report) -> str:
    """The report as one self-contained HTML page: figures embedded as base64 PNG."""
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{e(report.title)}</title>", f"<style>{_CSS}</style></head><body>",
           f"<h1>{e(report.title)}</h1>"]
    if report.summary:
        out.append("<h2>Summary</h2><ul>" + "".join(f"<li>{e(s)}</li>" for s in report.summary)
                   + "</ul>")
    for t in report.tables:
        out.append(f'<h2 id="{e(t.key)}">{e(t.title)}</h2>')
        if not t.rows:
            out.append("<p>(no runs)</p>")
        else:
            head = "".join(f"<th>{e(c)}</th>" for c in t.columns)
            cell = ["<td>" if t.is_text(i) else '<td class="num">'
                    for i in range(len(t.columns))]
            body = "".join("<tr>" + "".join(f"{cell[i]}{e(str(c))}</td>"
                                            for i, c in enumerate(row)) + "</tr>"
                           for row in t.rows)
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        if t.note:
            out.append(f'<p class="note">{e(t.note)}</p>')
    if report.figures:
        out.append("<h2>Figures</h2>")
        for name, png in report.figures.items():
            title = report.figure_titles.get(name, name)
            data = base64.b64encode(png).decode("ascii")
            out.append(f"<h3>{e(title)}</h3>"
                       f'<img alt="{e(title)}" src="data:image/png;base64,{data}">')
    out.append("</body></html>")
    return "\n".join(out) + "\n"
