"""Schedulers and launchers, each one registered implementation (see :mod:`.base`).

Importing this package registers the shipped ones: the ``slurm`` and ``local`` schedulers and
the ``srun``, ``mpirun``, ``local`` and ``torchrun`` launchers.
"""

from . import launchers as _launchers  # noqa: F401 - registers srun, mpirun, local
from . import local as _local  # noqa: F401 - registers the local scheduler
from . import slurm as _slurm  # noqa: F401 - registers the Slurm scheduler
from .base import (
    Job,
    Launcher,
    Scheduler,
    launcher,
    launcher_names,
    register_launcher,
    register_scheduler,
    scheduler,
    scheduler_names,
)

__all__ = ["Job", "Launcher", "Scheduler", "launcher", "launcher_names", "register_launcher",
           "register_scheduler", "scheduler", "scheduler_names"]
