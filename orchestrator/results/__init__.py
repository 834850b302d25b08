"""The result set of a sweep directory: merged from the run directories, written as Parquet.

    results/runs.parquet        one row per run: parameters, state, throughput, phases, scaling
    results/iterations.parquet  one row per (run, rank, iteration), warm-up rows flagged: a
                                directory of one file per run, read as one table

Failed and cancelled runs are rows too, with their state and reason. Merging only reads the
run directories, so it can be redone at any time (``orch gather``) and never loses data;
:func:`recheck` (the run records against their logs as they are now) is the step before it.

The package, in the order data flows through it: ``gather`` reads the rank logs, ``tables``
(with ``iterlines``) builds the iteration table, ``analyze`` the per-run metrics and scaling,
``dimensions``, ``devices`` and ``convergence`` further run columns, ``runs`` a run's own
columns, ``cache`` the incremental cache, ``resultset`` the merge; ``columns`` declares every
column's type, unit and meaning.
"""

from .cache import CACHE_DIR, RACY_S
from .resultset import merge
from .runs import RUN_FIELDS, attempts_summary, recheck, records, reverify

__all__ = ["CACHE_DIR", "RACY_S", "RUN_FIELDS", "attempts_summary", "merge", "recheck",
           "records", "reverify"]
