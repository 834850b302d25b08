"""ChainerMN (Chainer 7.8.1): a multi-node optimizer all-reduces the gradients after backward."""

from ..base import Mode, Option

MODE = Mode(
    name="chainermn",
    framework="chainer",
    description="ChainerMN multi-node optimizer: gradient all-reduce after backward over MPI "
    "(naive on CPU) or NCCL (pure_nccl on GPU), not hidden",
    library="chainer",
    launchers=("srun", "mpirun"),
    mpi=True,
    python_modules=("chainer", "chainermn", "mpi4py"),
    data_format="raw",  # orch's raw records, read with numpy (--data)
    epochs=True,
    options=(
        Option(
            name="communicator",
            choices=("pure_nccl", "naive"),
            help="ChainerMN communicator; default pure_nccl on GPU partitions (NCCL "
            "all-reduce), naive on CPU ones (MPI all-reduce per parameter)",
        ),
    ),
)
