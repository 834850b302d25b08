"""Slurm: submitit's SlurmExecutor submits the rendered job.sbatch; squeue/sacct follow it.

submitit starts one controller task (``use_srun=False``) that executes the same job.sbatch a
user could ``sbatch`` by hand; the job's real geometry (nodes, tasks per node) goes to Slurm
through ``additional_parameters`` so that submitit still waits for one result, while the
script's own ``srun``/``mpirun`` starts the ranks. That is how orch supports MPI-style
launchers, which submitit alone does clumsily.

States: one map from Slurm's job states to orch's (rundir.STATES: PENDING, RUNNING,
COMPLETED, FAILED, CANCELLED, TIMEOUT, and NODE_FAIL, BOOT_FAIL, PREEMPTED, OUT_OF_MEMORY kept
as Slurm names them: the first three are retried, excluding the failed nodes). A scheduler's
COMPLETED is then checked against the rank logs.

Queries that do not grow with the sweep: one ``squeue`` per poll for every job of the sweep
(plain runs, packs' allocations, array tasks; the job's nodes come with it), one ``sacct`` for
what slurmctld forgot. Where accounting is off, failing or too slow (``sacct`` exits non-zero or
times out), states come from squeue alone, said once on stderr; a job squeue no longer lists is
then judged by its run directory (job-times.json). submitit's own SlurmInfoWatcher, which calls
sacct, is never asked: orch reads a submitted job's id and nothing else from submitit.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

from ... import protocol
from ...errors import SubmitError
from ...jobscript import job_function
from .. import base
from ..base import Scheduler, register_scheduler
from . import options, packed, timelimit

# The one table of Slurm job states (squeue(1)/sacct(1) "JOB STATE CODES", Slurm 20.11-24.11)
# and orch's state for each. Transient states map to PENDING/RUNNING; anything not listed is
# FAILED with its word as the reason. tests/test_slurm_states.py parses recorded outputs.
SLURM_STATES = {
    "PENDING": "PENDING", "CONFIGURING": "PENDING", "REQUEUED": "PENDING",
    "REQUEUE_FED": "PENDING", "REQUEUE_HOLD": "PENDING", "RESV_DEL_HOLD": "PENDING",
    "RUNNING": "RUNNING", "COMPLETING": "RUNNING", "STAGE_OUT": "RUNNING",
    "SUSPENDED": "RUNNING", "RESIZING": "RUNNING", "SIGNALING": "RUNNING", "STOPPED": "RUNNING",
    "COMPLETED": "COMPLETED",
    "FAILED": "FAILED", "SPECIAL_EXIT": "FAILED",
    "NODE_FAIL": "NODE_FAIL", "BOOT_FAIL": "BOOT_FAIL", "OUT_OF_MEMORY": "OUT_OF_MEMORY",
    "PREEMPTED": "PREEMPTED",
    "CANCELLED": "CANCELLED", "REVOKED": "CANCELLED",
    "TIMEOUT": "TIMEOUT", "DEADLINE": "TIMEOUT",
}  # fmt: skip
# Job states in which a job is held still on purpose (scontrol suspend, sbcast stop).
PAUSED = ("SUSPENDED", "STOPPED")


def slurm_state(raw: str) -> tuple[str, str]:
    """orch's (state, reason) for a state field of squeue/sacct.

    The field may carry more than the word: sacct writes ``CANCELLED by 1000`` (the uid that
    cancelled), and without ``--parsable`` cuts long words to ``OUT_OF_ME+``; a ``+`` prefix
    that names exactly one known state is read as that state. The reason names Slurm's word
    wherever orch's state alone would hide it (NODE_FAIL, PREEMPTED, DEADLINE, ...).
    """
    text = raw.strip()
    word = text.split()[0] if text else ""
    if word.endswith("+") and word not in SLURM_STATES:
        matches = [k for k in SLURM_STATES if k.startswith(word[:-1])]
        word = matches[0] if len(matches) == 1 else word
    state = SLURM_STATES.get(word)
    if state is None:
        return "FAILED", f"Slurm state {text or '(empty)'}"
    if word in PAUSED:  # running, yet making no progress by design: the hang watch waits
        return state, f"Slurm state {word}"
    if state in ("PENDING", "RUNNING", "COMPLETED") or (text == state and state != "FAILED"):
        return state, ""
    return state, f"Slurm state {word if text.split()[0] != word else text}"


class Job(NamedTuple):
    """One job as squeue or sacct lists it."""

    name: str
    state: str  # Slurm's state field, as written (slurm_state reads it)
    nodes: str = ""  # its NodeList (a host list expression), "" while it has none


def parse_jobs(text: str) -> dict[str, Job]:
    """job id -> Job from ``squeue -o %i|%j|%T|%N`` or ``sacct -P -o
    JobID,JobName,State,NodeList`` (the node field optional). Job steps (``123.batch``,
    ``123.0``), blank and error lines are skipped; an array's tasks not started yet, which sacct
    lists as one range (``123_[0-2,5%2]``), become one entry per task; a later line for the same
    id (a requeued job's newer record) wins."""
    seen: dict[str, Job] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) not in (3, 4) or not parts[2].strip() or not parts[0].strip():
            continue
        job_id = parts[0].strip()
        if "." in job_id:  # a step of a job, not the job
            continue
        nodes = parts[3].strip() if len(parts) == 4 else ""
        job = Job(parts[1], parts[2].strip(),
                  "" if nodes in ("None assigned", "(null)") else nodes)
        for one in _array_tasks(job_id):
            seen[one] = job
    return seen


def _array_tasks(job_id: str) -> list[str]:
    """``123_[0-2,5%2]`` -> 123_0, 123_1, 123_2, 123_5; any other id as it is (unreadable
    ranges: none)."""
    m = re.fullmatch(r"(\d+)_\[([0-9,-]+)(%\d+)?\]", job_id)
    if not m:
        return [] if "[" in job_id else [job_id]
    out = []
    for part in m.group(2).split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return []
        out += [f"{m.group(1)}_{k}" for k in range(int(lo), int(hi or lo) + 1)]
    return out


@register_scheduler
class SlurmScheduler(Scheduler):
    """A Slurm cluster: submitit's SlurmExecutor; state from squeue/sacct, cancel with scancel."""

    name = "slurm"
    hand_note = "(paths are absolute; rank logs go to ranks/)"
    excludes_nodes = True
    packs = True

    def __init__(self) -> None:
        self._nodes: dict[str, str] = {}  # job id -> NodeList, as the last poll listed it

    def check(self, partition) -> None:
        """Fail before anything is submitted if Slurm or the partition cannot be reached."""
        try:
            res = subprocess.run(["sinfo", "-h", "-p", partition.name, "-o", "%P %D"],
                                 capture_output=True, text=True, timeout=30)
        except (FileNotFoundError, subprocess.TimeoutExpired) as exc:
            raise SubmitError(f"Slurm is not reachable from here (sinfo: {exc})") from None
        if res.returncode != 0:
            raise SubmitError(f"Slurm is not reachable: {res.stderr.strip() or res.stdout}")
        if not res.stdout.strip():
            raise SubmitError(f"Slurm has no partition '{partition.name}' (sinfo -p shows none)")
        check_accounting()

    def nodes_on_loopback(self, partition: str) -> bool:
        """All of the partition's nodes have a loopback NodeAddr: ranks on them talk over lo."""
        import socket

        addrs = set(_sinfo_nodes(partition, "%o"))
        try:
            return bool(addrs) and all(socket.gethostbyname(a).startswith("127.") for a in addrs)
        except OSError:
            return False

    def nodes_are_this_machine(self, partition: str) -> bool:
        """The partition's nodes run on this machine's kernel: on loopback, or (nodes in network
        namespaces of their own, the test cluster) booted the same second as this kernel with
        its release. Their PATH is this machine's, so a missing runtime is caught here."""
        if self.nodes_on_loopback(partition):
            return True
        names = _sinfo_nodes(partition, "%N")
        if not names:
            return False
        try:
            res = subprocess.run(["scontrol", "-o", "show", "node", ",".join(sorted(set(names)))],
                                 capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return False
        return res.returncode == 0 and same_kernel(res.stdout, _this_kernel())

    def job_options(self, job: base.Job, partition) -> dict[str, str | bool]:
        """The job's sbatch options (options.sbatch_options), as its #SBATCH lines say them."""
        return options.sbatch_options(job, partition)

    def request_lines(self, job: base.Job, partition) -> list[str]:
        return options.lines(options.sbatch_options(job, partition))

    def step_options(self, job: base.Job, partition, packed: bool = False) -> str:
        """srun's CPUs and binding for the job's steps (options.srun_options)."""
        return options.srun_options(job, partition, packed)

    def agent_binding(self, partition) -> str:
        return " ".join(options.binding_options(partition, agent=True))

    def submit(self, run, rdir: Path, partition, job: base.Job) -> str:
        """A run's job: submitit's job script runs jobscript.job_function, which runs job.sbatch.

        Two ways into sbatch remain, on purpose, both with options from options.sbatch_options.
        A run goes through submitit because its job is a Python controller,
        jobscript.job_function, that the local site runs too: it times job.sbatch, kills its
        process group at the time limit and refuses a second execution of an attempt. A pack's
        or array's script (submit_script) starts many runs and is their controller itself, in
        shell, so sbatch takes it as it is.
        """
        import submitit

        opts = options.sbatch_options(job, partition, via="submitit")
        executor = submitit.SlurmExecutor(folder=rdir / "submitit", python=sys.executable)
        executor.update_parameters(
            job_name=job.name, partition=partition.name, use_srun=False,
            stderr_to_stdout=True, additional_parameters=opts,
        )
        try:
            submitted = executor.submit(job_function, str(rdir), run.time_limit_min * 60 + 60)
        except Exception as exc:
            raise SubmitError(f"sbatch refused run {run.run_id}: {exc}") from None
        return str(submitted.job_id)

    def max_time_min(self, partition) -> int | None:
        """The partition's time limit from sinfo (``%l``: infinite, MM, HH:MM:SS,
        D-HH:MM:SS); None where it has none or sinfo cannot say."""
        try:
            res = subprocess.run(["sinfo", "-h", "-p", partition.name, "-o", "%l"],
                                 capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError):
            return None
        words = res.stdout.split()
        if res.returncode != 0 or not words:
            return None
        try:
            return timelimit.minutes(words[0])
        except ValueError:  # a word sinfo shows that is no time
            return None

    def submit_script(self, script: Path, name: str) -> str:
        """A pack's or array's job script goes to sbatch as it is (orch sweep --pack/--array):
        its #SBATCH lines are the whole request (submit says why runs go another way)."""
        return packed.submit_script(script, name)

    def poll(self, records, rdirs) -> dict[str, tuple[str, str]]:
        """State of each run's job: one squeue for all of them, sacct for what it forgot.

        slurmctld is authoritative for live jobs and for finished ones it still remembers
        (MinJobAge); slurmdbd lags, and shows a running job as a placeholder named
        'allocation' in state PENDING. Only jobs slurmctld has forgotten come from sacct. Runs
        of a pack or an array (``record.pack``) are told apart in packed. Where squeue cannot
        answer, no run's state is given (each keeps its last).
        """
        seen = _listing(sorted({r.job_id for r in records if r.job_id}))
        if seen is None:
            return {}
        self._nodes.update({k: j.nodes for k, j in seen.items() if j.nodes})
        kinds: dict[str, tuple[list, list]] = {"": ([], []), protocol.PACK_PREFIX: ([], []),
                                                protocol.ARRAY_PREFIX: ([], [])}
        for record, rdir in zip(records, rdirs, strict=True):
            pack = getattr(record, "pack", None) or ""
            kind = next((k for k in kinds if k and pack.startswith(k)), "")
            kinds[kind][0].append(record)
            kinds[kind][1].append(rdir)
        listed = {k: (j.name, j.state) for k, j in seen.items()}
        out: dict[str, tuple[str, str]] = {}
        if kinds[protocol.PACK_PREFIX][0]:
            allocs = dict(listed)
            if not accounting_usable():  # an allocation squeue forgot has ended
                allocs.update({r.job_id: (r.pack, FORGOTTEN)
                               for r in kinds[protocol.PACK_PREFIX][0]
                               if r.job_id and r.job_id not in listed})
            out.update(packed.poll_packs(*kinds[protocol.PACK_PREFIX],
                                         jobs=lambda ids: {i: allocs[i] for i in ids
                                                           if i in allocs},
                                         slurm_state=slurm_state, sacct=sacct))
        for kind, name_of in ((protocol.ARRAY_PREFIX, lambda r: r.pack),
                              ("", lambda r: r.run_id)):
            recs, dirs = kinds[kind]
            out.update(packed.named_states(recs, listed, name_of, slurm_state))
            if not accounting_usable():  # what squeue forgot, sacct cannot tell
                out.update({r.run_id: from_run_dir(r.job_id, d)
                            for r, d in zip(recs, dirs, strict=True)
                            if r.job_id and r.job_id not in listed and d is not None})
        return out

    def cancel(self, record, rdir: Path) -> None:
        if (getattr(record, "pack", None) or "").startswith(protocol.PACK_PREFIX):
            packed.cancel_packed(record, rdir)  # its step, not the whole allocation
            return
        if record.job_id:  # an array run's JOBID_k cancels that array task alone
            subprocess.run(["scancel", record.job_id], capture_output=True, timeout=30)

    def nodes(self, records) -> dict[str, list[str]]:
        """run_id -> the job's nodes (squeue's NodeList, else sacct's), expanded: as the last
        poll saw them, else from one query."""
        ids = {r.job_id: r.run_id for r in records if r.job_id}
        if not ids:
            return {}
        found = {i: self._nodes[i] for i in ids if self._nodes.get(i)}  # from the last poll
        missing = [i for i in ids if i not in found]
        if missing:
            found.update({k: j.nodes for k, j in (_listing(missing) or {}).items()})
        return {ids[i]: expand_hostlist(v) for i, v in found.items()
                if i in ids and expand_hostlist(v)}

    def failed_nodes(self, record, rdir: Path) -> tuple[list[str], str]:
        """Which of the job's nodes failed, from three witnesses: the node events slurmdbd
        recorded while the job ran (a node set DOWN/DRAIN/FAIL; ReturnToService may have
        brought it back since), the nodes sinfo shows down or drained now, and srun's 'Node
        failure on X' line in the job output."""
        if not record.job_id:
            return [], ""
        info = sacct(["-X", "-n", "-P", "-j", record.job_id, "-o",
                      "JobIDRaw,Start,End,NodeList"]) or ""
        start = end = ""
        nodes = list(record.nodes or [])
        for line in info.splitlines():
            parts = line.split("|")
            if len(parts) == 4 and parts[0] == record.job_id:
                start, end = parts[1], parts[2]
                nodes = nodes or expand_hostlist(parts[3])
        evidence: dict[str, str] = {}
        if nodes and start and start != "Unknown" and accounting_usable():
            events = _run(["sacctmgr", "-n", "-P", "show", "event", f"nodes={','.join(nodes)}",
                           f"start={start}", "format=NodeName,TimeStart,State,Reason"])
            for node, when, state, reason in _events(events):
                if (node in nodes and when >= start and (end in ("", "Unknown") or when <= end)
                        and state.upper().startswith(("DOWN", "DRAIN", "FAIL"))):
                    evidence.setdefault(node, f"{node} {state} at {when}"
                                              + (f" ({reason})" if reason else ""))
        if nodes:
            for line in _run(["sinfo", "-h", "-N", "-n", ",".join(nodes), "-o",
                              "%N|%t"]).splitlines():
                node, _, state = line.partition("|")
                if node in nodes and state.rstrip("*~#$@+-^!%").lower() in _BAD_NODE_STATES:
                    evidence.setdefault(node, f"{node} is {state} now")
        for out in sorted(rdir.glob("slurm-*.out")):
            try:
                text = out.read_text(errors="replace")
            except OSError:
                continue
            for node in _NODE_FAILURE.findall(text):
                evidence.setdefault(node, f"srun: Node failure on {node}")
        return sorted(evidence), "; ".join(evidence[n] for n in sorted(evidence))


_BAD_NODE_STATES = {"down", "drain", "drng", "drained", "draining", "fail", "failg", "boot_fail",
                    "maint", "no_respond", "npc", "unk"}
_NODE_FAILURE = re.compile(r"srun: error: Node failure on (\S+)")


def _run(cmd: list[str]) -> str:
    """A Slurm command's output; empty where it fails (these witnesses are best effort)."""
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return ""
    return res.stdout if res.returncode == 0 else ""


def _events(text: str) -> list[tuple[str, str, str, str]]:
    out = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) >= 4:
            out.append((parts[0], parts[1], parts[2], "|".join(parts[3:])))
    return out


def expand_hostlist(text: str) -> list[str]:
    """Slurm's host list expression -> host names: ``node[1-3,5],gpu[01-02]`` -> node1, node2,
    node3, node5, gpu01, gpu02 (zero padding kept). Unexpandable text yields nothing."""
    hosts: list[str] = []
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", text.strip()):
        m = re.fullmatch(r"([^\[\]]*)\[([^\]]+)\]([^\[\]]*)", item)
        if not m:
            if re.fullmatch(r"[\w.-]+", item):
                hosts.append(item)
            continue
        prefix, ranges, suffix = m.groups()
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                return []
            for k in range(int(lo), int(hi or lo) + 1):
                hosts.append(f"{prefix}{k:0{len(lo)}d}{suffix}")
    return hosts


# sacct's own words where AccountingStorageType=accounting_storage/none, on stderr, exit status
# 1: SchedMD/slurm src/sacct/options.c (tag slurm-22-05-8-1, line 1046; the same in 24.11).
ACCOUNTING_DISABLED = "Slurm accounting storage is disabled"
# The state word of an allocation slurmctld no longer lists where accounting cannot say how it
# ended (no Slurm word: slurm_state reads it as FAILED; its runs are cut off, submitted again).
FORGOTTEN = "FORGOTTEN"
# A state query slower than this counts as failed (a slurmdbd that answers in minutes).
QUERY_TIMEOUT_S = 30


class _Accounting:
    """Whether sacct answers, learnt once per process (one sweep, one orch status)."""

    usable = True
    probed = False


def accounting_usable() -> bool:
    return _Accounting.usable


def check_accounting() -> None:
    """Ask sacct once before a sweep submits (an empty query), so that a site without
    accounting is said at the start, not when a job has been forgotten."""
    if not _Accounting.probed:
        _Accounting.probed = True
        sacct(["-X", "-n", "-P", "-o", "JobIDRaw", "-S", "now", "-E", "now"])


def sacct(args: list[str]) -> str | None:
    """sacct's output, or None where accounting cannot answer (disabled, failing, too slow,
    not installed): from then on this process asks squeue alone, and says so once."""
    if not _Accounting.usable:
        return None
    try:
        res = subprocess.run(["sacct", *args], capture_output=True, text=True,
                             timeout=QUERY_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return _no_accounting(f"sacct took more than {QUERY_TIMEOUT_S} s")
    except OSError as exc:
        return _no_accounting(f"sacct cannot run ({exc.strerror or exc})")
    if res.returncode != 0:
        said = (res.stderr.strip() or res.stdout.strip()).splitlines()
        return _no_accounting(f"sacct says '{said[0] if said else ''}' "
                              f"(exit status {res.returncode})")
    return res.stdout


def _no_accounting(why: str) -> None:
    if _Accounting.usable:
        _Accounting.usable = False
        print(f"orch: {why}: job states come from squeue alone; a job squeue no longer lists "
              f"is judged by its run directory", file=sys.stderr, flush=True)


def _base(job_id: str) -> str:
    """The job id squeue and sacct are asked for: an array task's array (``123_4`` -> 123)."""
    return job_id.split("_")[0]


def _listing(ids: list[str]) -> dict[str, Job] | None:
    """job id -> Job of the given jobs and array tasks (``123_4``; every task of an array
    asked for): one squeue for their jobs and arrays, then one sacct for the jobs and arrays
    of those slurmctld forgot. An array task that ended is forgotten by slurmctld
    (MinJobAge) while its siblings still run, so what is missing is judged per task, not per
    array. None where squeue cannot answer."""
    if not ids:
        return {}
    seen = _squeue(sorted({_base(i) for i in ids}))
    if seen is None:
        return None
    missing = sorted({_base(i) for i in ids if i not in seen})
    if missing:
        for key, job in parse_jobs(sacct(["-X", "-n", "-P", "-j", ",".join(missing), "-o",
                                          "JobID,JobName,State,NodeList"]) or "").items():
            seen.setdefault(key, job)
    return seen


def _squeue(ids: list[str]) -> dict[str, Job] | None:
    """slurmctld's jobs among ``ids`` (array tasks one per line: -r); None where squeue fails
    (slurmctld down, a timeout), {} where it knows none of them."""
    try:
        res = subprocess.run(["squeue", "-h", "-r", "--states=all", "-j", ",".join(ids), "-o",
                              "%i|%j|%T|%N"], capture_output=True, text=True,
                             timeout=QUERY_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    if res.returncode != 0:  # one id it does not know is an error; several are not
        return {} if "Invalid job id" in res.stderr else None
    return parse_jobs(res.stdout)


def from_run_dir(job_id: str, rdir: Path) -> tuple[str, str]:
    """A job Slurm no longer lists and accounting cannot tell, judged by its run directory:
    job-times.json is written when job.sbatch ends (with its exit status where a script of
    orch's wrote it); COMPLETED leaves the verdict to the rank logs."""
    try:
        times = json.loads((rdir / protocol.JOB_TIMES_FILE).read_text())
    except (OSError, ValueError):
        return "FAILED", (f"Slurm no longer lists job {job_id} and has no accounting to say "
                          f"how it ended; it left no {protocol.JOB_TIMES_FILE}")
    status = times.get("exit_status", 0) if isinstance(times, dict) else 0
    if status == 0:
        return "COMPLETED", ""
    if status == packed.TIMEOUT_STATUS:
        return "TIMEOUT", ""
    return "FAILED", f"job.sbatch exited with status {status}"


@functools.cache
def slurm_config() -> dict[str, str]:
    """``scontrol show config`` as key -> value, read once per process (a sweep); empty where
    scontrol cannot answer."""
    text = _run(["scontrol", "show", "config"])
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and " " not in key.strip():
            out[key.strip()] = value.strip()
    return out


def max_array_size() -> int | None:
    """Slurm's MaxArraySize (an array's task ids go up to one less), None where unknown."""
    value = slurm_config().get("MaxArraySize", "")
    return int(value) if value.isdigit() else None


def _sinfo_nodes(partition: str, field: str) -> list[str]:
    """One sinfo field of each node of the partition; [] where sinfo cannot say."""
    try:
        res = subprocess.run(["sinfo", "-h", "-N", "-p", partition, "-o", field],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return []
    return res.stdout.split() if res.returncode == 0 else []


def _this_kernel() -> tuple[int, str]:
    """(boot time in epoch seconds, release) of this machine's kernel."""
    import os

    with open("/proc/stat") as f:
        btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    return btime, os.uname().release


def same_kernel(show_node: str, kernel: tuple[int, str]) -> bool:
    """Every node of ``scontrol -o show node`` reports this kernel: its boot time (to the
    second either side: slurmd rounds it) and its release in OS=."""
    import datetime

    btime, release = kernel
    lines = [ln for ln in show_node.splitlines() if ln.startswith("NodeName=")]
    for line in lines:
        boot = re.search(r"\bBootTime=(\S+)", line)
        os_ = re.search(r"\bOS=Linux (\S+)", line)
        if not boot or not os_ or os_.group(1) != release:
            return False
        try:
            when = datetime.datetime.fromisoformat(boot.group(1)).timestamp()
        except ValueError:
            return False
        if abs(when - btime) > 1:
            return False
    return bool(lines)
