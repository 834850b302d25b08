"""Network micro-benchmark results: the α–β model of a partition, fitted from a real job.

``orch netbench --site S --partition P`` runs the ``allreduce-bench`` mode (one all-reduce per
message size and iteration, see orchestrator/modes/allreduce_bench/rank.py) as an ordinary run
(render, submit, gather), then fits latency α and bandwidth B of the ring all-reduce cost
``2(N−1)·α + 2(N−1)/N · m/B`` (model.comm.fit_ring) to the measured seconds and stores
the result, keyed by site and partition, where ``orch report`` and ``orch predict`` find it:

    $ORCH_NETBENCH_DIR/<site>-<partition>.json     when the variable is set, else
    $XDG_CACHE_HOME/orch/netbench/<site>-<partition>.json   (default ~/.cache/orch/netbench)

The measured seconds of a size are the median over measured iterations of the slowest rank's
mean all-reduce time (an all-reduce is done when its last rank is). The fit minimises relative
errors, because the sizes span many decades (4 B .. 16 MiB by default).

Beside the fit, each size's algorithm and bus bandwidth, as nccl-tests defines them for an
all-reduce: ``algbw = bytes / seconds``; ``busbw = algbw · 2(N−1)/N``, what each rank's link
carries in a ring, comparable across rank counts and with the link's rated speed.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from .. import __version__, modes
from ..errors import UserError
from ..perfmodel.comm import AlphaBeta, RingFit, allreduce_time, fit_ring
from ..perfmodel.inputs import ModelInputError
from ..results import gather
from ..runs import rundir
from ..units import format_bandwidth, format_seconds

MODE = modes.network_benchmark().name  # allreduce-bench
# Every benchmark fit_run fits: torch.distributed's, and MPI's (mpi-allreduce-bench, the
# pre-flight's for the MPI modes); both log the same fields.
MODES = (MODE, modes.network_benchmark(mpi=True).name)
FIELD_PREFIX = "allreduce_"
CPU_PREFIX = "cpu_allreduce_"  # a rank's CPU seconds of one all-reduce of that size
# The sizes whose CPU over wall time says what the all-reduce's bandwidth costs the CPU: at and
# above 1 MiB the bytes, not the latency, set the time.
CPU_FROM_BYTES = 1 << 20
# The α–β fit takes the sizes from here up: the regime of gradient buckets, which is what the
# model prices. Below it an all-reduce's time is set by how fast its ranks' processes wake up
# more than by any link: on the test cluster (4 nodes' ranks on 2 shared cores) a 64-byte
# Gloo all-reduce over 4 ranks takes 4-10 ms (4.5 ms on plain loopback, 0.3 ms over 2 ranks),
# a 4-byte one 0.6 ms (another algorithm). Every size is still measured and shown.
FIT_FROM = 64 << 10


class NetbenchResult(BaseModel):
    """α–β of one partition, with the measurements it was fitted to (seconds, bytes)."""

    model_config = ConfigDict(extra="ignore")

    site: str
    partition: str
    interconnect: str
    backend: str
    workers: int
    nodes: int
    tasks_per_node: int
    alpha: float  # seconds per message step
    bandwidth: float  # bytes per second
    fit: str = "least squares of relative errors, ring all-reduce α–β model"
    sizes: list[int]
    seconds: list[float]  # per size: median over iterations of the slowest rank
    iterations: int
    run_id: str
    run_dir: str
    measured_at: float | None = None
    # The CPU cores a rank's all-reduce keeps busy while it runs (its CPU seconds over its wall
    # seconds on messages of at least CPU_FROM_BYTES, the median over ranks and iterations);
    # None where the run did not record its CPU (an older orch).
    cpu_cores: float | None = None
    # The fit took the sizes of at least this many bytes (all, where fewer than 2 are).
    fit_from: int = 0
    orch_version: str = __version__

    @property
    def alpha_beta(self) -> AlphaBeta:
        return AlphaBeta(alpha=self.alpha, bandwidth=self.bandwidth)

    def model_seconds(self) -> list[float]:
        """The fitted model at every measured size."""
        return [allreduce_time(m, self.workers, self.alpha, self.bandwidth) for m in self.sizes]

    def fitted(self) -> tuple[list[int], list[float]]:
        """(sizes, seconds) the fit took (``fit_from`` and up)."""
        return fit_range(self.sizes, self.seconds, self.fit_from)

    def bus_bandwidths(self) -> list[float]:
        """busbw (bytes/s) at every measured size (:func:`busbw`)."""
        return [busbw(m, t, self.workers) for m, t in zip(self.sizes, self.seconds,
                                                            strict=True)]

    def r2(self) -> tuple[float, float]:
        """(R² on log-seconds, worst relative residual) of the fit over the sizes it took."""
        sizes, seconds = self.fitted()
        return fit_quality(sizes, seconds, [allreduce_time(m, self.workers, self.alpha,
                                                           self.bandwidth) for m in sizes])

    def describe(self) -> str:
        r2, worst = self.r2()
        fit = (f"R² = {r2:.3f}, worst residual {worst:.0%}"
               + (f" (sizes from {self.fit_from:,} B)" if self.fit_from else ""))
        return (f"α = {format_seconds(self.alpha)}, B = {format_bandwidth(self.bandwidth)}, "
                f"{fit}, "
                f"{describe_busbw(self.sizes, self.seconds, self.workers)} "
                f"({self.backend}, {self.workers} ranks on {self.nodes} node(s) of "
                f"{self.site}/{self.partition}, run {self.run_id})")


def algbw(size: int, seconds: float) -> float:
    """An all-reduce's algorithm bandwidth, nccl-tests' ``algbw``: bytes / seconds."""
    return size / seconds if seconds > 0 else 0.0


def busbw(size: int, seconds: float, ranks: int) -> float:
    """An all-reduce's bus bandwidth, nccl-tests' ``busbw``: ``algbw · 2(N−1)/N``, the bytes
    each rank's link carries per second in a ring (a ring all-reduce sends and receives
    2(N−1)/N of the buffer per rank), so it is comparable across rank counts and with the
    hardware's rated link speed."""
    return algbw(size, seconds) * 2 * (ranks - 1) / ranks if ranks > 1 else 0.0


def peak_busbw(sizes: list[int], seconds: list[float], ranks: int) -> tuple[float, int]:
    """(the highest busbw over the measured sizes, the size it was reached at): the largest
    messages are bandwidth-bound, the smallest latency-bound; the peak is what a link gives."""
    return max((busbw(m, t, ranks), m) for m, t in zip(sizes, seconds, strict=True))


def describe_busbw(sizes: list[int], seconds: list[float], ranks: int) -> str:
    value, size = peak_busbw(sizes, seconds, ranks)
    return f"busbw {value / 1e9:.3g} GB/s (peak, at {size:,} B)"


def fit_quality(sizes: list[int], seconds: list[float], fitted: list[float]) -> tuple[float,
                                                                                      float]:
    """(R², largest relative residual) of the fitted seconds against the measured ones.

    R² is taken on log-seconds: the sizes span decades, and on linear seconds the largest
    message alone would decide it."""
    if len(seconds) != len(fitted) or not seconds:
        raise UserError("fit quality: measured and fitted seconds differ in length")
    logs = [math.log(s) for s in seconds]
    logf = [math.log(max(f, 1e-12)) for f in fitted]
    mean = sum(logs) / len(logs)
    total = sum((x - mean) ** 2 for x in logs)
    resid = sum((x - y) ** 2 for x, y in zip(logs, logf, strict=True))
    r2 = 1.0 - resid / total if total > 0 else 1.0
    worst = max(abs(f - s) / s for s, f in zip(seconds, fitted, strict=True))
    return r2, worst


# --- measuring -----------------------------------------------------------------------------


def fit_run(rdir: Path, fit_from: int = FIT_FROM) -> NetbenchResult:
    """Fit α and B to a finished ``allreduce-bench`` (or ``mpi-allreduce-bench``) run
    directory, on its sizes of at least ``fit_from`` bytes (:data:`FIT_FROM`)."""
    run = rundir.read_run(rdir)
    if run.mode not in MODES:
        raise UserError(f"{rdir}: run of mode '{run.mode}', not a run of "
                        f"{' or '.join(MODES)}")
    record = rundir.read_record(rdir)
    if record is None or record.state != "COMPLETED":
        state = record.state if record else "NEW"
        reason = f": {record.reason.splitlines()[0]}" if record and record.reason else ""
        raise UserError(f"{rdir}: the {run.mode} run is {state}{reason}; nothing to fit")
    logs = gather.read_run_logs(rdir)
    by_iter: dict[tuple[int, int], float] = {}  # (iter, size) -> slowest rank's seconds
    for log in logs:
        for rec in log.iters:
            if rec.get("warmup"):
                continue
            for key, value in rec.items():
                if (key.startswith(FIELD_PREFIX) and key[len(FIELD_PREFIX):].isdigit()
                        and isinstance(value, (int, float))):
                    size = int(key[len(FIELD_PREFIX):])
                    k = (int(rec["iter"]), size)
                    by_iter[k] = max(by_iter.get(k, 0.0), float(value))
    per_size: dict[int, list[float]] = {}
    for (_, size), seconds in by_iter.items():
        per_size.setdefault(size, []).append(seconds)
    if not per_size:
        raise UserError(f"{rdir}: no all-reduce timings in the rank logs (fields "
                        f"'{FIELD_PREFIX}<bytes>' of the measured iterations)")
    sizes = sorted(per_size)
    seconds = [statistics.median(per_size[s]) for s in sizes]
    workers = run.ranks
    if workers < 2:
        raise UserError(f"{rdir}: {workers} rank: an all-reduce over one rank sends nothing; "
                        "measure with at least 2 ranks (--nodes 2)")
    footer = next((log.footer for log in logs if log.footer), {}) or {}
    fit_sizes, fit_seconds = fit_range(sizes, seconds, fit_from)
    ab = _fit(fit_sizes, fit_seconds, workers, rdir)
    return NetbenchResult(
        site=run.site, partition=run.partition, interconnect=run.interconnect,
        backend=str(footer.get("backend") or run.options.get("backend", "?")),
        workers=workers, nodes=run.nodes, tasks_per_node=run.tasks_per_node,
        alpha=ab.alpha, bandwidth=ab.bandwidth, sizes=sizes, seconds=seconds,
        iterations=run.iters, run_id=run.run_id, run_dir=str(rdir.resolve()),
        measured_at=record.ended_at, cpu_cores=cpu_cores(logs),
        fit_from=fit_from if len(fit_sizes) < len(sizes) else 0,
    )


def refitted(result: NetbenchResult, fit_from: int) -> NetbenchResult:
    """The same measurements fitted again from ``fit_from`` bytes up (fit_run's fit, the rank
    logs not read again); a UserError where that fit cannot be made."""
    sizes, seconds = fit_range(result.sizes, result.seconds, fit_from)
    ab = _fit(sizes, seconds, result.workers, Path(result.run_dir))
    return result.model_copy(update={
        "alpha": ab.alpha, "bandwidth": ab.bandwidth,
        "fit_from": fit_from if len(sizes) < len(result.sizes) else 0})


def fit_range(sizes: list[int], seconds: list[float], fit_from: int,
              ) -> tuple[list[int], list[float]]:
    """The sizes of at least ``fit_from`` bytes and their seconds; all of them where fewer
    than 2 distinct sizes are that large (two are needed to separate α from B)."""
    kept = [(m, t) for m, t in zip(sizes, seconds, strict=True) if m >= fit_from]
    if len({m for m, _ in kept}) < 2:
        return list(sizes), list(seconds)
    return [m for m, _ in kept], [t for _, t in kept]


def cpu_cores(logs) -> float | None:
    """The CPU cores a rank's all-reduce keeps busy while it runs: per rank and measured
    iteration, its CPU seconds over its own wall seconds, summed over the sizes of at least
    CPU_FROM_BYTES; the median of those (None where no rank recorded its CPU)."""
    ratios = []
    for log in logs:
        for rec in log.iters:
            if rec.get("warmup"):
                continue
            cpu = wall = 0.0
            for key, value in rec.items():
                if not key.startswith(CPU_PREFIX) or not isinstance(value, (int, float)):
                    continue
                size = int(key[len(CPU_PREFIX):])
                spent = rec.get(f"{FIELD_PREFIX}{size}")
                if size >= CPU_FROM_BYTES and isinstance(spent, (int, float)) and spent > 0:
                    cpu, wall = cpu + float(value), wall + float(spent)
            if wall > 0:
                ratios.append(cpu / wall)
    return statistics.median(ratios) if ratios else None


def fit_measured(sizes: Sequence[float], seconds: Sequence[float], workers: int) -> RingFit:
    """The ring fit of measured all-reduce times (model.comm.fit_ring): relative errors, else
    absolute ones (they may work where relative ones give a negative α), else absolute ones
    under α ≥ 0 (B alone, α = 0); the relative fit's ModelInputError where none does. Where
    both put α below zero, either the sizes are too large for their latency to show through
    the noise, or the small ones went faster than the link's bandwidth allows (a shaped
    link's token bucket lets a burst through at line rate; MPI's eager protocol): B must then
    describe the large messages gradients travel in, which absolute errors weigh (relative
    ones put the test cluster's Open MPI over 4 eth nodes at 21.6 MB/s, its 44.7 MB
    all-reduce 31 % faster than measured; absolute ones at 15.0 MB/s)."""
    first = None
    for how in ({"relative": True}, {}, {"clamp_alpha": True}):
        try:
            return fit_ring(sizes, seconds, workers, **how)
        except ModelInputError as exc:
            first = first or exc
    raise first


def _fit(sizes: list[int], seconds: list[float], workers: int, where: Path) -> AlphaBeta:
    try:
        return fit_measured(sizes, seconds, workers).alpha_beta
    except ModelInputError as exc:
        raise UserError(f"{where}: cannot fit α–β to the measured all-reduce times: "
                        f"{exc}") from None


# --- storing and finding -------------------------------------------------------------------


def store_dir() -> Path:
    """Where netbench results are kept (see the module docstring)."""
    if os.environ.get("ORCH_NETBENCH_DIR"):
        return Path(os.environ["ORCH_NETBENCH_DIR"]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "orch" / "netbench"


def store_path(site: str, partition: str, directory: Path | None = None) -> Path:
    return (directory or store_dir()) / f"{site}-{partition}.json"


def save(result: NetbenchResult, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    rundir.write_json_atomic(path, result.model_dump(mode="json"))
    return path


def load(path: Path) -> NetbenchResult:
    """Read a netbench result file; errors name the file and the field."""
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise UserError(f"{path}: cannot read netbench result ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON ({exc}); re-run orch netbench") from None
    try:
        return NetbenchResult.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "<root>"
        raise UserError(f"{path}: field '{field}': {err['msg']}; re-run orch netbench to "
                        "write it again") from None


def in_sweep(out: Path, site: str, partition: str) -> NetbenchResult | None:
    """The latest completed multi-rank allreduce-bench run of site/partition in a sweep dir."""
    found: list[NetbenchResult] = []
    for rdir in rundir.run_dirs(out):
        try:
            run = rundir.read_run(rdir)
        except (OSError, ValidationError):
            continue
        record = rundir.read_record(rdir)
        if (run.mode != MODE or run.site != site or run.partition != partition
                or run.ranks < 2 or record is None or record.state != "COMPLETED"):
            continue
        try:
            found.append(fit_run(rdir))
        except UserError:
            continue
    if not found:
        return None
    return max(found, key=lambda r: (r.workers, r.measured_at or 0.0))


def lookup(site: str, partition: str, sweep: Path | None = None,
           explicit: Path | None = None) -> tuple[NetbenchResult | None, str]:
    """α–β for site/partition: an explicit file, else the sweep's own run, else the store.

    Returns the result (or None) and where it came from, for the report to say.
    """
    if explicit is not None:
        path = explicit / f"{site}-{partition}.json" if explicit.is_dir() else explicit
        if explicit.is_dir() and not path.exists():
            return None, f"no {path.name} in {explicit}"
        result = load(path)
        return result, f"netbench file {path}"
    if sweep is not None:
        result = in_sweep(sweep, site, partition)
        if result is not None:
            return result, f"netbench run {result.run_id} in this sweep"
    path = store_path(site, partition)
    if path.exists():
        return load(path), f"netbench file {path}"
    return None, f"no netbench result for {site}/{partition} (looked for {path})"
