"""Whole epochs and held-out accuracy for mxnet-kvstore (time to accuracy), over MXNet RecordIO.

Sharding as GluonCV's distributed examples do it: the KVStore's ``rank`` and ``num_workers``
pick the worker's part of the training split (``SplitSampler``), read through Gluon's
``RecordFileDataset`` and ``DataLoader``. The part is taken from one permutation per epoch,
seeded alike on every worker, every W-th index from the worker's rank (``epochs_common.share``):
GluonCV's SplitSampler takes a contiguous slice instead, but with the interleaved share the k-th
batches of W workers at batch B are the k-th batch of one worker at batch W*B, which the sync
check needs. Each step is the mode's own: ``trainer.step`` (update=server) or
``allreduce_grads`` + ``update`` (update=worker), gradients rescaled by the global batch.

Held-out accuracy. With ``update=worker`` the servers only sum what is pushed: each worker
evaluates its strided share and the correct counts are summed through the KVStore (push/pull of
one extra key). With ``update=server`` the servers apply the optimizer to every key pushed, so
nothing can be summed through them: each worker evaluates the whole held-out split on its own
parameters — the same figure on every worker under dist_sync, and under dist_async each
worker's own model, which is what an asynchronous run should report.
"""

from __future__ import annotations

from orchestrator.rankside.common import epochs as epochs_common

COUNTS_KEY = 1 << 20  # a KVStore key no parameter uses (Gluon numbers them from 0)


def _records(mx, gluon, root: str, shape):
    """(Gluon dataset of decoded records of one split, their number)."""
    import numpy as np

    def decode(record):
        header, image = mx.recordio.unpack(record)
        x = np.frombuffer(image, dtype=np.uint8).reshape(shape).astype(np.float32)
        return (x / 255.0 - 0.5) / 0.25, np.float32(header.label)

    records = gluon.data.RecordFileDataset(f"{root}/data.rec")
    return records.transform(decode), len(records)


def train(s, args, info, mx, net, trainer, kv, ctx, on_server: bool, loss_fn) -> None:
    """``--epochs`` epochs of this worker's share, the held-out accuracy after each."""
    from mxnet import autograd, gluon

    from orchestrator.rankside.mxnet import models as models_mxnet

    shape = models_mxnet.input_shape(args.dataset)
    train_set, n = _records(mx, gluon, args.data, shape)
    test_set, n_test = _records(mx, gluon, f"{args.data}/test", shape)
    world, rank, batch = kv.num_workers, kv.rank, args.batch_size
    count = epochs_common.steps(n, world, batch)

    class Share(gluon.data.Sampler):
        def __init__(self, indices):
            self.indices = indices

        def __iter__(self):
            return iter(self.indices.tolist())

        def __len__(self):
            return len(self.indices)

    def train_epoch(epoch, steps_iter):
        share = epochs_common.share(n, world, rank, epoch)[:count * batch]
        loader = gluon.data.DataLoader(train_set, batch_size=batch, sampler=Share(share),
                                       last_batch="discard")
        batches = iter(loader)
        loss_sum, correct, seen = 0.0, 0, 0
        for _ in steps_iter:
            x, y = next(batches)
            x, y = x.as_in_context(ctx), y.as_in_context(ctx)
            with autograd.record():
                out = net(x)
                loss = loss_fn(out, y)
            loss.backward()
            if on_server:
                trainer.step(1)
            else:
                trainer.allreduce_grads()
                trainer.update(1)
            loss_sum += float(loss.sum().asscalar())
            correct += int((out.argmax(axis=1) == y).sum().asscalar())
            seen += batch
        return loss_sum, correct, seen

    if not on_server:
        kv.init(COUNTS_KEY, mx.nd.zeros(2))
    mine = (epochs_common.held_out(n_test, world, rank) if not on_server
            else epochs_common.held_out(n_test, 1, 0))

    def evaluate():
        counts = mx.nd.zeros(2)
        loader = gluon.data.DataLoader(test_set, batch_size=256, sampler=Share(mine))
        for x, y in loader:
            pred = net(x.as_in_context(ctx)).argmax(axis=1)
            counts += mx.nd.array([(pred == y.as_in_context(ctx)).sum().asscalar(), len(y)])
        if not on_server:
            kv.push(COUNTS_KEY, counts)
            kv.pull(COUNTS_KEY, out=counts)
        right, total = (float(v) for v in counts.asnumpy())
        return right / total if total else 0.0

    epochs_common.run_epochs(s, args, _World(rank, world), n, train_epoch, evaluate)


class _World:
    """The KVStore's view of the workers, for ``run_epochs``."""

    def __init__(self, rank: int, world: int) -> None:
        self.rank, self.world_size = rank, world
