"""The scheduler and launcher interfaces, and their registries.

A scheduler (slurm, local) submits a run's job and follows it; a launcher (srun, mpirun,
local, torchrun) starts a job's tasks. Each is one registered implementation: code elsewhere
asks the registry for it by name and uses its methods and declared capabilities, and never
compares a scheduler or launcher name itself (ReFrame registers its schedulers and launchers
the same way; orch adds mpirun under Slurm, the local site's srun stand-in, and torchrun).

Site configs are validated against the registered names, so this package sits just above the
ground floor: it imports no orch module above ``errors`` and ``jobscript``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from ..errors import UserError

_SCHEDULERS: dict[str, Scheduler] = {}
_LAUNCHERS: dict[str, Launcher] = {}


class Job(BaseModel):
    """What one job asks its scheduler for: a run's, a pack's (the allocation its runs share),
    or an array's (each array task an allocation like it). Each scheduler turns it into its
    own request (Slurm: slurm.options, the #SBATCH lines of every job script)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    nodes: int
    tasks: int  # all of the job's (--ntasks, where a node's CPUs are overcommitted)
    tasks_per_node: int  # the busiest node's
    time_min: int
    output: str
    no_requeue: bool = False  # in the script itself (a pack's, an array's)
    array: int | None = None  # an array of this many tasks
    exclude: tuple[str, ...] = ()  # nodes to keep off (a retry after a node failure)


class Scheduler:
    """Where jobs run and how orch submits, follows and cancels them.

    Capabilities the rest of orch reads (instead of comparing names):

    * ``launchers``: the launchers available on it (from the launchers' registrations);
    * ``sequential``: runs one job at a time, followed by the orch process that submitted it
      (the local site: concurrent runs on one machine would distort each other);
    * ``allocation``: a job's nodes are hosts of a scheduler allocation (their names come
      from it); without, every node of a job is this machine;
    * ``cancel_is_final``: a cancelled job is finished at once (no scheduler to confirm it);
    * ``runs_here``: ranks run on this machine, so their Python must exist here;
    * ``hand_verb`` / ``hand_command`` / ``hand_note``: how a user runs ``job.sbatch`` by hand
      (the comment at the top of every job script);
    * ``excludes_nodes``: a job can be kept off named nodes (a retry after a node failure);
      without, exclusion is a no-op, and orch says so.
    * ``packs``: runs a sweep's runs as steps of one allocation or as a job array (``orch
      sweep --pack/--array``, :meth:`submit_script`).
    * ``outlives_orch``: a job goes on when the orch process that submitted it is stopped
      (a signal, Ctrl-C), and another orch process can follow it (a cluster's jobs); without,
      orch cancels it as it stops (the local site: see LocalScheduler).
    """

    name: ClassVar[str] = ""
    sequential: ClassVar[bool] = False
    allocation: ClassVar[bool] = True
    cancel_is_final: ClassVar[bool] = False
    runs_here: ClassVar[bool] = False
    hand_verb: ClassVar[str] = "Submit by hand"
    hand_command: ClassVar[str] = "sbatch"
    hand_note: ClassVar[str] = ""
    excludes_nodes: ClassVar[bool] = False
    packs: ClassVar[bool] = False
    outlives_orch: ClassVar[bool] = True

    @property
    def launchers(self) -> tuple[str, ...]:
        return tuple(n for n, lch in _LAUNCHERS.items() if self.name in lch.schedulers)

    def check(self, partition: Any) -> None:
        """Fail (SubmitError) before anything is submitted if the partition cannot be used."""

    def nodes_are_this_machine(self, partition: str) -> bool:
        """Do the partition's nodes see this machine's filesystem as their own? (Containers
        check image paths here only when they do.)"""
        return not self.allocation

    def job_options(self, job: Job, partition: Any) -> dict[str, str | bool]:
        """What a job script asks for ``job`` on ``partition``: its request's options by name
        (True: a flag), in the order the script's header shows them."""
        raise NotImplementedError

    def request_lines(self, job: Job, partition: Any) -> list[str]:
        """The job script header's request (:meth:`job_options`), one shell-quoted option a
        line."""
        raise NotImplementedError

    def step_options(self, job: Job, partition: Any, packed: bool = False) -> str:
        """What every line that starts the job's tasks as a step says beside their counts
        (CPUs, binding), as shell words; ``packed``: a step of a pack's allocation."""
        raise NotImplementedError

    def agent_binding(self, partition: Any) -> str:
        """The binding of a per-node agent's step (torchrun), as shell words."""
        raise NotImplementedError

    def submit(self, run: Any, rdir: Path, partition: Any, job: Job) -> str:
        """Submit ``rdir/job.sbatch``; return the job id. ``job``: what it asks for (its size,
        time, the nodes to keep off)."""
        raise NotImplementedError

    def max_time_min(self, partition: Any) -> int | None:
        """The longest a job may run on the partition, in minutes (None: no limit known)."""
        return None

    def submit_script(self, script: Path, name: str) -> str:
        """Submit a pack's or array's own job script (``packs`` schedulers); return its job
        id. ``name``: the job name the script gives itself."""
        raise NotImplementedError

    def poll(self, records: list, rdirs: list[Path]) -> dict[str, tuple[str, str]]:
        """run_id -> (orch state, reason) of each record's job."""
        raise NotImplementedError

    def cancel(self, record: Any, rdir: Path) -> None:
        raise NotImplementedError

    def nodes(self, records: list) -> dict[str, list[str]]:
        """run_id -> the host names of each record's job, where the scheduler names them."""
        return {}

    def failed_nodes(self, record: Any, rdir: Path) -> tuple[list[str], str]:
        """The nodes of a record's job that failed (NODE_FAIL, BOOT_FAIL), and the evidence."""
        return [], ""


class Launcher:
    """How a job script starts its tasks: a template under ``templates/launchers/``.

    * ``schedulers``: where it is available;
    * ``mpi_world``: the tasks learn their place from Open MPI's ``OMPI_COMM_WORLD_*``
      variables (mpirun), not from ``SLURM_*`` task variables (srun and the local launcher);
    * ``command``: the program the job script starts the tasks with (None: the job script's
      own code), looked for before submitting where the scheduler runs here.
    * ``per_node``: one task per node starts that node's ranks itself (torchrun): the ranks
      learn their place from its ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE`` and ``GROUP_RANK``.
    """

    def __init__(self, name: str, description: str, schedulers: tuple[str, ...],
                 mpi_world: bool = False, command: str | None = None,
                 per_node: bool = False) -> None:
        self.name = name
        self.description = description
        self.schedulers = schedulers
        self.mpi_world = mpi_world
        self.command = command
        self.per_node = per_node

    @property
    def template(self) -> str:
        return f"launchers/{self.name}.j2"

    def __repr__(self) -> str:
        return f"Launcher({self.name!r})"


def register_scheduler(cls: type[Scheduler]) -> type[Scheduler]:
    """Class decorator: one instance of ``cls`` becomes the scheduler named ``cls.name``."""
    if not cls.name or cls.name in _SCHEDULERS:
        raise RuntimeError(f"scheduler {cls.__name__}: empty or duplicate name {cls.name!r}")
    _SCHEDULERS[cls.name] = cls()
    return cls


def register_launcher(launcher: Launcher) -> Launcher:
    if launcher.name in _LAUNCHERS:
        raise RuntimeError(f"launcher {launcher.name!r} registered twice")
    _LAUNCHERS[launcher.name] = launcher
    return launcher


def _get(table: dict, kind: str, name: str, hint: Callable[[], str] | None = None):
    try:
        return table[name]
    except KeyError:
        raise UserError(f"unknown {kind} '{name}'; valid: {', '.join(sorted(table))}") from None


def scheduler(name: str) -> Scheduler:
    return _get(_SCHEDULERS, "scheduler", name)


def launcher(name: str) -> Launcher:
    return _get(_LAUNCHERS, "launcher", name)


def scheduler_names() -> tuple[str, ...]:
    return tuple(sorted(_SCHEDULERS))


def launcher_names() -> tuple[str, ...]:
    """In registration order (srun, mpirun, local): the order users read them in."""
    return tuple(_LAUNCHERS)
