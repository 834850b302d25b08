"""TensorFlow MultiWorkerMirroredStrategy task: synchronous all-reduce data parallelism.

One process per worker, one replica per process (a GPU task sees only its own GPU). The
cluster comes from ``TF_CONFIG``, which launch.sh builds from the task table (every worker's
``host:port``); the all-reduce implementation is the mode option ``implementation``: RING
(TensorFlow's gRPC ring collectives, the CPU choice) or NCCL (GPU partitions).

Two windows (orchestrator.protocol). The **native** window runs the step as TensorFlow's
multi-worker guide writes it: one ``tf.function`` whose ``strategy.run`` does forward,
``tf.nn.compute_average_loss`` over the global batch, ``tape.gradient`` and Keras'
``SGD(momentum=0.9).apply_gradients`` (which all-reduces the gradients, one packed collective,
then updates), timed only by the wall clock around the call: samples/s comes from it.

The **breakdown** window separates the phases. ``apply_gradients`` all-reduces the gradients
*inside* the same graph as the update, where nothing outside can time it, so its step is three
functions, each timed by the host:

1. ``compute`` (``strategy.run``): forward, loss and ``tape.gradient`` on the local batch, with
   ``tf.timestamp()`` ops inside the graph: one after the loss, one after the last gradient.
   The backward pass is seeded by a tensor that depends on the first stamp, so it cannot start
   before it. ``t_b`` = between the stamps, ``t_f`` = the rest of the call (forward, loss and
   the function's own dispatch).
2. ``all_reduce`` (``strategy.run``): the replica context's ``all_reduce(MEAN, grads)`` with
   the chosen implementation: ``t_comm``. It includes waiting for the slowest worker to arrive,
   exactly as the exposed communication of an S-SGD step does.
3. ``update``: SGD with momentum on the mirrored variables in cross-replica context (each
   worker updates its own copy with the identical averaged gradient): ``t_u``.

Communication. The native step does not overlap it either: MWMS packs every gradient into one
collective (``CommunicationOptions.bytes_per_pack`` 0), which can start only when the last
gradient exists, so the mode declares no overlap. In the breakdown step the collective is the
only communication and runs alone: ``t_comm_total`` is that collective's measured time (all of
it exposed). With one worker there is nothing to reduce: the all-reduce is not called and both
are 0.

Every worker ends with a last all-reduce (of its parameter checksum) so that all of them finish
together; the process then exits right after its footer (the harness), without TensorFlow's
shutdown barrier, in which workers would wait ~20 s when worker 0 leaves first.
"""

from __future__ import annotations

import time

from orchestrator.rankside import harness
from orchestrator.rankside.tf import common as tf_common

from .mode import MODE


def finish(s, tf, strategy, params, total) -> None:
    """The ending of every run, windows or epochs: the checksum, summed over the workers in a
    last collective, then leave together."""
    s.footer["param_checksum"] = tf_common.checksum(tf, params)
    s.footer["gradient_tensors"] = len(params)
    # The last collective: every worker arrives here before any of them exits.
    with strategy.scope():
        s.footer["checksum_sum"] = float(total(tf.constant(s.footer["param_checksum"],
                                                           tf.float64)))
    # Leave together: ring all-reduce pulls buffers from peers (RecvBuf), so a task whose
    # collective has returned may still be read from by a slower one, which fails with
    # "Socket closed" if it has exited (seen both ways round under load).
    s.footer["left_together"] = tf_common.leave_together(s.args.log_dir, s.info.task,
                                                         s.info.world_size)


def breakdown(s, tf, source, on_gpu: bool, compute, collective, update):
    """The breakdown window: the batch to the device, forward and backward in one graph
    (``compute`` stamps where backward starts and ends), the all-reduce alone
    (``collective``: the strategy, the worker count and the all-reduce function), then the
    momentum update. Returns the last loss."""
    strategy, workers, all_reduce = collective
    device = "/GPU:0" if on_gpu else "/CPU:0"

    def to_device(batch):
        if not on_gpu:
            return batch
        with tf.device(device):
            batch = tf.identity(batch[0]), tf.identity(batch[1])
        tf_common.sync_devices(tf, on_gpu)
        return batch

    def forward_backward(batch):  # one graph: backward is told apart by its stamps
        start = time.perf_counter()
        loss, grads, t_loss, t_grads = compute(*batch)
        backward = float(t_grads) - float(t_loss)  # .numpy(): waits for the values
        tf_common.sync_devices(tf, on_gpu)
        s.add("t_f", time.perf_counter() - start - backward)
        s.add("t_b", backward)
        return loss, grads

    def reduce(computed):
        loss, grads = computed
        if workers == 1:  # one worker: nothing to reduce, no collective
            s.add("t_comm", 0.0)
            s.add("t_comm_total", 0.0)
            return loss, grads
        start = time.perf_counter()
        with strategy.scope():
            reduced = all_reduce(grads)
        tf_common.sync_devices(tf, on_gpu)
        comm_s = time.perf_counter() - start
        s.add("t_comm", comm_s)
        s.add("t_comm_total", comm_s)  # the collective runs alone: all of it is exposed
        return loss, reduced

    def apply(reduced):
        with strategy.scope():
            update(reduced[1])
            tf_common.sync_devices(tf, on_gpu)
        return reduced[0]

    return s.breakdown([("t_io", lambda _it: next(source)), ("t_h2d", to_device),
                        (None, forward_backward), (None, reduce), ("t_u", apply)])


def make_strategy(tf, implementation: str):
    """MultiWorkerMirroredStrategy over the chosen collective implementation (ring or NCCL),
    its communication options and the number of workers, checked: one replica per worker."""
    impl = {"ring": tf.distribute.experimental.CommunicationImplementation.RING,
            "nccl": tf.distribute.experimental.CommunicationImplementation.NCCL}
    comm = tf.distribute.experimental.CommunicationOptions(implementation=impl[implementation])
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=comm)
    workers = len(tf_common.tf_config()["cluster"]["worker"])
    if strategy.num_replicas_in_sync != workers:
        raise RuntimeError(f"{strategy.num_replicas_in_sync} replicas in sync, expected one "
                           f"per worker ({workers})")
    return strategy, comm, workers


def phase_graphs(tf, strategy, comm, model, params, scale):
    """The breakdown window's two graphs: ``compute`` (forward, loss and gradients, stamped
    where backward starts and ends; ``scale``: fp16's loss scale or None) and ``all_reduce``
    (the gradients' mean over the workers, alone)."""
    from orchestrator.rankside.tf import precision as mixed

    @tf.function
    def compute(x, y):
        def replica(x, y):
            with tf.GradientTape() as tape:
                loss = tf_common.loss_fn(tf, model(x, training=True), y)
            with tf.control_dependencies([loss]):
                t_loss = tf.timestamp()
            with tf.control_dependencies([t_loss]):
                seed = tf.ones_like(loss)  # backward starts after the stamp
                if scale is not None:
                    seed = seed * scale
            grads = mixed.unscaled(tf, scale, tape.gradient(loss, params,
                                                            output_gradients=seed))
            with tf.control_dependencies(grads):
                t_grads = tf.timestamp()
            return loss, grads, t_loss, t_grads

        return strategy.run(replica, args=(x, y))

    @tf.function
    def all_reduce(grads):
        def replica(grads):
            ctx = tf.distribute.get_replica_context()
            # On this replica's device: the collective takes its placement from its inputs.
            grads = [tf.identity(g) for g in grads]
            return ctx.all_reduce(tf.distribute.ReduceOp.MEAN, grads, options=comm)

        return strategy.run(replica, args=(grads,))

    return compute, all_reduce


def main(argv=None) -> None:
    args = harness.mode_parser(MODE).parse_args(argv)
    with harness.rank_log(args, framework="tensorflow", mode="tf-allreduce") as s:
        import tensorflow as tf

        from orchestrator.rankside.tf import models as models_tf
        from orchestrator.rankside.tf import precision as mixed

        info = s.info
        s.footer["versions"] = harness.versions(tensorflow=tf.__version__)
        s.footer["threads"] = tf_common.thread_settings()
        on_gpu = tf_common.use_one_gpu(tf, info.local_rank)
        strategy, comm, workers = make_strategy(tf, args.implementation)
        s.footer["replicas"] = strategy.num_replicas_in_sync
        s.footer.update(mixed.setup(tf, args.precision))

        with strategy.scope():
            model = mixed.autocast(tf, models_tf.build(args.model, args.dataset, args.classes),
                                   args.precision)
            params = list(model.trainable_variables)
            slots = [tf.Variable(tf.zeros(v.shape), trainable=False, name="momentum")
                     for v in params]

        native_step, optimizer = tf_common.native_step(
            tf, strategy, model, args.batch_size * strategy.num_replicas_in_sync, args.precision)
        scale = mixed.loss_scale(optimizer)  # fp16: the one the native window left, reused

        compute, all_reduce = phase_graphs(tf, strategy, comm, model, params, scale)
        update = tf_common.momentum_update(tf, params, slots,
                                           skip_not_finite=scale is not None)
        total = tf_common.summed(tf, strategy, comm)

        if args.epochs:  # time to accuracy: tf.data shard + per-epoch reshuffle
            from orchestrator.rankside.tf import epochs as epochs_tf

            scaler = epochs_tf.train_allreduce(s, args, info, tf, strategy, comm, model, params,
                                               slots)
            s.footer.update(mixed.footer_facts(model, scaler))
            finish(s, tf, strategy, params, total)
            return
        shape = models_tf.input_shape(args.dataset)
        source = tf_common.input_batches(tf, args, info.rank, info.world_size, shape,
                                         models_tf.num_classes(args.dataset), 1000 + info.rank)

        for _ in s.native_iterations():  # TF's own step, wall clock only
            x, y = next(source)
            loss = native_step(x, y)
            tf_common.sync_devices(tf, on_gpu)

        loss = breakdown(s, tf, source, on_gpu, compute, (strategy, workers, all_reduce), update)
        s.footer["loss"] = float(loss)
        s.footer.update(mixed.footer_facts(model, optimizer))
        finish(s, tf, strategy, params, total)


if __name__ == "__main__":
    main()
