"""The report's device part: what each run's devices did in its measured window (utilisation,
power, energy per training sample, throttling) and where its ranks were bound.

Pure: the runs table in, a Table and PNG bytes out. A result set without device columns (logs
written before the sampler existed) adds nothing; CPU runs without an energy counter get a row
that says why, and no bar in the figure.
"""

from __future__ import annotations

import json

import pandas as pd

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
                     "-" if per_sample is None else f"{per_sample * 1e3:.2f}",
                     _text(r.get("energy_basis")), _text(r.get("throttle_reasons")),
                     _text(r.get("cpu_affinity")), _text(r.get("gpu_pci_bus_ids")),
                     _text(r.get("device_metrics_reason"))[:120]])
    return Table("devices", "Devices in the measured window: utilisation, power, energy per "
                 "training sample, throttling, binding",
                 ["run", "source", "GPU util %", "CPU util %", "power W mean / max",
                  "energy J", "mJ per sample", "energy from", "throttle reasons",
                  "CPU affinity (task:cpus)", "GPU bus id", "why not"], rows,
                 "sampled every rankside.devmetrics.SAMPLE_PERIOD_S over each rank's measured "
                 "native window; power per device, energy over the run's devices (a GPU "
                 "shared by ranks once); energy from: the device's energy counter, or power "
                 "integrated over time; CPU util: the share of a rank's CPUs its process kept "
                 "busy, mean over ranks", key_columns=1, text_columns=(1, 7, 8, 9, 10, 11))


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
