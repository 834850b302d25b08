"""The rank-side harness shared by every mode's rank: arguments, timers, the JSONL rank log.

Stdlib only, and no framework import: any environment's Python (a TensorFlow venv, an MXNet
one with its old numpy, CNTK's Python 3.6) imports it from the staged copy beside the runs. So
it must stay valid Python 3.6: no ``from __future__ import annotations`` (3.7+), no dataclasses,
and annotations that 3.6 would evaluate are strings (``"dict | None"``).

What a rank log holds (record kinds, phase names and order, file names) is defined once in
:mod:`orchestrator.protocol`, which gather reads with. Lines are flushed as they are written, so
a rank that dies still leaves everything it measured.
"""

import argparse
import json
import os
import platform
import resource
import signal
import socket
import sys
import time
import traceback
from contextlib import contextmanager

from orchestrator import protocol
from orchestrator.protocol import LOG_SCHEMA, PHASES
from orchestrator.rankside import cpushare, fabric
from orchestrator.rankside.sampler import process_probe, start_sampler, stop_sampler

# Environment variables worth keeping beside every measurement: they change what is measured.
_ENV_PREFIXES = ("NCCL_", "GLOO_", "OMPI_", "OMP_", "MKL_", "UCX_", "TF_", "DMLC_", "MXNET_",
                 "HOROVOD_", "CUDA_VISIBLE_DEVICES", "MASTER_", "SLURM_JOB_", "SLURM_NNODES",
                 "SLURM_NTASKS", "SLURM_PARTITION", "ORCH_")


# The native window writes its iteration records at most this often (Session._window).
NATIVE_WRITE_S = 1.0
# A queued native window (Session.native_iterations' drain) waits for its steps at the end of
# the warm-up, after every chunk of measured iterations and at its end. A chunk is at most
# NATIVE_CHUNK iterations (a bounded queue; a drain, the pipeline refilling once, costs
# milliseconds) and at most ~NATIVE_CHUNK_S of them at the last chunk's pace: its records are
# written only once it is drained, and orch's hang watch (watch.py, 300 s) reads them.
NATIVE_CHUNK = 100
NATIVE_CHUNK_S = 10.0


def chunk_limit(share: "float | None") -> int:
    """How many measured iterations the next chunk queues, ``share`` being the seconds an
    iteration took in the last drained chunk (None: none drained yet, so one iteration)."""
    if share is None:
        return 1
    return max(1, min(NATIVE_CHUNK, int(NATIVE_CHUNK_S / share) if share > 0 else NATIVE_CHUNK))


def share_out(records: list, wall: float, seconds: float) -> float:
    """Give a drained chunk's iterations equal shares of its wall time (returned): queued
    steps have no wall time of their own, and their chunk's is what they took together."""
    share = seconds / len(records)
    for i, record in enumerate(records):
        record.update(t_start=wall + i * share, t_iter=share, queued=True)
    return share

# Set for every rank unless the site sets them: NCCL's choice of network, printed at init.
NCCL_EVIDENCE_ENV = (("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "INIT,NET"))


def mode_parser(mode) -> argparse.ArgumentParser:
    """The arguments of a mode's rank: :func:`base_parser` plus the mode's options, taken
    from its descriptor (``orchestrator/modes/<name>/mode.py``), defaults included, so a rank
    and the control plane can never disagree on them. An option whose default the partition
    decides (``default=None`` with choices) is required: job scripts always pass it; a
    numeric one without a default (e.g. ``servers``) is optional: set only when given."""
    p = base_parser(mode.description)
    for opt in mode.options:
        numeric = not opt.choices and getattr(opt, "numeric", True)
        p.add_argument(opt.flag, dest=opt.name, choices=opt.choices or None,
                       type=int if numeric else str,
                       default=(int(opt.default) if numeric else opt.default)
                       if opt.default is not None else None,
                       required=opt.default is None and bool(opt.choices), help=opt.help)
    return p


def base_parser(description: str) -> argparse.ArgumentParser:
    """The arguments every rank takes: protocol.RANK_ARGS, which orchestrator.render renders."""
    return protocol.add_rank_args(argparse.ArgumentParser(description=description))


class RankInfo:
    """Where this process sits in the job, from the launcher's variables.

    srun and orch's local launcher set SLURM_*; mpirun sets OMPI_COMM_WORLD_*; torchrun and
    our launch scripts set RANK/WORLD_SIZE/LOCAL_RANK. The first that is present wins.
    """

    def __init__(self, env: "dict | None" = None) -> None:
        env = dict(os.environ if env is None else env)

        def first(*names: str, default: str = "0") -> int:
            for name in names:
                if env.get(name, "") != "":
                    return int(env[name])
            return int(default)

        self.rank = first("RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID")
        # The job's task id (the log's name) and role, set by launch.sh from orch's task table;
        # they differ from the framework's rank in role modes (a ps has no training rank).
        self.task = first("ORCH_TASK_ID", default=str(self.rank))
        self.role = env.get("ORCH_ROLE") or "worker"
        self.role_index = first("ORCH_ROLE_INDEX", default=str(self.rank))
        self.world_size = first("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS",
                                default="1")
        self.local_rank = first("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")
        self.node_rank = first("NODE_RANK", "OMPI_COMM_WORLD_NODE_RANK", "SLURM_NODEID")
        self.host = socket.gethostname()
        self.node = env.get("SLURMD_NODENAME") or self.host


def peak_rss_bytes() -> int:
    """Peak resident memory of this process (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def parse_failure(spec: "str | None") -> "tuple[int, int, str] | None":
    """``RANK@ITER[:ACTION]`` (protocol.FAILURE_SPEC) as (rank, iteration, action)."""
    if not spec:
        return None
    match = protocol.FAILURE_SPEC.match(spec)
    if match is None:
        raise ValueError(f"--inject-failure {spec!r}: expected RANK@ITER[:ACTION]")
    return int(match.group(1)), int(match.group(2)), match.group(3) or "fail"


def first_attempt(log_dir: str) -> bool:
    """Whether this is the run's first attempt: no earlier one moved aside beside the ranks'
    directory (rundir.py moves each to ATTEMPTS_DIR/<n>/ before a retry)."""
    run_dir = os.path.dirname(os.path.abspath(log_dir))
    return not os.path.isdir(os.path.join(run_dir, protocol.ATTEMPTS_DIR))


class InjectedFailure(RuntimeError):
    """Raised on purpose (--inject-failure) to test that orch records a failed rank."""


class RankLogWriter:
    """Writes one rank's JSONL log; use :func:`rank_log` to get the header/footer right."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._fh = open(path, "a", buffering=1)  # noqa: SIM115 - line-buffered, survives a crash

    @staticmethod
    def _line(record: dict) -> str:
        return json.dumps(record, separators=(",", ":")) + "\n"

    def write(self, record: dict) -> None:
        self._fh.write(self._line(record))

    def write_many(self, records: list) -> None:
        """Several records in one write (one system call where they fit the buffer)."""
        if records:
            self._fh.write("".join(map(self._line, records)))

    def close(self) -> None:
        self._fh.close()


class Session:
    """What a workload uses while it runs: timers, per-iteration records, the footer fields."""

    def __init__(self, args: argparse.Namespace, info: RankInfo, log: RankLogWriter) -> None:
        self.args = args
        self.info = info
        self.log = log
        self.footer: dict = {}
        self.failure = parse_failure(args.inject_failure)
        if (self.failure and self.failure[2] in protocol.MACHINE_FAULTS
                and not first_attempt(args.log_dir)):
            self.failure = None  # a frozen node is a machine's fault: the retry runs clean
        # Samples one logged iteration stands for: this rank's batch, or the global batch when
        # one task times steps that others compute (a TensorFlow PS chief).
        self.samples = args.batch_size
        self._phases: dict = {}
        # Fabric evidence (rankside.fabric): snapshots at the harness' start and around the
        # measured window, taken outside every timed iteration.
        self._fabric_born = fabric.safe(fabric.Snapshot, with_sockets=False)
        self._fabric_start = None
        self._next_iter = 0  # iteration numbers run on across the two windows

    @contextmanager
    def phase(self, name: str):
        """Time one phase of the current iteration (accumulates if entered twice)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._phases[name] = self._phases.get(name, 0.0) + time.perf_counter() - t0

    def add(self, name: str, seconds: float) -> None:
        self._phases[name] = self._phases.get(name, 0.0) + seconds

    def injects_at(self, it: int) -> bool:
        """Whether ``--inject-failure`` names this rank and iteration."""
        return bool(self.failure) and self.failure[:2] == (self.info.task, it)

    def inject(self, it: int) -> None:
        """The injected fault: raise (``fail``), freeze this whole process (``stop``: its
        heartbeat thread too), or hold it still but alive (``hold``: it sleeps, its heartbeat
        beats), to be ended by whoever cancels the job (SIGKILL ends a stopped process)."""
        if self.failure[2] == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
            return  # only if someone sent SIGCONT: go on as if nothing happened
        if self.failure[2] == "hold":
            while True:
                time.sleep(3600)
        raise InjectedFailure(f"injected failure on rank {self.info.task} at iter {it}")

    def native_iterations(self, drain=None):
        """Yield iteration numbers of the throughput window (``window: native``): the caller
        runs the framework's own idiomatic step, unmodified; the harness only reads the wall
        clock around it, so nothing of orch's instrumentation is inside what samples/s is
        computed from. Run it before :meth:`iterations`; it has its own warm-up.

        ``drain``: for a framework whose loop queues its steps and lets them run
        asynchronously (MXNet's engine, TensorFlow's ClusterCoordinator), a callable that waits
        until every step queued so far has run. The body then only queues its step, as the
        framework's own loop does (waiting after every step cost MXNet's LeNet-5 ~6% in
        benchmarks.fidelity: the next step's forward no longer overlaps the last one's
        communication). The harness drains at the end of the warm-up, after every chunk of
        measured iterations (at most NATIVE_CHUNK, and NATIVE_CHUNK_S at the last chunk's
        pace: a bounded queue, records the hang watch sees) and at the window's end, so the
        window holds all of its own work and none of the warm-up's. A queued step has no wall
        time of its own: each iteration of a chunk records the chunk's wall time over its
        iterations (``t_iter``, ``t_start`` spaced by it, ``queued: true``)."""
        yield from self._window(protocol.WINDOW_NATIVE, phases=False, drain=drain)

    def iterations(self):
        """Yield iteration numbers of the breakdown window; time each one and its phases and
        log it when the body is done. Numbers continue after a native window's."""
        yield from self._window(protocol.WINDOW_BREAKDOWN, phases=True)
        if self._fabric_start is not None:  # the measured window has ended
            end = fabric.safe(fabric.Snapshot)
            if end is not None:
                self.footer[protocol.FABRIC] = fabric.safe(fabric.record, self._fabric_start, end)
            self._fabric_start = None

    def breakdown(self, steps):
        """Run the breakdown window from a rank's declared steps; return what the last step
        returned in the last iteration (e.g. the loss, for the footer).

        ``steps``: ``(phase, run)`` pairs, in the order one iteration runs them. Each ``run``
        is called with the previous step's result, the first with the iteration number, so a
        step hands its batch or loss on without the rank writing a loop. A step with a phase
        name is timed into that phase (:meth:`phase`); one with ``None`` is not timed here: a
        single call that holds several phases (a backward with its all-reduces inside)
        splits itself with :meth:`add`. Windows, warm-up, records and injected failures are
        :meth:`iterations`', so every mode measures the same way."""
        value = None
        for it in self.iterations():
            value = it
            for phase, run in steps:
                if phase is None:
                    value = run(value)
                    continue
                with self.phase(phase):
                    value = run(value)
        return value

    def _window(self, window: str, phases: bool, drain=None):
        """The iterations of one window. The breakdown window writes each record at once; the
        native window, whose wall clock from first step to last is the throughput, keeps its
        records and writes them at most every NATIVE_WRITE_S (and at its end, or when the
        body raises), so that the framework's steps run back to back with no encoding or
        system call between them, as in the framework's own loop (benchmarks.fidelity
        measured ~0.1-0.2 ms per step on this machine under load, ~1-4% of a LeNet-5 step).
        The hang watch still sees progress every NATIVE_WRITE_S; a rank killed outright
        (SIGKILL, a segfault) loses at most that much of its native window's rows."""
        total = self.args.warmup + self.args.iters
        base = self._next_iter
        pending = []
        chunk = []  # a queued window's iterations since its last drain
        limit = chunk_limit(None)  # how many measured ones the current chunk queues
        written = time.perf_counter()
        sampler = None  # the device sampler, over the native window's measured iterations
        try:
            for k in range(total):
                it = base + k
                if self.injects_at(it):
                    self.log.write_many(pending + chunk)  # what it measured, before it stops
                    pending, chunk = [], []
                    self.inject(it)
                if phases and k == self.args.warmup:  # the fabric's measured window starts
                    self._fabric_start = fabric.safe(fabric.Snapshot)
                if not phases and k == self.args.warmup:  # before this iteration's clock
                    sampler = start_sampler(self.args.log_dir, self.info.task,
                                            self.info.local_rank)
                self._phases = {}
                wall = time.time()
                t0 = time.perf_counter()
                yield it
                end = time.perf_counter()
                self._next_iter = it + 1
                record = {"type": protocol.ITER, "iter": it, "window": window,
                          "warmup": k < self.args.warmup,
                          "t_start": wall, "t_iter": end - t0, "samples": self.samples}
                if phases:
                    for name in PHASES:
                        record[name] = self._phases.get(name, 0.0)
                    for name, value in self._phases.items():
                        record.setdefault(name, value)
                    self.log.write(record)
                    continue
                if drain is not None:
                    if not chunk:
                        chunk_wall, chunk_t0 = wall, t0
                    chunk.append(record)
                    if k not in (self.args.warmup - 1, total - 1) and (
                            k < self.args.warmup or len(chunk) < limit):
                        continue
                    drain()
                    end = time.perf_counter()
                    limit = chunk_limit(share_out(chunk, chunk_wall, end - chunk_t0))
                    pending.extend(chunk)
                    chunk = []
                else:
                    pending.append(record)
                if end - written >= NATIVE_WRITE_S:
                    self.log.write_many(pending)
                    pending, written = [], time.perf_counter()
        finally:
            # The sampler stops first, so the device window ends with the last measured
            # iteration rather than after its records are written; the records are written
            # whatever stopping it does.
            metrics = None
            try:
                if sampler is not None:
                    metrics = stop_sampler(
                        sampler, max(0, self._next_iter - base - self.args.warmup) * self.samples)
            finally:
                self.log.write_many(pending + chunk)  # a chunk cut short keeps its queueing times
            if sampler is not None:
                self._device_footer(metrics)

    def _device_footer(self, metrics: "dict | None") -> None:
        """The device sampler's aggregates into the footer; why, where nothing was read."""
        if metrics is None:
            return
        self.footer[protocol.DEVICE_METRICS] = metrics
        if metrics.get("source") is None:
            self.footer[protocol.DEVICE_METRICS_REASON] = metrics.get("reason")

    def epoch_steps(self, steps: int, epoch: int):
        """Yield the step numbers of one training epoch (``--epochs``), each logged as a
        native-window iteration (wall clock only): the first epoch's first ``--warmup`` steps
        are warm-up. Numbers run on across epochs."""
        for k in range(steps):
            it = self._next_iter
            if self.injects_at(it):
                self.inject(it)
            wall = time.time()
            t0 = time.perf_counter()
            yield it
            t_iter = time.perf_counter() - t0
            self._next_iter = it + 1
            self.log.write({"type": protocol.ITER, "iter": it, "window": protocol.WINDOW_NATIVE,
                            "warmup": epoch == 1 and k < self.args.warmup, "t_start": wall,
                            "t_iter": t_iter, "samples": self.samples, "epoch": epoch})

    def log_interval(self, t_start: float, t_iter: float, samples: float,
                     warmup: bool) -> None:
        """One interval of a script whose figures orch reads from its output (the trainer
        mode): a native-window iteration of ``t_iter`` seconds from ``t_start`` (wall clock)
        holding ``samples`` samples."""
        it = self._next_iter
        self._next_iter = it + 1
        self.log.write({"type": protocol.ITER, "iter": it, "window": protocol.WINDOW_NATIVE,
                        "warmup": bool(warmup), "t_start": t_start, "t_iter": t_iter,
                        "samples": round(samples)})

    def log_epoch(self, epoch: int, t_start: float, t_epoch: float, t_eval: float,
                  train_loss: float, train_acc: float, test_acc: float, samples: int,
                  test_loss: "float | None" = None) -> bool:
        """Write one epoch record; True when training should stop there (the held-out accuracy
        reached ``--target-accuracy``). ``test_loss``: a language model's mean held-out loss
        per token (its perplexity is the exponential), where the rank computes it."""
        record = {"type": protocol.EPOCH, "epoch": epoch, "t_start": t_start,
                  "t_epoch": t_epoch, "t_eval": t_eval, "train_loss": float(train_loss),
                  "train_acc": float(train_acc), "test_acc": float(test_acc),
                  "samples": int(samples)}
        if test_loss is not None:
            record["test_loss"] = float(test_loss)
        self.log.write(record)
        target = self.args.target_accuracy
        return target is not None and test_acc >= target

    def fabric_lifetime(self) -> None:
        """For a task without a measured window (a server): its evidence since it started."""
        if protocol.FABRIC in self.footer or self._fabric_born is None:
            return
        end = fabric.safe(fabric.Snapshot)
        if end is not None:
            self.footer[protocol.FABRIC] = fabric.safe(fabric.record, self._fabric_born, end,
                                                       basis="lifetime")


def versions(**extra: str) -> dict:
    out = {"python": platform.python_version()}
    try:
        from orchestrator import __version__

        out["orch"] = __version__
    except ImportError:  # pragma: no cover - the staged copy always has it
        pass
    out.update(extra)
    out.update(gpu_versions())
    return out


# The NVIDIA kernel module says its version here (no library needed): "NVRM version: NVIDIA
# UNIX x86_64 Kernel Module  580.159.04  ...".
DRIVER_FILE = "/proc/driver/nvidia/version"


def gpu_versions(driver_file: str = DRIVER_FILE) -> dict:
    """What a GPU step depends on besides the framework: the NVIDIA driver, and where the
    rank's torch runs on CUDA, its CUDA, cuDNN and NCCL (what ``orch history changes`` names
    when a level changes). Nothing on a machine without them; torch only if the mode
    imported it."""
    out = {}
    try:
        with open(driver_file) as fh:
            words = fh.readline().split()
        if "Module" in words and words.index("Module") + 1 < len(words):
            out["nvidia_driver"] = words[words.index("Module") + 1]
    except OSError:
        pass
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            out["cuda"] = str(torch.version.cuda)
            out["cudnn"] = str(torch.backends.cudnn.version())
            nccl = torch.cuda.nccl.version()
            out["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    except Exception:  # a partial CUDA install: the versions it can say are said above
        pass
    return out


# Written into every image orch builds (containers/): readable only inside that image.
IMAGE_MARKER = "/etc/orch-image.json"


def container_facts() -> "dict | None":
    """Where this rank runs, seen from inside: None on the host. The image's own marker file
    (name, spec hash) proves which image; the runtime's variables and what orch's wrapper
    passed in (ORCH_CONTAINER_*) say how it was started."""
    facts: dict = {}
    try:
        with open(IMAGE_MARKER) as fh:
            marker = json.load(fh)
        facts["image"] = {k: marker.get(k) for k in ("name", "framework", "spec_sha256")}
    except (OSError, ValueError, AttributeError):
        pass
    for var, runtime in (("CH_RUNNING", "charliecloud"), ("APPTAINER_CONTAINER", "apptainer"),
                         ("SINGULARITY_CONTAINER", "singularity")):
        if var in os.environ:
            facts["runtime"] = runtime
            break
    if not facts:
        return None
    facts.setdefault("runtime", os.environ.get("ORCH_CONTAINER_RUNTIME"))
    facts["digest"] = os.environ.get("ORCH_CONTAINER_DIGEST")
    facts["python"] = sys.executable
    return facts


def interesting_env() -> dict:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(_ENV_PREFIXES)}


# The variables that name the interface a rank's collectives use, as orch's job script sets
# them from the partition's socket_ifname (render.transport_env), in the order they are trusted.
FABRIC_IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "DMLC_INTERFACE",
                      "OMPI_MCA_btl_tcp_if_include")
# /sys/class/net/<if>/operstate values of a link that carries nothing (RFC 2863 ifOperStatus).
LINK_DOWN_STATES = ("down", "lowerlayerdown", "notpresent")


def fabric_ifnames(env=None) -> list:
    """The interfaces this rank's collectives use (one name per variable; lists and
    exclusions such as ``^docker0`` say nothing of one link), loopback left out."""
    env = os.environ if env is None else env
    out = []
    for var in FABRIC_IFNAME_VARS:
        name = env.get(var, "")
        if name and "," not in name and not name.startswith("^") and name != "lo" \
                and name not in out:
            out.append(name)
    return out


def links_down(names, root="/sys/class/net") -> list:
    """Which of ``names`` are down on this node (gone, or operstate down)."""
    down = []
    for name in names:
        try:
            with open(os.path.join(root, name, "operstate")) as fh:
                state = fh.read().strip()
        except OSError:
            state = "notpresent"
        if state in LINK_DOWN_STATES:
            down.append(name)
    return down


def start_heartbeat(path: str, every: float = protocol.HEARTBEAT_S) -> None:
    """Beat into ``path`` from a daemon thread until the process ends (protocol.HEARTBEAT_S):
    orch's hang watch tells a rank that is alive but waiting (it still beats) from one that
    is stopped or gone, and sees a rank whose fabric link is down. One pwrite a second; a
    failure to write only ends the beating."""
    import threading

    ifnames = fabric_ifnames()

    def beat() -> None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        except OSError:
            return
        seq = 0
        while True:
            seq += 1
            try:
                os.pwrite(fd, protocol.heartbeat_line(seq, time.time(), links_down(ifnames)),
                          0)
            except OSError:
                return
            time.sleep(every)

    threading.Thread(target=beat, name="orch-heartbeat", daemon=True).start()


@contextmanager
def rank_log(args: argparse.Namespace, framework: str, mode: str):
    """Open this rank's log, write the header, yield a Session, always write a footer.

    An exception in the workload becomes ``status: error`` with the exception's own line
    (``exception``), the traceback's last lines (``error``) and exit code 1, so orch records the
    failure instead of guessing from a missing file; the whole traceback goes to stderr (the
    rank's output).

    The rank process ends here, with ``os._exit``, once the footer is on disk: interpreter
    teardown with live communication threads can abort (Gloo: "terminate called without an
    active exception", seen on the test cluster), turning a finished rank into a failed job.
    """
    info = RankInfo()
    # NCCL says which network module, HCAs or socket interface it chose (gather parses the
    # rank's output); its INIT/NET lines are written once, at communicator creation.
    for name, value in NCCL_EVIDENCE_ENV:
        os.environ.setdefault(name, value)
    os.makedirs(args.log_dir, exist_ok=True)
    log = RankLogWriter(os.path.join(args.log_dir, protocol.rank_log_name(info.task)))
    header = {
        "type": protocol.HEADER, "schema": LOG_SCHEMA, "run_id": args.run_id,
        "framework": framework, "mode": mode, "task": info.task, "role": info.role,
        "role_index": info.role_index,
        "rank": info.rank, "world_size": info.world_size,
        "local_rank": info.local_rank, "node_rank": info.node_rank, "host": info.host,
        "node": info.node, "pid": os.getpid(), "model": args.model, "dataset": args.dataset,
        "batch_size": args.batch_size, "warmup": args.warmup, "iters": args.iters,
        "started_at": time.time(), "argv": sys.argv, "env": interesting_env(),
        "script_digest": os.environ.get("ORCH_SCRIPT_DIGEST"),
        "container": container_facts(),
        protocol.BINDING: process_probe(info.local_rank).binding,
        protocol.CPU_SHARE: cpushare.safe_probe(),
    }
    log.write(header)
    start_heartbeat(os.path.join(args.log_dir, protocol.heartbeat_name(info.task)))
    session = Session(args, info, log)
    status, error, exception, code = protocol.STATUS_OK, None, None, 0
    try:
        yield session
    except BaseException as exc:
        status, code = protocol.STATUS_ERROR, 1
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
        error = ("".join(lines[-6:]))[-2000:]
        exception = "".join(traceback.format_exception_only(type(exc), exc)).strip()[:2000]
        # The whole traceback goes to the rank's output, which the run's reason points at.
        print("".join(lines), file=sys.stderr, end="")
    session.fabric_lifetime()
    footer = {"type": protocol.FOOTER, "status": status, "error": error,
              "peak_rss_bytes": peak_rss_bytes(), "ended_at": time.time()}
    if exception is not None:
        footer[protocol.EXCEPTION] = exception
    footer.update(session.footer)
    log.write(footer)
    log.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
