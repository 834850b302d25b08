"""Packed sweeps: pay the queue once per partition (``orch sweep --pack``) or per shape
(``orch sweep --array``).

``--pack``: the runs of a sweep that go to one partition share one allocation, sized for the
largest of them. Its job script (``pack.sbatch.j2`` in backends/slurm/, kept in
``<sweep>/packs/<pack>/pack.sbatch``) runs every run's own, unchanged ``job.sbatch`` on nodes
of the allocation no other run is using, as if those nodes were a job of its own: the run's
srun is one job step of the allocation, named after the run. Runs side by side where they
fit, largest first; one failing does not end the others; each keeps its run directory, logs,
provenance and ledger entry (allocation job id + its step). A run the allocation's end cuts off
(time limit, cancel) is recorded with a reason starting "cut off", and the next sweep into the
same directory submits it again.

Where runs fit side by side: with ``--pack`` (the default for timings) a run gets whole nodes
that no other run of the pack is using, so no step shares a node with another and nothing
measured contends with a neighbour. ``--pack-shared`` lets runs share a node where its CPUs
allow: each rank of a step gets one CPU (``srun --exact``, ``SRUN_CPUS_PER_TASK=1``), so two
1-rank runs share a 2-CPU node; quicker sweeps, at the price of contention, which each run's
job-times.json names (``co_tenants``: the runs that shared a node with it while it ran;
``beside``: every run of the pack that ran at the same time).

``--array``: runs of the same shape (partition, nodes, tasks, time: the same sbatch options)
go out as one Slurm job array (``array.sbatch.j2`` in backends/slurm/); array task k runs the
k-th run's job.sbatch in an allocation of its own, and the run's job id is ``JOBID_k``.

Which to use: ``--pack`` where the queue wait dominates and runs of different sizes should run
in one place back to back; ``--array`` where the scheduler should place each run on its own
(runs of one shape, e.g. repeats), at the price of one queue wait per array task it cannot
start at once.

This module composes a sweep's prepared runs into packs and arrays, writes their scripts and
ledger entries and reads each run's step back; what is Slurm's alone (the job scripts'
templates, the time an allocation asks for, MaxArraySize) is backends/slurm/pack.py.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .. import __version__, backends, files, protocol
from ..backends.slurm import pack as slurm_pack
from ..errors import UserError
from ..render import max_tasks_per_node, run_job
from ..runs import rundir, stopping
from ..runs.rundir import JobRecord, Prepared
from ..site import Site

# A pack whose runs may share nodes, as orch sweep spells it (the strategies, each kind's name:
# orchestrator/execute/strategies.py).
SHARED = "pack-shared"


@dataclass(frozen=True)
class Group:
    """Runs that go out as one submission: a pack (one partition) or an array (one shape)."""

    kind: str  # "pack" | "array"
    partition: str
    members: tuple[Prepared, ...]  # in the order they start (packs: largest first)
    share: bool = False  # --pack-shared: runs may share a node where its CPUs allow


def refuse(site: Site, kind: str) -> None:
    """Bad input before anything is written: a scheduler that has no queue to pay once (the
    local site runs one job at a time, on this machine: side by side they would distort each
    other's measurements, and there is no queue wait to save)."""
    if not backends.scheduler(site.scheduler).packs:
        raise UserError(f"--{kind}: site '{site.name}' (scheduler {site.scheduler}) has no "
                        f"queue to wait in and runs one job at a time; drop --{kind}")


def check(runs: list, site: Site, kind: str, out: Path) -> None:
    """Bad input before anything is written: a run larger than its partition, or a pack whose
    runs need more time one after another than the partition allows one job (its MaxTime, as
    the scheduler reports it): those runs cannot share one allocation."""
    sched = backends.scheduler(site.scheduler)
    for group in groups(_as_prepared(runs, site, out), site, kind, slurm_pack.max_array(kind)):
        need = pack_job(group, out, "check").time_min
        limit = sched.max_time_min(site.partition(group.partition))
        if limit is not None and need > limit:
            raise UserError(f"--{kind}: the {len(group.members)} run(s) on partition "
                            f"'{group.partition}' need {need} min in one allocation (each run's "
                            f"time limit, side by side where they fit), more than the "
                            f"partition's limit of {limit} min; lower --time-limit, split the "
                            f"sweep, or use --array")


def _as_prepared(runs: list, site: Site, out: Path) -> list[Prepared]:
    return [Prepared(r, out / r.run_id, JobRecord(run_id=r.run_id, scheduler=site.scheduler),
                     "submit") for r in runs]


def groups(prepared: list[Prepared], site: Site, kind: str,
           max_array: int | None = None) -> list[Group]:
    """The submissions of the runs to submit: one pack per partition, or one array per
    shape (partition and sbatch options), split into arrays of at most ``max_array`` tasks
    (Slurm's MaxArraySize: task ids 0 to MaxArraySize-1). Pure: nothing is written."""
    todo = [p for p in prepared if p.action == "submit"]
    sched = backends.scheduler(site.scheduler)
    keyed: dict[tuple, list[Prepared]] = {}
    for p in todo:
        part = site.partition(p.run.partition)
        if p.run.nodes > part.nodes:
            raise UserError(f"--{kind}: run {p.run.run_id} needs {p.run.nodes} nodes, more "
                            f"than partition '{part.name}' has ({part.nodes}); lower --nodes")
        key: tuple = (part.name,)
        if kind == "array":
            opts = sched.job_options(run_job(p.run, Path("/")), part)
            key += tuple(sorted((k, str(v)) for k, v in opts.items()
                                if k not in ("job-name", "output")))
        keyed.setdefault(key, []).append(p)
    out = []
    for key, members in keyed.items():
        if kind == "array":
            out += [Group(kind, key[0], chunk) for chunk in slurm_pack.split(members, max_array)]
        else:  # largest first: the big runs do not wait behind small ones
            members = sorted(members, key=lambda p: -p.run.nodes)
            out.append(Group("pack", key[0], tuple(members), share=kind == SHARED))
    return out


def pack_options(group: Group, site: Site, pack_dir: Path, name: str) -> dict[str, str | bool]:
    """The allocation: the largest run's nodes, the busiest node's tasks, the time the runs
    need where they cannot run side by side."""
    return backends.scheduler(site.scheduler).job_options(pack_job(group, pack_dir, name),
                                                          site.partition(group.partition))


def pack_job(group: Group, pack_dir: Path, name: str) -> backends.Job:
    """What a pack's allocation (or each task of an array) asks for."""
    sizes = [(p.run.nodes, max_tasks_per_node(p.run), p.run.time_limit_min)
             for p in group.members]
    return slurm_pack.allocation(group.kind, sizes, pack_dir, name)


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _row(p: Prepared, site: Site, share: bool) -> str:
    """One line of the pack script's run table (the run directory last: it may hold spaces)."""
    run, part = p.run, site.partition(p.run.partition)
    opts = backends.scheduler(site.scheduler).job_options(run_job(run, p.rdir), part)
    ntasks = opts.get("ntasks") or str(len(run.task_table))
    return " ".join([run.run_id, str(run.nodes), str(ntasks),
                     str(opts.get("ntasks-per-node", "-")), str(opts.get("cpus-per-task", "-")),
                     slurm_pack.step_cpus(max_tasks_per_node(run), part.cpus_per_node, share),
                     str(run.time_limit_min * 60), str(p.rdir.resolve())])


def render(group: Group, site: Site, out: Path, pack_dir: Path, name: str) -> str:
    """The pack's (or array's) job script: readable shell a user could sbatch by hand."""
    for p in group.members:
        if _CONTROL.search(str(p.rdir.resolve())):
            raise UserError(f"--out {out}: a control character in the path; choose another "
                            f"--out")
    kind = group.kind
    script = pack_dir / _script_name(kind)
    sched, job = backends.scheduler(site.scheduler), pack_job(group, pack_dir, name)
    first = group.members[0].run
    ctx = {
        "version": __version__, "pack": name, "out": str(out), "site": site,
        "partition": site.partition(group.partition),
        "scheduler": sched, "script": str(script),
        "sbatch": sched.request_lines(job, site.partition(group.partition)),
        "nodes": str(job.nodes),
        "share": group.share, "steps_log": str((pack_dir / protocol.PACK_STEPS_LOG).resolve()),
        "rows": ([_row(p, site, group.share) for p in group.members] if kind == "pack"
                 else [str(p.rdir.resolve()) for p in group.members]),
        "shape": f"{first.nodes} node(s) x {max_tasks_per_node(first)} task(s), "
                 f"{first.time_limit_min} min",
        "files": {"started": protocol.STEP_STARTED_FILE, "step": protocol.STEP_FILE,
                  "times": protocol.JOB_TIMES_FILE, "cancel": protocol.CANCEL_FILE},
    }
    return slurm_pack.script(kind, ctx)


def _pack_name(out: Path, kind: str, partition: str, offset: int = 0) -> str:
    """A new pack's name: its directory under <out>/packs/ (numbered, never reused: nothing is
    overwritten) and its Slurm job name (with a tag of the sweep directory, so a job id that
    Slurm reused after a reset is told apart)."""
    base = out / protocol.PACKS_DIR
    names = [d.name for d in base.iterdir()] if base.is_dir() else []
    taken = [int(m.group(1)) for n in names if (m := re.match(r"[a-z]+-(\d+)-", n))]
    tag = hashlib.sha256(str(out.resolve()).encode()).hexdigest()[:6]
    prefix = protocol.PACK_PREFIX if kind == "pack" else protocol.ARRAY_PREFIX
    return f"{prefix}{max(taken, default=0) + 1 + offset}-{partition}-{tag}"


def _script_name(kind: str) -> str:
    return protocol.PACK_SCRIPT if kind == "pack" else protocol.ARRAY_SCRIPT


def dry_run(runs: list, site: Site, out: Path, kind: str) -> list[tuple[Path, str]]:
    """The pack (or array) scripts a sweep would submit, as (path, text); nothing written."""
    shown = []
    for i, group in enumerate(groups(_as_prepared(runs, site, out), site, kind,
                                     slurm_pack.max_array(kind))):
        name = _pack_name(out, group.kind, group.partition, offset=i)
        pack_dir = out / protocol.PACKS_DIR / name
        shown.append((pack_dir / _script_name(group.kind),
                      render(group, site, out, pack_dir, name)))
    return shown


def submit(prepared: list[Prepared], site: Site, kind: str,
           on_event: Callable[[object, JobRecord], None]) -> list[Prepared]:
    """Submit the runs to submit as packs or arrays; their ledger entries become PENDING with
    the pack's job id (array: JOBID_k). Returns them to follow."""
    sched = backends.scheduler(site.scheduler)
    out = prepared[0].rdir.parent if prepared else Path(".")
    live = []
    for group in groups(prepared, site, kind, slurm_pack.max_array(kind)):
        name = _pack_name(out, group.kind, group.partition)
        pack_dir = out / protocol.PACKS_DIR / name
        text = render(group, site, out, pack_dir, name)
        pack_dir.mkdir(parents=True)
        script = pack_dir / _script_name(group.kind)
        files.write_text_atomic(script, text)
        records = []
        with stopping.deferred():  # a job is never left out of its runs' ledgers
            job_id = sched.submit_script(script, name)
            for k, p in enumerate(group.members):
                rid = f"{job_id}_{k}" if group.kind == "array" else job_id
                records.append(rundir.write_record(p.rdir, p.record.model_copy(update={
                    "job_id": rid, "state": "PENDING", "pack": name,
                    "submitted_at": rundir.now()})))
        for p, record in zip(group.members, records, strict=True):
            on_event(p.run, record)
            live.append(Prepared(p.run, p.rdir, record, "wait"))
    return live


def step_of(rdir: Path, record: JobRecord) -> str | None:
    """The run's own job step (JOBID.STEP) as its pack script recorded it, else the ledger's."""
    try:
        return (rdir / protocol.STEP_FILE).read_text().strip() or record.step
    except OSError:
        return record.step
