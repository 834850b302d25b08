"""The energy a device used over a rank's measured window, from its samples (pure arithmetic).

A sample may carry a cumulative energy counter (NVML's total energy in mJ, RAPL's energy_uj
in µJ) or power (W): a window's energy is the counter's difference (past a wraparound), else
power integrated over time, and :func:`edge_energy` clips either at the window's edges. The
sampler (:mod:`orchestrator.rankside.sampler`) writes the footer with it; the control plane
(orchestrator.results.devices) applies the same rules to the samples it reads.

Same rules as :mod:`orchestrator.rankside.harness`, which imports it: stdlib only, valid
Python 3.6 (CNTK), annotations as strings.
"""

# At least once a second (the brief is "per second or better").
SAMPLE_PERIOD_S = 0.5
# The energy counters a sample may carry, in the order preferred, and their unit in J: NVML's
# total energy in mJ, RAPL's energy_uj in µJ. Power (W) integrated over time is the fallback.
ENERGY_COUNTERS = (("energy_mj", 1e-3), ("rapl_uj", 1e-6))
ENERGY_FIELDS = (*(key for key, _ in ENERGY_COUNTERS), "power_w")  # what energy comes from


def counter_delta(first: int, last: int, max_range: "int | None") -> int:
    """How far a counter moved from ``first`` to ``last``, past at most one wraparound at
    ``max_range`` (RAPL's ``max_energy_range_uj``: its energy_uj starts again from 0)."""
    if last >= first or not max_range:
        return last - first
    return last + max_range - first


def cumulative(samples: list, key: str, scale: float, ranges: "dict | None" = None):
    """[(t, units moved since the first sample)] of a cumulative counter, times ``scale``
    (``key``: a number, or a dict of zones summed), each interval past at most one wraparound
    (``ranges``: a zone's wrap value); None where there is one sample, a sample lacks it or a
    counter without a wrap value went backwards (NVML's is an unsigned 64-bit count since the
    driver loaded: it only goes back when the driver reloads)."""
    if len(samples) < 2:
        return None
    out, total = [(samples[0]["t"], 0.0)], 0.0
    for i in range(1, len(samples)):  # no zip(strict=)/pairwise: Python 3.6
        va, vb = samples[i - 1].get(key), samples[i].get(key)
        if va is None or vb is None or (isinstance(va, dict) and set(va) != set(vb)):
            return None
        pairs = ([(va[z], vb[z], (ranges or {}).get(z)) for z in va] if isinstance(va, dict)
                 else [(va, vb, None)])
        for first, last, wrap in pairs:
            if last < first and not wrap:
                return None
            total += counter_delta(first, last, wrap)
        out.append((samples[i]["t"], total * scale))
    return out


def counter_total(samples: list, key: str, scale: float, ranges: "dict | None" = None):
    """How far a cumulative counter moved over the samples, times ``scale``: the last point
    of :func:`cumulative` (None where it has none)."""
    series = cumulative(samples, key, scale, ranges)
    return series[-1][1] if series is not None else None


def power_points(samples: list) -> list:
    """[(t, power_w)] of the samples that read power."""
    return [(s["t"], s["power_w"]) for s in samples if s.get("power_w") is not None]


def trapezoids(points: list) -> float:
    """The integral of the piecewise-linear series ``points`` [(t, v)] over its span."""
    return sum((points[i][0] - points[i - 1][0]) * (points[i - 1][1] + points[i][1]) / 2
               for i in range(1, len(points)))


def integrated_energy_j(samples: list) -> "float | None":
    """Power integrated over time (trapezoids between samples with ``power_w``), in J."""
    points = power_points(samples)
    return trapezoids(points) if len(points) >= 2 else None


def window_energy(samples: list, ranges: "dict | None" = None) -> tuple:
    """(joules, basis) over the samples: the energy counter's difference where every sample
    has it (NVML's mJ, RAPL's µJ), else power integrated over time, else (None, None)."""
    for key, scale in ENERGY_COUNTERS:
        joules = counter_total(samples, key, scale, ranges)
        if joules is not None:
            return joules, "counter"
    joules = integrated_energy_j(samples)
    return (joules, "integrated power") if joules is not None else (None, None)


SHORT_WINDOW = ("window shorter than the sampling interval (or holding fewer than 2 device "
                "samples): raise --iters")
# A sample this close to a window's edge was taken at it: the sampler's first sample comes
# just before the window's first iteration, its last just after the window ends.
EDGE_SLACK_S = 0.05


NO_ENERGY = "no energy: neither an energy counter nor power was read"


def value_at(points: list, t: float, hold: bool = False) -> float:
    """The piecewise-linear series ``points`` [(t, v)] at ``t``; past either end, the end
    segment's slope continued (``hold``: the end value held)."""
    if t <= points[0][0] or t >= points[-1][0]:
        i = 0 if t <= points[0][0] else len(points) - 2
        (ta, va), (tb, vb) = points[i], points[i + 1]
        if hold or tb <= ta:
            return va if i == 0 else vb
    else:
        i = next(k for k in range(len(points) - 1) if points[k + 1][0] >= t)
        (ta, va), (tb, vb) = points[i], points[i + 1]
        if tb <= ta:
            return vb
    return va + (vb - va) * (t - ta) / (tb - ta)


def clipped_integral(points: list, start: float, end: float) -> float:
    """The trapezoids of ``points`` [(t, v)] over exactly [start, end]: the edges' values
    interpolated, a value held constant past the series' ends."""
    inner = [p for p in points if start < p[0] < end]
    return trapezoids([(start, value_at(points, start, hold=True)), *inner,
                       (end, value_at(points, end, hold=True))])


def edge_energy(samples: list, start: float, end: float, ranges: "dict | None" = None,
                period: float = SAMPLE_PERIOD_S) -> tuple:
    """(joules, basis, why not) used in the window [start, end]: the energy counter's value
    interpolated at each edge between the samples just before and after it (NVML's mJ, RAPL's
    µJ; an edge past the samples continues the nearest interval's power), else power
    integrated with trapezoids clipped at the edges. (None, None, SHORT_WINDOW) where the
    window is shorter than the sampling ``period`` or fewer than 2 samples lie in it (or at
    its edges, EDGE_SLACK_S): its figure would be the sampling's, not the window's."""
    samples = sorted((s for s in samples if s.get("t") is not None), key=lambda s: s["t"])
    if not any(s.get(k) is not None for s in samples for k in ENERGY_FIELDS):
        return None, None, NO_ENERGY
    held = sum(1 for s in samples if start - EDGE_SLACK_S <= s["t"] <= end + EDGE_SLACK_S)
    if end - start < period or held < 2:
        return None, None, SHORT_WINDOW
    for key, scale in ENERGY_COUNTERS:
        series = cumulative(samples, key, scale, ranges)
        if series is not None:
            return value_at(series, end) - value_at(series, start), "counter", None
    points = power_points(samples)
    if len(points) >= 2:
        return clipped_integral(points, start, end), "integrated power", None
    return None, None, NO_ENERGY
