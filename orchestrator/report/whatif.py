"""What ``orch predict`` asks of the model: one :class:`Ask` (the options as typed) and its
input — a result set's runs, a breakdown file or a trace file — in, a :class:`Forecast`
(rows, a header saying what was used, notes) out. The command only parses and prints.

The selection of a configuration in a result set, the gradient size, the network and the
two-level what-ifs are decided here, each error naming the option to change.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from pydantic import BaseModel, ConfigDict

from .. import modes, units, zoo
from ..errors import UserError
from ..execute import modelerror
from ..execute.ledger import (
    comm_function,
    compute_scale,
    contention_factor,
    measured_base,
    measured_interval,
    priced,
    run_flags,
    runs_interval,
    tail_bytes,
    unmeasured_library,
)
from ..execute.network import alpha_beta_for, network_for
from ..perfmodel.comm import PATTERN_MODELS, AlphaBeta, Network, pattern_comm_time
from ..perfmodel.compute import iteration_time
from ..perfmodel.inputs import (
    PHASES,
    Overlap,
    Trace,
    check_workers,
    gradient_bytes,
    load_breakdown,
    load_trace_csv,
    priced_overlap,
    run_options,
)
from ..perfmodel.predict import Measured, predict
from ..spec.settings import parse_int_list
from . import as_float, baseline, completed, config_labels, config_of, training_runs
from .predictions import from_baseline

# Default worker counts: a breakdown or a trace, and a result set extrapolated (two-level).
SMALL_COUNTS = [1, 2, 4, 8]
LARGE_COUNTS = [1, 2, 4, 8, 16, 64, 256, 1024]


class Ask(BaseModel):
    """The options of ``orch predict`` that choose the model's inputs, as typed (each field
    named as its option; other options are not the model's and are ignored)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    workers: str | None = None
    overlap: str | None = None
    prefetch: bool = False
    bandwidth: str | None = None
    latency: str | None = None
    netbench_file: Path | None = None
    site: str | None = None
    partition: str | None = None
    grad_bytes: str | None = None
    model: str | None = None
    dataset: str = "cifar"
    run: str | None = None
    mode: str | None = None
    batch_size: int | None = None
    bucket_size: str | None = None

    def counts(self, default: list[int]) -> list[int]:
        """The worker counts asked (--workers), else ``default``."""
        return list(parse_int_list(self.workers, "--workers")) if self.workers else default

    def bucket_bytes(self) -> int | None:
        if self.bucket_size is None:
            return None
        return units.parse_bytes(self.bucket_size, "--bucket-size")


class Forecast(BaseModel):
    """Predicted rows, the header saying what they were predicted from, and notes."""

    rows: list[dict]
    header: str
    notes: list[str] = []
    with_measured: bool = False


class TwoLevel:
    """The two-level options of ``orch predict`` (tasks per node, pattern, intra-node
    what-ifs); any of them, or a result set with a pre-flight, selects the two-level model."""

    def __init__(self, tasks_per_node: int | None, gpus_per_node: int | None,
                 pattern: str | None, servers: int | None, intra_bandwidth: str | None,
                 intra_latency: str | None) -> None:
        if tasks_per_node is not None and gpus_per_node is not None and (
                tasks_per_node != gpus_per_node):
            raise UserError(f"--tasks-per-node {tasks_per_node} and --gpus-per-node "
                            f"{gpus_per_node} disagree: give one")
        self.tasks = tasks_per_node if tasks_per_node is not None else gpus_per_node
        if self.tasks is not None and self.tasks < 1:
            raise UserError(f"--tasks-per-node {self.tasks}: must be at least 1")
        if servers is not None and servers < 1:
            raise UserError(f"--servers {servers}: must be at least 1")
        if pattern is not None and pattern not in PATTERN_MODELS:
            raise UserError(f"--pattern {pattern}: no model for this communication pattern; "
                            f"patterns with one: {', '.join(PATTERN_MODELS)}")
        self.pattern, self.servers = pattern, servers
        self.intra_bandwidth, self.intra_latency = intra_bandwidth, intra_latency

    def wanted(self, results_dir: Path | None) -> bool:
        given = (self.tasks, self.pattern, self.servers, self.intra_bandwidth,
                 self.intra_latency)
        if any(v is not None for v in given):
            return True
        if results_dir is not None and results_dir.is_dir():
            return (results_dir / "preflight.json").is_file()
        return False


def grad_bytes_for(grad_bytes: str | None, model: str | None, dataset: str) -> int | None:
    """The gradient size: --grad-bytes, else --model's float32 gradient, else None."""
    if grad_bytes is not None:
        value = units.parse_bytes(grad_bytes, "--grad-bytes")
        if value <= 0:
            raise UserError(f"--grad-bytes {grad_bytes}: must be a positive byte count")
        return value
    if model is not None:
        value = gradient_bytes(model, dataset)
        if value is None:
            raise UserError(f"--model {model} --dataset {dataset}: not in the model zoo; valid: "
                            f"{', '.join(zoo.MODELS)} (or give --grad-bytes)")
        return value
    return None


def select_config(runs: pd.DataFrame, ask: Ask, directory: Path) -> pd.DataFrame:
    """The training runs of the one configuration asked: --run's, or the one matching
    --mode/--model/--partition/--batch-size (several matching: an error listing them)."""
    train = training_runs(runs)
    if ask.run is not None:
        hit = train[train["run_id"] == ask.run]
        if hit.empty:
            raise UserError(f"--run {ask.run}: no such run of a training mode in {directory}")
        configs = config_of(train)
        return train[configs == configs.loc[hit.index[0]]]
    sel = train
    for col, value in (("mode", ask.mode), ("model", ask.model), ("partition", ask.partition),
                       ("batch_size", ask.batch_size)):
        if value is not None:
            sel = sel[sel[col] == value]
    if sel.empty:
        raise UserError(f"{directory}: no training run matches the selection (--mode, --model, "
                        "--partition, --batch-size)")
    configs = config_of(sel)
    if configs.nunique() > 1:
        labels = config_labels(sel)
        pick = ", ".join(f"'{labels[c]}' (--run {sel[configs == c]['run_id'].iloc[0]})"
                         for c in sorted(configs.unique()))
        raise UserError(f"{directory}: the selection matches {configs.nunique()} "
                        f"configurations: {pick}; narrow it with --mode/--model/--partition/"
                        "--batch-size or pick one with --run RUN_ID")
    return sel


def add_alpha_beta(rows: list[dict], ab: AlphaBeta | None, desc: str) -> None:
    """Each row says the α–β it used and where that came from ("input": the source's own)."""
    for row in rows:
        row["alpha"] = ab.alpha if ab is not None else None
        row["bandwidth"] = ab.bandwidth if ab is not None else None
        row["comm_source"] = desc if ab is not None else "input"


# --- one input, one model ------------------------------------------------------------------


def from_breakdown(ask: Ask, path: Path) -> Forecast:
    """A breakdown file, its t_comm as given or the α–β all-reduce of the gradient."""
    source = load_breakdown(path)
    ab, ab_desc = alpha_beta_for(ask.netbench_file, ask.site, ask.partition, None,
                                 ask.bandwidth, ask.latency)
    grad = grad_bytes_for(ask.grad_bytes, ask.model, ask.dataset)
    if ab is not None and grad is None:
        raise UserError("α–β communication needs the gradient size: give --grad-bytes N or "
                        "--model NAME [--dataset D]")
    notes = []
    if ab is not None and source.t_comm != 0.0:
        notes.append(f"note: t_comm of {path} is replaced by the α–β all-reduce of {grad:,} "
                     "bytes")
        source = source.model_copy(update={"t_comm": 0.0})
    preds = predict(source, ask.counts(SMALL_COUNTS), overlap=ask.overlap or "none",
                    prefetch=ask.prefetch, alpha_beta=ab,
                    grad_bytes=grad if ab is not None else None)
    rows = [p.row() for p in preds]
    header = (f"breakdown {path}; communication: "
              + (f"α–β ({ab_desc}), all-reduce of {grad:,} bytes" if ab is not None
                 else "t_comm as given"))
    add_alpha_beta(rows, ab, ab_desc)
    return Forecast(rows=rows, header=header, notes=notes)


def from_trace(ask: Ask, path: Path) -> Forecast:
    """A layer-wise trace, its messages as traced or priced by the α–β all-reduce."""
    source = load_trace_csv(path)
    ab, ab_desc = alpha_beta_for(ask.netbench_file, ask.site, ask.partition, None,
                                 ask.bandwidth, ask.latency)
    bucket = ask.bucket_bytes()
    preds = predict(source, ask.counts(SMALL_COUNTS), overlap=ask.overlap or "none",
                    prefetch=ask.prefetch, alpha_beta=ab, bucket_bytes=bucket)
    rows = [p.row() for p in preds]
    header = (f"trace {path} ({len(source.layers)} layers); communication: "
              + (f"α–β ({ab_desc})" if ab is not None else "comm_us as traced"))
    add_alpha_beta(rows, ab, ab_desc)
    return Forecast(rows=rows, header=header)


def measured_at(done: pd.DataFrame) -> dict[int, dict]:
    """Per worker count of the completed runs: (exposed, total) communication, speedup and
    t_iter as measured (their means)."""
    out = {}
    for w, g in done.groupby("ranks"):
        out[int(w)] = {
            "t_comm": (float(g["t_comm"].mean()), as_float(g["t_comm_total"].mean())),
            "speedup": as_float(g["speedup"].astype(float).mean()),
            "t_iter": float(g["t_iter"].mean()),
        }
    return out


def from_results(ask: Ask, runs: pd.DataFrame, sweep: Path | None, directory: Path,
                 iters: pd.DataFrame | None = None) -> Forecast:
    """A result set's configuration, from its 1-node breakdown: communication by the α–β
    all-reduce, or as measured at each worker count; with the measured speedups beside.
    ``iters``, its iterations table, gives the intervals their per-iteration quantiles."""
    sel = select_config(runs, ask, directory)
    first = sel.iloc[0]
    base = baseline(sel)
    label = config_labels(runs).get(config_of(sel).iloc[0], first["mode"])
    if base is None:
        raise UserError(f"{directory}: configuration '{label}' has no completed 1-node run to "
                        "take the breakdown from; sweep it with --nodes 1")
    phases, base_w = base
    ab, ab_desc = alpha_beta_for(ask.netbench_file, str(first["site"]),
                                 str(first["partition"]), sweep, ask.bandwidth, ask.latency)
    grad = grad_bytes_for(ask.grad_bytes, None, "cifar") or gradient_bytes(
        str(first["model"]), str(first["dataset"]))
    if ab is not None and grad is None:
        raise UserError(f"model '{first['model']}' is not in the zoo: give --grad-bytes N")
    measured = measured_at(completed(sel))
    counts = ask.counts(sorted(measured))
    ov = ask.overlap or priced_overlap(str(first["mode"]), first.get("options"), grad)
    try:
        rows = from_baseline(
            phases, base_w, counts, alpha_beta=ab, grad_bytes=grad,
            measured_comm={w: m["t_comm"] for w, m in measured.items()}, overlap=ov,
            prefetch=ask.prefetch)
    except UserError as exc:
        raise UserError(f"{directory} ({label}): {exc}; measured worker counts: "
                        f"{', '.join(map(str, sorted(measured)))}") from None
    _beside_measured(rows, measured)
    add_alpha_beta(rows, ab, ab_desc)
    _spread_interval(rows, completed(sel[sel["ranks"] == base_w]), iters)
    if ab is None:
        for row in rows:
            row["comm_source"] = "measured (no netbench result: " + ab_desc + ")"
    comm = (f"α–β ({ab_desc}), all-reduce of {grad:,} bytes" if ab is not None
            else f"as measured at each worker count ({ab_desc})")
    header = (f"{directory} '{label}': 1-node breakdown ({base_w} worker(s)) of run(s) "
              f"{', '.join(sel[sel['nodes'] == 1]['run_id'])}; overlap {ov}; communication: "
              f"{comm}")
    return Forecast(rows=rows, header=header, with_measured=bool(measured))


def _spread_interval(rows: list[dict], base: pd.DataFrame,
                     iters: pd.DataFrame | None) -> None:
    """Each row's interval from the baseline runs as the ledger takes it (ledger.runs_interval:
    their per-iteration spread as fractions of the row's t_iter, quantiles of ``iters`` where
    it holds them, and their repeats); a netbench α–β carries no fit uncertainty here."""
    for row in rows:
        band = runs_interval(base, row["t_iter"], iterations=iters)
        row.update(t_iter_low=band.low, t_iter_high=band.high, level=band.level,
                   interval_basis=band.basis)


def _beside_measured(rows: list[dict], measured: dict[int, dict]) -> None:
    for row in rows:
        m = measured.get(row["workers"])
        row["measured_speedup"] = m["speedup"] if m else None
        row["measured_t_iter"] = m["t_iter"] if m else None
        row["residual_speedup"] = (m["speedup"] - row["speedup"]
                                   if m and m["speedup"] is not None else None)


# --- the two-level model: a pattern on the intra- and inter-node α–β, to any worker count -----

# A measured prediction's row: these fields, in this order, between the layout and the speedup.
_MEASURED_FIELDS = ("t_iter", "t_comm_exposed", "t_comm_total", "t_comm_model_base",
                    "t_sync_wait", "compute_scale", *(p for p in PHASES if p != "t_comm"))


def two_level_trace(two: TwoLevel, ask: Ask, path: Path) -> Forecast:
    """A trace extrapolated with the pattern's model priced per layer (or bucket) message."""
    source = load_trace_csv(path)
    net, net_desc, _ = network_for(None, ask.partition, ask.site, ask.netbench_file,
                                   ask.bandwidth, ask.latency, two.intra_bandwidth,
                                   two.intra_latency)
    tasks, pat = two.tasks or 1, two.pattern or "allreduce"
    rows = trace_network_rows(
        source, ask.counts(SMALL_COUNTS), tasks, net, pattern=pat,
        overlap=ask.overlap or "none", prefetch=ask.prefetch, bucket_bytes=ask.bucket_bytes(),
        servers=two.servers or 1)
    header = (f"trace {path} ({len(source.layers)} layers), {tasks} rank(s) per node; "
              f"model: {pat} per layer message, overlap {ask.overlap or 'none'}; network: "
              f"{net_desc}")
    for r in rows:
        r.update(pattern=pat, tasks_per_node=tasks, network=net_desc, source="trace")
    return Forecast(rows=rows, header=header)


def two_level_breakdown(two: TwoLevel, ask: Ask, path: Path) -> Forecast:
    """A breakdown (at 1 worker) extrapolated with the pattern's model of the gradient."""
    source = load_breakdown(path)
    net, net_desc, _ = network_for(None, ask.partition, ask.site, ask.netbench_file,
                                   ask.bandwidth, ask.latency, two.intra_bandwidth,
                                   two.intra_latency)
    grad = grad_bytes_for(ask.grad_bytes, ask.model, ask.dataset)
    if grad is None:
        raise UserError("the pattern model needs the gradient size: give --grad-bytes N or "
                        "--model NAME [--dataset D]")
    b1 = source.at(1)
    base_t = iteration_time(source, 1, prefetch=ask.prefetch)
    tasks, pat = two.tasks or 1, two.pattern or "allreduce"

    def comm(w: int, nodes: int, t: int) -> float:
        return pattern_comm_time(pat, grad, w, t, net, servers=two.servers or 1)

    base = Measured(phases={p: b1.phase_at(p, 1) for p in PHASES}, t_iter=base_t, workers=1,
                    comm_total=comm(1, 1, 1), speedup_from=(1, base_t))
    rows = _extrapolate(base, comm, tasks, ask.counts(LARGE_COUNTS), ask.overlap or "none",
                        ask.prefetch, None, {})
    return _two_level_forecast(rows, f"breakdown {path}", pat, ask.overlap or "none", tasks,
                               grad, net_desc)


def compute_load(pre, top_ranks: int, done: pd.DataFrame):
    """(n -> the compute phases' factor from ``top_ranks`` ranks to n, or None; what to say
    of it) where the pre-flight found the nodes on one machine, as the ledger scales them
    (ledger.compute_scale): ranks per core where they take turns on its cores, else the
    pre-flight's compute probe."""
    if pre is None:
        return None, ""
    cpus = pre.shared_machine_cpus()
    factor = contention_factor(done[done["ranks"] <= 2]) if cpus else None
    if not cpus and pre.colocated_slowdown(pre.inter.nodes) == 1.0:
        return None, ""
    said = ("; the pre-flight found the nodes on one machine: compute scales by its compute "
            "probe") if not cpus else (
        f"; the pre-flight found the nodes on one machine of {cpus} cores: compute scales "
        "with ranks per core" + (f" and x{factor:.2f} (measured from 1 to 2 ranks) per "
                                 "doubling of the ranks running at once" if factor else ""))
    return (lambda n: compute_scale(pre, top_ranks, n, factor)), said


def two_level_results(two: TwoLevel, ask: Ask, runs: pd.DataFrame, sweep: Path | None,
                      directory: Path, iters: pd.DataFrame | None = None) -> Forecast:
    """A result set's largest completed runs extrapolated with their mode's pattern on the
    sweep's pre-flight network (or a netbench α–β), speedups against its smallest runs;
    ``iters``, its iterations table, gives the intervals their per-iteration quantiles."""
    sel = select_config(runs, ask, directory)
    first = sel.iloc[0]
    done = completed(sel)
    if done.empty:
        raise UserError(f"{directory}: the selected configuration has no completed run "
                        "to take a breakdown from")
    top = done[done["ranks"] == done["ranks"].max()]
    small = done[done["ranks"] == done["ranks"].min()]
    mpi = bool(getattr(modes.registry().get(str(first["mode"])), "mpi", False))
    net, net_desc, pre = network_for(sweep, str(first["partition"]), str(first["site"]),
                                     ask.netbench_file, ask.bandwidth, ask.latency,
                                     two.intra_bandwidth, two.intra_latency, mpi=mpi)
    load, said = compute_load(pre, int(top["ranks"].iloc[0]), done)
    net_desc += said
    grad = grad_bytes_for(ask.grad_bytes, None, "cifar") or gradient_bytes(
        str(first["model"]), str(first["dataset"]))
    if grad is None:
        raise UserError(f"model '{first['model']}' is not in the zoo: give --grad-bytes N")
    ov = ask.overlap or priced_overlap(str(first["mode"]), first.get("options"), grad)
    tail = tail_bytes(top, ov)  # DDP's last bucket: sent after backward, as the ledger prices

    def priced_on(on: Network):  # (the gradient's cost, the tail's) on one network, a what-if's
        return priced(str(first["mode"]), run_options(first.get("options")), grad, tail,
                      lambda _nodes: on, pattern=two.pattern, servers=two.servers)

    pat = comm_function(str(first["mode"]), run_options(first.get("options")), grad, net,
                        pattern=two.pattern, servers=two.servers)[0]
    comm, tail_comm = priced_on(net)
    tasks = two.tasks or int(top["tasks_per_node"].iloc[0])
    at_top = (int(top["ranks"].iloc[0]), int(top["nodes"].iloc[0]),
              int(top["tasks_per_node"].iloc[0]))
    base = measured_base(top, comm(*at_top), small)
    if pre is not None and pre.comm_cpu(mpi):
        base = base.model_copy(update={"comm_cpu": pre.comm_cpu(mpi)})
        net_desc += (f"; hidden communication takes {pre.comm_cpu(mpi):.0%} of a rank's CPU from "
                     "backward (measured by the pre-flight)")
    if tail_comm is not None:
        base = base.model_copy(update={"comm_tail": tail_comm(*at_top)})
        net_desc += f"; the last bucket's {tail:,} B sent after backward"
    measured = {int(w): float(g["t_iter"].mean()) for w, g in done.groupby("ranks")}
    label = (f"{directory} '{first['mode']} {first['model']}': breakdown of run(s) "
             f"{', '.join(top['run_id'])} ({base.workers} rank(s))")
    rows = _extrapolate(base, comm, tasks, ask.counts(LARGE_COUNTS), ov, ask.prefetch, load,
                        measured, tail_comm)
    what_if = any(v is not None for v in (ask.bandwidth, ask.latency, ask.netbench_file,
                                          two.intra_bandwidth, two.intra_latency))
    nets = pre.corner_networks(mpi) if pre is not None and not what_if else []
    pairs = [priced_on(n) for n in nets]
    corners, tails = [c for c, _ in pairs], [t for _, t in pairs]

    error = modelerror.model_error(str(first["site"]))  # the site's, as the ledger's
    for row in rows:
        band = measured_interval(top, base, corners,
                                 (row["workers"], row["nodes"], row["tasks_per_node"]), ov,
                                 row["compute_scale"], row["t_iter"], ask.prefetch, iters,
                                 model_error=error, tails=tails)
        row.update(t_iter_low=band.low, t_iter_high=band.high, level=band.level,
                   interval_basis=band.basis, model_error_basis=band.error_basis,
                   flags=run_flags(pre, row["workers"], row["tasks_per_node"], top, mpi=mpi,
                                   nodes=row["nodes"], unmeasured=unmeasured_library(
                                       modes.registry().get(str(first["mode"])), pre))
                   if pre is not None else [])
    return _two_level_forecast(rows, label, pat, ov, tasks, grad, net_desc)


def _extrapolate(base: Measured, comm, tasks: int, counts: list[int], overlap: str,
                 prefetch: bool, load, measured: dict[int, float], tail=None) -> list[dict]:
    """One row per worker count: ``tasks`` ranks a node (fewer when there are fewer ranks),
    the model's communication at that layout (``tail``: of the gradient sent after backward,
    or None), compute scaled by ``load(N)`` (from the measured size to N: ranks per core and
    contention, ledger.compute_scale)."""
    rows = []
    for w in counts:
        t = min(tasks, w)
        nodes = math.ceil(w / t)
        pred = predict(base, [w], overlap=overlap, prefetch=prefetch,
                       comm=lambda n, nodes=nodes, t=t: comm(n, nodes, t),
                       compute_scale=load,
                       tail=(lambda n, nodes=nodes, t=t: tail(n, nodes, t)) if tail else None,
                       )[0]
        rows.append({"workers": w, "nodes": nodes, "tasks_per_node": t,
                     **{f: getattr(pred, f) for f in _MEASURED_FIELDS},
                     "speedup": pred.speedup, "efficiency": pred.efficiency,
                     "measured_t_iter": measured.get(w)})
    return rows


def _two_level_forecast(rows: list[dict], label: str, pattern: str, overlap: str, tasks: int,
                        grad: int, net_desc: str) -> Forecast:
    for row in rows:
        row.update({"pattern": pattern, "overlap": overlap, "network": net_desc,
                    "source": label, "measured_speedup": None, "residual_speedup": None})
    header = (f"{label}; model: {pattern} (overlap {overlap}), {tasks} rank(s) per node, "
              f"gradient {grad:,} bytes; network: {net_desc}")
    return Forecast(rows=rows, header=header,
                    with_measured=any(r.get("measured_t_iter") is not None for r in rows))


def trace_network_rows(
    trace: Trace,
    workers: Sequence[int],
    per_node: int,
    net: Network,
    *,
    pattern: str = "allreduce",
    overlap: Overlap = "none",
    prefetch: bool = False,
    bucket_bytes: int | None = None,
    servers: int = 1,
) -> list[dict[str, float]]:
    """A layer-wise trace extrapolated to ``workers`` ranks, ``per_node`` to a node: every
    layer's (or bucket's) message priced by the pattern's model on the two-level network, then
    scheduled (``none``: after backward; ``wfbp``: wait-free, optional buckets).

    Rows: workers, nodes, t_iter, speedup (``N · t_iter(1) / t_iter(N)``), efficiency,
    t_comm_exposed, t_comm_total and the phases (seconds)."""
    per_node = check_workers(per_node, "tasks per node")
    preds = predict(trace, workers, overlap=overlap, prefetch=prefetch,
                    bucket_bytes=bucket_bytes, network=net, per_node=per_node,
                    pattern=pattern, servers=servers)
    fields = ("t_iter", "t_comm_exposed", "t_comm_total", *(p for p in PHASES if p != "t_comm"))
    return [{"workers": p.workers, "nodes": -(-p.workers // per_node),
             **{f: getattr(p, f) for f in fields}, "speedup": p.speedup,
             "efficiency": p.efficiency} for p in preds]
