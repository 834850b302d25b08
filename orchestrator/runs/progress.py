"""Live progress of a sweep that waits: runs done / running / pending / failed, elapsed time
and an estimate of the time left.

On a terminal it is one line that rewrites itself (rich ``Live``); elsewhere (CI logs, a file)
it prints plain lines, only when the counts change or once every ``PLAIN_EVERY_S``, so a log
stays readable. The estimate is this session's pace (elapsed time per run ended, which counts
runs that ran side by side) times the runs left; there is none before the first run ends.
"""

from __future__ import annotations

import time
from typing import TextIO

from .rundir import TERMINAL

PLAIN_EVERY_S = 60.0
# Every way a run can end other than COMPLETED (rundir.STATES, the one table).
FAILED_STATES = tuple(sorted(TERMINAL - {"COMPLETED"}))


def fmt_s(seconds: float) -> str:
    seconds = round(seconds)
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s" if m else f"{s}s"


class SweepProgress:
    """Counts of a sweep's runs by state, shown as they change.

    ``total``: runs of the sweep; ``done_before``/``failed_before``: runs already terminal
    before this session (skipped), counted as done but not in the estimate.
    """

    def __init__(self, total: int, done_before: int = 0, failed_before: int = 0,
                 stream: TextIO | None = None, live: bool | None = None,
                 clock=time.monotonic) -> None:
        import sys

        self.total, self.before, self.failed_before = total, done_before, failed_before
        self.stream = stream or sys.stderr
        self.live = self.stream.isatty() if live is None else live
        self.clock = clock
        self.started = clock()
        self.states: dict[str, str] = {}
        self._last_line = ""
        self._last_print = -1e18
        self._live = None

    # -- counts --------------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        states = list(self.states.values())
        done = sum(s == "COMPLETED" for s in states)
        failed = sum(s in FAILED_STATES for s in states)
        running = sum(s == "RUNNING" for s in states)
        pending = self.total - self.before - done - failed - running
        return {"done": done + self.before - self.failed_before,
                "failed": failed + self.failed_before, "running": running,
                "pending": max(pending, 0)}

    def estimate_s(self) -> float | None:
        """Seconds left at this session's pace so far: elapsed / runs ended x runs left."""
        ended = sum(s == "COMPLETED" or s in FAILED_STATES for s in self.states.values())
        left = self.total - self.before - ended
        if ended == 0:
            return None
        if left <= 0:
            return 0.0
        return (self.clock() - self.started) / ended * left

    def line(self) -> str:
        c = self.counts()
        elapsed = self.clock() - self.started
        eta = self.estimate_s()
        left = ("estimate: after the first run ends" if eta is None
                else "all finished" if eta == 0 else f"~{fmt_s(eta)} left")
        return (f"progress: {c['done'] + c['failed']}/{self.total} finished "
                f"({c['done']} done, {c['failed']} failed), {c['running']} running, "
                f"{c['pending']} pending; {fmt_s(elapsed)} elapsed, {left}")

    # -- showing -------------------------------------------------------------------------------

    def update(self, states: dict[str, str]) -> None:
        """The current orch state of runs of this session (run id -> state)."""
        self.states.update(states)
        self.show()

    def show(self) -> None:
        line = self.line()
        if self.live:
            if self._live is None:
                from rich.console import Console
                from rich.live import Live

                self._live = Live(line, console=Console(file=self.stream),
                                  refresh_per_second=2, transient=False)
                self._live.start()
            else:
                self._live.update(line)
            return
        counts_part = line.split(";")[0]
        now = self.clock()
        if counts_part != self._last_line or now - self._last_print >= PLAIN_EVERY_S:
            self.stream.write(line + "\n")
            self.stream.flush()
            self._last_line, self._last_print = counts_part, now

    def close(self) -> None:
        if self._live is not None:
            self._live.update(self.line())
            self._live.stop()
            self._live = None
