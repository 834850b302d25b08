"""How a sweep's runs go out: plain (a job per run), pack, pack-shared, array, and staged (any
of those one scale at a time, smallest first, with a step between the scales). Each is one
small registered type; :func:`choose` picks one from the sweep's choices, and
``orchestrator.execute.run`` carries it out.

Packs and arrays are Slurm's (execute/packs.py says how each works); they are loaded
only by the sweeps that use them. The step between a staged sweep's scales (stating the
larger runs' predictions) comes from above this layer (execute/staged.py), as a function.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from .. import backends
from ..errors import UserError
from ..render import run_job
from ..runs import rundir, stopping
from ..runs.rundir import JobRecord, Prepared
from ..site import Site
from ..spec.api import Run

Event = Callable[[Run, JobRecord], None]
# A run just submitted, to follow (the execution decides how: at once on a sequential site).
Started = Callable[[Prepared], None]
# Between a staged sweep's scales: (the scale just finished in ranks, the later runs' ids).
Between = Callable[[int, set[str]], None]

_REGISTRY: dict[str, type[Strategy]] = {}


def register(cls: type[Strategy]) -> type[Strategy]:
    """Class decorator: the strategy named ``cls.name`` (as orch sweep's flag spells it)."""
    if not cls.name or cls.name in _REGISTRY:
        raise RuntimeError(f"strategy {cls.__name__}: empty or duplicate name {cls.name!r}")
    _REGISTRY[cls.name] = cls
    return cls


@dataclass(frozen=True)
class Strategy:
    """One way to submit the runs of a sweep; the base is what every strategy shares."""

    name: ClassVar[str] = ""
    # The runs render as steps of a pack's allocation (execute.prepare(packed=...)).
    packed: ClassVar[bool] = False
    # Every scale goes out at once (a pack or an array): predictions need a staged sweep.
    all_at_once: ClassVar[bool] = False

    def refuse(self, site: Site) -> None:
        """Fail before anything is written where the site cannot do this."""

    def check(self, runs: list[Run], site: Site, out: Path) -> None:
        """Fail before anything is written where the runs cannot go out this way."""

    def dry_run(self, runs: list[Run], site: Site, out: Path) -> list[tuple[Path, str]]:
        """The scripts of its own it would submit beside the runs' (path, text)."""
        return []

    def submit(self, todo: list[Prepared], site: Site, on_event: Event,
               started: Started) -> None:
        """Submit the runs to submit; each goes to ``started`` once its job is known."""
        raise NotImplementedError

    def stages(self, prepared: list[Prepared]) -> list[tuple[list[Prepared], Callable[[], None]]]:
        """The runs in the groups that go out one after another, each with what follows it."""
        return [(prepared, lambda: None)]


@register
@dataclass(frozen=True)
class Plain(Strategy):
    """A job per run, each submitted to the site's scheduler on its own."""

    name: ClassVar[str] = "plain"

    def submit(self, todo: list[Prepared], site: Site, on_event: Event,
               started: Started) -> None:
        sched = backends.scheduler(site.scheduler)
        for p in todo:
            with stopping.deferred():  # a job is never left out of its ledger
                job_id = sched.submit(p.run, p.rdir, site.partition(p.run.partition),
                                      run_job(p.run, p.rdir.resolve()))
                record = p.record.model_copy(update={"job_id": job_id, "state": "PENDING",
                                                     "submitted_at": rundir.now()})
                rundir.write_record(p.rdir, record)
            on_event(p.run, record)
            started(Prepared(p.run, p.rdir, record, "wait"))


@register
@dataclass(frozen=True)
class Pack(Strategy):
    """A partition's runs as job steps of one allocation, a node to one run at a time."""

    name: ClassVar[str] = "pack"
    packed: ClassVar[bool] = True
    all_at_once: ClassVar[bool] = True

    def refuse(self, site: Site) -> None:
        _pack().refuse(site, self.name)

    def check(self, runs: list[Run], site: Site, out: Path) -> None:
        _pack().check(runs, site, self.name, out)

    def dry_run(self, runs: list[Run], site: Site, out: Path) -> list[tuple[Path, str]]:
        return _pack().dry_run(runs, site, out, self.name)

    def submit(self, todo: list[Prepared], site: Site, on_event: Event,
               started: Started) -> None:
        for p in _pack().submit(todo, site, self.name, on_event):
            started(p)


@register
@dataclass(frozen=True)
class PackShared(Pack):
    """Like pack, but runs share a node where its CPUs allow (one per rank)."""

    name: ClassVar[str] = "pack-shared"


@register
@dataclass(frozen=True)
class Array(Pack):
    """Runs of one shape (partition, nodes, tasks, time) as one job array."""

    name: ClassVar[str] = "array"
    packed: ClassVar[bool] = False


@dataclass(frozen=True)
class Staged(Strategy):
    """Another strategy, one scale (rank count) at a time, smallest first; ``between`` runs
    after each scale but the last, before the larger runs are submitted."""

    name: ClassVar[str] = "staged"
    inner: Strategy = Plain()
    between: Between = lambda ranks, later: None

    @property
    def packed(self) -> bool:  # type: ignore[override]
        return self.inner.packed

    def refuse(self, site: Site) -> None:
        self.inner.refuse(site)

    def check(self, runs: list[Run], site: Site, out: Path) -> None:
        self.inner.check(runs, site, out)

    def dry_run(self, runs: list[Run], site: Site, out: Path) -> list[tuple[Path, str]]:
        return self.inner.dry_run(runs, site, out)

    def submit(self, todo: list[Prepared], site: Site, on_event: Event,
               started: Started) -> None:
        self.inner.submit(todo, site, on_event, started)

    def stages(self, prepared: list[Prepared]) -> list[tuple[list[Prepared], Callable[[], None]]]:
        scales = sorted({_ranks(p.run) for p in prepared})
        out = []
        for ranks in scales:
            later = {p.run.run_id for p in prepared
                     if _ranks(p.run) > ranks and p.action != "skip"}
            step = (lambda r=ranks, ids=later: self.between(r, ids)) if later else _nothing
            out.append(([p for p in prepared if _ranks(p.run) == ranks], step))
        return out


register(Staged)


def _ranks(run: Run) -> int:
    return run.nodes * run.tasks_per_node


def _nothing() -> None:
    return None


def _pack():
    from . import packs

    return packs


def choose(pack: bool = False, pack_shared: bool = False, array: bool = False,
           between: Between | None = None) -> Strategy:
    """The strategy of a sweep from its choices: orch sweep's --pack, --pack-shared and
    --array (at most one), and, where predictions are stated, the step between its scales."""
    flags = [name for name, on in (("pack", pack), ("pack-shared", pack_shared),
                                   ("array", array)) if on]
    if len(flags) > 1:
        raise UserError("--pack, --pack-shared and --array exclude each other: --pack runs a "
                        "partition's runs in one allocation (a node to one run at a time), "
                        "--pack-shared lets them share nodes, --array runs same-shape runs as "
                        "one job array; choose one")
    base = _REGISTRY[flags[0] if flags else "plain"]()
    return Staged(base, between) if between is not None else base
