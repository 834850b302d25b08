"""Reference synchronous SGD over mpi4py: gradients all-reduced in buckets, with or without
wait-free back-propagation (each bucket sent while backward goes on)."""

from ..base import Mode, Option
from ..torch_options import RUN_DIMENSIONS

MODE = Mode(
    name="mpi-ssgd",
    framework="torch-mpi",
    description="reference S-SGD over mpi4py: bucketed gradient all-reduce after backward "
    "(overlap=none) or behind it (overlap=wfbp)",
    library="torch",
    # srun (PMIx) or mpirun on a cluster, mpirun on the local site. Not orch's local launcher:
    # its processes are not an MPI job, so each would be a world of one.
    launchers=("srun", "mpirun"),
    mpi=True,
    python_modules=("torch", "mpi4py"),
    data_format="raw",  # the same input pipeline as torch-ddp (--data)
    epochs=True,
    overlap_option="overlap",  # the run's own --option overlap=none|wfbp decides
    # Open MPI progresses a non-blocking all-reduce only inside MPI calls (no progress
    # thread): the buckets started during backward advance at the hooks' polls only.
    polled=True,
    options=(
        Option(
            name="overlap",
            choices=("none", "wfbp"),
            default="none",
            help="none: all-reduce every bucket after backward (communication fully exposed, "
            "CNTK-style); wfbp: wait-free back-propagation, each bucket's non-blocking "
            "all-reduce starts as soon as its gradients are ready",
        ),
        Option(
            name="bucket_size",
            choices=(),
            default=str(25 * 1024 * 1024),
            help="bytes of gradients merged into one all-reduce (default 25 MiB, as DDP); "
            "a parameter larger than this is a bucket of its own",
        ),
        *RUN_DIMENSIONS,
    ),
)
