"""Units a user types and reads: bandwidths (``10Gb/s``, ``12.5GB/s``) and latencies (``2us``).

Pure functions, used by the CLI's what-if options, the site config (a partition's minimum bus
bandwidth) and every place that prints a bandwidth or a time.
"""

from __future__ import annotations

import math
import re

from .errors import UserError

_SI = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12, "ki": 2.0 ** 10, "mi": 2.0 ** 20,
       "gi": 2.0 ** 30, "ti": 2.0 ** 40}
_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)(?:[eE]([+-]?\d+))?"


def parse_bandwidth(text: str, what: str = "--bandwidth") -> float:
    """A bandwidth in bytes/s: ``12.5e9`` (bytes/s), ``10Gb/s``/``10Gbit``/``10Gbps`` (bits),
    ``12.5GB/s`` (bytes), ``1GiB/s``. ``b``/``bit`` is bits, ``B``/``byte`` bytes; k, M, G, T
    are powers of 1000, Ki, Mi, Gi, Ti of 1024."""
    bad = UserError(f"{what} '{text}': expected a bandwidth such as 10Gb/s, 100Gbit, 12.5GB/s "
                    "or a number of bytes/s")
    match = re.fullmatch(rf"\s*{_NUMBER}\s*([A-Za-z/]*)\s*", text)
    if match is None:
        raise bad
    value = float(match.group(1)) * 10.0 ** int(match.group(2) or 0)
    unit = match.group(3)
    for per_second in ("/sec", "/s", "ps"):
        if unit.endswith(per_second):
            unit = unit[: -len(per_second)]
            break
    unit_match = re.fullmatch(r"([kKmMgGtT]i?)?(b|bits?|B|[Bb]ytes?)", unit) if unit else None
    if unit and unit_match is None:
        raise bad
    if unit_match:
        value *= _SI[(unit_match.group(1) or "").lower()]
        if unit_match.group(2) in ("b", "bit", "bits"):
            value /= 8
    if not math.isfinite(value) or value <= 0:
        raise UserError(f"{what} '{text}': must be a positive bandwidth")
    return value


_PER_SECOND = {"": 1.0, "s": 1.0, "ms": 1e3, "us": 1e6, "µs": 1e6, "μs": 1e6, "ns": 1e9}


def parse_latency(text: str, what: str = "--latency") -> float:
    """A latency in seconds: ``1.5e-6`` (seconds), ``2us``/``2µs``, ``500ns``, ``0.01ms``."""
    match = re.fullmatch(rf"\s*{_NUMBER}\s*(s|ms|us|µs|μs|ns)?\s*", text)
    if match is None:
        raise UserError(f"{what} '{text}': expected a latency such as 2us, 500ns, 0.01ms or a "
                        "number of seconds")
    value = float(match.group(1)) * 10.0 ** int(match.group(2) or 0)
    value /= _PER_SECOND[match.group(3) or ""]
    if not math.isfinite(value) or value < 0:
        raise UserError(f"{what} '{text}': must be a non-negative latency")
    return value


def format_seconds(value: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)):
        if abs(value) >= scale or unit == "ns":
            return f"{value / scale:.3g} {unit}"
    return f"{value} s"


def format_bandwidth(value: float) -> str:
    """Bytes/s as GB/s (and Gb/s, the unit NICs are sold in)."""
    return f"{value / 1e9:.3g} GB/s ({value * 8 / 1e9:.3g} Gb/s)"
