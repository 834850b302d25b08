"""Which runs a report is about: training runs, their configurations, labels and the baseline
of each configuration, its run(s) with the fewest ranks (pure: DataFrames in, DataFrames/dicts
out)."""

from __future__ import annotations

import json

import pandas as pd

from .. import modes
from ..protocol import PHASES
from . import analyze


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
        k for k in analyze.GROUP_KEYS
        if k not in ("mode", "model") and k in first.columns
        and first[k].astype(str).nunique() > 1]
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
            elif k == "prefetch":
                value = "prefetch" if value else "no prefetch"
            parts.append(str(value))
        labels[row["_config"]] = " ".join(parts)
    return labels


def completed(runs: pd.DataFrame) -> pd.DataFrame:
    """Completed runs with a breakdown window (t_iter, phases): what the phase tables read."""
    ok = runs[(runs["state"] == "COMPLETED") & runs["t_iter"].notna()]
    return ok.sort_values(["nodes", "repeat"] if "repeat" in ok.columns else ["nodes"])


def rated(runs: pd.DataFrame) -> pd.DataFrame:
    """Completed runs with a throughput: :func:`completed` and the epoch runs, whose samples/s
    comes from their epochs' steps (``throughput_from``) and who have no phases."""
    ok = runs[(runs["state"] == "COMPLETED")
              & (runs["t_iter"].notna() | runs["samples_per_s"].notna())]
    return ok.sort_values(["nodes", "repeat"] if "repeat" in ok.columns else ["nodes"])


def baseline(group: pd.DataFrame) -> tuple[dict[str, float], int] | None:
    """Mean phases of a configuration's baseline, its completed run(s) with the fewest ranks
    (the 1-node run when every run has the same tasks per node), and its worker count."""
    base = completed(group)
    if base.empty:
        return None
    smallest = group["ranks"].min() if "ranks" in group else base["ranks"].min()
    base = base[base["ranks"] == smallest]
    if base.empty:
        return None
    phases = {p: float(base[p].mean()) for p in PHASES}
    total = base["t_comm_total"].dropna() if "t_comm_total" in base else pd.Series([], float)
    phases["t_comm_total"] = float(total.mean()) if not total.empty else None
    phases["t_iter"] = float(base["t_iter"].mean())
    return phases, int(base["ranks"].iloc[0])
