"""Slurm: the scheduler (scheduler.py), the states of packed and array runs (packed.py), and,
loaded only by the sweeps that use them, packs and arrays (pack.py, its templates beside it).

Importing this package registers the Slurm scheduler; pack.py sits in the runs layer (it
renders run tables and writes ledgers) and is imported where a sweep packs, never from here.
"""

from .scheduler import (
    PAUSED,
    SLURM_STATES,
    SlurmScheduler,
    expand_hostlist,
    parse_jobs,
    slurm_state,
)

__all__ = ["PAUSED", "SLURM_STATES", "SlurmScheduler", "expand_hostlist", "parse_jobs",
           "slurm_state"]
