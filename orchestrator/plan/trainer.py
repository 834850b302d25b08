"""The user's own trainer: a training script orch runs as it is, its figures read from its output.

A trainer file (YAML) says what to run and where its figures are, as ReFrame's performance
functions do::

    name: hf-tiny-gpt2                  # the run's model column
    command: [python, train.py, --max-steps, "40", --batch-size, "{batch_size}"]
    tokens_per_sample: 128              # optional: tokens/s from a samples/s figure, or back
    throughput:                         # required: every line it matches is one interval
      regex: "'train_tokens_per_second': '([0-9.e+-]+)'"   # group 1, or json: KEY
      unit: tokens/s                    # samples/s (default) or tokens/s
      scope: job                        # job (the whole job's rate, read on rank 0) or rank
    loss: {regex: "'loss': '([0-9.]+)'"}  # optional, as are tokens_per_s and mfu
    mfu: {json: mfu, scale: 0.01}       # scale: a percentage printed, a share recorded

Every rank of a ``trainer`` run starts the command as torchrun would start the script: with
``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and ``MASTER_PORT`` set, in the
trainer file's directory; ``python`` is the environment's Python, and ``{batch_size}``,
``{nodes}`` and ``{ranks}`` in an argument are the run's. Each line of its output that a
metric's pattern matches (a regular expression's first group, or a key of a JSON object
printed on one line) is a figure; each throughput figure is one measured interval of the run
(the first ``--warmup`` ones are warm-up), from the previous figure (or the script's start) to
the line, holding the samples the figure says were trained in it. orch does not time the
script's phases: the report says so.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ..errors import UserError
from ..yamlconf import format_validation_error, read_yaml

SUFFIXES = (".yaml", ".yml")


def is_trainer_file(name: str) -> bool:
    return name.endswith(SUFFIXES)


class Pattern(BaseModel):
    """Where one figure is in the script's output: ``regex`` (its first group) or ``json``
    (a key of a JSON object printed alone on a line; ``a.b`` for a nested one)."""

    model_config = ConfigDict(extra="forbid")

    regex: str | None = Field(None, max_length=1000)
    json_key: str | None = Field(None, alias="json", max_length=200)
    scale: float = Field(1.0, gt=0, description="multiplies the figure (0.01: a percentage)")

    @model_validator(mode="after")
    def _one(self) -> Pattern:
        if (self.regex is None) == (self.json_key is None):
            raise ValueError("give one of regex or json")
        if self.regex is not None:
            try:
                compiled = re.compile(self.regex)
            except re.error as exc:
                raise ValueError(f"regex {self.regex!r}: {exc}") from None
            if compiled.groups < 1:
                raise ValueError(f"regex {self.regex!r} has no group: put the number in (...)")
        return self


class Throughput(Pattern):
    unit: Literal["samples/s", "tokens/s"] = "samples/s"
    scope: Literal["job", "rank"] = "job"


class TrainerSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
    command: list[str] = Field(min_length=1, max_length=256)
    tokens_per_sample: int | None = Field(None, ge=1)
    throughput: Throughput
    loss: Pattern | None = None
    tokens_per_s: Pattern | None = None
    mfu: Pattern | None = None
    # Filled in by load(): the directory the script runs in (the trainer file's).
    cwd: str = ""

    @field_validator("command")
    @classmethod
    def _args(cls, v: list[str]) -> list[str]:
        for arg in v:
            if "\0" in arg or len(arg) > 4096:
                raise ValueError("an argument holds a NUL byte or is over 4096 characters")
        return v

    @model_validator(mode="after")
    def _tokens(self) -> TrainerSpec:
        if self.throughput.unit == "tokens/s" and self.tokens_per_sample is None:
            raise ValueError("throughput in tokens/s needs tokens_per_sample (the tokens of "
                             "one sample: a sequence's length)")
        return self


def load(path: str) -> tuple[TrainerSpec, str]:
    """The validated trainer file at ``path`` and its sha256; one located line if wrong."""
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise UserError(f"--model {path}: no trainer file there")
    data, root = read_yaml(file, "trainer file", "name, command, throughput")
    try:
        spec = TrainerSpec.model_validate(data)
    except ValidationError as exc:
        raise UserError(format_validation_error(file, root, exc, TrainerSpec,
                                                "trainer file")) from None
    digest = hashlib.sha256(file.read_bytes()).hexdigest()
    return spec.model_copy(update={"cwd": str(file.parent)}), digest


def as_arg(spec: TrainerSpec) -> str:
    """The spec as the rank's ``--script`` argument (JSON; the renderer quotes it)."""
    return json.dumps(spec.model_dump(mode="json", by_alias=True), sort_keys=True,
                      separators=(",", ":"))
