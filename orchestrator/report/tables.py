"""The report's tables: Table and one builder per question (pure: DataFrames in, Tables out)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from ..results import analyze
from .fmt import (
    PHASE_LABELS,
    PHASE_ORDER,
    as_float,
    flops,
    fmt_num,
    fmt_signed,
    gib,
    ms,
    ms_pm,
    ms_value,
    nodes_word,
)
from .predictions import CommModel, gradient_bytes, overlap_of
from .ranks import STRAGGLER_THRESHOLD


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


def by_ranks(done: pd.DataFrame) -> bool:
    """Does the sweep vary ranks per node? Then tables and plots go by ranks, not nodes."""
    return "tasks_per_node" in done.columns and done["tasks_per_node"].nunique() > 1


def ranks_word(n: int) -> str:
    return f"{n} rank" if n == 1 else f"{n} ranks"


def _pivot(done: pd.DataFrame, cell: Callable[[pd.Series], str], title: str, key: str,
           note: str = "") -> Table:
    """One row per configuration, one column per node count (per rank count when the sweep
    varies tasks per node: each cell then says its layout, nodes x tasks per node)."""
    size = "ranks" if by_ranks(done) else "nodes"
    sizes = sorted(done[size].unique()) if not done.empty else []
    word = ranks_word if size == "ranks" else nodes_word

    def text(r: pd.Series) -> str:
        return (f"{r['nodes']}x{r['tasks_per_node']}: {cell(r)}" if size == "ranks"
                else cell(r))

    rows = []
    for label, g in done.groupby("_label", sort=True):
        row = [label]
        for n in sizes:
            at = g[g[size] == n]
            row.append(" / ".join(text(r) for _, r in at.iterrows()) if not at.empty else "")
        rows.append(row)
    return Table(key, title, ["configuration", *(word(int(n)) for n in sizes)], rows, note)


def _baseline_words(done: pd.DataFrame) -> str:
    """The baseline all speedups are relative to, named: '1-node run' as before when it is
    the 1-node run of every configuration, else '1-rank baseline' (or 'N-rank')."""
    if done.empty or "baseline_ranks" not in done.columns:
        return "the 1-node run"
    base = {int(b) for b in done["baseline_ranks"].dropna()}
    if not by_ranks(done):
        return "the 1-node run"
    if len(base) == 1:
        return f"the {base.pop()}-rank baseline"
    return "the smallest run of each configuration"


def throughput_table(done: pd.DataFrame) -> Table:
    """samples/s per size, with the compute rate beside it where there is one; a figure from an
    epoch run's training steps (``throughput_from``: epoch steps) is marked, as it has no
    breakdown window behind it."""
    def cell(r: pd.Series) -> str:
        if as_float(r["samples_per_s"]) is None:
            return "-"
        mark = {analyze.FROM_EPOCHS: " (epochs)", analyze.FROM_SCRIPT: " (script)"}.get(
            r.get("throughput_from"), "")
        compute = as_float(r.get("samples_per_s_compute"))
        mark += f" (compute {compute:,.0f})" if compute is not None else ""
        return f"{r['samples_per_s']:,.0f} ± {r['samples_per_s_std']:,.0f}{mark}"

    notes = []
    if "samples_per_s_compute" in done.columns and done["samples_per_s_compute"].notna().any():
        notes.append("compute: samples/s without input I/O, the rate with the breakdown "
                     "window's share of t_io taken out (DeepLearningExamples' compute_ips; the "
                     "first figure is their total_ips)")
    if "throughput_from" in done.columns and \
            (done["throughput_from"] == analyze.FROM_EPOCHS).any():
        notes.append("(epochs): an epoch run's figure, from the training steps of its epochs "
                     "(first epoch's warm-up steps and held-out evaluation left out); it has no "
                     "phase breakdown")
    if "throughput_from" in done.columns and \
            (done["throughput_from"] == analyze.FROM_SCRIPT).any():
        notes.append("(script): a user's own training script (mode trainer), its throughput "
                     "as its output printed it (its trainer file's pattern); orch did not "
                     "time its phases: no phase breakdown, communication or prediction")
    return _pivot(done, cell, "Throughput (samples/s, whole job; ± spread of per-iteration rate)",
                  "throughput", "; ".join(notes))


def workload_table(done: pd.DataFrame) -> Table | None:
    """tokens/s, model FLOP/s and MFU per device and peak memory per rank, per size (None
    where no run has a FLOPs figure nor tokens: results.workload's columns)."""
    if "flops_per_sample" not in done.columns or not (
            done["flops_per_sample"].notna().any() or done["tokens_per_sample"].notna().any()):
        return None

    def cell(r: pd.Series) -> str:
        parts = []
        if as_float(r.get("tokens_per_s_per_device")) is not None:
            parts.append(f"{r['tokens_per_s_per_device']:,.0f} tok/s")
        parts.append(flops(r.get("model_flops_per_s_per_device")))
        mfu = as_float(r.get("mfu"))
        parts.append(f"MFU {mfu:.1%}" if mfu is not None else "MFU -")
        parts.append(gib(r.get("peak_memory_bytes")))
        return " · ".join(parts)

    notes = ["per device: per training rank; model FLOPs per sample: a transformer's "
             "T(6N + 12LHQT) after PaLM, a CNN's or your own model's counted by torch's "
             "FlopCounterMode; MFU: model FLOP/s per device over the device's dense peak at "
             "the run's precision; memory: a rank's peak (GPU reserved, else peak RSS)"]
    reasons = sorted({str(x) for x in done.get("mfu_reason", pd.Series()).dropna()})
    notes += [f"no MFU: {why}" for why in reasons]
    return _pivot(done, cell, "Workload per device: tokens/s · model FLOP/s · MFU · peak memory",
                  "workload", "; ".join(notes))


def speedup_table(done: pd.DataFrame) -> Table:
    """Speedup and efficiency per size; the last column names each configuration's baseline
    (its run with the fewest ranks: analyze.add_scaling)."""
    table = _pivot(done,
                   lambda r: f"{fmt_num(r['speedup'], '.2f')} ({fmt_num(r['efficiency'], '.0%')})",
                   f"Speedup vs {_baseline_words(done)} (efficiency)", "speedup",
                   "speedup = throughput(N) / throughput(baseline); efficiency = speedup / "
                   "(ranks(N) / ranks(baseline)); baseline = the configuration's run with the "
                   "fewest ranks")
    table.columns.append("baseline")
    table.text_columns = (len(table.columns) - 1,)
    for row, (_, g) in zip(table.rows, done.groupby("_label", sort=True), strict=True):
        base = (g["baseline_ranks"].dropna() if "baseline_ranks" in g.columns
                else g["ranks"][g["speedup"].notna()].nsmallest(1))
        at = g[g["ranks"] == int(base.iloc[0])] if not base.empty else g[:0]
        if at.empty:
            row.append("-")
            continue
        row.append(f"{ranks_word(int(base.iloc[0]))} ({nodes_word(int(at['nodes'].iloc[0]))} "
                   f"x {int(at['tasks_per_node'].iloc[0])})")
    return table


def prediction_table(train: pd.DataFrame, label_of: dict, pred_by: pd.DataFrame) -> Table:
    rows = []
    for _, r in train.sort_values(["nodes"]).iterrows():
        p = pred_by.loc[r["run_id"]] if r["run_id"] in pred_by.index else None
        if p is None:
            continue
        rows.append([label_of.get(r["run_id"], r["run_id"]), str(r["nodes"]), str(r["ranks"]),
                     fmt_num(r.get("speedup"), ".2f"), fmt_num(p["predicted_speedup"], ".2f"),
                     fmt_signed(p["residual_speedup"], ".2f"), ms(r["t_iter"]),
                     ms(p["predicted_t_iter"]), fmt_signed(ms_value(p["residual_t_iter"]), ".2f"),
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


def phase_table(done: pd.DataFrame) -> Table:
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


def comm_table(done: pd.DataFrame) -> Table:
    """Exposed vs total communication, and the overlap each run's mode declares (mode.py, via
    predict.overlap_of); a mode that cannot see its total says why instead of a number."""
    rows = []
    for _, r in done.iterrows():
        exposed, total = as_float(r["t_comm"]), as_float(r.get("t_comm_total"))
        hidden = total - exposed if total is not None and exposed is not None else None
        share = exposed / r["t_iter"] if exposed is not None and r["t_iter"] else None
        why = "" if total is not None else str(r.get("comm_total_reason") or "not recorded")
        rows.append([r["_label"], str(r["nodes"]), str(r["ranks"]),
                     overlap_of(str(r["mode"]), r.get("options"),
                                gradient_bytes(str(r["model"]), str(r["dataset"]),
                                               r.get("model_params"))),
                     ms(exposed), ms(total),
                     ms(hidden), fmt_num(hidden / total if hidden is not None and total else None,
                                         ".0%"),
                     fmt_num(share, ".0%"), why])
    return Table("communication", "Communication: exposed vs total (ms per iteration), and "
                 "the overlap each mode declares",
                 ["configuration", "nodes", "ranks", "overlap", "exposed", "total", "hidden",
                  "hidden %", "exposed % of t_iter", "no total because"], rows,
                 "overlap: the mode's declared policy (wfbp: gradients sent while backward "
                 "goes on; none: after it, as for a gradient that fits one first bucket); "
                 "exposed = t_comm (after backward compute, on the critical path); total = "
                 "t_comm_total (every collective from launch to completion, where the mode "
                 "can see it); hidden = total − exposed, overlapped with backward",
                 text_columns=(3, 9))


def mib(value) -> str:
    v = as_float(value)
    return "-" if v is None else f"{v / 2**20:,.0f}"


def measurement_table(done: pd.DataFrame) -> Table:
    """How faithful each run's numbers are (protocol.WINDOWS): the window throughput came from, the
    native and instrumented iteration times, what the instrumentation costs, the time the
    phases do not account for, peak memory per rank, and any invariant the run breaks."""
    rows = []
    for _, r in done.iterrows():
        rows.append([r["_label"], str(r["nodes"]), str(r["ranks"]),
                     str(r.get("throughput_window") or "-"),
                     ms_pm(r.get("t_iter_native"), r.get("t_iter_native_std")),
                     ms_pm(r["t_iter"], r.get("t_iter_std")),
                     fmt_signed(r.get("instrumentation_overhead"), ".1%"),
                     ms(r.get("phase_gap"), 3),
                     f"{mib(r.get('peak_rss_bytes'))} / {mib(r.get('peak_rss_bytes_mean'))}",
                     f"{mib(r.get('peak_device_bytes'))} / "
                     f"{mib(r.get('peak_device_bytes_mean'))}",
                     str(r.get("invariant_violations") or "hold")])
    return Table("measurement", "Measurement: native vs instrumented iteration, overhead, "
                 "phase gap, peak memory per rank, invariants",
                 ["configuration", "nodes", "ranks", "throughput from", "t_iter native ms",
                  "t_iter breakdown ms", "overhead", "phase gap ms", "host MiB max / mean",
                  "device MiB max / mean", "invariants"], rows,
                 "throughput from: the window samples/s, speedup and efficiency come from "
                 "(native: the framework's own step, wall clock only; breakdown: the "
                 "phase-instrumented window, for runs without a native one); overhead = "
                 "t_iter breakdown / t_iter native − 1; phase gap = t_iter breakdown − the sum "
                 "of the phases; memory: peak resident host memory (device: CUDA) of the "
                 "largest rank / mean over ranks; invariants: exposed ≤ total communication, "
                 "no communication on 1 rank, a stated reason where total is not seen",
                 text_columns=(3, 10))


def rank_table(done: pd.DataFrame, strag: pd.DataFrame) -> Table:
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
                     fmt_num(s["spread"], ".0%"), verdict])
    return Table("ranks", "Per-rank spread and stragglers (per-rank means, ms)",
                 ["configuration", "nodes", "ranks", "t_iter min – max",
                  "compute min – max", "compute spread", "straggler"], rows,
                 "compute = I/O + host→device + forward + backward + update of one rank; "
                 f"spread = (max − min) / median; a straggler's compute is >= "
                 f"{STRAGGLER_THRESHOLD:.0%} above the median rank's: the others wait for it "
                 "in their exposed communication", text_columns=(6,))


def netbench_tables(runs: pd.DataFrame, comm: Callable[[str, str], CommModel]) -> list[Table]:
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
