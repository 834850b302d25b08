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
    """Wall clock of the measured steps: call ``step(k)`` before step k; ``done()`` after."""

    def __init__(self, warmup):
        self.warmup = warmup
        self.start = None
        self.end = None

    def step(self, k):
        if k == self.warmup:
            self.start = time.perf_counter()

    def done(self):
        self.end = time.perf_counter()
        return self.end - self.start


def report(mode, rank, samples, seconds):
    """The task's one JSON line: its measured samples and wall seconds."""
    print(json.dumps({"native": mode, "rank": rank, "samples": samples, "seconds": seconds,
                      "samples_per_s": samples / seconds}))
    sys.stdout.flush()
