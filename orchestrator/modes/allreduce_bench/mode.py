"""All-reduce micro-benchmark (``allreduce-bench``): latency and bandwidth of a partition.

Not a training mode: its ranks all-reduce float32 buffers of several sizes with
torch.distributed (Gloo on CPU partitions, NCCL on GPU ones) and log, per iteration, the
seconds of one all-reduce of every size. ``orch netbench`` runs it and fits the α–β model
(orchestrator/execute/netbench.py);
``orch sweep --mode allreduce-bench`` runs it at every node count
of the sweep (throughput, speedup and efficiency are empty for it: it moves no samples). The
``--model`` of such a run only adds that model's gradient size to the measured sizes.
"""

from ..base import Mode, Option
from ..torch_options import BACKEND

# 4 B .. 16 MiB in steps of 4: small sizes pin the latency α, large ones the bandwidth B.
DEFAULT_SIZES = tuple(4 ** k for k in range(1, 13))


class SizesOption(Option):
    """The ``sizes`` option: a ':'-separated list of byte counts (',' separates sweep values)."""

    numeric = False

    def check(self, mode, value):
        # Imported here, not above: ranks import this module from their staged copy of the
        # rank floor, which has no orchestrator.units; only the control plane checks options.
        from ...units import parse_sizes

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
        BACKEND,
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
        Option(
            name="compute_probe",
            choices=(),
            default="0",
            minimum=0,
            omit_default=True,  # runs from before the probe keep their ids
            help="before the all-reduces, time this many forward+backward passes of --model "
            "with 1, 2, 4, .. of the ranks computing at once (the others wait): how much a "
            "rank's compute slows when the job's other nodes compute too (nodes sharing one "
            "machine's memory and caches); 0: no probe",
        ),
    ),
)
