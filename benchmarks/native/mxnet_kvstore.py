"""mxnet-kvstore, natively: MXNet's "Distributed training with KVStore" / Gluon way. The role
comes from ``DMLC_ROLE`` (the launch script sets it): a scheduler or server is started by
``import mxnet`` itself, which returns (exits) when the workers are done. A worker creates
``mx.kv.create(kvstore)``, a Gluon ``Trainer`` over it (``update_on_kvstore`` as the mode's
``update`` option says), and loops ``autograd.record()`` forward and loss,
``loss.backward()``, ``trainer.step(batch_size)``; no timers or waits in the loop, one
``mx.nd.waitall()`` at the end of the timed steps."""

import itertools
import os

from benchmarks.native._common import Clock, parse_args, report


def main():
    args = parse_args(extra=(("--kvstore", "dist_sync"), ("--update", None)))
    import mxnet as mx  # a scheduler or server runs here and never returns
    from mxnet import autograd, gluon

    from orchestrator.rankside.mxnet import models as models_mxnet

    update = args.update or ("server" if args.kvstore == "dist_async" else "worker")
    kv = mx.kv.create(args.kvstore)
    mx.random.seed(0)
    net = models_mxnet.build(args.model, args.dataset)
    net.initialize(mx.init.Xavier(magnitude=2), ctx=mx.cpu())
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "sgd",
                            {"learning_rate": 0.01, "momentum": 0.9}, kvstore=kv,
                            update_on_kvstore=update == "server")
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    # The same input as orch's workers: four synthetic batches in host memory, cycled.
    shape = models_mxnet.input_shape(args.dataset)
    classes = models_mxnet.num_classes(args.dataset)
    mx.random.seed(1000 + int(os.environ.get("ORCH_ROLE_INDEX", "0")))
    batches = itertools.cycle([
        (mx.nd.random.normal(shape=(args.batch_size, *shape)),
         mx.nd.random.randint(0, classes, shape=(args.batch_size,)).astype("float32"))
        for _ in range(4)])
    clock = Clock(args.warmup)
    for k in range(args.warmup + args.iters):
        if k == args.warmup:
            mx.nd.waitall()  # the warm-up steps are done before the clock starts
        clock.step(k)
        x, y = next(batches)
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(args.batch_size)
    mx.nd.waitall()
    # No median step: the loop only queues its steps (the clock sees enqueue times), so the
    # window's rate is the only figure comparable with orch's.
    report("mxnet-kvstore", kv.rank, args.iters * args.batch_size, clock.done())


if __name__ == "__main__":
    main()
