"""Input for the native PyTorch scripts: the same synthetic batches as orch's ranks
(rankside.torch_common.input_batches without --data), so both sides feed identical tensors."""

import itertools

import torch

from orchestrator.rankside import models_torch


def synthetic_batches(args, rank):
    """The same input as orch's ranks: four synthetic batches in host memory, cycled."""
    gen = torch.Generator().manual_seed(1000 + rank)
    shape = (args.batch_size, *models_torch.input_shape(args.dataset))
    classes = models_torch.num_classes(args.dataset)
    return itertools.cycle([(torch.randn(shape, generator=gen),
                             torch.randint(0, classes, (shape[0],), generator=gen))
                            for _ in range(4)])
