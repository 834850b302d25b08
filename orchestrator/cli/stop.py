"""What orch does when it is stopped: Ctrl-C, SIGTERM or SIGHUP (orchestrator/runs/stopping.py).

Every command goes through :func:`stopped` (``orch sweep`` with its own options, the others
from the ``orch`` group): the jobs this process submitted or waited for that are still
unfinished (a sweep's, its pre-flight's, netbench's: ``execute.followed``) are

* left running where the scheduler runs them without orch (Slurm): each one's ledger notes
  that orch stopped and that nothing watches it now (no hang watch until an ``orch sweep`` on
  the same directory waits for it again), and orch prints how to follow or cancel them. Ctrl-C
  alone offers a second Ctrl-C within 5 s to cancel them; ``--cancel-on-interrupt`` cancels
  at once;
* cancelled where they would not outlive orch usefully (the local site: backends/local.py
  says why); the next ``orch sweep`` into the directory submits them again.

Every line goes to stderr and to the sweep's log (``<out>/sweep.log``). orch exits with 128 +
the signal's number: 130 (Ctrl-C), 143 (SIGTERM), 129 (SIGHUP), as a shell reports them.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import typer

from ..runs import stopping
from ._common import err_console

# Ctrl-C on a sweep whose jobs go on: a second one within this many seconds cancels them.
SECOND_CTRL_C_S = 5.0


def stopped(exc: BaseException, command: str, cancel: bool = False,
            log: Path | None = None) -> NoReturn:
    """Say what the stopped command leaves running (or cancel it, see the module docstring),
    note it in the ledgers and the sweep's log, and exit 128 + the signal's number."""
    signum = stopping.signum_of(exc)
    stopping.stopping()
    what = "Ctrl-C" if signum == signal.SIGINT else stopping.name_of(signum)
    head = f"orch {command} stopped by {what}".replace("  ", " ")
    try:
        groups = _live()
        say = _sayer(log, [out for out, _ in groups])
        say(f"{head} (pid {os.getpid()} on {socket.gethostname()})")
        if not groups:
            say(f"{head}: no job of it is running")
        for (out, scheduler), runs in groups.items():
            _left(out, scheduler, runs, what, cancel, signum, say)
    except KeyboardInterrupt:  # Ctrl-C again while saying it: no more, no traceback
        pass
    raise typer.Exit(stopping.exit_code(signum))


def _live() -> dict[tuple[Path, str], list[tuple[str, str]]]:
    """(sweep directory, scheduler) -> [(run id, job id)] of the followed runs still
    unfinished, in run order."""
    from .. import execute
    from ..runs import rundir

    groups: dict[tuple[Path, str], list[tuple[str, str]]] = {}
    for rdir, scheduler in sorted(execute.followed()):
        try:
            record = rundir.read_record(rdir)
        except rundir.DamagedFile:
            continue
        if record and record.state not in rundir.TERMINAL and record.job_id:
            groups.setdefault((rdir.parent, scheduler), []).append((record.run_id,
                                                                    record.job_id))
    return groups


def _sayer(log: Path | None, outs: list[Path]) -> Callable[[str], None]:
    """A line to stderr and to the sweep's log (``log``: the sweep directory whose log it
    is; else each directory with a job left)."""
    from ..runs import rundir

    logs = [log] if log is not None else sorted(set(outs))

    def say(line: str) -> None:
        err_console.print(line, highlight=False, markup=False)
        for out in logs:
            rundir.log_line(out, line)

    return say


def _left(out: Path, scheduler: str, runs: list[tuple[str, str]], what: str, cancel: bool,
          signum: int, say: Callable[[str], None]) -> None:
    """One sweep directory's unfinished jobs: left running (their ledgers noting it) or
    cancelled."""
    from .. import backends, execute
    from ..runs import rundir

    sched = backends.scheduler(scheduler)
    listed = ", ".join(f"{rid} (job {job})" for rid, job in runs)
    if sched.outlives_orch and not cancel:
        say(f"{len(runs)} job(s) still running: {listed}")
        say(f"follow them with: orch status {out}  (then orch gather {out}); cancel them "
            f"with: orch cancel {out}; orch sweep --out {out} waits for them again")
        cancel = signum == signal.SIGINT and _second_ctrl_c(say)
        if not cancel:
            with stopping.deferred():  # every ledger noted, even on Ctrl-C again
                _note(out, [rid for rid, _ in runs], what)
            return
    why = f"{rundir.ORCH_STOPPED} {what}"
    if not sched.outlives_orch:
        say(f"cancelling {len(runs)} job(s) of the {scheduler} site: its ranks are this "
            f"machine's processes, which nothing would follow once orch stops: {listed}")
        done = _cancel_whole(out, scheduler, [rid for rid, _ in runs], why)
    else:
        done = execute.cancel(out, scheduler, [rid for rid, _ in runs], why=why)
    say(f"cancelled {len(done)} job(s): {', '.join(done) or '-'}; the next orch sweep --out "
        f"{out} submits them again")


def _cancel_whole(out: Path, scheduler: str, run_ids: list[str], why: str) -> list[str]:
    """execute.cancel, which a Ctrl-C more does not cut short: no rank is left behind (a
    local cancel ends in a bounded time, jobscript.KILL_GRACE_S)."""
    from .. import execute

    done: list[str] = []
    try:
        with stopping.deferred():
            done = execute.cancel(out, scheduler, run_ids, why=why)
    except KeyboardInterrupt:
        pass
    return done


def _second_ctrl_c(say: Callable[[str], None]) -> bool:
    """Ctrl-C alone: a second one within SECOND_CTRL_C_S cancels the jobs left running."""
    say(f"press Ctrl-C again within {SECOND_CTRL_C_S:.0f} s to cancel them now")
    try:
        time.sleep(SECOND_CTRL_C_S)
    except KeyboardInterrupt:
        return True
    return False


def _note(out: Path, run_ids: list[str], what: str) -> None:
    """Each left job's ledger: orch stopped, nothing follows the job now (its reason, and an
    event of its history)."""
    from ..runs import rundir

    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    for run_id in run_ids:
        rdir = out / run_id
        try:
            record = rundir.read_record(rdir)
        except rundir.DamagedFile:
            continue
        if record is None or record.state in rundir.TERMINAL:
            continue
        rundir.write_record(rdir, record.model_copy(update={"reason": (
            f"{rundir.ORCH_STOPPED} {what} at {when}: the job goes on, watched by no orch "
            f"process (no hang watch) until orch sweep --out {out} waits for it again")}))
