"""All-reduce micro-benchmark rank (mode ``allreduce-bench``): seconds per all-reduce by size.

Every iteration, for each message size (ascending), the ranks meet at a barrier, then run
``--reps`` back-to-back all-reduces (sum) of a float32 buffer of that size; the mean seconds
of one all-reduce is logged as the extra iteration field ``allreduce_<bytes>``. ``t_comm``
(and ``t_comm_total``) is the iteration's all-reduce time; the barriers are the rest of
``t_iter``. ``samples`` is 0: no samples are trained, so the result set has no throughput for
this mode. The sizes are the ``--sizes`` option plus the gradient of ``--model`` (float32),
whose all-reduce a training run of that model performs every iteration.

Beside each size's seconds, the CPU this process spent on one all-reduce of it
(``cpu_allreduce_<bytes>``: its threads' user and system time, Gloo's and the kernel's TCP work
included): on CPU nodes a communication that runs behind backward takes that CPU from it.

The footer carries the sizes and the model's gradient bytes, and as ``param_checksum`` the
sum of a reduced check buffer, equal on every rank only if the all-reduce really summed.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

from orchestrator.rankside import cores, harness
from orchestrator.rankside.allreduce import boot_id, gradient_bytes

from .mode import MODE


def main(argv=None) -> None:
    args = harness.mode_parser(MODE).parse_args(argv)
    with harness.rank_log(args, framework="torch", mode="allreduce-bench") as s:
        import torch
        import torch.distributed as dist

        from orchestrator.rankside.torch.common import rank_device

        s.samples = 0  # an all-reduce trains no samples: no throughput for this mode
        grad = gradient_bytes(args.model, args.dataset)
        sizes = sorted({int(x) for x in args.sizes.split(":") if x} | ({grad} if grad else set()))
        s.footer["versions"] = harness.versions(torch=torch.__version__)
        s.footer["sizes"] = sizes
        s.footer["grad_bytes"] = grad
        s.footer["reps"] = args.reps
        info = s.info
        # The buffers live where the training modes keep their gradients: on the GPU wherever
        # CUDA is present (Gloo then reduces CUDA tensors, through host copies of its own).
        device = rank_device(info.local_rank, needs_gpu=args.backend == "nccl")
        dist.init_process_group(args.backend, rank=info.rank, world_size=info.world_size,
                                timeout=timedelta(minutes=5))

        def sync() -> None:
            if device.type == "cuda":
                torch.cuda.synchronize()
        s.footer["backend"] = args.backend
        # Which physical machine this rank ran on, and its cores: nodes that share one
        # machine share its cores too (the pre-flight measures that, the model uses it).
        s.footer["boot_id"] = boot_id()
        s.footer["host_cpus"] = os.cpu_count()
        s.footer["host_cores"] = cores.count().physical  # hyper-threads counted once
        s.footer["world_size"] = info.world_size
        buffers = {n: torch.ones(max(1, n // 4), dtype=torch.float32, device=device)
                   for n in sizes}
        def all_sizes(_it):  # every size, each timed over its repetitions
            for n in sizes:
                dist.barrier()
                sync()
                t0, cpu0 = time.perf_counter(), time.process_time()
                for _ in range(args.reps):
                    dist.all_reduce(buffers[n])
                sync()
                elapsed = time.perf_counter() - t0
                s.add("t_comm", elapsed)
                s.add("t_comm_total", elapsed)
                s.add(f"allreduce_{n}", elapsed / args.reps)
                s.add(f"cpu_allreduce_{n}", (time.process_time() - cpu0) / args.reps)
                buffers[n].fill_(1.0)  # keep values small: sums of ones never overflow

        s.breakdown([(None, all_sizes)])
        check = torch.full((1024,), float(info.rank + 1), device=device)
        dist.all_reduce(check)
        expected = 1024 * info.world_size * (info.world_size + 1) / 2
        total = float(check.double().sum())
        if total != expected:
            raise RuntimeError(f"all-reduce returned a sum of {total}, expected {expected}")
        s.footer["param_checksum"] = total
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
