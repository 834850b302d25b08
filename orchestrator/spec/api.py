"""A run: one point of a sweep, frozen, with a stable id — what every later stage reads.

Like torchx's ``specs/api.py``, the type the whole pipeline shares sits near the ground floor:
the plan makes Runs (``sweep``); rendering, submission and the run directory read them. The
result set's run columns (:func:`column_names`) are the Run fields marked :data:`COLUMN`
(:data:`ITER_COLUMN`: of the iterations table too), in the order they are declared here; the
keys of a configuration (:func:`group_names`: runs that differ only in size compare, speedup is
relative to their smallest) are those marked :data:`GROUP`; a field marked :data:`NEW` is left
out of the run id at its default, so the runs that do not use it keep the ids they had."""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from .. import modes, protocol


@dataclass(frozen=True)
class Column:
    """Marks a Run field as a column of the runs table (``iterations``: of the iterations
    table too, one value per row, so only what a row needs)."""

    iterations: bool = False


COLUMN = Column()
ITER_COLUMN = Column(iterations=True)


@dataclass(frozen=True)
class Group:
    """Marks a Run field as a key of a run's configuration (results.analyze.GROUP_KEYS):
    runs equal in every such field but of other sizes (nodes, ranks per node) scale from one
    baseline."""


GROUP = Group()


@dataclass(frozen=True)
class New:
    """Marks a Run field added after runs were recorded: at its default it is left out of the
    run id (:func:`run_id`), which stays the one those runs had."""


NEW = New()


SCHEMA_VERSION = 1


class Run(BaseModel):
    """One point of a sweep: everything needed to render, submit and interpret it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: int = SCHEMA_VERSION
    site: Annotated[str, ITER_COLUMN, GROUP]
    scheduler: str
    partition: Annotated[str, ITER_COLUMN, GROUP]
    interconnect: Annotated[str, ITER_COLUMN]
    mode: Annotated[str, ITER_COLUMN, GROUP]
    framework: Annotated[str, ITER_COLUMN]
    launcher: Annotated[str, ITER_COLUMN, GROUP]
    model: Annotated[str, ITER_COLUMN, GROUP]
    dataset: Annotated[str, ITER_COLUMN, GROUP]
    nodes: Annotated[int, ITER_COLUMN]
    tasks_per_node: Annotated[int, ITER_COLUMN]
    # Samples per rank (weak scaling: the global batch grows with the ranks).
    batch_size: Annotated[int, ITER_COLUMN, GROUP]
    iters: Annotated[int, COLUMN]  # measured iterations
    # Iterations run first and excluded from the statistics.
    warmup: Annotated[int, ITER_COLUMN]
    repeat: Annotated[int, ITER_COLUMN]
    time_limit_min: int
    options: Annotated[dict[str, str], GROUP] = Field(default_factory=dict)
    inject_failure: str | None = None  # "RANK@ITER": a test aid that makes one rank fail
    # The on-disk data set (orch data make); None: synthetic batches in memory.
    data: Annotated[str | None, COLUMN, GROUP] = None
    # With data: read ahead in a loader process, or not (t_io exposed).
    prefetch: Annotated[bool, COLUMN, GROUP] = True
    # Time to accuracy: whole epochs of a labelled data set instead of ``iters``.
    epochs: Annotated[int | None, COLUMN, GROUP, NEW] = None
    target_accuracy: Annotated[float | None, COLUMN, GROUP, NEW] = None
    # The labelled data set's class count (its manifest's): the models' output width; None:
    # the dataset's (random images, or no --data).
    classes: Annotated[int | None, NEW] = None
    # A user's own model (``--model FILE.py:FUNCTION``): its file's sha256 (the id changes with
    # the file), parameter count (gradient bytes) and training FLOPs per sample (MFU), as the
    # check before submission found them; None for zoo models, or where it could not run.
    model_sha256: Annotated[str | None, COLUMN, NEW] = None
    model_params: Annotated[int | None, COLUMN, NEW] = None
    model_flops: Annotated[int | None, COLUMN, NEW] = None
    # torch-ddp: DDP's gradient bucket size, MiB (protocol.RANK_ARGS declares it).
    bucket_cap_mb: Annotated[int, COLUMN, GROUP, NEW] = protocol.RANK_DEFAULTS["bucket_cap_mb"]
    # A user's own training script (its trainer file, validated, as the rank's JSON).
    script: Annotated[str | None, NEW] = None

    # Derived values are computed once per Run (it is frozen): planning a 1,200-run sweep asked
    # for each run's id and task table several times per run. functools.cached_property keeps
    # them in the instance's __dict__, which pydantic leaves out of equality and dumps;
    # model_copy drops them, so a copy with other fields never shows a stale one.
    _CACHED: ClassVar[tuple[str, ...]] = ("task_table", "ranks", "run_id")

    @functools.cached_property
    def task_table(self) -> tuple[modes.Task, ...]:
        """:meth:`tasks` as a tuple, shared with equal runs: read it, never change a Task."""
        return _placement(self.mode, self.nodes, self.tasks_per_node,
                          tuple(self.options.items()))

    def tasks(self) -> list[modes.Task]:
        """Every process of the job (task k = SLURM_PROCID k), with its role and node."""
        return list(self.task_table)

    @functools.cached_property
    def ranks(self) -> int:
        """Processes that train (workers): what speedup and efficiency are relative to."""
        roles = modes.get(self.mode).training_roles
        return sum(t.role in roles for t in self.task_table)

    @functools.cached_property
    def run_id(self) -> str:
        return run_id(self)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Run:
        copied = super().model_copy(update=update, deep=deep)
        for name in self._CACHED:
            copied.__dict__.pop(name, None)
        return copied


@functools.lru_cache(maxsize=4096)
def _placement(mode: str, nodes: int, tasks_per_node: int,
               options: tuple[tuple[str, str], ...]) -> tuple[modes.Task, ...]:
    """A mode's task table, shared by the runs that differ only in what it does not depend on
    (model, batch, repeat, partition). Tasks are never changed once made."""
    return tuple(modes.get(mode).tasks(nodes, tasks_per_node, dict(options)))


def run_id(run: Run) -> str:
    """``<mode>-<model>-<partition>-n<nodes>-r<repeat>-<hash>``: readable and unique."""
    params = run.model_dump(mode="json")
    if params["data"] is None:  # keeps the ids of in-memory runs what they were before --data
        del params["data"], params["prefetch"]
    for name, field in Run.model_fields.items():  # NEW: the same ids for the runs without it
        if any(isinstance(m, New) for m in field.metadata) and (
                getattr(run, name) == field.get_default(call_default_factory=True)):
            params.pop(name, None)
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:8]
    return (f"{run.mode}-{model_label(run.model)}-{run.partition}-n{run.nodes}-r{run.repeat}-"
            f"{digest}")


def model_label(model: str) -> str:
    """A model's name as run ids and tables show it: a zoo name as it is; a user's model
    ``/path/mymodel.py:build`` as ``mymodel.build`` (no path, nothing a file name or a shell
    would take apart)."""
    if ":" not in model:
        return model
    target, _, function = model.rpartition(":")
    stem = target.rsplit("/", 1)[-1].removesuffix(".py")
    return re.sub(r"[^A-Za-z0-9_.]", "_", f"{stem}.{function}")



def column_names(iterations: bool = False) -> tuple[str, ...]:
    """The result set's run columns: ``run_id`` and the marked Run fields, in their order."""
    return ("run_id", *(name for name, field in Run.model_fields.items()
                        if any(isinstance(m, Column) and (m.iterations or not iterations)
                               for m in field.metadata)))


def group_names() -> tuple[str, ...]:
    """The Run fields marked :data:`GROUP`, in their order: what makes two runs the same
    configuration apart from their size."""
    return tuple(name for name, field in Run.model_fields.items()
                 if any(isinstance(m, Group) for m in field.metadata))
