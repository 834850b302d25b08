"""What the native PyTorch scripts share: the same synthetic batches as orch's ranks
(rankside.torch.common.input_batches without --data), so both sides feed identical tensors,
the rank's device as PyTorch's DDP tutorial picks it, and the timed loop around each script's
own step."""

import itertools
import os
import sys

import torch
import torch.distributed as dist

from benchmarks.native._common import Clock, report
from orchestrator.rankside.torch import common as torch_common
from orchestrator.rankside.torch import models as models_torch


def synthetic_batches(args, rank):
    """The same input as orch's ranks: four synthetic batches in host memory, cycled."""
    gen = torch.Generator().manual_seed(1000 + rank)
    shape = (args.batch_size, *models_torch.input_shape(args.dataset))
    classes = models_torch.num_classes(args.dataset)
    return itertools.cycle([(torch.randn(shape, generator=gen),
                             torch.randint(0, classes, (shape[0],), generator=gen))
                            for _ in range(4)])


def device_for_rank():
    """The tutorial's ``device_id`` from ``LOCAL_RANK``, placed by orch's own rule
    (rankside.torch.common.rank_device: GPU LOCAL_RANK modulo the node's GPUs wherever CUDA
    is, else the CPU), so twin and rank always compute on the same device."""
    return torch_common.rank_device(int(os.environ.get("LOCAL_RANK", "0")))


def plain_step(model, optimizer, loss_fn):
    """The step PyTorch's tutorials write: zero_grad, forward + loss, backward, step."""

    def step(x, y):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()

    return step


def run(mode, args, rank, step, device=None):
    """``--warmup`` + ``--iters`` calls of ``step(x, y)``, the batch moved to ``device`` (the
    CPU by default); print the task's JSON line. On a GPU the loop never waits for its
    kernels, as the tutorial's does not: the device is synchronized only where the measured
    steps begin and end, so the window holds all of their work (each step's own time is then
    only how long it took to queue)."""
    device = device or torch.device("cpu")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    batches = synthetic_batches(args, rank)
    clock = Clock(args.warmup)
    for k in range(args.warmup + args.iters):
        if k == args.warmup:
            sync()
        clock.step(k)
        x, y = next(batches)
        step(x.to(device), y.to(device))
    sync()
    report(mode, rank, args.iters * args.batch_size, clock.done(), clock.steps())


def leave():
    """End a torch.distributed script: leave the process group together, then the process
    without interpreter teardown, as orch's ranks do (harness.rank_log): with Gloo's threads
    still alive teardown can abort ("terminate called without an active exception", a native
    twin's exit status 134 after it had reported), failing a finished job."""
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)
