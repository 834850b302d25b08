"""CNTK 2.7's distributed learners over MPI (the papers' own framework): the gradient exchange
runs after backward, inside the learner's update, and is never hidden behind computation."""

from ..base import Mode, Option

MODE = Mode(
    name="cntk",
    framework="cntk",
    description="CNTK 2.7 distributed learner over MPI: data-parallel all-reduce, 1-bit SGD or "
    "block momentum, communication after backward (not hidden)",
    library="cntk",
    # CNTK's ranks are MPI processes (its own MPI communicator): srun --mpi=pmix or mpirun on a
    # cluster, mpirun on the local site.
    launchers=("srun", "mpirun"),
    mpi=True,
    data_format="raw",  # orch's raw records, read with numpy (--data)
    epochs=True,
    options=(
        Option(
            name="learner",
            choices=("data_parallel", "one_bit_sgd", "block_momentum"),
            default="data_parallel",
            help="data_parallel: data_parallel_distributed_learner (32-bit gradient all-reduce "
            "every minibatch); one_bit_sgd: the same with 1-bit quantized gradients and error "
            "feedback; block_momentum: block_momentum_distributed_learner, model averaging "
            "with block momentum, one block = one global minibatch",
        ),
    ),
)
