"""ChainerMN rank (Chainer 7.8.1): a zoo model trained with a multi-node optimizer.

ChainerMN does not overlap communication with backward: ``loss.backward()`` computes every
gradient, then the multi-node optimizer's ``update()`` all-reduces (averages) them with the
communicator's ``multi_node_mean_grad`` and applies the wrapped optimizer's step.

Two windows (orchestrator.protocol). The **native** window is Chainer's standard optimizer
step, ``optimizer.update(lossfun, x, t)`` (forward, ``cleargrads``, backward, the multi-node
all-reduce, the momentum-SGD step), wall clock only: samples/s comes from it. For the
**breakdown** window orch then wraps ``multi_node_mean_grad`` on the communicator to time it:

``t_f`` forward + softmax cross-entropy; ``t_b`` ``cleargrads`` + ``loss.backward()`` (compute
only); ``t_comm`` the gradient all-reduce (``naive``: one MPI all-reduce per parameter;
``pure_nccl``: one packed NCCL all-reduce), entirely exposed; ``t_u`` the rest of
``update()``: the momentum-SGD step. ``t_comm_total`` is the communicator's own time in that
call, the step's only communication: equal to ``t_comm`` because nothing runs beside it. On a
single rank there is no one to talk to: the call (a local copy) counts as update, and both
communication figures are 0.

ChainerMN's first ``update()`` only broadcasts rank 0's parameters (it sees a new model); that
broadcast is done once before the first iteration, so every logged iteration is a full step.
"""

import time

from orchestrator.rankside import harness

from .mode import MODE


def parameter_checksum(model) -> float:
    """Sum of all parameters in float64: equal on every rank iff the ranks stayed in sync."""
    import numpy as np

    return float(sum(np.asarray(p.array, dtype=np.float64).sum() for p in model.params()))


def breakdown(s, F, comm, model, optimizer, pool):
    """The breakdown window: forward, backward, then ``optimizer.update()``, whose
    multi-node mean of the gradients (the all-reduce, run alone) is timed by wrapping the
    communicator's call. Returns the last loss."""
    timing = {"comm": 0.0}
    mean_grad = comm.multi_node_mean_grad

    def timed_mean_grad(*a, **kw):
        t0 = time.perf_counter()
        try:
            return mean_grad(*a, **kw)
        finally:
            timing["comm"] += time.perf_counter() - t0

    comm.multi_node_mean_grad = timed_mean_grad
    alone = comm.size == 1  # nothing to communicate

    def forward(batch):
        return F.softmax_cross_entropy(model(batch[0]), batch[1])

    def backward(loss):
        model.cleargrads()
        loss.backward()
        return loss

    def update(loss):  # the optimizer's update holds the all-reduce, timed by the wrapper
        timing["comm"] = 0.0
        t0 = time.perf_counter()
        optimizer.update()
        whole = time.perf_counter() - t0
        comm_s = 0.0 if alone else timing["comm"]
        s.add("t_comm", comm_s)
        s.add("t_comm_total", comm_s)  # measured: the all-reduce call, which runs alone
        s.add("t_u", whole - comm_s)
        return loss

    return s.breakdown([("t_io", lambda it: pool[it % len(pool)]), ("t_f", forward),
                        ("t_b", backward), (None, update)])


def main(argv=None) -> None:
    args = harness.mode_parser(MODE).parse_args(argv)
    with harness.rank_log(args, framework="chainer", mode="chainermn") as s:
        import chainer
        import chainer.functions as F
        import chainermn
        import mpi4py
        import numpy as np
        from mpi4py import MPI

        from orchestrator.rankside.chainer import models as models_chainer

        comm = chainermn.create_communicator(args.communicator)
        info = s.info
        if comm.rank != info.rank or comm.size != info.world_size:
            raise RuntimeError(f"ChainerMN says rank {comm.rank} of {comm.size}, the launcher "
                               f"rank {info.rank} of {info.world_size}")
        gpu = args.communicator == "pure_nccl"
        if gpu:  # pragma: no cover - GPU partitions only
            chainer.cuda.get_device_from_id(comm.intra_rank).use()
        library = MPI.Get_library_version().split(",")[0].strip("\x00 \n")
        s.footer["versions"] = harness.versions(chainer=chainer.__version__,
                                                numpy=np.__version__,
                                                mpi4py=mpi4py.__version__, mpi=library)
        s.footer["communicator"] = args.communicator
        np.random.seed(0)
        model = models_chainer.build(args.model, args.dataset, args.classes)
        if gpu:  # pragma: no cover
            model.to_gpu()
        xp = model.xp
        optimizer = chainermn.create_multi_node_optimizer(
            chainer.optimizers.MomentumSGD(lr=0.01, momentum=0.9), comm)
        optimizer.setup(model)
        # What the first update() would do: record the model and broadcast rank 0's weights.
        optimizer.is_changed(model)
        comm.bcast_data(model)

        if args.epochs:  # time to accuracy: shares by chainermn.scatter_dataset
            from orchestrator.rankside.chainer import epochs as epochs_chainer

            epochs_chainer.train(s, args, info, comm, model, optimizer)
            s.footer["param_checksum"] = parameter_checksum(model)
            comm.mpi_comm.Barrier()
            MPI.Finalize()  # as at the end below
            return

        pool = models_chainer.synthetic_pool(xp, args.batch_size, args.dataset, 1000 + info.rank)
        if args.data:  # orch's raw records, read into memory once
            from orchestrator.rankside.common.epochs import raw_pool

            pool = [(xp.asarray(x), xp.asarray(t)) for x, t in raw_pool(args, comm.rank,
                                                                         comm.size)]

        def lossfun(x, t):
            return F.softmax_cross_entropy(model(x), t)

        for it in s.native_iterations():  # Chainer's standard step, wall clock only
            x, t = pool[it % len(pool)]
            optimizer.update(lossfun, x, t)

        loss = breakdown(s, F, comm, model, optimizer, pool)
        s.footer["param_checksum"] = parameter_checksum(model)
        s.footer["loss"] = float(loss.array)
        comm.mpi_comm.Barrier()
        # The harness ends the process with os._exit: finalize MPI here (mpirun would report
        # a rank that "exited without calling finalize").
        MPI.Finalize()


if __name__ == "__main__":
    main()
