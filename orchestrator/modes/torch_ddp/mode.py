"""PyTorch DistributedDataParallel: one process per rank, all-reduce over NCCL (GPU) or Gloo."""

from ..base import Mode, Option
from ..torch_options import BACKEND, COMM_DELAY, RUN_DIMENSIONS

MODE = Mode(
    name="torch-ddp",
    framework="torch",
    description="PyTorch DDP, bucketed all-reduce overlapped with backward (NCCL or Gloo)",
    library="torch",
    # mpirun too (Open MPI only starts the processes; DDP still rendezvous over env://).
    launchers=("srun", "local", "mpirun", "torchrun"),
    data_format="raw",
    epochs=True,
    # Buckets are all-reduced while backward goes on; the first bucket holds up to 1 MiB of
    # gradients, so a smaller model's gradient is one bucket sent after backward.
    overlap="wfbp",
    first_bucket_bytes=1 << 20,
    options=(
        BACKEND,
        Option(
            name="trace",
            choices=("no", "yes"),
            default="no",
            help="after the measured window, write a layer-wise trace (ranks/trace.csv)",
        ),
        *RUN_DIMENSIONS,
        COMM_DELAY,
    ),
)
