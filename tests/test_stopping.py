"""orchestrator/runs/stopping.py: SIGTERM and SIGHUP stop orch as Ctrl-C does, a signal never cuts
a submission from its ledger entry, and the handlers found are put back (the signals are sent
to this process: each is handled before os.kill returns to the main thread's next bytecode)."""

from __future__ import annotations

import os
import signal

import pytest

from orchestrator.runs import stopping


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143),
                                              (signal.SIGHUP, 129)])
def test_each_signal_stops_as_ctrl_c_with_its_exit_code(signum, code):
    # A signal this process inherited as ignored (SIGHUP under nohup) stays ignored: handled()
    # leaves it alone. The case starts from the default disposition then.
    inherited = signal.getsignal(signum)
    if inherited is signal.SIG_IGN:
        signal.signal(signum, signal.SIG_DFL)
    try:
        before = signal.getsignal(signum)
        with stopping.handled(), pytest.raises(KeyboardInterrupt) as caught:
            os.kill(os.getpid(), signum)
            signal.sigtimedwait([], 0)  # a bytecode boundary: the handler has run by now
        assert isinstance(caught.value, stopping.Stopped)
        assert stopping.signum_of(caught.value) == signum
        assert stopping.exit_code(signum) == code
        assert signal.getsignal(signum) is before  # put back for the rest of the process
    finally:
        signal.signal(signum, inherited)


def test_plain_keyboard_interrupt_is_ctrl_c():
    assert stopping.signum_of(KeyboardInterrupt()) == signal.SIGINT


def test_a_signal_inside_a_deferred_step_is_raised_when_it_ends():
    done = []
    with stopping.handled(), pytest.raises(stopping.Stopped) as caught:
        with stopping.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 0)
            done.append("submitted and recorded")
        done.append("after the step")  # never reached
    assert done == ["submitted and recorded"]
    assert caught.value.signum == signal.SIGTERM


def test_an_ignored_signal_stays_ignored():
    """nohup ignores SIGHUP: orch under it goes on when the session drops."""
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with stopping.handled():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGHUP)
            signal.sigtimedwait([], 0)
    finally:
        signal.signal(signal.SIGHUP, before)


def test_while_stopping_a_repeated_sigterm_is_ignored_and_ctrl_c_is_not():
    with stopping.handled():
        stopping.stopping()
        os.kill(os.getpid(), signal.SIGTERM)
        signal.sigtimedwait([], 0)
        with pytest.raises(stopping.Stopped):
            os.kill(os.getpid(), signal.SIGINT)
            signal.sigtimedwait([], 0)
