"""Whole epochs and held-out accuracy for chainermn (time to accuracy), over orch's raw records.

Chainer owns no on-disk format here, so the ranks read the ``raw`` records with numpy
(``epochs_common.read_raw``). The epoch's shares come from ChainerMN's own
``scatter_dataset``: rank 0 draws the epoch's permutation and scatters it; ``scatter_dataset``
gives each rank a contiguous piece, so rank 0 lays the permutation out so that piece r is every
W-th index from offset r (``epochs_common.share``, PyTorch's DistributedSampler order). Left to
itself (one scatter of a shuffled dataset, then each rank's iterator reshuffling its own fixed
piece) a W-rank run would never see the 1-rank run's batches, and the sync check could not be
made. Each step is the mode's own (backward, then the multi-node optimizer's all-reduce and
update). Held-out: each rank its strided share, counts summed with the communicator's
``allreduce_obj``.
"""

from __future__ import annotations

from orchestrator.rankside.common import epochs as epochs_common

EVAL_BATCH = 256


def train(s, args, info, comm, model, optimizer) -> None:
    """``--epochs`` epochs of this rank's share, the held-out accuracy after each."""
    import os

    import chainer
    import chainer.functions as F
    import chainermn
    import numpy as np

    xs, ys = epochs_common.read_raw(args.data, args.dataset)
    xt, yt = epochs_common.read_raw(os.path.join(args.data, "test"), args.dataset)
    xp = model.xp
    world, rank, batch = comm.size, comm.rank, args.batch_size
    n = len(ys)

    def epoch_share(epoch):
        laid_out = None
        if rank == 0:  # piece r of the scatter = every W-th index from r
            laid_out = np.concatenate([epochs_common.share(n, world, r, epoch)
                                       for r in range(world)])
        piece = chainermn.scatter_dataset(laid_out, comm, root=0)
        return np.asarray([piece[k] for k in range(len(piece))])

    def train_epoch(epoch, steps_iter):
        mine = epoch_share(epoch)
        loss_sum, correct, seen = 0.0, 0, 0
        for k, _ in enumerate(steps_iter):
            idx = mine[k * batch:(k + 1) * batch]
            x, t = xp.asarray(xs[idx]), xp.asarray(ys[idx])
            y = model(x)
            loss = F.softmax_cross_entropy(y, t)
            model.cleargrads()
            loss.backward()
            optimizer.update()
            loss_sum += float(loss.array) * len(idx)
            correct += int((y.array.argmax(axis=1) == t).sum())
            seen += len(idx)
        return loss_sum, correct, seen

    def evaluate():
        right = 0
        mine = epochs_common.held_out(len(yt), world, rank)
        with chainer.using_config("train", False), chainer.no_backprop_mode():
            for start in range(0, len(mine), EVAL_BATCH):
                idx = mine[start:start + EVAL_BATCH]
                pred = model(xp.asarray(xt[idx])).array.argmax(axis=1)
                right += int((pred == xp.asarray(yt[idx])).sum())
        counts = comm.allreduce_obj(np.array([right, len(mine)], dtype=np.float64))
        return float(counts[0] / counts[1]) if counts[1] else 0.0

    epochs_common.run_epochs(s, args, info, n, train_epoch, evaluate)
