"""Rank-side helpers shared by the PyTorch modes (torch-ddp, torch-fsdp, mpi-ssgd, horovod):
joining the process group, the parameter checksum every synchronous mode ends with, the input
batches, and the throughput window's plain loop (issue 14: samples/s comes from the framework's
own step, the phases from a second, instrumented window)."""

from __future__ import annotations


def init_distributed(backend: str, info):
    """Join the job's process group (env:// rendezvous from RANK/WORLD_SIZE/MASTER_*) and
    return this rank's device: its GPU under NCCL, the CPU under Gloo."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    dist.init_process_group(backend, rank=info.rank, world_size=info.world_size,
                            timeout=timedelta(minutes=5))
    if backend == "nccl":
        torch.cuda.set_device(info.local_rank)
        return torch.device("cuda", info.local_rank)
    return torch.device("cpu")


def leave_distributed() -> None:
    """Leave the process group together: a rank that destroyed its group while a peer is
    still in the last collective would fail that peer."""
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()


def parameter_checksum(model) -> float:
    """Sum of all parameters in float64: equal on every rank iff the ranks stayed in sync."""
    import torch

    with torch.no_grad():
        return float(sum(p.detach().double().sum() for p in model.parameters()))


def input_batches(args, info, models_torch):
    """Batches from disk (--data: the framework's own loader, prefetch on or off) or, by
    default, a few synthetic batches in host memory cycled, where t_io is only taking one."""
    import itertools

    import torch

    if args.data:
        from orchestrator.rankside import datasets_torch

        dl = datasets_torch.loader(args.data, args.dataset, args.batch_size, info.rank,
                                   info.world_size, prefetch=args.prefetch == "yes")
        return datasets_torch.batches(dl)
    gen = torch.Generator().manual_seed(1000 + info.rank)
    shape = (args.batch_size, *models_torch.input_shape(args.dataset))
    classes = models_torch.num_classes(args.dataset)
    pool = [(torch.randn(shape, generator=gen),
             torch.randint(0, classes, (shape[0],), generator=gen)) for _ in range(4)]
    return itertools.cycle(pool)


def native_window(s, source, device, step, sync=None):
    """The throughput window (``window: native``) of a PyTorch mode: per iteration, take the
    next batch, move it to the device and run ``step(x, y)`` — the mode's plain training step
    as the framework's documentation writes it (forward, ``loss.backward()``,
    ``optimizer.step()``), with no hook, timer or phase inside. Only the harness' wall clock
    surrounds it (and, on a GPU, one synchronize at its end, so that the wall clock holds the
    step's kernels). ``step(x, y)`` returns ``(loss, logits)`` (an epoch run reads both);
    returns the last loss."""
    loss = None
    for _ in s.native_iterations():
        x, y = next(source)
        loss, _ = step(x.to(device), y.to(device))
        if sync is not None:
            sync()
    return loss


def plain_step(model, optimizer, loss_fn):
    """The plain loop's step: ``zero_grad``, forward + loss, ``backward``, ``step``; returns
    ``(loss, logits)``, detached (the throughput window and epoch runs step the same way)."""

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        logits = model(x)
        loss = loss_fn(logits, y)
        loss.backward()
        optimizer.step()
        return loss.detach(), logits.detach()

    return step
