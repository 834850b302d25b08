"""Whole epochs and held-out accuracy for the TensorFlow modes (time to accuracy), over TFRecord.

tf-allreduce (MultiWorkerMirroredStrategy): what TensorFlow's multi-worker guide does with
tf.data — every worker builds the same pipeline and keeps its part with ``shard(num_workers,
index)``. The epoch's reshuffle is a full-buffer ``shuffle`` seeded by the epoch, before the
shard, so all workers shuffle alike and worker i keeps elements i, i+W, ...: the k-th global
batch of W workers at batch B is the k-th batch of one worker at batch W*B (the sync check).
Each step is forward/backward, the replica context's all-reduce (MEAN) of the gradients, and
the same momentum-SGD update as the iteration runs (``tf_common``). Held-out: each worker its
``shard`` of the held-out split, correct counts summed by an all-reduce (SUM).

tf-ps (ParameterServerStrategy): as TensorFlow's parameter-server guide writes it — the
coordinator makes per-worker datasets from one ``dataset_fn`` (the training split, reshuffled
each pass, repeated), and an epoch is a number of scheduled steps: here rounds of one step per
worker (what one chief iteration is), ``(n // W) // B`` rounds, so about n samples. Which
worker runs which step is up to the coordinator, so an epoch is sampled rather than a
partition of the split (exactly-once visitation would need the tf.data service), and each
worker's shuffle is its own: tf-ps's data order is not reproducible — it is asynchronous anyway.
Each worker applies its own gradients on the ps tasks (ResourceApplyMomentum). Held-out: the
chief evaluates the whole split on the ps-held parameters.

fp16 (``precision``): both scale the loss as the iteration runs' breakdown steps do
(:mod:`.precision`: the loss times the scale, the gradients divided back, a step with
non-finite ones skipped), by a dynamic scale that moves as Keras' LossScaleOptimizer moves
its own (halved on a skipped step, doubled after 2,000 good ones): a whole run of epochs has
no native window to set it. tf-allreduce moves it after the all-reduce, every worker alike;
tf-ps on the ps, each worker's step in turn. Each returns the scaler, whose scale the footer
records (``precision.footer_facts``).
"""

from __future__ import annotations

from orchestrator.rankside.common import epochs as epochs_common
from orchestrator.rankside.tf import common as tf_common
from orchestrator.rankside.tf import precision as mixed

EVAL_BATCH = 256


def _split(tf, root: str, shape):
    """(decoded dataset of one split's TFRecord files, number of records)."""
    ds = tf.data.TFRecordDataset(tf_common.tfrecord_files(tf, root))
    n = int(ds.reduce(tf.constant(0, tf.int64), lambda c, _: c + 1))
    return ds.map(tf_common.record_decoder(tf, shape)), n


def _counts(tf, logits, y):
    return tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, axis=1, output_type=tf.int32), y),
                                 tf.float32))


def train_allreduce(s, args, info, tf, strategy, comm, model, params, slots):
    """tf-allreduce: ``--epochs`` epochs of the training split, held-out accuracy after each;
    returns the fp16 loss scaler (None in other precisions)."""
    from orchestrator.rankside.tf import models as models_tf

    shape = models_tf.input_shape(args.dataset)
    train, n = _split(tf, args.data, shape)
    test, _ = _split(tf, f"{args.data}/test", shape)
    world, rank = info.world_size, info.rank
    steps = epochs_common.steps(n, world, args.batch_size)
    mean = tf.distribute.ReduceOp.MEAN
    scaler = mixed.loss_scaler(tf, strategy, args.precision)
    scale = mixed.loss_scale(scaler)

    @tf.function
    def compute(x, y):
        def replica(x, y):
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                loss = tf_common.loss_fn(tf, logits, y)
                scaled = mixed.scaled(scaler, loss)
            grads = mixed.unscaled(tf, scale, tape.gradient(scaled, params))
            ctx = tf.distribute.get_replica_context()
            grads = ctx.all_reduce(mean, [tf.identity(g) for g in grads], options=comm)
            return loss, _counts(tf, logits, y), grads

        return strategy.run(replica, args=(x, y))

    # the mode's own update; fp16: a step with non-finite gradients skipped, then the scale
    # moved by them (all-reduced: the same on every worker)
    update = tf_common.momentum_update(tf, params, slots, skip_not_finite=scale is not None)
    after = mixed.rescaler(tf, scaler)
    summed = tf_common.summed(tf, strategy, comm)

    def train_epoch(epoch, steps_iter):
        ds = (train.shuffle(n, seed=epochs_common.SEED + epoch - 1,
                            reshuffle_each_iteration=False)
              .shard(world, rank).batch(args.batch_size, drop_remainder=True).take(steps)
              .prefetch(2))
        batches = iter(ds)
        loss_sum, correct, seen = 0.0, 0, 0
        for _ in steps_iter:
            x, y = next(batches)
            with strategy.scope():
                loss, right, grads = compute(x, y)
                update(grads)
                if after is not None:
                    after(grads)
            loss_sum += float(loss) * args.batch_size
            correct += int(right)
            seen += args.batch_size
        return loss_sum, correct, seen

    def evaluate():
        correct, seen = 0, 0
        for x, y in test.shard(world, rank).batch(EVAL_BATCH):
            correct += int(_counts(tf, model(x, training=False), y))
            seen += len(y)
        with strategy.scope():
            counts = summed(tf.constant([correct, seen], tf.float64)).numpy()
        return float(counts[0] / counts[1]) if counts[1] else 0.0

    epochs_common.run_epochs(s, args, info, n, train_epoch, evaluate)
    return scaler


def ps_dataset_fn(tf, args, shape):
    """tf-ps with --data: the training split, reshuffled on every pass, repeated, in batches
    (each worker gets its own copy from the coordinator; its shuffle is its own)."""
    files = tf_common.tfrecord_files(tf, args.data)
    batch = args.batch_size

    def dataset_fn():
        return (tf.data.TFRecordDataset(files).map(tf_common.record_decoder(tf, shape))
                .shuffle(10_000, reshuffle_each_iteration=True).repeat()
                .batch(batch, drop_remainder=True).prefetch(2))

    return dataset_fn


def train_ps(s, args, info, tf, strategy, coordinator, model, params, slots, workers):
    """tf-ps: the chief schedules ``--epochs`` epochs of steps and evaluates after each;
    returns the fp16 loss scaler (None in other precisions)."""
    from orchestrator.rankside.tf import models as models_tf

    shape = models_tf.input_shape(args.dataset)
    _, n = _split(tf, args.data, shape)
    test, _ = _split(tf, f"{args.data}/test", shape)
    iterator = iter(coordinator.create_per_worker_dataset(ps_dataset_fn(tf, args, shape)))
    lr, momentum = tf.constant(tf_common.LEARNING_RATE), tf.constant(tf_common.MOMENTUM)
    scaler = mixed.loss_scaler(tf, strategy, args.precision)  # its variables on a ps
    scale = mixed.loss_scale(scaler)

    @tf.function
    def step(iterator):
        x, y = next(iterator)

        def replica(x, y):
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                loss = tf_common.loss_fn(tf, logits, y)
                scaled = mixed.scaled(scaler, loss)
            grads = mixed.unscaled(tf, scale, tape.gradient(scaled, params))
            step_lr, step_momentum, updates = lr, momentum, []
            if scale is not None:  # fp16: skip a non-finite step, move the scale by it
                updates += mixed.rescale(tf, scaler, mixed.all_finite(tf, grads))
                grads, step_lr, step_momentum = mixed.skip_if_not_finite(tf, grads, lr,
                                                                         momentum)
            for v, m, g in zip(params, slots, grads, strict=True):
                with tf.device(v.device):  # applied on the variable's ps
                    updates.append(tf.raw_ops.ResourceApplyMomentum(
                        var=v.handle, accum=m.handle, lr=step_lr, grad=g,
                        momentum=step_momentum))
            with tf.control_dependencies(updates):
                return tf.identity(loss), _counts(tf, logits, y)

        return strategy.run(replica, args=(x, y))

    @tf.function
    def right(x, y):
        return _counts(tf, model(x, training=False), y)

    def train_epoch(epoch, steps_iter):
        loss_sum, correct, seen = 0.0, 0, 0
        for _ in steps_iter:
            scheduled = [coordinator.schedule(step, args=(iterator,)) for _ in range(workers)]
            coordinator.join()
            for rv in scheduled:
                loss, ok = rv.fetch()
                loss_sum += float(loss) * args.batch_size
                correct += int(ok)
                seen += args.batch_size
        return loss_sum, correct, seen

    def evaluate():
        correct, seen = 0, 0
        for x, y in test.batch(EVAL_BATCH):
            correct += int(right(x, y))
            seen += len(y)
        return correct / seen if seen else 0.0

    # One chief iteration is a round of one step per worker: its global samples, as in the
    # iteration runs; and steps() counts rounds per epoch over "world" = workers.
    epochs_common.run_epochs(s, args, _Workers(info, workers), n, train_epoch, evaluate)
    return scaler


class _Workers:
    """The chief's view for ``run_epochs``: the world is the workers."""

    def __init__(self, info, workers: int) -> None:
        self.rank, self.world_size = 0, workers
