"""Mixed precision in the TensorFlow modes: the run dimension ``precision``
(:mod:`orchestrator.modes.tf_options`), applied as Keras' mixed precision applies it.

orch's TensorFlow models are ``tf.Module`` networks (:mod:`.models`, no Keras layers), so
Keras' global policy alone would change nothing in them. :class:`Autocast` does for them what
the policy does for a Keras layer: the variables stay float32 (the policy's variable dtype),
every layer reads them cast to the policy's compute dtype (``models.compute_in``: Keras'
AutoCastVariable), the input is cast to it, and the logits come back as float32, so that the
loss and the gradients of the variables are float32. Batch normalisation keeps its scale and
offset in float32, as Keras' BatchNormalization does. The dtypes come from Keras' own
``Policy("mixed_bfloat16" | "mixed_float16")``.

fp16 scales the loss: the native step's optimizer is Keras' ``LossScaleOptimizer`` (dynamic
scale: halved on a step with non-finite gradients, which it skips, doubled after 2,000 good
ones); the breakdown steps scale by the scale the native window ended with and skip a step
whose gradients are not finite, the same way (:func:`skip_if_not_finite`). The epoch runs
step with orch's own update, so they keep a LossScaleOptimizer only for its dynamic scale
(:func:`loss_scaler`) and move that scale by Keras' rule themselves (:func:`rescale`).

TensorFlow is passed in (``tf``), as in :mod:`.common`.
"""

from __future__ import annotations

POLICIES = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


def setup(tf, precision: str) -> dict:
    """Apply ``precision`` process-wide before the model is built (TF32 on or off, Keras'
    global policy); the footer's record of it."""
    tf.config.experimental.enable_tensor_float_32_execution(precision == "tf32")
    facts = {"precision": precision,
             "tf32": tf.config.experimental.tensor_float_32_execution_enabled()}
    if precision in POLICIES:
        tf.keras.mixed_precision.set_global_policy(POLICIES[precision])
        facts["policy"] = POLICIES[precision]
    return facts


def compute_dtype(tf, precision: str):
    """The policy's compute dtype (a ``tf.DType``), None for fp32/tf32."""
    if precision not in POLICIES:
        return None
    return tf.as_dtype(tf.keras.mixed_precision.Policy(POLICIES[precision]).compute_dtype)


def autocast(tf, model, precision: str):
    """``model`` computing in ``precision``'s compute dtype (:class:`Autocast`); the model
    itself for fp32/tf32."""
    dtype = compute_dtype(tf, precision)
    if dtype is None:
        return model
    from . import models

    class Autocast(tf.Module):
        """Wraps a model: input cast to ``dtype``, layers reading their variables in it,
        logits cast back to float32. Its variables are the model's, in the same order."""

        def __init__(self, inner) -> None:
            super().__init__(name=f"autocast_{dtype.name}")
            self.inner = inner
            self.computed_in = None  # the logits' dtype before the cast back (at trace)

        def __call__(self, x, training: bool = True):
            with models.compute_in(dtype):
                logits = self.inner(tf.cast(x, dtype), training=training)
            self.computed_in = logits.dtype.name
            return tf.cast(logits, tf.float32)

    return Autocast(model)


def optimizer(tf, precision: str, inner):
    """The native step's optimizer: ``inner``, wrapped in Keras' LossScaleOptimizer for
    fp16."""
    if precision != "fp16":
        return inner
    return tf.keras.mixed_precision.LossScaleOptimizer(inner)


def loss_scale(opt) -> object | None:
    """The current dynamic loss scale of a LossScaleOptimizer (a variable), else None."""
    return getattr(opt, "dynamic_scale", None)


def scaled(opt, loss):
    """The loss to differentiate: scaled by a LossScaleOptimizer, else ``loss`` itself."""
    return opt.scale_loss(loss) if loss_scale(opt) is not None else loss


def unscaled(tf, scale, grads):
    """Gradients of a loss multiplied by ``scale`` (a tensor or None), divided back."""
    if scale is None:
        return grads
    inverse = 1.0 / tf.cast(scale, tf.float32)
    return [g * inverse for g in grads]


def loss_scaler(tf, strategy, precision: str):
    """fp16: a LossScaleOptimizer made in ``strategy``'s scope for its dynamic loss scale
    alone (its scale and its count of good steps; no slot of any variable), for a step whose
    update is orch's own; None otherwise. Its scale starts where Keras starts it."""
    if precision != "fp16":
        return None
    with strategy.scope():
        opt = optimizer(tf, precision, tf.keras.optimizers.SGD())
        opt.build([])
    return opt


def all_finite(tf, grads):
    """Whether every gradient is finite (a boolean tensor)."""
    return tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])


def rescale(tf, opt, finite) -> list:
    """Keras' dynamic loss-scale rule, applied to ``opt``'s (a LossScaleOptimizer's) own
    variables after a step whose gradients were all finite or not (``finite``): halved, its
    count of good steps restarted, after a non-finite step; doubled after
    ``dynamic_growth_steps`` finite steps in a row. Returns the two assignments."""
    scale, count = opt.dynamic_scale, opt.step_counter
    grow = tf.logical_and(finite, tf.equal(count, opt.dynamic_growth_steps - 1))
    new_scale = tf.where(finite, tf.where(grow, scale * 2.0, scale * 1.0), scale * 0.5)
    new_count = tf.where(tf.logical_and(finite, tf.logical_not(grow)), count + 1, count * 0)
    return [scale.assign(new_scale), count.assign(new_count)]


def rescaler(tf, opt):
    """``after(grads)``: :func:`rescale` of ``opt`` by a step's gradients, as one
    ``tf.function`` (run where the variables may be assigned: outside ``strategy.run`` for
    a mirrored scale); None without a loss scale."""
    if loss_scale(opt) is None:
        return None

    @tf.function
    def after(grads):
        rescale(tf, opt, all_finite(tf, grads))

    return after


def skip_if_not_finite(tf, grads, lr, momentum):
    """``(grads, lr, momentum)`` for a momentum update that leaves the variables and their
    momentum as they are when a gradient is not finite (inf/NaN from fp16 overflow), as
    LossScaleOptimizer skips such a step: gradient 0, momentum 1, learning rate 0."""
    finite = all_finite(tf, grads)
    grads = [tf.where(finite, g, tf.zeros_like(g)) for g in grads]
    return (grads, tf.where(finite, lr, tf.zeros_like(lr)),
            tf.where(finite, momentum, tf.ones_like(momentum)))


def footer_facts(model, opt) -> dict:
    """What the footer says happened: the logits' compute dtype and, for fp16, the dynamic
    loss scale the run ended with."""
    out = {"activation_dtype": getattr(model, "computed_in", None) or "float32"}
    scale = loss_scale(opt)
    if scale is not None:
        out["loss_scale"] = float(scale.numpy())
    return out
