"""The settings of ``orch history changes`` and their defaults, declared once: the command's
options and :mod:`.changes` read them here (a module without pandas, so that the command
line is built without loading it)."""

from __future__ import annotations

from dataclasses import dataclass

# Measured in benchmarks/changepoints.py: at p ≤ 0.005, false change points on series of
# one level stay near 0.3 % per entry, while a shift of two standard deviations of one
# entry is found 95 % of the time with 20 entries a side (85 % with 10).
MAX_P = 0.005
MIN_MAGNITUDE = 0.02  # a shift under 2 % is reported as none, however sure
MIN_SEGMENT = 3  # a level is never one or two sweeps
WINDOW = 50  # Otava's sliding window, in entries


@dataclass(frozen=True)
class Settings:
    """How sure and how large a change point must be (:mod:`.changes`)."""

    max_p: float = MAX_P
    min_magnitude: float = MIN_MAGNITUDE
    min_segment: int = MIN_SEGMENT
    window: int = WINDOW
