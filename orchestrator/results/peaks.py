"""Peak FLOP/s of known devices, by name and precision: the denominator of MFU.

MFU (model FLOPs utilisation, as the PaLM paper and MLPerf's rules define it) is the model's
FLOPs per second of training over the device's peak for the precision the model computes in.
The peaks are the vendors' dense figures (no structured sparsity) for the tensor cores where the
precision uses them: ``fp32`` is plain FP32 (orch's fp32 turns TF32 off), ``tf32`` TF32 tensor
cores, ``bf16`` / ``fp16`` 16-bit tensor cores with FP32 accumulation. A device without a
format's tensor cores computes it as the next format it has (a V100's tf32 is fp32), and a
format it lacks is ``None`` (a V100 has no bf16).

A device is matched by the name PyTorch reports (``torch.cuda.get_device_name``), first pattern
first. A site overrides or completes the table per partition (``peak_tflops`` in the site
config: a CPU partition's, a device the table lacks); without either, MFU is null with a reason.
"""

from __future__ import annotations

import re
from typing import NamedTuple

PRECISIONS = ("fp32", "tf32", "bf16", "fp16")


class Peak(NamedTuple):
    pattern: str  # a regular expression, searched in the device's name (case ignored)
    title: str
    tflops: dict[str, float | None]  # per precision, dense; None: the device lacks it
    source: str


def _p(fp32: float, tf32: float | None, bf16: float | None, fp16: float) -> dict:
    return {"fp32": fp32, "tf32": fp32 if tf32 is None else tf32, "bf16": bf16, "fp16": fp16}


# Vendors' data sheets (dense figures; the sparse ones are twice these).
TABLE: tuple[Peak, ...] = (
    Peak(r"H100.*PCIe", "NVIDIA H100 PCIe", _p(51.2, 378.0, 756.0, 756.0),
         "NVIDIA H100 Tensor Core GPU datasheet"),
    Peak(r"H100|H200|GH200", "NVIDIA H100/H200 SXM", _p(66.9, 494.7, 989.4, 989.4),
         "NVIDIA H100 and H200 Tensor Core GPU datasheets (SXM)"),
    Peak(r"A100", "NVIDIA A100", _p(19.5, 156.0, 312.0, 312.0),
         "NVIDIA A100 Tensor Core GPU datasheet"),
    Peak(r"V100.*PCIE", "NVIDIA V100 PCIe", _p(14.0, None, None, 112.0),
         "NVIDIA V100 Tensor Core GPU datasheet"),
    Peak(r"V100", "NVIDIA V100 SXM2", _p(15.7, None, None, 125.0),
         "NVIDIA V100 Tensor Core GPU datasheet"),
    Peak(r"L40S", "NVIDIA L40S", _p(91.6, 183.0, 362.05, 362.05), "NVIDIA L40S datasheet"),
    Peak(r"\bA10\b", "NVIDIA A10", _p(31.2, 62.5, 125.0, 125.0), "NVIDIA A10 datasheet"),
    Peak(r"\bL4\b", "NVIDIA L4", _p(30.3, 60.0, 121.0, 121.0), "NVIDIA L4 datasheet"),
    Peak(r"MI300X", "AMD Instinct MI300X", _p(163.4, 653.7, 1307.4, 1307.4),
         "AMD Instinct MI300X data sheet"),
)


def lookup(device: str | None, precision: str,
           override: dict[str, float] | None = None) -> tuple[float | None, str]:
    """(peak FLOP/s per device, where it comes from) — or (None, why there is none)."""
    if override and override.get(precision) is not None:
        return float(override[precision]) * 1e12, "site config (peak_tflops)"
    if not device:
        return None, ("the peak FLOP/s of a CPU is not known to orch: set peak_tflops in the "
                      "partition of the site config")
    for peak in TABLE:
        if re.search(peak.pattern, device, re.IGNORECASE):
            value = peak.tflops.get(precision)
            if value is None:
                return None, f"{peak.title} has no {precision} tensor cores"
            return value * 1e12, f"{peak.title}, {precision} dense ({peak.source})"
    return None, (f"device '{device}' is not in orch's table of peaks: set peak_tflops in the "
                  "partition of the site config")
