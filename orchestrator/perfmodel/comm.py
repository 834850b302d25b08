"""Communication: the α–β link model, its fit, and the cost of each communication pattern on a
two-level network (inside a node, between nodes). All sizes are bytes, all times seconds.

* ring all-reduce of ``m`` bytes over ``N`` workers: ``2(N−1)·α + 2·(N−1)/N · m/B``;
* one cost function per pattern a mode can declare (:data:`PATTERN_MODELS`).
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, field_validator

from .inputs import ModelInputError, check_workers, is_number

# --------------------------------------------------------------------------------------------
# α–β communication model
# --------------------------------------------------------------------------------------------


class AlphaBeta(BaseModel):
    """α–β link model: ``alpha`` latency per message step (s), ``bandwidth`` B (bytes/s).

    Measured on a partition by an all-reduce micro-benchmark (see :func:`fit_alpha_beta`), or
    written by hand for what-if predictions (e.g. 10GbE ≈ 1.25e9 B/s, 100Gb IB ≈ 12.5e9 B/s).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    alpha: float
    bandwidth: float

    @field_validator("alpha")
    @classmethod
    def _alpha_ok(cls, value: float) -> float:
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"alpha: expected non-negative finite seconds, got {value!r}")
        return value

    @field_validator("bandwidth")
    @classmethod
    def _bandwidth_ok(cls, value: float) -> float:
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"bandwidth: expected positive finite bytes/s, got {value!r}")
        return value

    @property
    def beta(self) -> float:
        """Seconds per byte, ``1 / bandwidth``."""
        return 1.0 / self.bandwidth

    def allreduce(self, size_bytes: float, n: int) -> float:
        """Ring all-reduce time (s) of ``size_bytes`` over ``n`` workers; see allreduce_time."""
        return allreduce_time(size_bytes, n, self.alpha, self.bandwidth)


def allreduce_time(size_bytes: float, n: int, alpha: float, bandwidth: float) -> float:
    """Ring all-reduce cost (s) in the α–β model: ``2(N−1)·α + 2·(N−1)/N · m/B``.

    A ring all-reduce is a reduce-scatter plus an all-gather, each ``N−1`` steps moving
    ``m/N`` bytes: ``2(N−1)`` latencies and ``2(N−1)/N · m`` bytes per worker. It is 0 for
    one worker.
    """
    n = check_workers(n, "n")
    if not is_number(size_bytes) or not math.isfinite(size_bytes) or size_bytes < 0:
        raise ModelInputError(f"size_bytes: expected a non-negative number, got {size_bytes!r}")
    if not is_number(alpha) or not math.isfinite(alpha) or alpha < 0:
        raise ModelInputError(f"alpha: expected non-negative seconds, got {alpha!r}")
    if not is_number(bandwidth) or not math.isfinite(bandwidth) or bandwidth <= 0:
        raise ModelInputError(f"bandwidth: expected positive bytes/s, got {bandwidth!r}")
    if n == 1:
        return 0.0
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * size_bytes / bandwidth


class RingFit(BaseModel):
    """A ring all-reduce fit (:func:`fit_ring`): its ``alpha_beta`` and their standard errors
    ``se_alpha`` (s) and ``se_beta`` (s/byte) from the residuals of the least squares it
    solved (covariance ``s²(XᵀX)⁻¹``, rows as weighted); None where no degree of freedom is
    left to estimate them (fewer than 3 distinct sizes: two sizes fit any two means)."""

    model_config = ConfigDict(frozen=True)

    alpha_beta: AlphaBeta
    se_alpha: float | None = None
    se_beta: float | None = None


def fit_alpha_beta(
    sizes_bytes: Sequence[float],
    times_s: Sequence[float],
    n: int,
    *,
    relative: bool = False,
) -> AlphaBeta:
    """Least-squares fit of α and B from all-reduce times measured at one worker count ``n``
    (:func:`fit_ring`'s α–β)."""
    return fit_ring(sizes_bytes, times_s, n, relative=relative).alpha_beta


def _standard_errors(design: np.ndarray, target: np.ndarray, params: np.ndarray,
                     distinct: int) -> tuple[float, float] | None:
    """The standard errors of a two-parameter least-squares solution ``params`` of
    ``design · p = target``; None with fewer than 3 distinct sizes or a singular design."""
    if distinct < 3:
        return None
    resid = design @ params - target
    s2 = float(resid @ resid) / (len(target) - 2)
    try:
        cov = s2 * np.linalg.inv(design.T @ design)
    except np.linalg.LinAlgError:
        return None
    se_alpha, se_beta = (math.sqrt(max(0.0, float(v))) for v in np.diag(cov))
    return se_alpha, se_beta


def _fit_bandwidth_alone(column: np.ndarray, target: np.ndarray) -> RingFit:
    """α held at 0: ``β = column·target / column·column``, the one-parameter least squares of
    ``column · β = target``, with β's standard error from its residuals (fit_ring's clamp)."""
    norm = float(column @ column)
    beta = float(column @ target) / norm
    resid = column * beta - target
    se_beta = math.sqrt(float(resid @ resid) / (len(target) - 1) / norm)
    return RingFit(alpha_beta=AlphaBeta(alpha=0.0, bandwidth=1.0 / beta), se_alpha=None,
                   se_beta=se_beta)


def fit_ring(
    sizes_bytes: Sequence[float],
    times_s: Sequence[float],
    n: int,
    *,
    relative: bool = False,
    clamp_alpha: bool = False,
) -> RingFit:
    """Least-squares fit of α and B from all-reduce times measured at one worker count ``n``,
    with their standard errors (:class:`RingFit`).

    Solves ``t = α · 2(N−1) + β · 2(N−1)/N · m`` for ``(α, β)`` with ``numpy.linalg.lstsq``
    and returns ``B = 1/β``. With ``relative=True`` each row is divided by its measured time,
    i.e. relative errors are minimised; use it when sizes span many decades, otherwise the
    largest messages dominate and α is poorly determined.

    Errors (:class:`ModelInputError`): lengths differ, ``n < 2`` (nothing is communicated),
    fewer than 2 distinct sizes (α and B cannot be separated), non-positive or non-finite
    times, a fitted bandwidth that is not positive, or a clearly negative α (α within 1e-9 of
    the largest time of zero is taken as round-off and set to 0). With ``clamp_alpha`` a
    clearly negative α gives the least-squares solution under α ≥ 0 instead: α = 0 and B
    fitted alone, rows weighted as asked (sizes so large that the latency is lost in their
    times' noise); α's standard error is None then.
    """
    n = check_workers(n, "n")
    if n < 2:
        raise ModelInputError("n: need at least 2 workers to fit α–β (1 worker sends nothing)")
    sizes = np.asarray(sizes_bytes, dtype=float)
    times = np.asarray(times_s, dtype=float)
    if sizes.ndim != 1 or times.ndim != 1 or sizes.shape != times.shape:
        raise ModelInputError(
            f"sizes_bytes and times_s must be 1-D and of equal length, got {sizes.shape} "
            f"and {times.shape}"
        )
    if not np.all(np.isfinite(sizes)) or np.any(sizes < 0):
        raise ModelInputError("sizes_bytes: expected non-negative finite byte counts")
    if not np.all(np.isfinite(times)) or np.any(times <= 0):
        raise ModelInputError("times_s: expected positive finite seconds")
    if np.unique(sizes).size < 2:
        raise ModelInputError(
            f"need measurements at >= 2 distinct message sizes to separate α from B, got "
            f"{np.unique(sizes).size}"
        )
    design = np.column_stack([np.full_like(sizes, 2.0 * (n - 1)), 2.0 * (n - 1) / n * sizes])
    target = times
    if relative:
        design = design / times[:, None]
        target = np.ones_like(times)
    params, *_ = np.linalg.lstsq(design, target, rcond=None)
    alpha, beta = params
    errors = _standard_errors(design, target, params, int(np.unique(sizes).size))
    if not beta > 0:
        raise ModelInputError(
            f"fitted bandwidth is not positive (β = {beta:.3g} s/byte): times do not grow with "
            "message size; check the measurements"
        )
    if alpha < 0:
        if -alpha * 2 * (n - 1) <= 1e-9 * float(times.max()):
            alpha = 0.0
        elif clamp_alpha:
            return _fit_bandwidth_alone(design[:, 1], target)
        else:
            raise ModelInputError(
                f"fitted latency α = {alpha:.3g} s is negative; add small message sizes or "
                "use relative=True"
            )
    return RingFit(alpha_beta=AlphaBeta(alpha=float(alpha), bandwidth=float(1.0 / beta)),
                   se_alpha=errors[0] if errors else None, se_beta=errors[1] if errors else None)



# --------------------------------------------------------------------------------------------
# Two-level network and one communication model per pattern
# --------------------------------------------------------------------------------------------
#
# Why two levels: the papers' clusters have several GPUs per node over PCIe/NVLink and
# InfiniBand between nodes, and their tables separate the two; a single α–β pair prices a
# 4-GPU node's ring as if every hop crossed the network. ``Network`` carries both, and each
# pattern's cost function says which hops use which level. Every function is 0 (or the PS's
# own cost) for one worker, and all sizes are bytes, all times seconds.

#: The communication patterns a mode can declare (modes.base.PATTERNS) that have a model.
PATTERN_MODELS: tuple[str, ...] = (
    "allreduce", "hierarchical-allreduce", "parameter-server", "allgather-reducescatter")


class Network(BaseModel):
    """α–β of the links inside one node (``intra``) and between nodes (``inter``).

    ``intra`` None: the node's ranks talk over the same links as ranks of different nodes
    (the inter-node α–β is used for both levels, and the prediction says so).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    inter: AlphaBeta
    intra: AlphaBeta | None = None

    @property
    def local(self) -> AlphaBeta:
        """The α–β of ranks on the same node."""
        return self.intra if self.intra is not None else self.inter


def _check_bytes(size_bytes: object) -> float:
    if not is_number(size_bytes) or not math.isfinite(size_bytes) or size_bytes < 0:  # type: ignore[arg-type]
        raise ModelInputError(f"size_bytes: expected a non-negative number, got {size_bytes!r}")
    return float(size_bytes)  # type: ignore[arg-type]


def _layout(workers: int, per_node: int) -> tuple[int, int]:
    """(ranks per node actually used, nodes) of ``workers`` ranks packed ``per_node`` a node."""
    workers = check_workers(workers, "workers")
    per_node = check_workers(per_node, "tasks per node")
    g = min(per_node, workers)
    return g, -(-workers // g)


def _ring_level(size_bytes: float, n: int, link: AlphaBeta) -> float:
    if n <= 1:
        return 0.0
    return 2 * (n - 1) * link.alpha + 2 * (n - 1) / n * size_bytes / link.bandwidth


def ring_allreduce_time(size_bytes: float, workers: int, per_node: int, net: Network) -> float:
    """Flat ring all-reduce over every rank: ``2(N−1)·α + 2(N−1)/N · m/B``.

    Inside one node every hop is an intra-node hop; across nodes the ring's slowest hop (an
    inter-node one) paces every step, so the inter-node α–β prices all ``2(N−1)`` steps.
    """
    m = _check_bytes(size_bytes)
    _g, nodes = _layout(workers, per_node)
    return _ring_level(m, workers, net.local if nodes == 1 else net.inter)


def hierarchical_allreduce_time(size_bytes: float, workers: int, per_node: int,
                                net: Network) -> float:
    """Reduce inside each node, ring all-reduce across nodes, broadcast inside each node.

    The intra-node reduce and broadcast are each half a ring all-reduce of the node's ``g``
    ranks, ``(g−1)·α_i + (g−1)/g · m/B_i``; the inter-node ring runs over the ``n`` node
    leaders: ``2(n−1)·α_e + 2(n−1)/n · m/B_e``. One node: the intra ring; one rank per node:
    the inter ring.
    """
    m = _check_bytes(size_bytes)
    g, nodes = _layout(workers, per_node)
    return _ring_level(m, g, net.local) + _ring_level(m, nodes, net.inter)


def reduce_scatter_allgather_time(size_bytes: float, workers: int, per_node: int, net: Network,
                                  *, reshard_after_forward: bool = True) -> float:
    """FSDP's collectives per iteration: all-gather the parameters for forward, again for
    backward when they were resharded after forward (ZeRO-3), and reduce-scatter the gradients.

    Each of these is half a ring all-reduce: ``(N−1)·α + (N−1)/N · m/B``; so 3 halves with
    resharding (1.5 all-reduces) and 2 without (one all-reduce).
    """
    halves = 3 if reshard_after_forward else 2
    return halves / 2 * ring_allreduce_time(size_bytes, workers, per_node, net)


def parameter_server_time(size_bytes: float, workers: int, per_node: int, net: Network,
                          servers: int) -> float:
    """Push the gradient to ``servers`` servers (keys spread evenly), then pull the parameters.

    Each direction costs one α plus the time the busiest link needs. Servers are spread over
    the nodes, beside the workers: a worker sends ``m/S`` to each server, so its node's link
    carries the share bound for servers on other nodes, ``m·(S − s)/S`` with ``s = ⌊S/n⌋``
    servers on its node (the worker with fewest local servers paces the step), the rest staying
    inside the node (in parallel). A server's link carries ``N·m/S`` bytes, of which those of
    workers on other nodes, ``(N − g)·m/S``, cross the inter-node link and those of its own
    node's ``g`` workers stay inside it. ``t = 2·(α + max(m·(S−s)/(S·B_e), m·s/(S·B_i),
    (N−g)·m/(S·B_e), g·m/(S·B_i)))``, with ``α`` the inter-node one when there is more than
    one node; on one node every byte stays inside it (``m/B_i``). Unlike an all-reduce, one
    worker still pushes and pulls (the servers hold the parameters).
    """
    m = _check_bytes(size_bytes)
    g, nodes = _layout(workers, per_node)
    s = check_workers(servers, "servers")
    link = net.inter if nodes > 1 else net.local
    local_servers = s // nodes if nodes > 1 else s
    worker_remote = m * (s - local_servers) / s / net.inter.bandwidth
    worker_local = m * local_servers / s / net.local.bandwidth
    remote = (workers - g) * m / s / net.inter.bandwidth
    local = g * m / s / net.local.bandwidth
    return 2 * (link.alpha + max(worker_remote, worker_local, remote, local))


def pattern_comm_time(pattern: str, size_bytes: float, workers: int, per_node: int,
                      net: Network, *, servers: int = 1,
                      reshard_after_forward: bool = True) -> float:
    """The communication time of one iteration for a declared pattern (see PATTERN_MODELS).

    A pattern without a model (``none``, or a name this orch does not know) is a
    :class:`ModelInputError` naming the patterns that have one.
    """
    if pattern == "allreduce":
        return ring_allreduce_time(size_bytes, workers, per_node, net)
    if pattern == "hierarchical-allreduce":
        return hierarchical_allreduce_time(size_bytes, workers, per_node, net)
    if pattern == "parameter-server":
        return parameter_server_time(size_bytes, workers, per_node, net, servers)
    if pattern == "allgather-reducescatter":
        return reduce_scatter_allgather_time(size_bytes, workers, per_node, net,
                                             reshard_after_forward=reshard_after_forward)
    raise ModelInputError(
        f"communication pattern {pattern!r} has no model; patterns with one: "
        f"{', '.join(PATTERN_MODELS)}")


@dataclass
class CommModel:
    """Where the α–β of one site/partition comes from (or that there is none)."""

    alpha_beta: AlphaBeta | None
    source: str
