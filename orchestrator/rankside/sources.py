"""What one device sample reads: a GPU through NVML, or a CPU host's RAPL energy counters.

On a GPU the samples come from NVML (``nvidia-ml-py``, ``import pynvml``, imported lazily and
only used when importable and a GPU is visible to the rank); on a CPU host from RAPL's energy
counters (``/sys/class/powercap/intel-rapl:*``) where readable. :func:`open_nvml` and
:func:`open_rapl` return a source or say why there is none.

Same rules as :mod:`orchestrator.rankside.harness`, which imports it: stdlib only, valid
Python 3.6 (CNTK), annotations as strings.
"""

import os
import time

from .binding import visible_gpu
from .energy import counter_delta

# NVML's PCIe throughput counters spend ~20 ms each inside the driver (an H200 sample took
# 49 ms, 42 of them in the two counters; scripts/gpu-check's machine.txt): off unless the rank's
# environment sets PCIE_ENV to "apart", which reads them in a thread of their own every
# PCIE_PERIOD_S, so the other readings keep their period and the step sees a quarter of the
# driver's time. What they cost a training step was not measured.
PCIE_ENV = "ORCH_NVML_PCIE"
PCIE_PERIOD_S = 2.0
PCIE_OFF = (f"PCIe throughput not sampled: each reading costs ~20 ms in the driver; "
            f"{PCIE_ENV}=apart samples it every {PCIE_PERIOD_S:g} s in a thread of its own")
POWERCAP = "/sys/class/powercap"

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
