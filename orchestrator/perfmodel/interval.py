"""Prediction intervals: how far a prediction may be off, from what its inputs are known to.

Why: a point prediction cannot be checked for calibration, only for error; an interval at a
stated nominal level can (the share of measured values inside their intervals should be near
the level: the scorecard's *coverage*). Four sources of uncertainty are combined, each as a
half-width per side at :data:`LEVEL` (normal quantile ``z``), in quadrature (taken as
independent):

* **the network fit**: the α–β fit's standard errors of α and β (model.comm.fit_ring: the
  covariance ``s²(XᵀX)⁻¹`` of the least squares it solved); the prediction is made again
  with the fast corner (α − zσ_α, β − zσ_β) and the slow corner (α + zσ_α, β + zσ_β) of both
  levels, and the distance of each to the point is that side's half-width;
* **the compute phases**: the spread of one iteration of the measured run (a conservative
  stand-in for how far a run's mean moves between runs when there is only one run), as a
  fraction of its mean ``t_iter``, times the predicted ``t_iter`` (:class:`Spread`). Where its
  iterations are at hand (the iterations table the merge before the prediction wrote), the
  distances of its ``t_iter``'s 10th and 90th percentiles (at 80 %) from their median: a few
  slow iterations widen the upper side only, as they should; where they are not, the normal
  approximation ``z·t_iter_std`` on both sides. The prediction says which (``interval_basis``);
* **the repeats**: with several runs of the measured size, the standard deviation of their
  mean ``t_iter``s, times z (run-to-run variation, measured);
* **the model's own error**: what the three above leave out, a systematic miss of the model
  (a pattern priced as a ring it is not, a cost it does not know), as the site's earlier
  scorecards measured it (:class:`ModelError`): the (1 − level)/2 and (1 + level)/2 quantiles
  (10th and 90th at 80 %) of their signed relative errors ``e = (predicted − measured) /
  measured``. A measured value lies near ``point / (1 + e)``, so the lower side's half-width
  is ``point − point / (1 + e_90)`` and the upper side's ``point / (1 + e_10) − point`` (each
  at least 0): a model that predicts too fast (e < 0) widens the upper side. Under
  :data:`MIN_SCORED` recorded errors there is no such term, and the prediction says so.

Nothing here reads a clock or a file: the recorded errors come in as numbers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from statistics import NormalDist

import numpy as np
from pydantic import BaseModel, ConfigDict

from .comm import AlphaBeta, RingFit

#: The nominal level of every interval orch states (two-sided: 10 % below, 10 % above).
LEVEL = 0.8


def z_of(level: float = LEVEL) -> float:
    """The two-sided standard normal quantile of ``level`` (1.28 at 80 %)."""
    return NormalDist().inv_cdf(0.5 + level / 2)


#: Fewer measured iterations than this and the 10th and 90th percentiles are no estimate (at
#: 9 they are interpolated between the two fastest and the two slowest): the normal
#: approximation is used instead.
MIN_ITERATIONS = 10

#: How the compute part was taken (an Interval's ``basis``, a prediction's ``interval_basis``).
QUANTILES = "quantiles"  # the measured iterations' 10th-90th percentiles (at 80 %)
NORMAL = "normal"        # z times t_iter_std (the iterations were not at hand, or too few)
NO_SPREAD = "none"       # nothing measured says how an iteration varies


class Spread(BaseModel):
    """How far one iteration of the measured run lies below and above its typical one, as
    fractions of its mean ``t_iter`` at the interval's level, and what that is taken from
    (``basis``; ``iterations``: how many, for quantiles)."""

    model_config = ConfigDict(frozen=True)

    below: float = 0.0
    above: float = 0.0
    basis: str = NO_SPREAD
    iterations: int | None = None


def quantile_spread(t_iter: Sequence[float], level: float = LEVEL) -> Spread | None:
    """The spread of measured iterations from their quantiles: (median − q_lo) / mean below,
    (q_hi − median) / mean above, q at (1 ∓ level) / 2 (linear interpolation); None with fewer
    than :data:`MIN_ITERATIONS` finite values or a mean ≤ 0. Distances from the median, not
    the mean: a slow tail drags the mean up, and taken from it would widen the lower side."""
    x = np.asarray(t_iter, dtype=float)
    x = x[np.isfinite(x)]
    if x.size < MIN_ITERATIONS or x.mean() <= 0:
        return None
    low, mid, high = np.quantile(x, [(1 - level) / 2, 0.5, (1 + level) / 2])
    mean = float(x.mean())
    return Spread(below=float(mid - low) / mean, above=float(high - mid) / mean,
                  basis=QUANTILES, iterations=int(x.size))


def normal_spread(sd: float | None, mean: float | None, level: float = LEVEL) -> Spread:
    """The normal approximation: z·sd / mean on both sides (no spread without both)."""
    if sd is None or mean is None or not (math.isfinite(sd) and math.isfinite(mean)) or (
            mean <= 0):
        return Spread()
    return Spread(below=z_of(level) * max(0.0, sd) / mean,
                  above=z_of(level) * max(0.0, sd) / mean, basis=NORMAL)


def mean_spread(spreads: Sequence[Spread]) -> Spread:
    """Several measured runs' spreads in one (their fractions' mean), quantiles only where
    every run had them (else the caller takes the normal approximation for all)."""
    if not spreads or any(s.basis != QUANTILES for s in spreads):
        return Spread()
    return Spread(below=sum(s.below for s in spreads) / len(spreads),
                  above=sum(s.above for s in spreads) / len(spreads), basis=QUANTILES,
                  iterations=sum(s.iterations or 0 for s in spreads))


#: Fewer scored predictions than this and their errors' 10th and 90th percentiles are no
#: estimate of the model's error (as for :data:`MIN_ITERATIONS`): no model-error term.
MIN_SCORED = 10

#: A prediction's ``model_error_basis`` while the site has too few scored predictions.
NO_MODEL_ERROR = "none yet"


class ModelError(BaseModel):
    """The model's own error on a site, as its scorecards measured it: ``low`` and ``high``,
    the (1 ∓ level)/2 quantiles of the signed relative errors ``(predicted − measured) /
    measured`` of ``scored`` predictions, recorded in ``source`` (a file's name, for the
    record)."""

    model_config = ConfigDict(frozen=True)

    low: float
    high: float
    scored: int
    source: str = ""

    def sides(self, point: float) -> tuple[float, float]:
        """(below, above) half-widths (s) around ``point``: the measured value lies near
        ``point / (1 + e)``, from ``point / (1 + high)`` to ``point / (1 + low)``; a side the
        errors do not reach is 0."""
        return (max(0.0, point - point / (1 + self.high)),
                max(0.0, point / (1 + self.low) - point))

    def basis(self) -> str:
        return f"{self.scored} scored predictions in {self.source}" if self.source else (
            f"{self.scored} scored predictions")


def model_error_of(errors: Sequence[float], source: str = "",
                   level: float = LEVEL) -> ModelError | None:
    """The :class:`ModelError` of recorded signed relative errors (their (1 ∓ level)/2
    quantiles, linear interpolation); None with fewer than :data:`MIN_SCORED` usable ones (an
    error is usable when finite and above −1: a measured value at ``point / (1 + e)``)."""
    x = np.asarray([e for e in errors if isinstance(e, (int, float))], dtype=float)
    x = x[np.isfinite(x) & (x > -1)]
    if x.size < MIN_SCORED:
        return None
    low, high = np.quantile(x, [(1 - level) / 2, (1 + level) / 2])
    return ModelError(low=float(low), high=float(high), scored=int(x.size), source=source)


class Interval(BaseModel):
    """A prediction's interval: ``low``/``high`` seconds at nominal ``level``, and each
    source's half-widths ``(below, above)`` in seconds (``parts``: network, compute,
    repeats, model); ``basis``: how the compute part was taken (:class:`Spread`);
    ``error_basis``: what the model-error part was taken from (:class:`ModelError`), or
    :data:`NO_MODEL_ERROR`."""

    model_config = ConfigDict(frozen=True)

    low: float
    high: float
    level: float
    parts: dict[str, tuple[float, float]]
    basis: str = NO_SPREAD
    iterations: int | None = None
    error_basis: str = NO_MODEL_ERROR

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def describe(self) -> str:
        return (f"{self.level:.0%} interval {self.low * 1e3:.3g}-{self.high * 1e3:.3g} ms")


def alpha_beta_bounds(fit: RingFit, centre: AlphaBeta | None = None, level: float = LEVEL,
                      ) -> tuple[AlphaBeta, AlphaBeta] | None:
    """(fast, slow) corners of the α and β intervals around ``centre`` (the fit's own α–β by
    default), ``z`` of the fit's standard errors away (model.comm.fit_ring); None where the fit
    could not estimate them (fewer than 3 distinct sizes)."""
    if fit.se_alpha is None or fit.se_beta is None:
        return None
    centre = centre or fit.alpha_beta
    z = z_of(level)
    beta = centre.beta
    fast = AlphaBeta(alpha=max(0.0, centre.alpha - z * fit.se_alpha),
                     bandwidth=1.0 / max(beta * 1e-3, beta - z * fit.se_beta))
    slow = AlphaBeta(alpha=centre.alpha + z * fit.se_alpha,
                     bandwidth=1.0 / (beta + z * fit.se_beta))
    return fast, slow


def combine(point: float, *, network: Sequence[float] = (), compute_sd: float = 0.0,
            repeats_sd: float = 0.0, level: float = LEVEL,
            spread: Spread | None = None, model_error: ModelError | None = None,
            error_basis: str = NO_MODEL_ERROR) -> Interval:
    """The interval around ``point`` (s): ``network`` are the predictions made with the fit's
    corner networks (their distance to the point is the network's half-width on each side);
    ``repeats_sd`` a standard deviation (s), taken ``z`` times on both sides; the compute
    part is ``spread``'s fractions of the point where given, else ``compute_sd`` (s) ``z``
    times on both sides; the model part is ``model_error``'s sides where given (else 0, and
    ``error_basis`` says why: :data:`NO_MODEL_ERROR` by default)."""
    z = z_of(level)
    net = [v for v in network if math.isfinite(v)]
    compute = ((max(0.0, spread.below) * point, max(0.0, spread.above) * point)
               if spread is not None else (z * max(0.0, compute_sd),) * 2)
    parts = {
        "network": (max([0.0, *(point - v for v in net)]), max([0.0, *(v - point for v in net)])),
        "compute": compute,
        "repeats": (z * max(0.0, repeats_sd),) * 2,
        "model": model_error.sides(point) if model_error is not None else (0.0, 0.0),
    }
    below = math.sqrt(sum(lo ** 2 for lo, _ in parts.values()))
    above = math.sqrt(sum(hi ** 2 for _, hi in parts.values()))
    basis = spread.basis if spread is not None else (NORMAL if compute_sd > 0 else NO_SPREAD)
    return Interval(low=max(0.0, point - below), high=point + above, level=level, parts=parts,
                    basis=basis, iterations=spread.iterations if spread is not None else None,
                    error_basis=model_error.basis() if model_error is not None else error_basis)


#: Below this many scored intervals a coverage is a count, not a calibration figure: at 80 %
#: nominal, 9 well-calibrated intervals hold 6 to 9 of the values only 91 % of the time
#: (binomial): a coverage anywhere from 67 % to 100 % says nothing either way.
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
