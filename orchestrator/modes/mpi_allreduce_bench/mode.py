"""MPI all-reduce micro-benchmark (``mpi-allreduce-bench``): latency and bandwidth of a
partition as the MPI modes meet them.

The twin of ``allreduce-bench`` through Open MPI (mpi4py's ``Allreduce``) instead of
torch.distributed: the same sizes, repeats and logged fields, so netbench.fit_run fits either.
The MPI modes (``mpi=True``: mpi-ssgd, horovod, chainermn, cntk) communicate through MPI, whose
all-reduce on the same link can be much slower than Gloo's ring; the pre-flight measures this
one for them (modes.network_benchmark(mpi=True)).
"""

from ..allreduce_bench.mode import MODE as GLOO_BENCH
from ..base import Mode

# allreduce-bench's own option objects (listed once, as shared, in the modes reference): the
# two benchmarks measure the same sizes the same way, each through its own library.
SHARED = tuple(o for o in GLOO_BENCH.options if o.name in ("sizes", "reps"))

MODE = Mode(
    name="mpi-allreduce-bench",
    framework="torch-mpi",
    description="MPI all-reduce micro-benchmark: seconds per MPI_Allreduce over message sizes "
    "(mpi4py, Open MPI); fits latency α and bandwidth B for the MPI modes",
    library="torch",
    # srun (PMIx) or mpirun, as mpi-ssgd: orch's local launcher starts no MPI job.
    launchers=("srun", "mpirun"),
    mpi=True,
    python_modules=("mpi4py", "numpy"),
    trains=False,  # measures the network: no samples, no speedup
    options=SHARED,
)
