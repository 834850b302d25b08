"""Did a run really succeed? The verdict from its rank logs, and the reason when it did not.

A scheduler's COMPLETED only means the job script exited 0. A run is COMPLETED for orch when
every task wrote a header, every measured iteration and an ``ok`` footer, no value that
cannot be (a negative, NaN or infinite duration, a sample count below 1 where a rank trains,
an iteration past the declared count, a footer that contradicts the records), and (for
synchronous modes) all training ranks ended with the same parameter checksum. Anything else is
FAILED with a reason taken from the logs, so a failure is data in the result set, not a guess.

This sits with the run directory (it is how a run is finished, :func:`execute.finalize`),
below the result set that merges many runs (gather, results).
"""

from __future__ import annotations

import math
import re
import signal
from pathlib import Path

from .. import modes, protocol
from ..protocol import RankLog
from ..spec.api import Run

CHECKSUM_RTOL = 1e-6


def read_run_logs(rdir: Path) -> list[RankLog]:
    """Every rank log of a run directory, by task number (one parser: protocol)."""
    return [protocol.read_rank_log(path)
            for _, path in protocol.rank_logs(rdir / protocol.RANKS_DIR)]


def tail(path: Path, lines: int = 12) -> str:
    if not path.exists():
        return ""
    text = path.read_text(errors="replace").rstrip().splitlines()
    return "\n".join(text[-lines:])


def verdict(run: Run, rdir: Path, logs: list[RankLog]) -> tuple[bool, str | None]:
    """(ok, reason): does the run's data prove it completed?

    When several ranks failed, the reason is the root cause: the rank whose own error came
    first (the others typically died of a closed connection, or were stopped by the launcher).
    """
    by_rank = {log.rank: log for log in logs}
    mode = modes.get(run.mode)
    tasks = run.tasks()
    trains = [k for k, t in enumerate(tasks) if t.role in mode.logging_roles]
    problems: list[tuple[int, float, str]] = []  # (kind, when, message): lowest sorts first
    for rank, task in enumerate(tasks):
        label = f"rank {rank}" if task.role == "worker" else f"rank {rank} ({task.role})"
        log = by_rank.get(rank)
        if log is None:
            problems.append((2, 0.0, f"{label}: no log{_excerpt(rdir, rank)}"))
        elif log.footer is None:
            problems.append((1, 0.0, f"{label}: log ends without a footer (killed?)"
                                     f"{_excerpt(rdir, rank)}"))
        elif log.footer.get("status") != "ok":
            problems.append((0, log.footer.get("ended_at") or 0.0,
                             rank_error(label, log, rdir / protocol.RANKS_DIR
                                        / protocol.rank_out_name(rank))))
        elif violations := impossible_values(log, rank in trains and mode.trains):
            problems.append((3, 0.0, f"{label}: {violations}"))
        elif rank in trains and run.epochs is not None:
            message = _epochs_problem(run, log)
            if message:
                problems.append((4, 0.0, f"{label}: {message}"))
        elif rank in trains and mode.phases:
            problems += [(4, 0.0, f"{label}: {message}")
                         for message in window_shortfalls(log, run.iters)]
        elif rank in trains and rank == 0 and not any(not rec.get("warmup")
                                                     for rec in log.iters):
            # A user's script (a mode without phases): how many figures it prints is its
            # own; task 0 reads a job-wide rate, so it must have one past the warm-up.
            problems.append((3, 0.0, f"{label}: no measured figure of the script's "
                                     f"throughput (all {len(log.iters)} were warm-up: lower "
                                     "--warmup)"))
    first = first_failure(rdir, len(tasks))
    if problems and first is not None:
        rank, how = first
        for i, (_kind, when, message) in enumerate(problems):
            if message.startswith((f"rank {rank}:", f"rank {rank} (")):
                head, sep, rest = message.partition("\n")
                problems[i] = (-1, when, f"{head} [first to fail: {how}]{sep}{rest}")
    if problems:
        return False, min(problems)[2]
    if mode.is_synchronous(run.options) and len(trains) > 1:
        sums = {r: by_rank[r].footer.get("param_checksum") for r in trains}
        if all(isinstance(s, (int, float)) for s in sums.values()):
            first, ref = trains[0], sums[trains[0]]
            for r, s in sums.items():
                if not math.isclose(s, ref, rel_tol=CHECKSUM_RTOL, abs_tol=1e-9):
                    return False, (f"ranks out of sync: parameter checksum of rank {r} is {s!r}, "
                                   f"rank {first} has {ref!r}")
    return True, None


# The start of the reason of a run some of whose logged values cannot be.
INVARIANT = "invariant violated"


def impossible_values(log: RankLog, trains: bool) -> str | None:
    """What a rank's log holds that cannot be, in words, or None: its records' impossible
    values and its footer's contradictions (protocol.impossible, protocol.contradictions;
    the records are left out of the result set), the first named with its line and value;
    and, for a rank that ``trains``, iterations that moved no sample at all."""
    found = list(log.violations)
    if trains and log.iters and not any(rec.get("samples") for rec in log.iters):
        found.append(f"samples = 0 in every iteration (the first: iter {log.iters[0]['iter']})"
                     ": a rank that trains moves samples")
    if not found:
        return None
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return f"{INVARIANT}: {found[0]}{more}"


def _epochs_problem(run: Run, log: RankLog) -> str | None:
    """An epoch run is complete with all its epochs, or fewer when the last one reached the
    target accuracy."""
    done = [e["epoch"] for e in log.epochs]
    if done != list(range(1, len(done) + 1)) or not done:
        return f"epochs logged {done or 'none'}, expected 1..{run.epochs}"
    if len(done) == run.epochs:
        return None
    target = run.target_accuracy
    if target is not None and log.epochs[-1]["test_acc"] >= target and len(done) < run.epochs:
        return None
    return f"{len(done)} of {run.epochs} epochs logged"


def window_shortfalls(log: RankLog, iters: int) -> list[str]:
    """What a training rank's log lacks: each window it logged must hold ``iters`` measured
    iterations (the breakdown window always; the native throughput window where the mode has
    one, protocol.WINDOWS: a record without ``window`` is a breakdown record)."""
    counts = {protocol.WINDOW_BREAKDOWN: 0}
    for rec in log.iters:
        window = rec.get(protocol.WINDOW, protocol.WINDOW_BREAKDOWN)
        counts[window] = counts.get(window, 0) + (0 if rec.get("warmup") else 1)
    out = []
    for window in protocol.WINDOWS:
        if window in counts and counts[window] != iters:
            where = "" if window == protocol.WINDOW_BREAKDOWN else f" in the {window} window"
            out.append(f"{counts[window]} of {iters} measured iterations logged{where}")
    return out


# A Python traceback's first line; after the last one, the first line that is not indented is
# the exception's own (``Type: message``): the frames above it are indented.
_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


def exception_line(text: str) -> str | None:
    """The exception's own line (``Type: message``) in a traceback or its last lines, None when
    ``text`` holds no traceback. Reads the footers of logs written before the harness recorded
    the line apart (``protocol.EXCEPTION``), and rank output when a rank wrote no footer."""
    lines = text.splitlines()
    headers = [i for i, line in enumerate(lines) if line.startswith(_TRACEBACK)]
    if not headers and not any(line.startswith("  File ") for line in lines):
        return None
    after = lines[headers[-1] + 1:] if headers else lines
    for line in after:
        if line.strip() and not line[0].isspace() and not line.startswith(_CHAINED):
            return line.strip()
    return None


def rank_error(label: str, log: RankLog, out: Path) -> str:
    """A rank that failed on an exception, as a person reads it: the first line names the rank,
    the exception's own line and the node (``rank 0: ModuleNotFoundError: No module named
    'mpi4py' (on node1)``); the next lines hold the rest of a multi-line message and where the
    whole traceback is (the rank's output), or the traceback's last lines when that file is
    not reachable from here."""
    footer, header = log.footer or {}, log.header or {}
    error = (footer.get("error") or "failed").strip()
    exception = footer.get(protocol.EXCEPTION) or exception_line(error)
    if not exception:
        return f"{label}: {error}"
    first, _, more = str(exception).strip().partition("\n")
    node = header.get("node") or header.get("host")
    on = f" (on {node})" if node else ""
    where = f"traceback: {out}" if out.exists() else f"traceback ends:\n{error}"
    return "\n".join([f"{label}: {first}{on}", *more.splitlines(), where])


def _excerpt(rdir: Path, rank: int) -> str:
    """The tail of a rank's output, led by its exception's own line where it holds a traceback."""
    text = tail(rdir / protocol.RANKS_DIR / protocol.rank_out_name(rank), 6)
    if not text:
        return ""
    exception = exception_line(text)
    return (f" ({exception})" if exception else "") + f"; its output ends:\n{text}"


def failure_reason(rdir: Path, run: Run, logs: list[RankLog]) -> str:
    """Best explanation of a failed job: a rank's own error, else the job output's tail. A
    rank that left neither a log nor output never started (the job script, the launcher or
    the job's controller failed first): the job output's tail follows, where the cause is."""
    ok, reason = verdict(run, rdir, logs)
    if not ok and reason:
        if not reason.endswith(": no log"):
            return reason
        output = job_output(rdir)
        return f"{reason}; the job's output ends:\n{output}" if output else reason
    return job_output(rdir) or "job failed without output"


# A job's own output, newest job first: what job.sbatch printed (jobscript.job_function writes
# it), then what the job's controller printed (submitit's log: an error before job.sbatch ran).
JOB_OUTPUTS = ("slurm-*.out", "submitit/*_0_log.out")


def job_output(rdir: Path) -> str:
    """The tail of the latest job's first output of :data:`JOB_OUTPUTS` that holds any: a
    retry's, never the first attempt's beside it."""
    for pattern in JOB_OUTPUTS:
        latest = max(rdir.glob(pattern), key=_job_number, default=None)
        text = tail(latest) if latest is not None else ""
        if text:
            return text
    return ""


def _job_number(path: Path) -> int:
    """The job id in a job output's name (slurm-<id>.out, <id>_0_log.out)."""
    found = re.search(r"\d+", path.name)
    return int(found.group()) if found else -1


_SRUN_TASK = re.compile(r"^srun: error: \S+: tasks? (\d+)(?:[-,]\d+)*: (.+)$", re.M)


def first_failure(rdir: Path, ntasks: int) -> tuple[int, str] | None:
    """The task that failed first, by time, and how: what the local launcher recorded
    (ranks/first-failure: task, exit status), else srun's first 'task N: ...' error line in the
    job output (srun reports tasks as they end). None when neither says."""
    path = rdir / protocol.RANKS_DIR / "first-failure"
    try:
        task, status = path.read_text().split()[:2]
        rank, code = int(task), int(status)
    except (OSError, ValueError):
        rank = None
    if rank is not None and 0 <= rank < ntasks:
        if code > 128:
            try:
                name = signal.Signals(code - 128).name
            except ValueError:
                name = f"signal {code - 128}"
            return rank, f"killed by {name}"
        return rank, f"exited with status {code}"
    for out in sorted(rdir.glob("slurm-*.out")):
        try:
            match = _SRUN_TASK.search(out.read_text(errors="replace"))
        except OSError:
            continue
        if match and int(match.group(1)) < ntasks:
            return int(match.group(1)), match.group(2).strip()
    return None
