"""What the all-reduce micro-benchmarks' ranks share (modes ``allreduce-bench``, torch.distributed,
and ``mpi-allreduce-bench``, mpi4py): the sizes they measure, how they time them, and the
machine a rank ran on. Each passes its own library's calls; what is timed and logged is the
same, so the two libraries' fits compare like with like.

Rank-side: imported from the staged copy by any environment's Python, so stdlib only (the zoo
is read lazily, where it is there).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from . import cores


def gradient_bytes(model: str, dataset: str) -> int | None:
    """float32 gradient bytes of a zoo model (None if unknown)."""
    try:
        from orchestrator import zoo

        return 4 * int(zoo.get(model).expected_params[dataset])
    except Exception:  # an unknown model only means one size fewer
        return None


def boot_id():
    """The kernel's boot id: equal on every "node" that is really the same machine."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            return fh.read().strip() or None
    except OSError:
        return None


def bench_sizes(args) -> tuple[list[int], int | None]:
    """(the sizes to measure, ascending: ``--sizes`` plus the model's gradient; that gradient's
    bytes or None)."""
    grad = gradient_bytes(args.model, args.dataset)
    sizes = sorted({int(x) for x in args.sizes.split(":") if x} | ({grad} if grad else set()))
    return sizes, grad


def note_machine(footer: dict, world_size: int) -> None:
    """Which physical machine this rank ran on, and its cores: nodes that share one machine
    share its cores too (the pre-flight measures that, the model uses it)."""
    footer["boot_id"] = boot_id()
    footer["host_cpus"] = os.cpu_count()
    footer["host_cores"] = cores.count().physical  # hyper-threads counted once
    footer["world_size"] = world_size


def expected_check(world_size: int, length: int = 1024) -> float:
    """The sum of the all-reduced check buffer (rank r contributes ``length`` times r + 1)."""
    return length * world_size * (world_size + 1) / 2


def timed_sizes(s, sizes: list[int], reps: int, allreduce: Callable[[int], None],
                barrier: Callable[[], None], reset: Callable[[int], None],
                sync: Callable[[], None] = lambda: None) -> Callable[[int], None]:
    """One iteration of a benchmark (for ``s.breakdown``): for each size, ascending, the ranks
    meet at ``barrier``, then ``reps`` back-to-back ``allreduce(size)``; logged to ``s`` (the
    harness's rank log) as ``t_comm`` and ``t_comm_total`` (the iteration's all-reduce time),
    ``allreduce_<bytes>`` (the mean seconds of one) and ``cpu_allreduce_<bytes>`` (the CPU this
    process spent on one: its threads' and the kernel's work for it). ``sync`` waits for a
    device's queued work (CUDA) before each clock read; ``reset(size)`` refills the buffer
    after (sums of ones never overflow)."""
    def all_sizes(_it) -> None:
        for n in sizes:
            barrier()
            sync()
            t0, cpu0 = time.perf_counter(), time.process_time()
            for _ in range(reps):
                allreduce(n)
            sync()
            elapsed = time.perf_counter() - t0
            s.add("t_comm", elapsed)
            s.add("t_comm_total", elapsed)
            s.add(f"allreduce_{n}", elapsed / reps)
            s.add(f"cpu_allreduce_{n}", (time.process_time() - cpu0) / reps)
            reset(n)
    return all_sizes
