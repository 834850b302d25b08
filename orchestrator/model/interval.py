"""Prediction intervals: how far a prediction may be off, from what its inputs are known to.

Why: a point prediction cannot be checked for calibration, only for error; an interval at a
stated nominal level can (the share of measured values inside their intervals should be near
the level: the scorecard's *coverage*). Three sources of uncertainty are combined, each as a
half-width at :data:`LEVEL` (normal quantile ``z``), in quadrature (taken as independent):

* **the network fit**: the α–β fit's residual standard error gives α's and β's standard
  errors (relative least squares, the covariance ``s²(XᵀX)⁻¹``); the prediction is made again
  with the fast corner (α − zσ_α, β − zσ_β) and the slow corner (α + zσ_α, β + zσ_β) of both
  levels, and the distance of each to the point is that side's half-width;
* **the compute phases**: the measured run's per-iteration standard deviation of ``t_iter``
  (as scaled to the predicted size), times z: the spread of one iteration, a conservative
  stand-in for how far a run's mean moves between runs when there is only one run;
* **the repeats**: with several runs of the measured size, the standard deviation of their
  mean ``t_iter``s, times z (run-to-run variation, measured).

Nothing here reads a clock or a file.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np
from pydantic import BaseModel, ConfigDict

from .comm import AlphaBeta

#: The nominal level of every interval orch states (two-sided: 10 % below, 10 % above).
LEVEL = 0.8


def z_of(level: float = LEVEL) -> float:
    """The two-sided standard normal quantile of ``level`` (1.28 at 80 %)."""
    return NormalDist().inv_cdf(0.5 + level / 2)


class Interval(BaseModel):
    """A prediction's interval: ``low``/``high`` seconds at nominal ``level``, and each
    source's half-widths ``(below, above)`` in seconds (``parts``: network, compute,
    repeats)."""

    model_config = ConfigDict(frozen=True)

    low: float
    high: float
    level: float
    parts: dict[str, tuple[float, float]]

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def describe(self) -> str:
        return (f"{self.level:.0%} interval {self.low * 1e3:.3g}-{self.high * 1e3:.3g} ms")


def alpha_beta_bounds(sizes: Sequence[float], seconds: Sequence[float], ranks: int,
                      centre: AlphaBeta, level: float = LEVEL,
                      ) -> tuple[AlphaBeta, AlphaBeta] | None:
    """(fast, slow) corners of the α and β intervals around ``centre``, from the residual
    standard error of the ring all-reduce fit at ``ranks`` ranks (relative least squares, as
    the fit itself); None where the fit has no degree of freedom left (fewer than 3 distinct
    sizes) or nothing is communicated (1 rank)."""
    x = np.asarray(sizes, dtype=float)
    t = np.asarray(seconds, dtype=float)
    if ranks < 2 or len(x) != len(t) or np.unique(x).size < 3 or not np.all(t > 0):
        return None
    design = np.column_stack([np.full_like(x, 2.0 * (ranks - 1)),
                              2.0 * (ranks - 1) / ranks * x]) / t[:, None]
    params, *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    resid = design @ params - 1.0
    s2 = float(resid @ resid) / (len(t) - 2)
    try:
        cov = s2 * np.linalg.inv(design.T @ design)
    except np.linalg.LinAlgError:
        return None
    se_alpha, se_beta = (math.sqrt(max(0.0, v)) for v in np.diag(cov))
    z = z_of(level)
    beta = centre.beta
    fast = AlphaBeta(alpha=max(0.0, centre.alpha - z * se_alpha),
                     bandwidth=1.0 / max(beta * 1e-3, beta - z * se_beta))
    slow = AlphaBeta(alpha=centre.alpha + z * se_alpha, bandwidth=1.0 / (beta + z * se_beta))
    return fast, slow


def combine(point: float, *, network: Sequence[float] = (), compute_sd: float = 0.0,
            repeats_sd: float = 0.0, level: float = LEVEL) -> Interval:
    """The interval around ``point`` (s): ``network`` are the predictions made with the fit's
    corner networks (their distance to the point is the network's half-width on each side);
    ``compute_sd`` and ``repeats_sd`` standard deviations (s), taken ``z`` times on both
    sides."""
    z = z_of(level)
    net = [v for v in network if math.isfinite(v)]
    parts = {
        "network": (max([0.0, *(point - v for v in net)]), max([0.0, *(v - point for v in net)])),
        "compute": (z * max(0.0, compute_sd),) * 2,
        "repeats": (z * max(0.0, repeats_sd),) * 2,
    }
    below = math.sqrt(sum(lo ** 2 for lo, _ in parts.values()))
    above = math.sqrt(sum(hi ** 2 for _, hi in parts.values()))
    return Interval(low=max(0.0, point - below), high=point + above, level=level, parts=parts)


def coverage(inside: Sequence[bool]) -> float | None:
    """The share of measured values inside their intervals (None for none)."""
    return sum(bool(v) for v in inside) / len(inside) if len(inside) else None


#: Below this many scored intervals a coverage is a count, not a calibration figure: at 80 %
#: nominal, 9 well-calibrated intervals hold 5 to 9 of the values 92 % of the time (binomial),
#: i.e. anywhere from 56 % to 100 %.
MIN_CALIBRATION_N = 10


def coverage_text(inside: int, n: int, level: float | None) -> str:
    """The coverage in words: ``k of n inside = p % (nominal L %)``, and, where ``n`` is
    under :data:`MIN_CALIBRATION_N`, that it cannot judge calibration yet ("" for n = 0)."""
    if n <= 0:
        return ""
    nominal = f" (nominal {level:.0%})" if level else ""
    text = f"interval coverage {inside} of {n} inside = {inside / n:.0%}{nominal}"
    if n < MIN_CALIBRATION_N:
        text += (f"; n = {n} < {MIN_CALIBRATION_N}: n too small to judge calibration")
    return text
