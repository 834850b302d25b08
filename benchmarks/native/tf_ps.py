"""tf-ps, natively: TensorFlow's "Parameter server training with ParameterServerStrategy"
guide, custom training loop. ps and worker tasks start a ``tf.distribute.Server`` from
``TFConfigClusterResolver`` and serve; the chief builds ``ParameterServerStrategy`` +
``ClusterCoordinator``, creates model and Keras optimizer in ``strategy.scope()``, a per-worker
dataset, and a ``tf.function`` step (``next(iterator)``, ``strategy.run`` of forward, averaged
loss, ``tape.gradient``, ``apply_gradients``; ``strategy.reduce`` of the loss); each epoch
schedules its steps with ``coordinator.schedule`` and waits once with ``coordinator.join()``.
Here: one warm-up epoch of ``--warmup x workers`` steps, then one timed epoch of
``--iters x workers`` steps (the chief reports the global samples).

A server never exits by itself (the guide's ``server.join()``): the chief writes
``chief.done`` beside the logs when it has reported, and servers leave on it."""

import argparse
import os
import time

import tensorflow as tf

from benchmarks.native._common import Clock, parse_args, report
from orchestrator.rankside.tf import models as models_tf

DONE = "chief.done"


def serve(log_dir):
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type == "ps":
        tf.config.set_visible_devices([], "GPU")
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id,
                                  protocol=resolver.rpc_layer or "grpc", start=True)
    while not os.path.exists(os.path.join(log_dir, DONE)):
        time.sleep(0.2)
    del server
    os._exit(0)


def coordinate(args, log_dir):
    tf.config.set_visible_devices([], "GPU")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    workers = len(resolver.cluster_spec().as_dict()["worker"])
    with strategy.scope():
        model = models_tf.build(args.model, args.dataset)
        optimizer = tf.keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
    shape, classes = models_tf.input_shape(args.dataset), models_tf.num_classes(args.dataset)
    batch = args.batch_size

    def dataset_fn():  # the same synthetic input as orch's: a few batches, repeated
        x = tf.random.normal((4, batch, *shape))
        y = tf.random.uniform((4, batch), 0, classes, dtype=tf.int32)
        return tf.data.Dataset.from_tensor_slices((x, y)).repeat()

    @tf.function
    def step_fn(iterator):
        def replica_fn(x, y):
            with tf.GradientTape() as tape:
                per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=y, logits=model(x, training=True))
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        x, y = next(iterator)
        losses = strategy.run(replica_fn, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    per_worker_iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
    clock = Clock(1)
    for epoch, steps in enumerate((args.warmup, args.iters)):
        clock.step(epoch)
        for _ in range(steps * workers):
            coordinator.schedule(step_fn, args=(per_worker_iterator,))
        coordinator.join()
    report("tf-ps", 0, args.iters * workers * batch, clock.done())
    with open(os.path.join(log_dir, DONE), "w") as fh:
        fh.write("done\n")
    time.sleep(2)  # let the servers see it before their coordinator goes
    os._exit(0)


def main():
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
    args = parse_args()
    parser = argparse.ArgumentParser()
    parser.add_argument("--log-dir", required=True)
    log_dir = parser.parse_known_args()[0].log_dir
    if os.environ.get("ORCH_ROLE") == "chief":
        coordinate(args, log_dir)
    else:
        serve(log_dir)


if __name__ == "__main__":
    main()
