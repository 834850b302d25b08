"""cntk, natively: CNTK 2.7's distributed training as its manual writes it (runs under mpirun
or srun --mpi=pmix; Python 3.6): the model, ``cross_entropy_with_softmax``, ``momentum_sgd``
wrapped in the mode's distributed learner (``data_parallel_distributed_learner``, 1-bit, or
``block_momentum_distributed_learner``), a ``Trainer``, then ``trainer.train_minibatch`` per
step; ``Communicator.finalize()`` at the end. One CPU thread, as orch's ranks set it."""

from benchmarks.native._common import Clock, parse_args, report


def main():
    args = parse_args(extra=(("--learner", "data_parallel"),))
    # imports cntk (without its ldconfig calls)
    from orchestrator.rankside.cntk import models as models_cntk

    C = models_cntk.C
    import numpy as np
    from cntk.train import distributed

    C.cntk_py.set_max_num_cputhreads(1)
    C.cntk_py.set_fixed_random_seed(1)
    rank, world = distributed.Communicator.rank(), distributed.Communicator.num_workers()
    shape = models_cntk.input_shape(args.dataset)
    classes = models_cntk.num_classes(args.dataset)
    x, y = C.input_variable(shape), C.input_variable(classes)
    z = models_cntk.build(args.model, args.dataset, x)
    # The mode's learner, as CNTK's manual sets it up (one helper shared with orch's rank).
    trainer, _ = models_cntk.distributed_trainer(z, y, args.learner, args.batch_size, world)
    # The same input as orch's ranks: four synthetic numpy batches, cycled.
    rng = np.random.RandomState(1000 + rank)
    eye = np.eye(classes, dtype=np.float32)
    pool = [(rng.standard_normal((args.batch_size, *shape)).astype(np.float32),
             eye[rng.randint(0, classes, args.batch_size)]) for _ in range(4)]
    clock = Clock(args.warmup)
    for k in range(args.warmup + args.iters):
        clock.step(k)
        xs, ys = pool[k % 4]
        trainer.train_minibatch({x: xs, y: ys})
    report("cntk", rank, args.iters * args.batch_size, clock.done(), clock.steps())
    distributed.Communicator.finalize()


if __name__ == "__main__":
    main()
