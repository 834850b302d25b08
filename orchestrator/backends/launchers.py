"""The launchers: srun, mpirun, the local site's srun stand-in, and torchrun
(templates/launchers/)."""

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
# PyTorch's own multi-node launch (its docs, "torchrun (Elastic Launch)"): one torchrun agent
# per node (a task of srun, a process per virtual node on the local site) starts the node's
# ranks and wires them through its c10d rendezvous. Run as "$ORCH_PYTHON -m
# torch.distributed.run" (what the torchrun script runs), so it is the environment's own torch.
TORCHRUN = register_launcher(Launcher(
    "torchrun", "PyTorch's torchrun: one agent per node starts the node's ranks (c10d "
    "rendezvous); torch modes only",
    schedulers=("slurm", "local"), per_node=True))
