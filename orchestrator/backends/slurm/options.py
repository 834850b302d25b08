"""Every sbatch option orch asks Slurm for, from one function: a run's job script, a pack's
or an array's script, and what submitit is given when it submits a run (a retry's
``--exclude`` included).

A job is described once (:class:`SlurmJob`: its name, size, time and output); the partition
adds what the site declares for it (GPUs, account, QOS, ...). The options come back in Slurm's
long names, in the order the ``#SBATCH`` lines show them (tests/golden/sbatch-options.json).
A run's job script is the same on every site: the local site runs it with bash, where its
``#SBATCH`` lines are comments.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

# "script": the #SBATCH lines of a job script; "submitit": the options submitit adds to its own
# job script, which runs the job script (scheduler.py says why the two differ).
Via = Literal["script", "submitit"]
# Given to submitit as its own parameters, not as sbatch options (it writes them itself).
_SUBMITIT_OWN = ("job-name", "partition", "output")


class SlurmJob(BaseModel):
    """What one job asks Slurm for: a run's, a pack's (the allocation its runs share), or an
    array's (each array task an allocation like it)."""

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


def sbatch_options(job: SlurmJob, partition: Any, via: Via = "script") -> dict[str, str | bool]:
    """The job's sbatch options, in Slurm's long names.

    The allocation has room for the busiest node's tasks. Role modes whose tasks outnumber a
    node's cores (a ps beside a worker on a small node) ask for ``--ntasks`` with
    ``--overcommit`` instead: Slurm refuses ``--ntasks-per-node`` above the core count even
    then (seen on the test cluster), and srun places the tasks from a hostfile anyway.
    """
    opts: dict[str, str | bool] = {"job-name": job.name, "partition": partition.name,
                                   "nodes": str(job.nodes)}
    opts.update(_tasks(job, partition.cpus_per_node))
    opts.update({"time": f"{job.time_min // 60:02d}:{job.time_min % 60:02d}:00",
                 "output": job.output})
    opts.update(_site_options(partition))
    if job.no_requeue:
        opts["no-requeue"] = True
    if job.array is not None:
        opts["array"] = f"0-{job.array - 1}"
    if job.exclude:
        opts["exclude"] = ",".join(job.exclude)
    return _for_submitit(opts) if via == "submitit" else opts


def _tasks(job: SlurmJob, cpus_per_node: int) -> dict[str, str | bool]:
    if job.tasks_per_node > cpus_per_node:
        return {"ntasks": str(job.tasks), "overcommit": True}
    return {"ntasks-per-node": str(job.tasks_per_node),
            "cpus-per-task": str(max(1, cpus_per_node // job.tasks_per_node))}


def _site_options(partition: Any) -> dict[str, str | bool]:
    """What the site declares for every job of the partition (its ``sbatch:`` block)."""
    opts: dict[str, str | bool] = {}
    if partition.gpus_per_node:
        opts["gpus-per-node"] = str(partition.gpus_per_node)
    sb = partition.sbatch
    for key in ("account", "qos", "constraint", "reservation"):
        value = getattr(sb, key)
        if value:
            opts[key] = value
    if sb.exclusive:
        opts["exclusive"] = True
    for flag in sb.extra:
        key, _, value = flag[2:].partition("=")
        opts[key] = value or True
    return opts


def _for_submitit(opts: dict[str, str | bool]) -> dict[str, str | bool]:
    """The options submitit passes on, beside the name, partition and output it is given.

    submitit always asks for --signal=USR2@90 (its checkpoint/requeue warning), sent to every
    task: ranks die of it 90 s before the limit, a FAILED run instead of TIMEOUT. orch does not
    requeue, so the warning goes to the batch shell only, as SIGURG, whose default action is to
    ignore it (job.sbatch by hand has no --signal at all). And one execution per attempt: a
    requeued job (node failure, ReturnToService) would run job.sbatch again in the same
    directory, appending a second execution to the rank logs. Slurm must not requeue it; orch's
    ledger shows the failure instead.
    """
    out = {k: v for k, v in opts.items() if k not in _SUBMITIT_OWN}
    out["signal"] = "B:URG@90"
    out["no-requeue"] = True
    return out
