"""Prediction: iteration time and speedup at other worker counts, from one of three inputs.

:func:`predict` is the one entry point. Its source says what was measured or given:

* a :class:`~.inputs.Breakdown` (phase times; ``t_comm`` given, or priced by a link model);
* a :class:`~.inputs.Trace` (layer-wise times; messages priced by a link model or as traced,
  scheduled without overlap or wait-free, :mod:`.schedule`);
* a :class:`Measured` run (a smaller run's phases and iteration time; the change in modelled
  communication added to what was measured, :func:`measured_point`).

Communication is priced, where the source does not carry it, by an α–β ring all-reduce
(``alpha_beta``) or by a declared pattern on a two-level network (``network``, ``pattern``).
:func:`measured_point` is the formula of one measured point, which :func:`predict` applies to a
:class:`Measured` source. The callers that shape its rows for a use live with their use (a
report's 1-node baseline in ``report.predictions``, a trace on a two-level network in
``report.whatif``). Nothing here reads a clock or a file: every function is deterministic.
"""

import math
from collections.abc import Callable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from .comm import AlphaBeta, Network, pattern_comm_time
from .compute import expected_max_normal, phase_iteration_time
from .inputs import (
    OVERLAPS,
    PHASES,
    Breakdown,
    ModelInputError,
    Overlap,
    Trace,
    check_workers,
    describe_value,
    is_number,
    non_negative_seconds,
)
from .schedule import schedule_none, schedule_wfbp, trace_iteration_us

#: ``cost(size_bytes, workers) -> seconds`` of one message (a layer's, a bucket's or the
#: whole gradient's) among ``workers`` ranks.
MessageCost = Callable[[float, int], float]


class Prediction(BaseModel):
    """Predicted iteration time and speedup at one worker count (all times in seconds).

    ``speedup = workers · t_iter(1) / t_iter(workers)`` (weak scaling); ``t_comm_total`` is all
    communication, ``t_comm_exposed`` the part on the critical path. ``source`` says which
    inputs were used: ``breakdown``, ``breakdown+alpha-beta``, ``breakdown+network``,
    ``trace``, ``trace+alpha-beta``, ``trace+network`` or ``measured``. For traces ``t_h2d``
    and ``t_u`` are 0 (folded into other rows). A ``measured`` prediction also says the
    modelled communication at the measured size, the synchronization wait and the compute
    scale (None for the others), and has a speedup only when :class:`Measured` names the run
    it is relative to.
    """

    model_config = ConfigDict(frozen=True)

    workers: int
    t_iter: float
    speedup: float | None
    efficiency: float | None
    t_comm_exposed: float
    t_comm_total: float
    t_io: float
    t_h2d: float
    t_f: float
    t_b: float
    t_u: float
    overlap: str
    prefetch: bool
    source: str
    t_comm_model_base: float | None = None
    t_sync_wait: float | None = None
    compute_scale: float | None = None
    t_comm_cpu: float | None = None

    def row(self) -> dict:
        """The prediction as a plain row, without the fields its source does not have."""
        return self.model_dump(exclude_none=True)


class Measured(BaseModel):
    """A measured run (the mean of the runs of one size) that larger runs are predicted from.

    ``comm_total``: the pattern model's total communication at the measured size (what the
    model's change is taken from); ``jitter``: the per-iteration standard deviation of a rank's
    compute there (synchronization wait); ``speedup_from``: (workers, t_iter) of the run the
    speedups are relative to (the smallest measured), or None for no speedup; ``comm_cpu``:
    the share of a rank's CPU its communication takes while it runs (0: none of the compute's);
    ``comm_tail``: the model's time at the measured size for the gradient that is all-reduced
    only once backward has produced it all (DDP's last bucket), which no overlap hides (0:
    none known).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    phases: dict[str, float]
    t_iter: float
    workers: int
    comm_total: float
    jitter: float = 0.0
    speedup_from: tuple[int, float] | None = None
    # The share of a rank's CPU its communication takes while running (measured_point).
    comm_cpu: float = 0.0
    comm_tail: float = 0.0


def predict(
    source: Breakdown | Trace | Measured,
    workers: Sequence[int],
    *,
    overlap: Overlap = "none",
    prefetch: bool = False,
    alpha_beta: AlphaBeta | None = None,
    grad_bytes: int | None = None,
    bucket_bytes: int | None = None,
    network: Network | None = None,
    per_node: int = 1,
    pattern: str = "allreduce",
    servers: int = 1,
    comm: Callable[[int], float] | None = None,
    compute_scale: Callable[[int], float] | None = None,
    tail: Callable[[int], float] | None = None,
) -> list[Prediction]:
    """Predict iteration time and speedup for each worker count in ``workers``.

    Inputs, one of:

    * a :class:`Breakdown` alone: phases (and ``t_comm``) resolved with ``.at(N)``;
    * a :class:`Breakdown` with ``t_comm`` left at 0, plus ``grad_bytes`` and a link model
      (``alpha_beta``: ``t_comm(N) = allreduce(grad_bytes, N)``, 0 at N = 1; or ``network``:
      the ``pattern``'s cost, ``per_node`` ranks a node), the other phases from ``.at(N)``;
    * a :class:`Trace`, optionally with a link model (then each layer's message is priced by
      it for every N). Without one the trace's ``comm_us`` are used as measured for every
      N > 1. For N = 1 a trace has no communication (but a parameter server's push and pull);
    * a :class:`Measured` run with ``comm`` (the model's total communication at N workers)
      and optionally ``compute_scale`` (N -> the compute phases' factor there) and ``tail``
      (N -> the model's time for the gradient sent only after backward ends, which ``wfbp``
      cannot hide: DDP's last bucket).

    ``overlap``: ``"none"`` — all communication is exposed. ``"wfbp"`` — with a trace, the WFBP
    schedule (:func:`schedule_wfbp`, optional ``bucket_bytes``); with a breakdown or a measured
    run, which have no layer detail, communication is assumed to overlap the whole backward
    pass: ``exposed = max(0, t_comm − t_b)`` (a measured run's, at least its ``tail``). In
    that case a breakdown's ``t_comm`` is read as the *total* communication time — a measured
    (already exposed) ``t_comm`` should be predicted with ``overlap="none"`` or it would be
    hidden twice.

    ``prefetch`` selects the pipelined-I/O rule (see :func:`phase_iteration_time`).
    ``speedup = N · t_iter(1) / t_iter(N)`` with the same options at N = 1.
    """
    counts = check_predict_options(workers, overlap, prefetch)
    if isinstance(source, Measured):
        return _measured(source, counts, overlap, prefetch, comm, compute_scale, tail)
    cost = _message_cost(alpha_beta, network, per_node, pattern, servers)
    if isinstance(source, Trace):
        at, kind = _trace_source(source, overlap, prefetch, cost, grad_bytes, bucket_bytes)
    elif isinstance(source, Breakdown):
        at, kind = _breakdown_source(source, overlap, prefetch, cost, grad_bytes,
                                     bucket_bytes)
    else:
        raise ModelInputError(f"source: expected a Breakdown, a Trace or a Measured run, got "
                              f"{describe_value(source)}")
    if cost is not None:
        kind += "+alpha-beta" if network is None else "+network"
    base = at(1)["t_iter"]
    out = []
    for n in counts:
        point = at(n)
        s = n * base / point["t_iter"] if point["t_iter"] > 0 else math.nan
        out.append(Prediction(workers=n, speedup=s, efficiency=s / n, overlap=overlap,
                              prefetch=prefetch, source=kind, **point))
    return out


def _message_cost(alpha_beta: AlphaBeta | None, network: Network | None, per_node: int,
                  pattern: str, servers: int) -> MessageCost | None:
    """How a message is priced: the α–β ring all-reduce, a pattern on a two-level network,
    or (None) not at all — the source carries its own communication."""
    if alpha_beta is not None and network is not None:
        raise ModelInputError("give alpha_beta (one link) or network (two levels), not both")
    if network is not None:
        per_node = check_workers(per_node, "tasks per node")
        pattern_comm_time(pattern, 0, 1, 1, network, servers=servers)  # no model: say so first

        def on_network(size: float, n: int) -> float:
            return pattern_comm_time(pattern, size, n, per_node, network, servers=servers)

        return on_network
    if alpha_beta is not None:
        return alpha_beta.allreduce
    return None


def _trace_source(trace: Trace, overlap: str, prefetch: bool, cost: MessageCost | None,
                  grad_bytes: int | None, bucket_bytes: int | None,
                  ) -> tuple[Callable[[int], dict[str, float]], str]:
    if bucket_bytes is not None and overlap != "wfbp":
        raise ModelInputError("bucket_bytes only applies to a trace with overlap='wfbp'")
    if grad_bytes is not None:
        raise ModelInputError(
            "grad_bytes: not used with a trace (gradient sizes come from size_bytes)")
    if bucket_bytes is not None and (not is_number(bucket_bytes) or bucket_bytes <= 0):
        raise ModelInputError(
            f"bucket_bytes: expected a positive byte count, got {bucket_bytes!r}")

    def at(n: int) -> dict[str, float]:
        return _trace_point(trace, n, overlap, prefetch, cost, bucket_bytes)

    return at, "trace"


def _breakdown_source(breakdown: Breakdown, overlap: str, prefetch: bool,
                      cost: MessageCost | None, grad_bytes: int | None,
                      bucket_bytes: int | None,
                      ) -> tuple[Callable[[int], dict[str, float]], str]:
    if bucket_bytes is not None:
        raise ModelInputError("bucket_bytes only applies to a trace with overlap='wfbp'")
    if (cost is None) != (grad_bytes is None):
        raise ModelInputError(
            "alpha_beta and grad_bytes go together: give both to model t_comm(N) as a ring "
            "all-reduce of grad_bytes, or neither to use the breakdown's t_comm")
    if cost is not None:
        if not is_number(grad_bytes) or grad_bytes < 0:  # type: ignore[operator]
            raise ModelInputError(
                f"grad_bytes: expected a non-negative byte count, got {grad_bytes!r}")
        if breakdown.t_comm != 0.0:
            raise ModelInputError(
                "t_comm: the breakdown gives t_comm and alpha_beta was also given; use one "
                "(set t_comm to 0 to predict it from alpha_beta and grad_bytes)")

    def at(n: int) -> dict[str, float]:
        return _breakdown_point(breakdown, n, overlap, prefetch, cost, grad_bytes)

    return at, "breakdown"


def check_predict_options(workers: Sequence[int], overlap: object, prefetch: object,
                          ) -> list[int]:
    """The worker counts, once ``overlap`` and ``prefetch`` are known to be valid."""
    if overlap not in OVERLAPS:
        raise ModelInputError(
            f"overlap: expected one of {', '.join(repr(o) for o in OVERLAPS)}, got {overlap!r}"
        )
    if not isinstance(prefetch, bool):
        raise ModelInputError(f"prefetch: expected true or false, got {describe_value(prefetch)}")
    if isinstance(workers, (str, bytes)) or not isinstance(workers, Sequence) or not workers:
        raise ModelInputError(
            f"workers: expected a non-empty list of worker counts (integers >= 1), got "
            f"{describe_value(workers)}"
        )
    return [check_workers(n, "workers") for n in workers]


def _breakdown_point(breakdown: Breakdown, n: int, overlap: str, prefetch: bool,
                     cost: MessageCost | None, grad_bytes: int | None) -> dict[str, float]:
    phases = {p: breakdown.phase_at(p, n) for p in PHASES if p != "t_comm"}
    total = (cost(float(grad_bytes or 0), n) if cost is not None
             else breakdown.phase_at("t_comm", n))
    exposed = total if overlap == "none" else max(0.0, total - phases["t_b"])
    t_iter = phase_iteration_time(**phases, t_comm_exposed=exposed, prefetch=prefetch)
    return {"t_iter": t_iter, "t_comm_exposed": exposed, "t_comm_total": total, **phases}


def _trace_point(trace: Trace, n: int, overlap: str, prefetch: bool, cost: MessageCost | None,
                 bucket_bytes: int | None) -> dict[str, float]:
    """One worker count of a trace: each layer's message priced (a layer of 0 bytes sends
    nothing), or as traced (nothing at N = 1), then scheduled."""
    if cost is not None:
        layers = tuple(layer.model_copy(update={
            "comm_us": cost(layer.size_bytes, n) * 1e6 if layer.size_bytes > 0 else 0.0})
            for layer in trace.layers)
    elif n == 1:
        layers = tuple(layer.model_copy(update={"comm_us": 0.0}) for layer in trace.layers)
    else:
        layers = trace.layers
    if overlap == "none":
        schedule = schedule_none(layers)
    else:
        # A bucket's message is priced whole: one α per bucket, not per layer.
        bucket_cost = None if cost is None else (lambda size: cost(size, n) * 1e6)
        schedule = schedule_wfbp(layers, bucket_bytes=bucket_bytes, cost_us=bucket_cost)
    t_iter_us = trace_iteration_us(trace.t_io_us, schedule, prefetch=prefetch)
    return {
        "t_iter": t_iter_us / 1e6,
        "t_comm_exposed": schedule.exposed_comm_us / 1e6,
        "t_comm_total": schedule.comm_total_us / 1e6,
        "t_io": trace.t_io_us / 1e6,
        "t_h2d": 0.0,
        "t_f": schedule.forward_us / 1e6,
        "t_b": schedule.backward_us / 1e6,
        "t_u": 0.0,
    }


def _measured(base: Measured, counts: list[int], overlap: str, prefetch: bool,
              comm: Callable[[int], float] | None,
              compute_scale: Callable[[int], float] | None,
              tail: Callable[[int], float] | None = None) -> list[Prediction]:
    if comm is None:
        raise ModelInputError("a measured run needs comm: the model's communication at N")
    out = []
    for n in counts:
        point = measured_point(
            base.phases, base.t_iter, base.comm_total, comm(n), overlap=overlap,
            prefetch=prefetch, jitter=base.jitter, base_workers=base.workers, workers=n,
            compute_scale=compute_scale(n) if compute_scale is not None else 1.0,
            comm_cpu=base.comm_cpu, tail_base=base.comm_tail,
            tail_target=tail(n) if tail is not None else 0.0)
        s = efficiency = None
        if base.speedup_from is not None:
            smallest, t_smallest = base.speedup_from
            s = (n / smallest) * t_smallest / point["t_iter"]
            efficiency = s / (n / smallest)
        out.append(Prediction(workers=n, speedup=s, efficiency=efficiency, overlap=overlap,
                              prefetch=prefetch, source="measured", **point))
    return out


def measured_point(
    base_phases: Mapping[str, float],
    base_t_iter: float,
    comm_base: float,
    comm_target: float,
    *,
    overlap: str = "none",
    prefetch: bool = False,
    jitter: float = 0.0,
    base_workers: int = 1,
    workers: int = 1,
    compute_scale: float = 1.0,
    comm_cpu: float = 0.0,
    tail_base: float = 0.0,
    tail_target: float = 0.0,
) -> dict[str, float]:
    """One larger run from a measured smaller one: the point formula of a :class:`Measured`
    source (the predictions a staged sweep states before its runs).

    ``base_phases``: the mean phases (s) of the measured run; ``base_t_iter`` its measured
    iteration time; ``comm_base`` and ``comm_target``: the pattern's total communication time
    (s) at the measured run's size and at the predicted one. Compute phases are taken as
    measured (weak scaling: the same work per worker); communication at the predicted size is
    the measured exposed communication plus the model's change in exposed communication
    (per ``overlap``: ``wfbp`` hides up to ``t_b``). The
    iteration time is the measured one plus the change the phase rule gives, so loop
    overhead the phases do not time is carried over instead of being lost.

    ``jitter`` (s, the measured run's per-iteration standard deviation) adds the
    synchronization wait of a synchronous step: every rank waits for the slowest of
    ``workers``, whose excess over the mean is ``jitter · E[max of N standard normals]``
    (:func:`expected_max_normal`); the change from ``base_workers`` to ``workers`` is added to
    the exposed communication (where a rank's wait is timed). 0 leaves it out.

    ``compute_scale`` multiplies the compute phases at the predicted size: ranks per core
    there over ranks per core in the measured run (nodes that share one machine's cores, as
    the pre-flight found them; 1 on machines of their own).

    ``comm_cpu`` (0-1): the share of a rank's CPU its communication takes while it runs, where
    that CPU is all the rank's compute has (a CPU rank on one core or less: Gloo's and the
    kernel's TCP work run on it too). Communication hidden behind backward then lengthens
    backward by that share of its time; the change in hidden communication from the measured
    size to the predicted one is added (``t_comm_cpu``). With communication that is CPU-bound
    (``comm_cpu`` near 1) nothing is really hidden.

    ``tail_base`` and ``tail_target`` (s): the part of ``comm_base`` and ``comm_target`` that
    can start only when backward has ended (the all-reduce of DDP's last bucket, which holds
    the first layers' gradients, made last): with ``wfbp`` at least that much is exposed,
    ``exposed = max(total − t_b, tail)``. 0: all of it may hide.
    """
    _check_measured(base_phases, overlap, compute_scale, comm_cpu, t_iter=base_t_iter,
                    comm_base=comm_base, comm_target=comm_target, tail_base=tail_base,
                    tail_target=tail_target, jitter=jitter)
    compute = {p: float(base_phases[p]) for p in PHASES if p != "t_comm"}

    def exposed(total: float, tail: float) -> float:
        if overlap == "none":
            return total
        return max(0.0, total - compute["t_b"], min(tail, total))

    total_base, total_n = float(comm_base), float(comm_target)
    wait = float(jitter) * (expected_max_normal(check_workers(workers))
                            - expected_max_normal(check_workers(base_workers, "base workers")))
    exp_base, exp_target = exposed(total_base, tail_base), exposed(total_n, tail_target)
    exp_n = max(0.0, float(base_phases["t_comm"]) + exp_target - exp_base + wait)
    t_base_model = phase_iteration_time(**compute, t_comm_exposed=float(base_phases["t_comm"]),
                                        prefetch=prefetch)
    scaled = {p: v * float(compute_scale) for p, v in compute.items()}
    stolen = float(comm_cpu) * ((total_n - exp_target) - (total_base - exp_base))
    scaled["t_b"] = max(0.0, scaled["t_b"] + stolen)
    t_n_model = phase_iteration_time(**scaled, t_comm_exposed=exp_n, prefetch=prefetch)
    t_iter = max(1e-12, float(base_t_iter) + t_n_model - t_base_model)
    return {"t_iter": t_iter, "t_comm_exposed": exp_n, "t_comm_total": total_n,
            "t_comm_model_base": total_base, "t_sync_wait": wait,
            "compute_scale": float(compute_scale), "t_comm_cpu": stolen, **scaled}


def _check_measured(base_phases: Mapping[str, float], overlap: str, compute_scale: float,
                    comm_cpu: float, **seconds: float) -> None:
    """measured_point's inputs, or ModelInputError naming the first that is not one: every
    phase measured and none negative, the ``seconds`` (t_iter, the model's totals and tails,
    jitter) not negative, a positive compute scale and a CPU share from 0 to 1."""
    if overlap not in OVERLAPS:
        raise ModelInputError(f"overlap: expected one of {', '.join(OVERLAPS)}, got {overlap!r}")
    for name in (*PHASES,):
        if name not in base_phases:
            raise ModelInputError(f"breakdown: phase '{name}' is missing; every phase of "
                                  f"{', '.join(PHASES)} must be measured")
        _non_negative_or_error(base_phases[name], name)
    names = {"comm_base": "t_comm (model, measured size)",
             "comm_target": "t_comm (model, predicted size)",
             "tail_base": "tail (model, measured size)",
             "tail_target": "tail (model, predicted size)"}
    for key, value in seconds.items():
        _non_negative_or_error(value, names.get(key, key))
    if not is_number(compute_scale) or not math.isfinite(compute_scale) or compute_scale <= 0:
        raise ModelInputError(f"compute_scale: expected a positive number, got "
                              f"{compute_scale!r}")
    if not is_number(comm_cpu) or not 0.0 <= float(comm_cpu) <= 1.0:
        raise ModelInputError(f"comm_cpu: expected a share from 0 to 1, got {comm_cpu!r}")


def _non_negative_or_error(value: object, field: str) -> float:
    try:
        return non_negative_seconds(value, field)
    except ValueError as exc:
        raise ModelInputError(f"breakdown: {exc}") from None
