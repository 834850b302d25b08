"""Render a run into plain shell: ``job.sbatch`` (the allocation) and ``launch.sh`` (one rank).

Everything a template needs is computed here by small pure functions (sbatch options, transport
variables, workload arguments), so the templates stay readable and the logic stays testable.
Every value that reaches a shell line goes through the ``q`` filter (shlex quoting); Jinja runs
with StrictUndefined so a missing value is an error, never an empty string in a script.
"""

from __future__ import annotations

import functools
import hashlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from .. import __version__, backends, data, modes, protocol
from ..backends import templating
from ..images.wrapper import wrapper_context
from ..plan.resolved import ResolvedRun
from ..site import Partition, envs
from ..spec.api import Run


@dataclass(frozen=True)
class Rendered:
    job_script: str
    launch_script: str
    # Further executables of the run directory, (name, text): the container wrapper.
    files: tuple[tuple[str, str], ...] = ()

    @property
    def digest(self) -> str:
        """Hash of the scripts: recorded by every rank as provenance."""
        h = hashlib.sha256(self.job_script.encode() + b"\0" + self.launch_script.encode())
        for name, text in self.files:
            h.update(b"\0" + name.encode() + b"\0" + text.encode())
        return h.hexdigest()[:16]


def is_uniform(tasks: list[modes.Task], nodes: int) -> bool:
    """Same number of tasks on every node, in node-major order: plain srun places them."""
    per_node = Counter(t.node for t in tasks)
    in_order = [t.node for t in tasks] == sorted(t.node for t in tasks)
    return in_order and len(set(per_node.values())) == 1 and len(per_node) == nodes


def max_tasks_per_node(run: Run) -> int:
    return _layout(run.task_table, run.nodes).max_per_node


@dataclass(frozen=True)
class _Layout:
    """What the scripts need from a task table (computed once per distinct table)."""

    uniform: bool
    max_per_node: int
    task_nodes: str
    task_roles: str


@functools.lru_cache(maxsize=1024)
def _layout(tasks: tuple[modes.Task, ...], nodes: int) -> _Layout:
    return _Layout(
        uniform=is_uniform(list(tasks), nodes),
        max_per_node=max(Counter(t.node for t in tasks).values()),
        task_nodes=" ".join(str(t.node) for t in tasks),
        task_roles=" ".join(f"{t.role}:{t.index}" for t in tasks),
    )


def run_job(run: Run, run_dir: Path) -> backends.Job:
    """What the run's job asks its scheduler for; the scheduler turns it into its job
    script's request (Scheduler.request_lines), as it does a pack's."""
    return backends.Job(name=run.run_id, nodes=run.nodes, tasks=len(run.task_table),
                        tasks_per_node=max_tasks_per_node(run), time_min=run.time_limit_min,
                        output=str(run_dir / "slurm-%j.out"))


def transport_env(partition: Partition) -> list[tuple[str, str]]:
    """Variables that pin NCCL, Gloo and Open MPI to the partition's fabric and NIC.

    InfiniBand: NCCL uses the verbs transport (optionally pinned to HCAs) and Open MPI the UCX
    PML; sockets (bootstrap, Gloo) still go over the IPoIB interface. Ethernet: NCCL's IB
    transport is off, and Open MPI uses its TCP BTL on the named NIC.
    """
    nic = partition.socket_ifname
    out: list[tuple[str, str]] = [("GLOO_SOCKET_IFNAME", nic), ("NCCL_SOCKET_IFNAME", nic)]
    if partition.interconnect == "infiniband":
        out.append(("NCCL_IB_DISABLE", "0"))
        if partition.ib_hca:
            out.append(("NCCL_IB_HCA", ",".join(partition.ib_hca)))
            out.append(("UCX_NET_DEVICES", ",".join(f"{h}:1" for h in partition.ib_hca)))
        out += [("OMPI_MCA_pml", "ucx"), ("OMPI_MCA_btl", "^openib,tcp")]
    else:
        out.append(("NCCL_IB_DISABLE", "1"))
        out += [("OMPI_MCA_pml", "ob1"), ("OMPI_MCA_btl", "self,vader,tcp")]
    out += [("OMPI_MCA_btl_tcp_if_include", nic), ("OMPI_MCA_oob_tcp_if_include", nic)]
    overrides = dict(partition.env)
    merged = [(k, overrides.pop(k, v)) for k, v in out]
    return merged + sorted(overrides.items())


def workload_args(resolved: ResolvedRun, run_dir: Path) -> list[str]:
    """Arguments every workload's harness understands: protocol.RANK_ARGS of the run, the
    mode's options among them (orchestrator.rankside.harness parses them)."""
    run = resolved.run
    values = {a.field: getattr(run, a.field, None) for a in protocol.RANK_ARGS}
    values.update(run_id=run.run_id, log_dir=str(run_dir / protocol.RANKS_DIR))
    if run.data:
        values["data"] = f"{run.data}/{data.run_format(resolved.site, resolved.mode, run.data)}"
    options = []
    for key, value in sorted(run.options.items()):
        options += [f"--{key.replace('_', '-')}", value]
    return protocol.rank_argv(values, options)


def render_run(resolved: ResolvedRun, run_dir: Path, lib_dir: Path,
               image_digest: str | None = None, packed: bool = False) -> Rendered:
    """Both scripts of a run; with a container environment also ``container-python``, the
    wrapper job.sbatch makes every rank's ORCH_PYTHON (``image_digest`` is recorded in it).
    ``packed``: the run is one step of a pack allocation (orch sweep --pack): its srun step
    keeps to the nodes the pack gave it (SLURM_JOB_NODELIST) and is named after the run."""
    run, site, partition, env, mode = (resolved.run, resolved.site, resolved.partition,
                                       resolved.environment, resolved.mode)
    tasks = run.tasks()
    layout = _layout(run.task_table, run.nodes)
    scheduler, job = backends.scheduler(site.scheduler), run_job(run, run_dir)
    ctx = {
        "version": __version__,
        "run": run,
        "run_id": run.run_id,
        "site": site,
        "scheduler": scheduler,
        "launcher": backends.launcher(run.launcher),
        "partition": partition,
        "mode": mode,
        "env": env,
        "python": envs.python_of(env),
        "tasks": tasks,
        "uniform": layout.uniform,
        "task_nodes": layout.task_nodes,
        "task_roles": layout.task_roles,
        "run_dir": str(run_dir),
        "lib_dir": str(lib_dir),
        "sbatch": scheduler.request_lines(job, partition),
        "transport": transport_env(partition),
        "env_vars": sorted(env.env.items()),
        "args": workload_args(resolved, run_dir),
        "container": None,
        "packed": packed,
        "srun_options": scheduler.step_options(job, partition, packed),
        "agent_binding": scheduler.agent_binding(partition),
    }
    if env.container is not None:
        data = [run.data] if getattr(run, "data", None) else []
        ctx["container"] = wrapper_context(env, partition, run_dir, lib_dir, data,
                                           ctx["transport"], image_digest)
    job = templating.template("job.sbatch.j2").render(**ctx)
    launch = templating.template(mode.template).render(**ctx)
    files: tuple[tuple[str, str], ...] = ()
    if env.container is not None:
        wrapper = templating.template(f"containers/{env.container.runtime}.sh.j2").render(**ctx)
        files = (("container-python", wrapper),)
    return Rendered(job_script=job, launch_script=launch, files=files)
