"""torch-ddp, natively: the plain DDP loop of PyTorch's "Getting Started with Distributed Data
Parallel" tutorial (init_process_group from env://, DistributedDataParallel(model), then
zero_grad / forward / loss.backward() / optimizer.step()), no hooks, no timers in the loop; on a
GPU the tutorial's ``model.to(device_id)`` and ``DDP(model, device_ids=[device_id])``."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from benchmarks.native._common import parse_args
from benchmarks.native._torch import device_for_rank, leave, plain_step, run
from orchestrator.rankside.torch import models as models_torch


def main():
    args = parse_args(extra=(("--backend", "gloo"),))
    torch.manual_seed(0)
    dist.init_process_group(args.backend)  # RANK, WORLD_SIZE, MASTER_* from the launch script
    rank = dist.get_rank()
    device = device_for_rank()
    model = models_torch.build(args.model, args.dataset).to(device)
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    run("torch-ddp", args, rank, plain_step(ddp, optimizer, loss_fn), device)
    leave()


if __name__ == "__main__":
    main()
