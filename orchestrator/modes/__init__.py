"""Distributed modes, one module each: a mode = one module here + one template + one workload.

Each module defines ``MODE``; the registry is discovered from this package so nothing else
needs editing when a mode is added.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

from ..errors import UserError


@dataclass(frozen=True)
class Option:
    """A mode-specific sweep option (e.g. DDP backend, MPI overlap strategy).

    With ``choices`` the value must be one of them; without, it is a whole number of at least
    ``minimum`` (e.g. a bucket size).
    """

    name: str
    choices: tuple[str, ...]
    help: str
    default: str | None = None  # None: decided per partition by Mode.resolve_options
    minimum: int = 1

    def check(self, mode: str, value: str) -> str:
        if self.choices:
            if value not in self.choices:
                raise UserError(f"mode '{mode}': {self.name}={value} is not valid; "
                                f"choices: {', '.join(self.choices)}")
        elif not value.isdigit() or int(value) < self.minimum:
            raise UserError(f"mode '{mode}': {self.name}={value} must be a whole number "
                            f">= {self.minimum}")
        return value


@dataclass(frozen=True)
class Task:
    """One process of a job: its role (worker, ps, chief, scheduler, server), its index within
    the role, and the node (0-based) it must run on. Task k is SLURM_PROCID k."""

    role: str
    index: int
    node: int


def workers_only(nodes: int, tasks_per_node: int, options: dict[str, str]) -> list[Task]:
    """The all-reduce layout: ``tasks_per_node`` workers on every node, node-major."""
    return [Task("worker", n * tasks_per_node + t, n)
            for n in range(nodes) for t in range(tasks_per_node)]


@dataclass(frozen=True)
class Mode:
    """What a framework's distributed mode needs from orch to be rendered and run."""

    name: str
    framework: str  # key into a site's environments
    description: str
    template: str  # per-task launch script, under templates/modes/
    workload: str  # python module each rank runs (python -m ...)
    launchers: tuple[str, ...]  # supported launchers; local is the local site's srun stand-in
    synchronous: bool = True  # all ranks must end with equal parameters
    # The ranks are MPI processes (mpi4py, Horovod): srun must wire them up through PMIx
    # (--mpi=pmix; Debian's Open MPI fails under pmi2). mpirun needs nothing more.
    mpi: bool = False
    options: tuple[Option, ...] = field(default_factory=tuple)
    # The on-disk format the workload reads with --data (orchestrator/data.py); None: none.
    data_format: str | None = None
    # Task table from (nodes, tasks_per_node, options). ``training_roles``: the workers that
    # speedup and efficiency count; ``iteration_roles``: the tasks that log iterations (the
    # workers, or a coordinator such as TF's chief that times the steps it schedules).
    placement: Callable[[int, int, dict[str, str]], list[Task]] = workers_only
    training_roles: tuple[str, ...] = ("worker",)
    iteration_roles: tuple[str, ...] | None = None
    # When synchrony depends on a run's options (MXNet: dist_sync vs dist_async): options ->
    # whether the training ranks must end with equal parameters. None: ``synchronous``.
    synchronous_if: Callable[[dict[str, str]], bool] | None = None

    @property
    def logging_roles(self) -> tuple[str, ...]:
        return self.iteration_roles or self.training_roles

    def is_synchronous(self, options: dict[str, str]) -> bool:
        """Must the training ranks of a run with these options end with equal parameters?"""
        return self.synchronous if self.synchronous_if is None else self.synchronous_if(options)

    def tasks(self, nodes: int, tasks_per_node: int, options: dict[str, str]) -> list[Task]:
        return self.placement(nodes, tasks_per_node, options)

    def option(self, name: str) -> Option:
        for opt in self.options:
            if opt.name == name:
                return opt
        valid = ", ".join(o.name for o in self.options) or "(none)"
        raise UserError(f"mode '{self.name}' has no option '{name}'; valid: {valid}")

    def resolve_options(self, given: dict[str, str], gpus_per_node: int) -> dict[str, str]:
        """Fill defaults and check choices. A default of None is decided by the partition."""
        out: dict[str, str] = {}
        for name, value in given.items():
            out[name] = self.option(name).check(self.name, value)
        for opt in self.options:
            if opt.name not in out:
                out[opt.name] = opt.default or self.partition_default(opt, gpus_per_node)
        return out

    def partition_default(self, opt: Option, gpus_per_node: int) -> str:
        """GPU partitions take the first choice (e.g. nccl), CPU partitions the last (gloo)."""
        return opt.choices[0] if gpus_per_node else opt.choices[-1]


@cache
def registry() -> dict[str, Mode]:
    modes: dict[str, Mode] = {}
    for info in pkgutil.iter_modules(__path__):
        module = importlib.import_module(f"{__name__}.{info.name}")
        mode = getattr(module, "MODE", None)
        if isinstance(mode, Mode):
            modes[mode.name] = mode
    return dict(sorted(modes.items()))


def get(name: str) -> Mode:
    modes = registry()
    if name not in modes:
        raise UserError(f"unknown mode '{name}'; valid: {', '.join(modes)}")
    return modes[name]
