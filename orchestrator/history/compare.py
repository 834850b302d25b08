"""``orch compare A B``: for every configuration in both A and B, the ratio B/A of each metric
with its 95 % interval, a verdict (faster, slower, no measured change) and which phases moved.

The test (:mod:`.stats`) is Welch's t-test on 10 % trimmed means of the log values: each
run's trimmed mean where both sides hold two runs or more of the configuration (repeats: the
run-to-run spread, which the iterations of one run do not see, is in the interval); one run
against the spread of three or more (a prediction interval: tonight's run against a history);
else the per-iteration values, each side's variance inflated for their autocorrelation (the
run-to-run spread is then not measured, and the verdict's line says so). A metric moved when
the interval excludes 1 on one side (two one-sided tests at ``alpha / 2`` each: the chance of
a false verdict on a metric is ``alpha``) and the change is at least ``min_change`` (smaller
changes are below what a benchmark rerun can promise, even where the test can see them).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .samples import BY_NAME, METRICS, Metric, key_columns, with_mode_defaults, without_options
from .stats import (
    TRIM,
    Difference,
    Trimmed,
    against_spread,
    inflation,
    two_against_spread,
    yuen_welch,
)

ALPHA = 0.05
MIN_CHANGE = 0.05
# Phases that explain a change, and where to look when each one moved the most.
ATTRIBUTED = ("compute", "t_comm", "t_comm_total", "t_io", "t_h2d")
HINTS = {"t_comm": "look at the fabric", "t_comm_total": "look at the fabric",
         "compute": "look at the nodes (clocks, throttling, co-tenants, library versions)",
         "t_io": "look at the file system and the input pipeline",
         "t_h2d": "look at the host-device link"}
# No phase moved with the iteration time: the change is outside the timed phases.
NO_PHASE = "no phase moved with it: measure again before looking further"
MIN_SHARE = 0.02  # a phase under 2 % of the iteration time explains nothing
PRIMARY = ("samples_per_s", "t_iter")  # what a configuration's verdict is read from
# One run is tested against the other side's spread where that side holds this many runs:
# fewer cannot estimate a spread (2 give a variance of 1 degree of freedom).
SPREAD_RUNS = 3
# Said of a verdict from one run a side: runs of one configuration differ more than one run's
# iterations tell (docs/howto/compare.md measures how much).
# The verdict where one run a side moved beyond its iterations' spread: runs of one
# configuration differ more than one run's iterations tell (single-run pairs of identical
# sweeps were called slower or faster 24.8 % of the time: docs/howto/compare.md), so the
# direction is said, never as a verdict.
UNMEASURED = "spread not measured"
NEEDS = ("to tell: --repeats 2 or more on both sides, or a history holding 3 runs or more "
         "of this configuration (--history DIR, or the one the site config names), whose "
         "run-to-run spread the two runs are tested against")


@dataclass(frozen=True)
class Change:
    """One metric of one configuration: B/A with its interval, and whether it moved."""

    metric: Metric
    ratio: float
    low: float
    high: float
    p_worse: float
    p_better: float
    mean_a: float  # trimmed means, in the metric's unit
    mean_b: float
    n_a: int
    n_b: int
    unit: str  # "iteration" or "repeat": what one value of n is
    moved: str  # "worse", "better" or "" (no measured change)
    spread_runs: int = 0  # one run a side tested against this many other runs' spread

    @property
    def percent(self) -> tuple[float, float, float]:
        """The change in %, and its interval, signed as the metric moves (B over A, minus 1)."""
        return ((self.ratio - 1) * 100, (self.low - 1) * 100, (self.high - 1) * 100)


@dataclass(frozen=True)
class Comparison:
    """A configuration in both A and B."""

    key: dict
    changes: dict[str, Change]
    verdict: str  # "faster", "slower", "no measured change", UNMEASURED or "not comparable"
    attribution: list[str] = field(default_factory=list)
    hint: str = ""
    note: str = ""  # why a change the throughput showed is not a verdict

    @property
    def primary(self) -> Change | None:
        """The change the verdict is read from: throughput, else iteration time (None: the
        configuration has neither, only phases)."""
        return next((self.changes[m] for m in PRIMARY if m in self.changes), None)


def change(metric: Metric, a: pd.DataFrame, b: pd.DataFrame, alpha: float = ALPHA,
           min_change: float = MIN_CHANGE,
           means: tuple[np.ndarray, np.ndarray] | None = None,
           spread: np.ndarray | None = None) -> Change | None:
    """The metric's change from A's samples to B's (None: too few values on a side).
    ``means``: each side's run means (:func:`run_means`), where the caller has them;
    ``spread``: other runs' means of the configuration (a history), whose spread one run a
    side is tested against."""
    a, b = a[a["value"] > 0], b[b["value"] > 0]
    means = means or (_run_means(a), _run_means(b))
    if spread is not None and len(spread) >= SPREAD_RUNS and len(means[0]) == 1 == len(
            means[1]):
        tested = two_against_spread(float(means[0][0]), float(means[1][0]), spread), \
            means, "repeat"
    else:
        tested = _test(a, b, means)
    if tested is None:
        return None
    d, (va, vb), unit = tested
    spread_runs = len(spread) if spread is not None and unit == "repeat" and len(va) == 1 == len(
        vb) else 0
    return of_difference(metric, d, (va, vb), unit, alpha, min_change, spread_runs)


def of_difference(metric: Metric, d: Difference, values: tuple[np.ndarray, np.ndarray],
                  unit: str, alpha: float = ALPHA, min_change: float = MIN_CHANGE,
                  spread_runs: int = 0) -> Change:
    """The change a test's difference of log values says (``values``: the log values each
    side held): moved when one one-sided test rejects at ``alpha / 2`` and the change is
    ``min_change`` or more."""
    va, vb = values
    ratio, low, high = math.exp(d.diff), math.exp(d.low), math.exp(d.high)
    worse, better = (d.p_less, d.p_greater) if metric.higher_is_better else (d.p_greater,
                                                                            d.p_less)
    big = abs(ratio - 1) >= min_change
    moved = ("worse" if worse < alpha / 2 and big else
             "better" if better < alpha / 2 and big else "")
    return Change(metric, ratio, low, high, worse, better, math.exp(Trimmed.of(va).mean),
                  math.exp(Trimmed.of(vb).mean), len(va), len(vb), unit, moved, spread_runs)


def _run_means(side: pd.DataFrame) -> np.ndarray:
    """Each run's trimmed mean of its log values (of one configuration and metric)."""
    return run_means(side, [])["mean"].to_numpy()


def run_means(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Each run's 10 % trimmed mean of its positive values' logs, per ``by`` and run: the
    columns ``by``, ``run_id`` and ``mean``. Computed for every group at once (sorted by group
    and value, each group's ends cut by rank): a history holds thousands of runs."""
    f = frame[frame["value"] > 0]
    codes = group_codes(f, [*by, "run_id"])
    values = np.log(f["value"].to_numpy(float))
    order = _by_group_then_value(codes, values)
    codes, values = codes[order], values[order]
    n = np.bincount(codes)
    start = np.concatenate(([0], np.cumsum(n)[:-1]))
    rank = np.arange(len(codes)) - start[codes]
    cut = np.floor(TRIM * n).astype(int)  # as Trimmed.of cuts
    keep = (rank >= cut[codes]) & (rank < (n - cut)[codes])
    sums = np.bincount(codes[keep], weights=values[keep], minlength=len(n))
    first = np.unique(codes, return_index=True)[1]
    labels = f.iloc[order[first]][[*by, "run_id"]].reset_index(drop=True)
    return labels.assign(mean=sums / (n - 2 * cut))


def _by_group_then_value(codes: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The order sorting by group, then by value within each (what ``np.lexsort((values,
    codes))`` gives, up to ties of equal values): the values sorted, then stably by group,
    as 16-bit integers where the groups fit, which numpy sorts by radix (a history of 1,000
    runs has some 10,000 groups): twice as fast as lexsort."""
    order = np.argsort(values)
    by = codes[order]
    if len(by) and by.max() < 2 ** 16:
        by = by.astype(np.uint16)
    return order[np.argsort(by, kind="stable")]


def _test(a: pd.DataFrame, b: pd.DataFrame, means: tuple[np.ndarray, np.ndarray]
          ) -> tuple[Difference, tuple[np.ndarray, np.ndarray], str] | None:
    """The test of B against A on log values, the values it read, and what one value is:

    * both sides 2 runs or more: each run's trimmed mean is a value (repeats: the run-to-run
      spread is in the interval);
    * one run against SPREAD_RUNS or more (tonight's run against a history): whether the one
      run falls inside the others' spread (:func:`.stats.against_spread`);
    * else each iteration is a value, each side's variance inflated for the autocorrelation
      of its runs' iterations. The run-to-run spread is not measured then: the docs say what
      such a verdict is worth."""
    va, vb = means
    if len(va) >= 2 and len(vb) >= 2:
        return yuen_welch(va, vb), (va, vb), "repeat"
    if len(vb) == 1 and len(va) >= SPREAD_RUNS:
        return against_spread(va, float(vb[0])), (va, vb), "repeat"
    if len(va) == 1 and len(vb) >= SPREAD_RUNS:
        return against_spread(vb, float(va[0]), one_is_b=False), (va, vb), "repeat"
    va, vb = np.log(a["value"].to_numpy(float)), np.log(b["value"].to_numpy(float))
    if len(va) < 2 or len(vb) < 2:
        return None
    inflate = [inflation([np.log(g.sort_values("iter")["value"].to_numpy(float))
                          for _, g in side.groupby("run_id")]) for side in (a, b)]
    return yuen_welch(va, vb, inflate=(inflate[0], inflate[1])), (va, vb), "iteration"


def compare(a: pd.DataFrame, b: pd.DataFrame, alpha: float = ALPHA,
            min_change: float = MIN_CHANGE, ignore_options: tuple[str, ...] = (),
            spread: pd.DataFrame | None = None) -> list[Comparison]:
    """Every configuration present in both sample tables (samples.samples), compared.
    ``spread``: a history's samples, whose runs of a configuration give the run-to-run
    spread where A and B hold one run each of it."""
    a, b = _keyed(a, ignore_options), _keyed(b, ignore_options)
    spreads = _spreads(_keyed(spread, ignore_options)) if spread is not None and len(
        spread) else {}
    keys = [k for k in key_columns(a) if k in b.columns]
    if a.empty or b.empty:
        return []
    runs = [pd.factorize(side["run_id"])[0] for side in (a, b)]
    config, labels = _configs(a, b, keys, runs)
    sides = [_by_config_metric(side, codes, run)
             for side, codes, run in ((a, config[:len(a)], runs[0]),
                                      (b, config[len(a):], runs[1]))]
    out = []
    for code in sorted(set(config[:len(a)]) & set(config[len(a):])):
        changes = {}
        key = {k: _plain(v) for k, v in labels.iloc[code].items()}
        for m, metric in enumerate(METRICS):
            found = [side.get((code, m)) for side in sides]
            if found[0] is None or found[1] is None:
                continue
            c = change(metric, found[0][0], found[1][0], alpha, min_change,
                       (found[0][1], found[1][1]), spreads.get((_spread_key(key), metric.name)))
            if c is not None:
                changes[metric.name] = c
        out.append(judge(key, changes))
    return out


def _spread_key(key: dict) -> str:
    return json.dumps({k: str(v) for k, v in key.items()}, sort_keys=True)


def _spreads(history: pd.DataFrame) -> dict[tuple[str, str], np.ndarray]:
    """Per (configuration, metric) of a history: its runs' trimmed means (log)."""
    keys = key_columns(history)
    means = run_means(history, [*keys, "metric"])
    return {(_spread_key(dict(zip(keys, k[:-1], strict=True))), k[-1]): g["mean"].to_numpy()
            for k, g in means.groupby([*keys, "metric"], dropna=False)}


def _configs(a: pd.DataFrame, b: pd.DataFrame, keys: list[str], runs: list[np.ndarray]
             ) -> tuple[np.ndarray, pd.DataFrame]:
    """Each row's configuration (A's rows, then B's), numbered in the keys' sorted order, and
    each configuration's key values. A run's rows share its key (samples.samples gives every
    row its run's), so the keys are grouped over one row per run, not over every sample: the
    same numbers, from a thousandth of the rows."""
    firsts = [np.unique(run, return_index=True)[1] for run in runs]
    heads = pd.concat([side[keys].iloc[first] for side, first in zip((a, b), firsts,
                                                                      strict=True)],
                      ignore_index=True)
    of_run = group_codes(heads, keys)
    config = np.concatenate([of_run[runs[0]], of_run[len(firsts[0]) + runs[1]]])
    return config, heads.iloc[np.unique(of_run, return_index=True)[1]]


def group_codes(frame: pd.DataFrame, columns: list[str]) -> np.ndarray:
    """Each row's group of ``columns``, numbered 0, 1, … in the columns' sorted order (a
    missing value is a value of its own): what ``groupby(columns).ngroup()`` gives, from each
    column's codes combined into one integer, several times faster on string columns."""
    combined = np.zeros(len(frame), dtype=np.int64)
    for column in columns:
        codes, uniques = pd.factorize(frame[column], sort=True, use_na_sentinel=False)
        combined = combined * len(uniques) + codes
    # factorize hashes where np.unique(return_inverse=True) sorted every row: the same codes
    return pd.factorize(combined, sort=True)[0].astype(np.intp)


def _plain(value):
    """A numpy scalar as Python's (a configuration's key is printed and compared)."""
    return value.item() if isinstance(value, np.generic) else value


def _by_config_metric(frame: pd.DataFrame, config: np.ndarray, run: np.ndarray
                      ) -> dict[tuple[int, int], tuple[pd.DataFrame, np.ndarray]]:
    """Per (configuration code, metric's index in METRICS): its samples (run, iteration,
    value) and its runs' trimmed means. Strings become integer codes first (``run``: the
    run ids' codes): grouping a history of thousands of runs by its string columns is what
    took the time."""
    index = {m.name: i for i, m in enumerate(METRICS)}
    codes, names = pd.factorize(frame["metric"])
    metric = np.array([index.get(n, np.nan) for n in names], dtype=float)[codes]
    compact = pd.DataFrame({
        "config": config, "metric": metric,
        "run_id": run, "iter": frame["iter"].to_numpy(),
        "value": frame["value"].to_numpy(float)}).dropna(subset=["metric"])
    compact = compact[compact["value"] > 0].astype({"metric": int})
    means = {k: g["mean"].to_numpy() for k, g in
             run_means(compact, ["config", "metric"]).groupby(["config", "metric"])}
    return {k: (g, means[k]) for k, g in compact.groupby(["config", "metric"])}


def _keyed(frame: pd.DataFrame, ignore: tuple[str, ...]) -> pd.DataFrame:
    frame = with_mode_defaults(frame)
    if ignore and "options" in frame.columns:
        frame = frame.assign(options=frame["options"].map(lambda o: without_options(o, ignore)))
    return frame


def judge(key: dict, changes: dict[str, Change]) -> Comparison:
    """The configuration's verdict and the phases that moved with it.

    The verdict is the throughput's (the plain window's), confirmed by the iteration time of
    the instrumented window where the runs have both: two windows measure the same step one
    after the other, and a real change (a slower fabric, slower nodes) shows in both, where a
    burst of another job's load hits one. When they disagree, the change is not measured."""
    found = [changes[m] for m in PRIMARY if m in changes]
    if not found:
        return Comparison(key, changes, "not comparable")
    moved = found[0].moved
    note = ""
    if moved and found[0].unit == "iteration":  # one run a side: no verdict (UNMEASURED)
        return Comparison(key, changes, UNMEASURED, note=NEEDS)
    if moved and any(c.moved != moved for c in found[1:]):
        moved, note = "", (f"{found[0].metric.label} {found[0].moved}, "
                           f"{found[1].metric.label} not: the two windows disagree")
    verdict = {"worse": "slower", "better": "faster", "": "no measured change"}[moved]
    if verdict == "no measured change":
        return Comparison(key, changes, verdict, note=note)
    words, hint = attribute(changes, moved)
    return Comparison(key, changes, verdict, words, hint)


def attribute(changes: dict[str, Change], direction: str) -> tuple[list[str], str]:
    """'exposed communication +41 % [30–52 %]', 'compute unchanged', …, and where to look:
    the phase that moved the most seconds in the verdict's direction."""
    t_iter = changes.get("t_iter")
    words, moved = [], []
    for name in ATTRIBUTED:
        c = changes.get(name)
        if c is None or (t_iter and max(c.mean_a, c.mean_b) < MIN_SHARE * t_iter.mean_a):
            continue
        if c.moved:
            pct, low, high = c.percent
            words.append(f"{c.metric.label} {pct:+.0f} % [{low:+.0f}–{high:+.0f} %]")
            if c.moved == direction and name != "t_comm_total":
                moved.append((abs(c.mean_b - c.mean_a), name))
        else:
            words.append(f"{c.metric.label} unchanged")
    if not moved and "t_comm_total" in changes and changes["t_comm_total"].moved == direction:
        moved.append((0.0, "t_comm_total"))
    return words, HINTS[max(moved)[1]] if moved else NO_PHASE


def headline(c: Comparison) -> str:
    """'slower 14 % [9–19 %]' (of the throughput, else of the iteration time)."""
    primary = c.primary
    if primary is None:
        return c.verdict
    if c.verdict in ("no measured change", UNMEASURED):
        return (f"{c.verdict} ({primary.metric.label} B/A {primary.ratio:.2f} "
                f"[{primary.low:.2f}–{primary.high:.2f}]"
                + (" from one run a side's iterations)" if c.verdict == UNMEASURED else ")"))
    if primary.metric.higher_is_better:  # throughput: slower by 1 - B/A
        pct, low, high = ((1 - primary.ratio) * 100, (1 - primary.high) * 100,
                          (1 - primary.low) * 100)
    else:  # a time: slower by B/A - 1
        pct, low, high = primary.percent
    if c.verdict == "faster":
        pct, low, high = -pct, -high, -low
    return f"{c.verdict} {pct:.0f} % [{low:.0f}–{high:.0f} %]"


def label(key: dict) -> str:
    """A configuration in a few words: mode model partition nodes×tasks batch options."""
    parts = [str(key.get(k)) for k in ("mode", "model", "partition") if key.get(k)]
    parts.append(f"{key.get('nodes')}x{key.get('tasks_per_node')}")
    parts.append(f"b{key.get('batch_size')}")
    if key.get("precision") not in (None, "", "fp32"):
        parts.append(str(key["precision"]))
    options = json.loads(key.get("options") or "{}")
    parts += [f"{k}={v}" for k, v in sorted(options.items())]
    return " ".join(parts)


def line(c: Comparison) -> str:
    """One line per configuration: verdict, interval, what moved, where to look."""
    primary = c.primary
    n = f" ({primary.n_a} vs {primary.n_b} {primary.unit}s" + (
        f", against the spread of {primary.spread_runs} recorded runs)" if primary.spread_runs
        else ")") if primary else ""
    text = f"{label(c.key)}: {headline(c)}{n}"
    if c.attribution:
        text += ": " + ", ".join(c.attribution)
    if c.hint:
        text += f" → {c.hint}"
    if c.note:
        text += f"; {c.note}"
    return text


def detail(c: Comparison) -> list[str]:
    """Every metric of a configuration: A and B's trimmed means, B/A and its interval, p."""
    rows = []
    for name, ch in c.changes.items():
        m = BY_NAME[name]
        rows.append(f"  {m.label:<22} {ch.mean_a:>12.6g} {ch.mean_b:>12.6g} {m.unit:<9} "
                    f"B/A {ch.ratio:.3f} [{ch.low:.3f}, {ch.high:.3f}]  p(worse)="
                    f"{ch.p_worse:.3g}  {ch.moved or 'unchanged'}")
    return rows


# What a run ran with, as the history records it (store.with_provenance): the column, its
# name in a line, and how many characters of a value to show (None: all).
FACTS = (("commit", "orch commit", 12), ("image_digest", "image digest", 19),
         ("site_sha256", "site config", 12), ("partition", "partition", None),
         ("hosts", "nodes", None))


def what_differs(a: pd.DataFrame, b: pd.DataFrame, options: bool = False) -> list[str]:
    """What A and B ran with that differs: orch commit, image digest, site config (and the
    settings that differ in it), partition, nodes, each framework version ('torch 2.13.0 →
    2.14.0'), and with ``options`` the mode options (one configuration's runs, matched with
    --ignore-option); empty where a side does not say (a result set alone)."""
    out = []
    for column, name, width in FACTS:
        va, vb = _values(a, column), _values(b, column)
        if va and vb and va != vb:
            out.append(f"{name} {', '.join(v[:width] for v in va)} → "
                       f"{', '.join(v[:width] for v in vb)}" + (
                           _settings(a, b) if column == "site_sha256" else ""))
    versions = [_versions(side) for side in (a, b)]
    for lib in sorted(set(versions[0]) & set(versions[1])):
        if versions[0][lib] != versions[1][lib]:
            out.append(f"{lib} {', '.join(versions[0][lib])} → {', '.join(versions[1][lib])}")
    for lib in sorted(set(versions[0]) ^ set(versions[1])):
        side = "B" if lib in versions[1] else "A"
        out.append(f"{lib} {', '.join((versions[1] if side == 'B' else versions[0])[lib])} "
                   f"only in {side}")
    if options:
        out += _options_differ(_values(a, "options"), _values(b, "options"))
    return out


def _settings(a: pd.DataFrame, b: pd.DataFrame, most: int = 4) -> str:
    """' (sbatch.time 00:10:00 → 00:20:00, …)': the settings that differ between the site
    configs A and B ran with (one config a side), the first ``most`` of them."""
    configs = [_values(side, "site_config") for side in (a, b)]
    if not all(len(c) == 1 for c in configs):
        return ""
    flat = [_flat(json.loads(c[0])) for c in configs]
    differ = [f"{k} {flat[0].get(k, '(none)')} → {flat[1].get(k, '(none)')}"
              for k in sorted(set(flat[0]) | set(flat[1])) if flat[0].get(k) != flat[1].get(k)]
    more = f", {len(differ) - most} more" if len(differ) > most else ""
    return f" ({', '.join(differ[:most])}{more})" if differ else ""


def _flat(data, prefix: str = "") -> dict[str, str]:
    """A JSON value's leaves by path ('partitions[0].sbatch.time': '00:10:00')."""
    if isinstance(data, dict):
        return {k: v for key, value in data.items()
                for k, v in _flat(value, f"{prefix}.{key}" if prefix else str(key)).items()}
    if isinstance(data, list):
        return {k: v for i, value in enumerate(data)
                for k, v in _flat(value, f"{prefix}[{i}]").items()}
    return {prefix: json.dumps(data) if not isinstance(data, str) else data}


def _options_differ(a: list[str], b: list[str]) -> list[str]:
    """'options comm_delay_ms (unset) → 30' for each mode option that differs (one set of
    options a side: a configuration's runs)."""
    if len(a) != 1 or len(b) != 1:
        return []
    oa, ob = json.loads(a[0] or "{}"), json.loads(b[0] or "{}")
    return [f"option {k} {oa.get(k, '(unset)')} → {ob.get(k, '(unset)')}"
            for k in sorted(set(oa) | set(ob)) if oa.get(k) != ob.get(k)]


def _values(frame: pd.DataFrame, column: str) -> list[str]:
    if column not in frame.columns:
        return []
    return sorted(v for v in frame[column].dropna().astype(str).unique() if v)


def _versions(frame: pd.DataFrame) -> dict[str, list[str]]:
    """Each library's versions over the runs (the runs table's ``versions``, JSON)."""
    found: dict[str, set[str]] = {}
    for text in _values(frame, "versions"):
        try:
            data = json.loads(text)
        except ValueError:
            continue
        for lib, version in (data.items() if isinstance(data, dict) else ()):
            found.setdefault(lib, set()).add(str(version))
    return {lib: sorted(v) for lib, v in found.items()}
