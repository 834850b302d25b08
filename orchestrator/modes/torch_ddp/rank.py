"""PyTorch DDP rank: trains a zoo model on synthetic data and times each phase.

How communication is separated from backward (DDP overlaps them): a communication hook wraps
each bucket's all-reduce. A bucket's hook is called the moment its gradients are ready, so the
last hook call marks the end of backward *compute*; whatever ``loss.backward()`` still spends
after that is waiting for all-reduces that were not hidden: the exposed communication ``t_comm``.
The hook also times every bucket's all-reduce from launch to completion: ``t_comm_total``.
"""

from __future__ import annotations

import time

from orchestrator.rankside import harness
from orchestrator.rankside.torch_common import (
    init_distributed,
    input_batches,
    parameter_checksum,
)

from .mode import MODE


class BucketTimer:
    """A DDP comm hook that all-reduces (averages) a bucket and records when things happened."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.reset()

    def reset(self) -> None:
        self.last_ready = None
        self.total = 0.0
        self.buckets = 0

    def hook(self, state, bucket):  # signature required by register_comm_hook
        import torch.distributed as dist

        launched = time.perf_counter()
        self.last_ready = launched
        self.buckets += 1
        fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()

        def finished(f):
            self.total += time.perf_counter() - launched
            return f.value()[0].div_(self.world_size)

        return fut.then(finished)


def main(argv=None) -> None:
    args = harness.mode_parser(MODE).parse_args(argv)
    with harness.rank_log(args, framework="torch", mode="torch-ddp") as s:
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        from orchestrator.rankside import models_torch

        torch.manual_seed(0)  # same initial weights everywhere (DDP also broadcasts rank 0's)
        s.footer["versions"] = harness.versions(torch=torch.__version__)
        s.footer["threads"] = torch.get_num_threads()
        info = s.info
        device = init_distributed(args.backend, info)
        model = models_torch.build(args.model, args.dataset).to(device)
        ddp = DistributedDataParallel(
            model, device_ids=[info.local_rank] if device.type == "cuda" else None
        )
        timer = BucketTimer(info.world_size)
        ddp.register_comm_hook(state=None, hook=timer.hook)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
        loss_fn = torch.nn.CrossEntropyLoss()

        if args.epochs:  # time to accuracy (issue 18): whole epochs instead of --iters
            from orchestrator.rankside import epochs_torch

            def step(x, y):  # DDP's own training step
                optimizer.zero_grad(set_to_none=True)
                logits = ddp(x)
                loss = loss_fn(logits, y)
                loss.backward()
                optimizer.step()
                return loss.detach(), logits.detach()

            epochs_torch.train(s, args, info, step, model, device)
        source = input_batches(args, info, models_torch)
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

        for _ in () if args.epochs else s.iterations():
            with s.phase("t_io"):
                x, y = next(source)
            with s.phase("t_h2d"):
                x, y = x.to(device, non_blocking=False), y.to(device, non_blocking=False)
                sync()
            with s.phase("t_f"):
                loss = loss_fn(ddp(x), y)
                sync()
            timer.reset()
            start = time.perf_counter()
            loss.backward()
            sync()
            end = time.perf_counter()
            ready = timer.last_ready or end
            s.add("t_b", ready - start)
            s.add("t_comm", end - ready)
            s.add("t_comm_total", timer.total)
            with s.phase("t_u"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                sync()
        s.footer["param_checksum"] = parameter_checksum(model)
        if device.type == "cuda":  # rendered for GPU partitions; not run on this machine
            s.footer["peak_device_bytes"] = torch.cuda.max_memory_allocated(device)
        if args.trace == "yes":  # after the checksum: tracing steps no optimizer
            import os

            from orchestrator.rankside import trace_torch

            rows = trace_torch.trace(ddp, model, loss_fn, source)
            if info.rank == 0:
                trace_torch.write_csv(rows, os.path.join(args.log_dir, "trace.csv"))
        s.footer["comm_buckets"] = timer.buckets
        if not args.epochs:
            s.footer["loss"] = float(loss.detach())
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
