"""Slurm's time limits, read in one place: a site config's ``sbatch.time``, the limit a run is
given, and a partition's ``MaxTime`` as ``orch site detect`` finds it.

The formats are sbatch(1)'s (``--time``): ``minutes``, ``minutes:seconds``,
``hours:minutes:seconds``, ``days-hours``, ``days-hours:minutes`` and
``days-hours:minutes:seconds``; sinfo and scontrol say ``UNLIMITED`` or ``infinite`` for no
limit. A ``D-H`` is days and *hours* (``1-12`` is a day and a half), not days and minutes.
"""

from __future__ import annotations

import math
import re

# Each of sbatch's six forms; the fields' ranges are left to the checks of who asks.
FORMAT = re.compile(r"^(?:(?P<days>\d+)-(?P<dh>\d+)(?::(?P<dm>\d+)(?::(?P<ds>\d+))?)?"
                    r"|(?P<a>\d+)(?::(?P<b>\d+)(?::(?P<c>\d+))?)?)$")
UNLIMITED = frozenset({"unlimited", "infinite"})
EXAMPLES = "'30', '30:00', '2:00:00', '1-12', '1-12:30' or '1-12:30:00'"


def seconds(text: str) -> int | None:
    """A Slurm time limit in seconds; None for no limit (``UNLIMITED``, ``infinite``). A text
    that is none of Slurm's forms raises ValueError naming them."""
    value = text.strip()
    if value.lower() in UNLIMITED:
        return None
    m = FORMAT.match(value)
    if m is None:
        raise ValueError(f"'{text}' is not a Slurm time: expected {EXAMPLES}")
    if m["days"] is not None:
        return (int(m["days"]) * 86400 + int(m["dh"]) * 3600 + int(m["dm"] or 0) * 60
                + int(m["ds"] or 0))
    parts = [int(p) for p in (m["a"], m["b"], m["c"]) if p is not None]
    if len(parts) == 1:  # minutes
        return parts[0] * 60
    if len(parts) == 2:  # minutes:seconds
        return parts[0] * 60 + parts[1]
    return parts[0] * 3600 + parts[1] * 60 + parts[2]  # hours:minutes:seconds


def check_fields(text: str) -> None:
    """Raise ValueError where a time's minutes or seconds are not 00-59 (sbatch itself carries
    them over; a site config is held to the clock's ranges). The hours of ``D-H`` and the
    first field of every form are free."""
    m = FORMAT.match(text.strip())
    if m is None:
        raise ValueError(f"'{text}' is not a Slurm time: expected {EXAMPLES}")
    later = (m["dm"], m["ds"]) if m["days"] is not None else (m["b"], m["c"])
    if any(f is not None and int(f) > 59 for f in later):
        raise ValueError("minutes and seconds must be 00-59, e.g. '01:30:00'")


def minutes(text: str) -> int | None:
    """A Slurm time limit in whole minutes, rounded up (Slurm's own unit); None: no limit."""
    secs = seconds(text)
    return None if secs is None else math.ceil(secs / 60)
