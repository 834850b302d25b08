"""Pre-flight network model: α and B inside one node and across nodes, measured before a sweep.

Why: a prediction is only worth stating if its inputs were known before the runs it predicts.
Before a sweep's training runs, orch measures every partition the sweep uses with the
all-reduce micro-benchmark (mode ``allreduce-bench``) as real jobs:

* ``intra``: one node, several tasks on it (2 on CPU partitions, one per GPU on GPU ones;
  skipped on a 1-GPU-per-node partition: there is nothing inside a node to talk to);
* ``inter``: the sweep's largest node count (at least 2), one task per node; and again at
  each smaller count of more than one node whose runs the sweep predicts or predicts from
  (``Preflight.inter_at``): a library's all-reduce between 2 nodes need not follow the α–β of
  4 (Open MPI picks its algorithm by the communicator's size; rings of fewer nodes meet
  fewer switch hops), and a prediction from 2 nodes to 4 prices the change between them.

Each level's α–β is fitted (netbench.fit_run: ring all-reduce model, relative least squares)
and its fit quality recorded: R² of the fitted against the measured seconds and the largest
relative residual. A level is cached as ``<store>/preflight-<site>-<partition>-<level>-
<nodes>x<tasks>.json`` (``store`` = netbench.store_dir(): ``$ORCH_NETBENCH_DIR``, else
``~/.cache/orch/netbench``) with the time it was measured; ``--preflight=auto`` re-uses an
entry younger than :data:`MAX_AGE_S`, ``always`` measures again, ``never`` skips (and the
sweep then states no predictions). The jobs run in ``<sweep>/preflight/``, a sweep directory of
their own, so the sweep's result set holds only its training runs.

A sweep with an MPI mode (``Mode.mpi``: its gradients travel through Open MPI, whose all-reduce
on the same link can be much slower than Gloo's) measures both levels a second time with the
MPI benchmark (modes.network_benchmark(mpi=True)), cached as ``preflight-<site>-<partition>-mpi-
<level>-<nodes>x<tasks>.json``: the MPI modes' predictions use those (Preflight.network_of).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from .. import execute, modes, protocol, results, units, zoo
from ..errors import FabricBelowMinimum, UserError
from ..perfmodel import interval, validity
from ..perfmodel.comm import AlphaBeta, Network
from ..perfmodel.inputs import ModelInputError
from ..plan import sweep as sweepmod
from ..rankside import cores
from ..results import gather
from ..runs import rundir
from ..site import Site
from ..spec.settings import PREFLIGHT_MODES as MODES
from . import netbench

MAX_AGE_S = 24 * 3600.0  # an entry older than this is measured again (auto)
# Few sizes and iterations: the pre-flight must cost seconds, not minutes. The sizes of
# gradient buckets, which the model prices (64 KiB pins α, the per-step cost of a ring in that
# regime; 1-16 MiB pin B; the model's own gradient size is added by the benchmark): below them
# an all-reduce's time says how fast processes wake up, not what a link does (netbench.FIT_FROM).
SIZES = "65536:262144:1048576:4194304:16777216"
# A fit over every size that fails validity's thresholds is fitted again from this size up,
# the regime gradients travel in (DDP's 25 MiB buckets, Horovod's 64 MiB fusion buffer): below
# it a shaped link's token bucket lets a burst through faster than its rate, and MPI's eager
# protocol skips a handshake, so small all-reduces can beat the α–β line that holds for large
# ones. The level then says which sizes its fit took.
BANDWIDTH_FROM = 1 << 20
ITERS, WARMUP, REPS = 5, 1, 3
# A fit that fails validity's thresholds is measured once more with this many times the
# repeats (noise averages out as 1/sqrt(samples); the job takes about this many times as
# long, so a slow link's retry still ends inside the job's time limit); if it still fails,
# or the second job does, every prediction from the first says so.
RETRY_FACTOR = 3
# ... and a time limit that fits it: the first job's script time, times RETRY_FACTOR, times
# this margin (at least the first job's limit). With the site's default limit, Open MPI's
# 2-node level over the test cluster's 250 Mbit/s eth, measured again for AlexNet's 228 MB
# gradient (3:53 the first time), ran past its 10 minutes and its predictions were flagged.
RETRY_MARGIN = 1.5
PREFLIGHT_DIR = "preflight"
# The compute probe of the across-nodes level: passes timed per count of ranks computing at
# once, of the sweep's model at its batch size (this one where the sweep gives none).
PROBE_PASSES = 2
PROBE_BATCH = 8
LEVELS = ("intra", "inter")


class Level(BaseModel):
    """The fitted α–β of one level of one partition, with its fit quality and provenance."""

    model_config = ConfigDict(extra="ignore")

    level: str
    site: str
    partition: str
    nodes: int
    tasks_per_node: int
    alpha: float
    bandwidth: float
    r2: float
    max_rel_residual: float
    sizes: list[int]
    seconds: list[float]
    measured_at: float
    run_id: str
    run_dir: str
    # The library the benchmark measured: gloo or nccl (allreduce-bench), mpi
    # (mpi-allreduce-bench); None: not recorded (an older cache, torch.distributed's).
    backend: str | None = None
    # Physical machines under the job's nodes (distinct kernel boot ids) and their cores:
    # fewer machines than nodes means the nodes share cores (the test cluster: 4 on 1).
    machines: int | None = None
    machine_cpus: int | None = None
    # ... and their physical cores (hyper-threads counted once; None: not recorded).
    machine_cores: int | None = None
    reps: int = REPS  # repeats of each size per iteration it was measured with
    # Measured once more after its fit failed validity's thresholds, and that job failed:
    # kept, flagged, not measured again until the cache's age runs out.
    retry_failed: bool = False
    # The cores each node's ranks may use, read on the node (rankside.cpushare: a cgroup's CPU
    # quota or the affinity mask), the smallest over the job's nodes; None where a node runs
    # unconfined (its machine's cores are its own) or it was not recorded.
    node_cpu_share: float | None = None
    # The CPU a rank of the job may use (rankside.cpushare: a quota split among the node's
    # tasks, or its own affinity), the smallest over the ranks; and the CPU cores its
    # all-reduce keeps busy while it runs (netbench.cpu_cores). None: not recorded.
    rank_cpu_cores: float | None = None
    comm_cpu_cores: float | None = None
    # Seconds of one forward+backward of the sweep's model with k ranks of the job computing
    # at once (allreduce-bench --compute-probe, the mean over those ranks), by k; None: not
    # probed (GPU partitions, the intra level, models the probe cannot run).
    compute_probe: dict[int, float] | None = None
    compute_probe_cpu: dict[int, float] | None = None  # ... their CPU seconds
    probe: str | None = None  # what the probe ran (probe_of): a cached level serves only it
    fit_from: int = 0  # the fit took the sizes of at least this many bytes (0: all)
    # Seconds its job script ran (job-times.json) and the job's time limit, minutes: what a
    # second measurement's limit is sized from (retry_time_limit). None: not recorded.
    job_seconds: float | None = None
    time_limit_min: int | None = None

    def compute_slowdown(self, ranks: int) -> float:
        """How much slower one rank computes with ``ranks`` of them computing at once than
        alone, from the probe's wall seconds: linear between the counts it timed, its largest
        count's beyond them; 1 without a probe. More ranks computing never make one faster: a
        count timed faster than a smaller one is its noise (a pass is a few CPU-quota periods
        long), and takes the smaller count's slowdown."""
        probe = self.compute_probe or {}
        if 1 not in probe or not probe[1] > 0:
            return 1.0
        slowdown, worst = {}, 1.0
        for k in sorted(probe):
            worst = slowdown[k] = max(worst, probe[k] / probe[1])
        counts = sorted(slowdown)
        if ranks >= counts[-1]:
            return slowdown[counts[-1]]
        lo = max(k for k in counts if k <= ranks)
        hi = min(k for k in counts if k >= ranks)
        return slowdown[lo] if hi == lo else (
            slowdown[lo] + (slowdown[hi] - slowdown[lo]) * (ranks - lo) / (hi - lo))

    @property
    def alpha_beta(self) -> AlphaBeta:
        return AlphaBeta(alpha=self.alpha, bandwidth=self.bandwidth)

    @property
    def busbw(self) -> float:
        """The peak all-reduce bus bandwidth measured (netbench.peak_busbw), bytes/s."""
        return netbench.peak_busbw(self.sizes, self.seconds, self.ranks)[0]

    @property
    def ranks(self) -> int:
        return self.nodes * self.tasks_per_node

    def problem(self) -> str | None:
        """The flag of a fit that fails validity's thresholds, or None."""
        return validity.fit_problem(self.label, self.r2, self.max_rel_residual)

    def bounds(self) -> tuple[AlphaBeta, AlphaBeta] | None:
        """(fast, slow) corners of α and B at the interval's level, from the standard errors of
        the fit the level's α–β came from (None where the fit has too few sizes to say)."""
        try:
            fit = netbench.fit_measured(self.sizes, self.seconds, self.ranks)
        except ModelInputError:
            return None
        return interval.alpha_beta_bounds(fit, self.alpha_beta)

    def core_count(self) -> cores.Cores:
        """The machine's physical cores (its logical CPUs where not recorded) and CPUs."""
        logical = self.machine_cpus or 0
        if self.machine_cores:
            return cores.Cores(self.machine_cores, logical or self.machine_cores,
                               cores.PHYSICAL)
        return cores.Cores(logical, logical, cores.LOGICAL)

    def shares_fit(self) -> bool:
        """Whether its nodes, though on fewer machines than nodes, are each confined to a CPU
        share and together fit their machine's cores: then no node takes another's compute."""
        if not (self.node_cpu_share and self.machines and self.machines < self.nodes):
            return False
        per_machine = math.ceil(self.nodes / self.machines)
        cores = self.core_count().physical
        return bool(cores) and per_machine * self.node_cpu_share <= cores + 1e-9

    @property
    def label(self) -> str:
        """The level's name, with ``mpi`` before it where MPI's all-reduce was measured."""
        return f"mpi {self.level}" if self.backend == "mpi" else self.level

    def describe(self, now: float | None = None) -> str:
        age = format_age((now or time.time()) - self.measured_at)
        shared = (f", {self.nodes} nodes on {self.machines} machine(s) of "
                  f"{self.core_count().describe()}" if self.machines else "")
        if self.node_cpu_share:
            shared += (f", each confined to {self.node_cpu_share:.3g} cores"
                       + (" (they fit)" if self.shares_fit() else ""))
        if self.comm_cpu_cores is not None:
            shared += f", the all-reduce keeps {self.comm_cpu_cores:.2f} cores busy"
        if self.compute_probe and len(self.compute_probe) > 1:
            shared += ", compute " + ", ".join(
                f"x{self.compute_slowdown(k):.2f} at {k}" for k in sorted(self.compute_probe)
                if k > 1) + " ranks computing at once"
        return (f"{self.label}: α = {units.format_seconds(self.alpha)}, B = "
                f"{units.format_bandwidth(self.bandwidth)}, "
                f"{netbench.describe_busbw(self.sizes, self.seconds, self.ranks)}, "
                f"R² = {self.r2:.3f}, worst "
                f"residual {self.max_rel_residual:.0%}"
                + (f" (sizes from {self.fit_from:,} B)" if self.fit_from else "")
                + f" ({self.nodes} node(s) x "
                f"{self.tasks_per_node}{shared}, measured {age} ago, run {self.run_id})")


class Preflight(BaseModel):
    """The two-level network of one partition (``intra`` may be None, see the module doc)."""

    model_config = ConfigDict(extra="ignore")

    site: str
    partition: str
    inter: Level
    intra: Level | None = None
    # The same levels measured with MPI's all-reduce (a sweep with an MPI mode; None: not).
    mpi_inter: Level | None = None
    mpi_intra: Level | None = None
    # The across-nodes level measured at the sweep's smaller node counts, by count (the
    # largest is ``inter``), through torch.distributed and through MPI.
    inter_at: dict[int, Level] = {}
    mpi_inter_at: dict[int, Level] = {}
    # What the partition gives each node (the site config): the validity checks' budget.
    cpus_per_node: int | None = None
    gpus_per_node: int = 0

    @property
    def network(self) -> Network:
        return Network(inter=self.inter.alpha_beta,
                       intra=self.intra.alpha_beta if self.intra else None)

    def levels_of(self, mpi: bool = False,
                  nodes: int | None = None) -> tuple[Level, Level | None]:
        """(inter, intra) of a mode's library: MPI's levels where ``mpi`` and measured, each
        level otherwise torch.distributed's; ``inter`` that of a run on ``nodes`` nodes
        (:meth:`across`)."""
        inter = self.across(mpi, nodes)
        if not mpi:
            return inter, self.intra
        return inter, self.mpi_intra or self.intra

    def across(self, mpi: bool = False, nodes: int | None = None) -> Level:
        """The across-nodes level of a run on ``nodes`` nodes: the one measured at that count,
        else at the smallest count measured above it, else at the largest (``inter``; also
        where ``nodes`` is None). ``mpi``: MPI's where it was measured."""
        use_mpi = mpi and self.mpi_inter is not None
        largest = self.mpi_inter if use_mpi else self.inter
        at = {**(self.mpi_inter_at if use_mpi else self.inter_at), largest.nodes: largest}
        if nodes is None:
            return largest
        above = [k for k in at if k >= nodes]
        return at[min(above)] if above else largest

    def network_of(self, mpi: bool = False, nodes: int | None = None) -> Network:
        """The two-level network a mode of that ``Mode.mpi`` communicates over on ``nodes``
        nodes (:meth:`levels_of`)."""
        inter, intra = self.levels_of(mpi, nodes)
        return Network(inter=inter.alpha_beta, intra=intra.alpha_beta if intra else None)

    def library_of(self, mpi: bool = False) -> str:
        """What measured :meth:`network_of`: mpi, else torch.distributed's backend."""
        inter = self.levels_of(mpi)[0]
        return inter.backend or ("nccl" if self.gpus_per_node else "gloo")

    def corner_networks(self, mpi: bool = False, nodes: int | None = None) -> list[Network]:
        """The network (:meth:`network_of`) with both levels at their fast corners, and at
        their slow ones ([] where a level's fit cannot say how uncertain it is)."""
        inter_level, intra_level = self.levels_of(mpi, nodes)
        inter = inter_level.bounds()
        intra = intra_level.bounds() if intra_level else None
        if inter is None or (intra_level is not None and intra is None):
            return []
        return [Network(inter=inter[i], intra=intra[i] if intra else None) for i in (0, 1)]

    def flags(self, mpi: bool = False, nodes: int | None = None,
              tasks: int | None = None) -> list[str]:
        """The fit problems of the levels of :meth:`network_of` (validity.fit_problem): []
        when both hold. For a run of ``nodes`` x ``tasks`` only those of the levels its
        communication crosses: across nodes where it has more than one, inside a node where a
        node has more than one task (the intra-node fit where none was measured)."""
        inter, intra = self.levels_of(mpi, nodes)
        levels = [inter, *([intra] if intra else [])]
        if nodes is not None and tasks is not None:
            levels = [lv for lv, used in ((inter, nodes > 1 or intra is None),
                                          (intra, tasks > 1)) if lv is not None and used]
        return [p for p in (lv.problem() for lv in levels) if p]

    def shared_machine_cpus(self) -> int | None:
        """Cores of the one machine all nodes share (physical where recorded: hyper-threads
        add no compute), when the across-nodes job found its nodes on a single machine
        (None: nodes are machines of their own)."""
        shared = self.shared_machine_cores()
        return shared.physical if shared else None

    def shared_machine_cores(self) -> cores.Cores | None:
        """:meth:`shared_machine_cpus` with the machine's logical CPUs beside its cores. Nodes
        confined to CPU shares that fit the machine together (Level.shares_fit: the test
        cluster's cgroup quotas) are machines of their own for the model."""
        if (self.inter.machines == 1 and self.inter.nodes > 1 and self.inter.machine_cpus
                and not self.inter.shares_fit()):
            return self.inter.core_count()
        return None

    @property
    def node_cpu_share(self) -> float | None:
        """The cores a node's ranks may use where the pre-flight found them confined."""
        return self.inter.node_cpu_share

    def comm_cpu(self, mpi: bool = False) -> float:
        """The share of a rank's CPU its communication takes while it runs, where that CPU is
        all its compute has (a rank of at most one core on a CPU partition: its one compute
        thread keeps it busy): communication hidden behind backward takes this much of its
        time from backward. Measured through the mode's library (``mpi``: Open MPI, which
        polls while it waits and so takes the whole share on the test cluster; Gloo waits in
        the kernel). 0 on GPU partitions, on ranks with cores to spare, or where the
        pre-flight did not record it."""
        level = self.levels_of(mpi)[0]
        if (self.gpus_per_node or not level.comm_cpu_cores or not level.rank_cpu_cores
                or level.rank_cpu_cores > 1.0 + 1e-9):
            return 0.0
        return min(1.0, level.comm_cpu_cores / level.rank_cpu_cores)

    def colocated_slowdown(self, ranks: int) -> float:
        """How much slower a rank computes at ``ranks`` ranks than alone where every node of
        the partition is one machine's and each has a CPU share of its own that fits it (the
        test cluster): they still share it (its memory and caches, the CPU time its kernel and
        daemons take beside their shares), which the compute probe measured
        (Level.compute_slowdown); 1 on machines of their own or unprobed."""
        level = self.inter
        if not (level.machines == 1 and level.nodes > 1 and level.shares_fit()):
            return 1.0
        return level.compute_slowdown(ranks)

    def compute_load(self, ranks: int) -> float:
        """How many ranks share each core at ``ranks`` ranks (>= 1): on nodes sharing one
        machine of C cores, ``max(1, ranks / C)``; on machines of their own, 1."""
        cpus = self.shared_machine_cpus()
        return max(1.0, ranks / cpus) if cpus else 1.0

    def as_record(self, mpi: bool = False, nodes: int | None = None) -> dict:
        """What a prediction records as its network input (``mpi``: an MPI mode's, its
        levels those of :meth:`network_of` on ``nodes`` nodes)."""
        inter, intra = self.levels_of(mpi, nodes)
        return {"site": self.site, "partition": self.partition,
                "inter": inter.model_dump(exclude={"sizes", "seconds"}),
                "intra": intra.model_dump(exclude={"sizes", "seconds"})
                if intra else None}


def format_age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def layouts(site: Site, partition: str, nodes: int = 2) -> dict[str, tuple[int, int]]:
    """Level -> (nodes, tasks per node) of its micro-benchmark job on this partition: the
    across-nodes job spans ``nodes`` (the sweep's largest node count, at least 2; on a site
    whose nodes are this machine, at most its cores: :func:`local_cores`), so the fit sees
    what a ring of that many nodes meets (switch hops, and on the test cluster the machine its
    nodes share)."""
    part = site.partition(partition)
    gpus = part.gpus_per_node or 0
    out: dict[str, tuple[int, int]] = {}
    if gpus != 1:
        out["intra"] = (1, gpus if gpus >= 2 else 2)
    out["inter"] = (max(2, min(nodes, local_cores(site) or nodes)), 1)
    return out


def smaller_counts(site: Site, counts, largest: int) -> list[int]:
    """The node counts below the across-nodes level's (``largest``, layouts) at which it is
    measured again: each of ``counts`` with more than one node, kept to the cores of a site
    whose nodes are this machine (:func:`local_cores`) as the largest is."""
    cap = local_cores(site)
    return sorted({min(k, cap or k) for k in counts if k >= 2} - {largest})


def local_cores(site: Site) -> int | None:
    """The physical cores this process may run on (rankside.cores: hyper-threads counted
    once), where the site's ranks run on this machine (the local site: its nodes share them),
    else None. The pre-flight's ring across nodes is kept to one rank a core: on more ranks
    than cores the fit measures the scheduler's time slices, not the links (an R² below 0 on
    4 nodes of a 2-core machine), and predictions of runs that oversubscribe are flagged
    anyway."""
    from .. import backends

    if not backends.scheduler(site.scheduler).runs_here:
        return None
    return cores.this_process().physical


def cache_path(site: str, partition: str, level: str, nodes: int, tasks: int,
               store: Path | None = None, mpi: bool = False) -> Path:
    """Where a level is cached; an MPI level (``mpi``) beside it, ``-mpi`` in its name."""
    library = "-mpi" if mpi else ""
    return (store or netbench.store_dir()) / (
        f"preflight-{site}-{partition}{library}-{level}-{nodes}x{tasks}.json")


def load_level(path: Path) -> Level:
    """A cached level; a damaged file names itself and the field."""
    try:
        return Level.model_validate(json.loads(path.read_text()))
    except OSError as exc:
        raise UserError(f"{path}: cannot read the pre-flight cache ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON ({exc}); delete it or run the sweep with "
                        "--preflight=always") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "<root>"
        raise UserError(f"{path}: field '{field}': {err['msg']}; delete it or run the sweep "
                        "with --preflight=always") from None


def measure_level(site: Site, partition: str, level: str, nodes: int, tasks: int, out: Path,
                  model: str, dataset: str,
                  on_event: Callable | None = None, batch_size: int = PROBE_BATCH,
                  factor: int = 1, bench: str = netbench.MODE, probe: bool = True,
                  time_limit_min: int | None = None) -> Level:
    """Run the micro-benchmark job of one level (a real job) and fit it (bandwidth_fit);
    ``factor`` times the repeats; ``bench``: the benchmark mode (netbench.MODES);
    ``time_limit_min``: the job's (None: the site's). The across-nodes
    level of a CPU partition measured with torch.distributed also probes how the nodes'
    compute slows when they compute at once (``batch_size``: the sweep's; ``probe=False``: not,
    the level measured again at a smaller count)."""
    options = {"sizes": (SIZES,), "reps": (str(REPS * factor),)}
    probe = probe_of(site, partition, level, model, dataset, batch_size, bench) if probe else None
    if probe:
        options["compute_probe"] = (str(PROBE_PASSES),)
    spec = sweepmod.SweepSpec(
        nodes=(nodes,), modes=(bench,), models=(model,), dataset=dataset,
        batch_sizes=(batch_size,), partitions=(partition,), tasks_per_node=(tasks,),
        iters=ITERS, warmup=WARMUP, options=options, time_limit_min=time_limit_min)
    runs = sweepmod.expand(spec, site)
    prepared = execute.prepare(runs, site, out, retry_failed=True)
    execute.execute(prepared, site, wait=True, on_event=on_event)
    keys = results.recheck(out)  # the run records first: merge only reads
    results.merge(out, keys)
    rdir = out / runs[0].run_id
    fit = bandwidth_fit(rdir)
    r2, worst = fit.r2()
    sizes, seconds = fit.fitted()
    record = rundir.read_record(rdir)
    logs = gather.read_run_logs(rdir)
    footers = [log.footer for log in logs if log.footer]
    boots = {f.get("boot_id") for f in footers if f.get("boot_id")}
    cpus = [int(f["host_cpus"]) for f in footers if isinstance(f.get("host_cpus"), int)]
    physical = [int(f["host_cores"]) for f in footers if isinstance(f.get("host_cores"), int)]
    return Level(machines=len(boots) or None, machine_cpus=min(cpus) if cpus else None,
                 machine_cores=min(physical) if physical else None,
                 node_cpu_share=confined_share(logs), rank_cpu_cores=rank_cores(logs, tasks),
                 comm_cpu_cores=fit.cpu_cores, compute_probe=probe_seconds(footers),
                 compute_probe_cpu=probe_seconds(footers, "compute_probe_cpu"),
                 probe=probe, fit_from=fit.fit_from,
                 level=level, site=site.name, partition=partition, nodes=nodes,
                 tasks_per_node=tasks, alpha=fit.alpha, bandwidth=fit.bandwidth, r2=r2,
                 max_rel_residual=worst, sizes=sizes, seconds=seconds,
                 reps=REPS * factor, job_seconds=job_seconds(rdir),
                 time_limit_min=runs[0].time_limit_min,
                 measured_at=(record.ended_at if record and record.ended_at else time.time()),
                 run_id=fit.run_id, run_dir=fit.run_dir, backend=fit.backend)


def bandwidth_fit(rdir: Path) -> netbench.NetbenchResult:
    """A level's fit (netbench.fit_run): over every size, or, where that one fails validity's
    thresholds and a fit from :data:`BANDWIDTH_FROM` up holds them, that one."""
    fit = netbench.fit_run(rdir)
    if validity.fit_problem("", *fit.r2()) is None:
        return fit
    try:
        wide = netbench.refitted(fit, BANDWIDTH_FROM)
    except UserError:  # those sizes cannot be fitted (times not growing): the first stands
        return fit
    return wide if validity.fit_problem("", *wide.r2()) is None else fit


def job_seconds(rdir: Path) -> float | None:
    """How long a run's job script ran (its job-times.json), or None where it did not say."""
    try:
        times = json.loads((rdir / protocol.JOB_TIMES_FILE).read_text())
        seconds = float(times["script_ended_at"]) - float(times["script_started_at"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return seconds if seconds > 0 else None


def retry_time_limit(first: Level, factor: int = RETRY_FACTOR) -> int | None:
    """The time limit, minutes, of a level's second measurement: its first job's script time
    times ``factor`` (the repeats the second multiplies) times RETRY_MARGIN, at least the
    first job's limit; None (the site's) where the first did not record them."""
    if first.job_seconds is None or first.time_limit_min is None:
        return None
    return max(first.time_limit_min,
               math.ceil(first.job_seconds * factor * RETRY_MARGIN / 60))


def probe_of(site: Site, partition: str, level: str, model: str, dataset: str,
             batch_size: int, bench: str = netbench.MODE) -> str | None:
    """What a level's compute probe runs (``model/dataset/batch``): the across-nodes level of
    a CPU partition only (a GPU's compute is its own), measured by the torch.distributed
    benchmark (the MPI one has no probe), of an image classifier of the zoo (what the probe
    can build); None where there is no probe."""
    if level != "inter" or bench != netbench.MODE or site.partition(partition).gpus_per_node:
        return None
    try:
        spec = zoo.get(model)
    except KeyError:  # a user's model: no probe
        return None
    return f"{model}/{dataset}/{batch_size}" if spec.image_classifier else None


def probe_seconds(footers: list[dict], key: str = "compute_probe") -> dict[int, float] | None:
    """The compute probe of a job (allreduce-bench --compute-probe): for each count of ranks
    computing at once, the mean over those ranks of their seconds per pass (``key``
    ``compute_probe_cpu``: their CPU seconds); None unprobed."""
    by_count: dict[int, list[float]] = {}
    for footer in footers:
        for k, seconds in (footer.get(key) or {}).items():
            if str(k).isdigit() and isinstance(seconds, (int, float)) and seconds > 0:
                by_count.setdefault(int(k), []).append(float(seconds))
    return {k: sum(v) / len(v) for k, v in sorted(by_count.items())} or None


def confined_share(logs) -> float | None:
    """The smallest CPU share the ranks of a job recorded (their headers' ``cpu_share``,
    rankside.cpushare), or None where any rank ran unconfined or recorded none."""
    shares = []
    for log in logs:
        probe = (log.header or {}).get(protocol.CPU_SHARE)
        if not isinstance(probe, dict) or not probe.get("limited"):
            return None
        cores_ = probe.get("cores")
        if not isinstance(cores_, (int, float)) or not cores_ > 0:
            return None
        shares.append(float(cores_))
    return min(shares) if shares else None


def rank_cores(logs, tasks_per_node: int) -> float | None:
    """The CPU cores each rank of a job may use, the smallest over its ranks: a cgroup quota
    is the node's, shared by its ``tasks_per_node`` tasks; an affinity mask is the rank's own
    (rankside.cpushare). None where no rank recorded it."""
    found = []
    for log in logs:
        probe = (log.header or {}).get(protocol.CPU_SHARE)
        cores_ = probe.get("cores") if isinstance(probe, dict) else None
        if isinstance(cores_, (int, float)) and cores_ > 0:
            found.append(float(cores_) / (max(1, tasks_per_node) if probe.get("limited")
                                          else 1))
    return min(found) if found else None


def preflight(site: Site, partitions: list[str], sweep_dir: Path, *, how: str = "auto",
              model: str = "lenet5", dataset: str = "cifar", batch_size: int = PROBE_BATCH,
              store: Path | None = None,
              say: Callable[[str], None] = lambda line: None,
              on_event: Callable | None = None,
              max_age_s: float = MAX_AGE_S, nodes: int = 2, counts=(),
              mpi: bool = False) -> dict[str, Preflight]:
    """The two-level network of every partition: from the cache when fresh (``auto``), else
    measured now; across ``nodes`` nodes (the sweep's largest count) and again at each of
    ``counts`` below it (smaller_counts); ``mpi`` (the sweep has an MPI mode): each level also
    through MPI. The result is also written to ``<sweep>/preflight.json``."""
    if how not in MODES:
        raise UserError(f"--preflight {how}: valid: {', '.join(MODES)}")
    out: dict[str, Preflight] = {}
    if how == "never":
        return out
    now = time.time()
    job = {"out": sweep_dir / PREFLIGHT_DIR, "model": model, "dataset": dataset,
           "batch_size": batch_size, "on_event": on_event, "counts": tuple(counts)}
    for partition in partitions:
        found = {lib: _levels(site, partition, nodes, job, how=how, store=store, say=say,
                              now=now, max_age_s=max_age_s, mpi=lib)
                 for lib in ((False, True) if mpi else (False,))}
        levels, mpi_levels = found[False], found.get(True, {})
        part = site.partition(partition)
        pf = out[partition] = Preflight(
            site=site.name, partition=partition, inter=levels["inter"],
            intra=levels.get("intra"), mpi_inter=mpi_levels.get("inter"),
            mpi_intra=mpi_levels.get("intra"), inter_at=_smaller(levels),
            mpi_inter_at=_smaller(mpi_levels), cpus_per_node=part.cpus_per_node,
            gpus_per_node=part.gpus_per_node or 0)
        for lib in found:
            for flag in pf.flags(lib):
                say(f"pre-flight {site.name}/{partition}{' mpi' if lib else ''}: {flag}: every "
                    f"prediction from it says so")
    sweep_dir.mkdir(parents=True, exist_ok=True)
    rundir.write_json_atomic(sweep_dir / "preflight.json",
                             {p: pf.model_dump(mode="json") for p, pf in out.items()})
    return out


def _smaller(levels: dict[str, Level]) -> dict[int, Level]:
    """The across-nodes levels measured at smaller counts (_levels' ``inter@<count>``)."""
    return {lv.nodes: lv for key, lv in levels.items() if key.startswith("inter@")}


def _levels(site: Site, partition: str, nodes: int, job: dict, *, how: str,
            store: Path | None, say: Callable[[str], None], now: float, max_age_s: float,
            mpi: bool) -> dict[str, Level]:
    """Every level of one partition measured with one library's benchmark (``mpi``: MPI's,
    cached apart), from the cache when fresh (``auto``), else measured now; the across-nodes
    level at a smaller count as ``inter@<count>`` (no compute probe: the largest's serves)."""
    bench = modes.network_benchmark(mpi).name
    levels: dict[str, Level] = {}
    shape = layouts(site, partition, nodes)
    shape.update({f"inter@{k}": (k, 1)
                  for k in smaller_counts(site, job["counts"], shape["inter"][0])})
    job = {k: v for k, v in job.items() if k != "counts"}
    for key, (count, tasks) in shape.items():
        level = key.split("@")[0]
        probed = key == level  # a smaller count's level has no probe: any cached one serves
        path = cache_path(site.name, partition, level, count, tasks, store, mpi=mpi)
        cached = load_level(path) if path.exists() and how == "auto" else None
        where = {"site": site, "partition": partition, "level": level, "nodes": count,
                 "tasks": tasks, **job, "bench": bench, "probe": probed}
        wanted = probe_of(site, partition, level, job["model"], job["dataset"],
                          job["batch_size"], bench) if probed else None
        if (cached is not None and now - cached.measured_at <= max_age_s
                and (cached.probe == wanted or not probed)):
            say(f"pre-flight {site.name}/{partition} {cached.describe(now)} [cached "
                f"{path}]")
            levels[key] = _checked(cached, where, path, say)
            continue
        why = ("on request" if how == "always" else "not measured yet" if cached is None
               else "stale" if now - cached.measured_at > max_age_s
               else f"its compute probe ran {cached.probe or 'nothing'}, the sweep's {wanted}")
        say(f"pre-flight {site.name}/{partition} {'mpi ' if mpi else ''}{level}: measuring "
            f"({why}): {bench} on {count} node(s) x {tasks} task(s)")
        levels[key] = _checked(_measured(where, path, say), where, path, say)
    return levels


def _measured(where: dict, path: Path, say: Callable[[str], None], factor: int = 1,
              time_limit_min: int | None = None) -> Level:
    """Measure one level (``where``: measure_level's arguments), cache it and say it."""
    site, partition = where["site"], where["partition"]
    fresh = measure_level(**where, factor=factor, time_limit_min=time_limit_min)
    path.parent.mkdir(parents=True, exist_ok=True)
    rundir.write_json_atomic(path, fresh.model_dump(mode="json"))
    say(f"pre-flight {site.name}/{partition} {fresh.describe()}")
    return fresh


def _checked(got: Level, where: dict, path: Path, say: Callable[[str], None]) -> Level:
    """``got``, or, when its fit fails validity's thresholds and it was not itself such a
    second measurement, the level measured once more with RETRY_FACTOR times the repeats, in
    a time limit sized from the first job's (retry_time_limit), cached in its place: a second
    measurement that fails too is used, flagged, for the cache's age (``--preflight always``
    measures again). A second job that fails (a partition's maximum time below the limit, a
    node lost) costs nothing measured: ``got`` is kept, flagged."""
    problem = got.problem()
    if problem is None or got.reps > REPS or got.retry_failed:
        return got
    where_said = f"pre-flight {where['site'].name}/{where['partition']} {got.label}"
    limit = retry_time_limit(got)
    say(f"{where_said}: {problem}: measuring again with {RETRY_FACTOR}x the repeats"
        + (f" (time limit {limit} min)" if limit is not None else ""))
    try:
        return _measured(where, path, say, factor=RETRY_FACTOR, time_limit_min=limit)
    except Exception as exc:  # the first measurement stands, its flag with it
        first_line = (str(exc).splitlines() or [type(exc).__name__])[0]
        say(f"{where_said}: measuring again failed ({first_line}); the first measurement "
            "is kept and every prediction from it says it is unreliable")
        kept = got.model_copy(update={"retry_failed": True})
        rundir.write_json_atomic(path, kept.model_dump(mode="json"))
        return kept


def check_busbw(site: Site, networks: dict[str, Preflight]) -> list[str]:
    """Each partition's across-nodes bus bandwidth against the ``min_busbw`` its site declares:
    a line per checked partition, or FabricBelowMinimum naming the partition, both figures and
    the pre-flight run (the sweep then stops before its runs)."""
    lines = []
    for partition, pf in sorted(networks.items()):
        part = site.partition(partition)
        floor = part.min_busbw_bytes
        if floor is None:
            continue
        got = pf.inter.busbw
        verdict = (f"{site.name}/{partition}: all-reduce busbw across {pf.inter.nodes} nodes "
                   f"{got / 1e9:.3g} GB/s, site minimum {part.min_busbw} "
                   f"({floor / 1e9:.3g} GB/s), pre-flight run {pf.inter.run_id}")
        if got < floor:
            raise FabricBelowMinimum(
                f"{verdict}: below the minimum, the sweep stops before its runs; check the "
                f"link (orch netbench --site {site.name} --partition {partition}) or lower "
                "min_busbw in the site config")
        lines.append(f"{verdict}: ok")
    return lines


def load_sweep(sweep_dir: Path) -> dict[str, Preflight]:
    """The pre-flight a sweep used (``<sweep>/preflight.json``), or {} if it had none."""
    path = sweep_dir / "preflight.json"
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
        return {p: Preflight.model_validate(v) for p, v in data.items()}
    except (json.JSONDecodeError, ValidationError, AttributeError) as exc:
        raise UserError(f"{path}: damaged pre-flight record ({str(exc).splitlines()[0]}); "
                        "run the sweep again with --preflight=always") from None
