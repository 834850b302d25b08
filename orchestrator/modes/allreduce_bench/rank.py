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

``--compute-probe N`` (0: off): before the all-reduces, the seconds of one forward+backward
of ``--model`` at ``--batch-size`` on random inputs, with the first k ranks computing at once
and the others waiting at a barrier, for k = 1, 2, 4, .. and the world size (up the counts,
then down again), each the mean of 2N passes (footer ``compute_probe``: {k: seconds}, this
rank's; ``compute_probe_cpu``: the CPU seconds this process spent on them). Nodes that share
one machine share its memory, caches and the CPU time its kernel takes even when each has a
CPU share of its own: how much a rank's compute slows as more of them compute is what the
pre-flight reads from it.
"""

from __future__ import annotations

import time
from datetime import timedelta

from orchestrator.rankside import harness
from orchestrator.rankside.allreduce import (
    bench_sizes,
    expected_check,
    note_machine,
    timed_sizes,
)

from .mode import MODE

PROBE_WARMUP = 2  # untimed passes before the probe


def probe_counts(world: int) -> list[int]:
    """The numbers of ranks computing at once the probe times: 1, 2, 4, .. and ``world``."""
    counts, k = [], 1
    while k < world:
        counts.append(k)
        k *= 2
    return [*counts, world]


def compute_probe(args, rank: int, world: int, device, barrier) -> tuple[dict, dict] | None:
    """({k: wall seconds}, {k: CPU seconds}) of one forward+backward of this rank with k
    ranks computing at once, for the k of :func:`probe_counts` this rank took part in; None
    for a model the probe cannot run (not an image classifier of the zoo): every rank decides
    alike, before any barrier."""
    import torch

    from orchestrator import zoo
    from orchestrator.rankside.torch import models

    if not zoo.get(args.model).image_classifier:
        return None
    model = models.build(args.model, args.dataset).to(device)
    loss_fn = models.loss_for(args.model)
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch_size, *models.input_shape(args.dataset), generator=gen)
    y = torch.randint(0, models.num_classes(args.dataset), (args.batch_size,), generator=gen)
    x, y = x.to(device), y.to(device)
    counts = probe_counts(world)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()

    for _ in range(PROBE_WARMUP):  # allocations and kernel choices, every rank at once
        step()
    wall: dict[int, float] = {}
    cpu: dict[int, float] = {}
    # Up the counts, then down again: a drift over the probe (a cache warming, another
    # job starting) then weighs on every count alike.
    for k in counts + counts[::-1]:
        barrier()
        if rank < k:
            for _ in range(args.compute_probe):
                t0, c0 = time.perf_counter(), time.process_time()
                step()
                wall[k] = wall.get(k, 0.0) + time.perf_counter() - t0
                cpu[k] = cpu.get(k, 0.0) + time.process_time() - c0
        barrier()
    passes = 2 * args.compute_probe
    return ({k: t / passes for k, t in wall.items()}, {k: t / passes for k, t in cpu.items()})


def main(argv=None) -> None:
    args = harness.mode_parser(MODE).parse_args(argv)
    with harness.rank_log(args, framework="torch", mode="allreduce-bench") as s:
        import torch
        import torch.distributed as dist

        from orchestrator.rankside.torch.common import rank_device

        s.samples = 0  # an all-reduce trains no samples: no throughput for this mode
        sizes, grad = bench_sizes(args)
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
        note_machine(s.footer, info.world_size)
        if args.compute_probe > 0 and device.type == "cpu":
            probe = compute_probe(args, info.rank, info.world_size, device, dist.barrier)
            if probe is not None:
                s.footer["compute_probe"], s.footer["compute_probe_cpu"] = probe
        buffers = {n: torch.ones(max(1, n // 4), dtype=torch.float32, device=device)
                   for n in sizes}
        all_sizes = timed_sizes(
            s, sizes, args.reps, allreduce=lambda n: dist.all_reduce(buffers[n]),
            barrier=dist.barrier, reset=lambda n: buffers[n].fill_(1.0), sync=sync)
        s.breakdown([(None, all_sizes)])
        check = torch.full((1024,), float(info.rank + 1), device=device)
        dist.all_reduce(check)
        expected = expected_check(info.world_size)
        total = float(check.double().sum())
        if total != expected:
            raise RuntimeError(f"all-reduce returned a sum of {total}, expected {expected}")
        s.footer["param_checksum"] = total
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
