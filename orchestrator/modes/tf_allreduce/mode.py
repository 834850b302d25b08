"""TensorFlow MultiWorkerMirroredStrategy: synchronous all-reduce, one worker per task.

Every task is a worker (the default placement); ``TF_CONFIG`` lists them all. The all-reduce
implementation is NCCL on GPU partitions and TensorFlow's gRPC ring collectives on CPU ones.
"""

from ..base import Mode, Option
from ..tf_options import RUN_DIMENSIONS

MODE = Mode(
    name="tf-allreduce",
    framework="tensorflow",
    description="TensorFlow MultiWorkerMirroredStrategy, gradients all-reduced after backward "
                "(NCCL or ring)",
    library="tensorflow",
    data_format="tfrecord",  # tf.data over TFRecord files (orch data make --format tfrecord)
    launchers=("srun", "local"),
    epochs=True,
    # MWMS packs every gradient into one collective (bytes_per_pack 0), which starts only
    # when backward has produced the last one: nothing is hidden behind backward.
    overlap="none",
    options=(
        Option(
            name="implementation",
            choices=("nccl", "ring"),
            help="collective implementation; default nccl on GPU partitions, ring on CPU ones",
        ),
        *RUN_DIMENSIONS,
    ),
)
