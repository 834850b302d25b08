"""Horovod with PyTorch: hvd.DistributedOptimizer, all-reduce in Horovod's background thread
(MPI controller), ranks started by mpirun or srun (PMIx)."""

from ..base import Mode
from ..torch_options import RUN_DIMENSIONS

MODE = Mode(
    name="horovod",
    framework="torch-mpi",
    description="PyTorch + Horovod DistributedOptimizer, tensor fusion and all-reduce over MPI",
    library="torch",
    launchers=("srun", "mpirun"),
    mpi=True,
    python_modules=("torch", "horovod"),
    data_format="raw",  # the same input pipeline as torch-ddp (--data)
    epochs=True,
    overlap="wfbp",  # tensor fusion sends gradients from a background thread during backward
    options=RUN_DIMENSIONS,
)
