"""Performance model of synchronous SGD (S-SGD) training: pure functions, data in → data out.

Why this module exists: measured scaling numbers only tell what happened on the nodes we ran on.
To say *why* a run scales (I/O, compute or communication bound) and to answer what-if questions
(10GbE vs 100Gb InfiniBand, more workers than we measured, wait-free back-propagation or not) we
need a small analytic model fed by measured phase times. The formulas follow the two source
papers summarised in DESIGN.md ("Measurement definitions", "Performance model"):

* one iteration on one worker: ``t_iter = t_io + t_h2d + t_f + t_b + t_u + t_comm``;
* pipelined I/O (prefetch): ``t_iter = max(t_io + t_h2d, t_f + t_b + t_comm + t_u)``;
* speedup, Eq. 8 of the first paper:
  ``S(Ng) = Ng · (t_io(1) + t_gpu) / (t_io(Ng) + t_gpu + t_comm(Ng))``,
  ``t_gpu = t_h2d + t_f + t_b + t_u``;
* ring all-reduce of ``m`` bytes over ``N`` workers (α–β model):
  ``2(N−1)·α + 2·(N−1)/N · m/B``;
* layer-wise traces and wait-free back-propagation (WFBP) scheduling (second paper).

Units: breakdowns, α and predictions are in seconds; layer traces are in microseconds (the
trace format of the second paper), and every schedule field says ``_us``. Nothing here imports a
deep-learning framework, touches a scheduler or reads a clock: every function is deterministic.

Errors in user input (files, options) raise :class:`ModelInputError`, a ``ValueError`` whose
message names the file or option, the field and what was expected, so the CLI can print it and
exit with code 2.
"""

import csv
import functools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from orchestrator import protocol
from orchestrator.errors import UserError

__all__ = [
    "PATTERN_MODELS",
    "PHASES",
    "AlphaBeta",
    "Breakdown",
    "Layer",
    "LayerTiming",
    "ModelInputError",
    "Network",
    "Prediction",
    "Schedule",
    "Send",
    "Trace",
    "allreduce_time",
    "expected_max_normal",
    "fit_alpha_beta",
    "format_schedule",
    "hierarchical_allreduce_time",
    "iteration_time",
    "load_breakdown",
    "load_trace_csv",
    "parameter_server_time",
    "pattern_comm_time",
    "phase_iteration_time",
    "predict",
    "predict_from_measured",
    "predict_trace_network",
    "reduce_scatter_allgather_time",
    "ring_allreduce_time",
    "scale_trace_comm",
    "schedule_none",
    "schedule_wfbp",
    "speedup",
    "speedup_eq8",
    "trace_iteration_us",
]

#: Phase fields of a breakdown, in the order of one iteration (the rank-log contract's).
PHASES: tuple[str, ...] = protocol.PHASES
#: The same fields as a breakdown file lists them: the required ones, then t_comm (optional).
_FIELDS_TEXT = ", ".join([*(p for p in PHASES if p != "t_comm"), "t_comm"])

#: What a phase value must look like; used in every error message about one.
_PHASE_EXPECTED = (
    "a non-negative number of seconds, or a map from worker count (integer >= 1) to "
    "non-negative seconds"
)

Overlap = Literal["none", "wfbp"]
_OVERLAPS: tuple[str, ...] = ("none", "wfbp")


class ModelInputError(UserError, ValueError):
    """Bad input to the performance model (file content, option value, missing data).

    A :class:`~orchestrator.errors.UserError` so the CLI prints the message and exits with
    code 2, and a ``ValueError`` so callers that only know the standard library can catch it.
    The message is meant to be shown as is (file, field, value, what is expected).
    """


# --------------------------------------------------------------------------------------------
# Small validation helpers
# --------------------------------------------------------------------------------------------


def _is_number(value: object) -> bool:
    """True for int/float (numpy scalars included) but not bool: ``True`` is not 1 second."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )


def _describe(value: object) -> str:
    """Short ``type 'value'`` text for error messages."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def _non_negative_seconds(value: object, what: str) -> float:
    """Check one phase time; reject bools, strings, NaN/inf and negative values."""
    if not _is_number(value):
        hint = ""
        if isinstance(value, str):
            try:
                float(value)
                hint = " (YAML reads numbers like 1e-3 as text: write 1.0e-3)"
            except ValueError:
                pass
        raise ValueError(f"{what}: expected {_PHASE_EXPECTED}, got {_describe(value)}{hint}")
    number = float(value)  # type: ignore[arg-type]
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{what}: expected {_PHASE_EXPECTED}, got {number!r}")
    return number


def _worker_count_key(key: object, what: str) -> int:
    """Worker-count map keys: ints, or strings of digits (JSON object keys are strings)."""
    if isinstance(key, str) and key.strip().isdigit():
        key = int(key.strip())
    if not _is_number(key) or float(key) != int(key) or int(key) < 1:  # type: ignore[arg-type]
        raise ValueError(
            f"{what}: map keys must be worker counts (integers >= 1), got {_describe(key)}"
        )
    return int(key)  # type: ignore[arg-type]


def _check_workers(n: object, what: str = "workers") -> int:
    """A worker count: an int >= 1 (bools rejected)."""
    if not _is_number(n) or float(n) != int(n) or int(n) < 1:  # type: ignore[arg-type]
        raise ModelInputError(f"{what}: expected an integer >= 1, got {_describe(n)}")
    return int(n)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# Breakdown: per-iteration phase times of one worker
# --------------------------------------------------------------------------------------------


Phase = float | dict[int, float]


class Breakdown(BaseModel):
    """Per-iteration phase times (seconds) of one worker, possibly depending on worker count.

    Why maps: ``t_io`` grows when several workers share one node's disk or page cache and
    ``t_comm`` grows with N, while ``t_f``/``t_b`` usually do not. Each phase is therefore either
    one number (the same for every N, *including N = 1*) or a map ``{N: seconds}``. Use
    :meth:`at` to get a concrete breakdown for one N; a map without that N is an error (we do
    not interpolate: a silent guess would make predictions look measured).

    ``t_comm`` is the communication time placed on the iteration's timeline. In measured
    breakdowns it is the *exposed* part (DESIGN.md); give ``{1: 0, ...}`` if a single worker
    has no communication.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    t_io: Phase
    t_h2d: Phase
    t_f: Phase
    t_b: Phase
    t_u: Phase
    t_comm: Phase = 0.0

    @field_validator(*PHASES, mode="before")
    @classmethod
    def _check_phase(cls, value: Any, info: Any) -> Phase:
        """Normalise a phase to ``float`` or ``dict[int, float]`` with clear errors."""
        field = info.field_name
        if isinstance(value, Mapping):
            if not value:
                raise ValueError(f"{field}: expected {_PHASE_EXPECTED}, got an empty map")
            out: dict[int, float] = {}
            for key, seconds in value.items():
                n = _worker_count_key(key, field)
                if n in out:
                    raise ValueError(f"{field}: worker count {n} given twice")
                out[n] = _non_negative_seconds(seconds, f"{field}[{n}]")
            return dict(sorted(out.items()))
        return _non_negative_seconds(value, field)

    @classmethod
    def from_mapping(cls, data: object, source: str = "<breakdown>") -> "Breakdown":
        """Build a breakdown from parsed JSON/YAML, raising :class:`ModelInputError`.

        ``source`` (usually the file name) starts every error message so the user knows where
        to look.
        """
        if not isinstance(data, Mapping):
            raise ModelInputError(
                f"{source}: expected a mapping of phase fields ({_FIELDS_TEXT}), "
                f"got {_describe(data)}"
            )
        unknown = [str(k) for k in data if k not in PHASES]
        if unknown:
            raise ModelInputError(
                f"{source}: unknown field(s) {', '.join(repr(u) for u in unknown)}; "
                f"expected fields: {_FIELDS_TEXT} (t_comm is optional, default 0)"
            )
        try:
            return cls.model_validate(dict(data))
        except ValidationError as exc:
            problems = []
            for err in exc.errors():
                field = ".".join(str(p) for p in err["loc"]) or "<root>"
                if err["type"] == "missing":
                    problems.append(f"field '{field}' is missing: expected {_PHASE_EXPECTED}")
                else:
                    msg = err["msg"].removeprefix("Value error, ")
                    problems.append(f"field '{field}': {msg}")
            raise ModelInputError(f"{source}: " + "; ".join(problems)) from None

    def is_resolved(self) -> bool:
        """True when every phase is a single number (no worker-count maps)."""
        return all(not isinstance(getattr(self, p), dict) for p in PHASES)

    def worker_counts(self) -> tuple[int, ...]:
        """Worker counts for which :meth:`at` succeeds, or ``()`` if every N works."""
        maps = [getattr(self, p) for p in PHASES if isinstance(getattr(self, p), dict)]
        if not maps:
            return ()
        common = set(maps[0])
        for m in maps[1:]:
            common &= set(m)
        return tuple(sorted(common))

    def phase_at(self, field: str, n: int) -> float:
        """One phase for ``n`` workers; a map missing ``n`` is a :class:`ModelInputError`."""
        if field not in PHASES:
            raise ModelInputError(f"unknown phase {field!r}; expected one of {', '.join(PHASES)}")
        n = _check_workers(n)
        value = getattr(self, field)
        if not isinstance(value, dict):
            return float(value)
        if n not in value:
            raise ModelInputError(
                f"{field} has no value for {n} worker(s); available worker counts: "
                f"{', '.join(str(k) for k in value)} (add {n} to the map or give one number)"
            )
        return value[n]

    def at(self, n: int) -> "Breakdown":
        """The concrete breakdown for ``n`` workers: every phase a single number."""
        return Breakdown(**{p: self.phase_at(p, n) for p in PHASES})

    @property
    def t_gpu(self) -> float:
        """``t_h2d + t_f + t_b + t_u`` (Eq. 8); only defined on a resolved breakdown."""
        return (
            self._scalar("t_h2d") + self._scalar("t_f") + self._scalar("t_b") + self._scalar("t_u")
        )

    def _scalar(self, field: str) -> float:
        value = getattr(self, field)
        if isinstance(value, dict):
            raise ModelInputError(
                f"{field} depends on the worker count ({', '.join(map(str, value))}); "
                "call .at(n) first"
            )
        return float(value)


def load_breakdown(path: str | Path) -> Breakdown:
    """Read a breakdown from a JSON (``.json``) or YAML (anything else) file.

    The file is a mapping with the fields ``t_io, t_h2d, t_f, t_b, t_u`` (required) and
    ``t_comm`` (optional, default 0), each a number of seconds or a map from worker count to
    seconds. Worker counts may be written as strings (``"4": 0.2``) because JSON object keys are
    always strings. Any problem raises :class:`ModelInputError` naming the file and field.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ModelInputError(f"{path}: cannot read breakdown file ({exc.strerror})") from None
    try:
        data = json.loads(text) if path.suffix.lower() == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ModelInputError(f"{path}: not valid {_format_name(path)}: {exc}") from None
    return Breakdown.from_mapping(data, source=str(path))


def _format_name(path: Path) -> str:
    return "JSON" if path.suffix.lower() == ".json" else "YAML"


# --------------------------------------------------------------------------------------------
# Iteration time and speedup
# --------------------------------------------------------------------------------------------


def phase_iteration_time(
    t_io: float,
    t_h2d: float,
    t_f: float,
    t_b: float,
    t_u: float,
    t_comm_exposed: float,
    *,
    prefetch: bool,
) -> float:
    """Iteration time from phase times (any consistent unit).

    Without prefetch the phases run one after another:
    ``t_io + t_h2d + t_f + t_b + t_u + t_comm_exposed``.
    With prefetch the next batch is read and copied while the current one is computed, so the
    slower of the two pipelines sets the pace:
    ``max(t_io + t_h2d, t_f + t_b + t_comm_exposed + t_u)``.
    """
    if prefetch:
        return max(t_io + t_h2d, t_f + t_b + t_comm_exposed + t_u)
    return t_io + t_h2d + t_f + t_b + t_u + t_comm_exposed


def iteration_time(breakdown: Breakdown, n: int = 1, *, prefetch: bool = False) -> float:
    """Iteration time (s) of ``breakdown`` at ``n`` workers; ``t_comm`` is taken as exposed."""
    b = breakdown.at(n)
    return phase_iteration_time(
        b._scalar("t_io"),
        b._scalar("t_h2d"),
        b._scalar("t_f"),
        b._scalar("t_b"),
        b._scalar("t_u"),
        b._scalar("t_comm"),
        prefetch=prefetch,
    )


def speedup_eq8(breakdown: Breakdown, n: int) -> float:
    """Eq. 8 of the first paper (no prefetch): weak-scaling speedup with ``n`` workers.

    ``S(Ng) = Ng · (t_io(1) + t_gpu) / (t_io(Ng) + t_gpu + t_comm(Ng))`` with
    ``t_gpu = t_h2d + t_f + t_b + t_u``. The single-worker time ignores ``t_comm`` (one worker
    has nothing to aggregate). If a ``t_gpu`` phase is given per worker count, the numerator
    uses its value at 1 and the denominator its value at ``n`` (the paper assumes it constant).
    """
    n = _check_workers(n)
    one = breakdown.at(1)
    many = breakdown.at(n)
    return (
        n
        * (one._scalar("t_io") + one.t_gpu)
        / (many._scalar("t_io") + many.t_gpu + many._scalar("t_comm"))
    )


def speedup(breakdown: Breakdown, n: int, *, prefetch: bool = False) -> float:
    """General weak-scaling speedup ``S(N) = N · t_iter(1) / t_iter(N)``.

    Both iteration times use the same prefetch rule and include ``t_comm`` as given (so
    ``t_comm(1)`` counts if nonzero). With prefetch off and ``t_comm(1) = 0`` this equals
    :func:`speedup_eq8`.
    """
    n = _check_workers(n)
    return (
        n
        * iteration_time(breakdown, 1, prefetch=prefetch)
        / iteration_time(breakdown, n, prefetch=prefetch)
    )


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
    n = _check_workers(n, "n")
    if not _is_number(size_bytes) or not math.isfinite(size_bytes) or size_bytes < 0:
        raise ModelInputError(f"size_bytes: expected a non-negative number, got {size_bytes!r}")
    if not _is_number(alpha) or not math.isfinite(alpha) or alpha < 0:
        raise ModelInputError(f"alpha: expected non-negative seconds, got {alpha!r}")
    if not _is_number(bandwidth) or not math.isfinite(bandwidth) or bandwidth <= 0:
        raise ModelInputError(f"bandwidth: expected positive bytes/s, got {bandwidth!r}")
    if n == 1:
        return 0.0
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * size_bytes / bandwidth


def fit_alpha_beta(
    sizes_bytes: Sequence[float],
    times_s: Sequence[float],
    n: int,
    *,
    relative: bool = False,
) -> AlphaBeta:
    """Least-squares fit of α and B from all-reduce times measured at one worker count ``n``.

    Solves ``t = α · 2(N−1) + β · 2(N−1)/N · m`` for ``(α, β)`` with ``numpy.linalg.lstsq``
    and returns ``B = 1/β``. With ``relative=True`` each row is divided by its measured time,
    i.e. relative errors are minimised; use it when sizes span many decades, otherwise the
    largest messages dominate and α is poorly determined.

    Errors (:class:`ModelInputError`): lengths differ, ``n < 2`` (nothing is communicated),
    fewer than 2 distinct sizes (α and B cannot be separated), non-positive or non-finite
    times, a fitted bandwidth that is not positive, or a clearly negative α (α within 1e-9 of
    the largest time of zero is taken as round-off and set to 0).
    """
    n = _check_workers(n, "n")
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
    (alpha, beta), *_ = np.linalg.lstsq(design, target, rcond=None)
    if not beta > 0:
        raise ModelInputError(
            f"fitted bandwidth is not positive (β = {beta:.3g} s/byte): times do not grow with "
            "message size; check the measurements"
        )
    if alpha < 0:
        if -alpha * 2 * (n - 1) <= 1e-9 * float(times.max()):
            alpha = 0.0
        else:
            raise ModelInputError(
                f"fitted latency α = {alpha:.3g} s is negative; add small message sizes or "
                "use relative=True"
            )
    return AlphaBeta(alpha=float(alpha), bandwidth=float(1.0 / beta))


# --------------------------------------------------------------------------------------------
# Layer-wise traces and schedules (second paper)
# --------------------------------------------------------------------------------------------


class Layer(BaseModel):
    """One layer of a layer-wise trace (µs and bytes, as in the second paper's format).

    ``comm_us`` is the time to aggregate this layer's gradient; 0 means the layer has no
    gradient to send (e.g. pooling, ReLU).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: int
    name: str
    forward_us: float
    backward_us: float
    comm_us: float
    size_bytes: int

    @field_validator("forward_us", "backward_us", "comm_us")
    @classmethod
    def _time_ok(cls, value: float) -> float:
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"expected non-negative microseconds, got {value!r}")
        return value

    @field_validator("size_bytes")
    @classmethod
    def _size_ok(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"expected non-negative bytes, got {value!r}")
        return value

    @property
    def sends(self) -> bool:
        """Whether this layer has a gradient to aggregate."""
        return self.comm_us > 0


class Trace(BaseModel):
    """A layer-wise trace: I/O time (the ``data`` row's forward time) and layers 1..L.

    ``layers`` are in forward order; backward runs from the last to the first.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    t_io_us: float = 0.0
    layers: tuple[Layer, ...]
    source: str = "<trace>"


TRACE_COLUMNS: tuple[str, ...] = (
    "id",
    "name",
    "forward_us",
    "backward_us",
    "comm_us",
    "size_bytes",
)


def load_trace_csv(path: str | Path) -> Trace:
    """Read a layer-wise trace CSV (second paper's format) into a :class:`Trace`.

    The header is required: ``id,name,forward_us,backward_us,comm_us,size_bytes``
    (any order). Rows are in forward order with strictly increasing ``id``. A row named ``data``
    is not a layer: its ``forward_us`` is the I/O time (its other times are ignored); at most
    one such row. Blank lines are skipped. Errors name the file, line and column.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ModelInputError(f"{path}: cannot read trace file ({exc.strerror})") from None
    reader = csv.reader(text.splitlines())
    rows = [(i, row) for i, row in enumerate(reader, start=1) if any(c.strip() for c in row)]
    if not rows:
        raise ModelInputError(f"{path}: empty trace; expected header {','.join(TRACE_COLUMNS)}")
    header_line, header = rows[0]
    header = [h.strip() for h in header]
    missing = [c for c in TRACE_COLUMNS if c not in header]
    extra = [h for h in header if h not in TRACE_COLUMNS]
    if missing or extra or len(set(header)) != len(header):
        raise ModelInputError(
            f"{path}:{header_line}: header must be the columns {','.join(TRACE_COLUMNS)} "
            f"(any order, each once); missing {missing or 'none'}, unexpected {extra or 'none'}"
        )
    t_io_us: float | None = None
    layers: list[Layer] = []
    for line, row in rows[1:]:
        if len(row) != len(header):
            raise ModelInputError(f"{path}:{line}: expected {len(header)} columns, got {len(row)}")
        cells = {h: c.strip() for h, c in zip(header, row, strict=True)}
        values = {
            "id": _csv_int(cells["id"], path, line, "id", minimum=None),
            "name": cells["name"],
            "forward_us": _csv_float(cells["forward_us"], path, line, "forward_us"),
            "backward_us": _csv_float(cells["backward_us"], path, line, "backward_us"),
            "comm_us": _csv_float(cells["comm_us"], path, line, "comm_us"),
            "size_bytes": _csv_int(cells["size_bytes"], path, line, "size_bytes", minimum=0),
        }
        if values["name"].lower() == "data":
            if t_io_us is not None:
                raise ModelInputError(f"{path}:{line}: second 'data' row; only one is allowed")
            t_io_us = values["forward_us"]
            continue
        if not values["name"]:
            raise ModelInputError(f"{path}:{line}: column 'name': expected a layer name")
        if layers and values["id"] <= layers[-1].id:
            raise ModelInputError(
                f"{path}:{line}: column 'id': layers must be listed in forward order with "
                f"increasing ids, got {values['id']} after {layers[-1].id}"
            )
        layers.append(Layer(**values))
    if not layers:
        raise ModelInputError(f"{path}: no layer rows (only a header or a 'data' row)")
    return Trace(t_io_us=t_io_us or 0.0, layers=tuple(layers), source=str(path))


def _csv_float(text: str, path: Path, line: int, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ModelInputError(
            f"{path}:{line}: column '{column}': expected non-negative microseconds, got {text!r}"
        )
    return value


def _csv_int(text: str, path: Path, line: int, column: str, minimum: int | None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ModelInputError(
            f"{path}:{line}: column '{column}': expected an integer, got {text!r}"
        ) from None
    if minimum is not None and value < minimum:
        raise ModelInputError(
            f"{path}:{line}: column '{column}': expected an integer >= {minimum}, got {value}"
        )
    return value


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
            raise ModelInputError(f"layers: expected Layer objects, got {_describe(layer)}")
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
    if bucket_bytes is not None and (not _is_number(bucket_bytes) or bucket_bytes <= 0):
        raise ModelInputError(f"bucket_bytes: expected a positive byte count, got {bucket_bytes!r}")
    if (alpha_beta is None) != (workers is None):
        raise ModelInputError("schedule_wfbp: give both alpha_beta and workers, or neither")
    n = _check_workers(workers) if workers is not None else 1
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
    n = _check_workers(n, "n")
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


# --------------------------------------------------------------------------------------------
# Prediction
# --------------------------------------------------------------------------------------------


class Prediction(BaseModel):
    """Predicted iteration time and speedup at one worker count (all times in seconds).

    ``speedup = workers · t_iter(1) / t_iter(workers)`` (weak scaling); ``t_comm_total`` is all
    communication, ``t_comm_exposed`` the part on the critical path. ``source`` says which
    inputs were used: ``breakdown``, ``breakdown+alpha-beta``, ``trace`` or
    ``trace+alpha-beta``. For traces ``t_h2d`` and ``t_u`` are 0 (folded into other rows).
    """

    model_config = ConfigDict(frozen=True)

    workers: int
    t_iter: float
    speedup: float
    efficiency: float
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


def predict(
    source: Breakdown | Trace,
    workers: Sequence[int],
    *,
    overlap: Overlap = "none",
    prefetch: bool = False,
    alpha_beta: AlphaBeta | None = None,
    grad_bytes: int | None = None,
    bucket_bytes: int | None = None,
) -> list[Prediction]:
    """Predict iteration time and speedup for each worker count in ``workers``.

    Inputs, one of:

    * a :class:`Breakdown` alone: phases (and ``t_comm``) resolved with ``.at(N)``;
    * a :class:`Breakdown` with ``t_comm`` left at 0, plus ``alpha_beta`` and ``grad_bytes``:
      ``t_comm(N) = allreduce(grad_bytes, N)`` (0 at N = 1), the other phases from ``.at(N)``;
    * a :class:`Trace`, optionally with ``alpha_beta`` (then each layer's comm is rewritten
      with :func:`scale_trace_comm` for every N). Without ``alpha_beta`` the trace's
      ``comm_us`` are used as measured for every N > 1. For N = 1 a trace has no communication.

    ``overlap``: ``"none"`` — all communication is exposed. ``"wfbp"`` — with a trace, the WFBP
    schedule (:func:`schedule_wfbp`, optional ``bucket_bytes``); with a breakdown, which has no
    layer detail, communication is assumed to overlap the whole backward pass:
    ``exposed = max(0, t_comm − t_b)``. In that case ``t_comm`` is read as the *total*
    communication time — a measured (already exposed) ``t_comm`` should be predicted with
    ``overlap="none"`` or it would be hidden twice.

    ``prefetch`` selects the pipelined-I/O rule (see :func:`phase_iteration_time`).
    ``speedup = N · t_iter(1) / t_iter(N)`` with the same options at N = 1.
    """
    counts = _check_predict_options(workers, overlap, prefetch)
    if bucket_bytes is not None and not (isinstance(source, Trace) and overlap == "wfbp"):
        raise ModelInputError("bucket_bytes only applies to a trace with overlap='wfbp'")
    if isinstance(source, Trace):
        if grad_bytes is not None:
            raise ModelInputError(
                "grad_bytes: not used with a trace (gradient sizes come from size_bytes)"
            )
        if bucket_bytes is not None and (not _is_number(bucket_bytes) or bucket_bytes <= 0):
            raise ModelInputError(
                f"bucket_bytes: expected a positive byte count, got {bucket_bytes!r}"
            )

        def at(n: int) -> dict[str, float]:
            return _trace_point(source, n, overlap, prefetch, alpha_beta, bucket_bytes)

        kind = "trace+alpha-beta" if alpha_beta is not None else "trace"
    elif isinstance(source, Breakdown):
        if (alpha_beta is None) != (grad_bytes is None):
            raise ModelInputError(
                "alpha_beta and grad_bytes go together: give both to model t_comm(N) as a ring "
                "all-reduce of grad_bytes, or neither to use the breakdown's t_comm"
            )
        if alpha_beta is not None:
            if not _is_number(grad_bytes) or grad_bytes < 0:  # type: ignore[operator]
                raise ModelInputError(
                    f"grad_bytes: expected a non-negative byte count, got {grad_bytes!r}"
                )
            if source.t_comm != 0.0:
                raise ModelInputError(
                    "t_comm: the breakdown gives t_comm and alpha_beta was also given; use one "
                    "(set t_comm to 0 to predict it from alpha_beta and grad_bytes)"
                )

        def at(n: int) -> dict[str, float]:
            return _breakdown_point(source, n, overlap, prefetch, alpha_beta, grad_bytes)

        kind = "breakdown+alpha-beta" if alpha_beta is not None else "breakdown"
    else:
        raise ModelInputError(f"source: expected a Breakdown or a Trace, got {_describe(source)}")

    base = at(1)["t_iter"]
    out = []
    for n in counts:
        point = at(n)
        s = n * base / point["t_iter"] if point["t_iter"] > 0 else math.nan
        out.append(
            Prediction(
                workers=n,
                speedup=s,
                efficiency=s / n,
                overlap=overlap,
                prefetch=prefetch,
                source=kind,
                **point,
            )
        )
    return out


def _check_predict_options(workers: Sequence[int], overlap: object, prefetch: object) -> list[int]:
    if overlap not in _OVERLAPS:
        raise ModelInputError(
            f"overlap: expected one of {', '.join(repr(o) for o in _OVERLAPS)}, got {overlap!r}"
        )
    if not isinstance(prefetch, bool):
        raise ModelInputError(f"prefetch: expected true or false, got {_describe(prefetch)}")
    if isinstance(workers, (str, bytes)) or not isinstance(workers, Sequence) or not workers:
        raise ModelInputError(
            f"workers: expected a non-empty list of worker counts (integers >= 1), got "
            f"{_describe(workers)}"
        )
    return [_check_workers(n, "workers") for n in workers]


def _breakdown_point(
    breakdown: Breakdown,
    n: int,
    overlap: str,
    prefetch: bool,
    alpha_beta: AlphaBeta | None,
    grad_bytes: int | None,
) -> dict[str, float]:
    phases = {p: breakdown.phase_at(p, n) for p in PHASES if p != "t_comm"}
    if alpha_beta is not None:
        total = alpha_beta.allreduce(float(grad_bytes or 0), n)
    else:
        total = breakdown.phase_at("t_comm", n)
    exposed = total if overlap == "none" else max(0.0, total - phases["t_b"])
    t_iter = phase_iteration_time(**phases, t_comm_exposed=exposed, prefetch=prefetch)
    return {"t_iter": t_iter, "t_comm_exposed": exposed, "t_comm_total": total, **phases}


def _trace_point(
    trace: Trace,
    n: int,
    overlap: str,
    prefetch: bool,
    alpha_beta: AlphaBeta | None,
    bucket_bytes: int | None,
) -> dict[str, float]:
    if n == 1:
        layers = tuple(layer.model_copy(update={"comm_us": 0.0}) for layer in trace.layers)
    elif alpha_beta is not None:
        layers = scale_trace_comm(trace, alpha_beta, n).layers
    else:
        layers = trace.layers
    if overlap == "none":
        schedule = schedule_none(layers)
    elif alpha_beta is not None and n > 1:
        schedule = schedule_wfbp(
            layers, bucket_bytes=bucket_bytes, alpha_beta=alpha_beta, workers=n
        )
    else:
        schedule = schedule_wfbp(layers, bucket_bytes=bucket_bytes)
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


# --------------------------------------------------------------------------------------------
# Two-level network and one communication model per pattern (issue 16)
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
    if not _is_number(size_bytes) or not math.isfinite(size_bytes) or size_bytes < 0:  # type: ignore[arg-type]
        raise ModelInputError(f"size_bytes: expected a non-negative number, got {size_bytes!r}")
    return float(size_bytes)  # type: ignore[arg-type]


def _layout(workers: int, per_node: int) -> tuple[int, int]:
    """(ranks per node actually used, nodes) of ``workers`` ranks packed ``per_node`` a node."""
    workers = _check_workers(workers, "workers")
    per_node = _check_workers(per_node, "tasks per node")
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

    Each direction costs one α plus the time the busiest link needs: a worker's own link
    carries ``m`` bytes; a server's carries ``N·m/S`` bytes, of which those of workers on other
    nodes cross the inter-node link and those of its own node's ``g`` workers stay inside it
    (the two in parallel). Servers are spread over the nodes, so a server's remote share is
    ``(N − g)·m/S``. ``t = 2·(α + max(m/B_w, (N−g)·m/(S·B_e), g·m/(S·B_i)))``, with ``α`` the
    inter-node one when there is more than one node. Unlike an all-reduce, one worker still
    pushes and pulls (the servers hold the parameters).
    """
    m = _check_bytes(size_bytes)
    g, nodes = _layout(workers, per_node)
    s = _check_workers(servers, "servers")
    link = net.inter if nodes > 1 else net.local
    worker_link = m / link.bandwidth
    remote = (workers - g) * m / s / net.inter.bandwidth
    local = g * m / s / net.local.bandwidth
    return 2 * (link.alpha + max(worker_link, remote, local))


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


def predict_from_measured(
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
) -> dict[str, float]:
    """Predict one larger run from a measured smaller one (issue 16's stated predictions).

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
    """
    if overlap not in _OVERLAPS:
        raise ModelInputError(f"overlap: expected one of {', '.join(_OVERLAPS)}, got {overlap!r}")
    for name in (*PHASES,):
        if name not in base_phases:
            raise ModelInputError(f"breakdown: phase '{name}' is missing; every phase of "
                                  f"{', '.join(PHASES)} must be measured")
        _non_negative_or_error(base_phases[name], name)
    _non_negative_or_error(base_t_iter, "t_iter")
    _non_negative_or_error(comm_base, "t_comm (model, measured size)")
    _non_negative_or_error(comm_target, "t_comm (model, predicted size)")
    compute = {p: float(base_phases[p]) for p in PHASES if p != "t_comm"}

    def exposed(total: float) -> float:
        return total if overlap == "none" else max(0.0, total - compute["t_b"])

    total_base, total_n = float(comm_base), float(comm_target)
    _non_negative_or_error(jitter, "jitter")
    wait = float(jitter) * (expected_max_normal(_check_workers(workers))
                            - expected_max_normal(_check_workers(base_workers, "base workers")))
    exp_n = max(0.0, float(base_phases["t_comm"]) + exposed(total_n) - exposed(total_base)
                + wait)
    t_base_model = phase_iteration_time(**compute, t_comm_exposed=float(base_phases["t_comm"]),
                                        prefetch=prefetch)
    if not _is_number(compute_scale) or not math.isfinite(compute_scale) or compute_scale <= 0:
        raise ModelInputError(f"compute_scale: expected a positive number, got "
                              f"{compute_scale!r}")
    scaled = {p: v * float(compute_scale) for p, v in compute.items()}
    t_n_model = phase_iteration_time(**scaled, t_comm_exposed=exp_n, prefetch=prefetch)
    t_iter = max(1e-12, float(base_t_iter) + t_n_model - t_base_model)
    return {"t_iter": t_iter, "t_comm_exposed": exp_n, "t_comm_total": total_n,
            "t_comm_model_base": total_base, "t_sync_wait": wait,
            "compute_scale": float(compute_scale), **scaled}


@functools.lru_cache(maxsize=256)
def expected_max_normal(n: int) -> float:
    """E[max of n independent standard normal variables]: 0 for 1, 1/√π ≈ 0.5642 for 2,
    ≈ 1.0294 for 4, ≈ 3.24 for 1,024 (numerical integration of x·n·φ(x)·Φ(x)^(n−1))."""
    n = _check_workers(n, "n")
    if n == 1:
        return 0.0
    x = np.linspace(-12.0, 12.0, 24001)
    phi = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1 + np.array([math.erf(v / math.sqrt(2)) for v in x]))
    density = n * phi * cdf ** (n - 1)
    return float(np.sum(x * density) * (x[1] - x[0]))


def _non_negative_or_error(value: object, field: str) -> float:
    try:
        return _non_negative_seconds(value, field)
    except ValueError as exc:
        raise ModelInputError(f"breakdown: {exc}") from None


def predict_trace_network(
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
    counts = _check_predict_options(workers, overlap, prefetch)
    per_node = _check_workers(per_node, "tasks per node")

    def point(n: int) -> dict[str, float]:
        def cost(size: int) -> float:
            return pattern_comm_time(pattern, size, n, per_node, net, servers=servers) * 1e6

        silent = n == 1 and pattern != "parameter-server"
        layers = tuple(layer.model_copy(update={
            "comm_us": 0.0 if silent or layer.size_bytes == 0 else cost(layer.size_bytes)})
            for layer in trace.layers)
        if overlap == "none":
            schedule = schedule_none(layers)
        else:
            schedule = schedule_wfbp(layers, bucket_bytes=bucket_bytes,
                                     cost_us=None if silent else cost)
        t_us = trace_iteration_us(trace.t_io_us, schedule, prefetch=prefetch)
        return {"t_iter": t_us / 1e6, "t_comm_exposed": schedule.exposed_comm_us / 1e6,
                "t_comm_total": schedule.comm_total_us / 1e6, "t_io": trace.t_io_us / 1e6,
                "t_h2d": 0.0, "t_f": schedule.forward_us / 1e6,
                "t_b": schedule.backward_us / 1e6, "t_u": 0.0}

    pattern_comm_time(pattern, 0, 1, 1, net, servers=servers)  # no model: say so first
    base = point(1)["t_iter"]
    rows = []
    for n in counts:
        p = point(n)
        s = n * base / p["t_iter"] if p["t_iter"] > 0 else math.nan
        rows.append({"workers": n, "nodes": -(-n // per_node), **p, "speedup": s,
                     "efficiency": s / n})
    return rows
