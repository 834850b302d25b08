"""Epochs and held-out accuracy shared by the non-PyTorch modes (time to accuracy): numpy only.

Python 3.6 valid (CNTK's ranks import it). What every framework's epoch code shares:

* ``read_raw``: orch's ``raw`` records (1 label byte + C*H*W uint8 pixels, channel-major) as
  float32 images normalised as ``datasets_torch.RawRecords`` does (x/255 - 0.5) / 0.25 — the
  reader of the modes whose framework owns no format here (CNTK, ChainerMN);
* ``share``: a rank's training indices for one epoch as PyTorch's ``DistributedSampler`` (and
  MXNet's ``SplitSampler`` over a shuffled index, ChainerMN's ``scatter_dataset`` with a
  shuffle order, CNTK's distributed minibatch sources) gives them: one seeded permutation per
  epoch, the same on every rank, each rank every W-th element from its own offset. A rank's
  k-th batch of B and its peers' k-th batches together are then exactly the k-th batch of W*B
  of the 1-rank run, which is what makes the sync check of the results meaningful;
* ``steps``: the same number of steps on every rank (last partial batch dropped), so no rank
  waits in a collective the others never enter;
* ``held_out``: a rank's strided share of the whole held-out split;
* ``run_epochs``: the loop that logs epoch records through the harness.
"""

import glob
import os
import time

import numpy as np

SEED = 0
SHAPES = {"cifar": ((3, 32, 32), 10), "imagenet": ((3, 224, 224), 1000)}


def read_raw(root, dataset):
    """(images float32 N x C x H x W, labels int32) of every ``shard-*.bin`` under ``root``."""
    (c, h, w), _ = SHAPES[dataset]
    paths = sorted(glob.glob(os.path.join(root, "shard-*.bin")))
    if not paths:
        raise FileNotFoundError(f"no shard-*.bin under {root}")
    records = np.concatenate([np.fromfile(p, dtype=np.uint8).reshape(-1, 1 + c * h * w)
                              for p in paths])
    x = records[:, 1:].astype(np.float32).reshape(-1, c, h, w)
    return (x / 255.0 - 0.5) / 0.25, records[:, 0].astype(np.int32)


def steps(n, world, batch):
    """Steps per epoch, the same on every rank: each rank's share of n//world, whole batches."""
    count = (n // world) // batch
    if count == 0:
        raise ValueError(f"--batch-size {batch} x {world} ranks is more than the {n} training "
                         f"images: not one step per epoch")
    return count


def share(n, world, rank, epoch, seed=SEED):
    """This rank's training indices in epoch ``epoch`` (from 1): every ``world``-th element of
    the epoch's permutation from offset ``rank``, cut to n//world."""
    order = np.random.RandomState(seed + epoch - 1).permutation(n)
    return order[:(n // world) * world][rank::world]


def held_out(n, world, rank):
    """This rank's strided share of the held-out split (the whole split over all ranks)."""
    return np.arange(rank, n, world)


def batches(indices, batch, count):
    """The first ``count`` batches of ``indices``."""
    for k in range(count):
        yield indices[k * batch:(k + 1) * batch]


def run_epochs(s, args, info, n_train, train_epoch, evaluate):
    """Train ``--epochs`` epochs (or until ``--target-accuracy``).

    ``train_epoch(epoch, steps_iter) -> (loss_sum, correct, seen)`` runs the epoch's steps,
    iterating ``steps_iter`` (``Session.epoch_steps``: each step logged as a native-window
    iteration) once per step; ``evaluate() -> held-out accuracy`` of the whole held-out split.
    """
    count = steps(n_train, info.world_size, args.batch_size)
    for epoch in range(1, args.epochs + 1):
        wall, t0 = time.time(), time.perf_counter()
        loss_sum, correct, seen = train_epoch(epoch, s.epoch_steps(count, epoch))
        t_epoch = time.perf_counter() - t0
        t1 = time.perf_counter()
        acc = evaluate()
        t_eval = time.perf_counter() - t1
        if s.log_epoch(epoch, wall, t_epoch, t_eval, loss_sum / seen, correct / seen, acc, seen):
            break


def raw_pool(args, rank, world):
    """Runs of iterations with --data in a mode that reads ``raw`` with numpy: this rank's
    batches of the first epoch's share, read once into host memory and cycled by the caller
    (t_io is taking one, as with the synthetic pool)."""
    x, y = read_raw(args.data, args.dataset)
    mine = share(len(y), world, rank, 1)
    count = steps(len(y), world, args.batch_size)
    return [(x[idx], y[idx]) for idx in batches(mine, args.batch_size, count)]
