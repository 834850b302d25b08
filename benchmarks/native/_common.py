"""What every native script shares (benchmarks/fidelity.py says the contract): orch's rank
arguments, and the one JSON line a training task prints. Stdlib only, valid Python 3.6 (CNTK)."""

import argparse
import importlib
import json
import sys
import time


def parse_args(extra=()):
    """orch's rank arguments that a native loop needs; every other one is ignored. ``extra``:
    (flag, default) pairs of mode options the native loop reads (e.g. ("--backend", "gloo")).

    Unless ``--bare`` is given, it then imports orch's rank module of this script's mode
    without using anything of it (:func:`as_orch_rank_process`)."""
    p = argparse.ArgumentParser()
    p.add_argument("--bare", action="store_true",
                   help="leave orch's rank modules unimported (see as_orch_rank_process)")
    p.add_argument("--model", required=True)
    p.add_argument("--dataset", default="cifar")
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--iters", type=int, required=True)
    p.add_argument("--warmup", type=int, default=5)
    for flag, default in extra:
        p.add_argument(flag, default=default)
    args, _ = p.parse_known_args()
    if not args.bare:
        as_orch_rank_process()
    return args


def as_orch_rank_process():
    """Import the modules orch's rank process has imported when it builds its model (the
    mode's rank module, hence the harness), and use none of them.

    Why: on this machine a step's time depends on the process's memory layout, which the
    modules a process imported change. mpi-ssgd's native loop ran LeNet-5 at 8,400-10,400
    samples/s, and at 10,000-11,600 with these imports alone (6 alternated pairs, every pair
    faster): the same gap, 15-25%, as between the native loop and orch's rank. A fidelity
    ratio should hold what orch's measurement does to the framework's loop, not which modules
    sit in the process; ``--bare`` (benchmarks.fidelity --bare-native) shows the difference."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name.startswith("benchmarks.native."):
        importlib.import_module(f"orchestrator.modes.{spec.name.rsplit('.', 1)[1]}.rank")


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
