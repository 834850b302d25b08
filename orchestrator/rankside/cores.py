"""Physical cores, not logical CPUs: how many ranks a machine can run at full speed.

Why: with hyper-threads (SMT) ``os.cpu_count()`` counts each core two (or more) times, but two
ranks on the two threads of one core share its execution units and nearly take turns: a
16-core machine with 32 logical CPUs runs 16 ranks at full speed, not 32. The kernel says which
logical CPUs are threads of one core in sysfs (``cpuN/topology/core_cpus_list``, older kernels
``thread_siblings_list``): each distinct sibling list among the CPUs counted is one core. Where
sysfs does not say (no topology there, not Linux), the logical count stands, and the basis
says so.

Rank-side (the allreduce-bench rank records its machine's cores) and read by the control plane
(the pre-flight, the validity checks): standard library only, and the kernel's CPU lists read
by the one parser of them (binding.parse_cpulist, which CNTK's Python 3.6 also runs).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from . import binding

SYSFS_CPU = Path("/sys/devices/system/cpu")
# Newer kernels name the siblings of a core core_cpus_list; thread_siblings_list is the older
# (still present) name of the same list.
SIBLING_FILES = ("core_cpus_list", "thread_siblings_list")
PHYSICAL = "physical cores (sysfs CPU topology)"
LOGICAL = "logical CPUs (no CPU topology in sysfs)"


class Cores(NamedTuple):
    """Physical cores and logical CPUs of a set of CPUs, and what ``physical`` is taken from
    (:data:`PHYSICAL`, or :data:`LOGICAL` where it is the logical count)."""

    physical: int
    logical: int
    basis: str

    def describe(self) -> str:
        """``N cores``, or ``N physical cores (K logical)`` where they differ."""
        if self.physical == self.logical:
            return f"{self.physical} cores"
        return f"{self.physical} physical cores ({self.logical} logical)"


def machine_cpus(root: Path = SYSFS_CPU) -> list[int]:
    """Every logical CPU sysfs lists under ``root`` (``cpuN`` directories), sorted."""
    try:
        names = [p.name for p in root.iterdir()]
    except OSError:
        return []
    return sorted(int(n[3:]) for n in names if re.fullmatch(r"cpu\d+", n))


def _siblings(cpu: int, root: Path) -> frozenset[int] | None:
    for name in SIBLING_FILES:
        try:
            siblings = binding.parse_cpulist(
                (root / f"cpu{cpu}" / "topology" / name).read_text())
        except (OSError, ValueError):
            continue
        if siblings:  # an empty list says no more than a missing one
            return frozenset(siblings)
    return None


def count(cpus: Iterable[int] | None = None, root: Path = SYSFS_CPU) -> Cores:
    """The physical cores ``cpus`` (default: every CPU of the machine) are threads of: the
    distinct sibling lists among them. Where any CPU's topology is missing, the logical
    count for both, said by the basis (``os.cpu_count()`` where sysfs lists no CPU)."""
    chosen = sorted(set(cpus)) if cpus is not None else machine_cpus(root)
    if not chosen:
        logical = os.cpu_count() or 1
        return Cores(logical, logical, LOGICAL)
    cores = set()
    for cpu in chosen:
        siblings = _siblings(cpu, root)
        if siblings is None:
            return Cores(len(chosen), len(chosen), LOGICAL)
        cores.add(siblings)
    return Cores(len(cores), len(chosen), PHYSICAL)


def this_process() -> Cores:
    """The physical cores of the CPUs this process may run on (its affinity)."""
    try:
        return count(os.sched_getaffinity(0))
    except AttributeError:  # not Linux: no affinity, no sysfs
        return count(None)
