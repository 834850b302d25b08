"""All-reduce micro-benchmark (``allreduce-bench``): latency and bandwidth of a partition.

Not a training mode: its ranks all-reduce float32 buffers of several sizes with
torch.distributed (Gloo on CPU partitions, NCCL on GPU ones) and log, per iteration, the
seconds of one all-reduce of every size. ``orch netbench`` runs it and fits the α–β model
(orchestrator/netbench.py); ``orch sweep --mode allreduce-bench`` runs it at every node count
of the sweep (throughput, speedup and efficiency are empty for it: it moves no samples). The
``--model`` of such a run only adds that model's gradient size to the measured sizes.
"""

import re

from ...errors import UserError
from ..base import Mode, Option

# 4 B .. 16 MiB in steps of 4: small sizes pin the latency α, large ones the bandwidth B.
DEFAULT_SIZES = tuple(4 ** k for k in range(1, 13))


def parse_sizes(text, what="sizes"):
    """``"4:1K:64K:1M"`` (or with commas) → bytes, sorted, distinct.

    Suffixes: K, M, G (also KiB, MiB, GiB) are powers of 1024; KB, MB, GB powers of 1000;
    a trailing B alone is bytes. Every size must be a positive multiple of 4 (float32 buffers).
    """
    items = [t.strip() for t in text.replace(",", ":").split(":") if t.strip()]
    if not items:
        raise UserError(f"{what}: expected message sizes such as 4,1K,64K,1M, got '{text}'")
    out = set()
    for item in items:
        value = parse_bytes(item, what)
        if value < 4 or value % 4:
            raise UserError(f"{what}: {item} = {value} bytes; sizes are float32 buffers: use "
                            "a positive multiple of 4 bytes")
        out.add(value)
    return tuple(sorted(out))


_BYTE_UNITS = {"": 1, "b": 1, "k": 1024, "kib": 1024, "m": 1024 ** 2, "mib": 1024 ** 2,
               "g": 1024 ** 3, "gib": 1024 ** 3, "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3}


def parse_bytes(text, what):
    """One byte count: ``4``, ``1K`` (1024), ``1KB`` (1000), ``2MiB``, ``1.5M``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?(?:[eE]\d+)?)\s*([A-Za-z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _BYTE_UNITS:
        raise UserError(f"{what}: '{text}' is not a byte count (e.g. 4, 1K, 64KiB, 1M, 1MB)")
    value = float(match.group(1)) * _BYTE_UNITS[unit]
    if value != int(value):
        raise UserError(f"{what}: '{text}' is not a whole number of bytes")
    return int(value)


class SizesOption(Option):
    """The ``sizes`` option: a ':'-separated list of byte counts (',' separates sweep values)."""

    numeric = False

    def check(self, mode, value):
        sizes = parse_sizes(value, f"mode '{mode}': sizes")
        return ":".join(str(s) for s in sizes)  # normalised: the same sizes, the same run id


MODE = Mode(
    name="allreduce-bench",
    framework="torch",
    description="all-reduce micro-benchmark: seconds per all-reduce over message sizes "
    "(torch.distributed, Gloo or NCCL); fits latency α and bandwidth B",
    library="torch",
    launchers=("srun", "local"),
    trains=False,  # measures the network: no samples, no speedup
    options=(
        Option(
            name="backend",
            choices=("nccl", "gloo"),
            help="collective backend; default nccl on GPU partitions, gloo on CPU ones",
        ),
        SizesOption(
            name="sizes",
            choices=(),
            default=":".join(str(s) for s in DEFAULT_SIZES),
            help="message sizes in bytes, ':'-separated (K/M/G = 1024^n), default 4:16:..:16M",
        ),
        Option(
            name="reps",
            choices=(),
            default="5",
            help="back-to-back all-reduces per size and iteration (their mean is logged)",
        ),
    ),
)
