"""Rank-side helpers shared by the TensorFlow modes (``tf_allreduce``, ``tf_ps``).

TensorFlow is passed in (``tf``) rather than imported here: the ranks import it inside
their rank log, so that a broken import is recorded as the rank's error.
"""

from __future__ import annotations

import json
import os

# SGD with momentum, the same update as torch.optim.SGD(lr=0.01, momentum=0.9) in torch-ddp.
LEARNING_RATE = 0.01
MOMENTUM = 0.9
POOL = 4  # distinct synthetic batches cycled through (the data lives in memory: t_io ~ 0)


def tf_config() -> dict:
    """The TF_CONFIG launch.sh exported (cluster addresses and this task's type and index)."""
    try:
        return json.loads(os.environ["TF_CONFIG"])
    except KeyError:
        raise RuntimeError("TF_CONFIG is not set: launch.sh sets it from the task table") from None


def use_one_gpu(tf, index: int) -> bool:
    """A task sees only its own GPU (one replica per task); False on a CPU-only node."""
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        tf.config.set_visible_devices(gpus[index % len(gpus)], "GPU")
    return bool(gpus)


def sync_devices(tf, on_gpu: bool) -> None:
    """Wait for queued GPU kernels, so that host timers measure them (CPU ops are synchronous)."""
    if on_gpu:
        tf.test.experimental.sync_devices()


def synthetic_pool(tf, batch: int, shape: tuple[int, ...], classes: int, seed: int):
    """A few distinct (images, labels) batches in host memory, NHWC float32 / int32 labels;
    for a token dataset (``shape`` (T,), ``classes`` its vocabulary) int32 token sequences and
    their next tokens, as a causal language model trains."""
    pool = []
    if len(shape) == 1:
        for k in range(POOL):
            tokens = tf.random.stateless_uniform((batch, shape[0] + 1), seed=(seed, k),
                                                 minval=0, maxval=classes, dtype=tf.int32)
            pool.append((tokens[:, :-1], tokens[:, 1:]))
        return pool
    for k in range(POOL):
        x = tf.random.stateless_normal((batch, *shape), seed=(seed, k))
        y = tf.random.stateless_uniform((batch,), seed=(seed, 100 + k), minval=0,
                                        maxval=classes, dtype=tf.int32)
        pool.append((x, y))
    return pool


def input_batches(tf, args, rank: int, world: int, shape, classes: int, seed: int):
    """Batches as (NHWC float32 images, int32 labels): from TFRecord files on disk (--data,
    tf.data with its map/prefetch; prefetch off reads and decodes in the loop, so all of it
    is t_io) or a few synthetic batches in memory, cycled."""
    if not args.data:
        import itertools

        return itertools.cycle(synthetic_pool(tf, args.batch_size, shape, classes, seed))
    decode = record_decoder(tf, shape)
    files = tfrecord_files(tf, args.data)
    prefetch = args.prefetch == "yes"
    ds = (tf.data.TFRecordDataset(files).shard(world, rank).repeat()
          .shuffle(1000, seed=seed)
          .map(decode, num_parallel_calls=tf.data.AUTOTUNE if prefetch else None)
          .batch(args.batch_size, drop_remainder=True))
    if prefetch:
        ds = ds.prefetch(4)
    else:  # no reading ahead, in any stage
        opts = tf.data.Options()
        opts.autotune.enabled = False
        opts.experimental_optimization.inject_prefetch = False
        ds = ds.with_options(opts)
    return iter(ds)


def record_decoder(tf, shape):
    """A TFRecord example (CHW uint8 ``image`` bytes, int64 ``label``) -> (NHWC float32 image
    normalised as the PyTorch modes do, int32 label)."""
    h, w, c = shape
    spec = {"image": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64)}

    def decode(record):
        ex = tf.io.parse_single_example(record, spec)
        chw = tf.reshape(tf.io.decode_raw(ex["image"], tf.uint8), (c, h, w))
        x = (tf.cast(tf.transpose(chw, (1, 2, 0)), tf.float32) / 255.0 - 0.5) / 0.25
        return x, tf.cast(ex["label"], tf.int32)

    return decode


def tfrecord_files(tf, root: str) -> list[str]:
    files = sorted(tf.io.gfile.glob(f"{root}/shard-*.tfrecord"))
    if not files:
        raise FileNotFoundError(f"no shard-*.tfrecord under {root}")
    return files


def leave_together(log_dir: str, task: int, tasks: int, timeout_s: float = 60.0) -> int:
    """A file barrier after the last collective: mark that this task needs no peer any more,
    wait (bounded) until every task has, and return how many had."""
    import glob
    import os
    import time

    open(os.path.join(log_dir, f".collectives-done-{task}"), "w").close()
    deadline = time.time() + timeout_s
    while True:
        done = len(glob.glob(os.path.join(log_dir, ".collectives-done-*")))
        if done >= tasks or time.time() > deadline:
            return done
        time.sleep(0.05)


def momentum_update(tf, params, slots, skip_not_finite: bool = False):
    """``update(grads)``: orch's SGD with momentum on ``params`` (``slots`` their momentum),
    as one tf.function; the all-reduce mode and its epoch runs step the same way.
    ``skip_not_finite`` (fp16): a step whose gradients are not all finite changes nothing."""
    from . import precision as mixed

    @tf.function
    def update(grads):
        lr, momentum = tf.constant(LEARNING_RATE), tf.constant(MOMENTUM)
        if skip_not_finite:
            grads, lr, momentum = mixed.skip_if_not_finite(tf, grads, lr, momentum)
        for v, m, g in zip(params, slots, grads, strict=True):
            m.assign(momentum * m + g)
            v.assign_sub(lr * m)

    return update


def summed(tf, strategy, comm):
    """``total(value)``: the sum of ``value`` over every replica of ``strategy`` (a
    collective of ``comm``'s implementation), as one tf.function."""

    @tf.function
    def total(value):
        def replica(value):
            ctx = tf.distribute.get_replica_context()
            return ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.identity(value),
                                  options=comm)

        return strategy.run(replica, args=(value,))

    return total


def loss_fn(tf, logits, labels):
    """Mean softmax cross-entropy of the local batch (like torch's CrossEntropyLoss), over
    every target token of a language model's sequences."""
    return tf.reduce_mean(
        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))


def per_example_loss(tf, logits, labels):
    """Each sample's cross-entropy (a sequence's: its mean over the tokens), what
    ``tf.nn.compute_average_loss`` averages over the global batch."""
    xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    return xent if len(xent.shape) == 1 else tf.reduce_mean(xent, axis=list(
        range(1, len(xent.shape))))


def checksum(tf, variables) -> float:
    """Float64 sum of all parameters: equal on every worker iff they stayed in sync."""
    return float(sum(float(tf.reduce_sum(tf.cast(tf.convert_to_tensor(v), tf.float64)))
                     for v in variables))


def thread_settings() -> dict:
    return {"intra_op": os.environ.get("TF_NUM_INTRAOP_THREADS", "default"),
            "inter_op": os.environ.get("TF_NUM_INTEROP_THREADS", "default")}


def native_replica_fn(tf, strategy, model, global_batch: int, precision: str = "fp32"):
    """One replica's training step as TensorFlow's distributed-training guides write it
    (``strategy.run`` runs it): forward, the loss averaged over the global batch,
    ``tape.gradient`` and Keras' ``apply_gradients`` (SGD with momentum, the hyper-parameters
    of the breakdown step), returning the loss; with ``precision`` fp16 the optimizer is
    Keras' LossScaleOptimizer and the loss is scaled as its guide does (``scale_loss``).
    Nothing of orch is inside it; the optimizer's variables are created in ``strategy``'s
    scope. Returns the function and the optimizer."""
    from . import precision as mixed

    params = model.trainable_variables
    with strategy.scope():
        optimizer = mixed.optimizer(tf, precision, tf.keras.optimizers.SGD(
            learning_rate=LEARNING_RATE, momentum=MOMENTUM))
        # Its variables (momentum, fp16's loss scale) now, not inside the first step: the
        # breakdown step reads the loss scale.
        optimizer.build(params)

    def replica_fn(x, y):
        with tf.GradientTape() as tape:
            per_example = per_example_loss(tf, model(x, training=True), y)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            scaled = mixed.scaled(optimizer, loss)
        grads = tape.gradient(scaled, params)
        optimizer.apply_gradients(zip(grads, params, strict=True))  # unscales (fp16)
        return loss

    return replica_fn, optimizer


def native_step(tf, strategy, model, global_batch: int, precision: str = "fp32"):
    """MultiWorkerMirroredStrategy's step (the guide's ``train_step``): one ``tf.function``
    running :func:`native_replica_fn` through ``strategy.run``; returns the summed loss.
    Returns the step and its optimizer."""
    replica_fn, optimizer = native_replica_fn(tf, strategy, model, global_batch, precision)

    @tf.function
    def train_step(x, y):
        losses = strategy.run(replica_fn, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    return train_step, optimizer
