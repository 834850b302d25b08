"""PyTorch DistributedDataParallel: one process per rank, all-reduce over NCCL (GPU) or Gloo."""

from . import Mode, Option

MODE = Mode(
    name="torch-ddp",
    framework="torch",
    description="PyTorch DDP, bucketed all-reduce overlapped with backward (NCCL or Gloo)",
    template="torch-ddp.sh.j2",
    workload="orchestrator.workloads.torch_ddp",
    # mpirun too (Open MPI only starts the processes; DDP still rendezvous over env://).
    launchers=("srun", "local", "mpirun"),
    data_format="raw",
    options=(
        Option(
            name="backend",
            choices=("nccl", "gloo"),
            help="collective backend; default nccl on GPU partitions, gloo on CPU ones",
        ),
        Option(
            name="trace",
            choices=("no", "yes"),
            default="no",
            help="after the measured window, write a layer-wise trace (ranks/trace.csv)",
        ),
    ),
)
