"""orch stopped by a signal: SIGTERM and SIGHUP are taken as Ctrl-C is.

SIGTERM is what ``timeout``, a CI job's time limit, systemd and a batch system send; SIGHUP
what an ssh session to a login node sends as it drops, the commonest way a sweep's
controller dies. While :func:`handled` is active, each of them (and SIGINT, Ctrl-C) raises
:class:`Stopped`, a ``KeyboardInterrupt`` that knows its signal, so the one code path that
handles Ctrl-C (cli/stop.py: say what is left running, note it in the ledgers, exit
128 + the signal's number) handles them all. A signal that was ignored when orch started
(``nohup`` ignores SIGHUP; a suite run in the background ignores SIGINT) stays ignored.

:func:`deferred` holds a signal back over a step that must not be cut in two: a job submitted
but its id not yet in the ledger would be a job nobody can name or cancel.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_state = {"depth": 0, "pending": None, "repeats": False}


class Stopped(KeyboardInterrupt):
    """orch was asked to stop by ``signum``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def signum_of(exc: BaseException) -> int:
    """The signal that stopped orch (a plain KeyboardInterrupt is Ctrl-C, SIGINT)."""
    return getattr(exc, "signum", signal.SIGINT)


def name_of(signum: int) -> str:
    return signal.Signals(signum).name


def exit_code(signum: int) -> int:
    """128 + the signal's number, as a shell reports a command a signal ended: 130, 143, 129."""
    return 128 + int(signum)


def _raise(signum: int, _frame) -> None:
    if _state["repeats"] and signum != signal.SIGINT:
        return  # being stopped already: a repeated SIGTERM/SIGHUP changes nothing
    if _state["depth"]:
        _state["pending"] = _state["pending"] or signum
        return
    raise Stopped(signum)


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """Within: SIGINT, SIGTERM and SIGHUP raise :class:`Stopped`; the handlers found are put
    back after (tests call orch in-process). Only the main thread can set handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {}
    for signum in HANDLED:
        found = signal.getsignal(signum)
        if found is not signal.SIG_IGN:
            before[signum] = found
            signal.signal(signum, _raise)
    _state.update(depth=0, pending=None, repeats=False)
    try:
        yield
    finally:
        for signum, found in before.items():
            signal.signal(signum, found if found is not None else signal.SIG_DFL)


def stopping() -> None:
    """orch is now handling a stop: a further SIGTERM or SIGHUP is noted and ignored (the
    sender may follow with SIGKILL); Ctrl-C still raises (a second Ctrl-C cancels)."""
    _state["repeats"] = True


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """A step no signal may cut in two: one arriving inside is raised when it ends."""
    _state["depth"] += 1
    try:
        yield
    finally:
        _state["depth"] -= 1
        pending = _state["pending"]
        if not _state["depth"] and pending is not None:
            _state["pending"] = None
            raise Stopped(pending)
