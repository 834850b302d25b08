"""What the performance model reads: per-phase breakdowns, layer-wise traces, and the
gradient size and overlap policy of a run; with the checks that turn bad input into one line.

Units: breakdowns are in seconds; layer traces are in microseconds (the trace format of the
second paper, docs/measurements.md "The performance model"). Errors in user input (files,
options) raise :class:`ModelInputError`, a ``ValueError`` whose message names the file or
option, the field and what was expected, so the CLI can print it and exit with code 2.
"""

import csv
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from orchestrator import modes, protocol, zoo
from orchestrator.errors import UserError
from orchestrator.yamlconf import Limits, check_events, read_json, read_text

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
OVERLAPS: tuple[str, ...] = ("none", "wfbp")


class ModelInputError(UserError, ValueError):
    """Bad input to the performance model (file content, option value, missing data).

    A :class:`~orchestrator.errors.UserError` so the CLI prints the message and exits with
    code 2, and a ``ValueError`` so callers that only know the standard library can catch it.
    The message is meant to be shown as is (file, field, value, what is expected).
    """



# --------------------------------------------------------------------------------------------
# Small validation helpers
# --------------------------------------------------------------------------------------------


def is_number(value: object) -> bool:
    """True for int/float (numpy scalars included) but not bool: ``True`` is not 1 second."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )


def describe_value(value: object) -> str:
    """Short ``type 'value'`` text for error messages."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def non_negative_seconds(value: object, what: str) -> float:
    """Check one phase time; reject bools, strings, NaN/inf and negative values."""
    if not is_number(value):
        hint = ""
        if isinstance(value, str):
            try:
                float(value)
                hint = " (YAML reads numbers like 1e-3 as text: write 1.0e-3)"
            except ValueError:
                pass
        raise ValueError(f"{what}: expected {_PHASE_EXPECTED}, got {describe_value(value)}{hint}")
    number = float(value)  # type: ignore[arg-type]
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"{what}: expected {_PHASE_EXPECTED}, got {number!r}")
    return number


def _worker_count_key(key: object, what: str) -> int:
    """Worker-count map keys: ints, or strings of digits (JSON object keys are strings)."""
    if isinstance(key, str) and key.strip().isdigit():
        key = int(key.strip())
    if not is_number(key) or float(key) != int(key) or int(key) < 1:  # type: ignore[arg-type]
        raise ValueError(
            f"{what}: map keys must be worker counts (integers >= 1), got {describe_value(key)}"
        )
    return int(key)  # type: ignore[arg-type]


def check_workers(n: object, what: str = "workers") -> int:
    """A worker count: an int >= 1 (bools rejected)."""
    if not is_number(n) or float(n) != int(n) or int(n) < 1:  # type: ignore[arg-type]
        raise ModelInputError(f"{what}: expected an integer >= 1, got {describe_value(n)}")
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
    breakdowns it is the *exposed* part (docs/measurements.md); give ``{1: 0, ...}`` if a
    single worker has no communication.
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
                out[n] = non_negative_seconds(seconds, f"{field}[{n}]")
            return dict(sorted(out.items()))
        return non_negative_seconds(value, field)

    @classmethod
    def from_mapping(cls, data: object, source: str = "<breakdown>") -> "Breakdown":
        """Build a breakdown from parsed JSON/YAML, raising :class:`ModelInputError`.

        ``source`` (usually the file name) starts every error message so the user knows where
        to look.
        """
        if not isinstance(data, Mapping):
            raise ModelInputError(
                f"{source}: expected a mapping of phase fields ({_FIELDS_TEXT}), "
                f"got {describe_value(data)}"
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
        n = check_workers(n)
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
            self.scalar("t_h2d") + self.scalar("t_f") + self.scalar("t_b") + self.scalar("t_u")
        )

    def scalar(self, field: str) -> float:
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
    try:  # within yamlconf's limits (docs/limits.md)
        if path.suffix.lower() == ".json":
            data = read_json(path, "breakdown file")
        else:
            text = read_text(path, "breakdown file")
            check_events(text, path, "breakdown file")
            data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ModelInputError(f"{path}: not valid {_format_name(path)}: {exc}") from None
    except UserError as exc:
        raise ModelInputError(str(exc)) from None
    return Breakdown.from_mapping(data, source=str(path))


def _format_name(path: Path) -> str:
    return "JSON" if path.suffix.lower() == ".json" else "YAML"



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
# A trace has a row of ~60 bytes per layer: the largest zoo model's is tens of KB.
TRACE_LIMITS = Limits(bytes=16 << 20)


def load_trace_csv(path: str | Path) -> Trace:
    """Read a layer-wise trace CSV (second paper's format) into a :class:`Trace`.

    The header is required: ``id,name,forward_us,backward_us,comm_us,size_bytes``
    (any order). Rows are in forward order with strictly increasing ``id``. A row named ``data``
    is not a layer: its ``forward_us`` is the I/O time (its other times are ignored); at most
    one such row. Blank lines are skipped. Errors name the file, line and column.
    """
    path = Path(path)
    try:
        text = read_text(path, "trace file", TRACE_LIMITS)
    except UserError as exc:
        raise ModelInputError(str(exc)) from None
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


# --------------------------------------------------------------------------------------------
# A run's gradient and overlap, as its model and mode declare them
# --------------------------------------------------------------------------------------------


def gradient_bytes(model: str, dataset: str, params: object = None) -> int | None:
    """float32 gradient bytes of a zoo model, or of a user's model whose ``params`` (the
    run's ``model_params``, counted before submission) are known; None otherwise."""
    try:
        if params is not None and float(params) == float(params):  # not NaN (pandas' null)
            return 4 * int(params)
    except (TypeError, ValueError):
        pass
    try:
        return 4 * int(zoo.get(model).expected_params[dataset])
    except (KeyError, ValueError, TypeError):
        return None


def run_options(value: object) -> dict:
    """A run's options as a dict: the runs table keeps them as JSON text; damaged or absent
    options are none (a prediction then uses the mode's defaults)."""
    if isinstance(value, dict):
        return value
    try:
        parsed = json.loads(value) if isinstance(value, str) and value else {}
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def overlap_of(mode: str, options: str | dict | None, grad_bytes: int | None = None) -> str:
    """The overlap policy a run's mode declares (``Mode.overlap_for``: "wfbp", sent while
    backward goes on, exposed = max(0, total − t_b); or "none", after backward): a run's own
    overlap option (mpi-ssgd) wins, and a gradient that fits DDP's first bucket (1 MiB) is
    one bucket, sent after backward."""
    opts = json.loads(options) if isinstance(options, str) and options else (options or {})
    opts = opts if isinstance(opts, dict) else {}
    if mode not in modes.registry():  # a result set from a mode this orch does not know
        return opts.get("overlap") if opts.get("overlap") in modes.OVERLAPS else "none"
    return modes.get(mode).overlap_for(opts, grad_bytes)


def priced_overlap(mode: str, options: str | dict | None, grad_bytes: int | None = None) -> str:
    """The overlap the model prices for a run: its declared policy (:func:`overlap_of`),
    except that a mode whose non-blocking communication progresses only when polled
    (``Mode.polled``: mpi-ssgd's wait-free back-propagation over Open MPI) is priced as sent
    after backward: on the test cluster its exposed all-reduce over eth was that of
    overlap=none (2.64 s against 2.67 s at 2 nodes), over ib 60 % of it."""
    policy = overlap_of(mode, options, grad_bytes)
    declared = modes.registry().get(mode)
    return "none" if declared is not None and declared.polled else policy
