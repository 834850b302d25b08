"""The ledger of predictions stated before the runs they predict, and their scorecard.

Why: a model checked against the runs it was fitted to proves nothing. A staged sweep runs
its runs in stages of increasing scale (distinct rank counts, smallest first). After each
stage every later run of a configuration is predicted from that configuration's largest
completed run so far (its measured phase breakdown and ``t_iter``) plus the pre-flight's
two-level network (:mod:`.preflight`), with the communication model its mode declares
(``Mode.pattern``: ring all-reduce, parameter server with S servers, reduce-scatter +
all-gather). Each prediction is appended, with its time, model and inputs, to
``<sweep>/predictions.jsonl`` (append-only, never rewritten) *before* the next stage is
submitted. A run's own measurements are never used to predict it: a run is predicted only from
a run with fewer ranks that had already finished. (The staging itself, which submits the
stages, is orchestrator.execute.staged: this module only predicts, writes and reads.)

Scoring them against the runs is the report's (:mod:`orchestrator.report.scorecard`).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from .. import __version__, files, modes, protocol
from ..errors import UserError
from ..perfmodel import interval, validity
from ..perfmodel.comm import PATTERN_MODELS, Network, pattern_comm_time
from ..perfmodel.inputs import ModelInputError, gradient_bytes, priced_overlap, run_options
from ..perfmodel.predict import Measured, predict
from ..results import analyze, resultset
from ..results.select import config_of, training_runs
from ..spec.api import Run
from . import modelerror
from .preflight import Preflight

FILE = "predictions.jsonl"


# The runs-table columns a prediction reads (and scores against): kept in one place, so the
# native-window measurement can change what t_iter means without touching the model.
T_ITER = "t_iter"  # whatever iteration time the runs table reports
PHASE_COLUMNS = protocol.PHASES
RANKS, NODES, TASKS = "ranks", "nodes", "tasks_per_node"
# Per-phase spread columns: the measured run's compute jitter (synchronization wait model).
JITTER_COLUMNS = tuple(f"{p}_std" for p in PHASE_COLUMNS if p != "t_comm")


def compute_jitter(base: pd.DataFrame) -> float:
    """Per-iteration standard deviation of a rank's compute in the measured run(s): the phase
    spreads combined as if independent (0 where the runs table has none)."""
    total = 0.0
    for col in JITTER_COLUMNS:
        if col in base.columns:
            value = pd.to_numeric(base[col], errors="coerce").mean()
            if pd.notna(value):
                total += float(value) ** 2
    return math.sqrt(total)

def _mode_of(name: str):
    return modes.registry().get(name)


def servers_of(mode_name: str, nodes: int, tasks_per_node: int, options: dict) -> int:
    """Parameter servers of a run, from its mode's task placement (0 if it has none)."""
    mode = _mode_of(mode_name)
    if mode is None:
        return 0
    return sum(t.role in ("server", "ps") for t in mode.tasks(nodes, tasks_per_node, options))


def comm_function(mode_name: str, options: dict, grad: int, net: Network,
                  pattern: str | None = None, servers: int | None = None,
                  ) -> tuple[str, Callable[[int, int, int], float]]:
    """(pattern, ``f(workers, nodes, tasks_per_node) -> seconds``) of a mode's declared
    pattern (or ``pattern``, a what-if); ``servers`` replaces the placement's server count. A
    pattern without a model raises ModelInputError."""
    mode = _mode_of(mode_name)
    if pattern is None:
        pattern = mode.pattern if mode is not None else "none"
    if pattern not in PATTERN_MODELS:
        raise ModelInputError(
            f"mode '{mode_name}' declares communication pattern '{pattern}', which has no "
            f"model; patterns with one: {', '.join(PATTERN_MODELS)}")
    reshard = options.get("reshard_after_forward", "yes") != "no"

    def comm(workers: int, nodes: int, tasks: int) -> float:
        count = servers if servers is not None else servers_of(mode_name, nodes, tasks,
                                                                options)
        count = max(1, count)
        return pattern_comm_time(pattern, grad, workers, tasks, net,
                                           servers=count, reshard_after_forward=reshard)

    return pattern, comm


def counted_comm(mode_name: str, options: dict, grad: int,
                 network_at: Callable[[int], Network], pattern: str | None = None,
                 servers: int | None = None) -> Callable[[int, int, int], float]:
    """comm_function's ``f(workers, nodes, tasks_per_node)`` on the network measured at each
    call's node count (``network_at(nodes)``: Preflight.network_of, corner_networks): the
    measured run and the predicted one may span different counts, each with its own fit."""
    def comm(workers: int, nodes: int, tasks: int) -> float:
        return comm_function(mode_name, options, grad, network_at(nodes), pattern=pattern,
                             servers=servers)[1](workers, nodes, tasks)
    return comm


def priced(mode_name: str, options: dict, grad: int, tail: int | None,
           network_at: Callable[[int], Network], pattern: str | None = None,
           servers: int | None = None,
           ) -> tuple[Callable[[int, int, int], float], Callable[[int, int, int], float] | None]:
    """(the gradient's cost, the last bucket's cost or None without a tail), each
    ``f(workers, nodes, tasks_per_node)`` on the network of its call's node count
    (counted_comm; ``pattern``/``servers`` as comm_function's what-if): one network choice
    prices both, so a corner never pairs the gradient on one fit with the tail on another."""
    def count(size: int) -> Callable[[int, int, int], float]:
        return counted_comm(mode_name, options, size, network_at, pattern, servers)
    return count(grad), (count(tail) if tail else None)


def tail_bytes(base: pd.DataFrame, overlap: str) -> int | None:
    """The gradient bytes the measured runs all-reduce only once backward has ended
    (``comm_tail_bytes``: DDP's last bucket), where their overlap would otherwise price it
    hidden (``wfbp``); None where the mode does not say or nothing overlaps."""
    if overlap != "wfbp" or "comm_tail_bytes" not in base.columns:
        return None
    found = pd.to_numeric(base["comm_tail_bytes"], errors="coerce").max()
    return int(found) if pd.notna(found) and found > 0 else None


def measured_base(base: pd.DataFrame, comm_total: float,
                  smallest: pd.DataFrame | None = None) -> Measured:
    """The :class:`Measured` source of the runs of one size (the mean of each phase and of
    ``t_iter``, their compute jitter); speedups relative to ``smallest``'s mean ``t_iter``
    when it has runs."""
    speedup_from = None
    if smallest is not None and not smallest.empty:
        speedup_from = (int(smallest[RANKS].iloc[0]), float(smallest[T_ITER].mean()))
    return Measured(phases={p: float(base[p].mean()) for p in PHASE_COLUMNS},
                    t_iter=float(base[T_ITER].mean()), workers=int(base[RANKS].iloc[0]),
                    comm_total=comm_total, jitter=compute_jitter(base),
                    speedup_from=speedup_from)


def predict_runs(runs: pd.DataFrame, targets: set[str], networks: dict[str, Preflight],
                 now: float | None = None, iterations: Path | None = None,
                 ) -> tuple[list[dict], list[str]]:
    """Predictions of the ``targets`` (run ids) from their configuration's largest completed
    run with fewer ranks; returns (records, notes on what could not be predicted).
    ``iterations``: the sweep's iterations.parquet as merged now (the completed runs'
    per-iteration ``t_iter``, for the intervals' quantiles), None where there is none."""
    now = time.time() if now is None else now
    train = training_runs(runs)
    if train.empty:
        return [], []
    done_ids = train.loc[(train["state"] == "COMPLETED") & train[T_ITER].notna(), "run_id"]
    iters = read_iterations(iterations, list(done_ids))
    errors = {str(site): modelerror.model_error(str(site)) for site in train["site"].unique()}
    configs = config_of(train)
    records, notes = [], []
    for _, group in train.groupby(configs, sort=False):
        done = group[(group["state"] == "COMPLETED") & group[T_ITER].notna()]
        first_done = done[done[RANKS] == group[RANKS].min()]
        for _, run in group[group["run_id"].isin(targets)].iterrows():
            base = done[done[RANKS] < int(run[RANKS])]
            if base.empty:
                continue
            smaller = base
            base = base[base[RANKS] == base[RANKS].max()]
            try:
                records.append(_predict_run(run, base, first_done, networks, now,
                                            contention_factor(smaller), iters,
                                            errors[str(run["site"])]))
            except _NotPredicted as why:
                notes.append(f"{run['run_id']}: {why}")
    return records, notes


class _NotPredicted(Exception):
    """Why one run has no prediction (a note, never an error of the sweep)."""


def contention_factor(smaller: pd.DataFrame) -> float | None:
    """How much a rank's compute slows when a second rank shares its machine, as measured:
    the mean compute (t_h2d + t_f + t_b + t_u) of the configuration's completed 2-rank runs
    over its 1-rank runs (None without both). Bounded to [1, 2]: between no contention and
    two ranks taking turns on one core; noise outside it is not a model."""
    compute = [p for p in ("t_h2d", "t_f", "t_b", "t_u") if p in smaller.columns]
    if not compute:
        return None
    per_run = smaller[compute].apply(pd.to_numeric, errors="coerce").sum(axis=1)
    one, two = per_run[smaller[RANKS] == 1].mean(), per_run[smaller[RANKS] == 2].mean()
    if not (pd.notna(one) and pd.notna(two) and one > 0):
        return None
    return min(2.0, max(1.0, float(two / one)))


def compute_scale(pf: Preflight, base_ranks: int, ranks: int,
                  factor: float | None = None) -> float:
    """The compute phases' factor from ``base_ranks`` to ``ranks``, where the nodes share one
    machine of C cores (preflight.compute_load; 1 on machines of their own): ranks per core
    (taking turns: time slices) times ``factor`` (contention_factor) for each doubling of the
    ranks running at once, ``min(ranks, C)`` (memory bandwidth and caches they share). Nodes
    whose CPU shares fit their one machine take no turns: their factor is the pre-flight's
    compute probe (preflight.colocated_slowdown)."""
    cpus = pf.shared_machine_cpus()
    if not cpus:
        return pf.colocated_slowdown(ranks) / pf.colocated_slowdown(base_ranks)
    scale = pf.compute_load(ranks) / pf.compute_load(base_ranks)
    if cpus and factor:
        scale *= factor ** math.log2(min(ranks, cpus) / min(base_ranks, cpus))
    return scale


def _predict_run(run: pd.Series, base: pd.DataFrame, first_done: pd.DataFrame,
                 networks: dict[str, Preflight], now: float,
                 factor: float | None = None, iters: pd.DataFrame | None = None,
                 error: tuple[interval.ModelError | None, str] = (None, interval.NO_MODEL_ERROR),
                 ) -> dict:
    """The ledger record of one run predicted from ``base`` (the runs of the largest smaller
    size), or :class:`_NotPredicted`; ``error``: its site's model error and its basis
    (modelerror.model_error)."""
    pf = networks.get(str(run["partition"]))
    if pf is None:
        raise _NotPredicted(f"no pre-flight network for partition {run['partition']}: not "
                            "predicted")
    opts = run_options(run.get("options"))
    grad = gradient_bytes(str(run["model"]), str(run["dataset"]), run.get("model_params"))
    if grad is None:
        raise _NotPredicted(f"model {run['model']} not in the zoo (gradient size unknown): not "
                            "predicted")
    mpi = bool(getattr(_mode_of(str(run["mode"])), "mpi", False))  # its library's α–β
    try:
        pattern = comm_function(str(run["mode"]), opts, grad, pf.network_of(mpi))[0]
    except ModelInputError as exc:
        raise _NotPredicted(str(exc)) from None
    w, nodes, tasks = int(run[RANKS]), int(run[NODES]), int(run[TASKS])
    b = base.iloc[0]
    overlap = priced_overlap(str(run["mode"]), opts, grad)
    tail = tail_bytes(base, overlap)
    comm, tail_comm = priced(str(run["mode"]), opts, grad, tail,
                             lambda n: pf.network_of(mpi, n))
    at_base = (int(b[RANKS]), int(b[NODES]), int(b[TASKS]))
    source = measured_base(base, comm(*at_base), first_done)
    source = source.model_copy(update={"comm_cpu": pf.comm_cpu(mpi),
                                       "comm_tail": tail_comm(*at_base) if tail_comm else 0.0})
    scale = compute_scale(pf, int(b[RANKS]), w, factor)
    pred = predict(source, [w], overlap=overlap, comm=lambda _n: comm(w, nodes, tasks),
                   compute_scale=lambda _n: scale,
                   tail=(lambda _n: tail_comm(w, nodes, tasks)) if tail_comm else None)[0]
    band = _interval(run, base, source, pf, grad, overlap, scale, pred.t_iter, iters, error,
                     tail)
    return {
        "run_id": run["run_id"], "predicted_at": now, "mode": run["mode"],
        "site": run["site"], "partition": run["partition"], "model": run["model"],
        "nodes": nodes, "tasks_per_node": tasks, "workers": w,
        "from_run_id": str(b["run_id"]) if len(base) == 1 else ",".join(base["run_id"]),
        "from_workers": int(b[RANKS]), "pattern": pattern, "overlap": overlap,
        "servers": servers_of(str(run["mode"]), nodes, tasks, opts),
        "grad_bytes": grad, "tail_bytes": tail,
        "inputs": {**source.phases, T_ITER: source.t_iter},
        "network": pf.as_record(mpi, nodes), "network_library": pf.library_of(mpi),
        "t_iter": pred.t_iter, "speedup": pred.speedup,
        "t_iter_low": band.low, "t_iter_high": band.high, "level": band.level,
        "interval_parts": {k: list(v) for k, v in band.parts.items()},
        "interval_basis": band.basis, "interval_iterations": band.iterations,
        **_error_fields(band, error[0]),
        "flags": run_flags(pf, w, tasks, base, mpi=mpi, nodes=nodes,
                           unmeasured=unmeasured_library(_mode_of(str(run["mode"])), pf)),
        "t_comm_exposed": pred.t_comm_exposed, "t_comm_total": pred.t_comm_total,
        "jitter": source.jitter, "t_sync_wait": pred.t_sync_wait, "compute_scale": scale,
        "contention_factor": factor, "comm_cpu": source.comm_cpu, "t_comm_cpu": pred.t_comm_cpu,
        "model_text": f"{pattern} ({overlap}) from run(s) with {int(b[RANKS])} "
                      f"rank(s), pre-flight two-level α–β ({pf.library_of(mpi)} all-reduce), "
                      "sync wait of the slowest rank"
                      + (f", compute x{scale:.2f} ({_scale_text(pf, factor)})"
                         if scale != 1 else "")
                      + (f", hidden communication takes {source.comm_cpu:.0%} of a rank's CPU "
                         "from backward" if source.comm_cpu else "")
                      + (f", the last bucket's {tail:,} B sent after backward" if tail else ""),
        "orch_version": __version__,
    }


def _scale_text(pf: Preflight, factor: float | None) -> str:
    """Why the compute phases are scaled, in words (the prediction's model text)."""
    cpus = pf.shared_machine_cpus()
    if not cpus:
        return "nodes on one machine's memory and caches, the pre-flight's compute probe"
    return f"nodes share {cpus} cores" + (f", x{factor:.2f} measured from 1 to 2 ranks"
                                          if factor else "")


def _interval(run: pd.Series, base: pd.DataFrame, source: Measured, pf: Preflight, grad: int,
              overlap: str, scale: float, point: float,
              iters: pd.DataFrame | None = None,
              error: tuple[interval.ModelError | None, str] = (None, interval.NO_MODEL_ERROR),
              tail: int | None = None) -> interval.Interval:
    """The prediction's interval on the pre-flight's fast and slow corner networks (each at
    the node count of the run it prices), with its site's model error (``error``:
    modelerror.model_error); ``tail``: the bytes sent after backward (tail_bytes)."""
    opts = run_options(run.get("options"))
    mpi = bool(getattr(_mode_of(str(run["mode"])), "mpi", False))
    counts = (int(base[NODES].iloc[0]), int(run[NODES]))
    corners = {n: pf.corner_networks(mpi, n) for n in counts}
    pairs = ([priced(str(run["mode"]), opts, grad, tail, lambda n, i=i: corners[n][i])
              for i in (0, 1)] if all(corners.values()) else [])
    comms, tails = [c for c, _ in pairs], [t for _, t in pairs]
    return measured_interval(base, source, comms,
                             (int(run[RANKS]), int(run[NODES]), int(run[TASKS])), overlap,
                             scale, point, iterations=iters, model_error=error, tails=tails)


def _error_fields(band: interval.Interval, error: interval.ModelError | None) -> dict:
    """A record's model-error fields: its basis (``N scored predictions in FILE``, or ``none
    yet`` and why), how many and the errors' quantiles at the interval's level."""
    return {"model_error_basis": band.error_basis,
            "model_error_scored": error.scored if error is not None else None,
            "model_error_quantiles": [error.low, error.high] if error is not None else None}


def measured_interval(base: pd.DataFrame, source: Measured,
                      corners: list[Callable[[int, int, int], float]],
                      at: tuple[int, int, int], overlap: str, scale: float, point: float,
                      prefetch: bool = False, iterations: pd.DataFrame | None = None,
                      model_error: tuple[interval.ModelError | None, str] | None = None,
                      tails: list[Callable[[int, int, int], float] | None] | None = None,
                      ) -> interval.Interval:
    """The interval (model.interval) of a prediction from the measured runs ``base`` at ``at``
    (workers, nodes, tasks per node): the same prediction with each of the ``corners`` (the
    pattern's cost on a corner network, ``f(workers, nodes, tasks)``), the measured runs'
    per-iteration spread (iteration_spread: quantiles of ``iterations`` where they hold the
    runs, as fractions of the point), the spread of their repeats and ``model_error``
    (runs_interval); ``tails``: each corner's cost of the gradient sent after backward
    (None: no tail)."""
    w, nodes, tasks = at
    b = base.iloc[0]
    at_base = (int(b[RANKS]), int(b[NODES]), int(b[TASKS]))
    points = []
    for comm, tail in zip(corners, tails or [None] * len(corners), strict=True):
        src = source.model_copy(update={"comm_total": comm(*at_base),
                                        "comm_tail": tail(*at_base) if tail else 0.0})
        points.append(predict(src, [w], overlap=overlap, prefetch=prefetch,
                              comm=lambda _n, c=comm: c(w, nodes, tasks),
                              compute_scale=lambda _n: scale,
                              tail=(lambda _n, t=tail: t(w, nodes, tasks)) if tail else None,
                              )[0].t_iter)
    return runs_interval(base, point, points, iterations, model_error)


def runs_interval(base: pd.DataFrame, point: float, network: Sequence[float] = (),
                  iterations: pd.DataFrame | None = None,
                  model_error: tuple[interval.ModelError | None, str] | None = None,
                  ) -> interval.Interval:
    """The interval around ``point`` (s) of a prediction from the measured runs ``base``:
    ``network``, the same prediction on other networks (model.interval.combine), the runs'
    per-iteration spread as fractions of the point (iteration_spread), the spread of
    their repeats and the model's own error: ``model_error``, (the site's ModelError or None,
    its basis) as modelerror.model_error reads them (None: no such term, basis "none yet").
    Every prediction from measured runs (the ledger's, ``orch predict``'s) takes its
    interval here, so that two of them from the same runs agree."""
    repeats = float(base[T_ITER].std(ddof=1)) if len(base) > 1 else 0.0
    error, basis = model_error if model_error is not None else (None, interval.NO_MODEL_ERROR)
    return interval.combine(point, network=network, spread=iteration_spread(base, iterations),
                            repeats_sd=repeats if math.isfinite(repeats) else 0.0,
                            model_error=error, error_basis=basis)


def read_iterations(path: Path | None, run_ids: list[str]) -> pd.DataFrame | None:
    """The per-iteration ``t_iter`` of ``run_ids`` in a result set's ``iterations.parquet`` (a
    file per run, or an older orch's one file; the run, its window and warm-up flag only),
    None where there is no such table or run."""
    import pyarrow.parquet as pq

    found = resultset.table_files(path, run_ids) if path is not None and run_ids else []
    if not found:
        return None
    present = set(pq.read_schema(found[0]).names)
    columns = [c for c in ("run_id", "window", "warmup_iter", T_ITER) if c in present]
    if not {"run_id", T_ITER} <= set(columns):
        return None
    frame = resultset.read_table(path, columns=columns, run_ids=run_ids)
    return frame if frame is not None and len(frame) else None


def measured_t_iter(iterations: pd.DataFrame, run_id: str) -> pd.Series:
    """One run's measured ``t_iter`` rows, every rank's: the rows the runs table's ``t_iter``
    and ``t_iter_std`` are taken from (the breakdown window, warm-up left out)."""
    _, rows = analyze.split_windows(iterations[iterations["run_id"] == run_id])
    if "warmup_iter" in rows.columns:
        rows = rows[~rows["warmup_iter"].fillna(False).astype(bool)]
    return pd.to_numeric(rows[T_ITER], errors="coerce")


def iteration_spread(base: pd.DataFrame, iterations: pd.DataFrame | None) -> interval.Spread:
    """The measured runs' per-iteration spread (model.interval.Spread): their iterations'
    quantiles where ``iterations`` holds enough of every one of them, else the normal
    approximation from the runs table's ``t_iter_std``."""
    if iterations is not None:
        each = [interval.quantile_spread(measured_t_iter(iterations, str(rid)).to_numpy())
                for rid in base["run_id"]]
        if each and all(s is not None for s in each):
            return interval.mean_spread(each)
    sd = (pd.to_numeric(base["t_iter_std"], errors="coerce").mean()
          if "t_iter_std" in base.columns else None)
    mean = pd.to_numeric(base[T_ITER], errors="coerce").mean()
    return interval.normal_spread(float(sd) if pd.notna(sd) else None,
                                  float(mean) if pd.notna(mean) else None)


def unmeasured_library(mode, pf: Preflight) -> str | None:
    """The communication library of ``mode`` where the pre-flight did not measure it: MPI
    for an MPI mode without the pre-flight's MPI levels, the framework of a mode that
    communicates through neither torch.distributed nor MPI (TensorFlow's collectives,
    MXNet's kvstore); None where the pre-flight measured the mode's own library."""
    if mode is None:
        return None
    if mode.mpi:
        return None if pf.mpi_inter is not None else "MPI"
    return None if mode.library == modes.network_benchmark().library else mode.framework


def run_flags(pf: Preflight, ranks: int, tasks: int, base: pd.DataFrame,
              mpi: bool = False, nodes: int = 1, unmeasured: str | None = None) -> list[str]:
    """Why a prediction may not hold, known before its run (model.validity): the
    pre-flight's fit or the mode's library it did not measure, ranks over the cores or GPUs
    given, the measured run's node shared or its I/O dominating."""
    flags = list(pf.flags(mpi, nodes=nodes, tasks=tasks))
    if unmeasured:
        flag = validity.unmeasured_library(unmeasured, f"{pf.library_of(mpi)}'s all-reduce",
                                           int(base[NODES].max()), nodes)
        flags += [flag] if flag else []
    shared = pf.shared_machine_cores()
    over = validity.oversubscribed(ranks, tasks, cpus_per_node=pf.cpus_per_node,
                                   gpus_per_node=pf.gpus_per_node,
                                   shared_machine_cpus=shared.physical if shared else None,
                                   shared_machine_logical=shared.logical if shared else None,
                                   node_cpu_share=pf.node_cpu_share)
    if over:
        flags.append(over)
    for _, b in base.iterrows():
        t_io = pd.to_numeric(b.get("t_io"), errors="coerce")
        for flag in validity.base_run_problems(
                int(b[RANKS]), float(t_io) if pd.notna(t_io) else None,
                float(b[T_ITER]), b.get("co_tenants")):
            if flag not in flags:
                flags.append(flag)
    return flags


def past_time_limit(record: dict, run: Run) -> str | None:
    """A warning, or None: the iterations of ``run`` at its predicted
    ``t_iter``, or at its interval's upper end (``t_iter_high``), take longer than its time
    limit, so it will likely (or may) end TIMEOUT with its measurements lost. Each window runs
    warm-up + measured iterations; a mode with phases runs two (native, then breakdown:
    protocol). Start-up is not counted, so the warning never comes too early. An epochs run's
    length is not its iterations': None."""
    if run.epochs is not None or not record.get("t_iter"):
        return None
    iterations = (2 if modes.get(run.mode).phases else 1) * (run.warmup + run.iters)
    t_iter = float(record["t_iter"])
    point = t_iter * iterations
    high = max(point, float(record.get("t_iter_high") or 0.0) * iterations)
    if high <= run.time_limit_min * 60:
        return None
    upper = f" ({high / 60:.1f} min at its interval's upper end)" if high > point else ""
    likely = "will likely" if point > run.time_limit_min * 60 else "may"
    return (f"{run.run_id}: its {iterations} iterations at the predicted {t_iter:.3g} s take "
            f"{point / 60:.1f} min{upper}, past its time limit of {run.time_limit_min} min: it "
            f"{likely} end TIMEOUT (--time-limit {math.ceil(high * 1.5 / 60)} gives it room)")


def append(sweep_dir: Path, records: list[dict]) -> None:
    """Append predictions to ``<sweep>/predictions.jsonl`` (never rewrites a line), flushed
    and synced before the next stage is submitted; a failed append leaves the file as it was
    (files.append_text), never with a torn line."""
    if not records:
        return
    files.append_text(sweep_dir / FILE, "".join(json.dumps(rec, sort_keys=True) + "\n"
                                                for rec in records))


def load(path: Path) -> list[dict]:
    """Every prediction of a predictions.jsonl; a bad line names the file, line and field."""
    out = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{path}:{number}: not valid JSON ({exc.msg}); the file is "
                            "append-only: remove the damaged line") from None
        for field, kind in (("run_id", str), ("predicted_at", (int, float)),
                            ("t_iter", (int, float))):
            value = rec.get(field) if isinstance(rec, dict) else None
            if not isinstance(value, kind) or isinstance(value, bool) or (
                    kind is not str and (not math.isfinite(value) or value < 0)):
                raise UserError(f"{path}:{number}: field '{field}': got {value!r}, expected "
                                f"{'a run id' if kind is str else 'a non-negative number'}; "
                                "remove the damaged line")
        out.append(rec)
    return out
