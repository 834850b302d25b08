"""Mixed precision beyond torch: ``precision`` of the TensorFlow modes (modes/tf_options.py,
rankside/tf/precision.py) and of mxnet-kvstore (MXNet's AMP, rankside/mxnet/precision.py),
and the one-line refusal where a mode's framework has none.

The declarations and the refusals are fast. The frameworks run in their environments: the
TensorFlow pieces on real tensors (the policy's dtypes, the autocast model's gradients, fp16's
LossScaleOptimizer and the skipped non-finite step), and one short real local sweep of
tf-allreduce, tf-ps and mxnet-kvstore in bf16, which both frameworks run on a CPU (MXNet
through its oneDNN operators, from AVX-512 up: a node without it says so in one line, as a CPU
rank does of MXNet's fp16, which needs a GPU).
One epoch of the digits in fp16 runs both TensorFlow modes' epoch steps with their loss scale.
Nothing about speed is asserted.
"""

from __future__ import annotations

import json
import math
import subprocess

import pandas as pd
import pytest

from orchestrator import modes, protocol
from orchestrator.modes.base import PRECISIONS, precision_option
from orchestrator.modes.tf_options import PRECISION
from orchestrator.modes.torch_options import RUN_DIMENSIONS as TORCH_DIMENSIONS
from orchestrator.plan.sweep import SweepSpec, expand
from orchestrator.rankside import harness
from orchestrator.site import load

from .conftest import ROOT, built_python, rank0_log, run_orch

TF_MODES = ("tf-allreduce", "tf-ps")
BF16_MODES = (*TF_MODES, "mxnet-kvstore")
ITERS, WARMUP = 3, 1


# --- declarations and refusals (fast) --------------------------------------------------------


@pytest.mark.parametrize("name", TF_MODES)
def test_tf_modes_take_the_one_declaration(name):
    assert any(o is PRECISION for o in modes.get(name).options)
    torch_precision = next(o for o in TORCH_DIMENSIONS if o.name == "precision")
    # One column of the runs table holds both: the same name, values and default.
    assert (PRECISION.choices, PRECISION.default) == (torch_precision.choices,
                                                      torch_precision.default)


def test_every_precision_option_comes_from_the_one_factory():
    """torch's, TensorFlow's and MXNet's precision differ only in the values a framework
    leaves out and in their help: one column, fp32 left out of a run's options."""
    found = {name: o for name, m in modes.registry().items() for o in m.options
             if o.name == "precision"}
    assert {"torch-ddp", "tf-allreduce", "mxnet-kvstore"} <= set(found)
    for name, o in found.items():
        assert (o.default, o.omit_default) == ("fp32", True), name
        assert o.choices == tuple(p for p in PRECISIONS if p in o.choices), name
    assert found["mxnet-kvstore"].choices == ("fp32", "bf16", "fp16")
    assert found["torch-ddp"].choices == found["tf-allreduce"].choices == PRECISIONS
    with pytest.raises(ValueError, match="int8"):
        precision_option(help="", exclude=("int8",))


def test_fp32_keeps_the_run_ids_of_before():
    site = load("local")[0]
    plain = expand(SweepSpec(nodes=(2,), modes=TF_MODES), site)
    fp32 = expand(SweepSpec(nodes=(2,), modes=TF_MODES, options={"precision": ("fp32",)}),
                  site)
    assert [r.run_id for r in plain] == [r.run_id for r in fp32]
    assert all("precision" not in r.options for r in plain)
    bf16 = expand(SweepSpec(nodes=(2,), modes=TF_MODES, options={"precision": ("bf16",)}),
                  site)
    assert [r.options["precision"] for r in bf16] == ["bf16", "bf16"]


@pytest.mark.parametrize("name", TF_MODES)
def test_the_rank_parser_takes_precision(name):
    base = ["--run-id", "x", "--log-dir", "/tmp/x", "--model", "lenet5", "--batch-size", "2",
            "--iters", "1"]
    extra = ["--implementation", "ring"] if name == "tf-allreduce" else []
    parser = harness.mode_parser(modes.get(name))
    assert parser.parse_args(base + extra).precision == "fp32"
    assert parser.parse_args([*base, *extra, "--precision", "fp16"]).precision == "fp16"


@pytest.mark.parametrize("mode", ["cntk", "chainermn"])
def test_refused_in_one_line_naming_the_mode(tmp_path, mode):
    """Modes whose framework orch cannot run in mixed precision: one line naming the mode,
    exit 2, nothing written. (mpi-ssgd and horovod are torch: they take torch's precision.)"""
    proc = run_orch("sweep", "--mode", mode, "--nodes", "1", "-o", "precision=bf16",
                    "--out", tmp_path / "out")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"none of the modes {mode} has it" in lines[0], proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("options", "words"), [
    (["-o", "precision=tf32"], ["mode 'mxnet-kvstore': precision=tf32 is not valid",
                                "fp32, bf16, fp16"]),
    (["-o", "precision=fp16", "-o", "update=server"],
     ["mode 'mxnet-kvstore': precision=fp16 is not possible with update=server"]),
])
def test_mxnet_refuses_what_its_amp_cannot_do_in_one_line(tmp_path, options, words):
    proc = run_orch("sweep", "--mode", "mxnet-kvstore", "--nodes", "1", *options,
                    "--out", tmp_path / "out")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and all(w in lines[0] for w in words), proc.stderr
    assert not (tmp_path / "out").exists()


def test_torch_based_mpi_modes_take_torchs_precision():
    for name in ("mpi-ssgd", "horovod"):
        assert modes.get(name).library == "torch"
        assert "precision" in {o.name for o in modes.get(name).options}


# --- TensorFlow's own pieces, on real tensors -------------------------------------------------

PIECES = """
import json
import tensorflow as tf
from orchestrator.rankside.tf import models, precision as mixed

out = {}
for p in ("fp32", "bf16", "fp16"):
    facts = mixed.setup(tf, p)
    model = mixed.autocast(tf, models.build("resnet18", "cifar"), p)
    plain = models.build("resnet18", "cifar")
    x = tf.random.stateless_normal((2, 32, 32, 3), seed=(1, 2))
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss = tf.reduce_mean(logits)
    grads = tape.gradient(loss, model.trainable_variables)
    opt = mixed.optimizer(tf, p, tf.keras.optimizers.SGD(0.01))
    opt.build(model.trainable_variables)
    out[p] = {"facts": facts, "logits": logits.dtype.name,
              "computed_in": mixed.footer_facts(model, opt)["activation_dtype"],
              "grads": sorted({g.dtype.name for g in grads}),
              "same_variables": [v.shape for v in model.trainable_variables]
                                == [v.shape for v in plain.trainable_variables],
              "loss_scale": mixed.footer_facts(model, opt).get("loss_scale")}
    tf.keras.mixed_precision.set_global_policy("float32")

# A non-finite gradient skips the step: variables and momentum stay as they were.
v, m = tf.Variable([1.0, 2.0]), tf.Variable([0.5, 0.5])
grads, lr, mom = mixed.skip_if_not_finite(tf, [tf.constant([float("inf"), 1.0])],
                                          tf.constant(0.01), tf.constant(0.9))
m.assign(mom * m + grads[0]); v.assign_sub(lr * m)
out["skipped"] = [v.numpy().tolist(), m.numpy().tolist()]
grads, lr, mom = mixed.skip_if_not_finite(tf, [tf.constant([1.0, 1.0])],
                                          tf.constant(0.01), tf.constant(0.9))
out["applied"] = [float(lr), float(mom)]
out["unscaled"] = mixed.unscaled(tf, tf.constant(4.0), [tf.constant([8.0])])[0].numpy().tolist()

# The epoch runs' scale moves by Keras' rule: halved by a non-finite step (its count of good
# steps restarted), counted by a finite one, doubled by the dynamic_growth_steps-th.
scaler = mixed.loss_scaler(tf, tf.distribute.get_strategy(), "fp16")
state = lambda: [float(scaler.dynamic_scale.numpy()), int(scaler.step_counter.numpy())]
moves = [state()]
scaler.step_counter.assign(7)
mixed.rescaler(tf, scaler)([tf.constant([1.0]), tf.constant([float("nan")])])
moves.append(state())
mixed.rescale(tf, scaler, tf.constant(True))
moves.append(state())
scaler.step_counter.assign(scaler.dynamic_growth_steps - 1)
mixed.rescale(tf, scaler, tf.constant(True))
moves.append(state())
out["rescaled"] = moves
out["scalers"] = [mixed.loss_scaler(tf, tf.distribute.get_strategy(), p) is None
                  for p in ("fp32", "bf16")] + [mixed.rescaler(tf, None) is None]
print(json.dumps(out))
"""


@pytest.mark.ranks
def test_tensorflow_pieces_on_real_tensors():
    python = built_python("tensorflow")
    proc = subprocess.run([python, "-c", PIECES], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2",
                                         "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["fp32"]["facts"] == {"precision": "fp32", "tf32": False}
    assert out["bf16"]["facts"]["policy"] == "mixed_bfloat16"
    assert out["fp16"]["facts"]["policy"] == "mixed_float16"
    for p, dtype in (("fp32", "float32"), ("bf16", "bfloat16"), ("fp16", "float16")):
        got = out[p]
        assert got["computed_in"] == dtype  # the forward ran in the policy's compute dtype
        assert got["logits"] == "float32" and got["grads"] == ["float32"]  # loss, variables
        assert got["same_variables"]
    assert out["fp16"]["loss_scale"] == 32768.0  # Keras' LossScaleOptimizer, its first scale
    assert out["bf16"]["loss_scale"] is None and out["fp32"]["loss_scale"] is None
    assert out["skipped"] == [[1.0, 2.0], [0.5, 0.5]]
    assert out["applied"] == pytest.approx([0.01, 0.9])
    assert out["unscaled"] == [2.0]
    assert out["rescaled"] == [[32768.0, 0], [16384.0, 0], [16384.0, 1], [32768.0, 0]]
    assert out["scalers"] == [True, True, True]


class _MXNet:
    """What precision.unavailable asks of MXNet: whether the build has oneDNN."""

    def __init__(self, onednn: bool):
        features = type("Features", (), {"is_enabled": lambda _self, name: onednn})
        self.runtime = type("runtime", (), {"Features": features})


def test_mxnet_bf16_on_a_cpu_takes_onednn_and_avx512():
    """MXNet 1.9's oneDNN has no bfloat16 kernels below AVX-512: an AVX2-only node (an AMD
    EPYC 7003) failed every bf16 convolution with 'could not create a primitive descriptor
    iterator'. Such a node is refused in one line naming what it lacks; flags not known are
    not held against it, nor is a GPU run."""
    from orchestrator.rankside.mxnet import precision as mixed

    avx2 = {"sse4_2", "avx", "avx2", "fma"}
    assert mixed.unavailable(_MXNet(True), "bf16", False, avx2) == (
        "this node's CPU has no AVX-512 (avx512f, avx512bw, avx512vl, avx512dq missing), and "
        "the oneDNN operators MXNet's bfloat16 AMP runs need it; use fp32 here")
    assert mixed.unavailable(_MXNet(True), "bf16", False, avx2 | set(mixed.BF16_CPU_FLAGS)) \
        is None
    assert mixed.unavailable(_MXNet(True), "bf16", False, None) is None
    assert mixed.unavailable(_MXNet(True), "bf16", True, avx2) is None
    assert "no oneDNN" in mixed.unavailable(_MXNet(False), "bf16", False, None)
    assert mixed.unavailable(_MXNet(True), "fp32", False, avx2) is None
    flags = mixed.cpu_flags()  # this machine's, as a rank on it reads them
    assert flags is None or "fpu" in flags


@pytest.mark.ranks
def test_bf16_runs_on_the_cpu_in_tf_and_mxnet(tmp_path):
    """One short local sweep in bf16. TensorFlow runs it on any x86 CPU; MXNet where the CPU
    has AVX-512: on a machine without it, its run fails at once with the one line that says
    so (the rank's reason), and the TensorFlow runs complete all the same."""
    from orchestrator.rankside.mxnet import precision as mixed

    built_python("tensorflow")
    built_python("mxnet")
    out = tmp_path / "bf16"
    avx512 = set(mixed.BF16_CPU_FLAGS) <= (mixed.cpu_flags() or set(mixed.BF16_CPU_FLAGS))
    proc = run_orch("sweep", "--mode", ",".join(BF16_MODES), "--model", "lenet5", "--nodes",
                    "2", "-o", "precision=bf16", "--iters", ITERS, "--warmup", WARMUP, "--out",
                    out, timeout=900)
    assert proc.returncode == (0 if avx512 else 1), proc.stderr
    runs = pd.read_parquet(out / "results" / "runs.parquet").set_index("mode")
    assert sorted(runs.index) == sorted(BF16_MODES)
    completing = BF16_MODES if avx512 else TF_MODES
    for mode in completing:
        row = runs.loc[mode]
        assert row["state"] == "COMPLETED", row["reason"]
        assert row["precision"] == "bf16"
        assert row["activation_dtype"] == "bfloat16"  # what the ranks' forward computed in
    for mode in ("tf-allreduce", "mxnet-kvstore"):  # synchronous: equal parameters
        if mode in completing:
            assert bool(runs.loc[mode, "checksums_agree"])
    if not avx512:
        row = runs.loc["mxnet-kvstore"]
        assert row["state"] == "FAILED"
        assert "mode 'mxnet-kvstore': precision=bf16: this node's CPU has no AVX-512" in \
            row["reason"], row["reason"]


@pytest.mark.ranks
def test_fp16_epochs_scale_the_loss_in_tf_allreduce_and_tf_ps(tmp_path):
    """One epoch of the digits in fp16 (TensorFlow computes float16 on a CPU, through Eigen):
    both modes' epoch steps keep a dynamic loss scale, which their footers record, and learn
    something finite. Which scale a run ends with depends on its overflows: only that there is
    one, a power of two no larger than Keras' first, is asserted."""
    built_python("tensorflow")
    data, out = tmp_path / "digits", tmp_path / "fp16"
    run_orch("data", "make", "--out", data, "--from", "digits", "--format", "raw,tfrecord",
             check=True)
    run_orch("sweep", "--mode", ",".join(TF_MODES), "--model", "lenet5", "--nodes", "2",
             "--batch-size", "64", "--epochs", "1", "--data", data, "-o", "precision=fp16",
             "--warmup", WARMUP, "--out", out, check=True, timeout=600)
    runs = pd.read_parquet(out / "results" / "runs.parquet").set_index("mode")
    epochs = pd.read_parquet(out / "results" / "epochs.parquet")
    for mode in TF_MODES:
        row = runs.loc[mode]
        assert row["state"] == "COMPLETED", row["reason"]
        assert row["activation_dtype"] == "float16"
        assert math.isfinite(row["final_test_acc"]) and 0 <= row["final_test_acc"] <= 1
        assert epochs[epochs["mode"] == mode]["train_loss"].map(math.isfinite).all()
        footer = protocol.read_rank_log(rank0_log(out / row["run_id"]), raw_iters=True).footer
        scale = footer["loss_scale"]
        assert 0 < scale <= 2.0**15 and math.log2(scale).is_integer(), (mode, scale)


@pytest.mark.ranks
def test_mxnet_fp16_on_a_cpu_stops_in_one_line_naming_the_mode(tmp_path):
    built_python("mxnet")
    out = tmp_path / "fp16"
    run_orch("sweep", "--mode", "mxnet-kvstore", "--model", "lenet5", "--nodes", "1",
             "-o", "precision=fp16", "--iters", ITERS, "--warmup", WARMUP, "--out", out,
             timeout=600)
    [row] = json.loads(run_orch("results", out, "--format", "json", check=True).stdout)
    assert row["state"] == "FAILED"
    assert "mode 'mxnet-kvstore': precision=fp16: MXNet's float16 AMP needs a GPU" in \
        row["reason"]
