"""tf-allreduce, natively: TensorFlow's "Custom training loop with MultiWorkerMirroredStrategy"
(TF_CONFIG from the launch script, ``MultiWorkerMirroredStrategy`` with the mode's collective
implementation, model and Keras optimizer created in ``strategy.scope()``, a ``tf.function``
``train_step`` whose ``strategy.run`` does forward, ``compute_average_loss``, ``tape.gradient``
and ``optimizer.apply_gradients``), no timers in the loop.

Leaving: a last collective and a file barrier, then ``os._exit`` — a ring all-reduce may still
read from a task that has returned, and TensorFlow's shutdown barrier would hold every worker
~20 s (FACTS.md); neither is inside the measured steps."""

import argparse
import itertools
import os

import tensorflow as tf

from benchmarks.native._common import Clock, parse_args, report
from orchestrator.rankside.tf import common as tf_common
from orchestrator.rankside.tf import models as models_tf


def main():
    args = parse_args(extra=(("--implementation", "ring"),))
    parser = argparse.ArgumentParser()
    parser.add_argument("--log-dir", required=True)
    log_dir = parser.parse_known_args()[0].log_dir
    impl = tf.distribute.experimental.CommunicationImplementation
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=impl.NCCL if args.implementation == "nccl" else impl.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    task = strategy.cluster_resolver.task_id
    global_batch = args.batch_size * strategy.num_replicas_in_sync
    with strategy.scope():
        model = models_tf.build(args.model, args.dataset)
        optimizer = tf.keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
    # The same input as orch's ranks: four synthetic batches in host memory, cycled.
    shape, classes = models_tf.input_shape(args.dataset), models_tf.num_classes(args.dataset)
    batches = itertools.cycle(tf_common.synthetic_pool(tf, args.batch_size, shape, classes,
                                                       1000 + task))

    @tf.function
    def train_step(x, y):
        def step_fn(x, y):
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y,
                                                                             logits=logits)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        per_replica = strategy.run(step_fn, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    clock = Clock(args.warmup)
    for k in range(args.warmup + args.iters):
        clock.step(k)
        x, y = next(batches)
        loss = train_step(x, y)
    float(loss)
    report("tf-allreduce", task, args.iters * args.batch_size, clock.done(), clock.steps())
    float(strategy.reduce(tf.distribute.ReduceOp.SUM,
                          strategy.run(lambda: tf.constant(1.0)), axis=None))
    tf_common.leave_together(log_dir, task, strategy.num_replicas_in_sync)
    os._exit(0)


if __name__ == "__main__":
    main()
