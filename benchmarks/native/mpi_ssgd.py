"""mpi-ssgd, natively: synchronous SGD over mpi4py the textbook way (mpi4py's buffer
interface): after ``loss.backward()`` the gradients are packed into flat float32 buffers of at
most ``--bucket-size`` bytes (reverse parameter order, as orch's reference), each summed with
one blocking ``Allreduce(IN_PLACE)``, divided by the world size and copied back; then
``optimizer.step()``. The default ``--overlap none`` loop; no timers in it."""

import torch
from mpi4py import MPI

from benchmarks.native._common import parse_args
from benchmarks.native._torch import run
from orchestrator.rankside.torch import models as models_torch


def buckets(params, limit):
    out, current, size = [], [], 0
    for p in reversed(params):
        nbytes = p.numel() * p.element_size()
        if current and size + nbytes > limit:
            out.append(current)
            current, size = [], 0
        current.append(p)
        size += nbytes
    return out + ([current] if current else [])


def main():
    args = parse_args(extra=(("--bucket-size", str(25 * 1024 * 1024)),))
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    torch.manual_seed(0)
    model = models_torch.build(args.model, args.dataset)
    with torch.no_grad():
        for p in model.parameters():
            comm.Bcast(p.data.numpy(), root=0)
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [(g, torch.zeros(sum(p.numel() for p in g))) for g in
              buckets(params, int(args.bucket_size))]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    def step(x, y):
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        if size > 1:
            for group, flat in groups:
                torch.cat([p.grad.reshape(-1) for p in group], out=flat)
                comm.Allreduce(MPI.IN_PLACE, flat.numpy(), op=MPI.SUM)
                flat.div_(size)
                offset = 0
                for p in group:
                    p.grad.copy_(flat[offset:offset + p.numel()].view_as(p))
                    offset += p.numel()
        optimizer.step()

    run("mpi-ssgd", args, rank, step)
    comm.Barrier()
    MPI.Finalize()


if __name__ == "__main__":
    main()
