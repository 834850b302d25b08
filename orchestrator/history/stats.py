"""The statistics of ``orch compare``: a 10 % trimmed mean and Welch's t-test on it (Yuen's
test), with the t distribution's CDF and quantile computed here.

Why these: per-iteration times have long right tails (a page fault, a co-tenant, a slow
all-reduce), which drag a plain mean and inflate its variance; trimming 10 % at each end keeps
the test's power on such data while still using 80 % of the samples. The two sides of a
comparison have different variances (another machine, another day), so the t-test is Welch's,
not Student's (no pooled variance). Values are compared on a log scale, so the difference of
the trimmed means is a ratio B/A and its confidence interval a ratio interval.

scipy is not a dependency of orch: the t distribution's CDF is the regularized incomplete beta
function, computed by its continued fraction (Lentz's method), a few lines tested against
known values (tests/test_history.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

TRIM = 0.10  # the fraction cut at each end before the mean
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


def t_ppf(p: float, df: float) -> float:
    """The t value with P(T <= t) = p (0 < p < 1): bisection on :func:`t_cdf`."""
    if p == 0.5:
        return 0.0
    lo, hi = -1.0, 1.0
    while t_cdf(lo, df) > p:
        lo *= 2.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, abs(mid)):
            break
    return (lo + hi) / 2.0


@dataclass(frozen=True)
class Trimmed:
    """A sample's trimmed mean and the squared standard error of it (Yuen's d)."""

    mean: float
    d: float
    h: int  # the values left after trimming: the degrees of freedom come from it

    @classmethod
    def of(cls, values: np.ndarray, trim: float = TRIM) -> Trimmed:
        x = np.sort(np.asarray(values, dtype=float))
        n = len(x)
        g = math.floor(trim * n)
        h = n - 2 * g
        kept = x[g:n - g]
        winsorized = np.clip(x, kept[0], kept[-1])
        var_w = float(np.var(winsorized, ddof=1)) if n > 1 else 0.0
        d = (n - 1) * var_w / (h * (h - 1)) if h > 1 else math.inf
        return cls(float(kept.mean()), d, h)


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
               trim: float = TRIM) -> Difference:
    """Welch's t-test on trimmed means (Yuen): each side needs 2 values or more."""
    ta, tb = Trimmed.of(a, trim), Trimmed.of(b, trim)
    diff = tb.mean - ta.mean
    se2 = ta.d + tb.d
    if not math.isfinite(se2):
        return Difference(diff, -math.inf, math.inf, 0.5, 0.5, 0.0)
    if se2 <= 0.0:  # no spread on either side: the difference is exact
        less, greater = (0.0, 1.0) if diff < 0 else (1.0, 0.0) if diff > 0 else (0.5, 0.5)
        return Difference(diff, diff, diff, less, greater, math.inf)
    df = se2 ** 2 / (ta.d ** 2 / (ta.h - 1) + tb.d ** 2 / (tb.h - 1))
    se = math.sqrt(se2)
    half = t_ppf(0.5 + confidence / 2.0, df) * se
    below = t_cdf(diff / se, df)
    return Difference(diff, diff - half, diff + half, below, 1.0 - below, df)
