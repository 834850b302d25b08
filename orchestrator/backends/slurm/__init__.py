"""Slurm: the scheduler (scheduler.py), every sbatch and srun option (options.py), the states
of packed and array runs (packed.py), and, loaded only by the sweeps that use them, the pack
and array job scripts (pack.py, its templates beside it).

Importing this package registers the Slurm scheduler. Composing a sweep's runs into packs and
arrays (run tables, ledgers) is the runs floor's, orchestrator/execute/packs.py.
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
