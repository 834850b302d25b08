"""The rank-log contract, defined once: phase names and order, record kinds, file names, parser.

Ranks write this (``rankside.harness``); gather, provenance and the report read it. Both sides
import this module, so it is stdlib only and valid on every Python a rank may run (3.6 for
CNTK): no dataclasses, no ``from __future__ import annotations``, no evaluated annotations.

A rank log, ``<run dir>/ranks/rank-<task>.jsonl``, is one JSON object per line:

* a ``header`` (who, where, versions, environment),
* one ``iter`` record per iteration (warm-up included and flagged) with ``iter``, ``warmup``,
  ``t_start`` (epoch seconds), ``t_iter``, ``samples`` and the phases below,
* with ``--epochs`` (time to accuracy), one ``epoch`` record per epoch: ``epoch`` (from 1),
  ``t_start``, ``t_epoch`` (seconds of training, evaluation excluded), ``t_eval``,
  ``train_loss`` and ``train_acc`` (over the samples this rank trained on), ``test_acc``
  (held-out accuracy of the whole held-out split, the same on every rank), ``samples``,
* a ``footer`` (status ``ok`` or ``error``, peak memory, parameter checksum, versions,
  ``fabric``: the evidence of which interfaces the rank's bytes crossed, see below, and
  ``device_metrics``: what its device did in the measured native window, see below).

The header's ``binding``: ``cuda_visible_devices``, ``gpu_index``, ``gpu_pci_bus_id``,
``gpu_uuid``, ``gpu_name`` (NVML, where the rank sees a GPU; else null and ``gpu_reason`` says
why), ``cpu_affinity`` (a cpulist such as ``0-3,8``) and ``numa_nodes`` (those CPUs' NUMA
nodes). The footer's ``device_metrics``
(rankside.sampler.aggregate): ``source`` (``nvml``, ``rapl`` or null), ``device_id`` (ranks
with the same one on a host share the device), ``samples``, ``seconds``, ``window_samples``
(training samples of the window), ``gpu_util_mean``, ``mem_util_mean``, ``cpu_util_mean``,
``sm_clock_mean_mhz``, ``mem_used_max_bytes``, ``power_mean_w``, ``power_max_w``,
``temp_max_c``, ``pcie_tx_mean_kb_s``/``pcie_rx_mean_kb_s``, ``nvlink_tx_kib``/
``nvlink_rx_kib``, ``energy_j`` with ``energy_basis`` (``counter``: the energy counter's
difference; ``integrated power``), ``throttle_reasons`` (names seen), ``reason`` (why a part is
missing) and ``unread`` (NVML calls that failed, and why). ``device_metrics_reason`` in the
footer says why nothing of the device could be read.

The footer's ``fabric`` object (``rankside.fabric.record``; absent where it could not be read):
``schema``, ``basis`` (``window``: the measured window; ``lifetime``: a task without one, from
its start), ``seconds``, ``host``, ``netns`` (kernel boot id + network namespace inode: ranks
with the same one share interface counters), ``tcp`` (per interface this process's TCP
connections used: ``iface``, ``type``, ``tx``/``rx`` payload bytes, ``conns``, ``peers``,
``host_local``), ``netdev`` and ``ib`` (the host's interface and InfiniBand port counters over
the same span, ``{name: {"tx", "rx"}}`` in bytes), ``ifaces`` (name -> type).

Phases (seconds, after the source papers; see docs/measurements.md), in the order of one iteration:
``t_io`` input not hidden by prefetch, ``t_h2d`` host-to-device copy, ``t_f`` forward and loss,
``t_b`` backward compute, ``t_comm`` gradient communication NOT hidden behind backward,
``t_u`` update. ``t_comm_total`` is all communication the workload can see.

Two windows per run (throughput and breakdown), told apart by an ``iter`` record's ``window``:

* ``native`` — the throughput window: the framework's own idiomatic training step, unmodified,
  timed only by wall clock per iteration (``t_iter``; no phase fields). samples/s, speedup and
  efficiency come from it. A framework whose loop only queues its steps (MXNet, TF-PS) is
  drained in chunks; its records carry ``queued: true`` and equal shares of their chunk's wall
  time (rankside.harness.Session.native_iterations).
* ``breakdown`` — the phase-instrumented window (the phases above). A record without
  ``window`` is a breakdown record (logs written before the two windows existed).

Iteration numbers run on across both windows (native first), so ``iter`` stays unique within a
rank log. Each window has its own warm-up. A footer's ``comm_total_reason`` says why the mode
records no ``t_comm_total`` (the framework does not let it be seen); never copy ``t_comm``.
"""

import json
import math
import os
import re

LOG_SCHEMA = 1

PHASES = ("t_io", "t_h2d", "t_f", "t_b", "t_comm", "t_u")
T_COMM_TOTAL = "t_comm_total"
DURATIONS = (*PHASES, T_COMM_TOTAL)  # an iteration's durations besides t_iter, in seconds

HEADER = "header"
ITER = "iter"
EPOCH = "epoch"
FOOTER = "footer"
RECORD_KINDS = (HEADER, ITER, EPOCH, FOOTER)
EPOCH_FIELDS = ("t_start", "t_epoch", "t_eval", "train_loss", "train_acc", "test_acc")
WINDOW = "window"
WINDOW_NATIVE = "native"
WINDOW_BREAKDOWN = "breakdown"
WINDOWS = (WINDOW_NATIVE, WINDOW_BREAKDOWN)
COMM_TOTAL_REASON = "comm_total_reason"  # footer: why no t_comm_total is recorded
STATUS_OK = "ok"
FABRIC = "fabric"  # the footer field holding a rank's fabric evidence
# What the device did in the measured window (rankside.sampler.aggregate: means, maxima,
# energy and its basis, throttle reasons) and, where nothing could be read, why.
DEVICE_METRICS = "device_metrics"
DEVICE_METRICS_REASON = "device_metrics_reason"
BINDING = "binding"  # the header field: CUDA_VISIBLE_DEVICES, GPU, CPU affinity, NUMA nodes
CPU_SHARE = "cpu_share"  # the header field: the cores a rank may use (cgroup quota, affinity)
STATUS_ERROR = "error"
# The footer field of a rank that failed on an exception: its own line (type: message), what
# a person reads first; the footer's ``error`` keeps the traceback's last lines, and the
# rank's output (rank_out_name) the whole traceback.
EXCEPTION = "exception"

# Files of a run directory (docs/architecture.md): the Run record, the ledger entry, the
# job's timing, provenance, and the ranks' own directory.
RUN_FILE = "run.json"
JOB_FILE = "job.json"
JOB_TIMES_FILE = "job-times.json"
PROVENANCE_FILE = "provenance.json"
RANKS_DIR = "ranks"
ATTEMPTS_DIR = "attempts"  # earlier attempts of the run, moved aside (rundir.py)
TRACE_FILE = "trace.csv"  # layer-wise trace (second paper's format), in RANKS_DIR

# Packed sweeps (orch sweep --pack/--array): the pack or array job scripts live in
# <sweep>/PACKS_DIR/<pack>/; in each run directory the pack script writes STEP_STARTED_FILE
# when it starts the run (job id, hosts) and STEP_FILE (the run's Slurm step, JOBID.STEP);
# `orch cancel` of a run whose step has not started leaves CANCEL_FILE, so the pack skips it.
# A run that the end of its allocation cut off has a ledger reason starting with CUT_OFF:
# the next sweep into the same directory submits it again.
PACKS_DIR = "packs"
PACK_SCRIPT = "pack.sbatch"
ARRAY_SCRIPT = "array.sbatch"
# <sweep>/PACKS_DIR/<pack>/: one line as each run starts and ends (which runs ran beside it)
PACK_STEPS_LOG = "steps.log"
STEP_STARTED_FILE = "step-started.json"
STEP_FILE = "step"
CANCEL_FILE = "cancel-requested"
CUT_OFF = "cut off"
PACK_PREFIX = "pack-"  # a pack's name (and Slurm job name): pack-<n>-<partition>-<tag>
ARRAY_PREFIX = "array-"  # an array's: array-<n>-<partition>-<tag>

_RANK_LOG = re.compile(r"^rank-(\d+)\.jsonl$")
# A rank log's lines are a few hundred bytes (an iteration), a few KB (header, footer): a line
# longer than this is a damaged write, reported and never read whole (docs/limits.md).
MAX_LINE_BYTES = 1 << 20

# ``--inject-failure RANK@ITER[:ACTION]``, a testing aid that makes a fault happen exactly where
# a test wants it, instead of a signal raced against a log: ``fail`` (the default) raises in the
# rank at that iteration, a program's fault, in every attempt; ``stop`` has the rank SIGSTOP
# itself there (a frozen process: no iteration, no heartbeat, as a hung node looks), a machine's
# fault, so in the run's first attempt only: a retry (the run directory holds ATTEMPTS_DIR) runs
# clean and shows the recovery; ``hold`` has the rank stop there but stay alive (it sleeps; its
# heartbeat goes on, as a rank waiting on a dead link or a peer does), also the first attempt's
# only: a run held still mid-window, for as long as a test needs to act on it.
FAILURE_ACTIONS = ("fail", "stop", "hold")
MACHINE_FAULTS = ("stop", "hold")
FAILURE_SPEC = re.compile(r"^(\d+)@(\d+)(?::(" + "|".join(FAILURE_ACTIONS) + r"))?$")


# The run's arguments to its ranks, declared once: the control plane renders them from the Run
# (render.workload_args -> :func:`rank_argv`), every rank parses them (rankside.harness ->
# :func:`add_rank_args`), so the two sides cannot disagree on a flag or a default.
REQUIRED = "required"  # a RankArg's default: none, the argument is always passed
YES_NO = "yes/no"  # a RankArg's type: a flag passed as yes or no (the rank reads the word)


class RankArg:
    """One argument of every rank: ``field`` is the Run field it carries (the flag is
    ``--field-with-dashes``); ``type`` int, float, str or YES_NO; ``default`` the rank's when
    the argument is not passed (REQUIRED: it always is). Passed when the run's value is set
    and differs from the default (so a run at the default renders the scripts it did before
    the argument existed), ``always`` also at the default, and only with ``needs``, another
    field, set. ``setting``: for an argument that is a sweep setting declared here alone, the
    keywords of its ``spec.settings.Setting`` (the rest derived: name, default, Run field),
    ``unit`` its result-set column's unit (results.columns)."""

    __slots__ = ("always", "default", "field", "help", "needs", "setting", "type", "unit")

    def __init__(self, field, type, default, help, needs=None, always=False, setting=None,
                 unit=""):
        self.field = field
        self.type = type
        self.default = default
        self.help = help
        self.needs = needs
        self.always = always
        self.setting = setting
        self.unit = unit

    @property
    def flag(self):
        return "--" + self.field.replace("_", "-")

    @property
    def conditional(self):
        """Passed for some runs only: after the mode options in a rank's command line."""
        return not (self.default == REQUIRED or self.always) or self.needs is not None

    def passed(self, values):
        value = values.get(self.field)
        if value is None or (self.needs is not None and values.get(self.needs) is None):
            return False
        return self.default == REQUIRED or self.always or value != self.default

    def text(self, value):
        if self.type == YES_NO:
            return "yes" if value else "no"
        return repr(value) if self.type is float else str(value)


RANK_ARGS = (
    RankArg("run_id", str, REQUIRED, "the run's id"),
    RankArg("log_dir", str, REQUIRED, "directory of the rank-<k>.jsonl files"),
    RankArg("model", str, REQUIRED, "the zoo's model, or FILE.py:FUNCTION"),
    RankArg("dataset", str, "cifar", "the dataset's geometry (zoo.DATASETS)", always=True),
    RankArg("batch_size", int, REQUIRED, "samples per rank"),
    RankArg("iters", int, REQUIRED, "measured iterations"),
    RankArg("warmup", int, 5, "iterations excluded from statistics", always=True),
    RankArg("inject_failure", str, None, "RANK@ITER[:fail|stop]: that rank raises there (fail) "
            "or, in the run's first attempt, SIGSTOPs itself there (stop); a testing aid"),
    RankArg("data", str, None, "on-disk data set in this mode's format; default: synthetic "
            "batches in memory"),
    RankArg("prefetch", YES_NO, True, "with --data: read ahead in a loader process (yes) or "
            "not (no)", needs="data", always=True),
    RankArg("classes", int, None, "the labelled data set's class count (its manifest's): the "
            "models' output width; default: the dataset's (cifar 10, imagenet 1000)"),
    RankArg("script", str, None, "a user's own training script (orchestrator.plan.trainer), as "
            "JSON"),
    RankArg("epochs", int, None, "with --data of a labelled set: train whole epochs of its "
            "training split, held-out accuracy after each (instead of --iters)"),
    RankArg("target_accuracy", float, None, "with --epochs: stop after the epoch whose "
            "held-out accuracy reaches it", needs="epochs"),
    RankArg("bucket_cap_mb", int, 25, "torch-ddp: gradient bucket size, MiB (DDP's "
            "bucket_cap_mb; its first bucket stays 1 MiB)", unit="MiB",
            setting=dict(type="count", dimension=True, zippable=True,
                         mode_attribute="first_bucket_bytes",  # the modes with DDP's buckets
                         help="torch-ddp: DDP's gradient bucket size in MiB (bucket_cap_mb), "
                         "comma-separated; default 25, DDP's.",
                         doc="torch-ddp: DDP's gradient bucket size, MiB (bucket_cap_mb)")),
)
RANK_DEFAULTS = {a.field: a.default for a in RANK_ARGS}


def rank_argv(values, options=()):
    """A rank's command line: the RANK_ARGS passed for ``values`` (field -> value), the mode
    options (``options``: their flags and values) after those passed for every run."""
    head = [a for a in RANK_ARGS if not a.conditional and a.passed(values)]
    tail = [a for a in RANK_ARGS if a.conditional and a.passed(values)]
    argv = []
    for a in head:
        argv += [a.flag, a.text(values[a.field])]
    argv += list(options)
    for a in tail:
        argv += [a.flag, a.text(values[a.field])]
    return argv


def add_rank_args(parser):
    """Add every RankArg to a rank's argparse parser (its default, or required)."""
    for a in RANK_ARGS:
        if a.type == YES_NO:
            parser.add_argument(a.flag, choices=("yes", "no"), default=a.text(a.default),
                                help=a.help)
        elif a.default == REQUIRED:
            parser.add_argument(a.flag, type=a.type, required=True, help=a.help)
        else:
            parser.add_argument(a.flag, type=a.type, default=a.default, help=a.help)
    return parser


def rank_log_name(task):
    """``rank-<task>.jsonl``: task k is SLURM_PROCID (or OMPI_COMM_WORLD_RANK) k."""
    return f"rank-{int(task)}.jsonl"


# A rank's heartbeat (``rank-<task>.beat`` in RANKS_DIR): a thread of the rank rewrites one
# fixed-width line (sequence number, epoch seconds, the fabric interfaces it found down) every
# HEARTBEAT_S. The control plane (orch's hang watch) notes when the line last changed by its
# own clock, so node clocks do not matter: a rank blocked in a collective still beats (its
# thread runs), a stopped process or a dead node does not; a rank whose link went down says so
# (it writes to the shared filesystem, not over that link). Written in place with pwrite,
# never truncated: a reader sees the old line or the new one.
HEARTBEAT_S = 1.0
HEARTBEAT_BYTES = 64
LINK_DOWN = "down="  # the heartbeat's third field: down=<iface>[,<iface>...], or "-"


def heartbeat_name(task):
    """``rank-<task>.beat``: the task's heartbeat file."""
    return f"rank-{int(task)}.beat"


def heartbeat_line(seq, when, down=()):
    """One heartbeat, always HEARTBEAT_BYTES wide: sequence, epoch seconds, and the rank's
    fabric interfaces that are down (``down=ib0``; ``-`` when none)."""
    links = (LINK_DOWN + ",".join(down))[:32] if down else "-"
    return f"{int(seq) % 10 ** 12:012d} {when:017.3f} {links:<32}\n".encode()


def heartbeat_links_down(line):
    """The interfaces a heartbeat line says are down ([] for none or an older line)."""
    fields = line.decode(errors="replace").split()
    if len(fields) >= 3 and fields[2].startswith(LINK_DOWN):
        return [n for n in fields[2][len(LINK_DOWN):].split(",") if n]
    return []


def device_log_name(task):
    """``device-<task>.jsonl``: the task's device samples in its measured window (a
    ``meta`` line, then one ``sample`` line every rankside.energy.SAMPLE_PERIOD_S), kept
    apart from its rank log so that log's timing is untouched. Not ``rank-<task>.*.jsonl``:
    every ``rank-*.jsonl`` glob (rank logs' digest, tests, users' scripts) would take it for a
    rank log."""
    return f"device-{int(task)}.jsonl"


def rank_out_name(task):
    """``rank-<task>.out``: the task's stdout and stderr."""
    return f"rank-{int(task)}.out"


def task_of(name):
    """The task number of a rank-log file name; None for anything else (a stray file)."""
    match = _RANK_LOG.match(os.path.basename(str(name)))
    return int(match.group(1)) if match else None


def rank_logs(ranks_dir):
    """The rank logs of a ranks directory as (task, path), by task number; other files (a
    stray ``rank-x.jsonl``) are not rank logs and are left out."""
    try:
        names = os.listdir(str(ranks_dir))
    except OSError:
        return []
    found = [(task_of(n), os.path.join(str(ranks_dir), n)) for n in names]
    return sorted((t, p) for t, p in found if t is not None)


class RankLog:
    """One rank's log as read back: header, iteration records, epoch records, footer, the
    problems met (unreadable lines) and the ``violations`` (records whose values cannot be,
    left out of ``iters``/``epochs``, and a footer that contradicts the records: see
    :func:`impossible` and :func:`contradictions`). Built by :func:`parse_lines` /
    :func:`read_rank_log`.

    ``segments``: read with ``raw_iters``, the iteration lines left unparsed (a list of
    :class:`Segment`; ``iters`` stays empty), or None where the log is not of the shape that
    allows it and must be read again without ``raw_iters``. ``path``: the file it came from."""

    __slots__ = ("epochs", "footer", "header", "iters", "path", "problems", "rank", "segments",
                 "violations")

    def __init__(self, rank, header=None, iters=None, footer=None, problems=None, epochs=None,
                 path=None, segments=(), violations=None):
        self.rank = rank
        self.header = header
        self.iters = [] if iters is None else iters
        self.footer = footer
        self.problems = [] if problems is None else problems
        self.epochs = [] if epochs is None else epochs
        self.path = path
        self.segments = segments if segments is None else list(segments)
        self.violations = [] if violations is None else violations

    def __repr__(self):
        return f"RankLog(rank={self.rank!r}, iters={len(self.iters)}, footer={bool(self.footer)})"


class Segment:
    """Newline-separated ``iter`` lines of one log, all of one shape: the keys of its first
    line (``keys``, in order), that line (``first``), the lines as bytes (``raw``)."""

    __slots__ = ("first", "keys", "raw")

    def __init__(self, raw, keys, first):
        self.raw = raw
        self.keys = keys
        self.first = first


def _number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _optional(value, check):
    return value is None or check(value)


def _str(value):
    return isinstance(value, str)


# The fields of a header and a footer that orch reads, and what each must be (None, absent or
# this): a line where one is something else is not a record (a damaged write), as a torn line.
HEADER_TYPES = {"host": _str, "node": _str, "node_rank": _int}
FOOTER_TYPES = {"status": _str, "error": _str, EXCEPTION: _str, "ended_at": _number,
                "peak_rss_bytes": _number, "peak_device_bytes": _number,
                "param_checksum": _number, COMM_TOTAL_REASON: _str, "t_compile": _number,
                "activation_dtype": _str,
                "comm_bucket_bytes": lambda v: isinstance(v, list) and all(map(_int, v)),
                "versions": lambda v: isinstance(v, dict),
                DEVICE_METRICS: lambda v: isinstance(v, dict),
                FABRIC: lambda v: isinstance(v, dict)}


def parse_record(line):
    """One log line -> a record dict, or None if it is not one (torn, not JSON, not an object
    with a known ``type``, an ``iter`` record without an integer ``iter`` or numeric
    ``t_start``/``t_iter``, with an unknown ``window``, a phase that is neither a number nor
    null, or a ``samples`` that is neither a whole number nor null; a header or footer with a
    field of :data:`HEADER_TYPES`/:data:`FOOTER_TYPES` of another type). Numbers may still be
    impossible (negative, NaN, infinite): :func:`impossible` says which."""
    try:
        rec = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):  # torn, binary, or absurdly deep
        return None
    if not isinstance(rec, dict) or rec.get("type") not in RECORD_KINDS:
        return None
    kind = rec["type"]
    if kind == ITER:
        return rec if _iter_shape(rec) else None
    if kind == EPOCH:
        ep = rec.get("epoch")
        if not _int(ep) or ep < 1 or not all(_number(rec.get(n)) for n in EPOCH_FIELDS):
            return None
        return rec
    types = HEADER_TYPES if kind == HEADER else FOOTER_TYPES
    if not all(_optional(rec.get(name), check) for name, check in types.items()):
        return None
    return rec


_NUMBER_TYPES = (int, float)


def _iter_shape(rec):
    """Whether an ``iter`` record has the fields and types every one has (parse_record).
    Exact type checks (a bool is no number): the slow path runs this on every line."""
    get = rec.get
    if type(get("iter")) is not int or type(get("t_start")) not in _NUMBER_TYPES \
            or type(get("t_iter")) not in _NUMBER_TYPES:
        return False
    if get(WINDOW, WINDOW_BREAKDOWN) not in WINDOWS:
        return False
    samples = get("samples")
    if samples is not None and type(samples) is not int:
        return False
    for name in DURATIONS:  # a phase a workload does not time may be absent
        value = get(name)
        if value is not None and type(value) not in _NUMBER_TYPES:
            return False
    return True


# What a record's numbers can be (:func:`impossible`). Iteration numbers run on across the two
# windows, each of the header's ``warmup + iters`` records; an epoch run's (``epoch`` in the
# record) are its steps, which the header does not count. MAX_COUNT (2**53, where doubles stop
# holding every whole number) bounds every number of a record: past it a number is a damaged
# write, never a count, a time (epoch seconds are ~1.8e9) or a duration.
ITER_WINDOWS = len(WINDOWS)
MAX_COUNT = 1 << 53


def iteration_limit(header):
    """How many iteration numbers a log may hold (0 .. limit - 1) by its header's declared
    ``warmup`` and ``iters``; :data:`MAX_COUNT` where the header does not say."""
    header = header or {}
    warmup, iters = header.get("warmup"), header.get("iters")
    if _int(warmup) and _int(iters) and warmup >= 0 and iters >= 0:
        return min(MAX_COUNT, ITER_WINDOWS * (warmup + iters))
    return MAX_COUNT


def _shown(value):
    """A value as the log spells it (JSON: NaN, Infinity, -1.5)."""
    return json.dumps(value)


# A diverged model's loss is NaN or infinite: a measurement, not a damaged write.
MAY_DIVERGE = ("train_loss",)


def impossible(rec, limit=MAX_COUNT):
    """Why an ``iter`` or ``epoch`` record's values cannot be, or None: a duration (``t_iter``,
    each phase, ``t_comm_total``; an epoch's ``t_epoch``, ``t_eval``) that is negative, NaN or
    infinite, or a ``t_iter`` of 0; a ``t_start`` or any other top-level number that is not
    finite (but a loss: :data:`MAY_DIVERGE`), or past :data:`MAX_COUNT` either way; a sample
    count below 0; an iteration number below 0, or past ``limit`` (:func:`iteration_limit`)
    outside an epoch run."""
    for name, value in rec.items():
        kind = type(value)
        if (kind is float or kind is int) and not -MAX_COUNT <= value <= MAX_COUNT \
                and name not in MAY_DIVERGE:  # NaN compares false: it is caught here too
            if kind is float and not math.isfinite(value):
                return f"{name} = {_shown(value)}: not a finite number"
            return f"{name} = {_shown(value)}: no count, time or duration is that large"
    if rec["type"] == EPOCH:
        negative = [n for n in ("t_epoch", "t_eval") if rec[n] < 0]
        return f"{negative[0]} = {_shown(rec[negative[0]])}: a duration is not negative" \
            if negative else None
    if rec["t_iter"] <= 0:
        return f"t_iter = {_shown(rec['t_iter'])}: an iteration takes time"
    for name in DURATIONS:
        value = rec.get(name)
        if value is not None and value < 0:
            return f"{name} = {_shown(value)}: a duration is not negative"
    samples = rec.get("samples")
    if samples is not None and samples < 0:
        return f"samples = {_shown(samples)}: not a sample count"
    bound = MAX_COUNT if "epoch" in rec else limit
    if rec["iter"] < 0:
        return f"iter = {_shown(rec['iter'])}: not an iteration number"
    if rec["iter"] >= bound:
        return f"iter = {rec['iter']}: past the {bound} iterations the header declares"
    return None


def parse_lines(lines, rank, name="rank log"):
    """Parse an iterable of lines (bytes or str) into a :class:`RankLog`. A line that is not
    a record is a problem (``<name>:<line>: unreadable line``), never an exception; None in
    place of a line stands for one longer than :data:`MAX_LINE_BYTES` (:func:`bounded_lines`).
    A record whose values cannot be (:func:`impossible`) is a violation
    (``<name>:<line>: <field> = <value>: <why>``) and left out, as is, in a log where some
    iteration moved samples, one that moved none; a footer that contradicts the records
    (:func:`contradictions`) is a violation too."""
    out = RankLog(rank=rank)
    records = []  # (line number, iter or epoch record)
    for lineno, line in enumerate(lines, 1):
        if line is None:
            out.problems.append(f"{name}:{lineno}: a line longer than "
                                f"{MAX_LINE_BYTES >> 20} MiB: a damaged log")
            continue
        if not line.strip():
            continue
        rec = parse_record(line)
        if rec is None:
            out.problems.append(f"{name}:{lineno}: unreadable line")
        elif rec["type"] in (ITER, EPOCH):
            records.append((lineno, rec))
        elif rec["type"] == HEADER:
            out.header = rec
        else:
            out.footer = rec
    _keep_possible(out, records, name)
    out.violations += contradictions(out, name)
    return out


def _keep_possible(out, records, name):
    """The records whose values can be, into ``out``'s iterations and epochs; a violation of
    each other one (a zero sample count where the log's other iterations moved samples)."""
    limit = iteration_limit(out.header)
    kept = []
    for lineno, rec in records:
        why = impossible(rec, limit)
        if why is None:
            kept.append((lineno, rec))
        else:
            out.violations.append(f"{name}:{lineno}: {why}")
    moved = any(rec.get("samples") for _, rec in kept if rec["type"] == ITER)
    for lineno, rec in kept:
        if rec["type"] == EPOCH:
            out.epochs.append(rec)
        elif moved and rec.get("samples") == 0:
            out.violations.append(f"{name}:{lineno}: samples = 0 where the log's other "
                                  "iterations moved samples")
        else:
            out.iters.append(rec)


# A footer is written after every record, on the same clock (time.time()): a footer that ends
# more than this before a record started contradicts them (a clock stepped back by NTP moves
# far less).
CLOCK_SLACK_S = 1.0


def contradictions(log, name="rank log"):
    """What a log's footer says that its records contradict: it ended (``ended_at``) before
    an iteration started, or its device window counted other samples (``device_metrics``'
    ``window_samples``) than the native window's measured records hold."""
    footer = log.footer or {}
    out = []
    ended = footer.get("ended_at")
    starts = [rec["t_start"] for rec in log.iters]
    if _number(ended) and starts and ended < max(starts) - CLOCK_SLACK_S:
        out.append(f"{name}: footer: ended_at = {_shown(ended)} is before the last "
                   f"iteration started ({_shown(max(starts))})")
    counted = (footer.get(DEVICE_METRICS) or {}).get("window_samples")
    native = [rec for rec in log.iters if rec.get(WINDOW) == WINDOW_NATIVE
              and not rec.get("warmup") and "epoch" not in rec]
    if _int(counted) and native:
        held = sum(rec.get("samples") or 0 for rec in native)
        if held != counted:
            out.append(f"{name}: footer: device_metrics.window_samples = {counted}, the "
                       f"native window's measured records hold {held}")
    return out


def read_rank_log(path, raw_iters=False):
    """Read one rank log file (its task number from its name): every line parsed, or, with
    ``raw_iters``, only its header and footer (see :func:`scan_lines`)."""
    name = os.path.basename(str(path))
    task = task_of(name)
    rank = task if task is not None else -1
    if raw_iters:
        with open(str(path), "rb") as fh:
            data = fh.read()
        log = scan_lines(data, rank, name)
        log.path = path
        return log
    with open(str(path), "rb") as fh:
        log = parse_lines(bounded_lines(fh), rank, name)
    log.path = path
    return log


def bounded_lines(fh):
    """A binary file's lines, each of at most :data:`MAX_LINE_BYTES`; None in place of a
    longer one, whose rest is skipped a block at a time, never held whole."""
    while True:
        line = fh.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) <= MAX_LINE_BYTES or line.endswith(b"\n"):
            yield line
            continue
        while line and not line.endswith(b"\n"):
            line = fh.readline(MAX_LINE_BYTES)
        yield None


# What :func:`scan_lines` looks for: every harness ``iter`` line starts so (json.dumps of a dict
# whose first key is ``type``), and the breakdown window's first line holds this.
ITER_PREFIX = b'{"type":"iter",'
_BREAKDOWN_AT = b'"' + WINDOW.encode() + b'":"' + WINDOW_BREAKDOWN.encode() + b'"'


def scan_lines(data, rank, name="rank log"):
    """A rank log's bytes -> a :class:`RankLog` whose header and footer are parsed and whose
    ``iter`` lines stay raw bytes, cut into segments of one shape each: the native window's
    lines, then the breakdown window's (a log of one window is one segment). A log that is not
    header, iteration lines, footer (or a torn last line) comes back with ``segments`` None:
    only :func:`parse_lines` reads it exactly."""
    if b"\r" in data and data.count(b"\r") != data.count(b"\r\n"):
        # a lone CR: Python's json sees one line where a CSV reader sees two
        return RankLog(rank, segments=None)
    size = len(data) - 1 if data.endswith(b"\n") else len(data)  # without the final newline
    head_end = data.find(b"\n", 0, size)
    odd = RankLog(rank, segments=None)
    # A line over MAX_LINE_BYTES anywhere: only parse_lines reads the log (and reports it).
    header = parse_record(data[:head_end]) if 0 <= head_end <= MAX_LINE_BYTES else None
    if not (isinstance(header, dict) and header.get("type") == HEADER):
        return odd
    out = RankLog(rank, header=header)
    tail_start = data.rfind(b"\n", 0, size) + 1
    end = _scan_tail(data, tail_start, size, out, name)
    if end is None:
        return odd
    start = head_end + 1
    view = memoryview(data)  # slices of it go from the file's buffer straight to the parser
    while start < end:  # one segment per window: native lines first, then breakdown
        segment = _segment_at(data, view, start, end)
        if segment is None:
            return odd
        out.segments.append(segment)
        start += len(segment.raw) + 1
    return out


def _scan_tail(data, tail_start, size, out, name):
    """Where the iteration lines end (the footer, if the last line is one, goes to ``out``);
    None if the last line is neither a footer, an ``iter`` line nor torn."""
    if size - tail_start > MAX_LINE_BYTES:
        return None
    last = data[tail_start:size]
    if last.startswith(ITER_PREFIX) and last.endswith(b"}"):
        return size  # a rank killed between two records: its last line is an iteration
    rec = parse_record(last)
    if rec is None and last.strip():  # torn by a kill mid-write: a problem, as parse_lines says
        lineno = data.count(b"\n", 0, size) + 1
        out.problems.append(f"{name}:{lineno}: unreadable line")
    elif isinstance(rec, dict) and rec.get("type") == FOOTER:
        out.footer = rec
    elif last.strip():
        return None
    return tail_start - 1


def _segment_at(data, view, start, end):
    """The segment that starts at ``start``: up to the breakdown window's first line if it
    starts in the native window, else to ``end``; None if its first line is not an ``iter``."""
    if not data.startswith(ITER_PREFIX, start):
        return None
    first_end = data.find(b"\n", start, end)
    first_end = end if first_end < 0 else first_end
    if first_end - start > MAX_LINE_BYTES:
        return None
    first = data[start:first_end]
    record = parse_record(first)
    if not (isinstance(record, dict) and record.get("type") == ITER):
        return None
    stop = end
    if record.get(WINDOW) == WINDOW_NATIVE:
        switch = data.find(_BREAKDOWN_AT, first_end, end)
        if switch >= 0:
            stop = data.rfind(b"\n", first_end, switch)
    return Segment(view[start:stop], tuple(record), first)
