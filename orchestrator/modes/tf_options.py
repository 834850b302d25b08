"""The run dimensions the TensorFlow modes take (tf-allreduce, tf-ps), declared once here; each
TensorFlow ``mode.py`` adds :data:`RUN_DIMENSIONS` to its options, and the rank side applies
them in :mod:`orchestrator.rankside.tf.precision`.

* ``precision``: ``fp32`` (TF32 off: TensorFlow's own default runs float32 matmuls and
  convolutions in TF32 on Ampere and newer GPUs), ``tf32`` (TF32 on; on a CPU it is fp32),
  ``bf16`` / ``fp16``: Keras' mixed precision policies ``mixed_bfloat16`` / ``mixed_float16``
  (variables in float32, computation in the policy's compute dtype, logits and loss in
  float32), fp16 with Keras' ``LossScaleOptimizer`` (dynamic loss scaling). The same name and
  values as the torch modes' ``precision``, so one column of the runs table holds both.

``omit_default``: a run at fp32 leaves it out of its options, so its run id is the one it had
before the option existed. Kept valid Python 3.6 like :mod:`.base` (the registry loads every
mode descriptor).
"""

from .base import precision_option

PRECISION = precision_option(
    help="fp32 (TF32 off); tf32 (TF32 matmuls/convolutions on GPUs, fp32 on CPUs); bf16 or "
    "fp16: Keras' mixed_bfloat16 / mixed_float16 policy (fp16 with a LossScaleOptimizer)",
)

RUN_DIMENSIONS = (PRECISION,)
