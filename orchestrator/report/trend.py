"""The report's history part, where a history is named (``orch report --history`` or the site
config's ``history:``): each configuration's throughput over the recorded sweeps (a trend
plot, with the band a references file allows), and this sweep compared with the previous
recorded sweep of each of its configurations (``orch compare``'s test and attribution).

A recorded sweep's point is the trimmed mean of its runs' trimmed-mean throughputs, at the
date it was measured; this sweep is the last point (a star), whether or not it is recorded.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..history import compare, samples
from ..history.references import References, band
from ..history.stats import Trimmed
from ..history.store import Entry
from .plots import CONFIG_COLORS, MARKERS, _figure, _png
from .tables import Table

METRIC = "samples_per_s"


@dataclass
class History:
    """What the report reads of a history: its samples (store.select), its entries, the
    sweep the report is on (its own entries are not 'previous'), and a references file."""

    samples: pd.DataFrame
    entries: list[Entry]
    measured_at: float  # when the sweep the report is on was measured
    sweep: str | None = None
    references: References | None = None


def points(table: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Per ``by`` group (a configuration and an entry): the throughput of the trimmed mean
    of its runs' trimmed means (samples/s) and how many runs."""
    rate = table[table["metric"] == METRIC]
    if rate.empty:
        return pd.DataFrame(columns=[*by, "value", "runs"])
    runs = compare.run_means(rate, by)
    rows = [{**dict(zip(by, k if isinstance(k, tuple) else (k,), strict=True)),
             "value": math.exp(Trimmed.of(g["mean"].to_numpy()).mean), "runs": len(g)}
            for k, g in runs.groupby(by, dropna=False)]
    return pd.DataFrame(rows, columns=[*by, "value", "runs"])


def _keys(table: pd.DataFrame) -> list[str]:
    return samples.key_columns(table)


def previous(history: History, keys: list[str], key: tuple) -> Entry | None:
    """The latest recorded sweep holding the configuration that was measured before this
    one (its own entries left out)."""
    have = history.samples
    mask = np.ones(len(have), dtype=bool)
    for column, value in zip(keys, key, strict=True):
        mask &= (have[column].astype(str) == str(value)).to_numpy()
    ids = set(have.loc[mask, "entry"])
    found = [e for e in history.entries if e.id in ids and e.sweep != history.sweep
             and e.measured_at < history.measured_at]
    return max(found, key=lambda e: e.measured_at, default=None)


def comparison_table(history: History, sweep: pd.DataFrame) -> Table:
    """This sweep against the previous recorded sweep of each configuration."""
    keys = [k for k in _keys(sweep) if k in history.samples.columns]
    rows = []
    for key, mine in sweep.groupby(keys, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        prev = previous(history, keys, key)
        name = compare.label(dict(zip(keys, key, strict=True)))
        if prev is None:
            rows.append([name, "-", "no recorded sweep measured before it", "", ""])
            continue
        theirs = history.samples[history.samples["entry"] == prev.id]
        found = compare.compare(theirs, mine, spread=history.samples)
        if not found:
            rows.append([name, _entry(prev), "not comparable", "", ""])
            continue
        c = found[0]
        primary = c.primary
        ratio = (f"{primary.ratio:.2f} [{primary.low:.2f}–{primary.high:.2f}]"
                 if primary else "-")
        moved = ", ".join(c.attribution) + (f" → {c.hint}" if c.hint else "")
        verdict = compare.headline(c) if c.verdict in ("slower", "faster") else c.verdict
        rows.append([name, _entry(prev), verdict, ratio, moved or c.note])
    return Table("history", "Against the previous recorded sweep of each configuration "
                 "(orch compare: trimmed means, Welch's test, 95 % intervals)",
                 ["configuration", "previous sweep", "verdict", "this/previous", "what moved"],
                 rows, key_columns=1, text_columns=(1, 2, 4))


def _entry(e: Entry) -> str:
    return f"{e.id} ({_date(e.measured_at)})"


def _date(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc).strftime("%Y-%m-%d %H:%M")


def trend_series(history: History, sweep: pd.DataFrame, measured_at: float
                 ) -> dict[str, tuple[list[float], list[float], tuple[float, float] | None]]:
    """Per configuration of this sweep: dates and throughputs of its recorded sweeps, this
    sweep's last (its own entries left out), and the reference band (None: no reference)."""
    keys = [k for k in _keys(sweep) if k in history.samples.columns]
    dates = {e.id: e.measured_at for e in history.entries if e.sweep != history.sweep}
    past = points(history.samples[history.samples["entry"].isin(set(dates))],
                  [*keys, "entry"])
    now = points(sweep, keys)
    out = {}
    for _, row in now.iterrows():
        key = {k: row[k] for k in keys}
        mask = np.ones(len(past), dtype=bool)
        for k in keys:
            mask &= (past[k].astype(str) == str(row[k])).to_numpy()
        mine = past[mask].assign(at=lambda f: f["entry"].map(dates)).sort_values("at")
        refs = band(history.references, key, METRIC) if history.references else None
        out[compare.label(key)] = ([*mine["at"], measured_at], [*mine["value"], row["value"]],
                                   refs)
    return out


def change_marks(history: History) -> dict[str, list[tuple[float, str]]]:
    """Per configuration: where its throughput's recorded level changed (``orch history
    changes`` at its defaults), as (date measured, a label of the shift and of what changed
    at that entry)."""
    from ..history import changes

    entries = [e for e in history.entries if e.sweep != history.sweep]
    levels = changes.run_levels(history.samples[history.samples["entry"].isin(
        {e.id for e in entries})])
    found, _ = changes.find(levels, entries)
    out: dict[str, list[tuple[float, str]]] = {}
    for c in found:
        s = c.shifts.get(METRIC)
        if s is None:
            continue
        what = c.changed[0] if c.changed else "nothing recorded changed"
        text = f"{(s.ratio - 1) * 100:+.0f} %: {what}"
        out.setdefault(compare.label(c.key), []).append(
            (c.entry.measured_at, text if len(text) <= 48 else text[:47] + "…"))
    return out


def figure(series: dict[str, tuple[list[float], list[float], tuple[float, float] | None]],
           marks: dict[str, list[tuple[float, str]]] | None = None) -> bytes | None:
    """Throughput over date per configuration (a star: this sweep), each with its reference
    band shaded and its change points (``marks``) drawn as a dashed line at the entry where
    the new level starts, labelled with the shift and what changed there; None when no
    configuration has a recorded sweep besides this one."""
    if not any(len(x) > 1 for x, _, _ in series.values()):
        return None
    fig = _figure(8.0, 4.5)
    ax = fig.add_subplot()
    for i, (name, (at, values, refs)) in enumerate(sorted(series.items())):
        color = CONFIG_COLORS[i % len(CONFIG_COLORS)]
        when = [dt.datetime.fromtimestamp(t, dt.timezone.utc) for t in at]
        ax.plot(when[:-1], values[:-1], marker=MARKERS[i % len(MARKERS)], color=color,
                label=name)
        ax.plot(when[-1:], values[-1:], marker="*", markersize=14, color=color,
                linestyle="none")
        if refs is not None:
            ax.axhspan(refs[0], refs[1], color=color, alpha=0.12, linewidth=0)
        for t, text in (marks or {}).get(name, []):
            x = dt.datetime.fromtimestamp(t, dt.timezone.utc)
            ax.axvline(x, color=color, linestyle="--", linewidth=1)
            ax.annotate(text, (x, 1.0), xycoords=("data", "axes fraction"), rotation=90,
                        va="top", ha="right", fontsize="x-small", color=color)
    ax.set_ylabel("samples/s")
    ax.set_xlabel("date measured (UTC)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="best")
    fig.autofmt_xdate()
    return _png(fig)


def section(history: History, sweep: pd.DataFrame, figures: bool
            ) -> tuple[list[Table], dict[str, bytes], dict[str, str]]:
    """The report's history tables and its trend figure (by file name, with its title)."""
    if sweep.empty or history.samples.empty:
        return [], {}, {}
    # A run recorded before its mode declared a dimension matches today's at its default, as
    # orch compare matches them (samples.with_mode_defaults).
    history = dataclasses.replace(history, samples=samples.with_mode_defaults(history.samples))
    sweep = samples.with_mode_defaults(sweep)
    tables = [comparison_table(history, sweep)]
    if not figures:
        return tables, {}, {}
    png = figure(trend_series(history, sweep, history.measured_at), change_marks(history))
    if png is None:
        return tables, {}, {}
    title = ("Throughput of each configuration over the recorded sweeps (star: this sweep; "
             "shaded: the band its references allow; dashed: a change point of its level, "
             "labelled with the shift and what changed at that sweep)")
    return tables, {"trend.png": png}, {"trend.png": title}
