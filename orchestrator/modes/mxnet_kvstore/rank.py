"""MXNet KVStore task: a ps-lite scheduler, a server, or a Gluon worker that trains and is timed.

The role comes from ``DMLC_ROLE`` (set by launch.sh from orch's task table). Every task opens
its rank log, so a scheduler's or server's exit is recorded too (header, footer with peak
memory and how long it served; no iterations).

Scheduler and server. ``import mxnet`` would start them and ``sys.exit()`` at the end; instead
the module is imported as a worker would (``DMLC_ROLE`` hidden for the import) and the node is
run explicitly with ``KVStoreServer(mx.kv.create('dist')).run()`` — what that import does —
so the footer gets written. A server also wraps the optimizer the workers send it
(``update=server``) to time the updates it applies: ``server_update_s`` and ``server_updates``
in its footer.

Worker. ``gluon.Trainer(..., kvstore=mx.kv.create(kvstore))``. Two windows
(orchestrator.protocol): the **native** window runs Gluon's own step, ``autograd.record()``
forward and loss, ``loss.backward()``, ``trainer.step(1)`` (the loss is summed; the optimizer's
``rescale_grad`` normalises by the global batch), wall clock only: samples/s comes from it.
Steps queue in MXNet's engine as in Gluon's own loop; the harness waits for them
(``mx.nd.waitall()``) at the end of every chunk of iterations and of the window, so the
window holds all of its work (harness.Session.native_iterations). Then the **breakdown**
window.
MXNet runs operators asynchronously, so each of its phases ends by waiting for its results:

* ``t_io``: take a synthetic batch from a pool in host memory; ``t_h2d``: copy it to the GPU
  (0 on CPU);
* ``t_f``: forward and loss;
* ``t_b`` and ``t_comm``: ``loss.backward()`` only queues the backward operators, and the
  KVStore's push of a gradient starts as soon as that gradient is computed, while backward goes
  on (MXNet overlaps communication with backward this way). To find where backward *compute*
  ends, a marker operator that reads one element of every gradient is queued right after
  backward and before the push/pull; a helper thread waits for it. ``t_b`` = backward start →
  marker done; ``t_comm`` = marker done → all pulls done: the communication NOT hidden behind
  backward, the same definition as DDP's. ``t_comm_total``: every key's push and pull runs
  asynchronously in MXNet's engine, so per key two more markers say when its gradient existed
  (its push could start) and when its pull landed; the total is the time some key was in
  flight (the union of those spans and of the exposed tail), which contains ``t_comm``.
* ``update=worker`` (dist_sync): ``trainer.allreduce_grads()`` pushes gradients and pulls their
  sum over the workers (the servers only aggregate); ``t_u`` = ``trainer.update()`` on the
  worker. Communication and update are fully separated.
* ``update=server`` (MXNet's default for a dist kvstore, and the only choice with dist_async):
  ``trainer.step()`` pushes gradients and pulls weights the *servers* updated; the update is
  part of ``t_comm`` and cannot be separated on the worker (``t_u`` = 0); the servers' footers
  show how long their updates took in total.

The footer has ``param_checksum`` (float64 sum of all trainable parameters): with dist_sync
every worker ends with the same one; with dist_async they legitimately differ.
"""

from __future__ import annotations

import os
import threading
import time

from orchestrator.rankside import harness

from .mode import MODE


def in_flight(spans, backward_done: float, end: float) -> float:
    """Seconds during which some key's push/pull was in flight: the union of the keys' spans
    (gradient ready -> its pull landed) and of the exposed tail (backward done -> all pulled,
    when the worker waits on nothing but communication), so never less than ``t_comm``."""
    total, reach = 0.0, None
    for lo, hi in sorted([*spans, (backward_done, end)]):
        if reach is None or lo > reach:
            total += max(0.0, hi - lo)
            reach = hi
        elif hi > reach:
            total += hi - reach
            reach = hi
    return total


def trainable(net) -> list:
    return [p for p in net.collect_params().values() if p.grad_req != "null"]


def parameter_checksum(params) -> float:
    """Sum of all trainable parameters in float64: equal on every worker iff they are in sync."""
    return float(sum(p.data().astype("float64").sum().asscalar() for p in params))


class ReadyAt(threading.Thread):
    """Waits (GIL released) until an NDArray is computed and records when it was."""

    def __init__(self, array) -> None:
        super().__init__(daemon=True)
        self.array = array
        self.at: float | None = None

    def run(self) -> None:
        self.array.wait_to_read()
        self.at = time.perf_counter()


def run_ps_node(s: harness.Session, role: str) -> None:
    """Run the scheduler or a server until the workers finish (they stop it)."""
    os.environ.pop("DMLC_ROLE", None)  # imported as a worker: the node does not start yet
    try:
        import mxnet as mx
    finally:
        os.environ["DMLC_ROLE"] = role
    from mxnet.kvstore import KVStoreServer

    s.footer["versions"] = harness.versions(mxnet=mx.__version__)
    kv = mx.kv.create("dist")
    timing = {"server_update_s": 0.0, "server_updates": 0}
    if role == "server":
        set_updater = kv._set_updater  # called with the optimizer workers send (update=server)

        def timed_updater(updater):
            def update(key, grad, weight):
                t0 = time.perf_counter()
                updater(key, grad, weight)
                weight.wait_to_read()
                timing["server_update_s"] += time.perf_counter() - t0
                timing["server_updates"] += 1
            return update

        kv._set_updater = lambda updater: set_updater(timed_updater(updater))
    started = time.perf_counter()
    KVStoreServer(kv).run()
    s.footer["served_s"] = time.perf_counter() - started
    if role == "server":
        s.footer.update(timing)


def train(s: harness.Session, args) -> None:
    import mxnet as mx
    from mxnet import autograd, gluon

    from orchestrator.rankside.mxnet import models as models_mxnet
    from orchestrator.rankside.mxnet import precision as mixed

    info = s.info
    s.footer["versions"] = harness.versions(mxnet=mx.__version__)
    workers = int(os.environ["DMLC_NUM_WORKER"])
    if mx.context.num_gpus() > 0:  # workers are node-major: the i-th one of its node
        per_node = max(1, workers // int(os.environ.get("SLURM_NNODES", "1")))
        ctx = mx.gpu(info.role_index % per_node)
    else:
        ctx = mx.cpu()
    s.footer.update(mixed.setup(mx, args.precision, ctx != mx.cpu()))  # before the network

    mx.random.seed(0)  # same initial weights everywhere (the KVStore also broadcasts worker 0's)
    net = models_mxnet.build(args.model, args.dataset, args.classes)
    net.initialize(mx.init.Xavier(magnitude=2), ctx=ctx)
    net.hybridize()
    params = trainable(net)
    s.footer["params"] = models_mxnet.param_count(net)

    kv = mx.kv.create(args.kvstore)  # blocks until every node has joined the scheduler
    s.footer["kv_rank"] = kv.rank
    s.footer["kv_num_workers"] = kv.num_workers
    on_server = args.update == "server"
    # Gradients are summed over the workers in dist_sync: normalise by the global batch.
    # dist_async applies each worker's push on its own. Set once, before the optimizer goes
    # to the servers (step(1) / update(1) then keep it).
    scale = args.batch_size * (workers if args.kvstore == "dist_sync" else 1)
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": 0.01, "momentum": 0.9, "rescale_grad": 1 / scale},
                            kvstore=kv, update_on_kvstore=on_server)
    mixed.init_trainer(args.precision, trainer)
    # Create the KVStore keys now (worker 0's weights, the optimizer sent to the servers)
    # rather than inside the first timed step. MXNet 1.9.1 is the last release: these
    # private calls are what trainer.step() does first.
    trainer._init_kvstore()
    trainer._init_params()
    mx.nd.waitall()
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    if args.epochs:  # time to accuracy: the KVStore's rank/num_workers shard
        from orchestrator.rankside.mxnet import epochs as epochs_mxnet

        epochs_mxnet.train(s, args, info, mx, net, trainer, kv, ctx, on_server, loss_fn)
        s.footer["param_checksum"] = parameter_checksum(params)
        close_kvstore(kv)
        return

    source = input_batches(mx, gluon, args, kv.rank, kv.num_workers, info.role_index)

    # Gluon's own step, wall clock only: queued, as Gluon's loop queues it (MXNet's engine
    # runs it asynchronously); the harness drains the engine (waitall) at a chunk's end.
    out = None  # the network's last output: the dtype AMP computed it in
    for _ in s.native_iterations(drain=mx.nd.waitall):
        x, y = next(source)
        if x.context != ctx:
            x, y = x.as_in_context(ctx), y.as_in_context(ctx)
        with autograd.record():
            out = net(x)
            loss = mixed.scaled(loss_fn(out, y), trainer)  # fp16: AMP's loss scale
        loss.backward()
        trainer.step(1)

    loss = breakdown(s, mx, (net, loss_fn, trainer, params), ctx, source, on_server)
    s.footer["param_checksum"] = parameter_checksum(params)
    s.footer["loss"] = float(loss.mean().asscalar())
    s.footer.update(mixed.footer_facts(out.dtype if out is not None else None, trainer))
    close_kvstore(kv)


def breakdown(s, mx, training, ctx, source, on_server: bool):
    """The breakdown window (``training``: the network, loss, Gluon trainer and its
    parameters). MXNet runs operators asynchronously, so each phase ends by waiting for its
    results; backward and the KVStore's push/pull are split by when each gradient was ready
    and each pull landed (``ReadyAt``). Returns the last loss."""
    from mxnet import autograd

    from orchestrator.rankside.mxnet import precision as mixed

    net, loss_fn, trainer, params = training

    def to_context(batch):
        # To the model's context: a GPU, or from the loader's shared memory (cpu_shared)
        # to cpu, which the cached graph requires.
        x, y = batch
        if x.context != ctx:
            x, y = x.as_in_context(ctx), y.as_in_context(ctx)
            mx.nd.waitall()
        return x, y

    def forward(batch):
        with autograd.record():
            loss = loss_fn(net(batch[0]), batch[1])
            scaled = mixed.scaled(loss, trainer)  # fp16: AMP's loss scale; else loss itself
        scaled.wait_to_read()
        return loss, scaled

    def backward_and_exchange(losses):
        loss, scaled = losses
        start = time.perf_counter()
        scaled.backward()
        # The marker reads one element of every gradient: done when backward compute is.
        marker = mx.nd.add_n(*(p.grad(ctx).reshape((-1,))[0:1] for p in params))
        backward_done = ReadyAt(marker)
        # Per key: when its gradient exists (its push may start) ...
        keys_ready = [ReadyAt(p.grad(ctx).reshape((-1,))[0:1]) for p in params]
        for waiter in (backward_done, *keys_ready):
            waiter.start()
        if on_server:
            trainer.step(1)  # push gradients, servers update, pull weights
        else:
            trainer.allreduce_grads()  # push gradients, pull their sum
        # ... and when its pull has landed (in the weights or in the gradient).
        keys_pulled = [ReadyAt((p.data(ctx) if on_server else p.grad(ctx)).reshape((-1,))[0:1])
                       for p in params]
        for waiter in keys_pulled:
            waiter.start()
        mx.nd.waitall()
        end = time.perf_counter()
        for waiter in (backward_done, *keys_ready, *keys_pulled):
            waiter.join()
        ready = min(backward_done.at or end, end)
        s.add("t_b", ready - start)
        s.add("t_comm", end - ready)
        s.add("t_comm_total", in_flight(
            [(min(r.at or ready, ready), q.at or end) for r, q in zip(keys_ready, keys_pulled,
                                                                      strict=True)],
            ready, end))
        return loss

    def update(loss):
        trainer.update(1)
        mx.nd.waitall()
        return loss

    # With servers the update ran on them, inside trainer.step: the workers have no t_u.
    return s.breakdown([("t_io", lambda _it: next(source)), ("t_h2d", to_context),
                        ("t_f", forward), (None, backward_and_exchange),
                        *([] if on_server else [("t_u", update)])])


def close_kvstore(kv) -> None:
    """Leave the parameter server cleanly: what the KVStore's destructor does.

    It waits for all workers, then worker 0 stops the servers and every node finalizes. The
    harness ends the process with ``os._exit`` (no destructors), and the parameters keep the
    trainer (and so the KVStore) alive anyway: without this the scheduler and the servers
    would wait forever. Freed explicitly, and the handle cleared so it is never freed twice.
    """
    import mxnet as mx
    from mxnet.base import _LIB, check_call

    mx.nd.waitall()
    handle, kv.handle = kv.handle, None
    check_call(_LIB.MXKVStoreFree(handle))


def input_batches(mx, gluon, args, rank: int, workers: int, seed: int):
    """Batches from disk (--data: MXNet RecordIO through Gluon's DataLoader, prefetch on or
    off; a loader thread, not a forked process, beside ps-lite's threads) or a few synthetic
    batches in host memory, cycled (no disk, no decoding)."""
    import itertools

    import numpy as np

    from orchestrator.rankside.mxnet import models as models_mxnet

    shape = models_mxnet.input_shape(args.dataset)
    if not args.data:
        mx.random.seed(1000 + seed)
        classes = models_mxnet.num_classes(args.dataset)
        pool = [(mx.nd.random.normal(shape=(args.batch_size, *shape)),
                 mx.nd.random.randint(0, classes, shape=(args.batch_size,)).astype("float32"))
                for _ in range(4)]
        mx.nd.waitall()
        return itertools.cycle(pool)

    def decode(record):
        header, image = mx.recordio.unpack(record)
        x = np.frombuffer(image, dtype=np.uint8).reshape(shape).astype(np.float32)
        return (x / 255.0 - 0.5) / 0.25, np.float32(header.label)

    records = gluon.data.RecordFileDataset(f"{args.data}/data.rec")
    mine = list(range(rank, len(records), workers))  # this worker's shard

    class Shard(gluon.data.Sampler):
        def __iter__(self):
            return iter(np.random.RandomState(seed).permutation(mine).tolist())

        def __len__(self):
            return len(mine)

    prefetch = args.prefetch == "yes"
    loader = gluon.data.DataLoader(records.transform(decode), batch_size=args.batch_size,
                                   sampler=Shard(), last_batch="discard",
                                   num_workers=1 if prefetch else 0, thread_pool=prefetch,
                                   prefetch=4 if prefetch else None)

    def endless():
        while True:
            yield from loader

    return endless()


def main(argv=None) -> None:
    args = harness.mode_parser(MODE).parse_args(argv)
    if args.update is None:
        args.update = "server" if args.kvstore == "dist_async" else "worker"
    role = os.environ.get("DMLC_ROLE", "worker")
    with harness.rank_log(args, framework="mxnet", mode="mxnet-kvstore") as s:
        if role in ("scheduler", "server"):
            run_ps_node(s, role)
        else:
            train(s, args)


if __name__ == "__main__":
    main()
