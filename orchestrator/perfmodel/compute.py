"""Compute: the iteration time of one worker from its phases, and the weak-scaling speedup.

* one iteration: ``t_iter = t_io + t_h2d + t_f + t_b + t_u + t_comm``;
* pipelined I/O (prefetch): ``t_iter = max(t_io + t_h2d, t_f + t_b + t_comm + t_u)``;
* speedup, Eq. 8 of the first paper:
  ``S(Ng) = Ng · (t_io(1) + t_gpu) / (t_io(Ng) + t_gpu + t_comm(Ng))``,
  ``t_gpu = t_h2d + t_f + t_b + t_u``;
* the synchronization wait of a synchronous step: the slowest of N ranks.
"""

import functools
import math

import numpy as np

from .inputs import Breakdown, check_workers

# --------------------------------------------------------------------------------------------
# Iteration time and speedup
# --------------------------------------------------------------------------------------------


def phase_iteration_time(
    t_io: float,
    t_h2d: float,
    t_f: float,
    t_b: float,
    t_u: float,
    t_comm_exposed: float,
    *,
    prefetch: bool,
) -> float:
    """Iteration time from phase times (any consistent unit).

    Without prefetch the phases run one after another:
    ``t_io + t_h2d + t_f + t_b + t_u + t_comm_exposed``.
    With prefetch the next batch is read and copied while the current one is computed, so the
    slower of the two pipelines sets the pace:
    ``max(t_io + t_h2d, t_f + t_b + t_comm_exposed + t_u)``.
    """
    if prefetch:
        return max(t_io + t_h2d, t_f + t_b + t_comm_exposed + t_u)
    return t_io + t_h2d + t_f + t_b + t_u + t_comm_exposed


def iteration_time(breakdown: Breakdown, n: int = 1, *, prefetch: bool = False) -> float:
    """Iteration time (s) of ``breakdown`` at ``n`` workers; ``t_comm`` is taken as exposed."""
    b = breakdown.at(n)
    return phase_iteration_time(
        b.scalar("t_io"),
        b.scalar("t_h2d"),
        b.scalar("t_f"),
        b.scalar("t_b"),
        b.scalar("t_u"),
        b.scalar("t_comm"),
        prefetch=prefetch,
    )


def speedup_eq8(breakdown: Breakdown, n: int) -> float:
    """Eq. 8 of the first paper (no prefetch): weak-scaling speedup with ``n`` workers.

    ``S(Ng) = Ng · (t_io(1) + t_gpu) / (t_io(Ng) + t_gpu + t_comm(Ng))`` with
    ``t_gpu = t_h2d + t_f + t_b + t_u``. The single-worker time ignores ``t_comm`` (one worker
    has nothing to aggregate). If a ``t_gpu`` phase is given per worker count, the numerator
    uses its value at 1 and the denominator its value at ``n`` (the paper assumes it constant).
    """
    n = check_workers(n)
    one = breakdown.at(1)
    many = breakdown.at(n)
    return (
        n
        * (one.scalar("t_io") + one.t_gpu)
        / (many.scalar("t_io") + many.t_gpu + many.scalar("t_comm"))
    )


def speedup(breakdown: Breakdown, n: int, *, prefetch: bool = False) -> float:
    """General weak-scaling speedup ``S(N) = N · t_iter(1) / t_iter(N)``.

    Both iteration times use the same prefetch rule and include ``t_comm`` as given (so
    ``t_comm(1)`` counts if nonzero). With prefetch off and ``t_comm(1) = 0`` this equals
    :func:`speedup_eq8`.
    """
    n = check_workers(n)
    return (
        n
        * iteration_time(breakdown, 1, prefetch=prefetch)
        / iteration_time(breakdown, n, prefetch=prefetch)
    )


@functools.lru_cache(maxsize=256)
def expected_max_normal(n: int) -> float:
    """E[max of n independent standard normal variables]: 0 for 1, 1/√π ≈ 0.5642 for 2,
    ≈ 1.0294 for 4, ≈ 3.24 for 1,024 (numerical integration of x·n·φ(x)·Φ(x)^(n−1))."""
    n = check_workers(n, "n")
    if n == 1:
        return 0.0
    x = np.linspace(-12.0, 12.0, 24001)
    phi = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x]))
    density = n * phi * cdf ** (n - 1)
    return float(np.sum(x * density) * (x[1] - x[0]))
