"""What every native script shares (benchmarks/fidelity.py says the contract): orch's rank
arguments, and the one JSON line a training task prints. Stdlib only, valid Python 3.6 (CNTK)."""

import argparse
import json
import sys
import time


def parse_args(extra=()):
    """orch's rank arguments that a native loop needs; every other one is ignored. ``extra``:
    (flag, default) pairs of mode options the native loop reads (e.g. ("--backend", "gloo"))."""
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--dataset", default="cifar")
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--iters", type=int, required=True)
    p.add_argument("--warmup", type=int, default=5)
    for flag, default in extra:
        p.add_argument(flag, default=default)
    args, _ = p.parse_known_args()
    return args


class Clock:
    """Wall clock of the measured steps: call ``step(k)`` before step k; ``done()`` after.

    It also keeps when each measured step began (one ``perf_counter`` and a list append, well
    under a microsecond): ``steps()`` gives the steps' durations, boundary to boundary, which
    benchmarks.fidelity compares with orch's at the median, a figure a burst of load on the
    shared machine moves far less than the window's rate."""

    def __init__(self, warmup):
        self.warmup = warmup
        self.start = None
        self.end = None
        self.marks = []

    def step(self, k):
        now = time.perf_counter()
        if k == self.warmup:
            self.start = now
        if k >= self.warmup:
            self.marks.append(now)

    def done(self):
        self.end = time.perf_counter()
        return self.end - self.start

    def steps(self):
        """Each measured step's wall seconds (the last one ends at ``done()``)."""
        marks = [*self.marks, self.end]  # (no itertools.pairwise on CNTK's Python 3.6)
        return [marks[i + 1] - marks[i] for i in range(len(marks) - 1)]


def report(mode, rank, samples, seconds, steps=None):
    """The task's one JSON line: its measured samples and wall seconds, and with ``steps``
    (each measured step's seconds) their median."""
    line = {"native": mode, "rank": rank, "samples": samples, "seconds": seconds,
            "samples_per_s": samples / seconds}
    if steps:
        line["step_median"] = sorted(steps)[len(steps) // 2]
    print(json.dumps(line))
    sys.stdout.flush()
