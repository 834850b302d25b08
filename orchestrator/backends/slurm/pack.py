"""Slurm's part of packed sweeps (``orch sweep --pack``, ``--pack-shared``, ``--array``): the
pack's and the array's job scripts (``pack.sbatch.j2`` and ``array.sbatch.j2`` beside this),
what a pack's allocation or an array's task asks for, and arrays cut to Slurm's MaxArraySize.

Nothing here reads or writes a run directory: orchestrator/execute/packs.py composes a sweep's
prepared runs into packs and arrays (and says how each works), writes their scripts and the
runs' ledger entries, and hands this module plain numbers and the template's context.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, TypeVar

import jinja2

from ...errors import UserError
from .. import templating
from ..base import Job
from .scheduler import max_array_size

# Grace after a run's own time limit before its job.sbatch is killed (timeout --kill-after).
KILL_GRACE_S = 10
# Added to a pack's computed time: starting each run, the scheduler's own slack.
PACK_MARGIN_MIN = 2

T = TypeVar("T")


def split(members: list[T], max_array: int | None) -> list[tuple[T, ...]]:
    """Runs of one shape as arrays Slurm accepts: at most ``max_array`` tasks each (None: no
    limit known); 0 means the site disabled job arrays."""
    if max_array == 0:
        raise UserError("--array: this Slurm's MaxArraySize is 0 (job arrays are disabled "
                        "here); use --pack, or neither")
    size = max_array or len(members) or 1
    return [tuple(members[i:i + size]) for i in range(0, len(members), size)]


def max_array(kind: str) -> int | None:
    """MaxArraySize where the runs go out as arrays (scontrol show config, read once)."""
    return max_array_size() if kind == "array" else None


def makespan_min(sizes: list[tuple[int, int]], nodes: int) -> int:
    """Minutes the pack script needs at most for runs of (nodes, time limit in minutes),
    started in order, each as soon as enough nodes are free (what pack.sbatch does). Also the
    time asked for a --pack-shared pack, where a run holds no more of a node than here, so
    starts no later in the usual case (not proven for every order; PACK_MARGIN_MIN and the
    runs ending before their limits are the slack)."""
    free_at = [0] * nodes  # when each node is free again
    start = end = 0
    for need, minutes in sizes:
        free_at.sort()
        start = max(start, free_at[need - 1])  # in order: never before the previous run
        for i in range(need):
            free_at[i] = start + minutes
        end = max(end, start + minutes)
    return end


def allocation(kind: str, sizes: list[tuple[int, int, int]], pack_dir: Path,
               name: str) -> Job:
    """What a pack's allocation (``kind`` "pack") or each task of an array asks for, from its
    runs' (nodes, the busiest node's tasks, time limit in minutes), in the order they start:
    the largest run's nodes, the busiest node's tasks, the time the runs need where they
    cannot run side by side."""
    nodes = max(n for n, _, _ in sizes)
    per_node = max(t for _, t, _ in sizes)
    if kind == "pack":
        limit = makespan_min([(n, minutes + 1) for n, _, minutes in sizes], nodes)
        limit += PACK_MARGIN_MIN
    else:
        limit = max(minutes for _, _, minutes in sizes) + 1
    array = kind == "array"
    return Job(name=name, nodes=nodes, tasks=per_node * nodes, tasks_per_node=per_node,
               time_min=limit, no_requeue=True, array=len(sizes) if array else None,
               output=str(pack_dir / ("slurm-%A_%a.out" if array else "slurm-%j.out")))


def step_cpus(per_node: int, cpus_per_node: int, share: bool) -> str:
    """The CPUs a run's step (``per_node``: its busiest node's tasks) holds on each of its
    nodes, for the pack script's bookkeeping: "all" (the node to itself: --pack, and a run
    whose ranks outnumber a node's CPUs), or, with --pack-shared, one per rank on the node (its
    srun asks for no more: --exact, one CPU per task)."""
    return str(per_node) if share and per_node <= cpus_per_node else "all"


def script(kind: str, ctx: dict[str, Any]) -> str:
    """The pack's (``kind`` "pack") or array's job script from its template's context."""
    return _templates().get_template(f"{kind}.sbatch.j2").render(**ctx,
                                                                  kill_grace_s=KILL_GRACE_S)


@functools.cache
def _templates() -> jinja2.Environment:
    """orch's template environment (its quoting filters and strict settings), reading the pack
    and array templates that live beside this module, with the rest of Slurm's code."""
    here = jinja2.FileSystemLoader(str(Path(__file__).parent))
    return templating.environment().overlay(loader=here)
