"""What a waiting sweep does about faults: hung runs are cancelled as HUNG, runs failed by the
infrastructure are retried as new attempts kept off the nodes that failed.

``execute.follow`` hands every scheduler answer to a :class:`Guard` (``observe``) and every
finalized run to it (``after``); the Guard owns the hang watches (watch.py), the retry policy
and node exclusion, so the wait loop stays a loop.

Retries: a run that ended in a retryable state (rundir.RETRYABLE: NODE_FAIL, BOOT_FAIL,
PREEMPTED, HUNG) is submitted again, at most ``--max-retries`` times, as attempt n+1 in the
same run directory: attempt n's files move to ``attempts/<n>/`` first (rundir.next_attempt),
so every attempt's measurements are kept and never mixed. The nodes that failed (Slurm's node
events, sinfo, srun's 'Node failure on X'; for a hang, the nodes of ranks whose heartbeat
stopped) are excluded from that attempt and every later one (``sbatch --exclude``). A run that
failed by its own fault (FAILED, OUT_OF_MEMORY, TIMEOUT) or was cancelled is not retried.

The default is one retry: Slurm itself requeues a batch job after a node failure by default
(JobRequeue=1), so its users expect such a failure not to end their run; orch submits with
--no-requeue (a requeue would re-run the script into the same files) and so does the retry
itself, once, on other nodes: enough for a node that died, bounded for a run that hangs by its
own fault (it costs one more hang timeout, then stays HUNG).
"""

from __future__ import annotations

import pwd
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import backends, protocol
from ..errors import UserError
from ..spec.api import Run
from . import fabric, rundir, stopping
from .rundir import RETRYABLE, TERMINAL, JobRecord, Prepared
from .watch import Hang, HangPolicy, RunWatch

DEFAULT_MAX_RETRIES = 1
# Slurm's words for a job held still on purpose: the hang watch pauses (slurm.PAUSED).
_PAUSED = re.compile(r"^Slurm state (SUSPENDED|STOPPED)\b")

# submit(prepared, nodes to keep off) -> job id
Submit = Callable[[Prepared, list[str]], str]


@dataclass(frozen=True)
class FaultPolicy:
    hang: HangPolicy = field(default_factory=HangPolicy)
    max_retries: int = DEFAULT_MAX_RETRIES


class Guard:
    """Hang watches and retries for the runs one wait follows."""

    def __init__(self, policy: FaultPolicy, sched: backends.Scheduler, submit: Submit,
                 partition_nodes: Callable[[Run], int] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.policy, self.sched, self.submit = policy, sched, submit
        self.partition_nodes = partition_nodes
        self.clock = clock
        self._watches: dict[tuple[str, int], RunWatch] = {}
        self._hung: dict[tuple[str, int], Hang] = {}
        self._failed: dict[tuple[str, int], tuple[list[str], str]] = {}

    @property
    def max_poll_s(self) -> float:
        """Look at least this often: a hang is seen within a quarter of its timeout."""
        hang = self.policy.hang
        return max(1.0, hang.timeout_s / 4) if hang.enabled else float("inf")

    def observe(self, p: Prepared, state: str, reason: str) -> tuple[Prepared, str, str]:
        """One scheduler answer for a run: learn its nodes, watch it for hangs (cancelling a
        hung job), and turn the end of a job orch cancelled as hung into HUNG."""
        key = (p.run.run_id, p.record.attempt)
        if (state == "RUNNING" or state in TERMINAL) and p.record.nodes is None:
            nodes = self.sched.nodes([p.record]).get(p.run.run_id)
            if nodes:
                p = _with(p, nodes=nodes)
        if key in self._hung:
            if state == "COMPLETED":  # it ended by itself before the cancel: logs judge
                return p, state, reason
            if state in TERMINAL or self.sched.cancel_is_final:
                return p, "HUNG", self._hung[key].reason
            return p, "RUNNING", ""
        if state in ("NODE_FAIL", "BOOT_FAIL"):
            failed, evidence = self.sched.failed_nodes(p.record, p.rdir)
            self._failed[key] = (failed, evidence)
            found = (f"node {', '.join(failed)} failed ({evidence})" if failed
                     else "no failed node identified")
            return p, state, "; ".join(r for r in (reason, found) if r)
        if state != "RUNNING":
            return p, state, reason
        now = self.clock()
        watch = self._watches.get(key)
        if watch is None:
            watch = self._watches[key] = RunWatch(p.run, p.rdir, self.policy.hang, now)
        if _PAUSED.match(reason or ""):
            watch.pause(now)
            return p, state, reason
        hang = watch.observe(now, p.record.nodes)
        if hang is None:
            return p, state, reason
        self._hung[key] = hang
        p = _with(p, cancel_requested="hang")
        self.sched.cancel(p.record, p.rdir)
        if self.sched.cancel_is_final:
            return p, "HUNG", hang.reason
        return p, "RUNNING", ""

    def after(self, p: Prepared, record: JobRecord) -> Prepared | None:
        """A run just finalized as ``record``: its retry (a new attempt, submitted), or None.
        The retry's record is PENDING, or FAILED when it could not be submitted."""
        if record.state not in RETRYABLE:
            return None
        limit = self.policy.max_retries
        if record.retries >= limit:
            note = f"not retried: --max-retries {limit}" + (" used" if limit else "")
            rundir.write_record(p.rdir, record.model_copy(
                update={"reason": f"{record.reason or record.state}; {note}"}))
            return None
        failed, evidence = self._failed_nodes(p, record)
        exclude = sorted(set(record.excluded) | set(failed))
        how = f"retry {record.retries + 1} of {limit} after {record.state}"
        if not self.sched.excludes_nodes:
            if exclude or record.state != "PREEMPTED":
                how += (f"; node exclusion does not apply on the {self.sched.name} site "
                        "(every node is this machine)")
            exclude = []
        elif exclude and self.partition_nodes is not None \
                and self.partition_nodes(p.run) - len(exclude) < p.run.nodes:
            how += (f"; cannot keep off {', '.join(exclude)}: the run needs {p.run.nodes} of "
                    f"partition {p.run.partition}'s {self.partition_nodes(p.run)} nodes, "
                    "retried on any")
            exclude = []
        elif exclude:
            how += f", excluding {', '.join(exclude)}" + (f" ({evidence})" if evidence else "")
        elif record.state in ("NODE_FAIL", "BOOT_FAIL", "HUNG"):
            how += "; no failed node identified, nothing excluded"
        fresh = rundir.next_attempt(p.rdir, record, keep=(fabric.REQUIRE_FILE,),
                                    retries=record.retries + 1, excluded=exclude, reason=how)
        fresh = rundir.write_record(p.rdir, fresh)
        with stopping.deferred():  # a job is never left out of its ledger
            try:
                job_id = self.submit(Prepared(p.run, p.rdir, fresh, "submit"), exclude)
            except UserError as exc:
                failed_rec = fresh.model_copy(update={
                    "state": "FAILED", "ended_at": rundir.now(),
                    "reason": f"{how}: could not be submitted: {exc}"})
                return Prepared(p.run, p.rdir, rundir.write_record(p.rdir, failed_rec), "skip")
            fresh = fresh.model_copy(update={"job_id": job_id, "state": "PENDING",
                                             "submitted_at": rundir.now()})
            return Prepared(p.run, p.rdir, rundir.write_record(p.rdir, fresh), "wait")

    def _failed_nodes(self, p: Prepared, record: JobRecord) -> tuple[list[str], str]:
        if record.state == "HUNG":
            hang = self._hung.get((p.run.run_id, record.attempt))
            nodes = hang.nodes if hang else []
            return nodes, ("their ranks' heartbeat stopped" if nodes else "")
        if record.state in ("NODE_FAIL", "BOOT_FAIL"):
            key = (p.run.run_id, record.attempt)
            return self._failed.get(key) or self.sched.failed_nodes(record, p.rdir)
        return [], ""  # PREEMPTED: the nodes are fine, another job took them


def _with(p: Prepared, **updates) -> Prepared:
    """The run with its ledger entry updated and written (its history kept)."""
    record = rundir.write_record(p.rdir, p.record.model_copy(update=updates))
    return Prepared(p.run, p.rdir, record, p.action)


def cancel_reason(record: JobRecord, reason: str) -> str:
    """Why a job ended CANCELLED: by orch (what asked: orch cancel, Ctrl-C, the hang watch),
    or outside it (scancel, an administrator; Slurm's 'by <uid>' named as a user)."""
    if (reason or "").startswith(protocol.CUT_OFF):  # a packed allocation ended: kept as is
        return reason
    if record.cancelled_as_orch_stopped:
        return (f"cancelled by orch: {record.cancel_requested}; the next orch sweep into this "
                "directory submits it again")
    if record.cancel_requested:
        return f"cancelled by orch ({record.cancel_requested})"
    match = re.search(r"\bby (\d+)\b", reason or "")
    who = ""
    if match:
        try:
            who = f" by user {pwd.getpwuid(int(match.group(1))).pw_name} (uid {match.group(1)})"
        except KeyError:
            who = f" by uid {match.group(1)}"
    return (f"cancelled outside orch{who}: not by orch cancel, Ctrl-C or the hang watch "
            f"(scancel, an administrator){f'; {reason}' if reason else ''}; not retried")


def describe(states: dict[str, tuple[bool, bool, str]] = rundir.STATES) -> str:
    """The states a run can end in, for --help and docs/tutorials/first-sweep.md."""
    return "; ".join(f"{s}: {m}" for s, (end, _, m) in states.items() if end)


def history_rows(record: JobRecord) -> list[dict]:
    """A record's history as plain rows (orch status --history / --format json)."""
    return [e.model_dump(mode="json") for e in record.history]
