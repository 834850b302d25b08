"""A stand-in for ``pynvml`` (nvidia-ml-py) that answers as a recorded GPU did.

NVML cannot run here (no GPU). :class:`FakeNvml` replays a recording made by
``scripts/nvml-record`` on a real GPU: ``tests/fixtures/nvml/h200.json`` is one NVIDIA H200's
(its ``source`` field says when and how). Each NVML call returns that call's recorded values in
order, one sample after another (the last one repeats); a recorded ``{"error": text}`` is raised
as :class:`NVMLError`, as pynvml raises it. ``answers`` replaces a call's recorded answers for a
test (each such test says what it stands for).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

H200 = Path(__file__).parent / "fixtures" / "nvml" / "h200.json"

# pynvml's constants that rankside.sources passes (nvml.h's values).
NVML_CLOCK_SM = 1
NVML_TEMPERATURE_GPU = 0
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1


class NVMLError(Exception):
    """pynvml.NVMLError: its str() is NVML's error text ("Not Supported", ...)."""


class FakeNvml:
    """The pynvml module's functions, answering from a recording."""

    NVMLError = NVMLError
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_PCIE_UTIL_TX_BYTES = NVML_PCIE_UTIL_TX_BYTES
    NVML_PCIE_UTIL_RX_BYTES = NVML_PCIE_UTIL_RX_BYTES

    def __init__(self, recording: Path = H200, answers: dict | None = None) -> None:
        self.recording = json.loads(Path(recording).read_text())
        self.samples = [s["calls"] for s in self.recording["samples"]]
        self.answers = dict(answers or {})
        self.cursor: dict[str, int] = {}
        self.initialised = False

    # --- replay ---------------------------------------------------------------------------

    def _next(self, name: str):
        if name in self.answers:
            values = self.answers[name]
        else:
            values = [calls[name] for calls in self.samples]
        k = self.cursor.get(name, 0)
        self.cursor[name] = k + 1
        value = values[min(k, len(values) - 1)]
        if isinstance(value, dict) and set(value) == {"error"}:
            raise NVMLError(value["error"])
        return value

    def _handle(self, handle) -> None:
        if handle != "gpu0":
            raise NVMLError("Invalid Argument")

    # --- the calls rankside.sources makes -----------------------------------------------

    def nvmlInit(self) -> None:
        self.initialised = True

    def nvmlDeviceGetCount(self) -> int:
        return self.recording["device_count"]

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        if index != self.recording["device"]["index"]:
            raise NVMLError("Invalid Argument")
        return "gpu0"

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid != self.recording["device"]["uuid"]:
            raise NVMLError("Not Found")
        return "gpu0"

    def nvmlDeviceGetIndex(self, handle) -> int:
        self._handle(handle)
        return self.recording["device"]["index"]

    def nvmlDeviceGetPciInfo(self, handle):
        self._handle(handle)
        return SimpleNamespace(busId=self.recording["device"]["pci_bus_id"])

    def nvmlDeviceGetUUID(self, handle) -> str:
        return self.recording["device"]["uuid"]

    def nvmlDeviceGetName(self, handle) -> str:
        return self.recording["device"]["name"]

    def nvmlDeviceGetUtilizationRates(self, handle):
        return SimpleNamespace(**self._next("nvmlDeviceGetUtilizationRates"))

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(**self._next("nvmlDeviceGetMemoryInfo"))

    def nvmlDeviceGetClockInfo(self, handle, clock):
        assert clock == NVML_CLOCK_SM
        return self._next("nvmlDeviceGetClockInfo/SM")

    def nvmlDeviceGetPowerUsage(self, handle) -> int:
        return self._next("nvmlDeviceGetPowerUsage")

    def nvmlDeviceGetTemperature(self, handle, sensor) -> int:
        assert sensor == NVML_TEMPERATURE_GPU
        return self._next("nvmlDeviceGetTemperature/GPU")

    def nvmlDeviceGetTotalEnergyConsumption(self, handle) -> int:
        return self._next("nvmlDeviceGetTotalEnergyConsumption")

    def nvmlDeviceGetPcieThroughput(self, handle, counter) -> int:
        return self._next("nvmlDeviceGetPcieThroughput/" + ("TX" if counter == 0 else "RX"))

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle) -> int:
        return self._next("nvmlDeviceGetCurrentClocksEventReasons")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle) -> int:
        return self._next("nvmlDeviceGetCurrentClocksThrottleReasons")

    def nvmlDeviceGetFieldValues(self, handle, field_ids):
        values = self._next("nvmlDeviceGetFieldValues/NVLINK_DATA_TX_RX")
        return [SimpleNamespace(nvmlReturn=v["nvmlReturn"],
                                value=SimpleNamespace(ullVal=v["ullVal"])) for v in values]
