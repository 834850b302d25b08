"""CNTK 2.7 rank (runs on CNTK's Python 3.6): a zoo model trained by a distributed learner.

CNTK does not hide communication: ``Trainer.train_minibatch`` runs forward, backward, then the
distributed learner's update, which aggregates (all-reduces) the gradients over MPI and only
then applies the local learner's step, all in one C++ call. orch cannot time inside that call,
so it puts two identity user functions (``Stamp``) into the network that timestamp when CNTK
passes through them: one on the first layer's output, one on the logits.

- ``t_f``: call start -> the logits' backward stamp: forward, plus the softmax cross-entropy
  forward and its backward (tiny);
- ``t_b``: logits' backward stamp -> first layer's backward stamp: backward compute through
  every layer but the first (whose weight gradient falls into ``t_comm``);
- ``t_comm``: first layer's backward stamp -> the call returns: the first layer's weight
  gradient, the gradient aggregation (all-reduce; 1-bit quantisation with ``one_bit_sgd``; the
  model averaging with ``block_momentum``) and the local momentum-SGD step, which CNTK applies
  inside the same distributed-learner call and which cannot be separated from Python;
- ``t_u``: 0, because the update is inside ``t_comm`` (see above). On a single rank nothing is
  aggregated: that span is first-layer gradient + update, and counts as ``t_u`` (``t_comm`` 0).

So ``t_comm`` is an upper bound of the exposed communication; for the small update of these
models on CPU it is dominated by the aggregation. The split is recorded in the footer
(``phase_split``). The stamps copy nothing (``as_numpy=False``). ``t_comm_total`` is not
recorded: the aggregation cannot be timed apart from the update inside CNTK's C++ call (the
footer's ``comm_total_reason``).

Two windows (orchestrator.protocol). The stamps are Python callbacks inside the graph, so the
**native** window trains the same network without them: the model is built once with a
placeholder after its first layer and cloned twice sharing every parameter (``CloneMethod.
share``): plainly, and with the stamps. The native window runs CNTK's standard
``trainer.train_minibatch`` with its own distributed learner on the plain clone, wall clock
only (samples/s comes from it); the **breakdown** window then trains the stamped clone.

All ranks start from the same weights (CNTK's fixed random seed); the data-parallel learners
keep them equal, and with ``block_momentum`` a block is one global minibatch, so every rank
ends every iteration with the same parameters: the footer's ``param_checksum`` must agree.
"""

import time

from orchestrator import protocol
from orchestrator.rankside import harness

from .mode import MODE

COMM_TOTAL_REASON = ("CNTK aggregates gradients inside the distributed learner's C++ update "
                     "call, not separable from the first layer's gradient and the update "
                     "(t_comm, an upper bound of the exposed part)")
PHASE_SPLIT = ("t_f: forward + loss (to the logits' backward stamp); t_b: backward to the first "
               "layer's output; t_comm: first layer's weight gradient + gradient aggregation + "
               "local SGD step (one C++ call, not separable); t_u: 0 (inside t_comm)")


def make_stamp(C, stamps, tag):
    """An identity CNTK user function that records when forward and backward pass it."""
    from cntk.ops.functions import UserFunction

    class Stamp(UserFunction):
        def __init__(self, arg, name="Stamp"):
            super().__init__([arg], as_numpy=False, name=name)

        def forward(self, argument, device=None, outputs_to_retain=None):
            stamps[tag + "_f"] = time.perf_counter()
            return None, argument

        def backward(self, state, root_gradients):
            stamps[tag + "_b"] = time.perf_counter()
            return root_gradients

        def infer_outputs(self):
            i = self.inputs[0]
            return [C.output_variable(i.shape, i.dtype, i.dynamic_axes)]

    return lambda h: C.user_function(Stamp(h))


def twin_networks(C, models_cntk, args, x, classes, stamps):
    """(plain, stamped): the model on ``x`` (``classes`` outputs) twice, sharing every
    parameter; the stamped one has a :func:`make_stamp` after its first layer and one on its
    logits."""
    cut = {}

    def after_first(h):
        cut["h"] = h
        cut["p"] = C.placeholder(shape=h.shape)
        return cut["p"]

    body = models_cntk.build(args.model, args.dataset, x, after_first=after_first,
                             classes=classes)
    plain = body.clone(C.CloneMethod.share, {cut["p"]: cut["h"]})
    first = make_stamp(C, stamps, "first")(cut["h"])
    stamped = body.clone(C.CloneMethod.share, {cut["p"]: first})
    return plain, make_stamp(C, stamps, "logits")(stamped)


def parameter_checksum(z) -> float:
    """Sum of all parameters in float64: equal on every rank iff the ranks stayed in sync."""
    import numpy as np

    return float(sum(np.asarray(p.value, dtype=np.float64).sum() for p in z.parameters))


def main(argv=None) -> None:
    args = harness.mode_parser(MODE).parse_args(argv)
    with harness.rank_log(args, framework="cntk", mode="cntk") as s:
        # models_cntk first: it imports cntk without CNTK's import-time ldconfig calls.
        from orchestrator.rankside.cntk import models as models_cntk

        C = models_cntk.C
        import numpy as np
        from cntk.train import distributed

        C.cntk_py.set_max_num_cputhreads(1)
        C.cntk_py.set_fixed_random_seed(1)  # the same initial weights on every rank
        info = s.info
        rank, world = distributed.Communicator.rank(), distributed.Communicator.num_workers()
        if rank != info.rank or world != info.world_size:
            raise RuntimeError(f"CNTK's MPI says rank {rank} of {world}, the launcher rank "
                               f"{info.rank} of {info.world_size}")
        s.footer["versions"] = harness.versions(cntk=C.__version__, numpy=np.__version__)
        s.footer["learner"] = args.learner
        s.footer["phase_split"] = PHASE_SPLIT

        stamps = {}
        shape = models_cntk.input_shape(args.dataset)
        classes = args.classes or models_cntk.num_classes(args.dataset)  # the output width
        x = C.input_variable(shape)
        y = C.input_variable(classes)
        plain, stamped = twin_networks(C, models_cntk, args, x, classes, stamps)

        native, native_learner = models_cntk.distributed_trainer(plain, y, args.learner,
                                                                 args.batch_size, world)
        s.footer[protocol.COMM_TOTAL_REASON] = COMM_TOTAL_REASON
        if args.epochs:  # time to accuracy: each rank its share of the minibatches
            from orchestrator.rankside.cntk import epochs as epochs_cntk

            epochs_cntk.train(s, args, info, C, native, x, y, plain, classes)
            s.footer["param_checksum"] = parameter_checksum(plain)
            native_learner.communicator().barrier()
            distributed.Communicator.finalize()  # as at the end below
            return

        # Synthetic data in host memory: a few distinct numpy batches, cycled.
        rng = np.random.RandomState(1000 + info.rank)
        eye = np.eye(classes, dtype=np.float32)
        pool = [(rng.standard_normal((args.batch_size, *shape)).astype(np.float32),
                 eye[rng.randint(0, classes, args.batch_size)]) for _ in range(4)]
        if args.data:  # orch's raw records, read into memory once
            from orchestrator.rankside.common.epochs import raw_pool

            pool = [(xs, eye[ys]) for xs, ys in raw_pool(args, rank, world)]

        for it in s.native_iterations():  # CNTK's standard step, wall clock only
            xs, ys = pool[it % len(pool)]
            native.train_minibatch({x: xs, y: ys})

        # The breakdown window's trainer, only now: nothing of it exists while the native
        # window runs (and a block-momentum learner starts from the parameters as they are).
        trainer, learner = models_cntk.distributed_trainer(stamped, y, args.learner,
                                                           args.batch_size, world)
        alone = world == 1  # nothing to aggregate
        def train(batch):  # one call: the stamps inside the graph split it into phases
            xs, ys = batch
            stamps.clear()
            t0 = time.perf_counter()
            trainer.train_minibatch({x: xs, y: ys})
            t1 = time.perf_counter()
            b_start = stamps.get("logits_b", t1)
            b_end = stamps.get("first_b", b_start)
            s.add("t_f", b_start - t0)
            s.add("t_b", b_end - b_start)
            s.add("t_comm", 0.0 if alone else t1 - b_end)
            s.add("t_u", t1 - b_end if alone else 0.0)

        s.breakdown([("t_io", lambda it: pool[it % len(pool)]), (None, train)])
        s.footer["param_checksum"] = parameter_checksum(stamped)
        s.footer["loss"] = float(trainer.previous_minibatch_loss_average)
        learner.communicator().barrier()
        # The harness ends the process with os._exit (no atexit): finalize MPI here, or mpirun
        # reports a rank that "exited without calling finalize". Only on success: a failed rank
        # exits and mpirun stops the others.
        distributed.Communicator.finalize()


if __name__ == "__main__":
    main()
