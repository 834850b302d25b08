"""One report from one result set: selection → prediction → per-rank spread → tables, summary
and (optionally) figures. Pure: DataFrames in, a Report out; writing files is the caller's.

A report leads with what a person wants to see first (render.py lays it out): the summary (a
few lines, overview.summary_lines), the lead figures (throughput against nodes with the ideal
line, the phases, predicted against measured speedup) and one overview row per configuration;
then, folded, the flagged predictions' reasons (each once, with its runs), the notes per
configuration, every detail table and the other figures."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from ..history import samples
from ..results import analyze
from ..results.select import completed, config_labels, config_of, rated, training_runs
from . import convergence, devices, overview, plots, trend
from .fmt import as_float, fmt_num, fmt_signed, ms, nodes_word
from .predictions import CommModel, predictions
from .ranks import COMPUTE, rank_stats, stragglers
from .scorecard import scorecard_summary, scorecard_table
from .tables import (
    Table,
    comm_table,
    measurement_table,
    netbench_tables,
    phase_table,
    prediction_table,
    rank_table,
    speedup_table,
    throughput_table,
    workload_table,
)

# The figures a report opens with, in this order, where drawn; the others follow, folded.
LEAD_FIGURES = ("throughput.png", "speedup.png", "phases.png")


@dataclass
class Report:
    title: str
    summary: list[str]  # a few lines over the whole sweep
    tables: list[Table]  # the detail, in order
    figures: dict[str, bytes] = field(default_factory=dict)  # file name -> PNG
    figure_titles: dict[str, str] = field(default_factory=dict)
    overview: Table | None = None  # one row per configuration
    notes: list[str] = field(default_factory=list)  # a few sentences per configuration
    flagged: list[tuple[str, list[str]]] = field(default_factory=list)  # reason, its runs

    def lead_figures(self) -> list[str]:
        return [name for name in LEAD_FIGURES if name in self.figures]

    def other_figures(self) -> list[str]:
        return [name for name in self.figures if name not in LEAD_FIGURES]


def build(runs: pd.DataFrame, iters: pd.DataFrame, comm: Callable[[str, str], CommModel],
          *, title: str = "orch report", figures: bool = True,
          scorecard: pd.DataFrame | None = None,
          epochs: pd.DataFrame | None = None, history: trend.History | None = None,
          device_samples: pd.DataFrame | None = None) -> Report:
    """Every table (and, with ``figures``, every PNG) of a report on one result set.

    ``scorecard``: the predictions stated before the runs, scored (scorecard.scorecard_frame);
    its table comes first after throughput and speedup, and its median error in the summary.
    ``epochs`` (results/epochs.parquet) adds the convergence part; ``history``, the trend
    over the recorded sweeps and the comparison with the previous one (report.trend);
    ``device_samples`` (results/devices.parquet), the devices over time (devices.timeline)."""
    measured = samples.samples(runs, iters) if history is not None else None  # both windows
    # Per-rank phases and the phase plots read the breakdown window (the native window's rows
    # carry no phases: protocol.WINDOWS); throughput comes from the runs table.
    timeline_iters, iters = iters, analyze.split_windows(iters)[1]  # both windows shaded
    train = training_runs(runs)
    labels = config_labels(train)
    configs = config_of(train)
    label_of = {rid: labels[c] for rid, c in zip(train["run_id"], configs, strict=True)}
    preds = predictions(train, comm)
    pred_by = preds.set_index("run_id") if not preds.empty else preds
    rstats = rank_stats(iters[iters["run_id"].isin(set(train["run_id"]))]
                        if not iters.empty else iters)
    strag = stragglers(rstats)
    done = completed(train).copy()
    done["_label"] = done["run_id"].map(label_of)
    done = done.sort_values(["_label", "nodes", "repeat"])
    # Throughput and speedup: epoch runs too (their epochs' steps), which have no phases.
    rates = rated(train).copy()
    rates["_label"] = rates["run_id"].map(label_of)
    rates = rates.sort_values(["_label", "nodes", "repeat"])

    tables = [
        throughput_table(rates),
        speedup_table(rates),
        *([w] if (w := workload_table(rates)) is not None else []),
        *([scorecard_table(scorecard)] if scorecard is not None else []),
        prediction_table(train, label_of, pred_by),
        phase_table(done),
        comm_table(done),
        measurement_table(done),
        rank_table(done, strag),
    ]
    tables += convergence.tables(runs)
    tables += netbench_tables(runs, comm)
    fab = fabric_table(runs)
    if fab is not None:
        tables.append(fab)
    dev = devices.table(runs)
    if dev is not None:
        tables.append(dev)
    failed = failed_table(runs)
    if failed is not None:
        tables.append(failed)
    notes = _summary(done, pred_by, strag, comm)
    if scorecard is not None:  # the valid predictions' errors; the flagged ones are grouped
        notes += [line for line in scorecard_summary(scorecard) if not line.startswith("  ")]
    report = Report(title=title, summary=overview.summary_lines(runs, done, pred_by, scorecard),
                    tables=tables, notes=notes, flagged=overview.flagged_groups(scorecard),
                    overview=overview.overview_table(done, pred_by, scorecard)
                    if not done.empty else None)
    if figures and not done.empty:
        report.figures, report.figure_titles = plots.draw_figures(done, iters, pred_by, strag)
    if figures:  # epoch runs have no breakdown window (no t_iter): not in ``done``, nor drawn
        for name, png, caption in more_figures(runs, epochs, timeline_iters, device_samples):
            report.figures[name] = png
            report.figure_titles[name] = caption
    if history is not None and measured is not None:
        extra, pngs, titles = trend.section(history, measured, figures)
        report.tables += extra
        report.figures.update(pngs)
        report.figure_titles.update(titles)
    return report


def failed_table(runs: pd.DataFrame) -> Table | None:
    """The runs that did not complete, with the first line of their reason (None: none)."""
    failed = runs[runs["state"] != "COMPLETED"] if not runs.empty else runs
    if failed.empty:
        return None
    return Table(
        "failed", "Runs that did not complete (recorded as data, not in the tables above)",
        ["run", "state", "reason"],
        [[r["run_id"], r["state"], (str(r["reason"] or "").splitlines() or [""])[0][:120]]
         for _, r in failed.iterrows()], key_columns=3)


def more_figures(runs: pd.DataFrame, epochs: pd.DataFrame | None, iters: pd.DataFrame,
                 device_samples: pd.DataFrame | None) -> list[tuple[str, bytes, str]]:
    """The figures beside the scaling ones, where their data is there: (file, PNG, title) of
    held-out accuracy (epoch runs), energy per sample and the devices over time."""
    drawn = [
        ("accuracy.png", convergence.figure(runs, epochs) if epochs is not None else None,
         "Held-out accuracy against wall time and epochs (dashed: asynchronous)"),
        ("energy.png", devices.figure(runs), "Energy per training sample by run"),
        ("devices.png", devices.timeline(runs, iters, device_samples),
         "Power, SM clock and utilisation over time (shaded: the measured windows)"),
    ]
    return [(name, png, title) for name, png, title in drawn if png is not None]


def fabric_table(runs: pd.DataFrame) -> Table | None:
    """Fabric attestation (orchestrator.runs.fabric): per multi-node run, the verdict, the
    transport and interface really used, the bytes sent in the measured window against the
    bytes its pattern must move, and why."""
    if runs.empty or "fabric" not in runs.columns:
        return None
    multi = runs[runs["nodes"] > 1].sort_values(["fabric", "partition", "mode", "nodes"])
    if multi.empty:
        return None

    def num(value) -> str:
        value = as_float(value)
        return "-" if value is None else f"{value:,.0f}"

    rows = [[r["run_id"], str(r["interconnect"]), str(r.get("fabric") or "-"),
             str(r.get("fabric_transport") or "-"), str(r.get("fabric_iface") or "-"),
             num(r.get("fabric_bytes_measured")), num(r.get("fabric_bytes_expected")),
             str(r.get("fabric_reason") or "")[:160]] for _, r in multi.iterrows()]
    return Table("fabric", "Fabric: the transport and interface each run really used "
                 "(verified / mismatch / unverified), bytes sent in the measured window vs "
                 "the bytes its pattern must move",
                 ["run", "declared", "fabric", "transport", "interface", "bytes sent",
                  "bytes expected", "why"], rows, key_columns=3, text_columns=(3, 4, 7))


def _summary(done: pd.DataFrame, pred_by: pd.DataFrame, strag: pd.DataFrame,
             comm: Callable[[str, str], CommModel]) -> list[str]:
    """A few sentences per configuration: how it scales and where the time went."""
    lines = []
    by_strag = strag.set_index("run_id") if not strag.empty else strag
    for label, g in done.groupby("_label", sort=True):
        g = g.sort_values("nodes")
        one, top = g.iloc[0], g.iloc[-1]
        if len(g) == 1 or int(top["nodes"]) == int(one["nodes"]):
            lines.append(f"{label}: only {nodes_word(int(one['nodes']))} measured "
                         f"({fmt_num(one['samples_per_s'], ',.0f')} samples/s).")
            continue
        best = g.loc[g["samples_per_s"].astype(float).idxmax()]
        text = (f"{label}: {fmt_num(one['samples_per_s'], ',.0f')} samples/s on "
                f"{nodes_word(int(one['nodes']))}, {fmt_num(top['samples_per_s'], ',.0f')} on "
                f"{nodes_word(int(top['nodes']))} (speedup {fmt_num(top['speedup'], '.2f')}, "
                f"efficiency {fmt_num(top['efficiency'], '.0%')}); best at "
                f"{nodes_word(int(best['nodes']))}.")
        d_iter = float(top["t_iter"] - one["t_iter"])
        d_comm = float(top["t_comm"] - one["t_comm"])
        d_comp = float(sum(top[p] - one[p] for p in COMPUTE))
        text += (f" From {nodes_word(int(one['nodes']))} to {int(top['nodes'])}, t_iter "
                 f"{ms(one['t_iter'])} → {ms(top['t_iter'])} ms: {d_comm * 1e3:+.2f} ms exposed "
                 f"communication, {d_comp * 1e3:+.2f} ms compute.")
        if d_iter > 0.05 * float(one["t_iter"]):
            cause = "communication" if d_comm >= d_comp else "compute slowing down"
            text += f" The iteration got longer mostly through {cause}."
        p = pred_by.loc[top["run_id"]] if top["run_id"] in pred_by.index else None
        if p is not None and as_float(p["predicted_speedup"]) is not None:
            text += (f" The model predicts speedup {p['predicted_speedup']:.2f} "
                     f"(comm {p['comm_model']}); residual "
                     f"{fmt_signed(p['residual_speedup'], '.2f')}.")
        if top["run_id"] in by_strag.index and by_strag.loc[top["run_id"]]["straggler"]:
            s = by_strag.loc[top["run_id"]]
            text += (f" Straggler at {int(top['nodes'])} nodes: rank {s['slowest_rank']} "
                     f"({s['slowest_host']}), compute +{s['excess']:.0%}.")
        lines.append(text)
    return lines
