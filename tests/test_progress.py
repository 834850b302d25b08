"""Live progress of a waiting sweep: plain lines off a terminal, a rich Live line on one."""

from __future__ import annotations

import io

from orchestrator.runs.progress import SweepProgress, fmt_s


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def test_plain_lines_only_when_counts_change_or_each_minute():
    clock, out = Clock(), io.StringIO()
    p = SweepProgress(total=5, done_before=1, stream=out, live=False, clock=clock)
    p.update({"a": "PENDING", "b": "PENDING", "c": "PENDING", "d": "PENDING"})
    clock.t += 5
    p.update({"a": "PENDING", "b": "PENDING", "c": "PENDING", "d": "PENDING"})  # no change
    clock.t += 5
    p.update({"a": "RUNNING", "b": "RUNNING"})
    clock.t += 20
    p.update({"a": "COMPLETED", "b": "FAILED"})
    clock.t += 61
    p.update({})  # a minute without change: one line all the same
    p.close()
    lines = out.getvalue().splitlines()
    assert lines == [
        "progress: 1/5 finished (1 done, 0 failed), 0 running, 4 pending; 0s elapsed, "
        "estimate: after the first run ends",
        "progress: 1/5 finished (1 done, 0 failed), 2 running, 2 pending; 10s elapsed, "
        "estimate: after the first run ends",
        "progress: 3/5 finished (2 done, 1 failed), 0 running, 2 pending; 30s elapsed, "
        "~30s left",
        "progress: 3/5 finished (2 done, 1 failed), 0 running, 2 pending; 1m31s elapsed, "
        "~1m31s left",
    ]
    assert "\x1b" not in out.getvalue()  # no terminal codes in a log


def test_failed_before_counts_as_failed_not_done():
    p = SweepProgress(total=3, done_before=2, failed_before=1, stream=io.StringIO(), live=False)
    assert p.counts() == {"done": 1, "failed": 1, "running": 0, "pending": 1}


def test_live_line_on_a_terminal():
    out = io.StringIO()
    p = SweepProgress(total=2, stream=out, live=True)
    p.update({"a": "RUNNING", "b": "PENDING"})
    p.update({"a": "COMPLETED", "b": "RUNNING"})
    p.close()
    assert "1/2 finished (1 done, 0 failed), 1 running, 0 pending" in out.getvalue()


def test_fmt_s():
    assert [fmt_s(x) for x in (0, 59.6, 61, 3725)] == ["0s", "1m00s", "1m01s", "1h02m05s"]
