"""Table cells from numbers: every number the report shows is formatted here (pure)."""

from __future__ import annotations

import math

from ..protocol import PHASES

# Phases as stacked in plots and tables, bottom to top (the order of one iteration).
PHASE_ORDER = PHASES
PHASE_LABELS = {"t_io": "I/O", "t_h2d": "host→device", "t_f": "forward", "t_b": "backward",
                "t_comm": "comm (exposed)", "t_u": "update", "t_unaccounted": "other"}


def as_float(value) -> float | None:
    """A cell's value as a float, or None when missing, NaN or not a number."""
    if value is None:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(value) else value


def ms(value, digits: int = 2) -> str:
    v = as_float(value)
    return "-" if v is None else f"{v * 1e3:.{digits}f}"


def ms_pm(mean, std) -> str:
    m, s = as_float(mean), as_float(std)
    if m is None:
        return "-"
    return f"{m * 1e3:.2f} ± {(s or 0.0) * 1e3:.2f}"


def fmt_num(value, spec: str) -> str:
    v = as_float(value)
    return "-" if v is None else format(v, spec)


def fmt_signed(value, spec: str) -> str:
    v = as_float(value)
    return "-" if v is None else format(v, "+" + spec)


def nodes_word(n: int) -> str:
    return f"{n} node" if n == 1 else f"{n} nodes"


def ms_value(value) -> float | None:
    v = as_float(value)
    return None if v is None else v * 1e3


def flops(value) -> str:
    """FLOP/s in the unit that reads best: 12.3 TFLOP/s, 45.6 GFLOP/s."""
    v = as_float(value)
    if v is None:
        return "-"
    for scale, unit in ((1e15, "PFLOP/s"), (1e12, "TFLOP/s"), (1e9, "GFLOP/s")):
        if v >= scale:
            return f"{v / scale:.1f} {unit}"
    return f"{v / 1e6:.1f} MFLOP/s"


def gib(value) -> str:
    v = as_float(value)
    return "-" if v is None else f"{v / 2**30:.2f} GiB"
