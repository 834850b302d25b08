"""``orch history changes``: where each configuration's metrics moved to a new level over the
recorded sweeps, by how much, which phases moved, and what changed at that entry.

**The method is Apache Otava's** (Hunter: Fleming et al., ICPE 2023, the successor of
MongoDB's E-divisive means, Daly et al., ICPE 2020), on the log of each entry's level:

1. *split*: sliding windows of ``window`` entries (half overlapping); in each, E-divisive's
   energy statistic Q̂ (Matteson and James 2014, α = 1) proposes the split of an interval
   that best separates two distributions, and a split is kept while Student's t-test of the
   entries on its two sides gives p ≤ 10 × ``max_p`` (weak change points);
2. *merge*: the weakest change point (highest p, then smallest shift) is dropped and its
   neighbours tested again against their new sides, until every one has p ≤ ``max_p``, a
   shift of at least ``min_magnitude`` and ``min_segment`` entries on each side.

Why Otava's and not E-divisive's permutation test: the answer must be the same every time a
CI job asks (a permutation test draws at random, and its alerts would come and go between
two runs on the same history), and it must be quick over thousands of entries (a permutation
test recomputes the statistic hundreds of times per candidate); a t-test per split is both.
orch's adaptations, each measured in ``benchmarks/changepoints.py``: values are logs (a shift
is a ratio, the same whichever way it goes), a point is one entry (the trimmed mean of its
runs' trimmed means: runs of one sweep share its moment of the machine, so they are not
independent points), and a segment must hold ``min_segment`` entries (a level is never one
sweep).

Each change point is then said as ``orch compare`` says a change: the runs of the entries
before it (back to the previous change point of the configuration) against those after it
(up to the next), with its verdict, the phases that moved and where to look, and what the
runs of the entry ran with that the entry before did not (versions, image, orch commit, site
config, nodes, options).
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from . import store
from .compare import (
    ATTRIBUTED,
    PRIMARY,
    Comparison,
    group_codes,
    judge,
    of_difference,
    run_means,
    what_differs,
)
from .samples import BY_NAME, METRICS, Metric, key_columns, with_mode_defaults, without_options
from .settings import Settings
from .stats import Trimmed, student, t_cdf, t_ppf
from .store import Entry

# Each run's facts that say what it ran with (store.with_provenance), kept beside its levels.
FACTS = ("commit", "dirty", "image_digest", "versions", "hosts", "site_sha256", "site_config",
         "measured_at")


# --- the detection, on one series of log values ---------------------------------------------

def _prefix(x: np.ndarray) -> np.ndarray:
    """P[a, b] = the sum of |x_i - x_j| over i < a, j < b (P[0, :] = P[:, 0] = 0)."""
    d = np.abs(x[:, None] - x[None, :])
    p = np.zeros((len(x) + 1, len(x) + 1))
    p[1:, 1:] = d.cumsum(0).cumsum(1)
    return p


def candidate(p: np.ndarray, lo: int, hi: int, min_segment: int) -> tuple[int, float] | None:
    """The split τ of ``[lo, hi)`` that E-divisive chooses, and its Q̂: the largest
    Q̂(x[lo:τ], x[τ:κ]) over lo < τ < κ <= hi, each side ``min_segment`` long or more
    (``p``: :func:`_prefix` of the series)."""
    m = hi - lo
    if m < 2 * min_segment:
        return None
    # the prefix sums of x[lo:hi] alone: P'[u, v] = the sum over lo <= i < lo+u, lo <= j < lo+v
    local = p[lo:hi + 1, lo:hi + 1] - p[lo, lo:hi + 1][None, :] - p[lo:hi + 1, lo][:, None] \
        + p[lo, lo]
    diag = np.diag(local)
    t0, t1, k0 = min_segment, m - min_segment + 1, 2 * min_segment
    a = np.arange(t0, t1, dtype=float)[:, None]  # τ - lo
    b = np.arange(k0, m + 1, dtype=float)[None, :] - a  # κ - τ
    cross = local[t0:t1, k0:m + 1]
    between = cross - diag[t0:t1, None]
    left = diag[t0:t1, None] / 2
    right = (diag[None, k0:m + 1] - 2 * cross + diag[t0:t1, None]) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        e = 2 * between / (a * b) - left / (a * (a - 1) / 2) - right / (b * (b - 1) / 2)
        q = np.where(b >= min_segment, a * b / (a + b) * e, -np.inf)
    i, k = np.unravel_index(int(np.argmax(q)), q.shape)
    return (lo + t0 + int(i), float(q[i, k])) if np.isfinite(q[i, k]) else None


class Sums:
    """Prefix sums of a series (centred) and of its squares: any segment's mean and sum of
    squared deviations in a few float operations, where the merge and split steps test
    thousands of segments."""

    def __init__(self, x: np.ndarray):
        c = np.asarray(x, dtype=float)
        c = c - c.mean() if len(c) else c
        self.s = np.concatenate(([0.0], np.cumsum(c))).tolist()
        self.q = np.concatenate(([0.0], np.cumsum(c * c))).tolist()

    def mean(self, a: int, b: int) -> float:
        return (self.s[b] - self.s[a]) / (b - a)

    def squares(self, a: int, b: int) -> float:
        total = self.s[b] - self.s[a]
        return max(self.q[b] - self.q[a] - total * total / (b - a), 0.0)


def _t(x: Sums, lo: int, at: int, hi: int) -> tuple[float, int]:
    """|t| of Student's t-test of x[lo:at] against x[at:hi], and its degrees of freedom."""
    na, nb = at - lo, hi - at
    df = na + nb - 2
    if df < 1 or na < 1 or nb < 1:
        return 0.0, 0
    pooled = (x.squares(lo, at) + x.squares(at, hi)) / df
    se = math.sqrt(pooled * (1 / na + 1 / nb))
    diff = abs(x.mean(at, hi) - x.mean(lo, at))
    if se <= 1e-12 * max(diff, 1e-300):  # no spread on either side: exact
        return (math.inf if diff > 0 else 0.0), df
    return diff / se, df


def p_value(x: Sums, lo: int, at: int, hi: int) -> float:
    """Two-sided p of Student's t-test of x[lo:at] against x[at:hi]."""
    t, df = _t(x, lo, at, hi)
    return 1.0 if df < 1 else min(1.0, 2.0 * t_cdf(-t, df))


@functools.lru_cache(maxsize=4096)
def _critical(p: float, df: int) -> float:
    """The |t| a two-sided test at ``p`` must reach on ``df`` degrees of freedom."""
    return t_ppf(1.0 - p / 2.0, df)


def passes(x: Sums, lo: int, at: int, hi: int, p: float) -> bool:
    """Whether the split passes the t-test at ``p`` (its |t| against the critical value:
    the split step asks this of every window, where a p-value each cost the most)."""
    t, df = _t(x, lo, at, hi)
    return df >= 1 and t >= _critical(p, df)


def _magnitude(x: Sums, lo: int, at: int, hi: int) -> float:
    """The shift as a fraction, the same either way (exp |Δ log| - 1)."""
    return math.expm1(abs(x.mean(at, hi) - x.mean(lo, at)))


def _window_points(x: np.ndarray, sums: Sums, start: int, end: int, weak_p: float,
                   min_segment: int) -> list[int]:
    """E-divisive in x[start:end]: the candidate of largest Q̂ over the intervals between the
    points found so far, kept while its t-test against its sides passes ``weak_p``."""
    p = _prefix(x[start:end])
    found: list[int] = []
    while True:
        bounds = [0, *found, end - start]
        best = None
        for lo, hi in itertools.pairwise(bounds):
            c = candidate(p, lo, hi, min_segment)
            if c is not None and (best is None or c[1] > best[1]):
                best = (c[0], c[1], lo, hi)
        if best is None or not passes(sums, start + best[2], start + best[0],
                                      start + best[3], weak_p):
            return [start + f for f in found]
        found = sorted([*found, best[0]])


def split(x: np.ndarray, settings: Settings) -> list[int]:
    """Otava's split step: weak change points of sliding, half-overlapping windows."""
    weak_p = settings.max_p * 10 if settings.max_p < 0.05 else min(1.0, settings.max_p * 2)
    sums = Sums(x)
    found: set[int] = set()
    start, step = 0, max(1, settings.window // 2)
    while start < len(x):
        end = min(start + settings.window, len(x))
        local = _window_points(x, sums, start, end, weak_p, settings.min_segment)
        found.update(local)
        if end == len(x):
            break
        start = max(max(local, default=0), start + step)
    return sorted(found)


def merge(x: np.ndarray, points: list[int], settings: Settings) -> list[int]:
    """Otava's merge step: drop the weakest change point (a side shorter than min_segment,
    else the highest p above max_p, else the smallest shift below min_magnitude) until none
    is weak; each test reads the entries between a point's neighbours (and is computed again
    only where a neighbour went)."""
    points = sorted(points)
    sums = Sums(x)
    tested: dict[tuple[int, int, int], float] = {}
    while points:
        bounds = [0, *points, len(x)]
        sides = list(zip(bounds[:-2], points, bounds[2:], strict=True))
        for side in sides:
            if side not in tested:
                tested[side] = p_value(sums, *side)
        ps = [tested[side] for side in sides]
        short = [i for i, (lo, at, hi) in enumerate(sides)
                 if min(at - lo, hi - at) < settings.min_segment]
        if short:
            weakest = max(short, key=lambda i: ps[i])
        elif max(ps) > settings.max_p:
            weakest = int(np.argmax(ps))
        else:
            sizes = [_magnitude(sums, *side) for side in sides]
            weakest = int(np.argmin(sizes))
            if sizes[weakest] >= settings.min_magnitude:
                return points
        del points[weakest]
    return points


def change_points(x: np.ndarray, settings: Settings = Settings()) -> list[int]:
    """The indexes where a new level starts in the series ``x`` (log values)."""
    x = np.asarray(x, dtype=float)
    if len(x) < 2 * settings.min_segment:
        return []
    return merge(x, split(x, settings), settings)


# --- the history's series -------------------------------------------------------------------

def run_levels(table: pd.DataFrame) -> pd.DataFrame:
    """One row per (run, metric) of a sample table with ``entry``: the run's 10 % trimmed
    mean of its values' logs (``mean``), its configuration's key and the facts it ran with
    (FACTS). What the series are made of, a thousandth of the samples."""
    if table.empty:
        return pd.DataFrame(columns=["entry", "run_id", "metric", "mean"])
    means = run_means(table, ["metric"])
    heads = table.drop_duplicates("run_id")
    columns = ["run_id", "entry", *key_columns(table), *(f for f in FACTS if f in table)]
    return means.merge(heads[columns], on="run_id", how="left")


# The levels of every entry read so far, one file (a history of thousands of entries is as
# many files to open): its name says the version of what it holds.
CACHE_FILE = "levels-1.parquet"


def load_levels(root: Path, entries: list[Entry]) -> tuple[pd.DataFrame, list[str]]:
    """The run levels (:func:`run_levels`) of the given entries, and the problems met
    (an entry file missing or damaged: skipped). Entries are never rewritten, so their
    levels are computed once and kept in the history's cache, which any reader extends
    (written whole beside its place and renamed: two readers extending it at once both
    write a complete file, and the last rename wins); where the history is read-only, they
    are computed each time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = root / store.CACHE / CACHE_FILE
    try:
        cached = pq.read_table(path).to_pandas()
    except (OSError, ValueError, pa.ArrowException):  # none yet, or damaged: rebuilt
        cached = pd.DataFrame(columns=["entry"])
    known = set(cached["entry"])
    fresh, problems = [], []
    for entry in (e for e in entries if e.id not in known):
        table = store.load(root, entry)
        if table is None:
            problems.append(f"{root / entry.file}: missing or damaged, entry {entry.id} skipped")
            continue
        fresh.append(run_levels(table))
    if fresh:
        cached = pd.concat([cached, *fresh], ignore_index=True) if len(cached) else \
            pd.concat(fresh, ignore_index=True)
        _keep(path, cached)
    wanted = {e.id for e in entries}
    return cached[cached["entry"].isin(wanted)].reset_index(drop=True), problems


def _keep(path: Path, levels: pd.DataFrame) -> None:
    """Write the cache; a history this user cannot write to (or levels Arrow cannot hold
    in one column, entries of several orch versions) is read without one."""
    import pyarrow as pa

    try:
        store.make_dir(path.parent)
        store.write_new(path, lambda tmp: levels.to_parquet(tmp, index=False))
    except (OSError, TypeError, ValueError, pa.ArrowException):
        pass


@dataclass(frozen=True)
class Series:
    """One configuration's metric over the entries that measured it, oldest first."""

    key: dict
    metric: Metric
    entries: list[Entry]
    values: np.ndarray  # each entry's level: the trimmed mean of its runs' log means
    points: list[int] = field(default_factory=list)  # where a new level starts
    config: int = 0  # the configuration's code in the levels (:func:`prepared`)


def prepared(levels: pd.DataFrame, entries: list[Entry], ignore_options: tuple[str, ...] = ()
             ) -> pd.DataFrame:
    """The levels of the given entries keyed as orch compare keys runs (:func:`_keyed`), with
    each row's configuration code (``config``) and its entry's place in time (``at``)."""
    order = {e.id: i for i, e in enumerate(sorted(entries, key=lambda e: (e.measured_at,
                                                                         e.added_at, e.id)))}
    levels = levels[levels["entry"].isin(order)]
    if levels.empty:
        return levels.assign(config=[], at=[])
    levels = _keyed(levels, ignore_options)
    return levels.assign(config=group_codes(levels, key_columns(levels)),
                         at=levels["entry"].map(order).to_numpy())


def series(levels: pd.DataFrame, entries: list[Entry], settings: Settings) -> list[Series]:
    """Every (configuration, metric) series of prepared levels, with its change points.
    Each entry's level is the mean of its runs' log means, trimmed 10 % at each end where
    it has 10 runs or more (as Trimmed.of: fewer lose nothing to the trim)."""
    if levels.empty:
        return []
    keys = key_columns(levels)
    by_at = sorted(entries, key=lambda e: (e.measured_at, e.added_at, e.id))
    per = levels.groupby(["config", "metric", "at"], sort=True)["mean"].agg(["mean", "size"])
    for idx in per.index[per["size"] >= 10]:
        c, m, at = idx
        rows = levels[(levels["config"] == c) & (levels["metric"] == m) & (levels["at"] == at)]
        per.loc[idx, "mean"] = Trimmed.of(rows["mean"].to_numpy()).mean
    heads = levels.drop_duplicates("config").set_index("config")
    out = []
    for (code, metric), g in per.groupby(level=[0, 1], sort=True):
        if metric not in BY_NAME:
            continue
        values = g["mean"].to_numpy(float)
        ats = g.index.get_level_values(2)
        key = {k: _plain(heads.at[code, k]) for k in keys}
        out.append(Series(key, BY_NAME[metric], [by_at[a] for a in ats], values,
                          change_points(values, settings), int(code)))
    return out


def _keyed(levels: pd.DataFrame, ignore: tuple[str, ...]) -> pd.DataFrame:
    """Runs keyed as ``orch compare`` keys them (mode defaults, --ignore-option), their
    options as they ran kept in ``options_ran``: what changed at an entry names them."""
    levels = with_mode_defaults(levels)
    if "options" not in levels.columns:
        return levels
    levels = levels.assign(options_ran=levels["options"])
    if ignore:
        levels["options"] = levels["options"].map(lambda o: without_options(o, ignore))
    return levels


def _plain(value):
    return value.item() if isinstance(value, np.generic) else value


# --- change points said as orch compare says a change ---------------------------------------

@dataclass(frozen=True)
class Shift:
    """One metric's change point: its level before and after (in the metric's unit, from
    the entries between the neighbouring change points), after/before with its 95 %
    interval, Student's p, and the band one entry of the level before fell in (95 %)."""

    metric: Metric
    before: float
    after: float
    ratio: float
    low: float
    high: float
    p: float
    entries_before: int
    entries_after: int
    band: tuple[float, float]

    @property
    def moved(self) -> str:
        """'worse' or 'better', as the metric is declared."""
        return "better" if (self.ratio > 1) == self.metric.higher_is_better else "worse"

    @property
    def percent(self) -> tuple[float, float, float]:
        return ((self.ratio - 1) * 100, (self.low - 1) * 100, (self.high - 1) * 100)


def shift(s: Series, at: int) -> Shift:
    """The change point of ``s`` at index ``at`` (one of its points), measured."""
    bounds = [0, *s.points, len(s.values)]
    i = bounds.index(at)
    before, after = s.values[bounds[i - 1]:at], s.values[at:bounds[i + 1]]
    d = student(before, after)
    return Shift(s.metric, math.exp(before.mean()), math.exp(after.mean()), math.exp(d.diff),
                 math.exp(d.low), math.exp(d.high), min(1.0, 2 * min(d.p_less, d.p_greater)),
                 len(before), len(after), _band(before))


def _band(values: np.ndarray) -> tuple[float, float]:
    """Where one more entry of this level falls 95 % of the time (a prediction interval)."""
    n = len(values)
    if n < 2:
        return (math.exp(values.mean()),) * 2
    half = t_ppf(0.975, n - 1) * float(values.std(ddof=1)) * math.sqrt(1 + 1 / n)
    return math.exp(values.mean() - half), math.exp(values.mean() + half)


@dataclass(frozen=True)
class ChangePoint:
    """Where a configuration's level changed: the entry it starts at (and the one before),
    each metric's shift there, ``orch compare`` of the runs before against those after, and
    what changed at the entry."""

    key: dict
    entry: Entry
    previous: Entry
    shifts: dict[str, Shift]
    comparison: Comparison | None
    changed: list[str]

    @property
    def verdict(self) -> str:
        return self.comparison.verdict if self.comparison else "not comparable"


def find(levels: pd.DataFrame, entries: list[Entry], settings: Settings = Settings(),
         ignore_options: tuple[str, ...] = (), leading: tuple[str, ...] | None = PRIMARY
         ) -> tuple[list[ChangePoint], list[Series]]:
    """The change points of every configuration, by configuration and then time, and every
    series with its own. A change point is an entry where a ``leading`` metric's level
    changed (the throughput or the iteration time: the configuration got slower or faster;
    None: any metric), with every metric that changed there: each metric alone would add its
    own false alerts to the configuration's, ten metrics ten times as many."""
    if levels.empty:
        return [], []
    ready = prepared(levels, entries, ignore_options)
    found = series(ready, entries, settings)
    by_config: dict[int, list[Series]] = {}
    for s in found:
        by_config.setdefault(s.config, []).append(s)
    ready = ready.sort_values(["config", "at"], kind="stable")
    codes = ready["config"].to_numpy()
    out = []
    for code, group in sorted(by_config.items()):
        if any(s.points for s in group if leading is None or s.metric.name in leading):
            lo, hi = np.searchsorted(codes, [code, code + 1])
            out += _config_points(ready.iloc[lo:hi], group, settings, leading)
    return out, found


def _config_points(mine: pd.DataFrame, group: list[Series], settings: Settings,
                   leading: tuple[str, ...] | None) -> list[ChangePoint]:
    """One configuration's change points (``mine``: its levels, in time order), one per
    entry where a leading metric has one."""
    timeline = _timeline(group)
    where = {e.id: i for i, e in enumerate(timeline)}
    starts = sorted({where[s.entries[i].id] for s in group for i in s.points
                     if leading is None or s.metric.name in leading})
    at_of = dict(zip(mine["entry"], mine["at"], strict=True))
    ats = mine["at"].to_numpy()

    def rows(a: int, b: int) -> pd.DataFrame:  # the runs of timeline[a:b]
        first = at_of[timeline[a].id]
        last = at_of[timeline[b].id] if b < len(timeline) else ats[-1] + 1
        i, j = np.searchsorted(ats, [first, last])
        return mine.iloc[i:j]

    out = []
    for n, at in enumerate(starts):
        entry_id = timeline[at].id
        shifts = {s.metric.name: shift(s, i) for s in sorted(group, key=_declared)
                  for i in s.points if s.entries[i].id == entry_id}
        lo, hi = (starts[n - 1] if n else 0), (starts[n + 1] if n + 1 < len(starts)
                                               else len(timeline))
        out.append(ChangePoint(group[0].key, timeline[at], timeline[at - 1], shifts,
                               _compared(group[0].key, rows(lo, at), rows(at, hi), settings),
                               what_differs(_facts(rows(at - 1, at)), _facts(rows(at, at + 1)),
                                            options=True)))
    return out


def _declared(s: Series) -> int:
    """A series' metric's place in METRICS (shifts are said in that order)."""
    return METRICS.index(s.metric)


def _timeline(group: list[Series]) -> list[Entry]:
    """The entries of a configuration's series together, oldest first."""
    seen = {e.id: e for s in group for e in s.entries}
    return sorted(seen.values(), key=lambda e: (e.measured_at, e.added_at, e.id))


def _facts(runs: pd.DataFrame) -> pd.DataFrame:
    """A configuration's runs of an entry, with the options they ran with as ``options``."""
    if "options_ran" in runs.columns:
        runs = runs.assign(options=runs["options_ran"])
    return runs.drop_duplicates("run_id")


def _by_metric(levels: pd.DataFrame) -> dict[str, np.ndarray]:
    """Each metric's run levels (log means) of a slice of the levels."""
    codes, names = pd.factorize(levels["metric"])
    means = levels["mean"].to_numpy(float)
    order = np.argsort(codes, kind="stable")
    cuts = np.searchsorted(codes[order], np.arange(len(names) + 1))
    return {name: means[order[cuts[i]:cuts[i + 1]]] for i, name in enumerate(names)}


def _compared(key: dict, before: pd.DataFrame, after: pd.DataFrame, settings: Settings
              ) -> Comparison | None:
    """The runs before against those after, said as ``orch compare`` says a change (its
    verdict rule, attribution and hints: :func:`.compare.judge`), each run's level one
    value, tested as the change point was (Student's t-test: a change point found at
    p ≤ max_p is not then called unchanged by another test of the same runs); the metrics
    the verdict and the attribution read (the others are the shifts' to say)."""
    sides = [_by_metric(side) for side in (before, after)]
    found = {}
    for metric in (m for m in METRICS if m.name in PRIMARY or m.name in ATTRIBUTED):
        va, vb = sides[0].get(metric.name), sides[1].get(metric.name)
        if va is None or vb is None or len(va) + len(vb) < 3:
            continue
        found[metric.name] = of_difference(metric, student(va, vb), (va, vb), "repeat",
                                           min_change=settings.min_magnitude)
    return judge(key, found) if found else None


# --- what a change point says -----------------------------------------------------------------

def headline(c: ChangePoint) -> str:
    """'slower 78 % [70–84 %]: exposed communication +2400 % […], compute unchanged → look at
    the fabric', from orch compare of the runs on either side."""
    from .compare import headline as compare_headline

    if c.comparison is None:
        return "not comparable (no run measured the throughput nor the iteration time)"
    text = compare_headline(c.comparison)
    if c.comparison.attribution:
        text += ": " + ", ".join(c.comparison.attribution)
    if c.comparison.hint:
        text += f" → {c.comparison.hint}"
    if c.comparison.note:
        text += f"; {c.comparison.note}"
    return text


def shift_line(s: Shift) -> str:
    """'throughput 6,812 → 1,512 samples/s: ×0.22 [0.19–0.26], p 2e-05 (3 → 3 entries)'."""
    return (f"{s.metric.label} {s.before:,.4g} → {s.after:,.4g} {s.metric.unit}: "
            f"×{s.ratio:.3g} [{s.low:.3g}–{s.high:.3g}], p {s.p:.2g} "
            f"({s.entries_before} → {s.entries_after} entries), {s.moved}")


def as_json(c: ChangePoint) -> dict:
    """A change point for ``--format json``."""
    comp = c.comparison
    return {
        "configuration": c.key,
        "entry": c.entry.id, "sweep": c.entry.sweep, "measured_at": c.entry.measured_at,
        "previous_entry": c.previous.id, "previous_sweep": c.previous.sweep,
        "verdict": c.verdict,
        "headline": headline(c),
        "attribution": comp.attribution if comp else [],
        "hint": comp.hint if comp else "",
        "changed": c.changed,
        "shifts": {name: {"label": s.metric.label, "unit": s.metric.unit,
                          "before": s.before, "after": s.after, "ratio": s.ratio,
                          "interval": [s.low, s.high], "p": s.p, "moved": s.moved,
                          "entries_before": s.entries_before,
                          "entries_after": s.entries_after, "band_before": list(s.band)}
                   for name, s in c.shifts.items()},
    }


def _date(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.gmtime(seconds))


def settings_line(settings: Settings) -> str:
    return (f"Apache Otava's method: Student's p ≤ {settings.max_p:g}, a shift of "
            f"{settings.min_magnitude * 100:g} % or more, {settings.min_segment} entries or "
            "more a level")


def report_lines(root: Path, entries: list[Entry], settings: Settings,
                 points: list[ChangePoint], found: list[Series]) -> list[str]:
    """What ``orch history changes`` prints: per configuration, its change points (entry,
    sweep, orch compare's verdict and attribution, what changed, each metric's shift)."""
    from .compare import label

    if not entries:
        return [f"no recorded sweep matches in {root} (orch history list)"]
    lines = []
    counts: dict[str, int] = {}
    for s in found:
        counts[label(s.key)] = max(counts.get(label(s.key), 0), len(s.entries))
    by_config: dict[str, list[ChangePoint]] = {}
    for c in points:
        by_config.setdefault(label(c.key), []).append(c)
    for name in sorted(counts):
        mine = by_config.get(name, [])
        lines.append(f"{name}: {counts[name]} entries, "
                     + (f"{len(mine)} change point(s)" if mine else "no change point"))
        for c in mine:
            lines.append(f"  {c.entry.id} ({_date(c.entry.measured_at)}, sweep "
                         f"{c.entry.sweep}): {headline(c)}")
            lines.append("    changed since " + c.previous.id + ": " + (
                "; ".join(c.changed) if c.changed else NOTHING_CHANGED))
            lines += [f"    {shift_line(sh)}" for sh in c.shifts.values()]
    alone = _alone(points, found)
    if alone:
        lines.append(f"{alone} change point(s) of other metrics alone (a phase that moved "
                     "while the throughput and the iteration time did not): --all lists them")
    lines.append(f"{len(points)} change point(s) in {len(counts)} configuration(s) over "
                 f"{len(entries)} recorded sweep(s) of {root} ({settings_line(settings)})")
    return lines


def _alone(points: list[ChangePoint], found: list[Series]) -> int:
    """How many (configuration, entry) pairs have a change point of some metric but are not
    among ``points``."""
    from .compare import label

    listed = {(label(c.key), c.entry.id) for c in points}
    return len({(label(s.key), s.entries[i].id) for s in found for i in s.points} - listed)


NOTHING_CHANGED = ("nothing the runs record (versions, image, orch commit, site config, "
                   "nodes, options): look at what they do not (the machine's load, firmware, "
                   "other jobs, the fabric's state)")


def report_json(root: Path, entries: list[Entry], settings: Settings,
                points: list[ChangePoint], found: list[Series]) -> dict:
    """``--format json``: the change points, and every series with its change points."""
    return {
        "history": str(root), "entries": len(entries),
        "method": settings_line(settings),
        "settings": {"max_p": settings.max_p, "min_magnitude": settings.min_magnitude,
                     "min_segment": settings.min_segment, "window": settings.window},
        "change_points": [as_json(c) for c in points],
        "series": [{"configuration": s.key, "metric": s.metric.name,
                    "entries": [e.id for e in s.entries],
                    "levels": [math.exp(v) for v in s.values],
                    "change_points": [s.entries[i].id for i in s.points]} for s in found],
    }


def latest(s: Series) -> Shift | None:
    """The shift of the series' latest change point (None: it has none): a metric whose
    latest shift is worse has not come back."""
    return shift(s, s.points[-1]) if s.points else None


def slower_now(found: list[Series]) -> bool:
    """Whether a configuration's throughput or iteration time is, since its latest change
    point, at a worse level than before it."""
    return any(s.metric.name in PRIMARY and (sh := latest(s)) is not None
               and sh.moved == "worse" for s in found)


def junit_cases(found: list[Series]):
    """One JUnit test case per configuration and metric: failed where the metric's latest
    change point moved it worse (its value now, the band of the level before, the change
    and what changed at that entry)."""
    from .compare import label
    from .junit import Case

    cases = []
    for s in found:
        sh = latest(s)
        level = f"{math.exp(s.values[-1]):,.6g} {s.metric.unit}"
        if sh is None or sh.moved != "worse":
            cases.append(Case(label(s.key), s.metric.name, detail=(
                f"{s.metric.label} {level} at the latest of {len(s.entries)} entries; "
                + (f"latest change point: {shift_line(sh)}" if sh else "no change point"))))
            continue
        at = s.entries[s.points[-1]]
        pct, low, high = sh.percent
        message = (f"{s.metric.label} {sh.after:,.6g} {s.metric.unit} since entry {at.id}, "
                   f"outside the band [{sh.band[0]:,.6g}, {sh.band[1]:,.6g}] of the "
                   f"{sh.entries_before} entries before: {pct:+.1f} % [{low:+.1f}, "
                   f"{high:+.1f} %]")
        cases.append(Case(label(s.key), s.metric.name, message,
                          f"{message}\nsweep {at.sweep}\n{shift_line(sh)}"))
    return cases
