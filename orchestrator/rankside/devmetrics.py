"""What the device did during a rank's measured window, and where the rank was bound.

A daemon thread samples the rank's device every SAMPLE_PERIOD_S while the measured (native)
window runs, into the rank's own ``device-<task>.jsonl`` (protocol.device_log_name): the
iteration log and its timing are untouched, and the training loop does no work for it (the
thread sleeps between samples; NVML's calls release the GIL). The footer gets the aggregates
(:func:`aggregate`), the header the binding (:func:`binding`).

On a GPU the samples come from NVML (``nvidia-ml-py``, ``import pynvml``, imported lazily and
only used when importable and a GPU is visible to the rank); on a CPU host from RAPL's energy
counters (``/sys/class/powercap/intel-rapl:*``) where readable; else a sample carries only the
process's CPU use and the footer says why (``reason``).

Same rules as :mod:`orchestrator.rankside.harness`: stdlib only, valid Python 3.6 (CNTK),
annotations as strings. The pure parts (decoding, wraparound, aggregation, CPU lists) are
small functions the tests call directly.
"""

import contextlib
import json
import os
import re
import threading
import time

# At least once a second (the brief is "per second or better").
SAMPLE_PERIOD_S = 0.5
# NVML's PCIe throughput counters spend ~20 ms each inside the driver (an H200 sample took
# 49 ms, 42 of them in the two counters; scripts/gpu-check's machine.txt): off unless the rank's
# environment sets PCIE_ENV to "apart", which reads them in a thread of their own every
# PCIE_PERIOD_S, so the other readings keep their period and the step sees a quarter of the
# driver's time. What they cost a training step was not measured.
PCIE_ENV = "ORCH_NVML_PCIE"
PCIE_PERIOD_S = 2.0
PCIE_OFF = (f"PCIe throughput not sampled: each reading costs ~20 ms in the driver; "
            f"{PCIE_ENV}=apart samples it every {PCIE_PERIOD_S:g} s in a thread of its own")
# Samples held in memory (~1 KB each; ~17 min at SAMPLE_PERIOD_S): a longer window folds them
# into its aggregates as it goes (combine), so a rank's memory does not grow with its window.
MAX_KEPT = 2048
DEVICE_SCHEMA = 1
POWERCAP = "/sys/class/powercap"
NODE_SYSFS = "/sys/devices/system/node"

# NVML's clock event ("throttle") reason bits (nvml.h, nvmlClocksEventReason* /
# nvmlClocksThrottleReason*): bit -> name.
THROTTLE_BITS = (
    (0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"), (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"), (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"), (0x200, "board_limit"), (0x400, "reliability"),
)
# nvmlFieldValue ids: NVLink data throughput counters in KiB (NVML_FI_DEV_NVLINK_THROUGHPUT_*).
NVLINK_TX_FIELD, NVLINK_RX_FIELD = 138, 139
# The energy counters a sample may carry, in the order preferred, and their unit in J: NVML's
# total energy in mJ, RAPL's energy_uj in µJ. Power (W) integrated over time is the fallback.
ENERGY_COUNTERS = (("energy_mj", 1e-3), ("rapl_uj", 1e-6))
ENERGY_FIELDS = (*(key for key, _ in ENERGY_COUNTERS), "power_w")  # what energy comes from


# --- pure parts -----------------------------------------------------------------------------

def throttle_names(mask: "int | None") -> list:
    """The reason names of a clock-event bitmask; an unknown bit as its hex value."""
    if not mask:
        return []
    names, known = [], 0
    for bit, name in THROTTLE_BITS:
        known |= bit
        if mask & bit:
            names.append(name)
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            names.append(hex(bit))
            rest &= ~bit
        bit <<= 1
    return names


def counter_delta(first: int, last: int, max_range: "int | None") -> int:
    """How far a counter moved from ``first`` to ``last``, past at most one wraparound at
    ``max_range`` (RAPL's ``max_energy_range_uj``: its energy_uj starts again from 0)."""
    if last >= first or not max_range:
        return last - first
    return last + max_range - first


def cumulative(samples: list, key: str, scale: float, ranges: "dict | None" = None):
    """[(t, units moved since the first sample)] of a cumulative counter, times ``scale``
    (``key``: a number, or a dict of zones summed), each interval past at most one wraparound
    (``ranges``: a zone's wrap value); None where there is one sample, a sample lacks it or a
    counter without a wrap value went backwards (NVML's is an unsigned 64-bit count since the
    driver loaded: it only goes back when the driver reloads)."""
    if len(samples) < 2:
        return None
    out, total = [(samples[0]["t"], 0.0)], 0.0
    for i in range(1, len(samples)):  # no zip(strict=)/pairwise: Python 3.6
        va, vb = samples[i - 1].get(key), samples[i].get(key)
        if va is None or vb is None or (isinstance(va, dict) and set(va) != set(vb)):
            return None
        pairs = ([(va[z], vb[z], (ranges or {}).get(z)) for z in va] if isinstance(va, dict)
                 else [(va, vb, None)])
        for first, last, wrap in pairs:
            if last < first and not wrap:
                return None
            total += counter_delta(first, last, wrap)
        out.append((samples[i]["t"], total * scale))
    return out


def counter_total(samples: list, key: str, scale: float, ranges: "dict | None" = None):
    """How far a cumulative counter moved over the samples, times ``scale``: the last point
    of :func:`cumulative` (None where it has none)."""
    series = cumulative(samples, key, scale, ranges)
    return series[-1][1] if series is not None else None


def power_points(samples: list) -> list:
    """[(t, power_w)] of the samples that read power."""
    return [(s["t"], s["power_w"]) for s in samples if s.get("power_w") is not None]


def trapezoids(points: list) -> float:
    """The integral of the piecewise-linear series ``points`` [(t, v)] over its span."""
    return sum((points[i][0] - points[i - 1][0]) * (points[i - 1][1] + points[i][1]) / 2
               for i in range(1, len(points)))


def integrated_energy_j(samples: list) -> "float | None":
    """Power integrated over time (trapezoids between samples with ``power_w``), in J."""
    points = power_points(samples)
    return trapezoids(points) if len(points) >= 2 else None


def _mean(values: list) -> "float | None":
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _max(values: list) -> "float | None":
    values = [v for v in values if v is not None]
    return max(values) if values else None


def window_energy(samples: list, ranges: "dict | None" = None) -> tuple:
    """(joules, basis) over the samples: the energy counter's difference where every sample
    has it (NVML's mJ, RAPL's µJ), else power integrated over time, else (None, None)."""
    for key, scale in ENERGY_COUNTERS:
        joules = counter_total(samples, key, scale, ranges)
        if joules is not None:
            return joules, "counter"
    joules = integrated_energy_j(samples)
    return (joules, "integrated power") if joules is not None else (None, None)


SHORT_WINDOW = ("window shorter than the sampling interval (or holding fewer than 2 device "
                "samples): raise --iters")
# A sample this close to a window's edge was taken at it: the sampler's first sample comes
# just before the window's first iteration, its last just after the window ends.
EDGE_SLACK_S = 0.05


NO_ENERGY = "no energy: neither an energy counter nor power was read"


def value_at(points: list, t: float, hold: bool = False) -> float:
    """The piecewise-linear series ``points`` [(t, v)] at ``t``; past either end, the end
    segment's slope continued (``hold``: the end value held)."""
    if t <= points[0][0] or t >= points[-1][0]:
        i = 0 if t <= points[0][0] else len(points) - 2
        (ta, va), (tb, vb) = points[i], points[i + 1]
        if hold or tb <= ta:
            return va if i == 0 else vb
    else:
        i = next(k for k in range(len(points) - 1) if points[k + 1][0] >= t)
        (ta, va), (tb, vb) = points[i], points[i + 1]
        if tb <= ta:
            return vb
    return va + (vb - va) * (t - ta) / (tb - ta)


def clipped_integral(points: list, start: float, end: float) -> float:
    """The trapezoids of ``points`` [(t, v)] over exactly [start, end]: the edges' values
    interpolated, a value held constant past the series' ends."""
    inner = [p for p in points if start < p[0] < end]
    return trapezoids([(start, value_at(points, start, hold=True)), *inner,
                       (end, value_at(points, end, hold=True))])


def edge_energy(samples: list, start: float, end: float, ranges: "dict | None" = None,
                period: float = SAMPLE_PERIOD_S) -> tuple:
    """(joules, basis, why not) used in the window [start, end]: the energy counter's value
    interpolated at each edge between the samples just before and after it (NVML's mJ, RAPL's
    µJ; an edge past the samples continues the nearest interval's power), else power
    integrated with trapezoids clipped at the edges. (None, None, SHORT_WINDOW) where the
    window is shorter than the sampling ``period`` or fewer than 2 samples lie in it (or at
    its edges, EDGE_SLACK_S): its figure would be the sampling's, not the window's."""
    samples = sorted((s for s in samples if s.get("t") is not None), key=lambda s: s["t"])
    if not any(s.get(k) is not None for s in samples for k in ENERGY_FIELDS):
        return None, None, NO_ENERGY
    held = sum(1 for s in samples if start - EDGE_SLACK_S <= s["t"] <= end + EDGE_SLACK_S)
    if end - start < period or held < 2:
        return None, None, SHORT_WINDOW
    for key, scale in ENERGY_COUNTERS:
        series = cumulative(samples, key, scale, ranges)
        if series is not None:
            return value_at(series, end) - value_at(series, start), "counter", None
    points = power_points(samples)
    if len(points) >= 2:
        return clipped_integral(points, start, end), "integrated power", None
    return None, None, NO_ENERGY


def aggregate(samples: list, meta: dict) -> dict:
    """A rank's footer ``device_metrics`` from its samples and the sampler's ``meta`` (source,
    device, reason, RAPL ranges): means and maxima over the window, its energy and basis,
    every throttle reason seen."""
    energy, basis = window_energy(samples, meta.get("rapl_ranges"))
    seen = []
    for s in samples:
        for name in s.get("throttle_reasons") or ():
            if name not in seen:
                seen.append(name)
    col = lambda key: [s.get(key) for s in samples]  # noqa: E731 - a one-line column picker
    seconds = samples[-1]["t"] - samples[0]["t"] if len(samples) > 1 else 0.0
    out = {"schema": DEVICE_SCHEMA, "source": meta.get("source"),
           "device_id": meta.get("device_id"), "samples": len(samples), "seconds": seconds,
           "gpu_util_mean": _mean(col("gpu_util")), "mem_util_mean": _mean(col("mem_util")),
           "cpu_util_mean": _mean(col("cpu_util")),
           "sm_clock_mean_mhz": _mean(col("sm_clock_mhz")),
           "mem_used_max_bytes": _max(col("mem_used_bytes")),
           "power_mean_w": _mean(col("power_w")), "power_max_w": _max(col("power_w")),
           "temp_max_c": _max(col("temp_c")),
           "pcie_tx_mean_kb_s": _mean(col("pcie_tx_kb_s")),
           "pcie_rx_mean_kb_s": _mean(col("pcie_rx_kb_s")),
           "nvlink_tx_kib": counter_total(samples, "nvlink_tx_kib", 1.0),
           "nvlink_rx_kib": counter_total(samples, "nvlink_rx_kib", 1.0),
           "energy_j": energy, "energy_basis": basis, "throttle_reasons": seen,
           "reason": meta.get("reason")}
    if energy is None and out["reason"] is None:
        out["reason"] = NO_ENERGY
    return out


# aggregate()'s keys by how two consecutive spans' values make the whole's (combine).
MEAN_KEYS = ("gpu_util_mean", "mem_util_mean", "cpu_util_mean", "sm_clock_mean_mhz",
             "power_mean_w", "pcie_tx_mean_kb_s", "pcie_rx_mean_kb_s")
MAX_KEYS = ("mem_used_max_bytes", "power_max_w", "temp_max_c")
SUM_KEYS = ("seconds", "nvlink_tx_kib", "nvlink_rx_kib", "energy_j")


def combine(a: dict, b: dict) -> dict:
    """The aggregates of two consecutive spans, ``b`` starting at ``a``'s last sample (so
    that sample is counted once in ``samples``, and no interval of a counter is lost): means
    weighted by samples, maxima, sums (null if either is), throttle reasons of both."""
    out = dict(b)
    na, nb = a["samples"], b["samples"]
    for key in MEAN_KEYS:
        parts = [(v, n) for v, n in ((a.get(key), na), (b.get(key), nb)) if v is not None]
        out[key] = sum(v * n for v, n in parts) / sum(n for _, n in parts) if parts else None
    for key in MAX_KEYS:
        out[key] = _max([a.get(key), b.get(key)])
    for key in SUM_KEYS:
        both = (a.get(key), b.get(key))
        out[key] = None if None in both else both[0] + both[1]
    if a.get("energy_basis") != b.get("energy_basis") and out["energy_j"] is not None:
        out["energy_basis"] = "{} + {}".format(a["energy_basis"], b["energy_basis"])
    out["throttle_reasons"] = a["throttle_reasons"] + [
        r for r in b["throttle_reasons"] if r not in a["throttle_reasons"]]
    out["samples"] = na + nb - 1
    out["reason"] = b.get("reason") or a.get("reason")
    return out


def parse_cpulist(text: str) -> list:
    """``0-3,8`` (the kernel's cpulist format: sysfs CPU and NUMA lists, an affinity as the
    header records it) -> [0, 1, 2, 3, 8]; [] for an empty one (a NUMA node without CPUs);
    ValueError where it is not a cpulist."""
    text = text.strip()
    if not text:
        return []
    cpus = set()
    for part in text.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part.strip())
        if match is None:
            raise ValueError(f"not a CPU list: {text!r}")
        first = int(match.group(1))
        cpus.update(range(first, int(match.group(2) or first) + 1))
    return sorted(cpus)


def compact_cpus(cpus) -> str:
    """[0, 1, 2, 3, 8] -> ``0-3,8``."""
    out, run = [], []
    for cpu in sorted(set(cpus)):
        if run and cpu == run[-1] + 1:
            run.append(cpu)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [cpu]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(out)


def numa_nodes(cpus, root: str = NODE_SYSFS) -> "list | None":
    """The NUMA nodes whose CPUs (``node<n>/cpulist``) hold any of ``cpus``; None where the
    kernel shows no NUMA topology."""
    try:
        names = os.listdir(root)
    except OSError:
        return None
    wanted, found = set(cpus), []
    for name in names:
        if not (name.startswith("node") and name[4:].isdigit()):
            continue
        try:
            with open(os.path.join(root, name, "cpulist")) as fh:
                if wanted & set(parse_cpulist(fh.read())):
                    found.append(int(name[4:]))
        except (OSError, ValueError):
            continue
    return sorted(found) if any(n.startswith("node") for n in names) else None


def visible_gpu(env_value: "str | None", local_rank: int, count: int) -> tuple:
    """Which NVML device the rank uses: ("index", n) or ("uuid", s), or (None, reason).

    As torch_common.rank_device: the rank takes visible device ``local_rank % visible``.
    CUDA_VISIBLE_DEVICES lists indices or UUIDs; its indices are NVML's where the CUDA
    order is PCI's (CUDA_DEVICE_ORDER=PCI_BUS_ID, and on every one-GPU machine)."""
    if env_value is None:
        if count < 1:
            return None, "NVML sees no GPU"
        return "index", local_rank % count
    entries = [e.strip() for e in env_value.split(",") if e.strip()]
    # CUDA stops at the first invalid entry: "-1" or "" hides every GPU.
    usable = []
    for entry in entries:
        if entry.startswith(("GPU-", "MIG-")) or entry.isdigit():
            usable.append(entry)
        else:
            break
    if not usable:
        return None, f"CUDA_VISIBLE_DEVICES={env_value!r} hides every GPU"
    entry = usable[local_rank % len(usable)]
    return ("index", int(entry)) if entry.isdigit() else ("uuid", entry)


def cpu_util(prev: "tuple | None", now: tuple, ncpus: int) -> "float | None":
    """Percent of the rank's CPUs its process kept busy between two (wall, cpu seconds)."""
    if prev is None or now[0] <= prev[0] or ncpus < 1:
        return None
    return 100.0 * (now[1] - prev[1]) / (now[0] - prev[0]) / ncpus


# --- sources: what one sample reads ---------------------------------------------------------

class NvmlSource:
    """One GPU through NVML. A call that fails (not supported on this GPU or driver, no
    permission) is not asked again: its fields stay null and ``unread`` says why."""

    name = "nvml"

    def __init__(self, nvml, handle, pcie: bool = False) -> None:
        self.nvml = nvml
        self.handle = handle
        self.pcie = pcie  # the PCIe counters are read (apart: pcie_sample), see PCIE_ENV
        self.unread: dict = {}
        self._binding = None
        # Newer drivers name them clock *event* reasons; older bindings only have throttle.
        self._reasons = [getattr(nvml, n) for n in ("nvmlDeviceGetCurrentClocksEventReasons",
                                                    "nvmlDeviceGetCurrentClocksThrottleReasons")
                         if hasattr(nvml, n)]

    def _read(self, what: str, call):
        if what in self.unread:
            return None
        try:
            return call()
        except Exception as exc:  # pynvml.NVMLError and its per-code subclasses
            self.unread[what] = str(exc) or type(exc).__name__
            return None

    def device_id(self) -> str:
        """The device's identity on its host (ranks sharing a GPU share it): its bus id."""
        bound = self.binding()
        return "gpu:" + str(bound.get("gpu_pci_bus_id") or bound.get("gpu_uuid"))

    def binding(self) -> dict:
        if self._binding is None:
            self._binding = self._identify()
        return self._binding

    def _identify(self) -> dict:
        n, h = self.nvml, self.handle
        pci = self._read("pci_info", lambda: n.nvmlDeviceGetPciInfo(h))
        return {"gpu_index": self._read("index", lambda: n.nvmlDeviceGetIndex(h)),
                "gpu_pci_bus_id": _text(getattr(pci, "busId", None)),
                "gpu_uuid": _text(self._read("uuid", lambda: n.nvmlDeviceGetUUID(h))),
                "gpu_name": _text(self._read("name", lambda: n.nvmlDeviceGetName(h)))}

    def sample(self) -> dict:
        n, h, read = self.nvml, self.handle, self._read
        util = read("utilization", lambda: n.nvmlDeviceGetUtilizationRates(h))
        mem = read("memory", lambda: n.nvmlDeviceGetMemoryInfo(h))
        power = read("power", lambda: n.nvmlDeviceGetPowerUsage(h))  # mW
        mask = read("throttle", self._throttle)
        out = {"gpu_util": getattr(util, "gpu", None), "mem_util": getattr(util, "memory", None),
               "sm_clock_mhz": read("sm_clock", lambda: n.nvmlDeviceGetClockInfo(
                   h, n.NVML_CLOCK_SM)),
               "mem_used_bytes": getattr(mem, "used", None),
               "power_w": power / 1000.0 if power is not None else None,
               "temp_c": read("temperature", lambda: n.nvmlDeviceGetTemperature(
                   h, n.NVML_TEMPERATURE_GPU)),
               "energy_mj": read("energy", lambda: n.nvmlDeviceGetTotalEnergyConsumption(h)),
               "throttle": mask, "throttle_reasons": throttle_names(mask)}
        out.update(read("nvlink", self._nvlink) or {})
        return out

    def pcie_sample(self) -> dict:
        """The PCIe throughput counters (KB/s over NVML's last 20 ms), read apart from
        :meth:`sample` (PCIE_ENV)."""
        n, h, read = self.nvml, self.handle, self._read
        return {"pcie_tx_kb_s": read("pcie_tx", lambda: n.nvmlDeviceGetPcieThroughput(
                    h, n.NVML_PCIE_UTIL_TX_BYTES)),
                "pcie_rx_kb_s": read("pcie_rx", lambda: n.nvmlDeviceGetPcieThroughput(
                    h, n.NVML_PCIE_UTIL_RX_BYTES))}

    def _throttle(self) -> int:
        for call in self._reasons:
            try:
                return call(self.handle)
            except Exception:  # this binding or driver lacks it: the older name next
                if call is self._reasons[-1]:
                    raise
        raise RuntimeError("this pynvml has no clock reason call")

    def _nvlink(self) -> dict:
        values = self.nvml.nvmlDeviceGetFieldValues(self.handle,
                                                    [NVLINK_TX_FIELD, NVLINK_RX_FIELD])
        if any(v.nvmlReturn != 0 for v in values):
            raise RuntimeError("NVLink throughput fields not supported")
        return {"nvlink_tx_kib": values[0].value.ullVal, "nvlink_rx_kib": values[1].value.ullVal}


def _text(value) -> "str | None":
    return value.decode() if isinstance(value, bytes) else value


class RaplSource:
    """A CPU host's package energy counters (``<powercap>/intel-rapl:<n>/energy_uj``, AMD's
    too), the zones' sum; ``ranges`` their wrap values (``max_energy_range_uj``)."""

    name = "rapl"

    def __init__(self, root: str, zones: list, ranges: dict) -> None:
        self.root, self.zones, self.ranges = root, zones, ranges
        self.unread: dict = {}
        self._last = None  # (time, zones' µJ) of the last reading: power is their slope

    def device_id(self) -> str:
        return "rapl:" + ",".join(self.zones)

    def binding(self) -> dict:
        return {}

    def sample(self) -> dict:
        try:
            now = (time.time(), {z: read_int(os.path.join(self.root, z, "energy_uj"))
                                 for z in self.zones})
        except (OSError, ValueError) as exc:
            self.unread.setdefault("rapl", str(exc))
            return {"rapl_uj": None}
        power, self._last = rapl_power_w(self._last, now, self.ranges), now
        return {"rapl_uj": now[1], "power_w": power}


def rapl_power_w(prev: "tuple | None", now: tuple, ranges: dict) -> "float | None":
    """Package power (W) between two (time, {zone: µJ}) readings, across a wraparound."""
    if prev is None or now[0] <= prev[0] or set(prev[1]) != set(now[1]):
        return None
    joules = sum(counter_delta(prev[1][z], now[1][z], ranges.get(z)) for z in now[1]) * 1e-6
    return joules / (now[0] - prev[0])


def read_int(path: str) -> int:
    with open(path) as fh:
        return int(fh.read().strip())


def open_rapl(root: str = POWERCAP) -> tuple:
    """(RaplSource, None), or (None, why not): absent, no package zone, not readable."""
    if not os.path.isdir(root):
        return None, f"no RAPL: {root} absent"
    zones = sorted(n for n in os.listdir(root) if n.startswith("intel-rapl:") and n.count(":") == 1)
    if not zones:
        return None, f"no RAPL: no intel-rapl package zone in {root}"
    ranges = {}
    for zone in zones:
        try:
            read_int(os.path.join(root, zone, "energy_uj"))
            ranges[zone] = read_int(os.path.join(root, zone, "max_energy_range_uj"))
        except PermissionError:
            return None, f"no RAPL: permission denied reading {root}/{zone}/energy_uj"
        except (OSError, ValueError) as exc:
            return None, f"no RAPL: {exc}"
    return RaplSource(root, zones, ranges), None


def open_nvml(local_rank: int, env: dict, nvml=None) -> tuple:
    """(NvmlSource of the rank's GPU, None), or (None, why not)."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return None, "no NVML: pynvml (nvidia-ml-py) is not installed"
    try:
        nvml.nvmlInit()
        count = nvml.nvmlDeviceGetCount()
        kind, which = visible_gpu(env.get("CUDA_VISIBLE_DEVICES"), local_rank, count)
        if kind is None:
            return None, "no GPU: " + which
        handle = (nvml.nvmlDeviceGetHandleByIndex(which) if kind == "index"
                  else nvml.nvmlDeviceGetHandleByUUID(which))
    except Exception as exc:  # NVMLError: no driver, no library, a device it cannot open
        return None, f"no NVML: {str(exc) or type(exc).__name__}"
    return NvmlSource(nvml, handle, pcie=env.get(PCIE_ENV, "").strip().lower() == "apart"), None


# --- the probe (once per process) and the sampler -------------------------------------------

class Probe:
    """What a rank can sample and where it is bound, found once per process."""

    def __init__(self, source, reason: "str | None", binding: dict) -> None:
        self.source, self.reason, self.binding = source, reason, binding


def probe(local_rank: int, env: "dict | None" = None, nvml=None,
          powercap: str = POWERCAP, node_root: str = NODE_SYSFS) -> Probe:
    """The rank's device source (NVML where it sees a GPU, else RAPL) and its binding: the
    header's ``binding`` (CUDA_VISIBLE_DEVICES, GPU index, PCI bus id, CPU affinity as a
    cpulist, the NUMA nodes of those CPUs; without a GPU, ``gpu_reason`` says why)."""
    env = dict(os.environ if env is None else env)
    source, why_gpu = open_nvml(local_rank, env, nvml)
    reason = None
    if source is None:
        source, why_cpu = open_rapl(powercap)
        reason = None if source is not None else f"{why_gpu}; {why_cpu}"
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    bound = {"cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"), "gpu_index": None,
             "gpu_pci_bus_id": None, "gpu_uuid": None, "gpu_name": None,
             "gpu_reason": why_gpu,  # why the GPU fields are null (None: NVML named one)
             "cpu_affinity": compact_cpus(cpus) if cpus else None,
             "numa_nodes": numa_nodes(cpus, node_root) if cpus else None}
    if source is not None:
        bound.update(source.binding())
    return Probe(source, reason, bound)


_PROBE = []  # the process's Probe, once found (NVML initialised once per process)


def process_probe(local_rank: int) -> Probe:
    """:func:`probe` of this process, found on first use; never raises."""
    if not _PROBE:
        try:
            _PROBE.append(probe(local_rank))
        except Exception as exc:  # a device metric must never fail a rank
            _PROBE.append(Probe(None, f"device probe failed: {exc!r}", {}))
    return _PROBE[0]


class Sampler:
    """A daemon thread writing one sample every ``period`` s to ``path``: the first in
    :meth:`start` itself, before the window's first iteration, the last when stopped (so the
    window's edges lie between samples). Each sample: ``t`` (epoch s), ``cpu_util`` (the
    process's busy share of its CPUs) and what the source reads."""

    def __init__(self, path: str, found: Probe, period: float = SAMPLE_PERIOD_S) -> None:
        self.path, self.probe, self.period = path, found, period
        self.samples: list = []  # since the last fold (MAX_KEPT), for the footer's aggregates
        self._folded = None  # the aggregates of the samples before them
        self._stop = threading.Event()
        self._ncpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        self._cpu_prev = None
        self._fh = None
        self._thread = None
        self._pcie_thread = None
        self._write = threading.Lock()  # two threads write the device log
        self._pcie_sums = [0, 0.0, 0, 0.0]  # PCIe readings: tx count, tx sum, rx count, rx sum
        self.started = None  # the window's start: just after the first sample

    def meta(self) -> dict:
        src = self.probe.source
        return {"type": "meta", "schema": DEVICE_SCHEMA, "period_s": self.period,
                "source": src.name if src else None,
                "device_id": src.device_id() if src else None,
                "reason": self.probe.reason,
                "rapl_ranges": getattr(src, "ranges", None)}

    def start(self) -> "Sampler":
        self._fh = open(self.path, "a", buffering=1)  # noqa: SIM115 - closed by stop()
        self._fh.write(json.dumps(self.meta(), separators=(",", ":")) + "\n")
        self._take()  # here, not in the thread: a sample surely before the window starts
        self.started = time.time()
        self._thread = threading.Thread(target=self._run, name="orch-devmetrics", daemon=True)
        self._thread.start()
        if getattr(self.probe.source, "pcie", False):
            self._pcie_thread = threading.Thread(target=self._run_pcie, daemon=True,
                                                 name="orch-devmetrics-pcie")
            self._pcie_thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            self._take()

    def _run_pcie(self) -> None:
        """PCIe readings (PCIE_ENV=apart): one at once, then every PCIE_PERIOD_S, as
        ``pcie`` records of the device log; the footer gets their means."""
        while True:
            try:
                reading = self.probe.source.pcie_sample()
            except Exception as exc:  # a source that breaks mid-window: say so, go on
                reading = {"error": repr(exc)}
            for k, key in enumerate(("pcie_tx_kb_s", "pcie_rx_kb_s")):
                if isinstance(reading.get(key), (int, float)):
                    self._pcie_sums[2 * k] += 1
                    self._pcie_sums[2 * k + 1] += reading[key]
            self._line({"type": "pcie", "t": time.time(), **reading})
            if self._stop.wait(PCIE_PERIOD_S):
                return

    def _line(self, record: dict) -> None:
        with self._write, contextlib.suppress(OSError, ValueError):
            # a full disk loses samples, not the rank
            self._fh.write(json.dumps(record, separators=(",", ":")) + "\n")

    def _take(self) -> None:
        now = (time.time(), sum(os.times()[:2]))
        sample = {"type": "sample", "t": now[0],
                  "cpu_util": cpu_util(self._cpu_prev, now, self._ncpus)}
        self._cpu_prev = now
        if self.probe.source is not None:
            try:
                sample.update(self.probe.source.sample())
            except Exception as exc:  # a source that breaks mid-window: say so, go on
                sample["error"] = repr(exc)
        self.samples.append(sample)
        if len(self.samples) >= MAX_KEPT:  # fold; the last one starts the next span
            self._folded = self._aggregate()
            self.samples = self.samples[-1:]
        self._line(sample)

    def _aggregate(self) -> dict:
        """The aggregates of every sample so far: the folded ones' and those held."""
        if self._folded is not None and len(self.samples) < 2:
            return self._folded  # the one held is the folded span's last
        held = aggregate(self.samples, self.meta())
        return held if self._folded is None else combine(self._folded, held)

    def stop(self, window_samples: "int | None" = None) -> dict:
        """Stop, take the last sample, close the file; the footer's aggregates, with the
        window's edges (``window``: from :meth:`start` to this call) and its energy between
        them (:func:`edge_energy`; a window longer than MAX_KEPT samples keeps the folded
        spans' sum, its edges' share being negligible)."""
        ended = time.time()
        self._stop.set()
        self._thread.join()
        if self._pcie_thread is not None:
            self._pcie_thread.join()
        self._take()
        self._fh.close()
        out = self._aggregate()
        self._pcie_means(out)
        out["window_samples"] = window_samples
        out["window"] = [self.started, ended]
        if self._folded is None:
            energy, basis, why = edge_energy(self.samples, self.started, ended,
                                             self.meta().get("rapl_ranges"), self.period)
            out.update(energy_j=energy, energy_basis=basis, energy_reason=why)
        src = self.probe.source
        if src is not None and src.unread:
            out["unread"] = dict(src.unread)
        return out


    def _pcie_means(self, out: dict) -> None:
        """The footer's PCIe means from the readings taken apart, or why there are none."""
        src = self.probe.source
        if getattr(src, "name", None) != "nvml":
            return
        if not src.pcie:
            out["pcie_reason"] = PCIE_OFF
            return
        tx_n, tx, rx_n, rx = self._pcie_sums
        out.update(pcie_tx_mean_kb_s=tx / tx_n if tx_n else None,
                   pcie_rx_mean_kb_s=rx / rx_n if rx_n else None, pcie_samples=tx_n)


def start_sampler(log_dir: str, task: int, local_rank: int) -> "Sampler | None":
    """Sample this rank's device into its device log from now on; None if it cannot start."""
    from orchestrator import protocol

    try:
        path = os.path.join(log_dir, protocol.device_log_name(task))
        return Sampler(path, process_probe(local_rank)).start()
    except Exception:  # a device metric must never fail a rank
        return None


def stop_sampler(sampler: "Sampler | None", window_samples: int) -> "dict | None":
    """The footer's ``device_metrics`` of a started sampler; None if there is none."""
    if sampler is None:
        return None
    try:
        return sampler.stop(window_samples)
    except Exception as exc:  # a device metric must never fail a rank
        return {"schema": DEVICE_SCHEMA, "samples": 0, "reason": f"sampler failed: {exc!r}"}
