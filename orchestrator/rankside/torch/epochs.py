"""Whole epochs of a labelled data set and held-out accuracy, for the PyTorch modes.

Throughput alone rewards a mode that trains fast but learns badly (an asynchronous parameter
server); time to accuracy weighs both. An epoch here is what PyTorch's own recipe makes it:
a ``DistributedSampler`` gives each rank its share of the training split, reshuffled per epoch
(``set_epoch``) — in torch-ddp, mpi-ssgd, horovod and torch-fsdp alike — batches of
``--batch-size`` per rank, the last partial batch dropped. Every training step is the mode's
own step, timed by wall clock only (``Session.epoch_steps`` logs it as a native-window
iteration); after each epoch the whole held-out split is evaluated — each rank its strided
share, the correct counts summed over the ranks — so every rank records the same held-out
accuracy.

With the same seed and sampler, a synchronous run of W ranks at batch B sees, step by step, the
same samples as one rank at batch W·B (the sampler's shares interleave the same permutation),
so its loss curve must match that run's: the sync-correctness check of the results.
"""

from __future__ import annotations

import os
import time


def hits(logits, y):
    """(correct, counted) predictions of a batch: an image's label, or every target token of
    a sequence (positions marked ignored, BERT's unmasked ones, not counted)."""
    from orchestrator.rankside.torch.transformers import IGNORE

    pred = logits.argmax(dim=-1).cpu()
    counted = y != IGNORE
    return int(((pred == y) & counted).sum()), int(counted.sum())


def loaders(args, info, pin_memory: bool = False, objective: str = "classify"):
    """(training DataLoader with its DistributedSampler, this rank's held-out Subset);
    ``pin_memory``: training batches in pinned memory (a GPU run's ``pin_memory=yes``)."""
    from torch.utils.data import DataLoader, DistributedSampler, Subset

    from orchestrator.rankside.torch.datasets import records

    train = records(args.data, args.dataset, objective)
    test = records(os.path.join(args.data, "test"), args.dataset, objective)
    sampler = DistributedSampler(train, num_replicas=info.world_size, rank=info.rank,
                                 shuffle=True, seed=0, drop_last=True)
    prefetch = args.prefetch == "yes"
    dl = DataLoader(train, batch_size=args.batch_size, sampler=sampler, drop_last=True,
                    num_workers=1 if prefetch else 0, prefetch_factor=4 if prefetch else None,
                    persistent_workers=prefetch, pin_memory=pin_memory)
    if len(dl) == 0:
        raise ValueError(f"--batch-size {args.batch_size} x {info.world_size} ranks is more than "
                         f"the {len(train)} training images: not one step per epoch")
    share = Subset(test, list(range(info.rank, len(test), info.world_size)))
    return dl, share


def evaluate(model, share, device, world_size: int, batch_size: int = 256,
             reduce=None, loss_fn=None) -> tuple[float, float | None]:
    """Held-out accuracy over the whole split, and the mean held-out loss per target (with
    ``loss_fn``: a language model's, whose exponential is its perplexity): this rank's share,
    sums over ranks (``reduce(tensor) -> summed tensor``: the mode's own all-reduce;
    torch.distributed's by default).

    Every rank runs the same number of forwards (its share cut into as many batches as the
    largest share needs at ``batch_size``): a sharded model's forward (torch-fsdp) is a
    collective, and shares one image apart could otherwise differ by a batch and hang."""
    import math

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    was_training = model.training
    model.eval()
    counts = torch.zeros(3, dtype=torch.float64)  # correct, counted, loss sum
    largest = math.ceil(len(share.dataset) / world_size)
    chunks = torch.arange(len(share)).tensor_split(max(1, math.ceil(largest / batch_size)))
    with torch.no_grad():
        for x, y in DataLoader(share, batch_sampler=[c.tolist() for c in chunks]):
            logits = model(x.to(device))
            correct, counted = hits(logits, y)
            counts[0] += correct
            counts[1] += counted
            if loss_fn is not None and counted:
                counts[2] += float(loss_fn(logits, y.to(device))) * counted
    if world_size > 1 and reduce is not None:
        counts = reduce(counts)
    elif world_size > 1 and dist.is_initialized():
        dist.all_reduce(counts)
    model.train(was_training)
    if not counts[1]:
        return 0.0, None
    return float(counts[0] / counts[1]), (float(counts[2] / counts[1]) if loss_fn else None)


def train(s, args, info, step, model, device, reduce=None, dims=None, workload=None) -> None:
    """Train ``--epochs`` epochs (or until ``--target-accuracy``) with ``step(x, y) -> (loss,
    logits)``, the mode's own training step; evaluate ``model`` after each epoch (held-out
    counts summed with ``reduce``, see :func:`evaluate`). ``dims``: the run's
    :class:`~orchestrator.rankside.torch.common.Dims` pins and moves the training batches
    (a compiled step compiles in the first epoch's first steps: time to accuracy holds it)."""
    lm = workload is not None and workload.objective != "classify"
    dl, share = loaders(args, info, pin_memory=dims is not None and dims.pin,
                        objective=workload.objective if workload is not None else "classify")
    move = dims.to_device if dims is not None else (lambda x, y: (x.to(device), y.to(device)))
    steps = len(dl)
    for epoch in range(1, args.epochs + 1):
        dl.sampler.set_epoch(epoch - 1)
        batches = iter(dl)
        loss_sum, correct, seen = 0.0, 0, 0
        wall, t0 = time.time(), time.perf_counter()
        for _ in s.epoch_steps(steps, epoch):
            x, y = next(batches)
            loss, logits = step(*move(x, y))
            right, counted = hits(logits, y)
            loss_sum += float(loss) * counted
            correct += right
            seen += counted
        t_epoch = time.perf_counter() - t0
        t1 = time.perf_counter()
        acc, test_loss = evaluate(model, share, device, info.world_size, reduce=reduce,
                                  loss_fn=workload.loss_fn if lm else None)
        t_eval = time.perf_counter() - t1
        if s.log_epoch(epoch, wall, t_epoch, t_eval, loss_sum / seen, correct / seen, acc,
                       steps * args.batch_size, test_loss=test_loss):
            break

