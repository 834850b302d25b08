"""The backward + communication timeline of one iteration from a layer-wise trace (second
paper): no overlap, or wait-free back-propagation (WFBP) with optional buckets. Times in µs,
every field says ``_us``; time 0 is the start of backward.
"""

from collections.abc import Callable, Sequence

from pydantic import BaseModel, ConfigDict

from .comm import AlphaBeta
from .compute import phase_iteration_time
from .inputs import Layer, ModelInputError, Trace, check_workers, describe_value, is_number


class LayerTiming(BaseModel):
    """Where one layer sits on the backward/communication timeline (µs from backward start).

    ``comm_start_us``/``comm_end_us`` are those of the send carrying this layer's gradient
    (shared by all layers of a bucket); ``None`` if the layer sends nothing.
    """

    model_config = ConfigDict(frozen=True)

    id: int
    name: str
    backward_start_us: float
    backward_end_us: float
    comm_start_us: float | None
    comm_end_us: float | None


class Send(BaseModel):
    """One message on the link: the gradients of ``layer_ids`` (backward order)."""

    model_config = ConfigDict(frozen=True)

    layer_ids: tuple[int, ...]
    size_bytes: int
    ready_us: float
    start_us: float
    end_us: float

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us


class Schedule(BaseModel):
    """Backward + communication timeline of one iteration; time 0 is the start of backward.

    ``layers`` are in backward order (L → 1), ``sends`` in link order. ``exposed_comm_us`` is
    what communication adds to the iteration after backward has finished.
    """

    model_config = ConfigDict(frozen=True)

    policy: str
    layers: tuple[LayerTiming, ...]
    sends: tuple[Send, ...]
    forward_us: float
    backward_us: float
    comm_total_us: float
    exposed_comm_us: float

    @property
    def hidden_comm_us(self) -> float:
        """Communication that overlapped with backward."""
        return self.comm_total_us - self.exposed_comm_us


def _as_layers(layers: Sequence[Layer] | Trace) -> tuple[Layer, ...]:
    out = tuple(layers.layers if isinstance(layers, Trace) else layers)
    if not out:
        raise ModelInputError("layers: expected at least one layer")
    for layer in out:
        if not isinstance(layer, Layer):
            raise ModelInputError(f"layers: expected Layer objects, got {describe_value(layer)}")
    return out


def _backward_times(layers: tuple[Layer, ...]) -> dict[int, tuple[float, float]]:
    """Backward runs L → 1 back-to-back from time 0: index → (start, end)."""
    times: dict[int, tuple[float, float]] = {}
    t = 0.0
    for index in range(len(layers) - 1, -1, -1):
        start, t = t, t + layers[index].backward_us
        times[index] = (start, t)
    return times


def _build_schedule(
    policy: str,
    layers: tuple[Layer, ...],
    groups: list[tuple[list[int], float, int, float]],
    backward: dict[int, tuple[float, float]],
) -> Schedule:
    """Serialize the sends ``(layer indices, ready, bytes, duration)`` on one link, in order."""
    backward_end = backward[0][1] if layers else 0.0
    link_free = 0.0
    sends: list[Send] = []
    send_of: dict[int, Send] = {}
    for indices, ready, size, duration in groups:
        start = max(ready, link_free)
        link_free = start + duration
        send = Send(
            layer_ids=tuple(layers[i].id for i in indices),
            size_bytes=size,
            ready_us=ready,
            start_us=start,
            end_us=link_free,
        )
        sends.append(send)
        for i in indices:
            send_of[i] = send
    timings = tuple(
        LayerTiming(
            id=layers[i].id,
            name=layers[i].name,
            backward_start_us=backward[i][0],
            backward_end_us=backward[i][1],
            comm_start_us=send_of[i].start_us if i in send_of else None,
            comm_end_us=send_of[i].end_us if i in send_of else None,
        )
        for i in range(len(layers) - 1, -1, -1)
    )
    last_end = sends[-1].end_us if sends else backward_end
    return Schedule(
        policy=policy,
        layers=timings,
        sends=tuple(sends),
        forward_us=sum(layer.forward_us for layer in layers),
        backward_us=backward_end,
        comm_total_us=sum(s.duration_us for s in sends),
        exposed_comm_us=max(0.0, last_end - backward_end),
    )


def schedule_none(layers: Sequence[Layer] | Trace) -> Schedule:
    """No overlap (CNTK-style): every layer's gradient is sent after backward has finished.

    Sends go one after another in backward order (L → 1), so the exposed communication is the
    sum of all ``comm_us``.
    """
    layers_t = _as_layers(layers)
    backward = _backward_times(layers_t)
    end = backward[0][1]
    groups = [
        ([i], end, layers_t[i].size_bytes, layers_t[i].comm_us)
        for i in range(len(layers_t) - 1, -1, -1)
        if layers_t[i].sends
    ]
    return _build_schedule("none", layers_t, groups, backward)


def schedule_wfbp(
    layers: Sequence[Layer] | Trace,
    *,
    bucket_bytes: int | None = None,
    alpha_beta: AlphaBeta | None = None,
    workers: int | None = None,
    cost_us: Callable[[int], float] | None = None,
) -> Schedule:
    """Wait-free back-propagation: send each gradient as soon as it exists and the link is free.

    Backward runs L → 1 back-to-back from time 0. The gradient of layer ``l`` is ready when its
    backward ends; its send starts at ``max(ready, end of previous send)`` (one link, sends
    serialized). Exposed communication = ``max(0, end of last send − end of backward)``.

    ``bucket_bytes`` merges consecutive sending layers (backward order) into one message until
    the merged size reaches ``bucket_bytes`` (the last bucket may be smaller); the message is
    ready when the last member's backward ends. Its duration is the sum of the members'
    ``comm_us``, or, if ``alpha_beta`` and ``workers`` are given, the α–β all-reduce cost of the
    merged size — the latter is what makes merging pay off (one α per bucket, not per layer).
    ``alpha_beta`` without buckets prices each layer's message by its own ``size_bytes``.
    Layers with ``comm_us == 0`` send nothing and never delay a bucket. ``cost_us(bytes)``,
    if given, prices every message instead (a pattern's model on a two-level network).
    """
    layers_t = _as_layers(layers)
    if bucket_bytes is not None and (not is_number(bucket_bytes) or bucket_bytes <= 0):
        raise ModelInputError(f"bucket_bytes: expected a positive byte count, got {bucket_bytes!r}")
    if (alpha_beta is None) != (workers is None):
        raise ModelInputError("schedule_wfbp: give both alpha_beta and workers, or neither")
    n = check_workers(workers) if workers is not None else 1
    backward = _backward_times(layers_t)

    def duration(indices: list[int]) -> float:
        if cost_us is not None:
            return cost_us(sum(layers_t[i].size_bytes for i in indices))
        if alpha_beta is None:
            return sum(layers_t[i].comm_us for i in indices)
        return alpha_beta.allreduce(sum(layers_t[i].size_bytes for i in indices), n) * 1e6

    groups: list[tuple[list[int], float, int, float]] = []
    bucket: list[int] = []
    for i in range(len(layers_t) - 1, -1, -1):
        if not layers_t[i].sends:
            continue
        bucket.append(i)
        size = sum(layers_t[j].size_bytes for j in bucket)
        if bucket_bytes is None or size >= bucket_bytes:
            groups.append((bucket, backward[i][1], size, duration(bucket)))
            bucket = []
    if bucket:
        last = bucket[-1]
        size = sum(layers_t[j].size_bytes for j in bucket)
        groups.append((bucket, backward[last][1], size, duration(bucket)))
    return _build_schedule("wfbp", layers_t, groups, backward)


def trace_iteration_us(t_io_us: float, schedule: Schedule, *, prefetch: bool) -> float:
    """Iteration time (µs) from a trace schedule.

    No prefetch: ``t_io + Σforward + Σbackward + exposed_comm``; prefetch:
    ``max(t_io, Σforward + Σbackward + exposed_comm)``. A trace has no separate host→device or
    update time: they are inside the data row and the layer times.
    """
    return phase_iteration_time(
        t_io_us,
        0.0,
        schedule.forward_us,
        schedule.backward_us,
        0.0,
        schedule.exposed_comm_us,
        prefetch=prefetch,
    )


def scale_trace_comm(trace: Trace, alpha_beta: AlphaBeta, n: int) -> Trace:
    """Rewrite every layer's ``comm_us`` as the α–β ring all-reduce of its ``size_bytes``.

    Used for what-if predictions (another interconnect, another N). Layers of 0 bytes send
    nothing (``comm_us = 0``), and so does every layer when ``n == 1``.
    """
    n = check_workers(n, "n")
    layers = tuple(
        layer.model_copy(
            update={
                "comm_us": alpha_beta.allreduce(layer.size_bytes, n) * 1e6
                if layer.size_bytes > 0
                else 0.0
            }
        )
        for layer in trace.layers
    )
    return trace.model_copy(update={"layers": layers})


def format_schedule(schedule: Schedule) -> str:
    """A plain-text table of a schedule (µs), for printing and debugging."""

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    summary = (
        f"policy={schedule.policy}  backward={schedule.backward_us:.3f}us  "
        f"comm total={schedule.comm_total_us:.3f}us  exposed={schedule.exposed_comm_us:.3f}us"
    )
    header = (
        f"{'id':>4} {'name':<16} {'bwd_start':>11} {'bwd_end':>11} {'comm_start':>11} "
        f"{'comm_end':>11}"
    )
    lines = [summary, header]
    for t in schedule.layers:
        lines.append(
            f"{t.id:>4} {t.name[:16]:<16} {cell(t.backward_start_us):>11} "
            f"{cell(t.backward_end_us):>11} {cell(t.comm_start_us):>11} {cell(t.comm_end_us):>11}"
        )
    return "\n".join(lines)


