"""Mixed precision in mxnet-kvstore: the run dimension ``precision`` through MXNet's own AMP
(``mxnet.contrib.amp``), as its guide applies it to a Gluon network.

``amp.init(target_dtype)`` before the network is built makes MXNet's operators on its lists run
in ``bfloat16`` / ``float16`` (casting their inputs; weights stay float32, the loss float32);
for fp16, ``amp.init_trainer`` gives the Gluon trainer a dynamic loss scaler, the loss is
scaled inside ``autograd.record`` (:func:`scaled`) and the trainer skips a step whose
gradients overflowed. Where the build or the node cannot run it, the rank stops at once with
one line naming the mode: bf16 takes MXNet's oneDNN (MKLDNN) operators and, on a CPU, AVX-512
(their bfloat16 kernels), fp16 a GPU (MXNet's CPU operators have no float16 GEMM: "FP16 gemm on
cpu not implemented").

MXNet is passed in (``mx``), as in the rest of the rank side.
"""

from __future__ import annotations

TARGETS = {"bf16": "bfloat16", "fp16": "float16"}
# The oneDNN that MXNet 1.9 links has bfloat16 kernels from AVX-512 up (its avx512_core: these
# four); on an AVX2-only CPU every bfloat16 convolution and dense layer fails with "could not
# create a primitive descriptor iterator" (seen on an AMD EPYC 7003 node).
BF16_CPU_FLAGS = ("avx512f", "avx512bw", "avx512vl", "avx512dq")


def cpu_flags(path: str = "/proc/cpuinfo") -> set[str] | None:
    """The CPU's feature flags as the kernel lists them; None where it cannot be read."""
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.partition(":")[2].split())
    except OSError:
        return None
    return None


def unavailable(mx, precision: str, on_gpu: bool,
                flags: set[str] | None = None) -> str | None:
    """Why this MXNet build or node cannot run ``precision`` (None: it can); ``flags``: the
    node's CPU flags (cpu_flags; None: not known, not checked)."""
    if precision == "bf16" and not mx.runtime.Features().is_enabled("MKLDNN"):
        return "this MXNet build has no oneDNN (MKLDNN), whose operators its bfloat16 AMP runs"
    missing = [f for f in BF16_CPU_FLAGS if flags is not None and f not in flags]
    if precision == "bf16" and not on_gpu and missing:
        return (f"this node's CPU has no AVX-512 ({', '.join(missing)} missing), and the "
                "oneDNN operators MXNet's bfloat16 AMP runs need it; use fp32 here")
    if precision == "fp16" and not on_gpu:
        return ("MXNet's float16 AMP needs a GPU (its CPU operators have no float16 GEMM); "
                "use bf16 on CPU partitions")
    return None


def setup(mx, precision: str, on_gpu: bool) -> dict:
    """AMP for ``precision``, before the network is built; the footer's record of it. A
    precision this build or node cannot run raises one line naming the mode."""
    if precision not in TARGETS:
        return {"precision": precision}
    why = unavailable(mx, precision, on_gpu, cpu_flags())
    if why:
        raise RuntimeError(f"mode 'mxnet-kvstore': precision={precision}: {why}")
    from mxnet.contrib import amp

    amp.init(target_dtype=TARGETS[precision])
    return {"precision": precision, "amp": TARGETS[precision]}


def init_trainer(precision: str, trainer) -> None:
    """fp16: the trainer's dynamic loss scaler (it skips a step whose gradients overflow)."""
    if precision == "fp16":
        from mxnet.contrib import amp

        amp.init_trainer(trainer)


def scaled(loss, trainer):
    """The loss to run backward from (inside ``autograd.record``): scaled by the trainer's AMP
    loss scaler, which also sets the trainer's gradient rescale to undo it; else ``loss``."""
    if getattr(trainer, "_amp_loss_scaler", None) is None:
        return loss
    from mxnet.contrib import amp

    with amp.scale_loss(loss, trainer) as scaled_loss:
        return scaled_loss


def dtype_name(dtype) -> str:
    """An NDArray dtype's name; MXNet's bfloat16 is a numpy record dtype named bfloat16."""
    import numpy as np

    names = getattr(dtype, "names", None)
    return names[0] if names else np.dtype(dtype).name


def footer_facts(out_dtype, trainer) -> dict:
    """What the footer says happened: the dtype the network's output was computed in and, for
    fp16, the loss scale the run ended with."""
    out = {"activation_dtype": dtype_name(out_dtype) if out_dtype is not None else None}
    scaler = getattr(trainer, "_amp_loss_scaler", None)
    if scaler is not None:
        out["loss_scale"] = float(scaler.loss_scale)
    return out
