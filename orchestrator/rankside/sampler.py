"""The device sampler of a rank's measured window, and the probe that finds what it samples.

A daemon thread samples the rank's device every SAMPLE_PERIOD_S while the measured (native)
window runs, into the rank's own ``device-<task>.jsonl`` (protocol.device_log_name): the
iteration log and its timing are untouched, and the training loop does no work for it (the
thread sleeps between samples; NVML's calls release the GIL). The footer gets the aggregates
(:func:`aggregate`), the header the binding (:func:`probe`). Where no source can be read a
sample carries only the process's CPU use and the footer says why (``reason``).

Same rules as :mod:`orchestrator.rankside.harness`, which imports it: stdlib only, valid
Python 3.6 (CNTK), annotations as strings. The pure parts (aggregation, CPU use) are small
functions the tests call directly.
"""

import contextlib
import json
import os
import threading
import time

from .binding import NODE_SYSFS, compact_cpus, numa_nodes
from .energy import NO_ENERGY, SAMPLE_PERIOD_S, counter_total, edge_energy, window_energy
from .sources import PCIE_OFF, PCIE_PERIOD_S, POWERCAP, open_nvml, open_rapl

# Samples held in memory (~1 KB each; ~17 min at SAMPLE_PERIOD_S): a longer window folds them
# into its aggregates as it goes (combine), so a rank's memory does not grow with its window.
MAX_KEPT = 2048
DEVICE_SCHEMA = 1


def _mean(values: list) -> "float | None":
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _max(values: list) -> "float | None":
    values = [v for v in values if v is not None]
    return max(values) if values else None


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


def cpu_util(prev: "tuple | None", now: tuple, ncpus: int) -> "float | None":
    """Percent of the rank's CPUs its process kept busy between two (wall, cpu seconds)."""
    if prev is None or now[0] <= prev[0] or ncpus < 1:
        return None
    return 100.0 * (now[1] - prev[1]) / (now[0] - prev[0]) / ncpus



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
