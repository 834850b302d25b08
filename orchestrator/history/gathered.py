"""What a gathered sweep gets from the history: ``orch gather`` records a finished sweep in the
history its site config names, and ``orch gather`` or ``orch rerun`` says whether a rerun's
result falls inside the spread of the run it repeats (the test of ``orch compare``).

The history a site names (``history:`` in its config) is read from the runs' provenance,
where the sweep recorded its site config: gathering needs no site file, and a sweep gathered
later or elsewhere is recorded where the site said when it ran. The path must be absolute,
``~/...`` or ``$VAR/...``: ``~`` and variables are expanded when gathering (the gathering
user's home, as the default history is), and a relative path is refused when the site config
is loaded, since it would depend on the directory orch gather runs in.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from ..errors import UserError
from ..runs import provenance, rundir
from . import compare, store


def site_history(sweep: Path) -> Path | None:
    """The history the sweep's site config names (expanded), or None where it names none."""
    for rdir in rundir.run_dirs(sweep):
        prov = provenance.read(rdir) or {}
        site = prov.get("site") or {}
        text = (site.get("config") or {}).get("history")
        if not text:
            continue
        path = Path(os.path.expandvars(os.path.expanduser(text)))
        if not path.is_absolute():
            raise UserError(f"site config {site.get('name')}: history: '{text}' is '{path}' "
                            "after expanding ~ and variables, not an absolute path: set the "
                            "variable or give an absolute path")
        return path
    return None


def unfinished(runs: pd.DataFrame) -> int:
    """How many of the sweep's runs have not reached a final state."""
    return int((~runs["state"].isin(rundir.TERMINAL)).sum())


def record(root: Path, table_of: Callable[[], pd.DataFrame], sweep: Path,
           runs: pd.DataFrame) -> str:
    """Record a gathered sweep in the history, once: the line that says what happened.

    A sweep with runs still pending or running is not recorded yet (recording it then, and
    again when it is finished, would count its first runs twice), and its sample table
    (``table_of``) is not built; a sweep the history already holds is not recorded again, and
    no entry is ever rewritten."""
    waiting = unfinished(runs)
    if waiting:
        return (f"not recorded in history {root} yet: {waiting} run(s) not finished "
                "(the gather that finds them finished records the sweep)")
    table = table_of()
    if table.empty:
        return f"not recorded in history {root}: no completed run with measured iterations"
    entry, added = store.record(root, table, sweep.resolve())
    if added:
        return f"recorded in history {root} as {entry.id}"
    return f"already recorded in history {root} as {entry.id} (not recorded again)"


def rerun_of(sweep: Path) -> dict[str, Path]:
    """Each run of the sweep that reruns another: its id -> the original run's directory."""
    out = {}
    for rdir in rundir.run_dirs(sweep):
        src = ((provenance.read(rdir) or {}).get("rerun_of") or {}).get("run_dir")
        if src:
            out[rdir.name] = Path(src)
    return out


def rerun_line(run_id: str, original: pd.DataFrame, rerun: pd.DataFrame,
               spread: pd.DataFrame | None = None) -> str:
    """Whether a rerun's result falls inside the original run's spread: the verdict of
    ``orch compare`` (original as A, rerun as B) with its ratio and interval, the run-to-run
    spread taken from ``spread`` (the site's history) where it holds 3 runs or more of the
    configuration; without it, one run each gives no verdict, and the line says so."""
    found = compare.compare(original, rerun, spread=spread)
    c = found[0] if found else None
    primary = c.primary if c is not None else None
    if primary is None:  # no throughput nor iteration time measured on one side
        return f"rerun of {run_id}: not comparable (no measured iterations on one side)"
    interval = (f"{primary.metric.label} rerun/original {primary.ratio:.2f} "
                f"[{primary.low:.2f}–{primary.high:.2f}] ({primary.n_a} vs {primary.n_b} "
                f"{primary.unit}s)")
    if c.verdict == "no measured change":
        return f"rerun of {run_id}: inside the original's spread: {interval}"
    if c.verdict == compare.UNMEASURED:
        return (f"rerun of {run_id}: {compare.headline(c)}: {interval}; one run each: "
                f"{compare.NEEDS}")
    why = ": " + ", ".join(c.attribution) if c.attribution else ""
    hint = f" → {c.hint}" if c.hint else ""
    return (f"rerun of {run_id}: outside the original's spread, {compare.headline(c)}: "
            f"{interval}{why}{hint}")
