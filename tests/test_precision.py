"""Run dimensions of the PyTorch modes (precision, memory_format, compile, pin_memory), for real.

Real local-site sweeps of tiny LeNet-5 runs: every combination completes, the result set
records the values as run columns, and the ranks' footers show the dimension really took
effect (bf16 autocast computed the logits in bfloat16, nhwc batches were channels_last, fp16
stepped through a GradScaler, a compiled run timed its compilation apart). Plus the option
declarations, the run ids they keep, the rank-side arguments and the refusal lines. Nothing
about speed is asserted.
"""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest

from orchestrator import modes
from orchestrator.modes.torch_options import COLUMNS, RUN_DIMENSIONS
from orchestrator.plan.sweep import SweepSpec, expand
from orchestrator.protocol import RANKS_DIR, RankLog, rank_logs, read_rank_log
from orchestrator.rankside import harness
from orchestrator.results.dimensions import dimension_facts
from orchestrator.site import envs, load

from .conftest import IN_CI, run_orch

TORCH_MODES = ("torch-ddp", "torch-fsdp", "mpi-ssgd", "horovod")
ITERS, WARMUP = 4, 1
DEFAULTS = {"precision": "fp32", "memory_format": "nchw", "compile": "no", "pin_memory": "yes",
            "cudnn_benchmark": "no"}


# --- declarations (fast) ---------------------------------------------------------------------


@pytest.mark.parametrize("name", TORCH_MODES)
def test_every_torch_mode_takes_the_one_declaration(name):
    options = modes.get(name).options
    for dim in RUN_DIMENSIONS:  # the same objects: declared once, in modes/torch_options.py
        assert any(o is dim for o in options), f"{name} lacks {dim.name}"
    assert {o.name: o.default for o in RUN_DIMENSIONS} == DEFAULTS
    assert tuple(DEFAULTS) == COLUMNS


# What applying a run dimension takes in PyTorch: a rank that used any of these would be one
# more file to edit for the next dimension.
DIMENSION_CALLS = {"autocast", "scaler", "GradScaler", "unscale_", "channels_last",
                   "memory_format", "pin_memory", "allow_tf32", "compile", "cudnn"}


@pytest.mark.parametrize("name", TORCH_MODES)
def test_a_torch_rank_applies_no_dimension_itself(name):
    """Every run dimension is applied in rankside/torch/common.py (Dims and the breakdown's
    Steps): a new dimension is declared in modes/torch_options.py and applied there, and no
    torch rank.py changes."""
    path = Path(modes.__file__).parent / modes.get(name).package / "rank.py"
    used = {n.attr for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Attribute)}
    used |= {n.id for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Name)}
    assert not used & DIMENSION_CALLS, f"{path}: {sorted(used & DIMENSION_CALLS)}"


def test_no_other_mode_has_them():
    for mode in modes.registry().values():
        if mode.name not in TORCH_MODES:
            # TensorFlow's and MXNet's modes declare a precision of their own.
            own = {"precision"} if mode.library in ("tensorflow", "mxnet") else set()
            assert not {o.name for o in mode.options} & set(COLUMNS) - own, mode.name


def test_defaults_leave_run_ids_and_options_as_they_were():
    site = load("local")[0]
    plain = expand(SweepSpec(nodes=(1,), modes=TORCH_MODES[:2]), site)
    explicit = expand(SweepSpec(nodes=(1,), modes=TORCH_MODES[:2],
                                options={k: (v,) for k, v in DEFAULTS.items()}), site)
    assert [r.run_id for r in plain] == [r.run_id for r in explicit]
    assert not set(plain[0].options) & set(COLUMNS)
    bf16 = expand(SweepSpec(nodes=(1,), options={"precision": ("bf16",)}), site)[0]
    assert bf16.options["precision"] == "bf16" and bf16.run_id != plain[0].run_id


def test_the_rank_parser_takes_the_declared_defaults():
    base = ["--run-id", "x", "--log-dir", "/tmp/x", "--model", "lenet5", "--batch-size", "2",
            "--iters", "1", "--backend", "gloo"]
    args = harness.mode_parser(modes.get("torch-ddp")).parse_args(base)
    assert {k: getattr(args, k) for k in DEFAULTS} == DEFAULTS
    args = harness.mode_parser(modes.get("horovod")).parse_args(
        [*base[:-2], "--precision", "bf16", "--memory-format", "nhwc", "--compile",
         "max-autotune", "--pin-memory", "no"])
    assert (args.precision, args.memory_format, args.compile, args.pin_memory) == (
        "bf16", "nhwc", "max-autotune", "no")


@pytest.mark.parametrize(("argv", "words"), [
    (["--mode", "cntk", "-o", "precision=bf16"],
     ["--option precision: none of the modes cntk has it", "torch-ddp"]),
    (["--mode", "torch-ddp", "-o", "precision=int8"],
     ["mode 'torch-ddp': precision=int8 is not valid", "fp32, tf32, bf16, fp16"]),
    (["--mode", "torch-fsdp", "-o", "compile=yes"],
     ["compile=yes is not valid", "no, default, max-autotune"]),
])
def test_a_value_a_mode_cannot_run_is_refused_in_one_line(tmp_path, argv, words):
    proc = run_orch("sweep", *argv, "--nodes", "1", "--out", tmp_path / "out")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for word in words:
        assert word in lines[0]
    assert not (tmp_path / "out").exists()


def test_dimension_columns_of_a_run():
    site = load("local")[0]
    ddp = expand(SweepSpec(nodes=(1,), options={"precision": ("bf16",)}), site)[0]
    footers = [{"type": "footer", "t_compile": 2.0, "activation_dtype": "bfloat16"},
               {"type": "footer", "t_compile": 3.0, "activation_dtype": "bfloat16"}]
    logs = [RankLog(rank=k, footer=f) for k, f in enumerate(footers)]
    assert dimension_facts(ddp, logs) == {
        "precision": "bf16", "memory_format": "nchw", "compile": "no", "pin_memory": "yes",
        "cudnn_benchmark": "no", "t_compile": 3.0, "activation_dtype": "bfloat16"}
    cntk = expand(SweepSpec(nodes=(1,), modes=("cntk",)), site)[0]
    assert dimension_facts(cntk, []) == dict.fromkeys((*COLUMNS, "t_compile",
                                                       "activation_dtype"))


# --- the rank side on this CPU (real tensors, no process group) -------------------------------


def _dims(**given):
    import torch

    from orchestrator.rankside.torch.common import Dims

    args = harness.mode_parser(modes.get("horovod")).parse_args(
        ["--run-id", "x", "--log-dir", "/tmp/x", "--model", "lenet5", "--batch-size", "2",
         "--iters", "1", *[a for k, v in given.items() for a in (f"--{k}", v)]])
    footer: dict = {}
    return Dims(args, torch.device("cpu"), footer), footer


@pytest.fixture
def tf32_flags():
    """Dims sets PyTorch's process-wide TF32 flags: put them back for the tests after."""
    import torch

    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.parametrize(("precision", "dtype", "scaled"), [
    ("fp32", "float32", False), ("tf32", "float32", False), ("bf16", "bfloat16", False),
    ("fp16", "float16", True)])
def test_a_step_computes_in_the_precision_asked(tf32_flags, precision, dtype, scaled):
    import torch

    from orchestrator.rankside.torch import models as models_torch
    from orchestrator.rankside.torch.common import plain_step

    dims, footer = _dims(precision=precision, **{"memory-format": "nhwc"})
    torch.manual_seed(0)
    model = dims.prepare(models_torch.build("lenet5", "cifar"))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    step = plain_step(model, optimizer, torch.nn.CrossEntropyLoss(), dims)
    x, y = dims.to_device(torch.randn(2, 3, 32, 32), torch.tensor([1, 2]))
    assert x.is_contiguous(memory_format=torch.channels_last)
    before = [p.detach().clone() for p in model.parameters()]
    loss, logits = step(x, y)
    dims.saw(x, logits)
    assert footer["activation_dtype"] == dtype and footer["input_channels_last"] is True
    assert footer["grad_scaler"] is scaled and dims.scaler.is_enabled() is scaled
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    assert footer["pin_memory_note"].startswith("no-op on a CPU")
    assert ("precision_note" in footer) is (precision == "tf32")
    if precision == "tf32":
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
    else:  # fp32 is fp32 on GPUs too: cuDNN's TF32 default is turned off
        assert not torch.backends.cuda.matmul.allow_tf32
        assert not torch.backends.cudnn.allow_tf32


# --- real sweeps on the local site -------------------------------------------------------------


def _results(out):
    return json.loads(run_orch("results", out, "--format", "json", check=True).stdout)


def _footers(out, run_id):
    logs = [read_rank_log(path) for _, path in rank_logs(out / run_id / RANKS_DIR)]
    assert logs and all(log.footer for log in logs), run_id
    return [log.footer for log in logs]


def _sweep(out, *extra):
    return run_orch("sweep", "--model", "lenet5", "--iters", ITERS, "--warmup", WARMUP,
                    "--out", out, *extra, check=True)


def _check_run(out, r, expect):
    """One run completed with the values asked, recorded as columns and in every footer."""
    assert r["state"] == "COMPLETED", r
    assert r["iterations_measured"] == ITERS and r["checksums_agree"] is True
    for name, value in {**DEFAULTS, **expect}.items():
        assert r[name] == value, (name, r)
    for f in _footers(out, r["run_id"]):
        assert f["status"] == "ok", f.get("error")
        for name, value in {**DEFAULTS, **expect}.items():
            assert f[name] == value
    return _footers(out, r["run_id"])


@pytest.mark.ranks
def test_ddp_and_fsdp_in_bf16_and_channels_last(tmp_path):
    out = tmp_path / "dims"
    _sweep(out, "--mode", "torch-ddp,torch-fsdp", "--nodes", "2",
           "-o", "precision=fp32,bf16", "-o", "memory_format=nchw,nhwc")
    recs = _results(out)
    seen = sorted((r["mode"], r["precision"], r["memory_format"]) for r in recs)
    assert seen == sorted((m, p, f) for m in ("torch-ddp", "torch-fsdp")
                          for p in ("fp32", "bf16") for f in ("nchw", "nhwc"))
    for r in recs:
        footers = _check_run(out, r, {"precision": r["precision"],
                                      "memory_format": r["memory_format"]})
        bf16 = r["precision"] == "bf16"
        assert r["activation_dtype"] == ("bfloat16" if bf16 else "float32")
        assert r["t_compile"] is None
        for f in footers:
            assert f["autocast_dtype"] == ("bfloat16" if bf16 else None)
            assert f["activation_dtype"] == ("bfloat16" if bf16 else "float32")
            assert f["input_channels_last"] is (r["memory_format"] == "nhwc")
            assert f["grad_scaler"] is False
            # FSDP2 shards only contiguous parameters: its weights stay NCHW, and it says so.
            assert ("memory_format_note" in f) is (
                r["mode"] == "torch-fsdp" and r["memory_format"] == "nhwc")
    defaults = [r for r in recs if r["precision"] == "fp32" and r["memory_format"] == "nchw"]
    assert all(not set(r["options"]) & set(COLUMNS) for r in defaults)


@pytest.mark.ranks
def test_fp16_with_a_grad_scaler_and_tf32_on_the_cpu(tmp_path):
    out = tmp_path / "fp16"
    _sweep(out, "--mode", "torch-ddp", "--nodes", "2", "-o", "precision=fp16,tf32",
           "-o", "pin_memory=no", "-o", "cudnn_benchmark=yes")
    recs = _results(out)
    assert sorted(r["precision"] for r in recs) == ["fp16", "tf32"]
    for r in recs:
        fp16 = r["precision"] == "fp16"
        footers = _check_run(out, r, {"precision": r["precision"], "pin_memory": "no",
                                      "cudnn_benchmark": "yes"})
        assert all("cudnn_benchmark_note" in f for f in footers)  # no cuDNN on a CPU
        assert r["activation_dtype"] == ("float16" if fp16 else "float32")
        for f in footers:
            assert f["grad_scaler"] is fp16
            assert "pin_memory_note" not in f  # pin_memory=no: nothing to note
            assert ("precision_note" in f) is not fp16  # tf32 is fp32 on a CPU


@pytest.fixture
def torch_mpi() -> None:
    """The torch-mpi environment (mpi-ssgd, horovod) is built: skip if not, fail under CI."""
    env = load("local")[0].environment("torch-mpi")
    if not envs.is_built(env):
        problem = f"the torch-mpi environment is not built ({envs.expand(env.venv)})"
        if IN_CI:
            pytest.fail(f"CI=true but {problem}")
        pytest.skip(problem)


@pytest.mark.ranks
def test_mpi_ssgd_and_horovod_in_fp16_and_channels_last(torch_mpi, tmp_path):
    out = tmp_path / "mpi"
    _sweep(out, "--mode", "mpi-ssgd,horovod", "--launcher", "mpirun", "--nodes", "1",
           "--tasks-per-node", "2", "-o", "precision=fp16", "-o", "memory_format=nhwc")
    recs = _results(out)
    assert sorted(r["mode"] for r in recs) == ["horovod", "mpi-ssgd"]
    for r in recs:
        footers = _check_run(out, r, {"precision": "fp16", "memory_format": "nhwc"})
        assert r["activation_dtype"] == "float16"
        for f in footers:
            assert f["grad_scaler"] is True and f["input_channels_last"] is True
            # Horovod sends only contiguous tensors: its weights stay NCHW, and it says so.
            assert ("memory_format_note" in f) is (r["mode"] == "horovod")


def _compiler() -> str | None:
    """The C++ compiler TorchInductor builds its CPU kernels with, if this machine has one."""
    return shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")


@pytest.mark.ranks
@pytest.mark.skipif(_compiler() is None,
                    reason="torch.compile (TorchInductor) needs a C++ compiler for CPU kernels "
                    "and none of g++, c++, clang++ is on PATH")
def test_a_compiled_run_times_its_compilation_apart(tmp_path):
    out = tmp_path / "compile"
    _sweep(out, "--mode", "torch-ddp", "--nodes", "1", "-o", "compile=default",
           "-o", "precision=bf16")
    (r,) = _results(out)
    footers = _check_run(out, r, {"compile": "default", "precision": "bf16"})
    assert r["activation_dtype"] == "bfloat16"
    # Compiled in a step of its own before the windows: a duration recorded, none measured.
    assert r["t_compile"] is not None and r["t_compile"] > 0
    assert all(f["t_compile"] > 0 and "t_compile_breakdown" in f for f in footers)


# --- recorded on a GPU ---------------------------------------------------------------------------

# scripts/gpu-check's dimension steps on one NVIDIA H200 (torch 2.11.0+cu130, NCCL, 1 rank;
# machine.txt, table.txt): torch-ddp ResNet-50 and ResNet-18 over fp32,bf16 x nchw,nhwc,
# torch-fsdp bf16 + nhwc, and ResNet-50's four compiled (the step's budget ended before
# ResNet-18's). Run folders as the ranks wrote them (submitit's pickles and heartbeats left out).
RECORDED = Path(__file__).parent / "fixtures" / "gpu-h200-dims"


def test_the_gpu_runs_recorded_what_ran(tmp_path):
    sweep = tmp_path / "gpu-check"
    shutil.copytree(RECORDED, sweep)
    recs = _results(sweep)
    assert len(recs) == 14 and all(r["state"] == "COMPLETED" for r in recs)
    seen = {(r["mode"], r["model"], r["precision"], r["memory_format"], r["compile"])
            for r in recs}
    ddp = {("torch-ddp", m, p, f, c) for m in ("resnet50", "resnet18") for p in ("fp32", "bf16")
           for f in ("nchw", "nhwc") for c in ("no", "default")
           if c == "no" or m == "resnet50"}
    fsdp = {("torch-fsdp", m, "bf16", "nhwc", "no") for m in ("resnet50", "resnet18")}
    assert seen == ddp | fsdp
    for r in recs:
        footers = _footers(sweep, r["run_id"])
        bf16 = r["precision"] == "bf16"
        assert r["activation_dtype"] == ("bfloat16" if bf16 else "float32")
        assert (r["t_compile"] is not None) is (r["compile"] == "default")
        for f in footers:
            assert f["status"] == "ok" and f["pin_memory"] == "yes"
            assert "pin_memory_note" not in f and "precision_note" not in f  # a GPU: both acted
            assert f["input_channels_last"] is (r["memory_format"] == "nhwc")
            assert f["peak_device_bytes"] > 0
            if r["compile"] == "default":  # the breakdown's new DDP wrapper compiled too
                assert f["t_compile_breakdown"] is not None
