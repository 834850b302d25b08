"""MPI all-reduce micro-benchmark rank (mode ``mpi-allreduce-bench``): seconds per
``MPI_Allreduce`` by size, through mpi4py.

As allreduce-bench's rank, through MPI instead of torch.distributed: every iteration, for each
message size (ascending), the ranks meet at ``Barrier``, then run ``--reps`` back-to-back
``COMM_WORLD.Allreduce`` (sum, in place) of a float32 numpy buffer of that size; the mean
seconds of one is logged as ``allreduce_<bytes>``, the CPU this process spent on it as
``cpu_allreduce_<bytes>``, and the iteration's all-reduce time as ``t_comm`` and
``t_comm_total``. ``samples`` is 0. The sizes are ``--sizes`` plus ``--model``'s float32
gradient. The footer carries the same keys as allreduce-bench's (``backend`` is "mpi") and as
``param_checksum`` the sum of a reduced check buffer, equal on every rank only if MPI summed.
"""

from __future__ import annotations

from orchestrator.rankside import harness
from orchestrator.rankside.allreduce import (
    bench_sizes,
    expected_check,
    note_machine,
    timed_sizes,
)

from .mode import MODE


def main(argv=None) -> None:
    args = harness.mode_parser(MODE).parse_args(argv)
    with harness.rank_log(args, framework="torch-mpi", mode="mpi-allreduce-bench") as s:
        import mpi4py
        import numpy as np
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        info = s.info
        if comm.Get_rank() != info.rank or comm.Get_size() != info.world_size:
            raise RuntimeError(f"MPI says rank {comm.Get_rank()} of {comm.Get_size()}, the "
                               f"launcher rank {info.rank} of {info.world_size}")
        s.samples = 0  # an all-reduce trains no samples: no throughput for this mode
        sizes, grad = bench_sizes(args)
        library = MPI.Get_library_version().split(",")[0].strip("\x00 \n")  # "Open MPI v4.1.4"
        s.footer["versions"] = harness.versions(mpi4py=mpi4py.__version__, numpy=np.__version__,
                                                mpi=library)
        s.footer["sizes"] = sizes
        s.footer["grad_bytes"] = grad
        s.footer["reps"] = args.reps
        s.footer["backend"] = "mpi"
        note_machine(s.footer, info.world_size)
        buffers = {n: np.ones(max(1, n // 4), dtype=np.float32) for n in sizes}

        all_sizes = timed_sizes(
            s, sizes, args.reps, barrier=comm.Barrier, reset=lambda n: buffers[n].fill(1.0),
            allreduce=lambda n: comm.Allreduce(MPI.IN_PLACE, buffers[n], op=MPI.SUM))
        s.breakdown([(None, all_sizes)])
        check = np.full(1024, float(info.rank + 1), dtype=np.float32)
        comm.Allreduce(MPI.IN_PLACE, check, op=MPI.SUM)
        expected = expected_check(info.world_size)
        total = float(check.astype(np.float64).sum())
        if total != expected:
            raise RuntimeError(f"MPI_Allreduce returned a sum of {total}, expected {expected}")
        s.footer["param_checksum"] = total
        comm.Barrier()
        # The harness ends the process with os._exit (no atexit): finalize MPI here, or mpirun
        # reports a rank that "exited without calling finalize" and fails the job.
        MPI.Finalize()


if __name__ == "__main__":
    main()
