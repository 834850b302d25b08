"""Units a user types and reads: bandwidths (``10Gb/s``, ``12.5GB/s``), latencies (``2us``)
and byte counts (``64KiB``, ``1M``).

Pure functions, used by the CLI's what-if options, the site config (a partition's minimum bus
bandwidth), the message sizes of the network benchmark, and every place that prints a
bandwidth or a time.
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


# --- byte counts: message sizes, gradient sizes, buckets ----------------------------------

def parse_sizes(text: str, what: str = "sizes") -> tuple[int, ...]:
    """``"4:1K:64K:1M"`` (or with commas) → bytes, sorted, distinct.

    Suffixes: K, M, G (also KiB, MiB, GiB) are powers of 1024; KB, MB, GB powers of 1000;
    a trailing B alone is bytes. Every size must be a positive multiple of 4 (float32 buffers).
    """
    items = [t.strip() for t in text.replace(",", ":").split(":") if t.strip()]
    if not items:
        raise UserError(f"{what}: expected message sizes such as 4,1K,64K,1M, got '{text}'")
    out = set()
    for item in items:
        value = parse_bytes(item, what)
        if value < 4 or value % 4:
            raise UserError(f"{what}: {item} = {value} bytes; sizes are float32 buffers: use "
                            "a positive multiple of 4 bytes")
        out.add(value)
    return tuple(sorted(out))


_BYTE_UNITS = {"": 1, "b": 1, "k": 1024, "kib": 1024, "m": 1024 ** 2, "mib": 1024 ** 2,
               "g": 1024 ** 3, "gib": 1024 ** 3, "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3}


def parse_bytes(text: str, what: str) -> int:
    """One byte count: ``4``, ``1K`` (1024), ``1KB`` (1000), ``2MiB``, ``1.5M``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?(?:[eE]\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _BYTE_UNITS:
        raise UserError(f"{what}: '{text}' is not a byte count (e.g. 4, 1K, 64KiB, 1M, 1MB)")
    value = float(match.group(1)) * _BYTE_UNITS[unit]
    if value != int(value):
        raise UserError(f"{what}: '{text}' is not a whole number of bytes")
    return int(value)
