"""The statistics of ``orch compare``: a 10 % trimmed mean and Welch's t-test on it (Yuen's
test), with the t distribution's CDF and quantile computed here.

Why these: per-iteration times have long right tails (a page fault, a co-tenant, a slow
all-reduce), which drag a plain mean and inflate its variance; trimming 10 % at each end keeps
the test's power on such data while still using 80 % of the samples. The two sides of a
comparison have different variances (another machine, another day), so the t-test is Welch's,
not Student's (no pooled variance). Values are compared on a log scale, so the difference of
the trimmed means is a ratio B/A and its confidence interval a ratio interval.

Successive iterations of one run are not independent: a co-tenant, a clock or a cache state
lasts several steps, so the iteration times of one run are positively autocorrelated, and n of
them carry the information of fewer independent values. A test that counts them as n
understates the standard error and calls noise a change. Where the compared values are one
run's iterations, each side's variance is inflated by ``(1 + r) / (1 - r)`` (``r``, the lag-1
autocorrelation of the series, clipped to ``[0, RHO_MAX]``) and its degrees of freedom shrunk by
the same factor: the effective sample size of an AR(1) series, ``n (1 - r) / (1 + r)``. A
negative estimate is taken as 0 (independent), never as more information than n values.

scipy is not a dependency of orch: the t distribution's CDF is the regularized incomplete beta
function, computed by its continued fraction (Lentz's method), a few lines tested against
known values (tests/test_history.py).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

TRIM = 0.10  # the fraction cut at each end before the mean
# Beyond this, 10-30 iterations cannot tell a slow drift from a level: the inflation stops at
# (1 + 0.9) / (1 - 0.9) = 19, i.e. the run counts as about n / 19 independent values.
RHO_MAX = 0.9
_EPS = 1e-15


def _beta_cf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (converges for x < (a+1)/(a+b+2))."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_cf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_cf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t distribution with ``df`` degrees of freedom (df > 0)."""
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_pdf(t: float, df: float) -> float:
    """The density of Student's t distribution."""
    return math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)
                    - 0.5 * math.log(df * math.pi) - (df + 1) / 2 * math.log1p(t * t / df))


def t_ppf(p: float, df: float) -> float:
    """The t value with P(T <= t) = p (0 < p < 1): Newton's method on :func:`t_cdf`, kept
    inside a bracket that it halves where a Newton step would leave it (a few steps, where
    bisection alone took 45: comparing 100 configurations calls it 100 times)."""
    if p == 0.5:
        return 0.0
    lo, hi = -1.0, 1.0
    while t_cdf(lo, df) > p:
        lo *= 2.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    x = (lo + hi) / 2.0
    for _ in range(200):
        f = t_cdf(x, df) - p
        if f < 0:
            lo = x
        else:
            hi = x
        step = f / max(t_pdf(x, df), 1e-300)
        nxt = x - step
        if not lo < nxt < hi:
            nxt = (lo + hi) / 2.0
        if abs(nxt - x) < 1e-12 * max(1.0, abs(x)) or hi - lo < 1e-12 * max(1.0, abs(x)):
            return nxt
        x = nxt
    return x


@functools.lru_cache(maxsize=1024)
def _quantile(p: float, df: float) -> float:
    """t_ppf, kept: a history's change points ask it again and again on the same whole
    degrees of freedom."""
    return t_ppf(p, df)


def lag1_autocorrelation(series: np.ndarray) -> float:
    """The lag-1 autocorrelation of a series in its order (0 for fewer than 3 values or none
    of spread). Winsorized at the trimmed ends first, so that one outlier does not decide it."""
    x = np.asarray(series, dtype=float)
    n = len(x)
    if n < 3:
        return 0.0
    g = math.floor(TRIM * n)
    ordered = np.sort(x)
    x = np.clip(x, ordered[g], ordered[n - 1 - g])
    x = x - x.mean()
    denom = float(np.dot(x, x))
    return float(np.dot(x[:-1], x[1:]) / denom) if denom > 0 else 0.0


def inflation(series: list[np.ndarray]) -> float:
    """The variance inflation ``(1 + r) / (1 - r)`` of runs' iteration series, ``r`` their
    lag-1 autocorrelation (each run's, weighted by its length), clipped to ``[0, RHO_MAX]``."""
    weights = [len(s) for s in series if len(s) >= 3]
    if not weights:
        return 1.0
    r = sum(len(s) * lag1_autocorrelation(s) for s in series if len(s) >= 3) / sum(weights)
    r = min(max(r, 0.0), RHO_MAX)
    return (1.0 + r) / (1.0 - r)


@dataclass(frozen=True)
class Trimmed:
    """A sample's trimmed mean and the squared standard error of it (Yuen's d)."""

    mean: float
    d: float
    h: float  # the values left after trimming, over the inflation: the degrees of freedom

    @classmethod
    def of(cls, values: np.ndarray, trim: float = TRIM, inflate: float = 1.0) -> Trimmed:
        """``inflate``: the variance inflation of autocorrelated values (:func:`inflation`)."""
        x = np.sort(np.asarray(values, dtype=float))
        n = len(x)
        g = math.floor(trim * n)
        h = n - 2 * g
        kept = x[g:n - g]
        winsorized = np.clip(x, kept[0], kept[-1])
        var_w = float(np.var(winsorized, ddof=1)) if n > 1 else 0.0
        d = (n - 1) * var_w / (h * (h - 1)) if h > 1 else math.inf
        return cls(float(kept.mean()), d * inflate, max(h / inflate, 2.0) if h > 1 else h)


@dataclass(frozen=True)
class Difference:
    """B's trimmed mean minus A's, with its 95 % interval and one-sided p-values."""

    diff: float
    low: float
    high: float
    p_less: float  # P-value of 'B is below A' (one-sided)
    p_greater: float  # P-value of 'B is above A' (one-sided)
    df: float


def yuen_welch(a: np.ndarray, b: np.ndarray, confidence: float = 0.95,
               trim: float = TRIM, inflate: tuple[float, float] = (1.0, 1.0)) -> Difference:
    """Welch's t-test on trimmed means (Yuen): each side needs 2 values or more; ``inflate``,
    each side's variance inflation (autocorrelated iterations)."""
    ta, tb = Trimmed.of(a, trim, inflate[0]), Trimmed.of(b, trim, inflate[1])
    diff = tb.mean - ta.mean
    se2 = ta.d + tb.d
    if not math.isfinite(se2):
        return Difference(diff, -math.inf, math.inf, 0.5, 0.5, 0.0)
    # Welch-Satterthwaite degrees of freedom (none needed where the difference is exact)
    df = se2 ** 2 / (ta.d ** 2 / (ta.h - 1) + tb.d ** 2 / (tb.h - 1)) if se2 > 0 else math.inf
    return _t_difference(diff, se2, df, confidence)


def student(a: np.ndarray, b: np.ndarray, confidence: float = 0.95) -> Difference:
    """Student's two-sample t-test, variances pooled: B's mean minus A's, on ``len(a) +
    len(b) - 2`` degrees of freedom (each side one value or more, three or more in all).
    What a change point's split is tested with (:mod:`.changes`): the entries of a series
    on either side of it, whose spread one pooled variance describes better than two small
    samples' own."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    df = len(a) + len(b) - 2
    diff = float(b.mean() - a.mean())
    if df < 1:
        return Difference(diff, -math.inf, math.inf, 0.5, 0.5, 0.0)
    pooled = (float(((a - a.mean()) ** 2).sum()) + float(((b - b.mean()) ** 2).sum())) / df
    return _t_difference(diff, pooled * (1.0 / len(a) + 1.0 / len(b)), df, confidence)


def _t_difference(diff: float, se2: float, df: float, confidence: float) -> Difference:
    """A difference ``diff`` with squared standard error ``se2`` on ``df`` degrees of freedom:
    its interval at ``confidence`` and one-sided p-values from the t distribution; exact where
    ``se2`` is 0 (no spread on either side)."""
    if se2 <= 0.0:
        less, greater = (0.0, 1.0) if diff < 0 else (1.0, 0.0) if diff > 0 else (0.5, 0.5)
        return Difference(diff, diff, diff, less, greater, math.inf)
    se = math.sqrt(se2)
    half = _quantile(0.5 + confidence / 2.0, df) * se
    below = t_cdf(diff / se, df)
    return Difference(diff, diff - half, diff + half, below, 1.0 - below, df)


def against_spread(runs: np.ndarray, one: float, confidence: float = 0.95,
                   one_is_b: bool = True) -> Difference:
    """One run's value against other runs' values (3 or more): is it inside their spread?

    A prediction interval, Welch's test with one side a single new run: the new run differs
    from the runs' trimmed mean by its own run-to-run deviation (the runs' winsorized
    variance, which holds each run's iteration noise too) plus the error of that mean, on the
    runs' degrees of freedom. ``one_is_b``: the difference is one minus the runs (else the
    runs minus one)."""
    t = Trimmed.of(runs)
    n = len(runs)
    var_run = t.d * t.h * (t.h - 1) / (n - 1)  # the winsorized variance of one run
    sign = 1.0 if one_is_b else -1.0
    diff = sign * (one - t.mean)
    return _t_difference(diff, t.d + var_run, t.h - 1.0, confidence)


def two_against_spread(a: float, b: float, runs: np.ndarray, confidence: float = 0.95
                       ) -> Difference:
    """One run a side (A's value ``a``, B's ``b``), tested against the spread of other runs
    of the configuration (3 or more: a history): each run deviates from its level by one
    run's deviation (the runs' winsorized variance, as :func:`against_spread`), so B − A has
    twice that variance, on the runs' degrees of freedom."""
    t = Trimmed.of(runs)
    var_run = t.d * t.h * (t.h - 1) / (len(runs) - 1)
    return _t_difference(b - a, 2.0 * var_run, t.h - 1.0, confidence)
