"""The run dimensions every PyTorch mode takes (torch-ddp, torch-fsdp, mpi-ssgd, horovod): how
GPU users run a training step beyond the plain fp32 loop. Declared once here; each torch
``mode.py`` adds :data:`RUN_DIMENSIONS` to its options, and the rank side applies them in
:mod:`orchestrator.rankside.torch.common` (:class:`~orchestrator.rankside.torch.common.Dims`).

* ``precision``: ``fp32`` (TF32 off everywhere: cuDNN's own default would run convolutions in
  TF32), ``tf32`` (fp32 tensors, TF32 matmuls and convolutions on GPUs; on a CPU it is fp32),
  ``bf16`` / ``fp16`` (automatic mixed precision: ``torch.autocast`` around forward and loss;
  fp16 also scales the loss with ``torch.amp.GradScaler``). torch 2.13 autocasts both on the
  CPU too, so every value runs on CPU partitions.
* ``memory_format``: ``nchw`` (PyTorch's default) or ``nhwc`` (``torch.channels_last``, model
  and input batches).
* ``compile``: ``no``, or ``torch.compile`` with mode ``default`` / ``max-autotune``; the
  compile step runs before the measured window and its time is the footer's ``t_compile``.
* ``pin_memory``: host batches in pinned memory, copied with ``non_blocking=True`` (a no-op on
  a CPU, where nothing is copied).
* ``cudnn_benchmark``: ``torch.backends.cudnn.benchmark``: cuDNN times the convolution
  algorithms for each new input shape on its first batches and keeps the fastest, as NVIDIA's
  DeepLearningExamples train (the warm-up iterations absorb the search; a no-op on a CPU).

Each is ``omit_default``: a run at the default leaves it out of its options, so its run id is
the one it had before these options existed. Imported by the control plane only, but kept
valid Python 3.6 like :mod:`.base` (the registry loads every mode descriptor).

Beside them, options only some torch modes take: :data:`BACKEND` (torch-ddp, torch-fsdp,
allreduce-bench) and :data:`COMM_DELAY` (torch-ddp).
"""

from .base import Option, precision_option

RUN_DIMENSIONS = (
    precision_option(
        help="fp32; tf32 (TF32 matmuls/convolutions on GPUs, fp32 on CPUs); bf16 or fp16 "
        "automatic mixed precision (torch.autocast; fp16 with a GradScaler)",
    ),
    Option(
        name="memory_format",
        choices=("nchw", "nhwc"),
        default="nchw",
        omit_default=True,
        help="nhwc: model and input batches in torch.channels_last",
    ),
    Option(
        name="compile",
        choices=("no", "default", "max-autotune"),
        default="no",
        omit_default=True,
        help="torch.compile the model with this mode; compile time is timed apart "
        "(t_compile) before the measured window",
    ),
    Option(
        name="pin_memory",
        choices=("yes", "no"),
        default="yes",
        omit_default=True,
        help="on a GPU: input batches in pinned host memory, copied with non_blocking=True "
        "(a no-op on CPUs)",
    ),
    Option(
        name="cudnn_benchmark",
        choices=("no", "yes"),
        default="no",
        omit_default=True,
        help="yes: cuDNN times its convolution algorithms per input shape in the first "
        "batches and keeps the fastest (torch.backends.cudnn.benchmark; a no-op on CPUs)",
    ),
)

# The dimensions the result set gives a column each (the runs table), beside ``options``.
COLUMNS = tuple(o.name for o in RUN_DIMENSIONS)

# The collective backend of the modes that choose one through torch.distributed (torch-ddp,
# torch-fsdp, allreduce-bench); without the option a run takes nccl on GPU partitions, gloo on
# CPU ones.
BACKEND = Option(
    name="backend",
    choices=("nccl", "gloo"),
    help="collective backend; default nccl on GPU partitions, gloo on CPU ones",
)

# Not a run dimension but a test aid: every all-reduce of the rank completes this many
# milliseconds late, a fabric made slow on purpose, so that a real slowdown of the
# communication phase can be measured and ``orch compare`` shown to find and attribute it
# (docs/howto/compare.md). torch-ddp takes it.
COMM_DELAY = Option(
    name="comm_delay_ms",
    default="0",
    minimum=0,
    omit_default=True,
    help="a test aid: every all-reduce completes this many milliseconds late (a slow fabric)",
)
