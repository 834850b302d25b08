"""Every sbatch option orch asks Slurm for, from one function: a run's job script, a pack's
or an array's script, and what submitit is given when it submits a run (a retry's
``--exclude`` included).

A job is described once (:class:`~orchestrator.backends.base.Job`, the scheduler interface's
description: its name, size, time and output); the partition adds what the site declares for
it (GPUs, account, QOS, ...). The options come back in Slurm's long names, in the order the
``#SBATCH`` lines show them (tests/golden/sbatch-options.json).
A run's job script is the same on every site: the local site runs it with bash, where its
``#SBATCH`` lines are comments.
"""

from __future__ import annotations

import shlex
from typing import Any, Literal

from ..base import Job

# "script": the #SBATCH lines of a job script; "submitit": the options submitit adds to its own
# job script, which runs the job script (scheduler.py says why the two differ).
Via = Literal["script", "submitit"]
# Given to submitit as its own parameters, not as sbatch options (it writes them itself).
_SUBMITIT_OWN = ("job-name", "partition", "output")


def sbatch_options(job: Job, partition: Any, via: Via = "script") -> dict[str, str | bool]:
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


def lines(opts: dict[str, str | bool]) -> list[str]:
    """The options as the words of ``#SBATCH`` lines, each value shell-quoted."""
    return [f"--{k}" if v is True else f"--{k}={shlex.quote(str(v))}" for k, v in opts.items()]


def _tasks(job: Job, cpus_per_node: int) -> dict[str, str | bool]:
    if job.tasks_per_node > cpus_per_node:
        return {"ntasks": str(job.tasks), "overcommit": True}
    return {"ntasks-per-node": str(job.tasks_per_node),
            "cpus-per-task": str(cpus_per_task(job, cpus_per_node))}


def cpus_per_task(job: Job, cpus_per_node: int) -> int:
    """The CPUs of each task: the node's shared by its busiest node's tasks (1 where they
    outnumber its cores, the ``--overcommit`` case)."""
    return max(1, cpus_per_node // job.tasks_per_node)


# srun options taken from the partition's binding fields, in the order the srun line shows them.
_BINDING = (("gpus-per-task", "gpus_per_task"), ("gpu-bind", "gpu_bind"),
            ("cpu-bind", "cpu_bind"))
# Of those, what binds a per-node agent (torchrun: one task per node that starts the node's
# ranks, which inherit its binding): the CPUs only. --gpus-per-task and --gpu-bind would give
# all the node's ranks one task's GPUs; the agent keeps the node's GPUs (a step's default) and
# each rank takes its own by LOCAL_RANK.
AGENT_BINDING = ("cpu_bind",)


def srun_options(job: Job, partition: Any, packed: bool = False) -> str:
    """What every srun line of the job says beside its task counts, as shell words.

    ``--cpus-per-task`` always: srun of Slurm 22.05 to 23.10 does not take it from the
    allocation (SLURM_CPUS_PER_TASK is ignored; 23.11 reads it again), so a rank would get
    one CPU where sbatch asked for more. A packed run's step takes srun's own input
    (SRUN_CPUS_PER_TASK) first: a --pack-shared pack gives each rank one CPU that way. Then
    the partition's binding (``gpus_per_task``, ``gpu_bind``, ``cpu_bind``), explicitly,
    because srun's defaults changed between 21.08, 22.05 and 23.11. The site config allows
    only Slurm's own spellings of these (site.py); each word is quoted anyway.
    """
    cpt = str(cpus_per_task(job, partition.cpus_per_node))
    words = ['--cpus-per-task="${SRUN_CPUS_PER_TASK:-' + cpt + '}"' if packed
             else f"--cpus-per-task={cpt}"]
    return " ".join(words + binding_options(partition))


def binding_options(partition: Any, agent: bool = False) -> list[str]:
    """The partition's binding as srun words, each quoted; ``agent``: only what binds a
    per-node agent (``AGENT_BINDING``)."""
    return [shlex.quote(f"--{option}={getattr(partition, field)}") for option, field in _BINDING
            if getattr(partition, field, None) and (not agent or field in AGENT_BINDING)]


def _site_options(partition: Any) -> dict[str, str | bool]:
    """What the site declares for every job of the partition (its ``sbatch:`` block)."""
    opts: dict[str, str | bool] = {}
    if partition.gpus_per_node:  # the option the site accepts (gpu_request)
        if partition.gpu_request == "gres":
            opts["gres"] = f"gpu:{partition.gpus_per_node}"
        else:
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
