"""torch-ddp, natively: the plain DDP loop of PyTorch's "Getting Started with Distributed Data
Parallel" tutorial (init_process_group from env://, DistributedDataParallel(model), then
zero_grad / forward / loss.backward() / optimizer.step()), no hooks, no timers in the loop; on a
GPU the tutorial's ``model.to(device_id)`` and ``DDP(model, device_ids=[device_id])``. The run
dimensions (precision, memory format, compile, pinned copies) as PyTorch's recipes write them
(benchmarks.native._torch.Recipe)."""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from benchmarks.native._common import parse_args
from benchmarks.native._torch import (
    DIMENSION_FLAGS,
    Recipe,
    device_for_rank,
    leave,
    loss_function,
    run,
)
from orchestrator.rankside.torch import models as models_torch


def main():
    args = parse_args(extra=(("--backend", "gloo"), *DIMENSION_FLAGS))
    torch.manual_seed(0)
    dist.init_process_group(args.backend)  # RANK, WORLD_SIZE, MASTER_* from the launch script
    rank = dist.get_rank()
    device = device_for_rank()
    recipe = Recipe(args, device)
    model = recipe.model(models_torch.build(args.model, args.dataset).to(device))
    ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    loss_fn = loss_function(args)
    step = recipe.step(recipe.compiled(ddp), optimizer, loss_fn)
    run("torch-ddp", args, rank, step, device, recipe)
    leave()


if __name__ == "__main__":
    main()
