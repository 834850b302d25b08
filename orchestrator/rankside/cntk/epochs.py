"""Whole epochs and held-out accuracy for the cntk mode (time to accuracy). Python 3.6 valid.

CNTK's image reader cannot load here (FACTS.md), so the ranks read orch's ``raw`` records with
numpy (``epochs_common.read_raw``) and feed numpy minibatches to ``train_minibatch``, each rank
its share of every epoch, as CNTK's distributed examples have each worker read its part of the
minibatches (``num_data_partitions``/``partition_index``). The share is every W-th index of one
permutation per epoch from the rank's offset (``epochs_common.share``): the k-th minibatches of
W ranks at batch B are then the k-th minibatch of one rank at batch W*B (the sync check). Each
step is the mode's own distributed learner (gradient aggregation inside
``train_minibatch``). Held-out: each rank its strided share through
``Evaluator.test_minibatch(..., distributed=True)``, which aggregates the classification error
over the workers; every rank makes the same number of calls.
"""

import math
import os

import numpy as np

from orchestrator.rankside.common import epochs as epochs_common

EVAL_BATCH = 256


def train(s, args, info, C, trainer, x, y, z, classes):
    """``--epochs`` epochs of this rank's share, the held-out accuracy after each."""
    xs, ys = epochs_common.read_raw(args.data, args.dataset)
    xt, yt = epochs_common.read_raw(os.path.join(args.data, "test"), args.dataset)
    eye = np.eye(classes, dtype=np.float32)
    world, rank, batch = info.world_size, info.rank, args.batch_size
    n = len(ys)
    count = epochs_common.steps(n, world, batch)
    errors = C.Evaluator(C.classification_error(z, y))

    def train_epoch(epoch, steps_iter):
        mine = epochs_common.share(n, world, rank, epoch)
        parts = epochs_common.batches(mine, batch, count)
        loss_sum, correct, seen = 0.0, 0, 0
        for _ in steps_iter:
            idx = next(parts)
            _, out = trainer.train_minibatch({x: xs[idx], y: eye[ys[idx]]}, outputs=[z.output])
            logits = np.asarray(out[z.output]).reshape(len(idx), -1)
            loss_sum += float(trainer.previous_minibatch_loss_average) * len(idx)
            correct += int((logits.argmax(axis=1) == ys[idx]).sum())
            seen += len(idx)
        return loss_sum, correct, seen

    # The same number of aggregating calls on every rank: K pieces of each rank's share, and
    # piece k's size summed over the ranks (known to all) weighs its aggregated error.
    shares = [epochs_common.held_out(len(yt), world, r) for r in range(world)]
    pieces = max(1, math.ceil(len(shares[0]) / EVAL_BATCH))
    split = [np.array_split(part, pieces) for part in shares]
    sizes = [sum(len(split[r][k]) for r in range(world)) for k in range(pieces)]

    def evaluate():
        wrong = 0.0
        for k in range(pieces):
            idx = split[rank][k]
            err = errors.test_minibatch({x: xt[idx], y: eye[yt[idx]]}, distributed=True)
            wrong += err * sizes[k]
        return 1.0 - wrong / len(yt)

    epochs_common.run_epochs(s, args, info, n, train_epoch, evaluate)
