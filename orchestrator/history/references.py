"""``references.yaml``: what a site's benchmarks should measure, and ``orch check`` against it.

::

    site: mycluster
    partitions:
      gpu:
        - match: {mode: torch-ddp, model: resnet50, nodes: 4}
          metrics:
            samples_per_s: {value: 5200, lower: 0.05, upper: 0.30, unit: samples/s}
            t_comm: {value: 0.012, lower: 1.0, upper: 0.25, unit: s}

A metric holds when ``value * (1 - lower) <= measured <= value * (1 + upper)``: tolerances are
fractions of the value, asymmetric because a benchmark that got faster is rarely an alarm.
Metric names and units are those of :data:`.samples.METRICS`; the file is read through
:mod:`orchestrator.yamlconf`, so every error names its file and line.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, create_model

from ..yamlconf import load_model
from .samples import COMPUTE, METRICS


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Match(_Strict):
    """The runs a case applies to (a field left out matches every value)."""

    mode: str | None = None
    model: str | None = None
    nodes: int | None = Field(None, ge=1)
    tasks_per_node: int | None = Field(None, ge=1)
    batch_size: int | None = Field(None, ge=1)
    precision: str | None = None


def _reference(unit: str) -> type[BaseModel]:
    """A metric's reference: its value, tolerances and unit (which must be the metric's)."""
    return create_model(
        f"Reference_{unit.replace('/', '_per_')}", __base__=_Strict,
        value=(float, Field(gt=0, description="the expected value")),
        lower=(float, Field(ge=0, description="tolerance below value, a fraction of it")),
        upper=(float, Field(ge=0, description="tolerance above value, a fraction of it")),
        unit=(Literal[unit], Field(description=f"must be {unit}")))


# One optional field per metric: an unknown name or a wrong unit is an error at its line.
Metrics = create_model("Metrics", __base__=_Strict, **{
    m.name: (_reference(m.unit) | None, Field(None, description=m.label)) for m in METRICS})


class Case(_Strict):
    """A configuration of a partition and the references of its metrics."""

    match: Match = Field(default_factory=Match, description="the runs it applies to")
    options: dict[str, str] = Field(default_factory=dict,
                                    description="mode options the runs must have")
    metrics: Metrics


class References(_Strict):
    """A site's references.yaml."""

    site: str
    partitions: dict[str, list[Case]]


def load(path: Path) -> References:
    return load_model(path, References, "references file", "site, partitions")[0]


@dataclass(frozen=True)
class Outcome:
    """One metric of one run against its reference (``measured`` None: no measurement)."""

    run_id: str
    partition: str
    metric: str
    measured: float | None
    low: float
    high: float
    unit: str
    state: str = "COMPLETED"
    reference: float | None = None  # the value the band is around

    @property
    def change(self) -> str:
        """'-19 % from the reference 1000' (empty where not measured)."""
        if self.measured is None or not self.reference:
            return ""
        return (f"{(self.measured / self.reference - 1) * 100:+.1f} % from the reference "
                f"{self.reference:.6g}")

    @property
    def ok(self) -> bool:
        return self.measured is not None and self.low <= self.measured <= self.high

    def line(self) -> str:
        bounds = f"[{self.low:.6g}, {self.high:.6g}] {self.unit}"
        if self.measured is None:
            return (f"FAIL {self.run_id}: {self.metric}: not measured (run {self.state}); "
                    f"expected {bounds}")
        word = "ok  " if self.ok else "FAIL"
        return (f"{word} {self.run_id}: {self.metric} {self.measured:.6g} {self.unit}, {bounds}"
                f" ({self.change})")


def check(refs: References, runs: pd.DataFrame) -> tuple[list[Outcome], list[str]]:
    """Every (run, metric) a reference applies to, and the references no run of the result
    set matched (said, not failed: a sweep may cover part of a site)."""
    outcomes, unmatched = [], []
    for partition, cases in refs.partitions.items():
        for i, case in enumerate(cases):
            hit = runs[_applies(runs, refs.site, partition, case)]
            if hit.empty:
                unmatched.append(f"partitions.{partition}[{i}] ({_said(case)}): no run")
            for _, run in hit.iterrows():
                outcomes += _outcomes(run, partition, case)
    return outcomes, unmatched


def _said(case: Case) -> str:
    return ", ".join(f"{k}={v}" for k, v in {**case.match.model_dump(exclude_none=True),
                                                    **case.options}.items()) or "any"


def _applies(runs: pd.DataFrame, site: str, partition: str, case: Case) -> pd.Series:
    mask = (runs["site"] == site) & (runs["partition"] == partition)
    for name, want in case.match.model_dump(exclude_none=True).items():
        if name in runs.columns:
            mask &= runs[name].astype(str) == str(want)
    if case.options:
        mask &= runs["options"].map(lambda o: case.options.items() <= {
            k: str(v) for k, v in json.loads(o or "{}").items()}.items())
    return mask


def _outcomes(run: pd.Series, partition: str, case: Case) -> list[Outcome]:
    out = []
    for name, ref in case.metrics:
        if ref is None:
            continue
        low, high = ref.value * (1 - ref.lower), ref.value * (1 + ref.upper)
        done = run["state"] == "COMPLETED"
        out.append(Outcome(run["run_id"], partition, name, _measured(run, name) if done
                           else None, low, high, ref.unit, str(run["state"]), ref.value))
    return out


def _measured(run: pd.Series, name: str) -> float | None:
    """A run's value of a metric from the runs table (compute: forward + backward + update)."""
    parts = COMPUTE if name == "compute" else (name,)
    try:
        value = sum(float(run[p]) for p in parts)
    except (KeyError, TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def band(refs: References, key: dict, metric: str) -> tuple[float, float] | None:
    """The ``[low, high]`` a references file allows a configuration's metric (its key: site,
    partition, mode, …, options as JSON), from the first case that applies; None if none."""
    row = pd.DataFrame([key])
    for partition, cases in refs.partitions.items():
        for case in cases:
            ref = getattr(case.metrics, metric)
            if ref is not None and bool(_applies(row, refs.site, partition, case).iloc[0]):
                return ref.value * (1 - ref.lower), ref.value * (1 + ref.upper)
    return None


def junit_cases(outcomes: list[Outcome], runs: pd.DataFrame, unmatched: list[str]):
    """The JUnit test cases of a check: one per configuration and metric (failed when any of
    its runs fails, each named with its value, the band and the change from the reference),
    and a skipped case per reference no run matched."""
    from .compare import label
    from .junit import Case
    from .samples import key_columns

    keys = key_columns(runs)
    config = {r["run_id"]: label({k: r[k] for k in keys}) for _, r in runs.iterrows()}
    grouped: dict[tuple[str, str], list[Outcome]] = {}
    for o in outcomes:
        grouped.setdefault((config.get(o.run_id, o.run_id), o.metric), []).append(o)
    cases = []
    for (name, metric), found in grouped.items():
        failed = [o for o in found if not o.ok]
        detail = "\n".join(o.line() for o in found)
        message = None
        if failed:
            o = failed[0]
            value = ("not measured (run " + o.state + ")" if o.measured is None
                     else f"{o.measured:.6g} {o.unit}")
            message = (f"{metric} {value}, outside [{o.low:.6g}, {o.high:.6g}] {o.unit}"
                       + (f" ({o.change})" if o.change else "")
                       + (f"; {len(failed)} of {len(found)} runs fail" if len(found) > 1
                          else ""))
        cases.append(Case(name, metric, message, detail))
    cases += [Case("references", line.split(":")[0], skipped=line) for line in unmatched]
    return cases
