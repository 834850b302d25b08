"""The launchers: srun, mpirun, and the local site's srun stand-in (templates/launchers/)."""

from __future__ import annotations

from .base import Launcher, register_launcher

SRUN = register_launcher(Launcher(
    "srun", "Slurm's srun: one task per rank in a job step (--mpi=pmix for MPI modes)",
    schedulers=("slurm",), command="srun"))
MPIRUN = register_launcher(Launcher(
    "mpirun", "Open MPI's mpirun: starts every rank and wires them into one MPI world",
    schedulers=("slurm", "local"), mpi_world=True, command="mpirun"))
LOCAL = register_launcher(Launcher(
    "local", "the local site's srun stand-in: one local process per task, SLURM_* variables set",
    schedulers=("local",)))
