"""TensorFlow ParameterServerStrategy task: chief (coordinator), worker or ps, over gRPC.

Roles (``ORCH_ROLE``, from orch's task table; ``TF_CONFIG`` from launch.sh):

* ``ps`` and ``worker`` tasks run a ``tf.distribute.Server`` and nothing else: the chief ships
  functions to the workers and places the variables on the parameter servers. A server never
  exits by itself, so these tasks wait (instead of ``server.join()``) until the chief has
  written ``chief.done`` beside the rank logs, or until the chief's log ends (it failed), and
  then leave through their rank log like every task: header + footer with peak memory.
* the ``chief`` runs ``ParameterServerStrategy`` + ``ClusterCoordinator``. The variables
  (weights and momentum slots, each slot beside its weight) live on the ps tasks, spread
  round-robin. One chief *iteration* schedules one training step per worker
  (``coordinator.schedule``; the breakdown window waits for them, ``coordinator.join``): a
  global step of ``workers x batch`` samples, which is what the chief logs as the
  iteration's ``samples``. Every worker applies its own gradient to the parameters as soon as
  it has it: asynchronous SGD, no gradient aggregation, so workers do not end with equal
  parameters (the mode is not ``synchronous``; the chief's checksum is of the ps-held
  parameters).

Two windows (orchestrator.protocol), both timed by the chief, one iteration = one scheduled
step per worker. The **native** window schedules the step as TensorFlow's
ParameterServerStrategy guide writes it (a ``tf.function`` taking the per-worker iterator:
``next(iterator)``, ``strategy.run`` of forward, averaged loss, ``tape.gradient`` and Keras'
``SGD(momentum=0.9).apply_gradients``, ``strategy.reduce`` of the loss), and lets steps queue
as the guide's epoch loop does (the harness joins at the end of every chunk of iterations and
of the window), wall clock only: samples/s comes from it. The **breakdown** window schedules the
instrumented step below and joins every iteration (``coordinator.join()``).

What is measured, and how. The chief only sees a step's wall time; the phases come from inside
the step function on the worker, where ``tf.timestamp()`` ops chained by control dependencies
mark the step's stages (on the worker's clock):

    start -> next(dataset) -> pull -> forward+loss -> backward -> push+apply -> end
             t_io            t_pull   t_f            t_b         t_push

``t_pull``: all weights are read from the ps tasks into local copies (``tf.identity`` on the
worker) before the forward pass, which then runs on those copies (``models_tf.substitute``);
``t_push``: every gradient, held back until the whole backward pass is done, is sent to its ps,
where ``ResourceApplyMomentum`` applies it (colocated with the weight), until all updates are
done. The ps-side update is inside the push round trip and cannot be timed apart from it from
the worker: ``t_u`` is 0 and the update's cost is part of ``t_comm = t_pull + t_push``.

The stages are serialised on purpose, and that is a difference from a plain TensorFlow PS step:
left alone, TensorFlow reads each variable when the forward pass reaches its layer and sends
each gradient as soon as backward produces it, hiding part of both behind computation, and then
no stage boundary exists to time (the mode declares that overlap: ``wfbp``). Here nothing
overlaps the pull or the push, so the breakdown step is an upper bound of the overlapped one,
and ``t_comm`` also holds the ps-side update. How much communication the native step does
behind its computation cannot be seen from outside its graph: ``t_comm_total`` is not
recorded, and the footer's ``comm_total_reason`` says so.

Per chief iteration, each phase is the mean over that iteration's steps. What the phases do not
cover is ``t_iter - (t_io + t_f + t_b + t_comm)`` (``t_unaccounted`` in the results): the
coordinator's dispatch of the steps to the workers (an RPC each way), the wait for the slowest
of the parallel steps, and fetching the results.

Failure injection (``--inject-failure K@I[:ACTION]``): when task K is the chief, the harness
acts (raises or stops) at its iteration I; when it is a worker or ps, that task acts once the
chief has logged I iterations, and the launcher then stops the whole job.
"""

from __future__ import annotations

import os
import time
from collections import Counter

from orchestrator import protocol
from orchestrator.rankside import harness
from orchestrator.rankside.tf import common as tf_common

from .mode import MODE

COMM_TOTAL_REASON = ("TensorFlow's PS step reads variables and pushes gradients inside one "
                     "graph, overlapped with its computation: the total cannot be seen from "
                     "outside it (t_comm: the serialised breakdown step's pull + push, which "
                     "holds the ps-side update too)")
DONE_FILE = "chief.done"
POLL_S = 0.2
SERVER_FOOTER_WAIT_S = 30.0


def task_roles() -> list[str]:
    """``["chief:0", "worker:0", "ps:0", ...]``: role of each task id (launch.sh exports it)."""
    return os.environ["ORCH_TASK_ROLES"].split()


def chief_log(log_dir: str) -> str:
    return os.path.join(log_dir, protocol.rank_log_name(task_roles().index("chief:0")))


class LogFollower:
    """Follows a rank log as it grows (reading only what is new): iterations and footer."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.offset = 0
        self.iters = 0
        self.footer: dict | None = None

    def poll(self) -> LogFollower:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return self
        complete = data.rfind(b"\n") + 1  # a line still being written is read next time
        self.offset += complete
        for line in data[:complete].splitlines():
            rec = protocol.parse_record(line)
            if rec is not None and rec["type"] == protocol.ITER:
                self.iters += 1
            elif rec is not None and rec["type"] == protocol.FOOTER:
                self.footer = rec
        return self


def serve(s, args) -> None:
    """A ps or worker task: run the gRPC server until the chief is done."""
    import tensorflow as tf

    from orchestrator.rankside.tf import precision as mixed

    s.footer["versions"] = harness.versions(tensorflow=tf.__version__)
    s.footer["threads"] = tf_common.thread_settings()
    # The workers run the chief's step functions: TF32 is theirs to switch (on GPUs).
    s.footer.update(mixed.setup(tf, args.precision))
    if s.info.role == "ps":
        tf.config.set_visible_devices([], "GPU")  # variables and their updates stay on the CPU
    else:
        tf_common.use_one_gpu(tf, s.info.role_index)
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id,
                                  protocol=resolver.rpc_layer or "grpc", start=True)
    s.footer["server"] = server.target
    failure = s.failure if s.failure and s.failure[0] == s.info.task else None
    done, chief = os.path.join(args.log_dir, DONE_FILE), LogFollower(chief_log(args.log_dir))
    while True:
        chief.poll()
        # Before the done checks: a fast chief may pass the failure's iteration and finish
        # between two polls, and the injected failure must still happen (seen under load).
        if failure and chief.iters >= failure[1]:
            s.inject(failure[1])
        if os.path.exists(done):
            s.footer["stopped_by"] = "chief done"
            if s.info.role == "ps":
                workers = [k for k, r in enumerate(task_roles()) if r.startswith("worker:")]
                s.footer["workers_stopped"] = wait_for_footers(args.log_dir, workers)
            return
        if chief.footer is not None:
            s.footer["stopped_by"] = f"chief ended with status {chief.footer.get('status')}"
            return
        time.sleep(POLL_S)


def wait_for_footers(log_dir: str, tasks: list[int]) -> int:
    """Until the tasks ``tasks`` have their footers (bounded, SERVER_FOOTER_WAIT_S); how many
    did. The chief waits for every server, so that it leaves last and no server is left
    talking to a closed socket. A ps waits for the workers: a worker's fabric evidence is read
    from its open sockets when it writes its footer, and a ps leaving first closes the
    worker's data connections, their byte counters with them (the workers then showed ~35 KB
    sent of the ~1 MB each must send, and the run's fabric "unverified")."""
    logs = [LogFollower(os.path.join(log_dir, protocol.rank_log_name(k))) for k in tasks]
    deadline = time.time() + SERVER_FOOTER_WAIT_S
    while True:
        ended = sum(log.poll().footer is not None for log in logs)
        if ended >= len(logs) or time.time() > deadline:
            return ended
        time.sleep(POLL_S)


def instrumented_step(tf, strategy, model, params, slots, scale=None):
    """The breakdown window's step: one worker's pull, forward, backward and push, each stage
    stamped with ``tf.timestamp()`` behind control dependencies so that a stamp is taken when
    the stage before it is done; returns the six stamps and the loss. ``scale`` (fp16): the
    loss scale its backward is seeded with (its gradients unscaled, a step with non-finite
    ones skipped)."""
    from orchestrator.rankside.tf import models as models_tf
    from orchestrator.rankside.tf import precision as mixed

    lr = tf.constant(tf_common.LEARNING_RATE)
    momentum = tf.constant(tf_common.MOMENTUM)

    @tf.function
    def step(iterator):
        t_start = tf.timestamp()
        with tf.control_dependencies([t_start]):
            x, y = next(iterator)

        def replica(x, y):
            with tf.control_dependencies([x, y]):
                t_data = tf.timestamp()
            with tf.control_dependencies([t_data]):
                pulled = [tf.identity(v) for v in params]  # ps -> this worker
            with tf.control_dependencies(pulled):
                t_pulled = tf.timestamp()
            with tf.control_dependencies([t_pulled]):
                x = tf.identity(x)
            with tf.GradientTape() as tape:
                tape.watch(pulled)
                with models_tf.substitute(params, pulled):
                    loss = tf_common.loss_fn(tf, model(x, training=True), y)
            with tf.control_dependencies([loss]):
                t_loss = tf.timestamp()
            with tf.control_dependencies([t_loss]):
                seed = tf.ones_like(loss) if scale is None else tf.ones_like(loss) * scale
            grads = mixed.unscaled(tf, scale, tape.gradient(loss, pulled,
                                                            output_gradients=seed))
            with tf.control_dependencies(grads):
                t_grads = tf.timestamp()
            with tf.control_dependencies([t_grads]):  # sent only once backward is done
                grads = [tf.identity(g) for g in grads]
            step_lr, step_momentum = lr, momentum
            if scale is not None:
                grads, step_lr, step_momentum = mixed.skip_if_not_finite(tf, grads, lr, momentum)
            updates = []
            for v, m, g in zip(params, slots, grads, strict=True):
                with tf.device(v.device):  # push the gradient, apply it on its ps
                    updates.append(tf.raw_ops.ResourceApplyMomentum(
                        var=v.handle, accum=m.handle, lr=step_lr, grad=g,
                        momentum=step_momentum))
            with tf.control_dependencies(updates):
                t_end = tf.timestamp()
            return tf.stack([t_start, t_data, t_pulled, t_loss, t_grads, t_end]), loss

        return strategy.run(replica, args=(x, y))

    return step


def coordinate(s, args) -> None:
    """The chief: create the variables on the ps tasks, schedule steps, time them."""
    import tensorflow as tf

    from orchestrator.rankside.tf import models as models_tf
    from orchestrator.rankside.tf import precision as mixed

    s.footer["versions"] = harness.versions(tensorflow=tf.__version__)
    s.footer["threads"] = tf_common.thread_settings()
    s.footer.update(mixed.setup(tf, args.precision))
    tf.config.set_visible_devices([], "GPU")  # the chief computes nothing
    cluster = tf_common.tf_config()["cluster"]
    workers = len(cluster["worker"])
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    s.footer["workers"], s.footer["ps"] = workers, len(cluster["ps"])

    with strategy.scope():
        model = mixed.autocast(tf, models_tf.build(args.model, args.dataset, args.classes),
                               args.precision)
        params = list(model.trainable_variables)
        slots = []
        for v in params:
            with strategy.extended.colocate_vars_with(v):
                slots.append(tf.Variable(tf.zeros(v.shape), trainable=False, name="momentum"))
    s.footer["variables_per_ps"] = dict(Counter(v.device for v in params))

    shape = models_tf.input_shape(args.dataset)
    classes = models_tf.num_classes(args.dataset)
    batch = args.batch_size

    def dataset_fn():
        if len(shape) == 1:  # token sequences and their next tokens (a causal LM's)
            tokens = tf.random.uniform((tf_common.POOL, batch, shape[0] + 1), 0, classes,
                                       dtype=tf.int32)
            return tf.data.Dataset.from_tensor_slices(
                (tokens[:, :, :-1], tokens[:, :, 1:])).repeat()
        x = tf.random.normal((tf_common.POOL, batch, *shape))
        y = tf.random.uniform((tf_common.POOL, batch), 0, classes, dtype=tf.int32)
        return tf.data.Dataset.from_tensor_slices((x, y)).repeat()


    s.samples = workers * batch  # the global samples of one chief iteration
    from orchestrator.rankside.tf import epochs as epochs_tf

    if args.epochs:  # whole epochs of scheduled steps, the chief evaluates after each
        scaler = epochs_tf.train_ps(s, args, s.info, tf, strategy, coordinator, model, params,
                                    slots, workers)
        s.footer.update(mixed.footer_facts(model, scaler))
        finish(s, tf, params)
        return
    if args.data:  # TFRecord: the per-worker datasets read it
        dataset_fn = epochs_tf.ps_dataset_fn(tf, args, shape)

    replica_fn, optimizer = tf_common.native_replica_fn(tf, strategy, model, batch,
                                                        args.precision)
    # fp16: the breakdown step scales its loss by the scale the native window left.
    step = instrumented_step(tf, strategy, model, params, slots, mixed.loss_scale(optimizer))

    @tf.function
    def native_step(iterator):  # the guide's step function, unmodified
        x, y = next(iterator)
        losses = strategy.run(replica_fn, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))
    s.footer[protocol.COMM_TOTAL_REASON] = COMM_TOTAL_REASON

    # The guide schedules an epoch's steps and joins once: the workers never wait for the
    # coordinator between steps. So the window only schedules; the harness joins at the end
    # of every chunk of iterations (an "epoch") and of the window.
    for _ in s.native_iterations(drain=coordinator.join):
        for _ in range(workers):
            coordinator.schedule(native_step, args=(iterator,))

    results = breakdown(s, coordinator, step, iterator, workers)
    s.footer["loss"] = float(results[-1][1])
    s.footer.update(mixed.footer_facts(model, optimizer))
    finish(s, tf, params)


def breakdown(s, coordinator, step, iterator, workers: int):
    """The breakdown window: per iteration one instrumented ``step`` scheduled on every
    worker, joined; each stamps its stages (input, pull, forward, backward, push) and the
    phases are their means over the workers. Returns the last iteration's results."""
    import numpy as np

    def stage_times(_it):  # each worker's step stamps its stages: their mean is the phases
        scheduled = [coordinator.schedule(step, args=(iterator,)) for _ in range(workers)]
        coordinator.join()
        results = [rv.fetch() for rv in scheduled]
        stages = np.diff(np.array([stamps for stamps, _ in results]), axis=1).mean(axis=0)
        t_io, t_pull, t_f, t_b, t_push = (float(v) for v in stages)
        s.add("t_io", t_io)
        s.add("t_f", t_f)
        s.add("t_b", t_b)
        s.add("t_comm", t_pull + t_push)
        s.add("t_pull", t_pull)
        s.add("t_push", t_push)
        return results

    return s.breakdown([(None, stage_times)])


def finish(s, tf, params) -> None:
    """The chief's ending, windows or epochs: the checksum, then stop the servers and leave
    (a coordinator gone early makes them log errors)."""
    s.footer["param_checksum"] = tf_common.checksum(tf, params)
    with open(os.path.join(s.args.log_dir, DONE_FILE), "w") as fh:
        fh.write(f"{time.time()}\n")
    others = [k for k in range(len(task_roles())) if k != s.info.task]
    s.footer["servers_stopped"] = wait_for_footers(s.args.log_dir, others)


def main(argv=None) -> None:
    args = harness.mode_parser(MODE).parse_args(argv)
    # Recommended for PS training: RPCs to a task that is gone fail at once instead of waiting.
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
    with harness.rank_log(args, framework="tensorflow", mode="tf-ps") as s:
        if s.info.role == "chief":
            coordinate(s, args)
        elif s.info.role in ("worker", "ps"):
            serve(s, args)
        else:
            raise RuntimeError(f"tf-ps has no role '{s.info.role}'")


if __name__ == "__main__":
    main()
