"""Rank-side helpers shared by the PyTorch modes (torch-ddp, torch-fsdp, mpi-ssgd, horovod):
joining the process group, the parameter checksum every synchronous mode ends with, the input
batches, and the throughput window's plain loop (issue 14: samples/s comes from the framework's
own step, the phases from a second, instrumented window)."""

from __future__ import annotations


def rank_device(local_rank: int, needs_gpu: bool = False):
    """This rank's device: a GPU wherever CUDA is present, else the CPU.

    ``needs_gpu``: the collectives reduce only CUDA tensors (NCCL): no GPU is then an error,
    not a silent CPU run. Gloo reduces host and CUDA tensors alike, so on a GPU node a Gloo run
    computes on the GPU as the same script under NCCL would, and only its collectives differ
    (``CUDA_VISIBLE_DEVICES=`` keeps a run on the CPU). Ranks share the node's GPUs
    round-robin (``local_rank % count``): two ranks on one GPU is how a one-GPU machine runs a
    two-rank Gloo job (NCCL refuses two ranks on one device, so its launch takes one rank per
    GPU)."""
    import torch

    if not torch.cuda.is_available():
        if needs_gpu:
            raise RuntimeError("backend nccl needs a GPU and torch.cuda.is_available() is False "
                               "here: use -o backend=gloo on CPU partitions")
        return torch.device("cpu")
    index = local_rank % torch.cuda.device_count()
    torch.cuda.set_device(index)
    return torch.device("cuda", index)


def init_distributed(backend: str, info):
    """Join the job's process group (env:// rendezvous from RANK/WORLD_SIZE/MASTER_*) and
    return this rank's device (:func:`rank_device`)."""
    from datetime import timedelta

    import torch.distributed as dist

    device = rank_device(info.local_rank, needs_gpu=backend == "nccl")
    dist.init_process_group(backend, rank=info.rank, world_size=info.world_size,
                            timeout=timedelta(minutes=5))
    return device


def leave_distributed() -> None:
    """Leave the process group together: a rank that destroyed its group while a peer is
    still in the last collective would fail that peer."""
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()


def note_device_memory(footer: dict, device) -> None:
    """Peak GPU memory of this rank into its footer (``peak_device_bytes``) where it computes
    on a GPU: PyTorch's allocator's peak of memory held by tensors since the process began
    (what the survey paper compares; the allocator's cache above it is not the model's)."""
    if device.type == "cuda":
        import torch

        footer["peak_device_bytes"] = int(torch.cuda.max_memory_allocated(device))


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
    surrounds it. ``step(x, y)`` returns ``(loss, logits)`` (an epoch run reads both);
    returns the last loss.

    ``sync`` (on a GPU, ``torch.cuda.synchronize``): the window is a queued one
    (harness ``drain``). PyTorch's loop never waits for its kernels, so the host queues the
    next step while the GPU still runs the last; a synchronize after every step, as here
    before, would take that overlap away and report less than the framework gets. The harness
    synchronizes at the warm-up's end, after every chunk and at the window's end instead."""
    loss = None
    for _ in s.native_iterations(drain=sync):
        x, y = next(source)
        loss, _ = step(x.to(device), y.to(device))
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
