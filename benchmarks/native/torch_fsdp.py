"""torch-fsdp, natively: FSDP2 as PyTorch's FSDP2 tutorial writes it (``fully_shard`` on each
layer, then on the root model; the plain loop: zero_grad, forward, ``loss.backward()``,
``optimizer.step()``), with FSDP2's own collectives and no timers. The units sharded are the
ones orch's rank shards (each parameter-holding top-level child, and each such child of a
top-level ``nn.Sequential``), so both run the same collectives. The run dimensions as PyTorch's
recipes write them (benchmarks.native._torch.Recipe); with channels_last only the inputs are,
as FSDP2 shards contiguous parameters."""

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

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


def layers(model):
    """FSDP2's tutorial shards each layer: a transformer's blocks (torchtitan's unit; the
    embeddings, tied to the output, stay with the root), else each parameter-holding child."""
    def has_params(m):
        return any(True for _ in m.parameters())

    blocks = [c for c in model.children() if isinstance(c, nn.ModuleList)]
    if blocks:
        yield from (b for stack in blocks for b in stack)
        return
    for child in model.children():
        if isinstance(child, nn.Sequential):
            yield from (c for c in child.children() if has_params(c))
        elif has_params(child):
            yield child


def main():
    args = parse_args(extra=(("--backend", "gloo"), ("--reshard-after-forward", "yes"),
                             *DIMENSION_FLAGS))
    torch.manual_seed(0)
    dist.init_process_group(args.backend)
    rank = dist.get_rank()
    device = device_for_rank()
    recipe = Recipe(args, device)
    model = recipe.model(models_torch.build(args.model, args.dataset).to(device),
                         weights_nchw=True)
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    reshard = args.reshard_after_forward == "yes"
    for layer in list(layers(model)):
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = loss_function(args)
    step = recipe.step(recipe.compiled(model), optimizer, loss_fn)
    run("torch-fsdp", args, rank, step, device, recipe)
    leave()


if __name__ == "__main__":
    main()
