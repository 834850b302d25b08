"""chainermn, natively: ChainerMN's tutorial loop: ``chainermn.create_communicator`` (the
mode's communicator), the model, ``create_multi_node_optimizer(MomentumSGD, comm)``,
``optimizer.setup(model)``, then ``optimizer.update(lossfun, x, t)`` per step (its first call
broadcasts rank 0's weights: a warm-up step)."""

from benchmarks.native._common import Clock, parse_args, report


def main():
    args = parse_args(extra=(("--communicator", "naive"),))
    import chainer
    import chainer.functions as F
    import chainermn
    import numpy as np

    from orchestrator.rankside.chainer import models as models_chainer

    comm = chainermn.create_communicator(args.communicator)
    if args.communicator == "pure_nccl":  # pragma: no cover - GPU partitions only
        chainer.cuda.get_device_from_id(comm.intra_rank).use()
    np.random.seed(0)
    model = models_chainer.build(args.model, args.dataset)
    if args.communicator == "pure_nccl":  # pragma: no cover
        model.to_gpu()
    optimizer = chainermn.create_multi_node_optimizer(
        chainer.optimizers.MomentumSGD(lr=0.01, momentum=0.9), comm)
    optimizer.setup(model)
    # The same input as orch's ranks: four synthetic batches in memory, cycled.
    pool = models_chainer.synthetic_pool(model.xp, args.batch_size, args.dataset,
                                         1000 + comm.rank)

    def lossfun(x, t):
        return F.softmax_cross_entropy(model(x), t)

    clock = Clock(args.warmup)
    for k in range(args.warmup + args.iters):
        clock.step(k)
        x, t = pool[k % 4]
        optimizer.update(lossfun, x, t)
    report("chainermn", comm.rank, args.iters * args.batch_size, clock.done(), clock.steps())
    comm.mpi_comm.Barrier()


if __name__ == "__main__":
    main()
