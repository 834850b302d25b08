"""A rank of the ``trainer`` mode: start the user's training script as torchrun would and read
its figures from its output (orchestrator/plan/trainer.py says how; stdlib only).

The script inherits the rank's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT from launch.sh) with ``PYTHONUNBUFFERED=1``, so each line reaches the rank when it
is printed, and runs in the trainer file's directory. Its output is copied to the rank's own
(``ranks/rank-<k>.out``). Each throughput figure is one native-window interval: from the
previous figure (or the script's start) to its line, holding ``rate x seconds`` samples (a
job-wide rate is recorded by task 0 alone, so the job's samples are counted once). The footer
keeps every figure (``script``), the last loss, and the script's exit status: a script that
fails fails the rank, with its last line.
"""

import json
import os
import re
import resource
import subprocess
import sys
import time

from orchestrator.rankside import harness

from .mode import MODE

METRICS = ("throughput", "loss", "tokens_per_s", "mfu")


def figure(pattern, line):
    """The number ``pattern`` (a trainer file's regex or json key, with its scale) finds in
    ``line``, or None."""
    if pattern is None:
        return None
    value = None
    if pattern.get("regex") is not None:
        match = re.search(pattern["regex"], line)
        if match:
            value = match.group(1)
    elif line.lstrip().startswith("{"):
        try:
            value = json.loads(line)
            for part in pattern["json"].split("."):
                value = value[part]
        except (ValueError, KeyError, TypeError, IndexError):
            value = None
    try:
        number = float(str(value).replace(",", "")) if value is not None else None
    except ValueError:
        return None
    return None if number is None or number != number else number * pattern.get("scale", 1.0)


def command(spec, args, info):
    """The script's argv: ``python`` is this environment's, ``{batch_size}``, ``{nodes}``,
    ``{ranks}`` the run's."""
    values = {"{batch_size}": str(args.batch_size), "{ranks}": str(info.world_size),
              "{nodes}": os.environ.get("SLURM_NNODES", "")}
    argv = [sys.executable if i == 0 and a == "python" else a
            for i, a in enumerate(spec["command"])]
    for key, value in values.items():
        argv = [a.replace(key, value) for a in argv]
    return argv


class Intervals:
    """The throughput figures as the run's native-window intervals."""

    def __init__(self, s, spec, records):
        self.s = s
        self.spec = spec
        self.records = records
        self.last = time.time()
        self.count = 0

    def add(self, rate):
        now = time.time()
        per_sample = self.spec["tokens_per_sample"] if self.spec["throughput"][
            "unit"] == "tokens/s" else 1
        samples = rate / per_sample * (now - self.last)
        self.s.log_interval(self.last, now - self.last, samples,
                            warmup=self.count < self.s.args.warmup)
        self.count += 1
        self.last = now


def main(argv=None):
    p = harness.mode_parser(MODE)
    args = p.parse_args(argv)
    if args.script is None:  # protocol.RANK_ARGS: optional for the other modes
        p.error("the following arguments are required: --script")
    with harness.rank_log(args, framework="torch", mode="trainer") as s:
        spec = json.loads(args.script)
        info = s.info
        records = spec["throughput"]["scope"] == "rank" or info.rank == 0
        seen = {name: [] for name in METRICS}
        intervals = Intervals(s, spec, records)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        argv = command(spec, args, info)
        s.footer["script"] = {"name": spec["name"], "command": argv, "figures": seen,
                               "scope": spec["throughput"]["scope"],
                               "unit": spec["throughput"]["unit"],
                               "tokens_per_sample": spec.get("tokens_per_sample")}
        proc = subprocess.Popen(argv, cwd=spec["cwd"] or None, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
        last = ""
        for line in proc.stdout:
            sys.stdout.write(line)
            last = line.strip() or last
            for name in METRICS:
                value = figure(spec.get(name), line)
                if value is None:
                    continue
                seen[name].append(value)
                if name == "throughput" and records:
                    intervals.add(value)
        code = proc.wait()
        sys.stdout.flush()
        s.footer["script"]["exit_code"] = code
        # The script's memory, not this wrapper's: the largest child's peak RSS (Linux: KiB).
        children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        s.footer["peak_rss_bytes"] = max(children, harness.peak_rss_bytes())
        if seen["loss"]:
            s.footer["loss"] = seen["loss"][-1]
        if code != 0:
            raise RuntimeError(f"the training script exited with {code}: {last[:300]}")
        if records and not seen["throughput"]:
            raise RuntimeError("no line of the training script's output matched the "
                               f"throughput pattern {spec['throughput']}: last line {last[:200]}")


if __name__ == "__main__":
    main()
