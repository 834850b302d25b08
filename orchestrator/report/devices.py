"""The report's device part: what each run's devices did in its measured window (utilisation,
power, energy per training sample, throttling) and where its ranks were bound.

Pure: the runs table in, a Table and PNG bytes out. A result set without device columns (logs
written before the sampler existed) adds nothing; CPU runs without an energy counter get a row
that says why, and no bar in the figure.
"""

from __future__ import annotations

import json
import textwrap

import pandas as pd

from .. import protocol
from ..results import analyze, devices
from .fmt import as_float, fmt_num
from .tables import Table

MAX_BARS = 40


def _sampled(runs: pd.DataFrame) -> pd.DataFrame:
    if runs.empty or "device_samples" not in runs.columns:
        return runs.iloc[0:0]
    done = runs[(runs["state"] == "COMPLETED") & runs["device_samples"].notna()]
    return done.sort_values(["mode", "model", "nodes", "ranks", "repeat"])


def _text(value) -> str:
    return "-" if value is None or (isinstance(value, float) and pd.isna(value)) else str(value)


def _why(run) -> str:
    """Why a run's device figures are missing: the sampler's reason, then the energy's."""
    reasons = [str(r) for r in (run.get("device_metrics_reason"), run.get("energy_reason"))
               if _given(r)]
    return "; ".join(dict.fromkeys(reasons))[:160] or "-"


def _given(value) -> bool:
    return not (value is None or (isinstance(value, float) and pd.isna(value)) or value == "")


def table(runs: pd.DataFrame) -> Table | None:
    """One row per completed run with device samples; None when no run has any."""
    done = _sampled(runs)
    if done.empty:
        return None
    rows = []
    for _, r in done.iterrows():
        per_sample = as_float(r.get("energy_per_sample_j"))
        rows.append([r["run_id"], _text(r.get("device_source")),
                     fmt_num(r.get("gpu_util_mean"), ".0f"), fmt_num(r.get("cpu_util_mean"), ".0f"),
                     f"{fmt_num(r.get('power_mean_w'), '.0f')} / "
                     f"{fmt_num(r.get('power_max_w'), '.0f')}",
                     fmt_num(r.get("energy_j"), ",.1f"),
                     _per_sample(per_sample, r.get("power_rising")),
                     _text(r.get("energy_basis")), _text(r.get("throttle_reasons")),
                     _text(r.get("cpu_affinity")), _text(r.get("gpu_pci_bus_ids")),
                     _why(r)])
    return Table("devices", "Devices in the measured window: utilisation, power, energy per "
                 "training sample, throttling, binding",
                 ["run", "source", "GPU util %", "CPU util %", "power W mean / max",
                  "energy J", "mJ per sample", "energy from", "throttle reasons",
                  "CPU affinity (task:cpus)", "GPU bus id", "why not"], rows,
                 "sampled every rankside.energy.SAMPLE_PERIOD_S over each rank's measured "
                 "native window; power per device, energy over the run's devices (a GPU "
                 "shared by ranks once); energy from: the device's energy counter, or power "
                 "integrated over time; CPU util: the share of a rank's CPUs its process kept "
                 "busy, mean over ranks; 'power rising': the window's power rose by more than "
                 f"{devices.POWER_RISE:.0%} from its first quarter to its last, so that energy "
                 "is no steady-state figure (a longer warm-up or window gives one)",
                 key_columns=1, text_columns=(1, 7, 8, 9, 10, 11))


def _per_sample(joules: float | None, rising) -> str:
    """mJ per sample, flagged where the window's power was still rising."""
    if joules is None:
        return "-"
    return f"{joules * 1e3:.2f}" + (" (power rising)" if rising is True else "")


def _options(options) -> str:
    """A run's options (the runs table's JSON) as ``k=v,...``: what tells two bars apart."""
    try:
        opts = json.loads(options) if isinstance(options, str) else dict(options or {})
    except (TypeError, ValueError):
        return ""
    return ",".join(f"{k}={v}" for k, v in sorted(opts.items()))


def figure(runs: pd.DataFrame) -> bytes | None:
    """Energy per training sample by run (mJ), where a run has it; None where none has."""
    done = _sampled(runs)
    if done.empty or "energy_per_sample_j" not in done.columns:
        return None
    done = done[done["energy_per_sample_j"].map(as_float).notna()].head(MAX_BARS)
    if done.empty:
        return None
    from .plots import _figure, _png

    fig = _figure(min(24.0, max(6.0, 0.6 * len(done) + 3.0)), 4.8)
    ax = fig.subplots()
    values = [as_float(v) * 1e3 for v in done["energy_per_sample_j"]]
    labels = [f"{r['mode']} {r['model']} {_options(r.get('options'))}\n"
              f"{int(r['ranks'])} rank(s), {fmt_num(r.get('power_mean_w'), '.0f')} W"
              for _, r in done.iterrows()]
    bars = ax.bar(range(len(values)), values, color="#2ca02c", width=0.7)
    for bar, value in zip(bars, values, strict=True):
        ax.text(bar.get_x() + bar.get_width() / 2, value, f"{value:.1f}", ha="center",
                va="bottom", fontsize=8)
    ax.set_xticks(range(len(values)))
    ax.set_xticklabels(labels, fontsize=8, rotation=30 if len(values) > 4 else 0,
                       ha="right" if len(values) > 4 else "center")
    ax.set_ylabel("mJ per training sample (measured window)")
    ax.set_ylim(0, max(values) * 1.15)
    ax.set_title("Energy per training sample (label: mean power per device)")
    ax.grid(True, axis="y", alpha=0.3)
    return _png(fig)


# --- what the devices did over time ---------------------------------------------------------

MAX_PANELS = 6  # runs drawn side by side; the others are named under the figure
MAX_TASKS = 8  # lines per panel (ranks' devices); the others are left out of the panel
# (row label, [(samples column, line style, legend name)]): one row of panels per quantity.
TIMELINE_ROWS = (
    ("power W", [("power_w", "-", "power")]),
    ("SM clock MHz", [("sm_clock_mhz", "-", "SM clock")]),
    ("utilisation %", [("gpu_util", "-", "GPU"), ("cpu_util", ":", "CPU (process)")]),
)
WINDOW_SHADES = ((protocol.WINDOW_NATIVE, "#2ca02c"), (protocol.WINDOW_BREAKDOWN, "#ff7f0e"))


def timeline_runs(runs: pd.DataFrame, samples: pd.DataFrame) -> tuple[list, list[str]]:
    """The runs to draw, one per configuration (node and rank count included): its median
    run by throughput, of those with device samples; at most MAX_PANELS, and the labels of
    the configurations left out."""
    from ..results.select import config_labels, config_of

    done = runs[(runs["state"] == "COMPLETED") & runs["run_id"].isin(set(samples["run_id"]))] \
        if not runs.empty and not samples.empty else runs.iloc[0:0]
    if done.empty:
        return [], []
    configs = config_of(done)
    labels = config_labels(done)
    picked = []
    for config, group in done.groupby(configs, sort=True):
        for _, g in group.groupby(["nodes", "ranks"], sort=True):
            g = g.sort_values("samples_per_s", na_position="first")
            median = g.iloc[(len(g) - 1) // 2]  # the lower middle: a run that was measured
            picked.append((f"{labels[config]} {int(median['nodes'])}n {int(median['ranks'])}r",
                           median["run_id"]))
    return picked[:MAX_PANELS], [label for label, _ in picked[MAX_PANELS:]]


def window_edges(iters: pd.DataFrame, run_id: str) -> dict[str, tuple[float, float]]:
    """Each window's measured iterations' (first start, last end) over the run's ranks, the
    rows split into windows as the run's metrics split them (analyze.split_windows)."""
    if iters.empty or not {"t_start", "t_iter", "run_id"} <= set(iters.columns):
        return {}
    rows = iters[iters["run_id"] == run_id]
    if "warmup_iter" in rows.columns:
        rows = rows[~rows["warmup_iter"].astype(bool)]
    native, breakdown = analyze.split_windows(rows)
    out = {}
    for name, part in ((protocol.WINDOW_NATIVE, native), (protocol.WINDOW_BREAKDOWN, breakdown)):
        if not part.empty:
            out[name] = (float(part["t_start"].min()),
                         float((part["t_start"] + part["t_iter"]).max()))
    return out


def _draw_panel(axes, run_samples: pd.DataFrame, edges: dict, rows: list) -> None:
    """One run's column of panels: each row's quantity over the seconds since its first
    sample or window, a line per task, the measured windows shaded."""
    start = min([run_samples["t"].min(), *(a for a, _ in edges.values())])
    tasks = sorted(run_samples["task"].unique())[:MAX_TASKS]
    for ax, (ylabel, lines) in zip(axes, rows, strict=True):
        for name, color in WINDOW_SHADES:
            if name in edges:
                a, b = edges[name]
                ax.axvspan(a - start, b - start, color=color, alpha=0.12, lw=0,
                           label=f"{name} window")
        drawn = False
        for i, task in enumerate(tasks):
            one = run_samples[run_samples["task"] == task].sort_values("t")
            for column, style, legend in lines:
                values = one[column]
                if values.notna().any():
                    ax.plot(one["t"] - start, values, style, color=f"C{i % 10}", lw=1.2,
                            marker=".", ms=3, label=f"task {task} {legend}")
                    drawn = True
        if not drawn:
            ax.text(0.5, 0.5, "not read on this run", transform=ax.transAxes, ha="center",
                    va="center", fontsize=8, color="0.4")
        if ylabel.endswith("%"):
            ax.set_ylim(0, 105)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.grid(True, alpha=0.3)
        ax.tick_params(labelsize=7)
    axes[-1].set_xlabel("s since the run's first sample", fontsize=8)


def timeline(runs: pd.DataFrame, iters: pd.DataFrame, samples: pd.DataFrame | None) \
        -> bytes | None:
    """Power, SM clock and utilisation over each drawn run's time (timeline_runs), its
    native and breakdown windows shaded; rows no drawn run has (SM clock on CPU hosts) left
    out. None where no run has device samples (a result set older than the sampler)."""
    if samples is None or samples.empty:
        return None
    picked, rest = timeline_runs(runs, samples)
    chosen = samples[samples["run_id"].isin({rid for _, rid in picked})]
    rows = [row for row in TIMELINE_ROWS
            if any(chosen[c].notna().any() for c, _, _ in row[1] if c in chosen.columns)]
    if not picked or not rows:
        return None
    from .plots import _figure, _png

    fig = _figure(min(24.0, 1.5 + 3.8 * len(picked)), 1.0 + 2.0 * len(rows))
    grid = fig.subplots(len(rows), len(picked), squeeze=False, sharex="col")
    for col, (label, run_id) in enumerate(picked):
        _draw_panel(grid[:, col], chosen[chosen["run_id"] == run_id],
                    window_edges(iters, run_id), rows)
        # A configuration's label runs long (every option): wrapped to its panel's width.
        grid[0, col].set_title(f"{textwrap.fill(label, 48)}\n{run_id}", fontsize=8)
    legend: dict = {}  # name -> handle, each name once over every panel
    for ax in grid.flat:
        for handle, name in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(name, handle)
    fig.legend(list(legend.values()), list(legend), loc="outside lower center",
               ncol=min(6, len(legend)), fontsize=7)
    if rest:
        names = "; ".join(rest)
        names = names if len(names) <= 400 else names[:400].rsplit(";", 1)[0] + "; …"
        fig.suptitle(textwrap.fill(f"one run per configuration (its median by throughput); not "
                                   f"shown ({len(rest)}): {names}", 60 * len(picked)),
                     fontsize=7)
    return _png(fig)
