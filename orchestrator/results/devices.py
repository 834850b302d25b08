"""Per-run device columns of the result set: what the devices did in the measured window
(the ranks' footers' ``device_metrics``, rankside.sampler) and where each rank was bound
(the headers' ``binding``); and the device samples over time (``results/devices.parquet``, a
file per run, :func:`sample_table`), which the report draws.

Every column is declared once, in :data:`COLUMNS`: its name, how the ranks' values make the
run's, the footer or header key it reads, and what it means. Ranks that share a device (two
ranks on one GPU, every rank of a host on its RAPL package counters) are one device here: a
device is (node, ``device_id``), read from its lowest task, so its energy is counted once.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import NamedTuple

import pyarrow as pa

from .. import protocol
from ..rankside import energy


class Column(NamedTuple):
    name: str
    how: str  # a key of COMBINE
    key: str  # the footer's device_metrics key, or the header's binding key
    means: str


COLUMNS = (
    Column("device_source", "distinct", "source",
           "where the samples came from: nvml (a GPU), rapl (CPU package counters), or null"),
    Column("gpu_util_mean", "device_mean", "gpu_util_mean",
           "GPU utilisation % (NVML), mean over the window and the run's devices"),
    Column("gpu_mem_util_mean", "device_mean", "mem_util_mean",
           "GPU memory-controller utilisation %, mean over the window and devices"),
    Column("cpu_util_mean", "rank_mean", "cpu_util_mean",
           "% of its CPUs (affinity) a rank's process kept busy, mean over ranks"),
    Column("sm_clock_mean_mhz", "device_mean", "sm_clock_mean_mhz",
           "SM clock MHz, mean over the window and devices"),
    Column("power_mean_w", "device_mean", "power_mean_w",
           "power draw W of one device, mean over the window and the run's devices"),
    Column("power_max_w", "device_max", "power_max_w", "highest power draw W of any device"),
    Column("temp_max_c", "device_max", "temp_max_c", "highest GPU temperature °C"),
    Column("energy_j", "device_sum", "energy_j",
           "J the run's devices used in the measured window (each device once); null unless "
           "every sampled rank's device has it"),
    Column("energy_basis", "distinct", "energy_basis",
           "counter (the energy counter's difference at the window's edges) or integrated "
           "power (trapezoids clipped at the edges)"),
    Column("energy_reason", "distinct", "energy_reason",
           "why energy_j is null though the device was read: a window shorter than the "
           "sampling interval (fewer than 2 samples inside it: raise --iters), per reason"),
    Column("throttle_reasons", "union", "throttle_reasons",
           "clock event (throttle) reasons NVML reported in the window, comma-separated"),
    Column("device_samples", "rank_sum", "samples", "device samples the ranks took"),
    Column("device_metrics_reason", "distinct", "reason",
           "why a device metric is missing (no NVML, no RAPL, ...), per distinct reason"),
    Column("cpu_affinity", "per_rank", "cpu_affinity",
           "each rank's CPU affinity: task:cpulist, space-separated"),
    Column("numa_nodes", "binding_union", "numa_nodes", "NUMA nodes of the ranks' CPUs"),
    Column("cuda_visible_devices", "per_rank", "cuda_visible_devices",
           "each rank's CUDA_VISIBLE_DEVICES: task:value, space-separated"),
    Column("gpu_pci_bus_ids", "binding_union", "gpu_pci_bus_id",
           "PCI bus ids of the GPUs the ranks used"),
    Column("gpu_indices", "per_rank", "gpu_index",
           "each rank's GPU (NVML's index): task:index, space-separated; null without GPUs"),
    Column("gpu_reason", "binding_union", "gpu_reason",
           "why ranks had no GPU (no NVML, none visible), per distinct reason"),
)
# Derived from the columns above and the ranks' window samples.
ENERGY_PER_SAMPLE = Column(
    "energy_per_sample_j", "derived", "window_samples",
    "energy_j over the training samples of the ranks' measured windows (J per sample)")
# Power still rising over the measured window (a GPU settling from idle: the recorded H200
# windows of 20 steps rose from 150-220 W at their first sample to 400-550 W at their last)
# makes its energy no steady state's. The test, over each device's power samples inside the
# window in time order: the mean of the last quarter of them (at least one) over the mean of the
# first quarter, minus 1; more than POWER_RISE on any device flags the run. A steady GPU's power
# moves a few % from sample to sample; 10 % is past that.
POWER_RISE = 0.10
POWER_RISE_COLUMN = Column(
    "power_rise", "derived", "power_w",
    "how much the power rose over the measured window: mean power of its last quarter of "
    "samples over its first quarter's, minus 1, the largest over the run's devices; null with "
    "fewer than 2 power samples in the window")
POWER_RISING = Column(
    "power_rising", "derived", "power_w",
    f"power_rise above {POWER_RISE:.0%}: the power was still rising, so energy_j and "
    "energy_per_sample_j are not steady-state figures (a longer warm-up or window is)")
RUN_COLUMNS = (*(c.name for c in COLUMNS), ENERGY_PER_SAMPLE.name, POWER_RISE_COLUMN.name,
               POWER_RISING.name)


def _present(values: list) -> list:
    return [v for v in values if v is not None]


def _mean(values: list) -> float | None:
    values = _present(values)
    return sum(values) / len(values) if values else None


def _sum_all(values: list) -> float | None:
    """The sum, or None if any value is missing (a partial energy would mislead)."""
    return sum(values) if values and all(v is not None for v in values) else None


def _join(values) -> str | None:
    values = sorted({str(v) for v in values if v is not None and v != ""})
    return ",".join(values) if values else None


def _union(lists: list) -> str | None:
    return _join(x for values in lists if values for x in values)


COMBINE = {
    "device_mean": lambda devices, ranks, key: _mean([d.get(key) for d in devices]),
    "device_max": lambda devices, ranks, key: max(_present([d.get(key) for d in devices]),
                                                  default=None),
    "device_sum": lambda devices, ranks, key: _sum_all([d.get(key) for d in devices]),
    "rank_mean": lambda devices, ranks, key: _mean([m.get(key) for _, m, _ in ranks]),
    "rank_sum": lambda devices, ranks, key: _sum_all([m.get(key) for _, m, _ in ranks]),
    "distinct": lambda devices, ranks, key: _join(m.get(key) for _, m, _ in ranks),
    "union": lambda devices, ranks, key: _union([m.get(key) for _, m, _ in ranks]),
    "per_rank": lambda devices, ranks, key: " ".join(
        f"{task}:{chr(34) * 2 if b[key] == '' else b[key]}" for task, _, b in ranks
        if b.get(key) is not None)
    or None,  # an empty value ("": CUDA_VISIBLE_DEVICES hiding every GPU) shown as ""
    "binding_union": lambda devices, ranks, key: _union(
        [b.get(key) if isinstance(b.get(key), list) else [b.get(key)] for _, _, b in ranks]),
}


# The kind of value each device_metrics key combines as (COMBINE): numbers, lists of text, text.
NUMERIC = ("device_mean", "device_max", "device_sum", "rank_mean", "rank_sum")


def _finite(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and \
        value == value and abs(value) != float("inf")


def _typed(metrics: dict) -> dict:
    """A footer's device_metrics with every value COMBINE reads of the kind it reads it as
    (a damaged log's other values are left out: absent, not a crash)."""
    out = dict(metrics)
    for c in (*COLUMNS, ENERGY_PER_SAMPLE):
        value = out.get(c.key)
        if value is None or c.how in ("per_rank", "binding_union"):
            continue
        fits = (_finite(value) if c.how in NUMERIC or c.how == "derived"
                else isinstance(value, list) and all(isinstance(v, str) for v in value)
                if c.how == "union" else isinstance(value, str))
        if not fits:
            del out[c.key]
    return out


def held(metrics: dict) -> dict:
    """A footer's device_metrics, its energy dropped where its window was too short for one
    (energy.edge_energy's rule). Footers that record their ``window`` applied the rule
    themselves; older ones' energy spans their samples, which bracket the window, so a span
    shorter than the sampling period is such a window."""
    seconds = metrics.get("seconds")
    if "window" in metrics or metrics.get("energy_j") is None or not isinstance(
            seconds, int | float) or seconds >= energy.SAMPLE_PERIOD_S:
        return metrics
    return {**metrics, "energy_j": None, "energy_basis": None,
            "energy_reason": energy.SHORT_WINDOW}


def rank_entries(logs: list) -> list[tuple[int, dict, dict]]:
    """(task, device_metrics, binding) per rank log, by task; {} where a log has none."""
    out = []
    for log in sorted(logs, key=lambda lg: lg.rank):
        footer, header = log.footer or {}, log.header or {}
        metrics = footer.get(protocol.DEVICE_METRICS)
        binding = header.get(protocol.BINDING)
        out.append((log.rank, held(_typed(metrics)) if isinstance(metrics, dict) else {},
                    binding if isinstance(binding, dict) else {}))
    return out


def distinct_devices(logs: list) -> list[dict]:
    """The device_metrics of each distinct device (node, device_id), from its lowest task."""
    return [held(_typed(metrics)) for _, metrics in device_tasks(logs)]


def window_rise(powers: list[float]) -> float | None:
    """A window's power samples (in time order) -> the mean of their last quarter over the
    mean of their first quarter, minus 1 (:data:`POWER_RISE` says why); None with fewer than
    2 samples or no power in the first quarter."""
    if len(powers) < 2:
        return None
    quarter = max(1, len(powers) // 4)
    first = sum(powers[:quarter]) / quarter
    last = sum(powers[-quarter:]) / quarter
    return last / first - 1 if first > 0 else None


def device_tasks(logs: list) -> list[tuple[int, dict]]:
    """(task, device_metrics) of each distinct device (node, device_id): its lowest task."""
    seen: dict = {}
    for log in sorted(logs, key=lambda lg: lg.rank):
        metrics = (log.footer or {}).get(protocol.DEVICE_METRICS)
        if not isinstance(metrics, dict) or not isinstance(metrics.get("device_id"), str):
            continue
        header = log.header or {}
        seen.setdefault((header.get("node") or header.get("host"), metrics["device_id"]),
                        (log.rank, metrics))
    return list(seen.values())


def power_rise(logs: list, ranks_dir: Path) -> float | None:
    """:func:`window_rise` of each device's power samples (its device log: the sampler runs
    over the measured window only, with a sample at each edge), the largest over the run's
    devices."""
    rises = []
    for task, _ in device_tasks(logs):
        samples = read_device_log(ranks_dir / protocol.device_log_name(task))
        powers = [rec["power_w"] for rec in sorted(samples, key=lambda r: r["t"])
                  if _finite(rec.get("power_w"))]
        rise = window_rise(powers)
        if rise is not None:
            rises.append(rise)
    return max(rises) if rises else None


def run_facts(logs: list, ranks_dir: Path | None = None) -> dict:
    """Every column of :data:`RUN_COLUMNS` of one run, from its parsed rank logs (and, given
    ``ranks_dir``, the device logs beside them: :func:`power_rise`)."""
    ranks = rank_entries(logs)
    sampled = [r for r in ranks if r[1]]  # the ranks whose footer has device_metrics
    devices = distinct_devices(logs)
    out = {}
    for c in COLUMNS:  # the binding's columns read every rank, sampled or not
        binding = c.how in ("per_rank", "binding_union")
        out[c.name] = COMBINE[c.how](devices, ranks if binding else sampled, c.key)
    if any(not m.get("device_id") for _, m, _ in sampled):
        out["energy_j"] = None  # a sampled rank whose device was not read: energy partial
    samples = _sum_all([m.get(ENERGY_PER_SAMPLE.key) for _, m, _ in sampled])
    out[ENERGY_PER_SAMPLE.name] = (out["energy_j"] / samples
                                   if out["energy_j"] is not None and samples else None)
    rise = power_rise(logs, ranks_dir) if ranks_dir is not None else None
    out[POWER_RISE_COLUMN.name] = rise
    out[POWER_RISING.name] = None if rise is None else rise > POWER_RISE
    return out


# --- the samples over time: results/devices.parquet -----------------------------------------

SAMPLES_FILE = "results/devices.parquet"
# A sample's fields kept for the report's timeline (rankside.sources.NvmlSource.sample,
# RaplSource.sample, Sampler._take), besides run_id and task.
SAMPLE_FIELDS = ("t", "power_w", "sm_clock_mhz", "gpu_util", "cpu_util")
DEVICE_LOG = re.compile(r"device-(\d+)\.jsonl")  # protocol.device_log_name's


def read_device_log(path: Path) -> list[dict]:
    """The ``sample`` records of one device log; a line that does not parse is skipped (a
    rank killed mid-line loses that sample, not the others)."""
    out = []
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("type") == "sample" and isinstance(
                rec.get("t"), int | float):
            out.append(rec)
    return out


def sample_rows(run_id: str, ranks_dir: Path) -> list[dict]:
    """One row per device sample of a run's ranks (``device-<task>.jsonl``)."""
    rows = []
    for path in sorted(ranks_dir.glob("device-*.jsonl")):
        match = DEVICE_LOG.fullmatch(path.name)
        if match is None:
            continue
        task = int(match.group(1))
        for rec in read_device_log(path):
            rows.append({"run_id": run_id, "task": task,
                         **{f: _number(rec.get(f)) for f in SAMPLE_FIELDS}})
    return rows


def _number(value) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


# devices.parquet's types, declared (not inferred from the rows): a field no sample read is
# a float column of nulls in every run's file.
SAMPLE_SCHEMA = pa.schema([("run_id", pa.string()), ("task", pa.int64()),
                           *((f, pa.float64()) for f in SAMPLE_FIELDS)])


def sample_table(run_id: str, ranks_dir: Path) -> pa.Table:
    """A run's device samples (:func:`sample_rows`) as its file of ``results/devices.parquet``
    holds them; no rows where it took none."""
    return pa.Table.from_pylist(sample_rows(run_id, ranks_dir), schema=SAMPLE_SCHEMA)
