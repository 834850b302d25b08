"""Carry out a sweep: prepare run directories, submit what is not done, wait, finalize.

One way through: runs (plan) → rendered files and provenance (render, containers,
provenance) → run directories (rundir.materialise) → a run strategy (strategies.py: a job per
run, packs, arrays, any of them staged by scale) and the site's scheduler (backends) → ledger
states → finalized against the rank logs (verdict).

Re-running a sweep into the same directory skips finished runs (their data is never touched),
waits again for runs still pending or running, and submits only new ones.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from .. import backends
from ..images import checks
from ..images.image import ImageFacts
from ..plan.resolved import ResolvedRun
from ..render import Rendered, render_run, run_job
from ..runs import fabric, faults, provenance, rundir, verdict
from ..runs.rundir import RETRYABLE, TERMINAL, JobRecord, Prepared
from ..site import Site
from ..spec.api import Run
from . import packs
from .strategies import Event, Plain, Strategy, choose

__all__ = ["Prepared", "Strategy", "cancel", "choose", "dry_run", "execute", "finalize",
           "follow", "followed", "prepare", "refresh", "render_for", "run"]

# Called after every scheduler query while waiting: run id -> orch state, runs of this wait.
Progress = Callable[[dict[str, str]], None]
# Ask the scheduler fast while jobs are new, back off while nothing changes: a sweep of
# hour-long jobs should not run squeue every second on a real cluster. Between those queries
# a cheap file check (every TICK_S) notices a job script's end (job-times.json) at once.
POLL_MIN_S, POLL_MAX_S, POLL_BACKOFF, TICK_S = 0.25, 10.0, 1.5, 0.25
# The run directories this process submitted or waits for, with their scheduler's name.
_FOLLOWED: dict[Path, str] = {}


def followed() -> list[tuple[Path, str]]:
    """The run directories this orch process submitted or waited for (a sweep's, its
    pre-flight's, netbench's), with their scheduler's name: what a stopped orch names,
    cancels or leaves running (cli/stop.py)."""
    return list(_FOLLOWED.items())


def render_for(resolved: ResolvedRun, out: Path, lib: Path,
               images: dict[str, ImageFacts] | None = None,
               packed: bool = False) -> Rendered:
    return _render(resolved, _resolved_run_dir(out.resolve(), resolved.run), lib, images,
                   packed)


def _render(resolved: ResolvedRun, rdir: Path, lib: Path,
            images: dict[str, ImageFacts] | None = None,
            packed: bool = False) -> Rendered:
    image = (images or {}).get(resolved.run.framework)
    return render_run(resolved, rdir, lib, image_digest=image.digest if image else None,
                      packed=packed)


def _resolved_run_dir(resolved_out: Path, run: Run) -> Path:
    """``rundir.run_dir(out, run).resolve()`` given an already resolved ``out``: one lstat
    instead of one per path component (a run directory may be a link: it is followed)."""
    rdir = rundir.run_dir(resolved_out, run)
    return rdir.resolve() if rdir.is_symlink() else rdir


def dry_run(runs: list[Run], site: Site, out: Path,
            packed: bool = False) -> list[tuple[Run, Rendered]]:
    """Render every run without writing or submitting anything (all before any output, so a
    rendering error comes first). The rank-side code's hash and ``out`` are resolved once."""
    lib = rundir.lib_path(out)
    resolved_out = out.resolve()
    return [(run, _render(ResolvedRun.of(run, site), _resolved_run_dir(resolved_out, run), lib,
                          packed=packed))
            for run in runs]


def prepare(runs: list[Run], site: Site, out: Path, retry_failed: bool = False,
            study: dict | None = None, packed: bool = False) -> list[Prepared]:
    """Run directories for the runs that need submitting (``study``: the study file that
    planned them, recorded in each run's provenance; ``packed``: they will run as steps of
    a pack allocation, orch sweep --pack). A run that the end of its pack allocation cut off,
    or that an infrastructure failure ended (rundir.RETRYABLE: NODE_FAIL, BOOT_FAIL,
    PREEMPTED, HUNG, once its sweep's own retries were spent or its sweep was interrupted),
    is submitted again: it says nothing about the workload. A failure of the workload
    itself is submitted again only with ``retry_failed``."""
    # Container images (exist, runtime installed, binds possible): before anything is written.
    images = checks.check(site, runs, out, rundir.lib_path(out))
    out.mkdir(parents=True, exist_ok=True)
    rundir.lock_sweep(out)
    lib = rundir.stage_lib(out)
    prepared = []
    for run in runs:
        rdir = rundir.run_dir(out, run)
        try:
            record = rundir.read_record(rdir)
        except rundir.DamagedFile:
            record = None
        attempt, history = 1, []
        if record is None and rdir.is_dir():
            # No readable ledger, yet maybe an earlier attempt's files: keep them, never
            # overwrite or append to them (they move to attempts/<n>/).
            attempt = rundir.salvage(rdir)
        if record is not None and record.state in TERMINAL:
            again = (retry_failed or record.cut_off or record.state in RETRYABLE
                     or record.stopped_with_orch)
            if record.state == "COMPLETED" or not again:
                prepared.append(Prepared(run, rdir, record, "skip"))
                continue
            attempt = rundir.archive_attempt(rdir, record)
            history, record = record.history, None
        if record is not None and record.state in ("PENDING", "RUNNING"):
            prepared.append(Prepared(run, rdir, record, "wait"))
            continue
        resolved = ResolvedRun.of(run, site)  # the names it carries, looked up once
        rendered = render_for(resolved, out, lib, images, packed)
        scripts = provenance.rendered_files(rendered)
        record = JobRecord(run_id=run.run_id, attempt=attempt, scheduler=site.scheduler,
                           history=history)
        prov = provenance.build(resolved, rdir, lib, scripts, images.get(run.framework),
                                study=study)
        rundir.materialise(rdir, run, scripts, prov, record)
        prepared.append(Prepared(run, rdir, record, "submit"))
    return prepared


def run(strategy: Strategy, prepared: list[Prepared], site: Site, **options) -> None:
    """Carry out a sweep's prepared runs the strategy's way (strategies.choose picks it):
    each of its stages is executed (``options``: :func:`execute`'s), then what follows it."""
    for stage, after in strategy.stages(prepared):
        execute(stage, site, strategy=strategy, **options)
        after()


def execute(prepared: list[Prepared], site: Site, wait: bool = True,
            on_event: Event | None = None, require_fabric: bool = False,
            on_progress: Progress | None = None, strategy: Strategy = Plain(),
            policy: faults.FaultPolicy | None = faults.FaultPolicy()) -> list[JobRecord]:
    """Submit the runs that need it; with ``wait``, follow every run to a terminal state.

    ``require_fabric``: a run whose fabric verdict is ``mismatch`` is FAILED (the requirement
    is kept in the run directory, so a later ``orch status``/``gather`` finalizes alike).
    ``strategy``: how the runs go out (a job each, packs, arrays: strategies.py); they are
    followed alike.
    ``policy``: hang timeouts and retries while waiting (faults.py); None: neither. A retry
    goes out as a job of its own, packed or not."""
    on_event = on_event or (lambda run, record: None)
    for p in prepared:
        if p.action == "submit":
            fabric.set_required(p.rdir, require_fabric)
        if p.action != "skip":
            _FOLLOWED[p.rdir] = site.scheduler
    if wait:
        prepared = [_followed_again(p) for p in prepared]
    sched = backends.scheduler(site.scheduler)
    for name in sorted({p.run.partition for p in prepared if p.action != "skip"}):
        sched.check(site.partition(name))
    live: list[Prepared] = [p for p in prepared if p.action == "wait"]
    guard = _guard(site, sched, policy) if policy is not None else None

    def started(p: Prepared) -> None:
        if sched.sequential:
            # One job at a time (the local site): concurrent runs would distort each other.
            follow([p], sched, on_event, on_progress, guard)
        else:
            live.append(p)

    todo = [p for p in prepared if p.action == "submit"]
    if todo:
        strategy.submit(todo, site, on_event, started)
    if wait and live:
        follow(live, sched, on_event, on_progress, guard)
    return [rundir.read_record(p.rdir) or p.record for p in prepared]


def _followed_again(p: Prepared) -> Prepared:
    """A run left running by an orch process that was stopped, followed again: its ledger's
    note that nothing follows it goes."""
    if p.action != "wait" or not (p.record.reason or "").startswith(rundir.ORCH_STOPPED):
        return p
    record = rundir.write_record(p.rdir, p.record.model_copy(update={"reason": None}))
    return Prepared(p.run, p.rdir, record, "wait")


def _guard(site: Site, sched: backends.Scheduler, policy: faults.FaultPolicy) -> faults.Guard:
    """The fault guard of one wait: it resubmits a retry as the run's own job, kept off the
    nodes that failed."""
    def submit(p: Prepared, exclude: list[str]) -> str:
        job = run_job(p.run, p.rdir.resolve()).model_copy(update={"exclude": tuple(exclude)})
        return sched.submit(p.run, p.rdir, site.partition(p.run.partition), job)

    return faults.Guard(policy, sched, submit,
                        partition_nodes=lambda run: site.partition(run.partition).nodes)


def follow(live: list[Prepared], sched: backends.Scheduler, on_event: Event,
           on_progress: Progress | None = None, guard: faults.Guard | None = None) -> None:
    """Poll until every run is terminal, finalizing each as it ends (``guard``: hangs are
    cancelled as HUNG, infrastructure failures come back as retries to follow)."""
    pending = {p.run.run_id: p for p in live}
    last: dict[str, str] = {rid: p.record.state for rid, p in pending.items()}
    if on_progress:
        on_progress(dict(last))
    poll_s, next_poll = POLL_MIN_S, 0.0
    while pending:
        ended = any((p.rdir / "job-times.json").exists() for p in pending.values())
        if time.time() < next_poll and not ended:
            time.sleep(TICK_S)
            continue
        changed = False
        states = sched.poll([p.record for p in pending.values()],
                            [p.rdir for p in pending.values()])
        for rid, (state, reason) in states.items():
            p = pending[rid]
            if guard is not None:
                p, state, reason = guard.observe(p, state, reason)
                pending[rid] = p
            if state in TERMINAL:
                record = finalize(p.run, p.rdir, p.record, state, reason)
                record = rundir.write_record(p.rdir, record)
                on_event(p.run, record)
                del pending[rid]
                changed = True
                state = record.state  # orch's verdict (a COMPLETED job may be FAILED)
                retry = guard.after(p, record) if guard is not None else None
                if retry is not None:
                    on_event(p.run, retry.record)
                    if retry.record.state not in TERMINAL:
                        pending[rid], state = retry, retry.record.state
            elif state != last.get(rid):
                changed = True
                record = p.record.model_copy(update={"state": state,
                                                     "step": packs.step_of(p.rdir, p.record)})
                record = rundir.write_record(p.rdir, record)
                pending[rid] = Prepared(p.run, p.rdir, record, "wait")
                on_event(p.run, record)
            last[rid] = state
        if on_progress:
            on_progress(dict(last))
        if pending:
            poll_s = POLL_MIN_S if changed else min(POLL_MAX_S, poll_s * POLL_BACKOFF,
                                                    guard.max_poll_s if guard else POLL_MAX_S)
            next_poll = time.time() + poll_s
            time.sleep(TICK_S)


def finalize(run: Run, rdir: Path, record: JobRecord, state: str, reason: str) -> JobRecord:
    """Turn the scheduler's terminal state into orch's, checked against the rank logs."""
    logs = verdict.read_run_logs(rdir) if (rdir / "ranks").is_dir() else []
    if state == "COMPLETED":
        ok, why = verdict.verdict(run, rdir, logs)
        if not ok:
            state, reason = "FAILED", why or "rank logs incomplete"
        elif fabric.is_required(rdir):
            facts = fabric.attest(run, rdir, logs)
            if facts["fabric"] == fabric.MISMATCH:
                state, reason = "FAILED", f"fabric mismatch (--require-fabric): " \
                                          f"{facts['fabric_reason']}"
    elif state in ("FAILED", "NODE_FAIL", "BOOT_FAIL", "OUT_OF_MEMORY", "PREEMPTED"):
        # The scheduler's word (e.g. a reused job id), the job's nodes, and the root cause in
        # the logs (for a node failure: what the ranks saw of it).
        found = verdict.failure_reason(rdir, run, logs)
        on = f"job on {','.join(record.nodes)}" if record.nodes and state != "FAILED" else ""
        seen = f"the ranks saw: {found}" if found and state != "FAILED" else found
        reason = "; ".join(r for r in (reason, on, seen) if r)
    elif state == "TIMEOUT":
        reason = reason or f"time limit of {run.time_limit_min} min reached"
    elif state == "CANCELLED":
        reason = faults.cancel_reason(record, reason)
    return record.model_copy(update={"state": state, "reason": reason or None,
                                     "ended_at": rundir.now(),
                                     "logs_digest": rundir.logs_digest(rdir),
                                     "step": packs.step_of(rdir, record)})


def refresh(out: Path, scheduler: str) -> list[tuple[Run, JobRecord, Path]]:
    """Bring every non-terminal ledger entry up to date (``orch status`` from any shell)."""
    sched = backends.scheduler(scheduler)
    entries = []
    for rdir in rundir.run_dirs(out):
        run, record = rundir.read_run(rdir), rundir.read_record(rdir)
        if record is not None:
            entries.append((run, record, rdir))
    live = [(run, rec, rdir) for run, rec, rdir in entries
            if rec.state in ("PENDING", "RUNNING") and rec.scheduler == scheduler]
    if live:
        states = sched.poll([r for _, r, _ in live], [d for _, _, d in live])
        for run, record, rdir in live:
            state, reason = states.get(run.run_id, (record.state, ""))
            if state in TERMINAL:
                new = finalize(run, rdir, record, state, reason)
            else:
                new = record.model_copy(update={"state": state,
                                                "step": packs.step_of(rdir, record)})
            if new != record:
                rundir.write_record(rdir, new)
    return [(run, rundir.read_record(rdir), rdir) for run, _, rdir in entries]


def cancel(out: Path, scheduler: str, run_ids: list[str] | None,
           why: str = "orch cancel") -> list[str]:
    """Cancel the named runs (or every unfinished one); returns the run ids cancelled. The
    ledger says orch asked (``why``) before the scheduler is told, so the run's reason can tell
    this from a cancel outside orch."""
    sched = backends.scheduler(scheduler)
    done = []
    for run, record, rdir in refresh(out, scheduler):
        if run_ids and run.run_id not in run_ids:
            continue
        if record.state in TERMINAL:
            continue
        record = rundir.write_record(rdir, record.model_copy(update={"cancel_requested": why}))
        sched.cancel(record, rdir)
        if sched.cancel_is_final:
            rundir.write_record(rdir, finalize(run, rdir, record, "CANCELLED", ""))
        done.append(run.run_id)
    if not sched.cancel_is_final and done:
        deadline = time.time() + 60
        while time.time() < deadline:
            entries = refresh(out, scheduler)
            if all(rec.state in TERMINAL for run, rec, _ in entries if run.run_id in done):
                break
            time.sleep(2)
    return done
